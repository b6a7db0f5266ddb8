"""The wheel the konduktor image installs (Containerfile) carries everything its commands read at run time."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from conftest import EXAMPLE

ROOT = Path(__file__).resolve().parents[2]
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def test_the_images_wheel_runs_the_controller_and_the_installer(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("konduktor-*.whl")
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    # -S: no site hooks, so the checkout's editable install cannot stand in for the wheel; dependencies still come
    # from this environment's site-packages, named explicitly.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(unpacked), sysconfig.get_paths()["purelib"]])}

    def python(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-S", *args],
            input=stdin,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    where = python("-c", "import konduktor; print(konduktor.__file__)")
    assert where.stdout.startswith(str(unpacked)), where.stderr
    classified = python("-m", "konduktor.controller.main", "classify", stdin=XID_79 + "\n")
    assert classified.returncode == 0, classified.stderr
    assert '"code": 79' in classified.stdout and '"quarantine": true' in classified.stdout
    installer = "import sys; from konduktor.cli.main import main; sys.exit(main(sys.argv[1:]))"
    validated = python("-c", installer, "validate", str(EXAMPLE))
    assert validated.returncode == 0, validated.stderr
    listed = python("-c", installer, "tools", "list", "-o", "json")  # the pinned versions ship as package data
    assert listed.returncode == 0 and '"kubernetes"' in listed.stdout, listed.stderr

"""The wheel is the product: installed without extras into a fresh virtualenv outside the source tree, both
commands work and find the charts, examples and pinned tool versions they read.

Offline on any machine: the wheel's dependencies come from this environment, at the versions of
requirements/runtime.lock and nothing else (no test or dev package can stand in for a missing one), and
`pip check` in the new environment proves the wheel's own requirements are met by exactly that set.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Sim
from packaging.markers import Marker

from konduktor.tools.catalog import load_tools

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_LOCK = ROOT / "requirements" / "runtime.lock"
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
# The first test also builds the wheel and its virtualenv (the module's fixture): up to 840 s of bounded steps.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@dataclass(frozen=True)
class Installed:
    venv: Path
    site: Path
    workdir: Path  # outside the source tree

    def run(self, command: str, *args: str, stdin: str = "", timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return subprocess.run(
            [str(self.venv / "bin" / command), *args],
            input=stdin,
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


# The new virtualenv has its own packaging tools; the lock's copies of them are build requirements.
OWN_TOOLS = {"pip", "setuptools", "wheel"}


def runtime_distributions() -> list[str]:
    """The names in requirements/runtime.lock that apply on this machine, less the packaging tools."""
    names = []
    for line in RUNTIME_LOCK.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==\S+(?:\s*;\s*([^\\#]+))?", line)
        applies = match is not None and (match.group(2) is None or Marker(match.group(2).strip()).evaluate())
        if match is not None and applies and match.group(1) not in OWN_TOOLS:
            names.append(match.group(1))
    return names


def link_distribution(name: str, site: Path) -> None:
    """Makes an installed distribution of this environment importable in the new one, by its top-level files."""
    distribution = importlib.metadata.distribution(name)
    origin = Path(str(distribution.locate_file("")))
    tops = {Path(str(f)).parts[0] for f in distribution.files or [] if not str(f).startswith("..")}
    for top in tops:
        if (origin / top).exists() and not (site / top).exists():
            (site / top).symlink_to(origin / top)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    scratch = tmp_path_factory.mktemp("wheel")
    # Built from a copy of the working tree: setuptools' build/ folder keeps files from earlier builds.
    tree = scratch / "tree"
    leftovers = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache")
    shutil.copytree(ROOT, tree, symlinks=True, ignore=leftovers)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(scratch), tree],
        check=True,
        timeout=300,
    )
    (wheel,) = scratch.glob("konduktor-*.whl")
    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    missing = []
    for name in runtime_distributions():
        try:
            link_distribution(name, site)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    assert not missing, f"not installed here, so the wheel cannot be tried offline: {missing}"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--no-index", "--no-deps", str(wheel)], check=True, timeout=300)
    checked = subprocess.run([*pip, "check"], capture_output=True, text=True, timeout=120, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr  # the wheel's requirements: all met
    yield Installed(venv, site, scratch)


def test_the_wheel_carries_the_product_folders(installed: Installed) -> None:
    product = installed.site / "konduktor" / "product"
    for folder in ("charts", "examples", "policies", "dashboards", "whatif-engine"):
        source = {p.relative_to(ROOT / folder) for p in (ROOT / folder).rglob("*") if p.is_file()}
        source = {p for p in source if not (folder == "charts" and len(p.parts) > 2 and p.parts[1] == "charts")}
        shipped = {
            p.relative_to(product / folder)
            for p in (product / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts  # pip compiles the chart's helper script
        }
        assert shipped == source, folder
        assert not (product / folder).is_symlink(), "the wheel holds files, not links into a checkout"
    assert (installed.site / "konduktor" / "tools" / "modules" / "helm" / "go.sum").is_file()
    # The what-if engine built from the wheel is the checkout's: its version is a hash of the same source.
    version = "from konduktor.tools.catalog import load_tools; print(load_tools()['whatif-engine'].version)"
    shipped_version = installed.run("python", "-c", version)
    assert shipped_version.stdout.strip() == load_tools()["whatif-engine"].version, shipped_version.stderr


def test_both_commands_run_from_a_plain_install(installed: Installed) -> None:
    where = installed.run("python", "-c", "import konduktor.paths as p; print(p.product_dir('examples'))")
    assert where.returncode == 0, where.stderr
    examples = Path(where.stdout.strip())
    assert examples.is_relative_to(installed.site), examples  # the installed package, not the checkout
    example = examples / "config.yaml"

    validated = installed.run("konduktor-install", "validate", str(example))
    assert validated.returncode == 0, validated.stderr

    rendered = installed.run("konduktor-install", "render", str(example), "-o", "json", "--output-dir", "rendered")
    assert rendered.returncode == 0, rendered.stderr
    kinds = {json.loads(p.read_text())["kind"] for p in (installed.workdir / "rendered").glob("*.json")}
    assert {"ClusterQueue", "LocalQueue", "ResourceFlavor", "Namespace"} <= kinds

    classified = installed.run("konduktor-health", "classify", stdin=XID_79 + "\n")
    assert classified.returncode == 0, classified.stderr
    assert '"code": 79' in classified.stdout and '"quarantine": true' in classified.stdout
    health = installed.run("konduktor-health", "run", "--help")  # the controller's own imports (prometheus)
    assert health.returncode == 0, health.stderr

    listed = installed.run("konduktor-install", "tools", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["binary"]: row for row in json.loads(listed.stdout)}
    assert rows["kube-apiserver"]["version"] == "v1.36.3"


@pytest.mark.sim
def test_up_dry_run_from_the_wheel_on_the_simulated_cluster(installed: Installed, sim: Sim) -> None:
    example = installed.site / "konduktor" / "product" / "examples" / "config.yaml"
    planned = installed.run("konduktor-install", "up", str(example), "--sim", sim.cluster.name, "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert "konduktor-core" in planned.stdout + planned.stderr  # the chart it found in the installed package
    for line in planned.stderr.splitlines():
        assert not re.search(r"\b(error|failed|warning|traceback)\b", line, re.IGNORECASE), line

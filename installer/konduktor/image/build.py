"""Builds the konduktor image from a source checkout, pulling nothing from a container registry.

1. The root file system: Debian bookworm's Essential packages and `python3`, by mmdebstrap from a Debian mirror
   (mmdebstrap's default, with bookworm's updates and security, unless mirrors are given), /usr merged by
   directory links, documentation and translations left out. Downloaded packages are kept in the cache, so a
   second build downloads nothing.
2. The project's wheel (`pip wheel --no-deps`) and exactly the hash-locked runtime requirements
   (requirements/runtime.lock, downloaded with `--require-hashes` through this machine's pip and its cache), then
   installed by the image's own Python into a virtualenv at /opt/konduktor, offline: `pip install --no-index
   --require-hashes --no-deps`. No .pyc files (they would carry build-time state; the root is read-only).
3. The OCI image archive (konduktor.image.oci): one layer, user 65532, entrypoint `konduktor-health`.

Reproducible: SOURCE_DATE_EPOCH is the commit time of the checkout's HEAD (unless set), every file time is
clamped to it, entries are sorted and owners numeric. Two builds of one commit from the same Debian packages give
the same manifest digest.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from konduktor.errors import KonduktorError, UsageError
from konduktor.image.oci import Archive, ImageConfig, write_archive
from konduktor.paths import cache_dir

SUITE = "bookworm"  # Python 3.11, as requirements/runtime.lock's --python-version
# The wheels for the image's Python whatever the building machine's: CPython 3.11 on bookworm's glibc 2.36, so
# any manylinux tag up to 2.36, newest first (pip expands only the legacy manylinux2014 name by itself).
_MANYLINUX = [f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)] + ["manylinux2014_x86_64"]
WHEEL_PLATFORM = (
    *(option for tag in _MANYLINUX for option in ("--platform", tag)),
    *("--python-version", "3.11", "--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none"),
)
PACKAGES = ("python3",)
MERGED_USR_HOOKS = "/usr/share/mmdebstrap/hooks/merged-usr"
VENV = "/opt/konduktor"
USER = 65532
# dpkg leaves these out: documentation (but each package's copyright), manual pages, translations.
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
ENTRYPOINT = ("konduktor-health",)
# What charts/konduktor-core's health controller runs (it adds --port and --lease-namespace).
COMMAND = ("run", "--config=/etc/konduktor/health.yaml")
ENV = (
    f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    # User 65532 has no home of its own; /tmp is the pod's writable emptyDir.
    "HOME=/tmp",
    "PYTHONDONTWRITEBYTECODE=1",
    "PYTHONUNBUFFERED=1",
)
SOURCE_URL = "https://github.com/konduktor/konduktor"


@dataclass(frozen=True)
class Built:
    archive: Archive
    digest_file: Path
    tag: str
    epoch: int
    seconds: dict[str, float] = field(default_factory=dict)  # step -> seconds

    @property
    def digest(self) -> str:
        return self.archive.manifest.digest


Report = Callable[[str], None]


def source_root() -> Path:
    """The source checkout this package runs from (the image is built from a checkout, not from a wheel)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file() or not (root / "requirements" / "runtime.lock").is_file():
        raise UsageError(
            "building the image needs a source checkout of Konduktor (pyproject.toml, requirements/runtime.lock)",
            hint="run it from a checkout: scripts/image",
        )
    return root


def project_version(root: Path) -> str:
    import tomllib

    version: str = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    return version


def _run(command: Sequence[str], what: str) -> str:
    done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
        raise KonduktorError(f"{what} failed (exit {done.returncode})", detail=tail)
    return done.stdout


def source_date_epoch(root: Path) -> tuple[int, str]:
    """(SOURCE_DATE_EPOCH, revision): the environment's epoch if set, else HEAD's commit time."""
    revision = ""
    if shutil.which("git") and (root / ".git").exists():
        revision = _run(["git", "-C", str(root), "rev-parse", "HEAD"], "git rev-parse").strip()
    if explicit := os.environ.get("SOURCE_DATE_EPOCH"):
        if not explicit.isdigit():
            raise UsageError(f"SOURCE_DATE_EPOCH={explicit!r} is not a number of seconds")
        return int(explicit), revision
    if not revision:
        raise UsageError("not a git checkout: set SOURCE_DATE_EPOCH (seconds since 1970) for the image's file times")
    return int(_run(["git", "-C", str(root), "log", "-1", "--format=%ct"], "git log").strip()), revision


def keep_in_image(path: PurePosixPath) -> bool:
    """Which root file system entries the layer keeps: no device nodes (the runtime mounts /dev), no byte code,
    nothing of apt's (the image has no apt): its downloaded packages and its download folder, which belongs to
    its user _apt."""
    parts = path.parts
    if parts[0] == "dev" and len(parts) > 1:
        return False
    if "__pycache__" in parts or path.suffix == ".pyc":
        return False
    if parts[:4] == ("var", "lib", "apt", "lists") and len(parts) > 4:
        return False
    return not (parts[:4] == ("var", "cache", "apt", "archives") and len(parts) > 4)


def _copy_tree(root: Path, target: Path) -> None:
    # setuptools' build/ folder keeps files from earlier builds: the wheel is built from a clean copy.
    leftovers = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache")
    shutil.copytree(root, target, symlinks=True, ignore=leftovers)


def wheels(root: Path, work: Path, report: Report) -> Path:
    """The project's wheel and the lock's wheels in `work`/wheels (hashes checked on download)."""
    target = work / "wheels"
    tree = work / "tree"
    _copy_tree(root, tree)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    report("building the konduktor wheel")
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(target), str(tree)], "pip wheel")
    report("downloading the locked wheels (requirements/runtime.lock, --require-hashes)")
    lock = root / "requirements" / "runtime.lock"
    _run(
        [*pip, "download", "--require-hashes", "--no-deps", "--only-binary=:all:", *WHEEL_PLATFORM,
         "-r", str(lock), "-d", str(target)],
        "pip download of requirements/runtime.lock",
    )  # fmt: skip
    shutil.copy(lock, target / "runtime.lock")
    # pip itself, to install from inside the new root with the image's Python (it is not left in the image).
    import pip as host_pip

    pip_package = Path(host_pip.__file__).parent
    shutil.copytree(pip_package, work / "pip" / "pip", ignore=shutil.ignore_patterns("__pycache__"))
    return target


def customize_hooks(version: str) -> list[str]:
    """mmdebstrap --customize-hook commands ("$1" is the new root): the virtualenv, the wheels, the user."""
    chroot = 'chroot "$1"'
    pip = f"env PYTHONPATH=/build/pip {chroot} {VENV}/bin/python -m pip --disable-pip-version-check -q install"
    offline = "--no-index --no-deps --no-compile --no-cache-dir"
    passwd = f"nonroot:x:{USER}:{USER}:nonroot:/tmp:/usr/sbin/nologin"
    return [
        f"{chroot} python3 -m venv --without-pip {VENV}",
        f"{pip} {offline} --require-hashes -r /build/wheels/runtime.lock --find-links /build/wheels",
        f"{pip} {offline} /build/wheels/konduktor-{version}-py3-none-any.whl",
        'rm -rf "$1/build"',
        # No byte code: Debian's postinst scripts compiled the standard library; the layer leaves it out.
        f'find "$1/usr/lib" "$1{VENV}" -name __pycache__ -prune -exec rm -rf {{}} +',
        f'echo {shlex.quote(passwd)} >> "$1/etc/passwd"',
        f"echo 'nonroot:x:{USER}:' >> \"$1/etc/group\"",
        # The chart mounts the controller's settings here; the runtime mounts these three.
        'mkdir -p "$1/etc/konduktor"',
        ': > "$1/etc/resolv.conf"',
        ': > "$1/etc/hostname"',
    ]


def rootfs(work: Path, version: str, mirrors: Sequence[str], report: Report) -> Path:
    """The root file system tarball: mmdebstrap with the wheels copied in and installed."""
    if shutil.which("mmdebstrap") is None:
        raise KonduktorError(
            "mmdebstrap is not installed", hint="scripts/image installs it (Debian: apt-get install mmdebstrap)"
        )
    debs = cache_dir() / "image" / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    target = work / "rootfs.tar"
    command = [
        "mmdebstrap", "--variant=essential", f"--include={','.join(PACKAGES)}", "--quiet",
        # Merged /usr by directory links, as debootstrap makes it: without it bookworm's usrmerge package and
        # the whole of perl it needs would be installed (mmdebstrap's own hook, usr-is-merged installed).
        f"--hook-dir={MERGED_USR_HOOKS}",
        *(f"--dpkgopt={option}" for option in DPKG_EXCLUDES),
        # Packages come from and go back to the cache (a warm build downloads nothing).
        "--skip=essential/unlink",
        '--setup-hook=mkdir -p "$1/var/cache/apt/archives"',
        f"--setup-hook=sync-in {shlex.quote(str(debs))} /var/cache/apt/archives",
        f"--customize-hook=sync-out /var/cache/apt/archives {shlex.quote(str(debs))}",
        '--customize-hook=mkdir -p "$1/build"',
        f"--customize-hook=copy-in {shlex.quote(str(work / 'wheels'))} {shlex.quote(str(work / 'pip'))} /build",
        *(f"--customize-hook={hook}" for hook in customize_hooks(version)),
        SUITE, str(target), *mirrors,
    ]  # fmt: skip
    report(f"root file system: Debian {SUITE} Essential + {', '.join(PACKAGES)} (mmdebstrap)")
    _run(command, "mmdebstrap")
    return target


def build(output: Path, *, mirrors: Sequence[str] = (), report: Report = lambda _: None) -> Built:
    """The image archive `konduktor-<version>.oci.tar` in `output`, and its digest in `konduktor-<version>.digest`."""
    root = source_root()
    version = project_version(root)
    epoch, revision = source_date_epoch(root)
    output.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    saved = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(epoch)
    try:
        with tempfile.TemporaryDirectory(prefix="konduktor-image-") as scratch:
            work = Path(scratch)
            started = time.monotonic()
            wheels(root, work, report)
            seconds["wheels"] = time.monotonic() - started
            started = time.monotonic()
            tarball = rootfs(work, version, mirrors, report)
            seconds["rootfs"] = time.monotonic() - started
            started = time.monotonic()
            report("writing the OCI image archive")
            labels = {
                "org.opencontainers.image.title": "konduktor",
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.source": SOURCE_URL,
                "org.opencontainers.image.licenses": "Apache-2.0",
            }
            if revision:
                labels["org.opencontainers.image.revision"] = revision
            config = ImageConfig(f"{USER}:{USER}", ENTRYPOINT, COMMAND, ENV, labels=labels)
            archive = write_archive(
                tarball,
                output / f"konduktor-{version}.oci.tar",
                config=config,
                epoch=epoch,
                keep=keep_in_image,
                tag=version,
                history=f"konduktor image build: Debian {SUITE} ({', '.join(PACKAGES)}) + requirements/runtime.lock",
            )
            seconds["archive"] = time.monotonic() - started
    finally:
        if saved is None:
            os.environ.pop("SOURCE_DATE_EPOCH", None)
        else:
            os.environ["SOURCE_DATE_EPOCH"] = saved
    digest_file = output / f"konduktor-{version}.digest"
    digest_file.write_text(archive.manifest.digest + "\n")
    return Built(archive, digest_file, version, epoch, seconds)

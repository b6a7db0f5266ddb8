"""Pinned tools built from their Go modules into a versioned cache.

Each tool in versions.toml is built in a small wrapper module of its own (a module with replace
directives, such as k8s.io/kubernetes, cannot be `go install`ed), so every binary is the upstream
code at the pinned tag. The wrapper's go.mod and go.sum are committed (modules/<tool>/, made by
`konduktor-install tools lock`) and the build uses them read-only, with the checksum database on: a
module whose content differs from the reviewed go.sum fails the build. A finished build leaves a
manifest; a warm run only reads it.
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from konduktor.errors import KonduktorError
from konduktor.paths import cache_dir, product_dir
from konduktor.tools.catalog import Tool
from konduktor.tools.gomod import (
    LOCKED_MODULES,
    MIN_GO,
    locked_module,
    staging_replaces,
    wrapper_directives,
    wrapper_gomod,
)

MANIFEST = "manifest.json"


# Settings that would let the go command skip the checksum database for some modules (`go env -w` can set
# them too; an empty value in the environment overrides that).
CHECKSUM_EXEMPTIONS = ("GONOSUMDB", "GOPRIVATE", "GOINSECURE")
IMPORT_PATH = re.compile(r"[A-Za-z0-9_.~+/-]+")  # a package line of `go build -v`, not a message or an error


@dataclass(frozen=True)
class Installed:
    tool: Tool
    paths: dict[str, Path]
    built_at: str
    seconds: float
    fresh: bool = False  # built by this call, not found in the cache


def installed(tool: Tool, root: Path | None = None) -> Installed | None:
    """The finished build of this exact tool version, if there is one and its binaries still exist."""
    directory = tool.install_dir(root or cache_dir())
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    paths = {name: Path(p) for name, p in manifest.get("binaries", {}).items()}
    if manifest.get("module") != tool.module or sorted(paths) != sorted(tool.binaries()):
        return None
    if manifest.get("flags") != tool.build_flags():  # e.g. new build tags: the binary must be rebuilt
        return None
    if not all(p.is_file() for p in paths.values()):
        return None
    return Installed(tool, paths, manifest.get("built_at", ""), float(manifest.get("seconds", 0)))


def last_build_seconds(tool: Tool, root: Path) -> float | None:
    """How long the newest finished build of this tool (any version) took: what the next one can expect."""
    builds = []
    for path in (root / "tools").glob(f"{tool.name}-*/{MANIFEST}"):
        try:
            manifest = json.loads(path.read_text())
            builds.append((str(manifest["built_at"]), float(manifest["seconds"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return max(builds)[1] if builds else None


def duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


Progress = Callable[[str], None]


def go_environment(base: Mapping[str, str], toolchain: str | None = None) -> dict[str, str]:
    """The go command's environment for building tools: the committed go.mod is read-only, and every module is
    checked against go.sum and the checksum database. The machine's Go builds, unless the tool pins a toolchain
    (the go command fetches it from the module proxy, checked like any module)."""
    if base.get("GOSUMDB", "").strip() == "off":
        raise KonduktorError(
            "GOSUMDB=off: the pinned tools are built only from modules the checksum database vouches for",
            hint="unset GOSUMDB, or point it at a checksum database mirror (GOSUMDB='sum.golang.org <URL>')",
        )
    env = dict(base)
    env.update(CGO_ENABLED="0", GOFLAGS="-mod=readonly", GOTOOLCHAIN=toolchain or env.get("GOTOOLCHAIN", "local"))
    env["GOSUMDB"] = env.get("GOSUMDB") or "sum.golang.org"
    env.update(dict.fromkeys(CHECKSUM_EXEMPTIONS, ""))
    return env


class GoBuild:
    """Runs the go command for one tool, keeping the output for error reports."""

    def __init__(self, tool: Tool, workdir: Path, progress: Progress) -> None:
        self.tool = tool
        self.workdir = workdir
        self.progress = progress
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self.log = workdir / "build.log"
        self.env = go_environment(os.environ, tool.toolchain)

    def download(self, module: Tool) -> dict[str, str]:
        """Fetches a module (of this tool, or the Kubernetes libraries) and returns go's description of it."""
        output = self.run(
            "mod",
            "download",
            "-json",
            f"{module.module}@{module.version}",
            step=f"downloading {module.module}@{module.version}",
            check=False,
        )
        try:  # the JSON follows any notes go prints first ("go: downloading go1.27.2" for a pinned toolchain)
            info: dict[str, str] = json.loads(output[output.find("{") :] if "{" in output else output)
        except ValueError:
            info = {"Error": output.strip()}
        if "Error" in info or "GoMod" not in info:
            message = info.get("Error", "no module information")
            raise KonduktorError(
                f"could not build {self.tool.name} {self.tool.version}: {message.splitlines()[0]}",
                hint=build_hint(message, module),
                detail=f"(full log: {self.log})",
            )
        return info

    def run(
        self, *args: str, step: str, check: bool = True, each_line: Progress | None = None, cwd: Path | None = None
    ) -> str:
        """Runs `go ARGS` in the build module (or `cwd`); `each_line` sees every line go prints."""
        command = ["go", *args]
        self.progress(f"{self.tool.name} {self.tool.version}: {step}")
        output: list[str] = []
        with self.log.open("a") as log:
            log.write(f"$ {' '.join(command)}\n")
            process = subprocess.Popen(
                command,
                cwd=cwd or self.workdir,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            assert process.stdout is not None
            for line in process.stdout:
                log.write(line)
                output.append(line)
                self.tail.append(line.rstrip())
                if each_line is not None:
                    each_line(line.strip())
            code = process.wait()
        if code != 0 and check:
            tail = list(self.tail)
            raise KonduktorError(
                f"could not build {self.tool.name} {self.tool.version} ({self.tool.module}): "
                f"`go {' '.join(args[:2])}` exited {code}",
                hint=build_hint("\n".join(tail), self.tool),
                detail="\n".join(tail[-15:]) + f"\n(full log: {self.log})",
            )
        return "".join(output)

    def resolve(self, kubernetes: Tool) -> None:
        """Writes the tool's build module (go.mod, go.sum) into the work directory, resolved through the module
        proxy and verified against the checksum database: what `tools lock` commits."""
        tool = self.tool
        kubernetes_replaces = (
            []  # the tool's own replaces pin every k8s.io/* module it uses
            if tool.kubernetes_libraries
            else staging_replaces(Path(self.download(kubernetes)["GoMod"]).read_text(), kubernetes.version)
        )
        source = self.download(tool)
        replaces, excludes = wrapper_directives(Path(source["GoMod"]).read_text(), kubernetes_replaces)
        (self.workdir / "go.mod").write_text(wrapper_gomod(tool, replaces, excludes))
        # The tool's own go.sum vouches for its dependencies, some of which the checksum database does not
        # serve (e.g. pre-release modules); the go command still verifies every download against it.
        tool_sums = Path(source["Dir"]) / "go.sum"
        if tool_sums.is_file():
            shutil.copyfile(tool_sums, self.workdir / "go.sum")
        packages = tool.package_paths()
        self.run("get", "-tool", *[f"{p}@{tool.version}" for p in packages], step="resolving modules")
        # Records the sums of every module the build loads, so that the build itself changes nothing. With
        # placeholder embeds the upstream packages fail to load (the embedded directory is missing), so errors
        # are tolerated here; the build itself loads the patched copy and fails on any real error.
        tolerate = ["-e"] if tool.placeholder_embeds else []
        self.run("list", "-mod=mod", "-deps", *tolerate, *tool.tag_flags(), *packages, step="resolving packages")

    def patch_embeds(self) -> None:
        """Builds the tool from a writable copy of its module with a placeholder page in each directory it
        embeds but the module zip lacks; go.sum still vouches for the copied module's content."""
        tool = self.tool
        if not tool.placeholder_embeds:
            return
        source = Path(self.download(tool)["Dir"])
        copy = self.workdir / "module"
        shutil.copytree(source, copy)
        for path in copy.rglob("*"):
            path.chmod(path.stat().st_mode | 0o200)
        copy.chmod(copy.stat().st_mode | 0o200)
        for embed in tool.placeholder_embeds:
            directory = copy / embed
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "index.html").write_text(
                f"<!doctype html><title>{tool.name}</title><p>Built without its web UI; the HTTP API is served.\n"
            )
        with (self.workdir / "go.mod").open("a") as gomod:
            gomod.write(f"\nreplace {tool.module} => ./module\n")

    def compile(self, package: str, binary: str, output: Path, status: Callable[[str, int, int], str]) -> None:
        """`go build` of one binary, reporting each package compiled out of those not in Go's build cache."""
        stale = self.run(
            "list",
            "-deps",
            "-trimpath",
            *self.tool.tag_flags(),
            "-f",
            "{{if .Stale}}{{.ImportPath}}{{end}}",
            package,
            step=f"compiling {binary}: finding the packages to compile",
        )
        total = max(1, len([line for line in stale.splitlines() if IMPORT_PATH.fullmatch(line.strip())]))
        compiled = 0

        def count(line: str) -> None:  # `go build -v` names each package as it compiles it
            nonlocal compiled
            if IMPORT_PATH.fullmatch(line):
                compiled += 1
                self.progress(f"{self.tool.name} {self.tool.version}: {status(binary, min(compiled, total), total)}")

        self.run(
            "build",
            "-v",
            *self.tool.build_flags(),
            "-o",
            str(output),
            package,
            step=status(binary, 0, total),
            each_line=count,
        )

    def compile_source(self, source: Path, output: Path) -> None:
        """`go test -c` of our own module's test-binary package, in its source folder, with its committed go.sum."""
        tool = self.tool
        tags = ["-tags", ",".join(tool.test_tags)] if tool.test_tags else []
        self.run(
            "test",
            "-c",
            *tags,
            *tool.build_flags(),
            "-o",
            str(output),
            *[f"./{package}" for package in tool.packages],
            step=f"compiling {tool.built_binaries()[0]} from {source} (Kueue's packages: minutes on a cold cache)",
            cwd=source,
        )


def build_hint(output: str, tool: Tool) -> str:
    if "verifying" in output and ("SECURITY ERROR" in output or "checksum mismatch" in output):
        return "a module's content differs from go.sum or the checksum database: do not build it; report it"
    if "updates to go.mod needed" in output or "missing go.sum entry" in output:
        return f"the committed build module of {tool.name} is out of date: `konduktor-install tools lock {tool.name}`"
    if any(sign in output for sign in ("unknown revision", "invalid version", "not found", "not available")):
        return f"{tool.module} has no version {tool.version}; pick a published tag (see versions.toml)"
    if "requires go >=" in output or "toolchain" in output:
        return f"install Go {MIN_GO[0]}.{MIN_GO[1]} or newer"
    if "dial tcp" in output or "proxyconnect" in output or "i/o timeout" in output:
        return "the Go module proxy is not reachable; set GOPROXY or warm the cache on a connected machine"
    return "read the log above; re-running resumes from Go's module and build caches"


def go_version() -> tuple[int, int] | None:
    go = shutil.which("go")
    if go is None:
        return None
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False).stdout
    match = re.match(r"go(\d+)\.(\d+)", out.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def require_go() -> None:
    version = go_version()
    if version is None:
        raise KonduktorError(
            "the go command is not installed; Konduktor builds its pinned tools from Go modules",
            hint=f"install Go {MIN_GO[0]}.{MIN_GO[1]}+ (e.g. from go.dev or your distribution) and re-run",
        )
    if version < MIN_GO:
        raise KonduktorError(
            f"go {version[0]}.{version[1]} is too old to build the pinned tools",
            hint=f"install Go {MIN_GO[0]}.{MIN_GO[1]} or newer",
        )


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Serialises builds of one tool version between processes (parallel test workers, two shells)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(
    tool: Tool,
    kubernetes: Tool,
    progress: Progress,
    root: Path | None = None,
    then: Sequence[str] = (),
    modules: Path = LOCKED_MODULES,
) -> Installed:
    """Build the tool unless this version is already in the cache (`then`: what is built after it, for the
    progress messages; `modules`: where the committed build modules are).

    Every wrapper pins the k8s.io/* libraries to the cluster's Kubernetes patch (the staging replaces), so
    the tools link the same library code and a cold build compiles it once, not once per tool.
    """
    root = root or cache_dir()
    directory = tool.install_dir(root)
    with locked(root / "tools" / f".{tool.name}-{tool.version}.lock"):
        if done := installed(tool, root):
            return done
        require_go()
        started = time.monotonic()
        expected = last_build_seconds(tool, root)
        workdir = directory / "src"
        bindir = directory / "bin"
        shutil.rmtree(directory, ignore_errors=True)
        workdir.mkdir(parents=True)
        bindir.mkdir()
        go = GoBuild(tool, workdir, progress)
        if tool.source:
            go.compile_source(product_dir(tool.source), bindir / tool.built_binaries()[0])
        else:
            _build_wrapper(go, kubernetes, modules, bindir, expected, then)
        for alias in tool.aliases:  # a relative link: the binary's role is the name it is started under
            (bindir / alias).symlink_to(tool.built_binaries()[0])
        seconds = time.monotonic() - started
        manifest = {
            "module": tool.module,
            "version": tool.version,
            "binaries": {name: str(bindir / name) for name in tool.binaries()},
            "flags": tool.build_flags(),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(seconds, 1),
        }
        (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    result = installed(tool, root)
    assert result is not None, "a finished build always has its manifest"
    return replace(result, fresh=True)


def _build_wrapper(
    go: GoBuild, kubernetes: Tool, modules: Path, bindir: Path, expected: float | None, then: Sequence[str]
) -> None:
    """An upstream tool: its committed build module (or one resolved now), then each of its binaries."""
    tool, progress, started = go.tool, go.progress, time.monotonic()
    if lock := locked_module(tool, modules):
        (go.workdir / "go.mod").write_text(lock[0])
        (go.workdir / "go.sum").write_text(lock[1])
    else:
        progress(
            f"{tool.name} {tool.version}: no committed go.sum for this version; resolving its modules "
            "with the checksum database (`konduktor-install tools lock` commits them)"
        )
        go.resolve(kubernetes)
    go.patch_embeds()
    binaries = tool.built_binaries()

    def status(binary: str, compiled: int, total: int) -> str:
        text = f"compiling {binary} · {compiled}/{total} packages, {duration(time.monotonic() - started)}"
        if expected:
            text += f" of ~{duration(expected)} (last build)"
        later = [*binaries[binaries.index(binary) + 1 :], *then]
        return text + (f"; next: {', '.join(later)}" if later else "")

    for package, binary in zip(tool.package_paths(), binaries, strict=True):
        go.compile(package, binary, bindir / binary, status)


def lock(tool: Tool, kubernetes: Tool, progress: Progress, directory: Path = LOCKED_MODULES) -> Path:
    """Resolves the tool's build module afresh and writes its go.mod and go.sum to `directory`/<tool>/."""
    require_go()
    with tempfile.TemporaryDirectory(prefix=f"konduktor-lock-{tool.name}-") as scratch:
        go = GoBuild(tool, Path(scratch), progress)
        go.resolve(kubernetes)
        target = directory / tool.name
        target.mkdir(parents=True, exist_ok=True)
        for name in ("go.mod", "go.sum"):
            shutil.copyfile(Path(scratch) / name, target / name)
    return target


def module_dir(tool: Tool) -> Path:
    """The tool's module source in Go's module cache (its manifests: CRDs, webhooks, kwok stages)."""
    require_go()
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{tool.module}@{tool.version}"],
        capture_output=True,
        text=True,
        check=False,
        env=go_environment(os.environ),
        cwd=cache_dir() if cache_dir().exists() else None,
    )
    try:
        info = json.loads(result.stdout)
    except ValueError:
        info = {}
    if result.returncode == 0 and "Dir" in info:
        return Path(info["Dir"])
    # A module that declares a newer Go than this one (argo-cd v3.6 asks for 1.27) is downloaded and unpacked,
    # then refused; its manifests are plain files there and need no toolchain.
    unpacked = Path(go_env("GOMODCACHE")) / f"{escape_module_path(tool.module)}@{tool.version}"
    if "requires go >=" in str(info.get("Error", "")) and unpacked.is_dir():
        return unpacked
    raise KonduktorError(
        f"cannot download {tool.module}@{tool.version}: {info.get('Error') or result.stderr.strip()}",
        hint=build_hint(result.stdout + result.stderr, tool),
    )


def escape_module_path(path: str) -> str:
    """The module cache spells upper-case letters as '!' + lower case (github.com/!azure/...)."""
    return "".join(f"!{c.lower()}" if c.isupper() else c for c in path)


def go_env(name: str) -> str:
    return subprocess.run(["go", "env", name], capture_output=True, text=True, check=True).stdout.strip()

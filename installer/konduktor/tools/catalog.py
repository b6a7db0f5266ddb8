"""The pinned tool set: each tool's Go module, tag and binaries as versions.toml names them, and versions
overridden on the command line."""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from konduktor.errors import UsageError
from konduktor.paths import product_dir

VERSIONS_FILE = Path(__file__).with_name("versions.toml")


@dataclass(frozen=True)
class Tool:
    """One Go module at one tag and the binaries built from it."""

    name: str
    module: str
    version: str
    packages: tuple[str, ...]
    binary: str | None = None
    ldflags: tuple[str, ...] = field(default=())
    tags: tuple[str, ...] = field(default=())
    needed_by: tuple[str, ...] = field(default=())
    # Directories a package embeds that the module zip lacks (generated, git-ignored web UIs): the build uses a
    # writable copy of the module with a placeholder page in each.
    placeholder_embeds: tuple[str, ...] = field(default=())
    # Go toolchain the tool needs when newer than the machine's (fetched from the module proxy like a module).
    toolchain: str | None = None
    # Names under which the binary is linked as well (a multi-call binary picks its role from argv[0]).
    aliases: tuple[str, ...] = field(default=())
    # The k8s.io/* version the tool's own go.mod replaces the libraries with, when it needs newer ones than
    # the cluster's Kubernetes.
    kubernetes_libraries: str | None = None
    # Our own Go module, a folder of the product (konduktor.paths.product_dir): built from that source rather than
    # fetched; its version is a hash of the source, so a change rebuilds it.
    source: str | None = None
    # Build tags of a package whose binary is a test binary (`go test -c`): only a test can start the synctest
    # bubble that gives Kueue a virtual clock.
    test_tags: tuple[str, ...] = field(default=())

    def package_paths(self) -> list[str]:
        return [self.module if p == "." else f"{self.module}/{p}" for p in self.packages]

    def binaries(self) -> list[str]:
        """The binaries built, one per package, then the aliases."""
        return [*self.built_binaries(), *self.aliases]

    def built_binaries(self) -> list[str]:
        names = []
        for package in self.packages:
            if package == "." or (self.binary and len(self.packages) == 1):
                names.append(self.binary or self.module.rstrip("/").split("/")[-1])
            else:
                names.append(package.rstrip("/").split("/")[-1])
        return names

    def linker_flags(self) -> str:
        semver = self.version.removeprefix("v")
        settings = [f"-X '{flag.format(version=self.version, semver=semver)}'" for flag in self.ldflags]
        return " ".join(["-s", "-w", *settings])

    def build_flags(self) -> list[str]:
        flags = ["-trimpath", "-ldflags", self.linker_flags()]
        return [*flags, *self.tag_flags()]

    def tag_flags(self) -> list[str]:
        return ["-tags", ",".join(self.tags)] if self.tags else []

    def install_dir(self, root: Path) -> Path:
        return root / "tools" / f"{self.name}-{self.version}"


def source_version(directory: Path) -> str:
    """The version of our own module: a hash of its go.mod, go.sum and Go files."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.name in ("go.mod", "go.sum") or p.suffix == ".go"):
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes() + b"\0")
    return "src-" + digest.hexdigest()[:12]


def load_tools(path: Path = VERSIONS_FILE) -> dict[str, Tool]:
    with path.open("rb") as handle:
        table = tomllib.load(handle)
    return {
        name: Tool(
            name=name,
            module=entry["module"],
            version=source_version(product_dir(entry["source"])) if "source" in entry else entry["version"],
            packages=tuple(entry["packages"]),
            binary=entry.get("binary"),
            ldflags=tuple(entry.get("ldflags", ())),
            tags=tuple(entry.get("tags", ())),
            needed_by=tuple(entry.get("needed-by", ())),
            placeholder_embeds=tuple(entry.get("placeholder-embeds", ())),
            toolchain=entry.get("toolchain"),
            aliases=tuple(entry.get("aliases", ())),
            kubernetes_libraries=entry.get("kubernetes-libraries"),
            source=entry.get("source"),
            test_tags=tuple(entry.get("test-tags", ())),
        )
        for name, entry in table.items()
    }


def with_versions(tools: Mapping[str, Tool], overrides: Mapping[str, str]) -> dict[str, Tool]:
    """The pinned set with some versions replaced (`--version kueue=v0.19.3`)."""
    unknown = sorted(set(overrides) - set(tools))
    if unknown:
        raise UsageError(
            f"unknown tool {', '.join(unknown)}",
            hint=f"tools are: {', '.join(sorted(tools))}",
        )
    result = dict(tools)
    for name, version in overrides.items():
        if not re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", version):
            raise UsageError(f"--version {name}={version}: not a module tag", hint="write it like v1.2.3")
        result[name] = replace(tools[name], version=version)
    return result


def parse_overrides(values: list[str]) -> dict[str, str]:
    overrides = {}
    for value in values:
        name, sep, version = value.partition("=")
        if not sep or not name or not version:
            raise UsageError(f"--version {value}: expected TOOL=VERSION", hint="e.g. --version kueue=v0.19.2")
        overrides[name] = version
    return overrides

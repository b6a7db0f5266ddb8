"""go.mod files of the tools' build modules: the wrapper module written from a tool's own go.mod, and the
committed lock (modules/<tool>/go.mod and go.sum, made by `konduktor-install tools lock`) checked against
versions.toml."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from konduktor.paths import product_dir
from konduktor.tools.catalog import Tool

LOCKED_MODULES = Path(__file__).with_name("modules")
MIN_GO = (1, 26)


def directives(gomod: str, keyword: str) -> list[str]:
    """The bodies of `replace` or `exclude` directives of a go.mod, single-line and block forms."""
    found = []
    block = False
    for raw in gomod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if block:
            if line == ")":
                block = False
            elif line:
                found.append(line)
        elif line == f"{keyword} (":
            block = True
        elif line.startswith(f"{keyword} "):
            found.append(line.removeprefix(f"{keyword} ").strip())
    return found


def staging_replaces(kubernetes_gomod: str, version: str) -> list[str]:
    """Replace lines that point each ./staging module of k8s.io/kubernetes at its published v0.X.Y tag."""
    published = "v0." + version.removeprefix("v").split(".", 1)[1]
    modules = [r.split()[0] for r in directives(kubernetes_gomod, "replace") if "=> ./staging/" in r]
    return [f"{module} => {module} {published}" for module in sorted(set(modules))]


def wrapper_directives(tool_gomod: str, kubernetes_replaces: list[str]) -> tuple[list[str], list[str]]:
    """Replaces and excludes for a module that requires the tool.

    A dependency's replace and exclude directives are ignored, so the wrapper repeats the tool's own (all but
    local paths, which only exist in the tool's repository). Where the tool replaces a module itself, its
    choice wins over the shared Kubernetes libraries.
    """
    own = [r for r in directives(tool_gomod, "replace") if "=> ./" not in r and "=> ../" not in r]
    replaced = {r.split("=>")[0].split()[0] for r in own}
    shared = [r for r in kubernetes_replaces if r.split()[0] not in replaced]
    return own + shared, directives(tool_gomod, "exclude")


def wrapper_gomod(tool: Tool, replaces: Sequence[str], excludes: Sequence[str] = ()) -> str:
    lines = [f"module konduktor.build/{tool.name}", "", f"go {MIN_GO[0]}.{MIN_GO[1]}", ""]
    lines.append(f"require {tool.module} {tool.version}")
    for keyword, entries in (("replace", replaces), ("exclude", excludes)):
        if entries:
            lines += ["", f"{keyword} (", *[f"\t{e}" for e in entries], ")"]
    return "\n".join(lines) + "\n"


def required_version(gomod: str, module: str) -> str | None:
    """The version a go.mod requires of a module."""
    for entry in directives(gomod, "require"):
        parts = entry.split()
        if len(parts) >= 2 and parts[0] == module:
            return parts[1]
    return None


def locked_module(tool: Tool, directory: Path = LOCKED_MODULES) -> tuple[str, str] | None:
    """The committed go.mod and go.sum of the tool's build module, when they are for this version of the tool."""
    try:
        gomod = (directory / tool.name / "go.mod").read_text()
        gosum = (directory / tool.name / "go.sum").read_text()
    except OSError:
        return None
    return (gomod, gosum) if required_version(gomod, tool.module) == tool.version else None


def lock_problems(tools: Mapping[str, Tool], directory: Path = LOCKED_MODULES) -> list[str]:
    """How the committed build modules disagree with versions.toml (empty: they agree)."""
    problems = []
    published = "v0." + tools["kubernetes"].version.removeprefix("v").split(".", 1)[1]
    for tool in tools.values():
        if tool.source:
            problems += source_problems(tool, tools, published)
            continue
        if not tool.packages:
            continue
        folder = directory / tool.name
        if not (folder / "go.mod").is_file() or not (folder / "go.sum").is_file():
            problems.append(f"{tool.name}: no go.mod and go.sum in {folder}")
            continue
        gomod, gosum = (folder / "go.mod").read_text(), (folder / "go.sum").read_text()
        if f"module konduktor.build/{tool.name}\n" not in gomod:
            problems.append(f"{tool.name}: go.mod is not the module konduktor.build/{tool.name}")
        if (version := required_version(gomod, tool.module)) != tool.version:
            problems.append(f"{tool.name}: go.mod requires {tool.module} {version}, versions.toml pins {tool.version}")
        if sorted(directives(gomod, "tool")) != sorted(tool.package_paths()):
            problems.append(f"{tool.name}: go.mod's tool directives are not {', '.join(tool.package_paths())}")
        libraries = tool.kubernetes_libraries or published
        if f"k8s.io/api => k8s.io/api {libraries}" not in gomod and tool.name != "kubernetes":
            problems.append(f"{tool.name}: go.mod does not pin the Kubernetes libraries at {libraries}")
        for line in (f"{tool.module} {tool.version} h1:", f"{tool.module} {tool.version}/go.mod h1:"):
            if line not in gosum:
                problems.append(f"{tool.name}: go.sum has no `{line}` line")
    return problems


def source_problems(tool: Tool, tools: Mapping[str, Tool], published: str, folder: Path | None = None) -> list[str]:
    """How our own module's go.mod disagrees with versions.toml: every pinned tool it requires directly at its pin,
    and the Kubernetes libraries at the [kubernetes] entry's."""
    gomod = ((folder or product_dir(tool.source or "")) / "go.mod").read_text()
    problems = []
    if f"module {tool.module}\n" not in gomod:
        problems.append(f"{tool.name}: go.mod is not the module {tool.module}")
    direct = "\n".join(line for line in gomod.splitlines() if "// indirect" not in line)
    for other in tools.values():
        version = required_version(direct, other.module)
        if version is not None and version != other.version:
            problems.append(f"{tool.name}: go.mod requires {other.module} {version}; versions.toml: {other.version}")
    if f"k8s.io/api => k8s.io/api {published}" not in gomod:
        problems.append(f"{tool.name}: go.mod does not pin the Kubernetes libraries at {published}")
    return problems

"""`konduktor-install tools`: build, lock and list the pinned tools."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from konduktor.cli.console import OutputFormat, err, print_rows, progress
from konduktor.errors import UsageError
from konduktor.tools import host_tools
from konduktor.tools.catalog import load_tools, parse_overrides, with_versions
from konduktor.tools.gobuild import Installed, duration, installed, lock
from konduktor.tools.gomod import lock_problems
from konduktor.tools.toolbox import Toolbox

app = typer.Typer(help="Build, lock and list the pinned tools (helm, kubectl, kwok, etcd, Kubernetes, Kueue).")

VersionOption = Annotated[
    list[str] | None,
    typer.Option("--version", help="Override a pinned version, TOOL=VERSION (repeatable)."),
]


@app.command("install")
def install(
    names: Annotated[list[str] | None, typer.Argument(help="Tools to build (default: all).")] = None,
    version: VersionOption = None,
    needed_by: Annotated[
        str | None,
        typer.Option("--for", help="Only the tools this needs: `up` (the simulated cluster and helm) or `test`."),
    ] = None,
) -> None:
    """Build the pinned tools from their Go modules into the cache (a warm cache makes this instant)."""
    tools = with_versions(load_tools(), parse_overrides(version or []))
    with progress("tools") as report:
        toolbox = Toolbox(tools, report)
        if needed_by is not None:
            if names:
                raise UsageError("name tools or give --for, not both")
            names = toolbox.needed_by(needed_by)
            if not names:
                raise UsageError(f"--for {needed_by}: no tool is needed by it", hint="use --for up or --for test")
        done = toolbox.install(names)
    for item in done:
        err.print(describe(item), markup=False)


def describe(item: Installed) -> str:
    binaries = ", ".join(item.paths)
    if item.fresh:
        return f"{item.tool.name} {item.tool.version}: built in {duration(item.seconds)} ({binaries})"
    folder = next(iter(item.paths.values())).parents[1]
    return f"{item.tool.name} {item.tool.version}: reusing the cache {folder} (built {item.built_at}; {binaries})"


@app.command("lock")
def lock_modules(
    names: Annotated[list[str] | None, typer.Argument(help="Tools to lock (default: all that are built).")] = None,
    check: Annotated[bool, typer.Option("--check", help="Only say whether the committed modules agree.")] = False,
) -> None:
    """Resolve each tool's build module at its pinned version and write its go.mod and go.sum into the package
    (installer/konduktor/tools/modules/<tool>/), verified by the checksum database: commit them. Run it after
    changing a version in versions.toml."""
    tools = load_tools()
    if check:
        problems = lock_problems(tools)
        for problem in problems:
            err.print(f"error: {problem}", markup=False)
        if problems:
            raise typer.Exit(1)
        err.print("the committed build modules agree with versions.toml", markup=False)
        return
    selected = names or [name for name, tool in tools.items() if tool.packages and not tool.source]
    unknown = [n for n in selected if n not in tools or not tools[n].packages or tools[n].source]
    if unknown:
        raise UsageError(f"not a built tool: {', '.join(unknown)}", hint=f"tools are: {', '.join(tools)}")
    with progress("tools lock") as report:
        for name in selected:
            target = lock(tools[name], tools["kubernetes"], report)
            err.print(f"{name} {tools[name].version}: {target}/go.mod, go.sum", markup=False)


@app.command("path")
def path(
    binary: Annotated[str, typer.Argument(help="A pinned binary, e.g. kubectl.", show_default=False)],
) -> None:
    """Print the path of a pinned binary, built first when the cache lacks it (progress on stderr), e.g.
    `alias kubectl="$(konduktor-install tools path kubectl)"`. Exit 2: no pinned tool provides it."""
    with progress("tools") as report:
        found = Toolbox(progress=report).path(binary)
    typer.echo(str(found))


@app.command("list")
def list_tools(
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """Each pinned tool, its version, and the binary commands use: the cached build, or for a real cluster a
    fitting helm/kubectl named by KONDUKTOR_HELM/KONDUKTOR_KUBECTL or on PATH (the simulated cluster always
    runs the pinned builds)."""
    rows: list[dict[str, Any]] = []
    for tool in load_tools().values():
        if not tool.packages:
            continue  # a manifest source, not a binary
        build = installed(tool)
        for binary in tool.binaries():
            row: dict[str, Any] = {
                "tool": tool.name,
                "binary": binary,
                "version": tool.version,
                "module": tool.module,
                "installed": build is not None,
                "source": "cache" if build else "not built",
                "path": str(build.paths[binary]) if build else "",
                "note": "",
            }
            if found := host_tools.find(binary, tool.version):
                row["host"] = {"path": str(found.path), "source": found.source, "version": found.version}
                if found.problem is None:
                    row.update(source=found.source, version=found.version, path=str(found.path))
                    row["note"] = f"fits; real clusters use it (the simulated cluster uses the pinned {tool.version})"
                else:
                    row["note"] = f"{found.source} {found.path}: {found.problem}; not used"
                    row["host"]["problem"] = found.problem
            rows.append(row)
    print_rows(rows, ["tool", "binary", "version", "source", "path", "note"], output)

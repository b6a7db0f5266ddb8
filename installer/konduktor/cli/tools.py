"""`konduktor-install tools`: build and list the pinned tools."""

from __future__ import annotations

from typing import Annotated

import typer

from konduktor.cli.console import OutputFormat, err, print_rows, progress
from konduktor.sim.tools import Toolbox, installed, load_tools, parse_overrides, with_versions

app = typer.Typer(help="Build and list the pinned tools (helm, kubectl, kwok, etcd, Kubernetes, Kueue).")

VersionOption = Annotated[
    list[str] | None,
    typer.Option("--version", help="Override a pinned version, TOOL=VERSION (repeatable)."),
]


@app.command("install")
def install(
    names: Annotated[list[str] | None, typer.Argument(help="Tools to build (default: all).")] = None,
    version: VersionOption = None,
) -> None:
    """Build the pinned tools from their Go modules into the cache (a warm cache makes this instant)."""
    tools = with_versions(load_tools(), parse_overrides(version or []))
    binaries = tuple(f"compiling {b}" for tool in tools.values() for b in tool.binaries())
    # Without a terminal, print each step once, not every package go compiles.
    with progress("tools", quiet=lambda m: "compiling " in m and not m.endswith(binaries)) as report:
        done = Toolbox(tools, report).install(names)
    for item in done:
        err.print(f"{item.tool.name} {item.tool.version}: ready ({', '.join(item.paths)})", markup=False)


@app.command("list")
def list_tools(
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """Show each pinned tool, its version, and where its binaries are (or that it is not built yet)."""
    rows = []
    for tool in load_tools().values():
        if not tool.packages:
            continue  # a manifest source, not a binary
        build = installed(tool)
        for binary in tool.binaries():
            rows.append(
                {
                    "tool": tool.name,
                    "binary": binary,
                    "version": tool.version,
                    "module": tool.module,
                    "installed": build is not None,
                    "path": str(build.paths[binary]) if build else "",
                }
            )
    print_rows(rows, ["tool", "binary", "version", "installed", "path"], output)

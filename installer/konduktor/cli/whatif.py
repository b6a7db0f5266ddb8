"""`konduktor-install whatif`: what a config would have done with a trace of jobs, on the simulated cluster."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Literal

import typer

from konduktor.cli.console import err, print_document, print_rows, say
from konduktor.errors import UsageError
from konduktor.whatif.replay import DEFAULT_SPEEDUP, Progress
from konduktor.whatif.run import columns, document, report, rows, run_one

_last_line = [0.0]


def _bar(step: Progress) -> None:
    hours = step.replayed / 3600
    eta = "-" if step.eta is None else f"{step.eta:.0f}s"
    filled = int(20 * step.done / step.total) if step.total else 20
    line = (
        f"[{'#' * filled}{'.' * (20 - filled)}] replayed {hours:.1f} h, {step.done}/{step.total} jobs done, ETA {eta}"
    )
    if err.is_terminal:
        sys.stderr.write("\r" + line)
        sys.stderr.flush()
        if step.final:
            sys.stderr.write("\n")
    elif step.final or time.monotonic() - _last_line[0] >= 30:  # a log: a line every 30 s
        _last_line[0] = time.monotonic()
        say(line)


def whatif(
    config: Annotated[Path, typer.Argument(help="The config to replay the trace against.")],
    trace: Annotated[Path, typer.Option("--trace", help="The jobs: CSV or JSON Lines (docs/whatif.md).")],
    against: Annotated[
        Path | None, typer.Option("--against", help="A second config: both replayed, side by side.")
    ] = None,
    speedup: Annotated[
        float, typer.Option("--speedup", help="Trace seconds per replayed second (job times and Kueue's timers).")
    ] = DEFAULT_SPEEDUP,
    horizon: Annotated[
        float | None,
        typer.Option("--horizon", help="Stop at this trace second (default: three times the trace's last job end)."),
    ] = None,
    output: Annotated[Literal["table", "json"], typer.Option("-o", "--output", help="table or json.")] = "table",
    page: Annotated[
        Path | None,
        typer.Option("--report", help="Also write an HTML page: GPUs in use per team over time, waits per team."),
    ] = None,
) -> None:
    """Replay a job trace against a config (and another) on a fresh simulated cluster: waits, use, preemptions.

    Each config gets a cluster of its own (its nodes, queues and Kueue settings, as `up` renders them), made
    and removed by the replay. Bad trace rows exit 2 with their file:line."""
    if page is not None and not page.parent.is_dir():
        raise UsageError(f"--report {page}: no directory {page.parent}", hint="name a file in an existing directory")
    runs = []
    for path in [config, *([against] if against is not None else [])]:
        say(f"whatif: replaying {trace} against {path}")
        run = run_one(path, trace, speedup, horizon, progress=_bar, say=lambda m: say(f"  {m}"))
        for line in run.replay.scaled:
            say(f"  scaled with the speedup: {line}")
        runs.append(run)
    if output == "json":
        print_document(document(runs), "json")
    else:
        print_rows(rows(runs), columns(runs), "table")
    if page is not None:
        page.write_text(report(runs, trace))
        say(f"whatif: report written to {page}")

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
from konduktor.whatif.report import sweep_report
from konduktor.whatif.run import (
    Engine,
    Run,
    columns,
    document,
    load_all,
    report,
    rows,
    run_all,
    run_sweep,
    verdict_lines,
)
from konduktor.whatif.sweep import (
    Sweep,
    Target,
    parse_sweep,
    parse_target,
    sweep_columns,
    sweep_document,
    sweep_rows,
)


class _Bar:
    """A replay's progress: a bar on a terminal, a line every 30 s in a log."""

    def __init__(self) -> None:
        self.last_line = 0.0

    def __call__(self, step: Progress) -> None:
        hours = step.replayed / 3600
        eta = "-" if step.eta is None else f"{step.eta:.0f}s"
        filled = int(20 * step.done / step.total) if step.total else 20
        line = (
            f"[{'#' * filled}{'.' * (20 - filled)}] replayed {hours:.1f} h, {step.done}/{step.total} jobs done, "
            f"ETA {eta}"
        )
        if err.is_terminal:
            sys.stderr.write("\r" + line)
            sys.stderr.flush()
            if step.final:
                sys.stderr.write("\n")
        elif step.final or time.monotonic() - self.last_line >= 30:  # a log: a line every 30 s
            self.last_line = time.monotonic()
            say(line)


def whatif(
    config: Annotated[Path, typer.Argument(help="The config to replay the trace against.")],
    trace: Annotated[Path, typer.Option("--trace", help="The jobs: CSV or JSON Lines (docs/whatif.md).")],
    against: Annotated[
        Path | None, typer.Option("--against", help="A second config: both replayed, side by side.")
    ] = None,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            help="virtual: Kueue's own code on virtual time (seconds); cluster: a simulated cluster, wall-clock.",
        ),
    ] = "virtual",
    speedup: Annotated[
        float | None,
        typer.Option(
            "--speedup", help=f"--engine cluster: trace seconds per replayed second (default {DEFAULT_SPEEDUP:g})."
        ),
    ] = None,
    horizon: Annotated[
        float | None,
        typer.Option("--horizon", help="Stop at this trace second (default: three times the trace's last job end)."),
    ] = None,
    output: Annotated[Literal["table", "json"], typer.Option("-o", "--output", help="table or json.")] = "table",
    sweep: Annotated[
        str | None,
        typer.Option(
            "--sweep",
            help="TEAM.GPUTYPE.FIELD=START:STOP:STEP (or =V1,V2): replay once per value of quota, borrowLimit or "
            "lendLimit.",
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option("--target", help="With --sweep: TEAM.p95=DURATION (or p50); names the smallest value meeting it."),
    ] = None,
    page: Annotated[
        Path | None,
        typer.Option("--report", help="Also write an HTML page: GPUs in use per team over time, waits per team."),
    ] = None,
) -> None:
    """Replay a job trace against a config (and another): waits, use, preemptions, per team.

    The virtual engine runs Kueue's own scheduler, queues and Workload controller on a virtual clock, with the
    config's quotas, nodes and Kueue settings as `up` renders them: the same inputs give the same answer. The
    cluster engine replays on a fresh simulated cluster in wall-clock time. Bad trace rows exit 2 with their
    file:line."""
    if page is not None and not page.parent.is_dir():
        raise UsageError(f"--report {page}: no directory {page.parent}", hint="name a file in an existing directory")
    if speedup is not None and engine != "cluster":
        raise UsageError("--speedup is for --engine cluster", hint="the virtual engine needs no speedup: drop it")
    if sweep is not None:
        if engine != "virtual" or against is not None:
            raise UsageError("--sweep replays one config on the virtual engine", hint="drop --against and --engine")
        _sweep(config, trace, parse_sweep(sweep), parse_target(target) if target else None, horizon, output, page)
        return
    if target is not None:
        raise UsageError("--target needs --sweep", hint="e.g. --sweep team-a.h100.quota=16:32:4 --target team-a.p95=1h")
    paths = [config, *([against] if against is not None else [])]
    loaded = load_all(paths, trace)
    say(f"whatif: replaying {trace} against {' and '.join(map(str, paths))} ({engine} engine)")
    runs = run_all(
        paths, loaded, engine, speedup or DEFAULT_SPEEDUP, horizon, progress=_Bar(), say=lambda m: say(f"  {m}")
    )
    for run in runs:
        for line in run.replay.scaled:
            say(f"  {run.config_path}: scaled with the speedup: {line}")
        say(f"  {run.config_path}: replayed in {run.replay.wall_seconds:.1f} s")
    if output == "json":
        print_document(document(runs), "json")
    else:
        if lines := verdict_lines(runs):
            print(f"{_label(runs[1])} against {_label(runs[0])} (differences within the noise count as none):")
            for line in lines:
                print(f"  {line}")
            print()
        print_rows(rows(runs), columns(runs), "table")
    if page is not None:
        page.write_text(report(runs, trace))
        say(f"whatif: report written to {page}")


def _label(run: Run) -> str:
    return run.config_path.name


def _sweep(
    config: Path,
    trace: Path,
    sweep: Sweep,
    target: Target | None,
    horizon: float | None,
    output: str,
    page: Path | None,
) -> None:
    say(f"whatif: replaying {trace} against {config} with {sweep.name} = {', '.join(map(str, sweep.values))}")
    started = time.monotonic()
    points = run_sweep(config, trace, sweep, horizon, say=lambda m: say(f"  {m}"))
    say(f"  {len(points)} replays in {time.monotonic() - started:.1f} s")
    if output == "json":
        print_document(sweep_document(sweep, points, target), "json")
    else:
        print_rows(sweep_rows(sweep, points, target), sweep_columns(sweep), "table")
    if page is not None:
        page.write_text(sweep_report(sweep, points, target, str(trace)))
        say(f"whatif: report written to {page}")

"""`konduktor-install trace`: make a what-if trace from a cluster's history or from the Alibaba GPU trace."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from konduktor.cli.console import say
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.config.model import duration_seconds
from konduktor.errors import UsageError
from konduktor.whatif.alibaba import DEFAULT_PRIORITIES, import_alibaba
from konduktor.whatif.export import export as export_jobs
from konduktor.whatif.job_series import read_job_series
from konduktor.whatif.trace import TraceJob, write_csv

app = typer.Typer(help="Make a what-if trace: from the cluster's finished jobs, or from the Alibaba GPU trace.")

OutputFile = Annotated[
    Path | None, typer.Option("-o", "--output", help="Write the trace (CSV) here; default: standard output.")
]


def _write(jobs: list[TraceJob], output: Path | None) -> None:
    if output is None:
        write_csv(jobs, sys.stdout)
        return
    with output.open("w") as handle:
        write_csv(jobs, handle)
    say(f"wrote {len(jobs)} jobs to {output}")


@app.command("export")
def export(
    since: Annotated[str, typer.Option("--since", help="How far back: a duration such as 14d, 36h or 90m.")] = "14d",
    output: OutputFile = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus",
            help="Also read kube-state-metrics' Job series from this Prometheus (URL): jobs whose Workloads are gone.",
        ),
    ] = None,
) -> None:
    """The cluster's finished GPU jobs since then, from the Workloads Kueue keeps (docs/whatif.md: what is lost)."""
    days = since.endswith("d") and since[:-1].isdigit()
    seconds = int(since[:-1]) * 86400 if days else duration_seconds(since)
    if seconds <= 0:
        raise UsageError(f"--since {since!r} is not a duration (e.g. 14d, 36h, 90m)")
    if prometheus is not None and not prometheus.startswith(("http://", "https://")):
        raise UsageError(f"--prometheus {prometheus!r}: give an http:// or https:// URL")
    kube = connect(kubeconfig, context, sim, read_only=True)
    now = time.time()
    series = None if prometheus is None else (lambda: read_job_series(prometheus, now - seconds, now))
    exported = export_jobs(kube, now - seconds, series)
    found = f"{len(exported.jobs)} finished GPU jobs"
    if prometheus is not None:
        found += f" ({exported.from_prometheus} of them only in Prometheus)"
    say(
        f"{found}; left out: {exported.unfinished} pending, running or failed, "
        f"{exported.without_gpus} without GPUs, {exported.before} created before the window"
    )
    _write(exported.jobs, output)


@app.command("alibaba")
def alibaba(
    path: Annotated[Path, typer.Argument(help="An openb_pod_list_*.csv of Alibaba's cluster-trace-gpu-v2023.")],
    teams: Annotated[str, typer.Option("--teams", help="Comma-separated teams to split the tasks between.")],
    priority: Annotated[
        list[str] | None,
        typer.Option(
            "--priority", help="QOS=CLASS, repeatable (default: LS, Guaranteed, Burstable=standard; BE=opportunistic)."
        ),
    ] = None,
    output: OutputFile = None,
) -> None:
    """Alibaba's GPU tasks as a trace, by the documented mapping rule (docs/whatif.md)."""
    classes = dict(DEFAULT_PRIORITIES)
    for item in priority or []:
        qos, _, name = item.partition("=")
        if not qos or not name:
            raise UsageError(f"--priority {item!r}: write QOS=CLASS, e.g. BE=opportunistic")
        classes[qos] = name
    names = [team.strip() for team in teams.split(",") if team.strip()]
    imported = import_alibaba(path, names, classes)
    fractional = sum(1 for job in imported.jobs if job.gpu_fraction is not None)
    say(
        f"{len(imported.jobs)} GPU tasks, {fractional} of them asking for part of a GPU (gpu_fraction); left out: "
        f"{imported.without_gpus} without GPUs, {imported.never_ran} never scheduled"
    )
    _write(imported.jobs, output)

"""`konduktor-install sim`: the simulated GPU cluster (real control plane, real Kueue, fake GPU nodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from konduktor.cli.console import OutputFormat, err, print_rows, progress
from konduktor.errors import ExitCode, UsageError
from konduktor.sim.cluster import DEFAULT_NAME, SimCluster
from konduktor.sim.pools import spec_from

app = typer.Typer(help="Run a local simulated GPU cluster: etcd, kube-apiserver, scheduler, Kueue, kwok GPU nodes.")

NameOption = Annotated[str, typer.Option("--name", help="Cluster name (several can run side by side).")]


@app.command("up")
def up(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Create nodes for this config's GPU types.")
    ] = None,
    nodes: Annotated[str | None, typer.Option("--nodes", help="COUNTxGPUS[:PRODUCT],... e.g. 4x10:H100.")] = None,
    job_seconds: Annotated[
        float, typer.Option("--job-seconds", help="How long Job pods run before they succeed.")
    ] = 5.0,
    name: NameOption = DEFAULT_NAME,
) -> None:
    """Start the simulated cluster, or bring an existing one back to the requested shape."""
    spec = spec_from(config, nodes, job_seconds)
    with progress(f"sim {name}") as reporter:
        sim = SimCluster(name, progress=reporter)
        sim.up(spec)
    state = sim.status()
    err.print(
        f"sim {name}: ready, {state['ready_nodes']} nodes, {state['gpus']} GPUs\nexport KUBECONFIG={sim.kubeconfig}",
        markup=False,
    )


@app.command("down")
def down(
    keep: Annotated[bool, typer.Option("--keep", help="Stop the processes but keep the cluster's data.")] = False,
    name: NameOption = DEFAULT_NAME,
) -> None:
    """Stop every process of the simulated cluster and remove its state (unless --keep)."""
    with progress(f"sim {name}") as report:
        SimCluster(name, progress=report).down(keep=keep)
    err.print(f"sim {name}: {'stopped' if keep else 'removed'}", markup=False)


@app.command("status")
def show_status(
    name: NameOption = DEFAULT_NAME,
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """Components, nodes and GPUs of the simulated cluster. Exit 1 when it is not running."""
    report = SimCluster(name).status()
    if output == "table":
        rows = [{"component": c, "state": s} for c, s in report["components"].items()]
        rows += [
            {"component": "nodes", "state": f"{report['ready_nodes']}/{report['nodes']} ready"},
            {"component": "gpus", "state": str(report["gpus"])},
        ]
        print_rows(rows, ["component", "state"], "table")
    else:
        print_rows([report], list(report), output)
    if not report["exists"] or report["components"].get("kube-apiserver") == "not answering":
        raise typer.Exit(ExitCode.NEGATIVE)


@app.command("kubeconfig")
def kubeconfig(name: NameOption = DEFAULT_NAME) -> None:
    """Print the path of the simulated cluster's kubeconfig."""
    sim = SimCluster(name)
    if not sim.kubeconfig.exists():
        raise UsageError(f"sim cluster {name!r} is not running", hint="start it with `konduktor-install sim up`")
    typer.echo(str(sim.kubeconfig))

"""`konduktor-install sim`: the simulated GPU cluster (real control plane, real Kueue, fake GPU nodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from konduktor.cli.arguments import load_checked
from konduktor.cli.console import OutputFormat, err, print_rows, progress
from konduktor.errors import ExitCode, UsageError
from konduktor.kube.client import Kube
from konduktor.ops.multicluster import start_sim_fleet
from konduktor.sim.cluster import DEFAULT_NAME, SimCluster
from konduktor.sim.faults import KINDS, clear, fault_kind, inject
from konduktor.sim.pools import spec_of, spec_of_nodes

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
    """Start the simulated cluster, or bring an existing one back to the requested shape.

    A config with `clusters:` starts a cluster for its manager and each worker, named as it names them, connected
    as MultiKueue needs (docs/multicluster.md)."""
    if config is not None and nodes is not None:
        raise UsageError("give --config or --nodes, not both")
    loaded = load_checked(config, several_clusters=True) if config is not None else None
    if loaded is not None and loaded.config.clusters is not None:
        if name != DEFAULT_NAME:
            raise UsageError("--name: a config with clusters: names its clusters itself")
        with progress("sim") as reporter:
            fleet = start_sim_fleet(loaded.config, job_seconds, reporter)
        for member, sim in fleet.items():
            err.print(f"sim {member}: ready\n  export KUBECONFIG={sim.kubeconfig}", markup=False)
        return
    spec = spec_of(loaded.config, job_seconds) if loaded is not None else spec_of_nodes(nodes, job_seconds)
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


@app.command("fault")
def fault(
    node: Annotated[str, typer.Argument(help="A GPU node of the simulated cluster.", show_default=False)],
    kind: Annotated[
        str | None,
        typer.Option("--kind", help=f"The fault: {', '.join(KINDS)} (docs/try-it.md says which signals each drives)."),
    ] = None,
    gpu: Annotated[int, typer.Option("--gpu", help="Which of the node's GPUs (its index).")] = 0,
    mig_instance: Annotated[
        int | None,
        typer.Option(
            "--mig-instance",
            help="On a node in MIG mode: the GPU instance of --gpu the driver attributes the Xid to (GPU-I:NN).",
            show_default=False,
        ),
    ] = None,
    clear_faults: Annotated[
        bool, typer.Option("--clear", help="The node's GPUs healthy again (the quarantine stays until requalified).")
    ] = False,
    name: NameOption = DEFAULT_NAME,
) -> None:
    """Inject a GPU fault into a node, as the signals a real node gives: a kernel Xid line, the GPU gone from
    allocatable, the GPU failing burn-in. Exit 2: unknown node or kind."""
    if (kind is None) == (not clear_faults):
        raise UsageError("give either --kind KIND or --clear", hint=f"kinds: {', '.join(KINDS)}")
    if kind is not None:
        fault_kind(kind)  # an unknown kind is named before the cluster is looked at
    sim = SimCluster(name)
    if not sim.kubeconfig.exists() or not sim.api_ready():
        raise UsageError(f"sim cluster {name!r} is not running", hint="start it with `konduktor-install sim up`")
    with Kube(sim.kubeconfig) as kube:
        if kind is None:
            signals = clear(kube, node)
            typer.echo(f"{node}: faults cleared")
        else:
            injected = inject(kube, sim.root, node, kind, gpu, mig_instance)
            where = "" if mig_instance is None else f" MIG instance {mig_instance}"
            typer.echo(f"{node}: {kind} on GPU {injected.gpu}{where}")
            signals = injected.signals
    for signal in signals:
        typer.echo(f"  {signal}")


@app.command("kubeconfig")
def kubeconfig(name: NameOption = DEFAULT_NAME) -> None:
    """Print the path of the simulated cluster's kubeconfig."""
    sim = SimCluster(name)
    if not sim.kubeconfig.exists():
        raise UsageError(f"sim cluster {name!r} is not running", hint="start it with `konduktor-install sim up`")
    typer.echo(str(sim.kubeconfig))

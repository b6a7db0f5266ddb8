"""`konduktor-install nodes`: the GPU nodes' health (`controller.health_view`), and returning a quarantined node
to service (`controller.release`): by hand, or after a burn-in."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Literal

import typer

from konduktor.burnin.tiers import Tier, options_for_tier
from konduktor.cli.burnin import DEFAULT_NAMESPACE, configured_tier, parse_timeout
from konduktor.cli.console import print_document, progress, say
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.controller.health_view import NodeHealth, capacity, health_view, render_table
from konduktor.controller.node_writes import EVENT_NAMESPACE
from konduktor.controller.release import release_node, requalify_node
from konduktor.errors import ExitCode
from konduktor.kube.client import Kube

NodesFormat = Literal["table", "wide", "json", "yaml"]

app = typer.Typer()


def read_view(kube: Kube, namespace: str = DEFAULT_NAMESPACE) -> list[NodeHealth]:
    nodes = kube.list("v1", "Node")
    # Only Warning Events about Nodes: a quarantine is one, and the rest need not cross the network.
    events = kube.list("v1", "Event", EVENT_NAMESPACE, field_selector="involvedObject.kind=Node,type=Warning")
    jobs = kube.list("batch/v1", "Job", namespace) if kube.get("v1", "Namespace", namespace) else []
    return health_view(nodes, events, jobs)


@app.callback(invoke_without_command=True)
def nodes(
    invocation: typer.Context,
    output: Annotated[
        NodesFormat, typer.Option("-o", "--output", help="table (100 columns), wide (+ evidence), json or yaml.")
    ] = "table",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
) -> None:
    """Every GPU node with its health: state, reason, since when, quarantine owner, last burn-in verdict.

    States: healthy, quarantined, requalifying, cordoned (by someone else), unhealthy (GPUHealthy=False without a
    quarantine), opted-out. Owners: konduktor-health (the controller), konduktor-install (burnin --quarantine),
    konduktor (ours, its Event expired), other (a gpu-health taint someone else placed).
    """
    if invocation.invoked_subcommand is not None:
        return
    with connect(kubeconfig, context, sim, read_only=True) as kube:
        views = read_view(kube)
    if output in ("json", "yaml"):
        print_document([view.row() for view in views], output)
        return
    sys.stdout.write(render_table(views, time.time(), wide=output == "wide"))
    for line in capacity(views):
        sys.stdout.write(f"capacity: {line.describe()}\n")


@app.command("release")
def release(
    node: Annotated[str, typer.Argument(help="The node to return to service.", show_default=False)],
    reason: Annotated[str, typer.Option("--reason", help="Why, for the Event (e.g. the repair ticket).")],
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
) -> None:
    """Return a node Konduktor quarantined to service: taint and quarantine annotations removed, GPUHealthy=True,
    an Event naming who and why.

    Exit 0: released, or nothing to release; 3: the gpu-health taint is someone else's (nothing changed);
    2: no such node or no reason.
    """
    with connect(kubeconfig, context, sim) as kube:
        release_node(kube, node, reason, say)


@app.command("requalify")
def requalify(
    node: Annotated[str, typer.Argument(help="A node Konduktor quarantined.", show_default=False)],
    level: Annotated[
        Tier | None, typer.Option("--level", help="The burn-in level (default: standard, as burnin).")
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Where the Job runs.")] = DEFAULT_NAMESPACE,
    timeout: Annotated[str | None, typer.Option("--timeout", help="How long to wait for the Job, e.g. 45m.")] = None,
) -> None:
    """Burn in a quarantined node now and act as the controller's requalification does: release it on PASS,
    keep it quarantined otherwise.

    Exit 0: PASS, released; 1: any other verdict, the node stays quarantined; 3: the node is not quarantined by
    Konduktor; 4: the wait ended with the Job running (nothing changed); 2: bad input.
    """
    options = options_for_tier(level or configured_tier(None))
    wait_s = parse_timeout(timeout) if timeout else None
    with connect(kubeconfig, context, sim) as kube:
        verdict, waited_out = requalify_node(kube, node, options, namespace, wait_s, say, progress)
    sys.stdout.write(f"{node}\t{verdict.verdict}\n")
    if waited_out:
        raise typer.Exit(ExitCode.PARTIAL)
    if verdict.verdict != "PASS":
        raise typer.Exit(ExitCode.NEGATIVE)

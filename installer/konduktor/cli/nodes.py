"""`konduktor-install nodes`: the GPU nodes' health with each one's next step, the fleet breaker and the controller
(`controller.health_status`); returning a quarantined node to service (`controller.release`): by hand, or after a
burn-in; and resetting a tripped breaker."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Literal

import typer

from konduktor.burnin.tiers import Tier, options_for_tier
from konduktor.cli.arguments import load_fleet, parse_timeout
from konduktor.cli.console import print_document, progress, say
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.errors import ExitCode
from konduktor.health.health_status import HealthReport, read_health, reset_breaker
from konduktor.health.health_view import Health, capacity, note, render_next, render_table
from konduktor.health.release import release_node, requalify_node
from konduktor.ops.burnin import configured_tier
from konduktor.ops.multicluster import members
from konduktor.ops.node_listing import SUMMARY_ABOVE, TABLE_LIMIT, NodeListing, select_nodes, state_summary
from konduktor.ops.status import read_fleet_health
from konduktor.vocabulary import BURNIN_NAMESPACE

NodesFormat = Literal["table", "wide", "json", "yaml"]
BREAKER_LABEL = "quarantine breaker"  # named by what it holds back: a bare "breaker" told a newcomer nothing

app = typer.Typer()
breaker_app = typer.Typer()
app.add_typer(breaker_app, name="breaker")


@app.callback(invoke_without_command=True)
def nodes(
    invocation: typer.Context,
    output: Annotated[
        NodesFormat, typer.Option("-o", "--output", help="table (100 columns), wide (+ evidence), json or yaml.")
    ] = "table",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="A config with `clusters:`: the GPU nodes of every worker (and manager)."),
    ] = None,
    state: Annotated[
        list[Health] | None,
        typer.Option("--state", help="Only nodes in this state (repeat for several), e.g. --state quarantined."),
    ] = None,
    gpu_type: Annotated[
        str | None,
        typer.Option("--type", help="Only nodes of this GPU product, or a part of its name: --type h100."),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=0,
            help=f"At most this many node rows; 0: all (the table's default: {TABLE_LIMIT} above {SUMMARY_ABOVE} "
            "nodes, else all; JSON and YAML: all).",
        ),
    ] = None,
) -> None:
    """Every GPU node with its health: state, reason, since when, quarantine owner, last burn-in verdict, and what
    happens next to a node out of service; then the fleet breaker and the health controller.

    Above 50 GPU nodes the table starts with a count of nodes per GPU product and state, and lists only the nodes
    that are not healthy (`--state healthy` lists those), at most 50 rows (`--limit`); a line says what was left
    out. `--state` and `--type` filter every output, JSON too.

    States: healthy, quarantined, requalifying, cordoned (by someone else), unhealthy (GPUHealthy=False without a
    quarantine), opted-out. Owners: konduktor-health (the controller), konduktor-install (burnin --quarantine),
    konduktor (ours, its Event expired), other (a gpu-health taint someone else placed). JSON: {nodes, breaker,
    controller}; with --config {clusters: [{cluster, role, nodes, breaker, controller} or {cluster, role, error}]},
    exit 5 when a cluster could not be read.
    """
    if invocation.invoked_subcommand is not None:
        return
    table = output in ("table", "wide")

    def listing(report: HealthReport) -> NodeListing:
        return select_nodes(report.nodes, states=state or (), gpu_type=gpu_type, limit=limit, table=table)

    if config is not None:
        loaded = load_fleet(config, kubeconfig, context, sim)
        found = read_fleet_health(members(loaded.config, config.parent))
        if output in ("json", "yaml"):
            print_document(
                {
                    "clusters": [
                        {
                            "cluster": each.member.name,
                            "role": each.member.role,
                            **(_document(each.found, listing(each.found)) if each.found else {"error": each.problem}),
                        }
                        for each in found
                    ]
                },
                output,
            )
        else:
            for each in found:
                sys.stdout.write(f"== {each.member.name} ({each.member.role})\n")
                if each.found is None:
                    sys.stdout.write(f"not read: {each.problem}\n")
                else:
                    _show(each.found, listing(each.found), output)
        if any(each.found is None for each in found):
            raise typer.Exit(ExitCode.UNREACHABLE)
        return
    with connect(kubeconfig, context, sim, read_only=True) as kube:
        report = read_health(kube, BURNIN_NAMESPACE)
    if output in ("json", "yaml"):
        print_document(_document(report, listing(report)), output)
        return
    _show(report, listing(report), output)


def _document(report: HealthReport, listing: NodeListing) -> dict[str, object]:
    return {**report.document(), "nodes": [view.row() for view in listing.shown]}


def _show(report: HealthReport, listing: NodeListing, output: NodesFormat) -> None:
    if len(report.nodes) > SUMMARY_ABOVE:
        for counted in state_summary(report.nodes):
            sys.stdout.write(f"nodes: {counted}\n")
    if listing.shown or not report.nodes:
        sys.stdout.write(render_table(listing.shown, time.time(), wide=output == "wide"))
    else:
        sys.stdout.write("no node needs attention\n" if listing.healthy_left_out else "no node matches\n")
    for left_out in listing.notes():
        sys.stdout.write(f"({left_out})\n")
    sys.stdout.write(render_next(listing.shown))
    for line in capacity(report.nodes):
        sys.stdout.write(f"capacity: {line.describe()}\n")
    sys.stdout.write(note(BREAKER_LABEL, report.breaker.describe()))
    sys.stdout.write(note("controller", report.controller.describe()))


@breaker_app.callback(invoke_without_command=True)
def breaker(
    invocation: typer.Context,
    output: Annotated[Literal["table", "json", "yaml"], typer.Option("-o", "--output")] = "table",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
) -> None:
    """The health controller's fleet breaker: quarantines in its window against its limit, since when it is
    tripped. Exit 0 closed, 1 tripped."""
    if invocation.invoked_subcommand is not None:
        return
    with connect(kubeconfig, context, sim, read_only=True) as kube:
        report = read_health(kube, BURNIN_NAMESPACE)
    if output == "table":
        sys.stdout.write(note(BREAKER_LABEL, report.breaker.describe()))
    else:
        print_document(report.breaker.row(), output)
    if report.breaker.tripped:
        raise typer.Exit(ExitCode.NEGATIVE)


@breaker_app.command("reset")
def reset(
    reason: Annotated[str, typer.Option("--reason", help="Why, for the Event (e.g. the incident or the repair).")],
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
) -> None:
    """Reset the tripped fleet breaker: the window's quarantines no longer count, the nodes it held back are
    quarantined within seconds, and an Event on the controller's Lease records who reset it and why.

    Exit 0: reset, or not tripped (nothing written); 2: no reason.
    """
    with connect(kubeconfig, context, sim) as kube:
        reset_breaker(kube, reason, say)


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
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Where the Job runs.")] = BURNIN_NAMESPACE,
    timeout: Annotated[str | None, typer.Option("--timeout", help="How long to wait for the Job, e.g. 45m.")] = None,
) -> None:
    """Burn in a quarantined node now and act as the controller's requalification does: release it on PASS,
    keep it quarantined otherwise.

    Exit 0: PASS, released; 1: any other verdict, the node stays quarantined; 3: the node is not quarantined by
    Konduktor, or GPU pods still run on it (a burn-in needs every GPU; nothing changed); 4: the wait ended with the
    Job running (nothing changed); 2: bad input.
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

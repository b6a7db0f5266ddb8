"""`konduktor-install quotas`: apply the rendered team quotas to a cluster, diff them, explain a team's usage."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from konduktor.cli.arguments import ConfigArgument, load_checked
from konduktor.cli.console import err, print_document, print_rows, say
from konduktor.cli.quota_options import AdoptOption, DrainOption, DrainTimeoutOption
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.errors import UsageError
from konduktor.gpu.sharing import resource_key
from konduktor.health.health_view import capacity, health_view
from konduktor.kube.sync import Change
from konduktor.ops.target import Target, running_target
from konduktor.quotas.sync import DRAIN_TIMEOUT, NO_TAKEOVER, Takeover, pending_code, require_kueue, sync_quotas
from konduktor.quotas.usage import gpu_usage
from konduktor.vocabulary import GPU_RESOURCE, KUEUE_API

app = typer.Typer(help="Apply team quotas to a cluster, show pending changes, explain a team's usage.")


def sync_config(
    config: Path, target: Target, *, prune: bool, dry_run: bool, takeover: Takeover = NO_TAKEOVER
) -> list[Change]:
    """Validate the whole config, then sync its quotas with the target cluster."""
    loaded = load_checked(config)
    with target.connect() as kube:
        return sync_quotas(kube, loaded.config, prune=prune, dry_run=dry_run, takeover=takeover, say=say)


def report(changes: list[Change], dry_run: bool) -> None:
    """Applied changes were printed as they happened; a dry run lists them here. Then a one-line summary."""
    for change in changes:
        if change.action == "keep" or (dry_run and change.action != "unchanged"):
            err.print(change.describe(), markup=False)
        if change.action == "keep" and change.ref.kind == "Namespace" and not change.note:
            err.print(f"note: namespace {change.ref.name} left the config; delete it yourself once it is empty")
    actions = ("create", "update", "adopt", "prune", "unchanged", "keep", "refuse")
    counts = {a: sum(c.action == a for c in changes) for a in actions}
    prefix = "would " if dry_run else ""
    err.print(prefix + (", ".join(f"{a} {n}" for a, n in counts.items() if n) or "nothing to do"), markup=False)


@app.command("apply")
def apply(
    config: ConfigArgument,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would change; change nothing.")] = False,
    prune: Annotated[
        bool, typer.Option("--prune/--no-prune", help="Delete quota objects the config no longer has (ours only).")
    ] = True,
    adopt: AdoptOption = None,
    drain_removed_teams: DrainOption = None,
    drain_timeout: DrainTimeoutOption = DRAIN_TIMEOUT,
) -> None:
    """Server-side apply of the config's queues, flavors, namespaces and RBAC; prune what the config dropped.

    Exit 3 (nothing changed) when an object of the config belongs to someone else (unless --adopt names it), or a
    team that left the config still has work (unless --drain-removed-teams says how to remove it); 4 when the
    drain or a ClusterQueue's deletion timed out."""
    takeover = Takeover(adopt or (), drain_removed_teams, drain_timeout)
    target = running_target(kubeconfig, context, sim)
    changes = sync_config(config, target, prune=prune, dry_run=dry_run, takeover=takeover)
    report(changes, dry_run)


@app.command("diff")
def diff(
    config: ConfigArgument,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    adopt: AdoptOption = None,
    output: Annotated[str, typer.Option("-o", "--output", help="text (one line a change), json or yaml.")] = "text",
) -> None:
    """What `quotas apply` would change. Exit 0: nothing; 1: changes pending; 3: apply would refuse (an object
    belongs to someone else); 2 or 5: error."""
    if output not in ("text", "json", "yaml"):
        raise UsageError(f"-o {output}: not an output format", hint="-o text, -o json or -o yaml")
    target = running_target(kubeconfig, context, sim, read_only=True)
    changes = sync_config(config, target, prune=True, dry_run=True, takeover=Takeover(adopt or ()))
    pending = [change for change in changes if change.action != "unchanged"]
    if output in ("json", "yaml"):
        print_document([change.as_json() for change in pending], "json" if output == "json" else "yaml")
    else:
        for change in pending:
            typer.echo(change.describe())
    raise typer.Exit(pending_code(changes))


# The default table fits 100 columns; the limits, which change rarely, are in `-o wide` (and always in JSON).
ExplainFormat = Literal["table", "wide", "json", "yaml"]


@app.command("explain")
def explain(
    team: Annotated[str | None, typer.Argument(help="Team (ClusterQueue) name; all teams when omitted.")] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    output: Annotated[
        ExplainFormat,
        typer.Option("-o", "--output", help="table (100 columns), wide (+ borrowing and lending limits), json, yaml."),
    ] = "table",
) -> None:
    """Per team and GPU type: nominal quota, used, borrowed, lent, admitted and pending workloads. With sharing
    groups, also per team and group: each slice it has a quota of (a MIG profile, or shared GPUs), in the resource
    column (as config.yaml names it: gpu, mig-1g.10gb, gpu.shared)."""
    with connect(kubeconfig, context, sim, read_only=True) as kube:
        require_kueue(kube)
        queues = kube.list(KUEUE_API, "ClusterQueue")
        gpus = capacity(health_view(kube.list("v1", "Node")))
    usage = [u for u in gpu_usage(queues) if team is None or team in (u.team, u.cluster_queue)]
    rows = [u.row() for u in usage]
    if team is not None and not rows:
        known = sorted({q["metadata"]["name"] for q in queues})
        raise UsageError(f"no ClusterQueue for team {team!r}", hint=f"teams on this cluster: {', '.join(known)}")
    columns = ["team", "flavor", "nominal", "used", "borrowed", "lent", "admitted_workloads", "pending_workloads"]
    if any(u.resource != GPU_RESOURCE for u in usage) and output in ("table", "wide"):
        columns.insert(2, "resource")  # slices beside whole GPUs: which one a row counts
        rows = [{**row, "resource": resource_key(row["resource"])} for row in rows]
    if output == "wide":
        columns[6:6] = ["borrowing_limit", "lending_limit"]
    print_rows(rows, columns, "table" if output == "wide" else output)
    if output in ("table", "wide"):  # quarantined GPUs still count in the quotas above: capacity the teams cannot use
        for line in gpus:
            sys.stdout.write(f"capacity: {line.describe()}\n")

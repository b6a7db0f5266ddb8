"""`konduktor-install quotas`: apply the rendered team quotas to a cluster, diff them, explain a team's usage."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from konduktor.cli.console import OutputFormat, err, print_rows
from konduktor.cli.quotas import ConfigArgument, load_checked
from konduktor.cli.target import KubeconfigOption, connect
from konduktor.config.model import Config
from konduktor.errors import ExitCode, PartialApply, PreflightFailed, UsageError
from konduktor.kube.client import Kube
from konduktor.kube.sync import WRITES, Change, selector_of, sync
from konduktor.quotas.removal import DrainPolicy, TeamWork, removed_teams, review_removals, team_work
from konduktor.quotas.render import CONFIG_LABEL, KUEUE_API, MANAGED_BY, MANAGED_BY_LABEL, RBAC_API, render
from konduktor.quotas.usage import team_usage
from konduktor.waiting import wait_until

app = typer.Typer(help="Apply team quotas to a cluster, show pending changes, explain a team's usage.")

# Kinds the quota renderer produces, in apply order (pruning goes in reverse).
QUOTA_KINDS = [
    ("v1", "Namespace"),
    (KUEUE_API, "WorkloadPriorityClass"),
    (KUEUE_API, "Topology"),
    (KUEUE_API, "ResourceFlavor"),
    (KUEUE_API, "Cohort"),
    (KUEUE_API, "ClusterQueue"),
    (KUEUE_API, "LocalQueue"),
    (RBAC_API, "RoleBinding"),
]


def owner_labels(config: Config) -> dict[str, str]:
    """The labels that make a quota object this config's (render puts them on every object)."""
    return {MANAGED_BY_LABEL: MANAGED_BY, CONFIG_LABEL: config.cluster.name}


AdoptOption = Annotated[
    list[str] | None,
    typer.Option(
        "--adopt",
        metavar="KIND/[NAMESPACE/]NAME",
        help="Take over an existing object that someone else owns, e.g. Namespace/team-c (repeatable). It is "
        "marked konduktor.ai/adopted-from and never deleted by Konduktor.",
    ),
]


def require_kueue(kube: Kube) -> None:
    """Kueue's CRDs must be served before quotas can be applied (the chart installs them)."""
    if kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "clusterqueues.kueue.x-k8s.io") is None:
        raise PreflightFailed(
            "Kueue is not installed on this cluster (no ClusterQueue CRD); nothing was applied",
            hint="install Konduktor first: konduktor-install up CONFIG",
        )


DrainOption = Annotated[
    DrainPolicy | None,
    typer.Option(
        "--drain-removed-teams",
        help="How to remove a team that left the config while it has work: wait (for its workloads to finish) or "
        "stop (stop its ClusterQueue: Kueue evicts them and admits no more). Without it, apply refuses.",
    ),
]
DrainTimeoutOption = Annotated[
    float,
    typer.Option(
        "--drain-timeout",
        min=1,
        help="Seconds to wait for a removed team's work to drain, then for its ClusterQueue to be deleted.",
    ),
]
DRAIN_TIMEOUT = 600.0
CONFIRM_TIMEOUT = 60.0


@dataclass(frozen=True)
class Takeover:
    """What a sync may do beyond its own objects: adopt the objects named (KIND/[NAMESPACE/]NAME), and remove a team
    that still has work as `drain_policy` says, waiting up to `drain_timeout` seconds. The default does neither."""

    adopt: Sequence[str] = ()
    drain_policy: DrainPolicy | None = None
    drain_timeout: float = DRAIN_TIMEOUT


NO_TAKEOVER = Takeover()


# The field manager of the stop: its own, so that applying a queue again (a team put back in the config after a
# stop that did not finish) can release the stop without touching the queue's other fields.
DRAIN_MANAGER = "konduktor-drain"


def stop_policy(team: str, policy: str | None) -> dict[str, object]:
    spec = {"spec": {"stopPolicy": policy}} if policy else {}
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": team}, **spec}


def restart_stopped(kube: Kube, config: Config) -> None:
    """A queue of the config that a drain stopped (its deletion did not finish) runs again: the drain's manager
    gives up the field, which Kueue then defaults to None."""
    for queue in kube.list(KUEUE_API, "ClusterQueue", label_selector=selector_of(owner_labels(config))):
        name = queue["metadata"]["name"]
        managers = {entry.get("manager") for entry in queue["metadata"].get("managedFields") or ()}
        if name in config.teams and DRAIN_MANAGER in managers:
            kube.apply(stop_policy(name, None), field_manager=DRAIN_MANAGER)
            err.print(f"restarted ClusterQueue {name}: it is in the config again", markup=False)


def removed_team_work(kube: Kube, teams: Sequence[str]) -> dict[str, TeamWork]:
    """The work of each ClusterQueue in `teams`, in two reads."""
    if not teams:
        return {}
    local_queues = kube.list(KUEUE_API, "LocalQueue")
    workloads = kube.list(KUEUE_API, "Workload")
    return {team: team_work(team, local_queues, workloads) for team in teams}


def drain(kube: Kube, teams: Sequence[str], policy: DrainPolicy, timeout: float) -> None:
    """Empties the removed teams' ClusterQueues: stopped first with `stop`; waits until no workload holds them."""
    if policy is DrainPolicy.STOP:
        for team in teams:
            kube.apply(stop_policy(team, "HoldAndDrain"), field_manager=DRAIN_MANAGER)
            err.print(f"stopped ClusterQueue {team} (stopPolicy HoldAndDrain): its workloads are evicted", markup=False)

    def unfinished() -> list[TeamWork]:
        work = removed_team_work(kube, teams).values()
        # A stopped queue's pending workloads never run: only what it admitted must go.
        return [w for w in work if (w.admitted if policy is DrainPolicy.STOP else w.busy)]

    err.print(f"waiting up to {timeout:.0f}s for the work of {', '.join(teams)} to drain", markup=False)
    wait_until(
        "the removed teams' work to drain",
        lambda: not unfinished(),
        timeout=timeout,
        interval=2,
        on_timeout=lambda: PartialApply(
            f"the removed teams still have work after {timeout:.0f}s: "
            + "; ".join(f"{w.cluster_queue}: {w.describe()}" for w in unfinished()),
            hint="wait longer (--drain-timeout), stop the work (--drain-removed-teams stop), or delete those jobs",
        ),
    )


def confirm_removed(kube: Kube, teams: Sequence[str], timeout: float) -> None:
    """A deleted ClusterQueue that stays Terminating is reported with the workloads that hold it, never left
    silently."""

    def remaining() -> list[str]:
        return [t for t in teams if kube.get(KUEUE_API, "ClusterQueue", t) is not None]

    def stuck() -> PartialApply:
        work = removed_team_work(kube, remaining())
        return PartialApply(
            "ClusterQueue(s) stuck Terminating (Kueue's finalizer waits for the workloads using their quota): "
            + "; ".join(f"{team}: {work[team].describe()}" for team in work),
            hint="stop them: re-run with --drain-removed-teams stop, or delete those jobs",
        )

    wait_until("the removed teams' ClusterQueues to be deleted", lambda: not remaining(), timeout, 1, stuck)


def sync_quotas(
    kube: Kube, config: Config, *, prune: bool, dry_run: bool, takeover: Takeover = NO_TAKEOVER
) -> list[Change]:
    """Sync the config's quota objects. A team that left the config is removed only when it has no work (admitted
    or pending workloads), or as `takeover.drain_policy` says; its ClusterQueue is confirmed gone."""
    require_kueue(kube)

    def review(changes: list[Change]) -> list[Change]:
        return review_removals(changes, removed_team_work(kube, removed_teams(changes)), takeover.drain_policy)

    def run(dry: bool) -> list[Change]:
        return sync(
            kube,
            render(config),
            QUOTA_KINDS,
            owner_labels(config),
            prune=prune,
            dry_run=dry,
            adopt=takeover.adopt,
            review=review,
            progress=lambda change: err.print(change.describe(), markup=False),
        )

    if dry_run:
        return run(dry=True)
    restart_stopped(kube, config)
    if takeover.drain_policy is not None:
        planned = run(dry=True)
        removed = removed_teams(planned)
        busy = [team for team, work in removed_team_work(kube, removed).items() if work.busy]
        if busy and not any(c.action == "refuse" for c in planned):
            drain(kube, busy, takeover.drain_policy, takeover.drain_timeout)
    changes = run(dry=False)
    # Once drained, Kueue lets a ClusterQueue go within seconds; one still there is held by new work.
    confirm_removed(kube, removed_teams(changes), min(takeover.drain_timeout, CONFIRM_TIMEOUT))
    return changes


def sync_config(
    config: Path, kubeconfig: Path | None, *, prune: bool, dry_run: bool, takeover: Takeover = NO_TAKEOVER
) -> list[Change]:
    """Validate the whole config, then sync its quotas with the target cluster."""
    loaded = load_checked(config)
    kube = connect(kubeconfig)
    try:
        return sync_quotas(kube, loaded.config, prune=prune, dry_run=dry_run, takeover=takeover)
    finally:
        kube.close()


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
    changes = sync_config(config, kubeconfig, prune=prune, dry_run=dry_run, takeover=takeover)
    report(changes, dry_run)


@app.command("diff")
def diff(config: ConfigArgument, kubeconfig: KubeconfigOption = None, adopt: AdoptOption = None) -> None:
    """What `quotas apply` would change. Exit 0: nothing; 1: changes pending; 3: apply would refuse (an object
    belongs to someone else); 2 or 5: error."""
    changes = sync_config(config, kubeconfig, prune=True, dry_run=True, takeover=Takeover(adopt or ()))
    for change in changes:
        if change.action != "unchanged":
            typer.echo(change.describe())
    raise typer.Exit(pending_code(changes))


def pending_code(changes: Sequence[Change]) -> int:
    """0: in sync; 1: changes pending; 3: `apply` would refuse them (someone else's object in the way)."""
    if any(c.action == "refuse" for c in changes):
        return ExitCode.CHECK_FAILED
    return ExitCode.NEGATIVE if any(c.action in (*WRITES, "prune") for c in changes) else ExitCode.OK


@app.command("explain")
def explain(
    team: Annotated[str | None, typer.Argument(help="Team (ClusterQueue) name; all teams when omitted.")] = None,
    kubeconfig: KubeconfigOption = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """Per team and GPU type: nominal quota, used, borrowed, lent, admitted and pending workloads."""
    kube = connect(kubeconfig)
    try:
        require_kueue(kube)
        queues = kube.list(KUEUE_API, "ClusterQueue")
    finally:
        kube.close()
    rows = [u.row() for u in team_usage(queues) if team is None or team in (u.team, u.cluster_queue)]
    if team is not None and not rows:
        known = sorted({q["metadata"]["name"] for q in queues})
        raise UsageError(f"no ClusterQueue for team {team!r}", hint=f"teams on this cluster: {', '.join(known)}")
    columns = [
        "team",
        "flavor",
        "nominal",
        "used",
        "borrowed",
        "lent",
        "borrowing_limit",
        "lending_limit",
        "admitted_workloads",
        "pending_workloads",
    ]
    print_rows(rows, columns, output)

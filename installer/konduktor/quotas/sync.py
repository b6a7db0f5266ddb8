"""Team quotas on a cluster: apply the config's objects, diff them, prune what it dropped, and remove them all.

A team that left the config is removed only when its ClusterQueue has no work, or as the user said (wait for the
work to drain, or stop the queue); its ClusterQueue is then confirmed gone, never left Terminating silently.
`remove_quota_objects` and `purge_namespaces` are what `down` removes: everything Konduktor created, whichever
config made it, and never what it adopted. `crd_losses` is what the release's uninstall would take beyond that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from konduktor.config.model import Config
from konduktor.errors import ExitCode, PartialApply, PreflightFailed
from konduktor.kube.client import Kube
from konduktor.kube.conditions import is_true
from konduktor.kube.sync import WRITES, Change, Ref, adoption_of, selector_of, sync
from konduktor.quotas.multikueue import FLEET_KINDS
from konduktor.quotas.removal import DrainPolicy, TeamWork, removed_teams, review_removals, team_work
from konduktor.quotas.render import MANAGED_BY, MANAGED_BY_LABEL, QUOTA_KINDS, KubeObject, owner_labels, render
from konduktor.vocabulary import HELM_NAMESPACE, HELM_RELEASE, KUEUE_API
from konduktor.waiting import wait_until

Say = Callable[[str], None]  # where a sync tells what it does, as it does it

DRAIN_TIMEOUT = 600.0
CONFIRM_TIMEOUT = 60.0
# The field manager of the stop: its own, so that applying a queue again (a team put back in the config after a
# stop that did not finish) can release the stop without touching the queue's other fields.
DRAIN_MANAGER = "konduktor-drain"
# Every quota object Konduktor created carries this label, whichever config made it: what `down` removes.
KONDUKTOR_OWNED = {MANAGED_BY_LABEL: MANAGED_BY}
CLUSTER_QUEUE_CRD = "clusterqueues.kueue.x-k8s.io"


def _quiet(_message: str) -> None:
    pass


def kueue_served(kube: Kube) -> bool:
    """Whether the cluster serves Kueue's API (the chart installs its CRDs): quota objects need it."""
    return kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", CLUSTER_QUEUE_CRD) is not None


def require_kueue(kube: Kube) -> None:
    """Kueue's CRDs must be served before quotas can be applied (the chart installs them)."""
    if not kueue_served(kube):
        raise PreflightFailed(
            "Kueue is not installed on this cluster (no ClusterQueue CRD); nothing was applied",
            hint="install Konduktor first: konduktor-install up CONFIG",
        )


@dataclass(frozen=True)
class Takeover:
    """What a sync may do beyond its own objects: adopt the objects named (KIND/[NAMESPACE/]NAME), and remove a team
    that still has work as `drain_policy` says, waiting up to `drain_timeout` seconds. The default does neither."""

    adopt: Sequence[str] = ()
    drain_policy: DrainPolicy | None = None
    drain_timeout: float = DRAIN_TIMEOUT


NO_TAKEOVER = Takeover()


@dataclass(frozen=True)
class QuotaSet:
    """The quota objects a sync applies on one cluster, in apply order, and the kinds it owns there (what it prunes):
    a single cluster's `render`, or one cluster's share of a fleet (`quotas.multikueue`)."""

    objects: Sequence[KubeObject]
    kinds: Sequence[tuple[str, str]] = QUOTA_KINDS


def stop_policy(team: str, policy: str | None) -> dict[str, object]:
    spec = {"spec": {"stopPolicy": policy}} if policy else {}
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": team}, **spec}


def restart_stopped(kube: Kube, config: Config, say: Say = _quiet) -> None:
    """A queue of the config that a drain stopped (its deletion did not finish) runs again: the drain's manager
    gives up the field, which Kueue then defaults to None."""
    for queue in kube.list(KUEUE_API, "ClusterQueue", label_selector=selector_of(owner_labels(config))):
        name = queue["metadata"]["name"]
        managers = {entry.get("manager") for entry in queue["metadata"].get("managedFields") or ()}
        if name in config.teams and DRAIN_MANAGER in managers:
            kube.apply(stop_policy(name, None), field_manager=DRAIN_MANAGER)
            say(f"restarted ClusterQueue {name}: it is in the config again")


def removed_team_work(kube: Kube, teams: Sequence[str]) -> dict[str, TeamWork]:
    """The work of each ClusterQueue in `teams`, in two reads."""
    if not teams:
        return {}
    local_queues = kube.list(KUEUE_API, "LocalQueue")
    workloads = kube.list(KUEUE_API, "Workload")
    return {team: team_work(team, local_queues, workloads) for team in teams}


def drain(kube: Kube, teams: Sequence[str], policy: DrainPolicy, timeout: float, say: Say = _quiet) -> None:
    """Empties the removed teams' ClusterQueues: stopped first with `stop`; waits until no workload holds them."""
    if policy is DrainPolicy.STOP:
        for team in teams:
            kube.apply(stop_policy(team, "HoldAndDrain"), field_manager=DRAIN_MANAGER)
            say(f"stopped ClusterQueue {team} (stopPolicy HoldAndDrain): its workloads are evicted")

    def unfinished() -> list[TeamWork]:
        work = removed_team_work(kube, teams).values()
        # A stopped queue's pending workloads never run: only what it admitted must go.
        return [w for w in work if (w.admitted if policy is DrainPolicy.STOP else w.busy)]

    say(f"waiting up to {timeout:.0f}s for the work of {', '.join(teams)} to drain")
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
    kube: Kube,
    config: Config,
    *,
    prune: bool,
    dry_run: bool,
    takeover: Takeover = NO_TAKEOVER,
    say: Say = _quiet,
    quotas: QuotaSet | None = None,
) -> list[Change]:
    """Sync the config's quota objects (`quotas`, by default the config rendered for one cluster); `say` hears each
    change as it is made. A team that left the config is removed only when it has no work (admitted or pending
    workloads), or as `takeover.drain_policy` says; its ClusterQueue is confirmed gone."""
    require_kueue(kube)
    wanted = quotas or QuotaSet(render(config))

    def review(changes: list[Change]) -> list[Change]:
        return review_removals(changes, removed_team_work(kube, removed_teams(changes)), takeover.drain_policy)

    def run(dry: bool) -> list[Change]:
        return sync(
            kube,
            wanted.objects,
            wanted.kinds,
            owner_labels(config),
            prune=prune,
            dry_run=dry,
            adopt=takeover.adopt,
            review=review,
            progress=lambda change: say(change.describe()),
        )

    if dry_run:
        return run(dry=True)
    restart_stopped(kube, config, say)
    if takeover.drain_policy is not None:
        planned = run(dry=True)
        removed = removed_teams(planned)
        busy = [team for team, work in removed_team_work(kube, removed).items() if work.busy]
        if busy and not any(c.action == "refuse" for c in planned):
            drain(kube, busy, takeover.drain_policy, takeover.drain_timeout, say)
    changes = run(dry=False)
    # Once drained, Kueue lets a ClusterQueue go within seconds; one still there is held by new work.
    confirm_removed(kube, removed_teams(changes), min(takeover.drain_timeout, CONFIRM_TIMEOUT))
    return changes


def wait_queues_active(kube: Kube, config: Config, timeout: float = 120) -> None:
    """Until every team's ClusterQueue is active (Kueue found its flavors, cohort and topology)."""
    teams = sorted(config.teams)

    def active(team: str) -> bool:
        return is_true(kube.get(KUEUE_API, "ClusterQueue", team), "Active")

    wait_until(
        "every team's ClusterQueue to be active",
        lambda: all(active(t) for t in teams),
        timeout=timeout,
        on_timeout=lambda: PartialApply(
            f"not active: {', '.join(t for t in teams if not active(t))}",
            hint="`kubectl get clusterqueue -o yaml` shows Kueue's reason (e.g. FlavorNotFound)",
        ),
    )


def plan_quotas(
    kube: Kube, config: Config, takeover: Takeover = NO_TAKEOVER, quotas: QuotaSet | None = None
) -> list[Change]:
    """What syncing the config would change; nothing on a cluster that does not serve Kueue yet (the chart that
    installs it comes first)."""
    if not kueue_served(kube):
        return []
    return sync_quotas(kube, config, prune=True, dry_run=True, takeover=takeover, quotas=quotas)


def pending_code(changes: Sequence[Change]) -> int:
    """0: in sync; 1: changes pending; 3: `apply` would refuse them (someone else's object in the way)."""
    if any(c.action == "refuse" for c in changes):
        return ExitCode.CHECK_FAILED
    return ExitCode.NEGATIVE if any(c.action in (*WRITES, "prune") for c in changes) else ExitCode.OK


@dataclass(frozen=True)
class Removal:
    deleted: tuple[Ref, ...] = ()
    kept: tuple[Ref, ...] = ()  # adopted objects: Konduktor did not create them, so it never deletes them


def remove_quota_objects(kube: Kube, dry_run: bool = False) -> Removal:
    """Every quota object Konduktor created, whichever config made it (a fleet's MultiKueue objects, worker identity
    and kubeconfig Secrets too), deleted in reverse apply order (with `dry_run`: those it would delete). Namespaces
    stay (they hold the teams' work; see `purge_namespaces`), and so do adopted objects."""
    served = kueue_served(kube)
    kinds = [(api, kind) for api, kind in FLEET_KINDS if kind != "Namespace" and (api != KUEUE_API or served)]
    changes = sync(kube, [], kinds, KONDUKTOR_OWNED, prune=True, dry_run=dry_run)
    return Removal(
        deleted=tuple(c.ref for c in changes if c.action == "prune"),
        kept=tuple(c.ref for c in changes if c.action == "keep"),
    )


@dataclass(frozen=True)
class CrdLoss:
    """A CRD a Helm release made from its templates, and how many of its objects `down` would not delete itself."""

    crd: str
    kind: str
    objects: int

    def __str__(self) -> str:
        return f"{self.objects} {self.kind} ({self.crd})"


def crd_losses(kube: Kube, release: str, namespace: str) -> list[CrdLoss]:
    """The CRDs that uninstalling the release deletes (a chart's templated CRDs, such as Kueue's; those of a
    `crds/` folder stay) that hold objects other than Konduktor's own quota objects: the API server deletes every
    object of a deleted CRD, Workloads and other users' queues included. Counted before `down` deletes anything."""
    losses = []
    for crd in kube.list("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
        annotations = crd["metadata"].get("annotations") or {}
        if (annotations.get(HELM_RELEASE), annotations.get(HELM_NAMESPACE)) != (release, namespace):
            continue
        spec = crd["spec"]
        version = next((v["name"] for v in spec["versions"] if v.get("served")), None)
        if version is None:
            continue
        objects = kube.list(f"{spec['group']}/{version}", spec["names"]["kind"])
        theirs = [o for o in objects if not _konduktors_own(o)]
        if theirs:
            losses.append(CrdLoss(crd["metadata"]["name"], spec["names"]["kind"], len(theirs)))
    return losses


def _konduktors_own(obj: dict[str, Any]) -> bool:
    """An object Konduktor created (not adopted), such as a quota object `down` deletes before the uninstall."""
    labels = obj["metadata"].get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY and adoption_of(obj) is None


def purge_namespaces(kube: Kube, also: Sequence[str] = (), dry_run: bool = False) -> Removal:
    """Deletes the namespaces Konduktor created, then those named in `also` (its own, which the chart does not
    own); adopted ones stay. With `dry_run`, only says which."""
    deleted: list[Ref] = []
    kept: list[Ref] = []
    for namespace in kube.list("v1", "Namespace", label_selector=selector_of(KONDUKTOR_OWNED)):
        (kept if adoption_of(namespace) is not None else deleted).append(Ref.of(namespace))
    deleted += [Ref("v1", "Namespace", name) for name in also if kube.get("v1", "Namespace", name) is not None]
    for ref in deleted if not dry_run else ():
        kube.delete("v1", "Namespace", ref.name)
    return Removal(tuple(deleted), tuple(kept))

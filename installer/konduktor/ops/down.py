"""`down`: what it would delete, and waiting (bounded) for what it deleted to be gone.

Deleting is asking: an object with finalizers stays Terminating until their owners let it go. Kueue keeps a
ClusterQueue (finalizer kueue.x-k8s.io/resource-in-use) while Workloads hold quota in it, and a deleted LocalQueue
leaves the jobs that waited in it pending with no queue. So `down` waits for each object it deleted, and names
those still there with why (their finalizers, the Workloads that hold them) and the jobs it left without a queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from konduktor.errors import UsageError
from konduktor.helm.release import NAMESPACE, RELEASE, uninstall
from konduktor.kube.client import Kube
from konduktor.kube.sync import Ref
from konduktor.ops.target import Confirm, Target
from konduktor.quotas.removal import referencing_workloads, why_not_gone
from konduktor.quotas.sync import Removal, crd_losses, kueue_served, purge_namespaces, remove_quota_objects
from konduktor.sim.cluster import SimCluster
from konduktor.vocabulary import KUEUE_API
from konduktor.waiting import poll_until

DOWN_TIMEOUT = 120.0


@dataclass(frozen=True)
class Stuck:
    """An object `down` deleted that is still there, and why."""

    ref: Ref
    why: str

    def describe(self) -> str:
        return f"{self.ref.kind} {self.ref.namespace + '/' if self.ref.namespace else ''}{self.ref.name}: {self.why}"


def _get(kube: Kube, ref: Ref) -> dict[str, Any] | None:
    return kube.get(ref.api_version, ref.kind, ref.name, ref.namespace)


def _workloads(kube: Kube) -> list[dict[str, Any]]:
    return kube.list(KUEUE_API, "Workload") if kueue_served(kube) else []


def wait_gone(kube: Kube, refs: Sequence[Ref], timeout: float) -> list[Stuck]:
    """Waits up to `timeout` seconds for the deleted objects to be gone; those still there, with why."""

    def remaining() -> list[Ref]:
        return [ref for ref in refs if _get(kube, ref) is not None]

    if not refs or poll_until(lambda: not remaining(), timeout, 1.0):
        return []
    workloads = _workloads(kube)
    cluster_queues = kube.list(KUEUE_API, "ClusterQueue") if kueue_served(kube) else []
    stuck = []
    for ref in remaining():
        obj = _get(kube, ref)
        if obj is not None:
            stuck.append(Stuck(ref, why_not_gone(obj, workloads, cluster_queues)))
    return stuck


def stranded(local_queues: Iterable[Ref], workloads: Iterable[Mapping[str, Any]]) -> list[str]:
    """namespace/name (queue) of the unfinished, unadmitted Workloads that wait in one of the (deleted) LocalQueues:
    they stay pending until a LocalQueue of that name exists again."""
    queues = {(ref.namespace, ref.name) for ref in local_queues}
    found = []
    for workload in workloads:
        meta, status = workload["metadata"], workload.get("status", {})
        finished = any(
            c.get("type") == "Finished" and c.get("status") == "True" for c in status.get("conditions") or ()
        )
        queue = workload.get("spec", {}).get("queueName")
        if not finished and not status.get("admission") and (meta.get("namespace"), queue) in queues:
            found.append(f"{meta.get('namespace')}/{meta['name']} (LocalQueue {queue})")
    return sorted(found)


def stranded_by(kube: Kube, deleted: Iterable[Ref]) -> list[str]:
    return stranded([ref for ref in deleted if ref.kind == "LocalQueue"], _workloads(kube))


def holding(kube: Kube, refs: Iterable[Ref]) -> dict[str, tuple[str, ...]]:
    """ClusterQueue -> the Workloads holding quota in it, for those of `refs` that have some: its deletion will wait
    for them."""
    cluster_queues = [ref.name for ref in refs if ref.kind == "ClusterQueue"]
    workloads = _workloads(kube) if cluster_queues else []
    found = {name: referencing_workloads(name, workloads) for name in cluster_queues}
    return {name: held for name, held in found.items() if held}


@dataclass(frozen=True)
class DownPlan:
    """What `down` would do: delete these quota objects and namespaces, keep the adopted ones, wait for the
    ClusterQueues that Workloads hold, and leave these jobs pending without their queue."""

    deleted: tuple[Ref, ...]
    kept: tuple[Ref, ...]
    held: Mapping[str, tuple[str, ...]]
    strands: tuple[str, ...]


def plan_down(kube: Kube, namespaces: Sequence[str] | None) -> DownPlan:
    """`down --dry-run`: reads only. `namespaces`: those `--purge` adds to Konduktor's labelled ones (None: no
    purge)."""
    quotas = remove_quota_objects(kube, dry_run=True)
    purged = purge_namespaces(kube, also=namespaces, dry_run=True) if namespaces is not None else Removal()
    return DownPlan(
        (*quotas.deleted, *purged.deleted),
        (*quotas.kept, *purged.kept),
        holding(kube, quotas.deleted),
        tuple(stranded_by(kube, quotas.deleted)),
    )


def lost_with_crds(kube: Kube, *, delete_crds: bool) -> str:
    """What the uninstall would delete with the release's CRDs that Konduktor did not create, in words (empty:
    nothing); refused (bad input, nothing changed) unless `delete_crds`."""
    losses = crd_losses(kube, RELEASE, NAMESPACE)
    lost = ", ".join(map(str, losses))
    if losses and not delete_crds:
        raise UsageError(
            f"down would delete the CRDs of release {RELEASE} and with them objects Konduktor did not create: {lost}",
            hint="keep a copy of what you need (kubectl get workloads -A -o yaml), then add --delete-crds; "
            "to change quotas, `quotas apply` or `up` is enough",
        )
    return lost


@dataclass(frozen=True)
class DownResult:
    """What `down` did: whether a release was uninstalled, the quota objects and namespaces it deleted (and those
    it kept: adopted), what it deleted that is still there, and the jobs it left pending without their queue."""

    uninstalled: bool
    quotas: Removal
    namespaces: Removal
    stuck: list[Stuck]
    strands: list[str]


def take_down(
    kube: Kube, target: Target, *, purge: bool, lost: str, timeout: float, confirm: Confirm | None
) -> DownResult:
    """The quota objects Konduktor owns, the release (and with it, `lost`: what its CRDs held), and with `purge` the
    namespaces; then a wait of up to `timeout` seconds for them to be gone. A real cluster is named to `confirm`
    first."""
    if confirm is not None and not target.simulated:
        also = " and delete its namespaces" if purge else ""
        crds = f", deleting with its CRDs {lost}" if lost else ""
        confirm(f"remove Konduktor from context {kube.context} ({kube.server}){also}{crds}?")
    quotas = remove_quota_objects(kube)
    uninstalled = uninstall(target.kubeconfig, RELEASE, NAMESPACE, target.toolbox(), target.context)
    if target.sim is not None:  # the chart's processes go with it
        SimCluster(target.sim).platform.ensure(kube)
    namespaces = purge_namespaces(kube, also=(NAMESPACE,)) if purge else Removal()
    stuck = wait_gone(kube, [*quotas.deleted, *namespaces.deleted], timeout)
    return DownResult(uninstalled, quotas, namespaces, stuck, stranded_by(kube, quotas.deleted))

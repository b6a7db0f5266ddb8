"""A team leaving the config while it still has work: which Workloads its ClusterQueue holds (admitted) or will
be asked to admit (pending), and the GPUs they hold, from the objects the API returned.

Deleting a ClusterQueue that admitted work leaves it Terminating (Kueue's finalizer holds it while workloads use
its quota), and deleting a team's LocalQueue strands its pending workloads ("LocalQueue default doesn't exist").
So a removal is only planned as a prune when the team has no work, or when the user said how to drain it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from konduktor.config.quantity import parse_quantity
from konduktor.kube.sync import Change
from konduktor.vocabulary import GPU_RESOURCE

CLUSTER_QUEUE = "ClusterQueue"


class DrainPolicy(StrEnum):
    """How to remove a team that still has work."""

    WAIT = "wait"  # wait (bounded) until its workloads have finished
    STOP = "stop"  # stop its ClusterQueue (stopPolicy HoldAndDrain): Kueue evicts them and admits no more


@dataclass(frozen=True)
class TeamWork:
    cluster_queue: str
    admitted: tuple[str, ...] = ()  # namespace/name of Workloads holding the queue's quota
    pending: tuple[str, ...] = ()  # namespace/name of Workloads waiting in the queue's LocalQueues
    gpus: int = 0  # held by the admitted ones

    @property
    def busy(self) -> bool:
        return bool(self.admitted or self.pending)

    def describe(self) -> str:
        parts = []
        if self.admitted:
            parts.append(f"{len(self.admitted)} admitted holding {self.gpus} GPUs ({', '.join(self.admitted)})")
        if self.pending:
            parts.append(f"{len(self.pending)} pending ({', '.join(self.pending)})")
        return "workloads: " + "; ".join(parts) if parts else "no workloads"


def _conditions(workload: Mapping[str, Any]) -> dict[str, str]:
    return {c.get("type", ""): c.get("status", "") for c in (workload.get("status") or {}).get("conditions") or []}


def _gpus(workload: Mapping[str, Any]) -> int:
    """GPUs a Workload's admission assigned: its pod sets' resource usage."""
    total = 0
    for assignment in workload.get("status", {}).get("admission", {}).get("podSetAssignments", []):
        usage = (assignment.get("resourceUsage") or {}).get(GPU_RESOURCE)
        total += int(parse_quantity(str(usage))) if usage is not None else 0
    return total


def team_work(
    cluster_queue: str, local_queues: Iterable[Mapping[str, Any]], workloads: Iterable[Mapping[str, Any]]
) -> TeamWork:
    """The unfinished Workloads of one ClusterQueue: admitted (quota reserved in it) or pending in one of its
    LocalQueues."""
    feeds = {
        (q["metadata"].get("namespace"), q["metadata"]["name"])
        for q in local_queues
        if q.get("spec", {}).get("clusterQueue") == cluster_queue
    }
    admitted, pending, gpus = [], [], 0
    for workload in workloads:
        meta, conditions = workload["metadata"], _conditions(workload)
        if conditions.get("Finished") == "True":
            continue
        name = f"{meta.get('namespace')}/{meta['name']}"
        admission = workload.get("status", {}).get("admission") or {}
        if admission.get("clusterQueue") == cluster_queue and conditions.get("QuotaReserved") == "True":
            admitted.append(name)
            gpus += _gpus(workload)
        elif not admission and (meta.get("namespace"), workload.get("spec", {}).get("queueName")) in feeds:
            pending.append(name)
    return TeamWork(cluster_queue, tuple(sorted(admitted)), tuple(sorted(pending)), gpus)


def removed_teams(changes: Sequence[Change]) -> list[str]:
    """The ClusterQueues a sync deletes."""
    return [c.ref.name for c in changes if c.action == "prune" and c.ref.kind == CLUSTER_QUEUE]


def review_removals(changes: Sequence[Change], work: Mapping[str, TeamWork], drain: DrainPolicy | None) -> list[Change]:
    """The changes with each removed team's work named: a busy team's ClusterQueue is refused unless `drain`
    says how to remove it."""
    reviewed = []
    for change in changes:
        found = work.get(change.ref.name) if change.ref.kind == CLUSTER_QUEUE and change.action == "prune" else None
        if found is None or not found.busy:
            reviewed.append(change)
        elif drain is None:
            why = f"team still has {found.describe()}; remove it with --drain-removed-teams wait|stop"
            reviewed.append(Change("refuse", change.ref, (), why))
        else:
            how = "after they finish" if drain is DrainPolicy.WAIT else "after stopping its queue (they are evicted)"
            reviewed.append(Change("prune", change.ref, (), f"{found.describe()}; deleted {how}"))
    return reviewed


# Kueue's finalizer on a ClusterQueue (and a ResourceFlavor, a Cohort) while something still uses it.
IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"


def referencing_workloads(cluster_queue: str, workloads: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """namespace/name of the unfinished Workloads whose admission (quota reservation) names the ClusterQueue: what
    Kueue's finalizer waits for. A suspended job's Workload keeps its admission until Kueue evicts it."""
    found = []
    for workload in workloads:
        if _conditions(workload).get("Finished") == "True":
            continue
        admission = workload.get("status", {}).get("admission") or {}
        if admission.get("clusterQueue") == cluster_queue:
            meta = workload["metadata"]
            found.append(f"{meta.get('namespace')}/{meta['name']}")
    return tuple(sorted(found))


def queue_users(obj: Mapping[str, Any], cluster_queues: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The ClusterQueues that use a ResourceFlavor (in a resource group) or a Cohort (as theirs): what Kueue's
    finalizer on it waits for."""
    kind, name = obj.get("kind"), obj.get("metadata", {}).get("name")
    users = []
    for queue in cluster_queues:
        spec = queue.get("spec", {})
        flavors = {f.get("name") for group in spec.get("resourceGroups") or () for f in group.get("flavors") or ()}
        if (kind == "ResourceFlavor" and name in flavors) or (kind == "Cohort" and spec.get("cohortName") == name):
            users.append(queue["metadata"]["name"])
    return tuple(sorted(users))


def why_not_gone(
    obj: Mapping[str, Any], workloads: Iterable[Mapping[str, Any]], cluster_queues: Iterable[Mapping[str, Any]] = ()
) -> str:
    """Why an object that was deleted is still there, in words: Terminating and its finalizers, with what a
    ClusterQueue's Kueue finalizer waits for (the Workloads holding quota in it; for a ResourceFlavor or a Cohort,
    the ClusterQueues still using it), or a Namespace's conditions."""
    meta = obj.get("metadata", {})
    if not meta.get("deletionTimestamp"):
        return "not deleted (it was created again, or the deletion did not reach it)"
    finalizers = list(meta.get("finalizers") or ())
    said = "Terminating" + (f", finalizer {', '.join(finalizers)}" if finalizers else "")
    if obj.get("kind") == CLUSTER_QUEUE and IN_USE_FINALIZER in finalizers:
        holders = referencing_workloads(meta.get("name", ""), workloads)
        if holders:
            said += f": {len(holders)} workloads still reference it: {', '.join(holders)}"
    users = queue_users(obj, cluster_queues) if IN_USE_FINALIZER in finalizers else ()
    if users:
        said += f": ClusterQueue {', '.join(users)} still uses it"
    if obj.get("kind") == "Namespace":
        conditions = obj.get("status", {}).get("conditions") or ()
        said += "".join(f": {c.get('message') or c.get('reason')}" for c in conditions if c.get("status") == "True")
    return said

"""A team leaving the config: its admitted and pending work, and how a sync plans its removal."""

from __future__ import annotations

from typing import Any

from konduktor.kube.sync import Change, Ref
from konduktor.ops.down import stranded
from konduktor.quotas.removal import DrainPolicy, TeamWork, review_removals, team_work, why_not_gone

KUEUE = "kueue.x-k8s.io/v1beta2"


def local_queue(namespace: str, cluster_queue: str, name: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue}}


def workload(
    name: str, namespace: str, queue: str = "default", admitted_to: str | None = None, gpus: int = 0, **conditions: str
) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": t, "status": s} for t, s in conditions.items()]}
    if admitted_to:
        status["admission"] = {
            "clusterQueue": admitted_to,
            "podSetAssignments": [{"name": "main", "resourceUsage": {"nvidia.com/gpu": str(gpus), "cpu": "1"}}],
        }
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"queueName": queue}, "status": status}


def test_team_work_counts_admitted_gpus_and_pending_workloads_of_its_queues_only() -> None:
    queues = [local_queue("team-b", "team-b"), local_queue("team-a", "team-a")]
    workloads = [
        workload("run-1", "team-b", admitted_to="team-b", gpus=8, QuotaReserved="True", Admitted="True"),
        workload("run-2", "team-b", admitted_to="team-b", gpus=3, QuotaReserved="True"),
        workload("waits", "team-b"),
        workload("done", "team-b", admitted_to="team-b", gpus=8, QuotaReserved="True", Finished="True"),
        workload("other-team", "team-a", admitted_to="team-a", gpus=5, QuotaReserved="True"),
        workload("other-queue", "team-b", queue="not-ours"),
    ]
    work = team_work("team-b", queues, workloads)
    assert work == TeamWork("team-b", ("team-b/run-1", "team-b/run-2"), ("team-b/waits",), 11)
    assert (
        work.describe()
        == "workloads: 2 admitted holding 11 GPUs (team-b/run-1, team-b/run-2); 1 pending (team-b/waits)"
    )
    assert not team_work("team-c", queues, workloads).busy


def test_a_busy_team_is_refused_unless_told_how_to_drain_it() -> None:
    queue = Ref(KUEUE, "ClusterQueue", "team-b")
    lq = Ref(KUEUE, "LocalQueue", "default", "team-b")
    changes = [Change("prune", lq), Change("prune", queue)]
    busy = {"team-b": TeamWork("team-b", ("team-b/run-1",), (), 8)}
    refused = review_removals(changes, busy, None)
    assert [c.action for c in refused] == ["prune", "refuse"]
    assert "team-b/run-1" in refused[1].note and "--drain-removed-teams" in refused[1].note
    stopped = review_removals(changes, busy, DrainPolicy.STOP)
    assert [c.action for c in stopped] == ["prune", "prune"] and "holding 8 GPUs" in stopped[1].note
    idle = review_removals(changes, {"team-b": TeamWork("team-b")}, None)
    assert idle == changes


def test_a_deleted_queue_still_there_is_explained_with_the_workloads_that_hold_it() -> None:
    """`down` names what it deleted that is still there, and why: Kueue keeps a ClusterQueue while Workloads hold
    quota in it."""
    terminating = {"deletionTimestamp": "2027-01-15T07:00:00Z", "finalizers": ["kueue.x-k8s.io/resource-in-use"]}
    queue = {"kind": "ClusterQueue", "metadata": {"name": "team-a", **terminating}}
    workloads = [
        workload("job-b", "team-a", admitted_to="team-a", QuotaReserved="True"),
        workload("job-a", "team-a", admitted_to="team-a"),  # suspended, its admission kept
        workload("done", "team-a", admitted_to="team-a", Finished="True"),
        workload("other", "team-b", admitted_to="team-b"),
    ]
    assert why_not_gone(queue, workloads) == (
        "Terminating, finalizer kueue.x-k8s.io/resource-in-use: 2 workloads still reference it: "
        "team-a/job-a, team-a/job-b"
    )
    namespace = {
        "kind": "Namespace",
        "metadata": {"name": "team-a", "deletionTimestamp": "2027-01-15T07:00:00Z"},
        "status": {"conditions": [{"type": "NamespaceContentRemaining", "status": "True", "message": "pods: 2"}]},
    }
    assert why_not_gone(namespace, []) == "Terminating: pods: 2"
    assert why_not_gone({"kind": "LocalQueue", "metadata": {"name": "default"}}, []).startswith("not deleted")
    # Kueue keeps a ResourceFlavor (and a Cohort) while a ClusterQueue uses it.
    queue["spec"] = {"cohortName": "lab", "resourceGroups": [{"flavors": [{"name": "h100"}]}]}
    flavor = {"kind": "ResourceFlavor", "metadata": {"name": "h100", **terminating}}
    assert why_not_gone(flavor, workloads, [queue]) == (
        "Terminating, finalizer kueue.x-k8s.io/resource-in-use: ClusterQueue team-a still uses it"
    )
    cohort = {"kind": "Cohort", "metadata": {"name": "lab", **terminating}}
    assert why_not_gone(cohort, workloads, [queue]).endswith(": ClusterQueue team-a still uses it")


def test_jobs_waiting_in_a_deleted_local_queue_are_named_as_stranded() -> None:
    deleted = [Ref(KUEUE, "LocalQueue", "default", "team-a")]
    workloads = [
        workload("waits", "team-a"),
        workload("runs", "team-a", admitted_to="team-a"),
        workload("elsewhere", "team-b"),
        workload("over", "team-a", Finished="True"),
    ]
    assert stranded(deleted, workloads) == ["team-a/waits (LocalQueue default)"]

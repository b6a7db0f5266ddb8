"""`konduktor why` and `konduktor queue`, the pure core: each explanation from Kueue's objects and the published
capacity, on examples/config.yaml's shape (two teams, 20 GPUs each, 4 nodes of 10 H100s)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from konduktor.gpu.kernel_log import parse_line
from konduktor.health.affected import AffectedWorkload, ObjectRef, owner_message
from konduktor.health.classify import classify_report
from konduktor.health.settings import HealthSettings
from konduktor.queueing.capacity import (
    Capacity,
    NodeCapacity,
    Quarantine,
    from_json,
    node_capacity,
    summarize,
    to_json,
)
from konduktor.queueing.explain import (
    as_json,
    node_requeues,
    pending_order,
    running_jobs,
    why,
    with_pod_nodes,
    with_policy,
    with_requeues,
)
from konduktor.quotas.usage import TeamUsage

LOCAL_QUEUES = {("team-a", "default"): "team-a", ("team-b", "default"): "team-b"}


def usage(team: str, used: int = 0, borrowed: int = 0, lent: int = 0) -> TeamUsage:
    return TeamUsage(
        team=team,
        cluster_queue=team,
        cohort="gpu-lab",
        flavor="h100",
        resource="nvidia.com/gpu",
        nominal=Fraction(20),
        borrowing_limit=Fraction(10),
        lending_limit=Fraction(16),
        used=Fraction(used),
        borrowed=Fraction(borrowed),
        lent=Fraction(lent),
        admitted_workloads=0,
        pending_workloads=0,
    )


def nodes(*free: int, gpus: int = 10, quarantined: tuple[int, ...] = ()) -> tuple[NodeCapacity, ...]:
    return tuple(
        NodeCapacity(
            name=f"gpu-h100-{i:04d}",
            flavor="h100",
            gpus=gpus,
            free=f,
            schedulable=True,
            quarantine=Quarantine("Xid 79: GPU fell off the bus", "2026-11-23T19:00:00Z") if i in quarantined else None,
        )
        for i, f in enumerate(free)
    )


def published(found: tuple[NodeCapacity, ...], queues: tuple[TeamUsage, ...], published_at: str = "") -> Capacity:
    """What the publisher makes of these nodes and queues."""
    return replace(summarize(found, queues), published_at=published_at)


def workload(
    name: str,
    *,
    gpus: int,
    pods: int = 1,
    namespace: str = "team-a",
    queue: str = "default",
    priority: int = 1000,
    created: str = "2026-11-23T20:00:00Z",
    conditions: list[dict[str, Any]] | None = None,
    limits_only: bool = False,
) -> dict[str, Any]:
    # As Kueue copies a Job's pod template: GPUs as the job gives them (limits only, in NVIDIA's examples).
    resources = {"limits" if limits_only else "requests": {"nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {
            "name": f"job-{name}-1234",
            "namespace": namespace,
            "uid": name,
            "creationTimestamp": created,
            "ownerReferences": [{"kind": "Job", "name": name}],
        },
        "spec": {
            "queueName": queue,
            "priority": priority,
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": {"spec": {"containers": [{"resources": resources}]}},
                }
            ],
        },
        "status": {"conditions": conditions or []},
    }


ADMITTED = [
    {"type": "QuotaReserved", "status": "True"},
    {"type": "Admitted", "status": "True"},
]
FINISHED = [*ADMITTED, {"type": "Finished", "status": "True", "message": "Job finished successfully"}]


def explanation(target: dict[str, Any], others: list[dict[str, Any]], capacity: Capacity | None) -> dict[str, Any]:
    everything = [target, *others]
    pending = pending_order(everything, LOCAL_QUEUES)
    found = why(
        target["metadata"]["ownerReferences"][0]["name"],
        target["metadata"]["namespace"],
        target,
        workloads=everything,
        local_queues=LOCAL_QUEUES,
        capacity=capacity,
        pending=pending,
    )
    return as_json(found)


def kinds(answer: dict[str, Any]) -> list[str]:
    return [r["kind"] for r in answer["reasons"]]


def test_order_is_priority_then_queue_time_per_cluster_queue() -> None:
    late_urgent = workload("c", gpus=1, priority=10000, created="2026-11-23T20:05:00Z")
    early = workload("a", gpus=1, created="2026-11-23T20:01:00Z")
    late = workload("b", gpus=1, created="2026-11-23T20:02:00Z")
    # Requeued at the back after a PodsReady timeout: its queue time is the eviction's.
    evicted = workload(
        "d",
        gpus=1,
        created="2026-11-23T19:00:00Z",
        conditions=[
            {
                "type": "Evicted",
                "status": "True",
                "reason": "PodsReadyTimeout",
                "lastTransitionTime": "2026-11-23T20:03:00Z",
            }
        ],
    )
    other_team = workload("e", gpus=1, namespace="team-b")
    running = workload("f", gpus=1, conditions=ADMITTED)
    wrong_queue = workload("g", gpus=1, queue="nope")
    order = pending_order([late, evicted, early, other_team, running, wrong_queue, late_urgent], LOCAL_QUEUES)
    team_a = [(p.job, p.position) for p in order if p.namespace == "team-a"]
    assert team_a == [("c", 0), ("a", 1), ("b", 2), ("d", 3)]
    assert [(p.job, p.position) for p in order if p.namespace == "team-b"] == [("e", 0)]


def test_admitted_and_finished() -> None:
    capacity = published(nodes(10, 10, 10, 10), (usage("team-a", used=8), usage("team-b")))
    assert explanation(workload("run", gpus=8, conditions=ADMITTED), [], capacity)["state"] == "admitted"
    assert explanation(workload("done", gpus=8, conditions=FINISHED), [], capacity)["state"] == "finished"


def test_admitted_on_borrowed_gpus_warns_of_reclaim() -> None:
    capacity = published(nodes(0, 0, 0, 10), (usage("team-a", used=30, borrowed=10), usage("team-b", lent=10)))
    answer = explanation(workload("big", gpus=10, conditions=ADMITTED), [], capacity)
    assert answer["state"] == "admitted" and "borrowing" in kinds(answer)


def test_a_job_dispatched_by_multikueue_names_its_worker_cluster() -> None:
    # On the manager: Kueue writes the worker that admitted it into the Workload's status.
    dispatched = workload("train", gpus=8, conditions=ADMITTED)
    dispatched["status"]["clusterName"] = "west"
    answer = explanation(dispatched, [], None)
    assert answer["state"] == "admitted" and answer["workerCluster"] == "west"
    assert "dispatched" in kinds(answer) and "worker cluster west" in answer["reasons"][-1]["message"]
    assert [r.cluster for r in running_jobs([dispatched])] == ["west"]


def test_a_job_waiting_for_a_worker_says_where_it_was_offered_and_holds_its_quota() -> None:
    waiting = workload("spill", gpus=8, conditions=[{"type": "QuotaReserved", "status": "True"}])
    waiting["status"]["nominatedClusterNames"] = ["west"]
    waiting["status"]["admissionChecks"] = [{"name": "multikueue-team-a", "state": "Pending", "message": ""}]
    answer = explanation(waiting, [], None)
    assert answer["state"] == "pending" and answer["workerCluster"] is None
    (reason,) = answer["reasons"]
    assert reason["kind"] == "dispatching" and "offered to west" in reason["message"]
    assert answer["remedies"]
    # It holds its quota on the manager: not in Kueue's pending queue, and not running anywhere yet.
    assert pending_order([waiting], LOCAL_QUEUES) == [] and running_jobs([waiting]) == []


def test_another_admission_check_is_named_as_it_is() -> None:
    waiting = workload("provisioned", gpus=8, conditions=[{"type": "QuotaReserved", "status": "True"}])
    waiting["status"]["admissionChecks"] = [{"name": "capacity", "state": "Retry", "message": "no capacity yet"}]
    (reason,) = explanation(waiting, [], None)["reasons"]
    assert reason == {"kind": "admission-check", "message": "admission check capacity is Retry: no capacity yet"}


def test_quota_used_by_the_teams_own_jobs_names_them() -> None:
    # team-a holds its 20 and may borrow 10, but team-b uses all of its own: nothing to borrow.
    capacity = published(nodes(0, 0, 0, 0), (usage("team-a", used=20), usage("team-b", used=20)))
    running = [workload(f"r{i}", gpus=10, conditions=ADMITTED) for i in range(2)]
    answer = explanation(workload("greedy", gpus=8), running, capacity)
    assert answer["state"] == "pending" and answer["position"] == 0
    quota = next(r["message"] for r in answer["reasons"] if r["kind"] == "quota")
    assert "uses 20 of its 20" in quota and "r0 (10 GPUs)" in quota and "r1 (10 GPUs)" in quota
    assert "cohort-busy" in kinds(answer)
    assert answer["remedies"]


def test_borrowing_limit_reached() -> None:
    capacity = published(nodes(0, 0, 0, 10), (usage("team-a", used=30, borrowed=10), usage("team-b", used=0, lent=10)))
    answer = explanation(workload("more", gpus=8), [workload("r", gpus=30, conditions=ADMITTED)], capacity)
    assert answer["state"] == "pending" and "borrowing-limit" in kinds(answer)


def test_borrowers_of_the_teams_gpus_will_be_preempted() -> None:
    # team-b borrows 10 of team-a's GPUs; team-a uses 0 and asks 30: more than the 20 left unborrowed.
    capacity = published(nodes(0, 0, 10, 10), (usage("team-a", lent=10), usage("team-b", used=30, borrowed=10)))
    answer = explanation(workload("reclaim", gpus=10, pods=3), [], capacity)
    reclaim = next(r["message"] for r in answer["reasons"] if r["kind"] == "reclaim")
    assert "team-b borrows 10 GPUs" in reclaim and "preempting" in reclaim


def test_a_preempted_job_is_told_when_and_why() -> None:
    """Kueue's Preempted condition on a requeued workload, in words; an unknown reason still says it was preempted."""
    capacity = published(nodes(0, 0, 0, 0), (usage("team-a", used=20), usage("team-b", used=20)))
    at = "2026-11-23T21:00:00Z"
    for reason, words in [
        ("InCohortReclamation", "to give the GPUs it borrowed back to the team that lent them"),
        ("InClusterQueue", "for a higher-priority job of your own team"),
        ("SomethingNew", "for another workload"),
    ]:
        preempted = [{"type": "Preempted", "status": "True", "reason": reason, "lastTransitionTime": at}]
        answer = explanation(workload("borrower", gpus=10, conditions=preempted), [], capacity)
        message = next(r["message"] for r in answer["reasons"] if r["kind"] == "preempted")
        assert answer["state"] == "pending" and message == f"Kueue preempted it at {at} {words} ({reason})"
    # Kueue's Evicted condition alone says the same; an eviction for another reason is no preemption.
    evicted = [{"type": "Evicted", "status": "True", "reason": "Preempted", "lastTransitionTime": at}]
    assert "preempted" in kinds(explanation(workload("b", gpus=10, conditions=evicted), [], capacity))
    timeout = [{"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout", "lastTransitionTime": at}]
    assert "preempted" not in kinds(explanation(workload("b", gpus=10, conditions=timeout), [], capacity))


def test_fragmentation_free_gpus_spread_over_nodes() -> None:
    capacity = published(nodes(7, 7, 7, 7), (usage("team-a", used=0), usage("team-b", used=12)))
    answer = explanation(workload("eight", gpus=8), [], capacity)
    assert answer["state"] == "pending"
    message = next(r["message"] for r in answer["reasons"] if r["kind"] == "fragmentation")
    assert "28 GPUs of h100 are free, but at most 7 on one node" in message
    # One node with 8 free: nothing holds it back.
    answer = explanation(workload("eight", gpus=8), [], published(nodes(8, 7, 7, 7), capacity.queues))
    assert "fragmentation" not in kinds(answer)


def test_quarantined_nodes_shrink_the_capacity() -> None:
    capacity = published(nodes(10, 0, 0, 0, quarantined=(0,)), (usage("team-a"), usage("team-b", used=20)))
    answer = explanation(workload("waits", gpus=8), [], capacity)
    assert answer["state"] == "pending"
    quarantine = next(r["message"] for r in answer["reasons"] if r["kind"] == "quarantine")
    assert "gpu-h100-0000" in quarantine and "Xid 79" in quarantine and "2026-11-23T19:00:00Z" in quarantine
    assert "capacity" in kinds(answer)


def test_a_pod_bigger_than_every_node_never_fits() -> None:
    capacity = published(nodes(10, 10, 10, 10), (usage("team-a"), usage("team-b")))
    answer = explanation(workload("twelve", gpus=12), [], capacity)
    assert answer["state"] == "never-fit"
    assert "asks 12 GPUs, but no h100 node has more than 10" in answer["reasons"][0]["message"]
    assert "at most 10 GPUs per pod" in answer["remedies"][0]


def test_more_than_quota_and_borrowing_never_fits() -> None:
    capacity = published(nodes(10, 10, 10, 10), (usage("team-a"), usage("team-b")))
    answer = explanation(workload("huge", gpus=8, pods=4), [], capacity)
    assert answer["state"] == "never-fit" and "more than the team may ever hold" in answer["reasons"][0]["message"]


def test_a_flavor_no_node_provides_never_fits() -> None:
    capacity = published((), (usage("team-a"), usage("team-b")))
    answer = explanation(workload("nowhere", gpus=1), [], capacity)
    assert answer["state"] == "never-fit" and answer["reasons"][0]["message"] == "no node provides GPU type h100"


def test_wrong_queue_label() -> None:
    capacity = published(nodes(10), (usage("team-a"),))
    answer = explanation(workload("lost", gpus=1, queue="research"), [], capacity)
    assert answer["state"] == "pending" and kinds(answer) == ["wrong-queue"]
    assert "kueue.x-k8s.io/queue-name: default" in answer["remedies"][0]


def test_no_workload_without_queue_label() -> None:
    found = why("bare", "scratch", None, workloads=[], local_queues=LOCAL_QUEUES, capacity=None, pending=[])
    answer = as_json(found)
    assert answer["state"] == "not-queued" and kinds(answer) == ["missing-queue-label"]
    assert "has no LocalQueue" in answer["reasons"][0]["message"]


def test_position_counts_what_comes_first() -> None:
    capacity = published(nodes(10, 10, 10, 10), (usage("team-a", used=20), usage("team-b", used=20)))
    first = workload("first", gpus=4, created="2026-11-23T20:00:00Z")
    second = workload("second", gpus=4, created="2026-11-23T20:01:00Z")
    answer = explanation(second, [first], capacity)
    assert answer["position"] == 1 and answer["aheadGpus"] == 4 and "position" in kinds(answer)


def test_capacity_from_nodes_pods_and_flavors_round_trips() -> None:
    flavor = {"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": "H100"}}}
    node = {
        "metadata": {
            "name": "n1",
            "labels": {"nvidia.com/gpu.product": "H100"},
            "annotations": {"konduktor.ai/quarantine-reason": "xid", "konduktor.ai/quarantined-at": "t"},
        },
        "spec": {"taints": [{"key": "konduktor.ai/gpu-health", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"nvidia.com/gpu": "10"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    cpu_node = {"metadata": {"name": "cpu", "labels": {}}, "status": {}}
    running = {
        "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "3"}}}]},
        "status": {"phase": "Running"},
    }
    done = {**running, "status": {"phase": "Succeeded"}}
    found = node_capacity([node, cpu_node], [running, done], [flavor])
    assert found == [NodeCapacity("n1", "h100", 10, 7, True, Quarantine("xid", "t"))]
    capacity = summarize(found, (usage("team-a", used=3),))
    assert from_json(to_json(capacity)) == capacity


def test_a_job_kueue_put_in_the_default_queue_says_so() -> None:
    capacity = published(nodes(10), (usage("team-a"),))
    target = workload("plain", gpus=1, conditions=ADMITTED)
    found = why(
        "plain",
        "team-a",
        target,
        workloads=[target],
        local_queues=LOCAL_QUEUES,
        capacity=capacity,
        pending=[],
        job_labels={},
    )
    assert found.reasons[0].kind == "default-queue"


def test_many_quarantined_nodes_are_counted_after_the_first_five() -> None:
    capacity = published(
        nodes(*([0] * 8), 10, quarantined=tuple(range(8))), (usage("team-a"), usage("team-b", used=20))
    )
    answer = explanation(workload("waits", gpus=8, pods=2), [], capacity)
    quarantines = [r["message"] for r in answer["reasons"] if r["kind"] == "quarantine"]
    assert len(quarantines) == 6 and quarantines[-1] == "and 3 more quarantined h100 nodes (30 GPUs)"


def test_a_policy_finding_is_a_reason_with_its_policy_and_a_remedy() -> None:
    """What the admission policies say of the job (a refusal, or a warning in warn-first mode), whatever its state."""
    refusal = (
        "jobs.batch \"x\" is forbidden: ValidatingAdmissionPolicy 'konduktor-priority-classes' with binding "
        "'konduktor-priority-classes' denied request: kueue.x-k8s.io/priority-class \"vip\" is not a platform "
        "priority class; use one of: opportunistic, standard, default, urgent"
    )
    warning = (
        "Validation failed for ValidatingAdmissionPolicy 'konduktor-gpu-through-localqueue' with binding "
        "'konduktor-gpu-through-localqueue': GPU pods must name a LocalQueue"
    )
    explanation = why(
        "x", "team-a", None, workloads=[], local_queues=LOCAL_QUEUES, capacity=None, pending=[], job_labels={}
    )
    answer = as_json(with_policy(explanation, [refusal, warning]))
    messages = [r["message"] for r in answer["reasons"] if r["kind"] == "policy"]
    assert messages == [
        'policy konduktor-priority-classes: kueue.x-k8s.io/priority-class "vip" is not a platform priority class; '
        "use one of: opportunistic, standard, default, urgent",
        "policy konduktor-gpu-through-localqueue: GPU pods must name a LocalQueue",
    ]
    assert any("the platform's policy refuses the job as written" in r for r in answer["remedies"])


def test_a_workload_whose_pods_were_refused_says_so_with_the_fix() -> None:
    """The health controller deactivated it after admission refused its pods (konduktor.health.refused): the
    explanation names the refusal and how to fix it, not a queue position."""
    capacity = published(nodes(10, 10, 10, 10), (usage("team-a"), usage("team-b")))
    evicted = [{"type": "Evicted", "status": "True", "reason": "Deactivated"}]
    refused = workload("root", gpus=8, conditions=evicted)
    refused["spec"]["active"] = False
    refusal = 'violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container "train" must set it)'
    refused["metadata"]["annotations"] = {"konduktor.ai/pods-refused-reason": refusal}
    answer = explanation(refused, [], capacity)
    assert kinds(answer) == ["pods-refused"]
    assert answer["reasons"][0]["message"] == f"admitted, but its pods are refused: {refusal}"
    assert "fix what the refusal names in the job's pod template" in answer["remedies"][0]
    # Deactivated by someone else, with no refusal on it: the plain deactivation.
    del refused["metadata"]["annotations"]
    assert kinds(explanation(refused, [], capacity)) == ["deactivated"]


def test_gpus_given_as_limits_only_count_as_kueue_counts_them() -> None:
    # PyTorch-style jobs: `resources.limits: {nvidia.com/gpu: 10}` and no requests. The team's own jobs holding
    # the quota are named with their GPUs, and the pending job's size counts.
    capacity = published(nodes(0, 0, 0, 0), (usage("team-a", used=20), usage("team-b", used=20)))
    running = [workload(f"r{i}", gpus=10, conditions=ADMITTED, limits_only=True) for i in range(2)]
    answer = explanation(workload("next", gpus=8, limits_only=True), running, capacity)
    assert answer["gpus"] == 8
    quota = next(r["message"] for r in answer["reasons"] if r["kind"] == "quota")
    assert "r0 (10 GPUs)" in quota and "r1 (10 GPUs)" in quota and "this job needs 8 GPUs" in quota
    # A 12-GPU pod on 10-GPU nodes never fits, limits or requests.
    capacity = published(nodes(10, 10, 10, 10), (usage("team-a"), usage("team-b")))
    answer = explanation(workload("twelve", gpus=12, limits_only=True), [], capacity)
    assert answer["state"] == "never-fit"
    order = pending_order([workload("p", gpus=3, limits_only=True)], LOCAL_QUEUES)
    assert [p.gpus for p in order] == [3]


def test_running_jobs_are_the_admitted_unfinished_ones_earliest_first() -> None:
    def admitted(at: str) -> list[dict[str, Any]]:
        return [
            {"type": "QuotaReserved", "status": "True"},
            {"type": "Admitted", "status": "True", "lastTransitionTime": at},
        ]

    late = workload("late", gpus=8, conditions=admitted("2026-11-23T21:00:00Z"), limits_only=True)
    early = workload("early", gpus=2, conditions=admitted("2026-11-23T20:00:00Z"))
    done = workload("done", gpus=8, conditions=FINISHED)
    waiting = workload("waiting", gpus=8)
    found = running_jobs([late, done, waiting, early])
    assert [(r.job, r.gpus, r.admitted) for r in found] == [
        ("early", 2, "2026-11-23T20:00:00Z"),
        ("late", 8, "2026-11-23T21:00:00Z"),
    ]


def test_an_admitted_job_with_a_pod_on_a_quarantined_node_is_told() -> None:
    capacity = published(nodes(0, 10, quarantined=(0,)), (usage("team-a", used=8), usage("team-b")))
    target = workload("train", gpus=8, conditions=ADMITTED)
    answer = why(
        "train",
        "team-a",
        target,
        workloads=[target],
        local_queues=LOCAL_QUEUES,
        capacity=capacity,
        pending=[],
    )

    def pod(name: str, node: str, phase: str = "Running") -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"nodeName": node}, "status": {"phase": phase}}

    pods = [pod("train-b", "gpu-h100-0001"), pod("train-a", "gpu-h100-0000"), pod("old", "gpu-h100-0000", "Failed")]
    told = as_json(with_pod_nodes(answer, pods, capacity))
    assert told["state"] == "admitted"
    messages = [r["message"] for r in told["reasons"] if r["kind"] == "quarantined-node"]
    assert messages == [
        "its pod train-a runs on node gpu-h100-0000, quarantined since 2026-11-23T19:00:00Z: "
        "Xid 79: GPU fell off the bus"
    ]
    assert "requeues the job" in told["remedies"][-1]
    # On healthy nodes, nothing is said.
    healthy = why(
        "train", "team-a", target, workloads=[target], local_queues=LOCAL_QUEUES, capacity=capacity, pending=[]
    )
    assert "quarantined-node" not in kinds(as_json(with_pod_nodes(healthy, [pods[0]], capacity)))


# --- a job the health controller requeued off a node it quarantined ----------------------------------------------


def requeue_note(node: str, pods: tuple[str, ...] = ("train-x1",)) -> str:
    """The note of the controller's Event, made by the controller's own words (`owner_message`)."""
    report = parse_line("NVRM: Xid (PCI:0000:48:00): 79, pid=0, name=python, GPU has fallen off the bus.")
    assert report is not None
    finding = classify_report(report, node, HealthSettings())
    affected = AffectedWorkload("team-a", "job-train-1234", node, pods, owner=ObjectRef("batch/v1", "Job", "train"))
    quarantined_at = datetime(2026, 11, 23, 20, 10, tzinfo=UTC).timestamp()
    return owner_message(affected, finding, quarantined_at, "requeued", dry_run=False, opt_out_label="opt-out")


def requeue_event(kind: str, name: str, note: str, at: str, uid: str | None = None) -> dict[str, Any]:
    involved = {"kind": kind, "name": name, **({"uid": uid} if uid else {})}
    return {
        "metadata": {"name": f"{name}.17f", "creationTimestamp": at},
        "involvedObject": involved,
        "reason": "RequeuedForNodeHealth",
        "message": note,
        "lastTimestamp": at,
    }


REQUEUED_AND_ADMITTED = [
    {"type": "QuotaReserved", "status": "True"},
    {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-11-23T20:10:05Z"},
    {"type": "Evicted", "status": "False", "reason": "QuotaReserved", "message": "Previously: deactivated"},
    {"type": "Requeued", "status": "True", "reason": "Reactivated"},
]


def requeued_workload() -> dict[str, Any]:
    found = workload("train", gpus=8, conditions=REQUEUED_AND_ADMITTED)
    found["status"]["admission"] = {
        "clusterQueue": "team-a",
        "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "h100"}}],
    }
    found["status"]["schedulingStats"] = {"evictions": [{"reason": "Deactivated", "count": 1}]}
    return found


def pod_on(name: str, node: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def test_a_requeued_job_says_when_from_which_node_why_where_it_runs_now_and_the_capacity() -> None:
    target = requeued_workload()
    note = requeue_note("gpu-h100-0000")
    events = [
        # The same requeue told on the Job and on its Workload: one requeue.
        requeue_event("Job", "train", note, "2026-11-23T20:10:01Z", uid="job-uid"),
        requeue_event("Workload", "job-train-1234", note, "2026-11-23T20:10:01Z"),
        # An earlier Job of the same name, and another job's requeue: not this job's.
        requeue_event("Job", "train", requeue_note("gpu-h100-0003"), "2026-11-23T19:00:00Z", uid="old-uid"),
        requeue_event("Job", "other", requeue_note("gpu-h100-0002"), "2026-11-23T20:10:01Z"),
    ]
    requeues = node_requeues(events, "train", "job-train-1234", "job-uid", "2026-11-23T20:00:00Z")
    assert [(r.at, r.node, r.quarantined_at, r.pods) for r in requeues] == [
        ("2026-11-23T20:10:01Z", "gpu-h100-0000", "2026-11-23T20:10:00Z", ("train-x1",))
    ]
    assert requeues[0].fault == "Xid 79, GPU has fallen off the bus on 0000:48:00"
    capacity = published(nodes(10, 2, 10, 10, quarantined=(0,)), (usage("team-a", used=8), usage("team-b")), "T")
    answer = why(
        "train", "team-a", target, workloads=[target], local_queues=LOCAL_QUEUES, capacity=capacity, pending=[]
    )
    pods = [pod_on("train-y2", "gpu-h100-0001"), pod_on("train-x1", "gpu-h100-0000", deletionTimestamp="now")]
    told = as_json(with_requeues(answer, requeues, target, pods, capacity))
    assert told["state"] == "admitted"
    assert kinds(told) == ["admitted", "requeued", "runs-on", "node-out", "capacity-now"]
    said = {r["kind"]: r["message"] for r in told["reasons"]}
    assert said["requeued"] == (
        "requeued at 2026-11-23T20:10:01Z from node gpu-h100-0000: the health controller quarantined the node at "
        "2026-11-23T20:10:00Z for Xid 79, GPU has fallen off the bus on 0000:48:00 (its pod train-x1 stopped "
        "there); the job kept its place in the queue"
    )
    assert said["runs-on"] == "admitted again at 2026-11-23T20:10:05Z; runs now on node gpu-h100-0001 (pod train-y2)"
    assert said["node-out"] == (
        "node gpu-h100-0000 stays quarantined (since 2026-11-23T19:00:00Z: Xid 79: GPU fell off the bus) until a "
        "burn-in passes"
    )
    assert said["capacity-now"] == (
        "h100 capacity now (published at T): 30 of 40 GPUs in service, 22 free; out of service: gpu-h100-0000 "
        "(10 GPUs, quarantined since 2026-11-23T19:00:00Z: Xid); your team uses 8 of its 20 (borrowed 0)"
    )
    assert told["requeues"] == [
        {
            "at": "2026-11-23T20:10:01Z",
            "node": "gpu-h100-0000",
            "fault": "Xid 79, GPU has fallen off the bus on 0000:48:00",
            "quarantinedAt": "2026-11-23T20:10:00Z",
            "pods": ["train-x1"],
        }
    ]
    assert told["runsOn"] == [{"pod": "train-y2", "node": "gpu-h100-0001"}]
    [flavor] = told["capacity"]
    assert (flavor["gpus"], flavor["inService"], flavor["free"], flavor["quota"]) == (
        40,
        30,
        22,
        {"nominal": 20, "used": 8, "borrowed": 0},
    )
    assert [q["node"] for q in flavor["quarantined"]] == ["gpu-h100-0000"]


def test_requeues_are_told_oldest_first_and_a_node_back_in_service_is_said() -> None:
    target = requeued_workload()
    events = [
        requeue_event("Job", "train", requeue_note("gpu-h100-0002"), "2026-11-23T21:00:00Z"),
        requeue_event("Job", "train", requeue_note("gpu-h100-0000"), "2026-11-23T20:10:01Z"),
    ]
    requeues = node_requeues(events, "train", None)
    assert [r.node for r in requeues] == ["gpu-h100-0000", "gpu-h100-0002"]
    capacity = published(nodes(10, 2, 10, 10), (usage("team-a", used=8),))
    answer = why(
        "train", "team-a", target, workloads=[target], local_queues=LOCAL_QUEUES, capacity=capacity, pending=[]
    )
    told = as_json(with_requeues(answer, requeues, target, [], capacity))
    assert [r["message"].split(":")[0] for r in told["reasons"] if r["kind"] == "requeued"] == [
        "requeued at 2026-11-23T20",
        "requeued at 2026-11-23T21",
    ]
    said = {r["kind"]: r["message"] for r in told["reasons"]}
    assert said["runs-on"] == "admitted again at 2026-11-23T20:10:05Z; its pods are being scheduled"
    assert said["node-back"] == "node gpu-h100-0002 is no longer quarantined"


def test_a_requeue_whose_event_expired_is_still_told_from_the_workload() -> None:
    target = requeued_workload()
    capacity = published(nodes(10, 2, 10, 10), (usage("team-a", used=8),))
    answer = why(
        "train", "team-a", target, workloads=[target], local_queues=LOCAL_QUEUES, capacity=capacity, pending=[]
    )
    told = as_json(with_requeues(answer, [], target, [], capacity))
    assert kinds(told) == ["admitted", "evicted"] and told["requeues"] == [] and told["capacity"] == []
    assert "the Event that said which node and why is gone" in told["reasons"][-1]["message"]
    # A job never requeued says nothing of it.
    plain = workload("plain", gpus=8, conditions=ADMITTED)
    answer = why("plain", "team-a", plain, workloads=[plain], local_queues=LOCAL_QUEUES, capacity=capacity, pending=[])
    assert kinds(as_json(with_requeues(answer, [], plain, [], capacity))) == ["admitted"]


def test_a_job_being_requeued_waits_seconds_and_needs_nothing() -> None:
    target = workload("train", gpus=8)
    target["spec"]["active"] = False
    target["metadata"]["annotations"] = {"konduktor.ai/requeue-reason": "Xid79 on gpu-h100-0000 at 2026-11-23T20:10Z"}
    answer = as_json(
        why("train", "team-a", target, workloads=[target], local_queues=LOCAL_QUEUES, capacity=None, pending=[])
    )
    assert answer["state"] == "pending" and kinds(answer) == ["requeuing"]
    assert "being requeued by the health controller (Xid79 on gpu-h100-0000" in answer["reasons"][0]["message"]
    assert answer["remedies"] == ["nothing to do: it runs again within seconds when GPUs are free"]

"""A team's queue and one job's explanation, from Kueue's objects and the published capacity (pure).

The pending order is Kueue's own (K:pkg/cache/queue/cluster_queue.go): within a ClusterQueue, higher priority
first, then the earlier queue timestamp (creation, or the eviction that requeued it at the back), then UID.
StrictFIFO and BestEffortFIFO share this order; they differ only in whether a head that does not fit blocks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from konduktor.gpu.pod import pod_gpus
from konduktor.kube.conditions import condition, is_true
from konduktor.kube.timestamps import format_time, parse_time
from konduktor.queueing.capacity import Capacity, FlavorSummary, Freshness, QuarantinedNode
from konduktor.quotas.multikueue import is_dispatch_check
from konduktor.quotas.usage import TeamUsage
from konduktor.vocabulary import GPU_RESOURCE, PODS_REFUSED_REASON, REQUEUE_REASON, REQUEUED_FOR_NODE_HEALTH

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# Evictions after which Kueue requeues a workload at the back (requeuingStrategy.timestamp Eviction).
REQUEUED_AT_BACK = ("PodsReadyTimeout", "AdmissionCheck")
# Why Kueue preempted a workload (the reason of its Preempted condition), in a team member's words.
PREEMPTED_FOR = {
    "InCohortReclamation": "to give the GPUs it borrowed back to the team that lent them",
    "InCohortReclaimWhileBorrowing": "for a higher-priority job of another team",
    "InCohortFairSharing": "to restore fair sharing between the teams",
    "InClusterQueue": "for a higher-priority job of your own team",
}
QUARANTINES_LISTED = 5  # named one by one; more are counted
# The note of the health controller's Event on a job it requeued off a node it quarantined
# (konduktor.health.affected.owner_message): "GPU node N was quarantined at T: Xid 79, GPU has fallen off the bus
# on 0000:48:00.0. Pods of this workload on it: P1, P2. ... Next: requeued. ..."
_REQUEUE_NOTE = re.compile(
    r"GPU node (?P<node>\S+) was quarantined at (?P<at>\S+): (?P<fault>.*?)\. "
    r"Pods of this workload on it: (?P<pods>.*?)\.(?:\s|$)"
)
EVENTS_KEPT = "the API server keeps Events for 1 h by default"

State = Literal["pending", "admitted", "finished", "never-fit", "not-queued"]
Source = Literal["visibility", "derived"]


@dataclass(frozen=True)
class PodSetRequest:
    name: str
    count: int
    gpus_per_pod: int


@dataclass(frozen=True)
class Pending:
    position: int  # in the ClusterQueue, from 0 as Kueue counts
    name: str
    namespace: str
    job: str
    local_queue: str
    priority: int
    gpus: int
    created: str


@dataclass(frozen=True)
class Running:
    """A job of the team's holding its quota: admitted by Kueue and not finished."""

    job: str
    name: str
    namespace: str
    local_queue: str
    priority: int
    gpus: int
    admitted: str  # when Kueue admitted it
    cluster: str = ""  # the worker cluster MultiKueue dispatched it to; empty on a single cluster


@dataclass(frozen=True)
class Reason:
    kind: str
    message: str


@dataclass(frozen=True)
class Requeue:
    """One requeue of the job off a node the health controller quarantined, as the controller's Event tells it."""

    at: str  # when the controller requeued it (its Event's time)
    node: str  # the node the job was taken off
    fault: str  # what the controller saw: "Xid 79, GPU has fallen off the bus on 0000:48:00.0"
    quarantined_at: str  # when it quarantined the node
    pods: tuple[str, ...]  # the job's pods that were on the node

    def as_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "node": self.node,
            "fault": self.fault,
            "quarantinedAt": self.quarantined_at,
            "pods": list(self.pods),
        }


@dataclass(frozen=True)
class PodPlace:
    pod: str
    node: str  # empty while the pod waits to be scheduled


@dataclass(frozen=True)
class FlavorCapacity:
    """A GPU type of the team's queue as the platform publishes it now: GPUs in service, free, the nodes out of
    service, and the team's quota and usage of it."""

    flavor: str
    gpus: int
    in_service: int
    free: int
    quarantined: tuple[QuarantinedNode, ...]  # as listed (the most recent first)
    quarantined_nodes: int  # all of them, listed or not
    nominal: Fraction
    used: Fraction
    borrowed: Fraction
    published_at: str

    def describe(self) -> str:
        shown = self.quarantined[:QUARANTINES_LISTED]
        out = ", ".join(
            f"{n.name} ({_gpus_text(n.gpus)}, quarantined since {n.since or '?'}: {n.reason.split(' ', 1)[0]})"
            for n in shown
        )
        if self.quarantined_nodes > len(shown):
            out += f" and {self.quarantined_nodes - len(shown)} more"
        published = f" (published at {self.published_at})" if self.published_at else ""
        return (
            f"{self.flavor} capacity now{published}: {self.in_service} of {_gpus_text(self.gpus)} in service, "
            f"{self.free} free" + (f"; out of service: {out}" if out else "") + f"; your team uses {_plain(self.used)} "
            f"of its {_plain(self.nominal)} (borrowed {_plain(self.borrowed)})"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "flavor": self.flavor,
            "gpus": self.gpus,
            "inService": self.in_service,
            "free": self.free,
            "quarantined": [
                {"node": n.name, "gpus": n.gpus, "since": n.since, "reason": n.reason} for n in self.quarantined
            ],
            "quarantinedNodes": self.quarantined_nodes,
            "quota": {"nominal": _number(self.nominal), "used": _number(self.used), "borrowed": _number(self.borrowed)},
            "publishedAt": self.published_at,
        }


@dataclass
class Explanation:
    job: str
    namespace: str
    state: State
    workload: str | None = None
    cluster_queue: str | None = None
    position: int | None = None
    ahead_gpus: int = 0
    gpus: int = 0
    reasons: list[Reason] = field(default_factory=list)
    remedies: list[str] = field(default_factory=list)
    kueue_message: str = ""
    source: Source = "derived"
    worker: str | None = None  # the worker cluster MultiKueue dispatched it to (its `status.clusterName`)
    requeues: list[Requeue] = field(default_factory=list)  # off nodes the health controller quarantined
    runs_on: list[PodPlace] = field(default_factory=list)  # where its pods are now, once requeued
    capacity_now: list[FlavorCapacity] = field(default_factory=list)  # once requeued and admitted again
    capacity_freshness: Freshness | None = None  # of the published capacity it read


def job_name(workload: dict[str, Any]) -> str:
    owners = workload["metadata"].get("ownerReferences", [])
    return str(owners[0]["name"]) if owners else str(workload["metadata"]["name"])


def requests(workload: dict[str, Any]) -> list[PodSetRequest]:
    found = []
    for pod_set in workload.get("spec", {}).get("podSets", []):
        per_pod = pod_gpus(pod_set.get("template", {}).get("spec", {}))
        found.append(PodSetRequest(pod_set.get("name", "main"), int(pod_set.get("count", 1)), per_pod))
    return found


def total_gpus(workload: dict[str, Any]) -> int:
    return sum(r.count * r.gpus_per_pod for r in requests(workload))


def is_pending(workload: dict[str, Any]) -> bool:
    """Kueue's admissible set: active, not finished, holding no quota reservation."""
    return (
        workload.get("spec", {}).get("active", True) is not False
        and not is_true(workload, "Finished")
        and not is_true(workload, "QuotaReserved")
    )


def queue_timestamp(workload: dict[str, Any]) -> str:
    evicted = condition(workload, "Evicted")
    if evicted and evicted.get("status") == "True" and evicted.get("reason") in REQUEUED_AT_BACK:
        return str(evicted.get("lastTransitionTime", ""))
    return str(workload["metadata"].get("creationTimestamp", ""))


def pending_order(workloads: list[dict[str, Any]], local_queues: dict[tuple[str, str], str]) -> list[Pending]:
    """The pending workloads of ClusterQueues, in Kueue's order, with their position per ClusterQueue.

    `local_queues` maps (namespace, LocalQueue) to its ClusterQueue; workloads of unknown queues are left out
    (Kueue holds them as inadmissible outside every ClusterQueue)."""
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for workload in workloads:
        key = (workload["metadata"].get("namespace", ""), workload.get("spec", {}).get("queueName", ""))
        if key in local_queues and is_pending(workload):
            by_queue.setdefault(local_queues[key], []).append(workload)
    ordered: list[Pending] = []
    for members in by_queue.values():
        members.sort(
            key=lambda w: (-int(w.get("spec", {}).get("priority", 0)), queue_timestamp(w), w["metadata"].get("uid", ""))
        )
        ordered.extend(
            Pending(
                position=index,
                name=w["metadata"]["name"],
                namespace=w["metadata"].get("namespace", ""),
                job=job_name(w),
                local_queue=w["spec"].get("queueName", ""),
                priority=int(w["spec"].get("priority", 0)),
                gpus=total_gpus(w),
                created=str(w["metadata"].get("creationTimestamp", "")),
            )
            for index, w in enumerate(members)
        )
    return ordered


def running_jobs(workloads: list[dict[str, Any]]) -> list[Running]:
    """The admitted, unfinished workloads, the earliest admitted first."""
    found = [
        Running(
            job=job_name(w),
            name=w["metadata"]["name"],
            namespace=w["metadata"].get("namespace", ""),
            local_queue=w.get("spec", {}).get("queueName", ""),
            priority=int(w.get("spec", {}).get("priority", 0)),
            gpus=total_gpus(w),
            admitted=str((condition(w, "Admitted") or {}).get("lastTransitionTime", "")),
            cluster=str(w.get("status", {}).get("clusterName", "")),
        )
        for w in workloads
        if is_true(w, "Admitted") and not is_true(w, "Finished")
    ]
    return sorted(found, key=lambda r: (r.admitted, r.job))


@dataclass(frozen=True)
class QueueView:
    team: str
    cluster_queue: str
    quota: list[TeamUsage]
    pending: list[Pending]
    source: Source

    def as_json(self) -> dict[str, Any]:
        return {
            "team": self.team,
            "clusterQueue": self.cluster_queue,
            "source": self.source,
            "quota": [q.row() for q in self.quota],
            "pending": [vars(p) for p in self.pending],
        }


def queue_view(cluster_queue: str, capacity: Capacity, pending: list[Pending], source: Source) -> QueueView:
    rows = _team_rows(capacity, cluster_queue)
    team = rows[0].team if rows else cluster_queue
    return QueueView(team, cluster_queue, rows, [p for p in pending], source)


def _plain(value: Fraction) -> str:
    return str(int(value)) if value.denominator == 1 else str(float(value))


def _number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def _gpus_text(count: int | Fraction) -> str:
    number = _plain(Fraction(count))
    return f"{number} GPU" if number == "1" else f"{number} GPUs"


def why(
    job: str,
    namespace: str,
    workload: dict[str, Any] | None,
    *,
    workloads: list[dict[str, Any]],
    local_queues: dict[tuple[str, str], str],
    capacity: Capacity | None,
    pending: list[Pending],
    job_labels: dict[str, str] | None = None,
    source: Source = "derived",
) -> Explanation:
    """One explanation for a job: its state, the reasons in plain words, and what would make it run."""
    if workload is None:
        return _not_queued(job, namespace, job_labels or {}, local_queues)
    name = workload["metadata"]["name"]
    queue = workload.get("spec", {}).get("queueName", "")
    explanation = Explanation(job, namespace, "pending", workload=name, gpus=total_gpus(workload), source=source)
    explanation.cluster_queue = local_queues.get((namespace, queue))
    if job_labels is not None and QUEUE_LABEL not in job_labels and explanation.cluster_queue is not None:
        explanation.reasons.append(
            Reason(
                "default-queue",
                f"the job has no {QUEUE_LABEL} label: Kueue put it in namespace {namespace}'s LocalQueue {queue}",
            )
        )
    reserved = condition(workload, "QuotaReserved")
    explanation.kueue_message = str((reserved or {}).get("message", ""))
    refused = workload["metadata"].get("annotations", {}).get(PODS_REFUSED_REASON)
    if refused and workload.get("spec", {}).get("active", True) is False:
        # The health controller deactivated it (konduktor.health.refused): its quota is given back.
        explanation.reasons.append(Reason("pods-refused", f"admitted, but its pods are refused: {refused}"))
        explanation.remedies.append(
            "fix what the refusal names in the job's pod template (or ask an administrator for another security "
            "profile: docs/security.md), then delete the job and submit it again; its quota was given back"
        )
        return explanation
    if is_true(workload, "Finished"):
        explanation.state = "finished"
        finished = condition(workload, "Finished") or {}
        explanation.reasons.append(Reason("finished", f"the job has finished: {finished.get('message', '')}".strip()))
        return explanation
    if is_true(workload, "Admitted"):
        explanation.state = "admitted"
        admission = workload.get("status", {}).get("admission", {})
        explanation.reasons.append(Reason("admitted", f"admitted by ClusterQueue {admission.get('clusterQueue', '?')}"))
        explanation.worker = workload.get("status", {}).get("clusterName")
        if explanation.worker:
            explanation.reasons.append(
                Reason(
                    "dispatched",
                    f"MultiKueue dispatched it to worker cluster {explanation.worker}, where it runs; "
                    "its status here mirrors the worker's",
                )
            )
        _borrowing_risk(explanation, workload, capacity)
        return explanation
    if is_true(workload, "QuotaReserved"):
        _awaiting_checks(explanation, workload)
        return explanation
    requeuing = workload["metadata"].get("annotations", {}).get(REQUEUE_REASON)
    if requeuing and workload.get("spec", {}).get("active", True) is False:
        # The health controller deactivated it a moment ago to move it off a quarantined node
        # (konduktor.health.workloads): it reactivates it once Kueue has evicted it.
        explanation.reasons.append(
            Reason(
                "requeuing",
                f"being requeued by the health controller ({requeuing}): Kueue stops its pods, then it is queued "
                "again with its place and admitted on healthy nodes",
            )
        )
        explanation.remedies.append("nothing to do: it runs again within seconds when GPUs are free")
        return explanation
    if workload.get("spec", {}).get("active", True) is False:
        explanation.reasons.append(Reason("deactivated", "the workload is deactivated (spec.active=false)"))
        explanation.remedies.append("an administrator or the job's owner sets the Workload's spec.active back to true")
        return explanation
    if explanation.cluster_queue is None:
        known = sorted(lq for ns, lq in local_queues if ns == namespace)
        explanation.reasons.append(
            Reason(
                "wrong-queue",
                f"queue label {QUEUE_LABEL}={queue!r} names no LocalQueue in namespace {namespace}"
                + (f" (it has: {', '.join(known)})" if known else " (it has none)"),
            )
        )
        explanation.remedies.append(
            f"delete the job and submit it again with {QUEUE_LABEL}: {known[0]}"
            if known
            else f"submit it in a team namespace; {namespace} is not one"
        )
        return explanation
    preempted = _preemption(workload)
    if preempted:
        explanation.reasons.append(Reason("preempted", preempted))
        explanation.remedies.append(
            "nothing to do: it kept its place in the queue and runs again when GPUs free; checkpoint jobs that run "
            "on borrowed GPUs"
        )
    for entry in pending:
        if entry.name == name and entry.namespace == namespace:
            explanation.position = entry.position
            explanation.ahead_gpus = sum(
                p.gpus for p in pending if p.position < entry.position and _same_queue(p, entry, local_queues)
            )
    if capacity is None:
        explanation.reasons.append(Reason("kueue", explanation.kueue_message or "waiting for Kueue to consider it"))
        explanation.remedies.append(
            "the platform publishes no capacity on this cluster: "
            "ask an administrator (`konduktor-install quotas explain`)"
        )
        return explanation
    _explain_pending(explanation, workload, workloads, capacity)
    return explanation


def _awaiting_checks(explanation: Explanation, workload: dict[str, Any]) -> None:
    """Quota reserved, admission waiting for its checks: with MultiKueue, for a worker cluster to admit the job
    (Kueue names the workers it was offered to in `status.nominatedClusterNames`, and each check's state)."""
    status = workload.get("status", {})
    offered = status.get("nominatedClusterNames") or []
    waiting = [c for c in status.get("admissionChecks", []) if c.get("state") != "Ready"]
    for check in waiting:
        name, state = check.get("name", "?"), check.get("state", "Pending")
        said = f": {check['message']}" if check.get("message") else ""
        if is_dispatch_check(name):
            text = "your team's quota is reserved; waiting for a worker cluster to admit it" + (
                f" (offered to {', '.join(offered)})" if offered else ""
            )
            explanation.reasons.append(Reason("dispatching", f"{text}; MultiKueue's check is {state}{said}"))
        else:
            explanation.reasons.append(Reason("admission-check", f"admission check {name} is {state}{said}"))
    if not waiting:
        explanation.reasons.append(Reason("kueue", "quota reserved; Kueue admits it on its next pass"))
    if any(r.kind == "dispatching" for r in explanation.reasons):
        explanation.remedies.append(
            "nothing to do: it runs when a worker cluster has room; a worker that is away or full is passed over "
            "(with the incremental dispatcher, after a 5-minute round)"
        )


def with_policy(explanation: Explanation, findings: Sequence[str]) -> Explanation:
    """The explanation with what the platform's admission policies say of the job as it stands (a refusal, or a
    warning in warn-first mode; `konduktor.kube.policy_audit.policy_findings`), whatever its state."""
    for finding in findings:
        explanation.reasons.append(Reason("policy", policy_reason(finding)))
    if findings:
        explanation.remedies.append(
            "the platform's policy refuses the job as written (it was made before the policy was enforced, or while "
            "it only warned): delete it, fix what the policy names and submit it again"
        )
    return explanation


def with_pod_nodes(explanation: Explanation, pods: Sequence[dict[str, Any]], capacity: Capacity | None) -> Explanation:
    """An admitted job whose pods run on nodes the health controller has quarantined since: which, why, and what
    happens next (the node's quarantine as the platform publishes it; team members cannot read Nodes)."""
    if explanation.state != "admitted" or capacity is None:
        return explanation
    quarantined = {n.name: n.quarantine for n in capacity.quarantined}
    hit = False
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        node = pod.get("spec", {}).get("nodeName", "")
        quarantine = quarantined.get(node)
        if quarantine is None or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        hit = True
        explanation.reasons.append(
            Reason(
                "quarantined-node",
                f"its pod {pod['metadata']['name']} runs on node {node}, quarantined since {quarantine.since or '?'}: "
                f"{quarantine.reason}",
            )
        )
    if hit:
        explanation.remedies.append(
            "nothing to do at once: by the fault, the health controller lets the pod finish there (no new pod starts "
            "on the node) or requeues the job, which Kueue admits again on healthy nodes with its place in the queue; "
            "`kubectl describe job` shows its event (NodeQuarantined or RequeuedForNodeHealth). A job that cannot "
            "resume from a checkpoint may be better stopped and submitted again"
        )
    return explanation


def node_requeues(
    events: Sequence[dict[str, Any]], job: str, workload: str | None, job_uid: str = "", since: str = ""
) -> list[Requeue]:
    """The health controller's requeues of this job off quarantined nodes, oldest first, from its Events on the job
    and on its Workload (both carry the same note: one requeue each). Events of an earlier job of the same name
    (another uid, or older than `since`, the job's creation) are left out."""
    found: dict[tuple[str, str], Requeue] = {}
    created = parse_time(since)
    for event in events:
        if event.get("reason") != REQUEUED_FOR_NODE_HEALTH:
            continue
        involved = event.get("involvedObject", {})
        if involved.get("kind") == "Workload":
            if workload is None or involved.get("name") != workload:
                continue
        elif involved.get("name") != job or (job_uid and involved.get("uid") not in (None, "", job_uid)):
            continue
        told = _REQUEUE_NOTE.search(str(event.get("message", "")))
        at = _event_time(event)
        if told is None or (created is not None and at is not None and at < created):
            continue
        pods = tuple(p.strip() for p in told["pods"].split(",") if p.strip() and p.strip() != "none")
        requeue = Requeue(format_time(at) if at is not None else "?", told["node"], told["fault"], told["at"], pods)
        key = (requeue.node, requeue.quarantined_at)
        if key not in found or requeue.at < found[key].at:
            found[key] = requeue
    return sorted(found.values(), key=lambda r: (r.at, r.node))


def _event_time(event: dict[str, Any]) -> float | None:
    stamps = (event.get(k) for k in ("lastTimestamp", "eventTime", "firstTimestamp"))
    found = (parse_time(s) for s in (*stamps, event.get("metadata", {}).get("creationTimestamp")))
    return next((t for t in found if t is not None), None)


def with_requeues(
    explanation: Explanation,
    requeues: Sequence[Requeue],
    workload: dict[str, Any] | None,
    pods: Sequence[dict[str, Any]],
    capacity: Capacity | None,
) -> Explanation:
    """A job the health controller requeued off a node it quarantined: when, from which node and why (the fault and
    the quarantine), whether that node is still out, where the job runs now and, admitted again, the capacity of
    its team's GPU types now, as the platform publishes it. Without the Events (expired), the Workload's own record
    of a deactivation says that it was evicted and queued again."""
    if workload is None or explanation.state in ("not-queued", "finished"):
        return explanation
    if not requeues:
        return _with_evictions(explanation, workload)
    for requeue in requeues:
        stopped = f" (its pod {', '.join(requeue.pods)} stopped there)" if requeue.pods else ""
        explanation.reasons.append(
            Reason(
                "requeued",
                f"requeued at {requeue.at} from node {requeue.node}: the health controller quarantined the node at "
                f"{requeue.quarantined_at} for {requeue.fault}{stopped}; the job kept its place in the queue",
            )
        )
    explanation.requeues = list(requeues)
    last = requeues[-1].node
    if explanation.state == "admitted":
        admitted = (condition(workload, "Admitted") or {}).get("lastTransitionTime") or "?"
        explanation.runs_on = _places(pods)
        running = [p for p in explanation.runs_on if p.node]
        if running:
            where = ", ".join(f"{p.node} (pod {p.pod})" for p in running)
            text = f"admitted again at {admitted}; runs now on node{'s' if len(running) > 1 else ''} {where}"
        else:
            text = f"admitted again at {admitted}; its pods are being scheduled"
        explanation.reasons.append(Reason("runs-on", text))
    node = capacity.quarantine_of(last) if capacity else None
    if node is not None:
        explanation.reasons.append(
            Reason(
                "node-out",
                f"node {last} stays quarantined (since {node.since or '?'}: {node.reason}) until a burn-in passes",
            )
        )
    elif capacity is not None and capacity.all_quarantines_listed:
        # Every quarantined node is listed, and this one is not among them.
        explanation.reasons.append(Reason("node-back", f"node {last} is no longer quarantined"))
    if explanation.state == "admitted" and capacity is not None:
        explanation.capacity_now = _capacity_now(explanation, workload, capacity)
        explanation.reasons.extend(Reason("capacity-now", flavor.describe()) for flavor in explanation.capacity_now)
    return explanation


def with_freshness(explanation: Explanation, capacity: Capacity | None) -> Explanation:
    """The explanation with the age of the capacity it read: an answer from a stale capacity says so (the
    publisher's heartbeat is old, or this namespace's copy missed the last change)."""
    if capacity is None or capacity.freshness is None:
        return explanation
    explanation.capacity_freshness = capacity.freshness
    if capacity.stale and explanation.state in ("pending", "never-fit", "admitted"):
        explanation.reasons.append(
            Reason("capacity-stale", f"the published capacity this answer reads is stale: {capacity.freshness.message}")
        )
        explanation.remedies.append(
            "the numbers above may be out of date: ask an administrator to check konduktor-core's capacity "
            "publisher (its Deployment's log in konduktor-system)"
        )
    return explanation


def _places(pods: Sequence[dict[str, Any]]) -> list[PodPlace]:
    """The job's pods that run or are about to: not finished, not being deleted."""
    return [
        PodPlace(pod["metadata"]["name"], pod.get("spec", {}).get("nodeName") or "")
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"])
        if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        and not pod["metadata"].get("deletionTimestamp")
    ]


def _capacity_now(explanation: Explanation, workload: dict[str, Any], capacity: Capacity) -> list[FlavorCapacity]:
    """The GPU types of the job's admission (else of its team's queue), as published."""
    assignments = workload.get("status", {}).get("admission", {}).get("podSetAssignments", [])
    admitted = {str(a["flavors"][GPU_RESOURCE]) for a in assignments if GPU_RESOURCE in (a.get("flavors") or {})}
    rows = _team_rows(capacity, explanation.cluster_queue or "")
    flavors = sorted(admitted or {r.flavor for r in rows})
    found = []
    for flavor in flavors:
        summary = capacity.flavor(flavor) or _no_nodes(flavor)
        row = next((r for r in rows if r.flavor == flavor), None)
        found.append(
            FlavorCapacity(
                flavor=flavor,
                gpus=summary.gpus,
                in_service=summary.in_service,
                free=summary.free,
                quarantined=tuple(q for q in capacity.quarantined if q.flavor == flavor),
                quarantined_nodes=summary.quarantined_nodes,
                nominal=row.nominal if row else Fraction(0),
                used=row.used if row else Fraction(0),
                borrowed=row.borrowed if row else Fraction(0),
                published_at=capacity.published_at,
            )
        )
    return found


def _with_evictions(explanation: Explanation, workload: dict[str, Any]) -> Explanation:
    """No requeue Event (they expire): a Workload that Kueue evicted on deactivation and that was reactivated, as the
    health controller requeues a job, says so in its own status."""
    requeued = condition(workload, "Requeued") or {}
    evictions = workload.get("status", {}).get("schedulingStats", {}).get("evictions") or []
    count = sum(int(e.get("count", 1)) for e in evictions if e.get("reason") == "Deactivated")
    if not count or requeued.get("reason") != "Reactivated" or explanation.state != "admitted":
        return explanation
    times = "once" if count == 1 else f"{count} times"
    explanation.reasons.append(
        Reason(
            "evicted",
            f"Kueue evicted it {times} on deactivation and it was queued again (as the health controller requeues a "
            "job off a quarantined node, or `kubectl kueue stop` and `resume`); the Event that said which node and "
            f"why is gone ({EVENTS_KEPT})",
        )
    )
    return explanation


_POLICY = re.compile(
    r"ValidatingAdmissionPolicy '(?P<policy>[^']+)' with binding '[^']*'(?: denied request)?: (?P<why>.*)"
)


def policy_reason(finding: str) -> str:
    """An admission policy's refusal or warning, as `policy NAME: why`."""
    found = _POLICY.search(finding)
    return f"policy {found['policy']}: {found['why']}" if found else finding


def _preemption(workload: dict[str, Any]) -> str | None:
    """Kueue preempted this pending workload (and requeued it): when and why, or None."""
    if is_true(workload, "Preempted"):
        preempted = condition(workload, "Preempted") or {}
    elif is_true(workload, "Evicted") and (condition(workload, "Evicted") or {}).get("reason") == "Preempted":
        preempted = condition(workload, "Evicted") or {}
    else:
        return None
    reason = str(preempted.get("reason", ""))
    why_text = PREEMPTED_FOR.get(reason, "for another workload")
    return f"Kueue preempted it at {preempted.get('lastTransitionTime', '?')} {why_text} ({reason or 'Preempted'})"


def _same_queue(a: Pending, b: Pending, local_queues: dict[tuple[str, str], str]) -> bool:
    return local_queues.get((a.namespace, a.local_queue)) == local_queues.get((b.namespace, b.local_queue))


def _not_queued(
    job: str, namespace: str, labels: dict[str, str], local_queues: dict[tuple[str, str], str]
) -> Explanation:
    explanation = Explanation(job, namespace, "not-queued")
    known = sorted(lq for ns, lq in local_queues if ns == namespace)
    if QUEUE_LABEL not in labels:
        explanation.reasons.append(
            Reason(
                "missing-queue-label",
                f"the job has no {QUEUE_LABEL} label"
                + ("" if known else f" and namespace {namespace} has no LocalQueue to default it to"),
            )
        )
    else:
        explanation.reasons.append(Reason("no-workload", "Kueue has made no Workload for this job (yet)"))
    explanation.remedies.append(
        f"submit it with `konduktor submit` in a team namespace, or add the label {QUEUE_LABEL}: "
        + (known[0] if known else "default")
    )
    return explanation


def _team_rows(capacity: Capacity, cluster_queue: str) -> list[TeamUsage]:
    """The queue's whole-GPU rows (its slices' rows are `queueing.slices`')."""
    return [q for q in capacity.queues if q.cluster_queue == cluster_queue and q.resource == GPU_RESOURCE]


def _explain_pending(
    explanation: Explanation, workload: dict[str, Any], workloads: list[dict[str, Any]], capacity: Capacity
) -> None:
    assert explanation.cluster_queue is not None
    rows = _team_rows(capacity, explanation.cluster_queue)
    pod_sets = [r for r in requests(workload) if r.gpus_per_pod > 0]
    if not rows or not pod_sets:
        explanation.reasons.append(Reason("kueue", explanation.kueue_message or "waiting for Kueue to consider it"))
        return
    # Never fit: no flavor of the team's queue has a node big enough for every pod, or quota enough.
    fits = []
    never: list[str] = []
    for row in rows:
        problem = _never_fits(row, capacity.flavor(row.flavor), pod_sets, explanation.gpus)
        if problem is None:
            fits.append(row)
        else:
            never.append(problem)
    if not fits:
        explanation.state = "never-fit"
        explanation.reasons.extend(Reason("never-fit", text) for text in never)
        biggest = max((f.largest for f in capacity.flavors if f.flavor in {r.flavor for r in rows}), default=0)
        explanation.remedies.append(
            f"ask for at most {biggest} GPUs per pod and more pods (a multi-node job)"
            if biggest
            else "ask an administrator for GPUs of a type your team's queue covers"
        )
        return
    for row in fits:
        _explain_flavor(explanation, workload, workloads, capacity, row, pod_sets)
    if not explanation.reasons:
        explanation.reasons.append(
            Reason("kueue", explanation.kueue_message or "nothing stops it: Kueue admits it on its next pass")
        )
    if explanation.position:
        explanation.reasons.append(
            Reason(
                "position",
                f"{explanation.position} workload(s) of the team's queue come before it, "
                f"asking {_gpus_text(explanation.ahead_gpus)}",
            )
        )


def _no_nodes(flavor: str) -> FlavorSummary:
    return FlavorSummary(flavor, 0, 0, 0, 0, 0, (), 0, 0)


def _never_fits(row: TeamUsage, nodes: FlavorSummary | None, pod_sets: list[PodSetRequest], total: int) -> str | None:
    if nodes is None or nodes.nodes == 0:
        return f"no node provides GPU type {row.flavor}"
    biggest = nodes.largest
    for pod_set in pod_sets:
        if pod_set.gpus_per_pod > biggest:
            return (
                f"a pod of {pod_set.name} asks {_gpus_text(pod_set.gpus_per_pod)}, "
                f"but no {row.flavor} node has more than {biggest}"
            )
    ceiling = row.nominal + row.borrowing_limit if row.borrowing_limit is not None and row.cohort else None
    if not row.cohort:
        ceiling = row.nominal
    if ceiling is not None and total > ceiling:
        return (
            f"the job asks {_gpus_text(total)} of {row.flavor}, more than the team may ever hold "
            f"({_plain(row.nominal)} quota + {_plain(ceiling - row.nominal)} borrowable)"
        )
    if total > nodes.gpus:
        return f"the job asks {_gpus_text(total)}, more than all {nodes.nodes} {row.flavor} nodes have"
    return None


def _explain_flavor(
    explanation: Explanation,
    workload: dict[str, Any],
    workloads: list[dict[str, Any]],
    capacity: Capacity,
    row: TeamUsage,
    pod_sets: list[PodSetRequest],
) -> None:
    total = Fraction(explanation.gpus)
    own_left = max(Fraction(0), row.nominal - row.used)
    cohort_rows = [
        q
        for q in capacity.queues
        if row.cohort and q.cohort == row.cohort and q.flavor == row.flavor and q.resource == row.resource
    ]
    others = [q for q in cohort_rows if q.cluster_queue != row.cluster_queue]
    idle_elsewhere = sum((_lendable(q) for q in others), Fraction(0))
    may_borrow = (
        Fraction(0)
        if not row.cohort
        else idle_elsewhere
        if row.borrowing_limit is None
        else min(idle_elsewhere, max(Fraction(0), row.borrowing_limit - row.borrowed))
    )
    borrowers = [q for q in others if q.borrowed > 0]
    nodes = capacity.flavor(row.flavor) or _no_nodes(row.flavor)
    shown = [q for q in capacity.quarantined if q.flavor == row.flavor][:QUARANTINES_LISTED]
    for node in shown:
        explanation.reasons.append(
            Reason(
                "quarantine",
                f"node {node.name} ({_gpus_text(node.gpus)}) is quarantined since {node.since or '?'}: {node.reason}",
            )
        )
    if nodes.quarantined_nodes > len(shown):
        rest, rest_gpus = nodes.quarantined_nodes - len(shown), nodes.quarantined_gpus - sum(n.gpus for n in shown)
        explanation.reasons.append(
            Reason("quarantine", f"and {rest} more quarantined {row.flavor} nodes ({_gpus_text(rest_gpus)})")
        )
    if total > own_left + may_borrow:
        if borrowers and row.used < row.nominal:
            names = ", ".join(f"{q.team} borrows {_gpus_text(q.borrowed)}" for q in borrowers)
            explanation.reasons.append(
                Reason(
                    "reclaim",
                    f"{names} of the cohort's {row.flavor} GPUs while your team uses {_plain(row.used)} of its "
                    f"{_plain(row.nominal)}: Kueue reclaims them by preempting the borrowers' newest jobs",
                )
            )
            explanation.remedies.append("wait: reclaim preempts the borrowing jobs, then this job is admitted")
        if row.used > 0:
            mine = _own_admitted(workloads, explanation.namespace, workload)
            listed = ", ".join(f"{name} ({_gpus_text(g)})" for name, g in mine) or "admitted workloads"
            explanation.reasons.append(
                Reason(
                    "quota",
                    f"your team uses {_plain(row.used)} of its {_plain(row.nominal)} {row.flavor} GPUs"
                    f" (borrowed {_plain(row.borrowed)}): {listed}; this job needs {_gpus_text(total)}",
                )
            )
            explanation.remedies.append(
                "wait for the team's running jobs to finish, or stop one of them"
                + (", or submit it with --priority urgent to preempt lower-priority team jobs" if mine else "")
            )
        if row.cohort and row.borrowing_limit is not None and row.borrowed >= row.borrowing_limit:
            explanation.reasons.append(
                Reason(
                    "borrowing-limit",
                    f"your team already borrows {_plain(row.borrowed)} GPUs, its borrowing limit",
                )
            )
        elif row.cohort and not borrowers and idle_elsewhere < total - own_left:
            explanation.reasons.append(
                Reason(
                    "cohort-busy",
                    f"the other teams lend only {_gpus_text(idle_elsewhere)} idle {row.flavor} GPUs now",
                )
            )
        return
    # Quota allows it: then the nodes decide.
    free = nodes.free
    blocked = [ps for ps in pod_sets if nodes.placeable(ps.gpus_per_pod) < ps.count]
    if not blocked:
        return
    pod_set = blocked[0]
    best = nodes.most_free
    if free >= total:
        explanation.reasons.append(
            Reason(
                "fragmentation",
                f"{_gpus_text(free)} of {row.flavor} are free, but at most {best} on one node, and each pod of "
                f"{pod_set.name} asks {pod_set.gpus_per_pod} on one node",
            )
        )
        explanation.remedies.append(
            f"wait for a node to have {pod_set.gpus_per_pod} free GPUs (small jobs finishing), or ask for at most "
            f"{best} GPUs per pod"
            if best
            else "wait for running jobs to finish"
        )
    else:
        explanation.reasons.append(
            Reason(
                "capacity",
                f"only {_gpus_text(free)} of {row.flavor} are free on usable nodes; the job needs {_gpus_text(total)}",
            )
        )
        returning = " or quarantined nodes to return" if nodes.quarantined_nodes else ""
        explanation.remedies.append(f"wait for running jobs to finish{returning}")


def _lendable(row: TeamUsage) -> Fraction:
    idle = max(Fraction(0), row.nominal - row.used)
    return idle if row.lending_limit is None else min(idle, row.lending_limit)


def _own_admitted(workloads: list[dict[str, Any]], namespace: str, this: dict[str, Any]) -> list[tuple[str, int]]:
    return [
        (job_name(w), total_gpus(w))
        for w in workloads
        if w is not this
        and w["metadata"].get("namespace") == namespace
        and is_true(w, "QuotaReserved")
        and not is_true(w, "Finished")
        and total_gpus(w) > 0
    ]


def _borrowing_risk(explanation: Explanation, workload: dict[str, Any], capacity: Capacity | None) -> None:
    """An admitted job on borrowed GPUs is the first one reclaim preempts: say so."""
    if capacity is None or explanation.cluster_queue is None:
        return
    for row in _team_rows(capacity, explanation.cluster_queue):
        if row.borrowed > 0:
            explanation.reasons.append(
                Reason(
                    "borrowing",
                    f"your team borrows {_gpus_text(row.borrowed)} of {row.flavor} beyond its quota: when the "
                    "lending team submits work, Kueue preempts the team's newest, lowest-priority jobs",
                )
            )


def as_json(explanation: Explanation) -> dict[str, Any]:
    return {
        "job": explanation.job,
        "namespace": explanation.namespace,
        "state": explanation.state,
        "workload": explanation.workload,
        "clusterQueue": explanation.cluster_queue,
        "position": explanation.position,
        "gpus": explanation.gpus,
        "aheadGpus": explanation.ahead_gpus,
        "reasons": [{"kind": r.kind, "message": r.message} for r in explanation.reasons],
        "remedies": explanation.remedies,
        "kueueMessage": explanation.kueue_message,
        "source": explanation.source,
        "workerCluster": explanation.worker,
        "requeues": [r.as_json() for r in explanation.requeues],
        "runsOn": [{"pod": p.pod, "node": p.node or None} for p in explanation.runs_on],
        "capacity": [c.as_json() for c in explanation.capacity_now],
        "capacityFreshness": explanation.capacity_freshness.as_json() if explanation.capacity_freshness else None,
    }

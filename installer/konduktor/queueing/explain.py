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
from konduktor.queueing.capacity import Capacity, NodeCapacity
from konduktor.quotas.multikueue import is_dispatch_check
from konduktor.quotas.usage import TeamUsage
from konduktor.vocabulary import PODS_REFUSED_REASON

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
    rows = [q for q in capacity.queues if q.cluster_queue == cluster_queue]
    team = rows[0].team if rows else cluster_queue
    return QueueView(team, cluster_queue, rows, [p for p in pending], source)


def _plain(value: Fraction) -> str:
    return str(int(value)) if value.denominator == 1 else str(float(value))


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
    quarantined = {n.name: n.quarantine for n in capacity.nodes if n.quarantine is not None}
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
    return [q for q in capacity.queues if q.cluster_queue == cluster_queue]


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
        nodes = [n for n in capacity.nodes if n.flavor == row.flavor]
        problem = _never_fits(row, nodes, pod_sets, explanation.gpus)
        if problem is None:
            fits.append(row)
        else:
            never.append(problem)
    if not fits:
        explanation.state = "never-fit"
        explanation.reasons.extend(Reason("never-fit", text) for text in never)
        biggest = max((n.gpus for n in capacity.nodes if n.flavor in {r.flavor for r in rows}), default=0)
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


def _never_fits(row: TeamUsage, nodes: list[NodeCapacity], pod_sets: list[PodSetRequest], total: int) -> str | None:
    if not nodes:
        return f"no node provides GPU type {row.flavor}"
    biggest = max(n.gpus for n in nodes)
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
    if total > sum(n.gpus for n in nodes):
        return f"the job asks {_gpus_text(total)}, more than all {len(nodes)} {row.flavor} nodes have"
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
    cohort_rows = [q for q in capacity.queues if row.cohort and q.cohort == row.cohort and q.flavor == row.flavor]
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
    nodes = [n for n in capacity.nodes if n.flavor == row.flavor]
    quarantined = [n for n in nodes if n.quarantine is not None]
    for node in quarantined[:QUARANTINES_LISTED]:
        assert node.quarantine is not None
        explanation.reasons.append(
            Reason(
                "quarantine",
                f"node {node.name} ({_gpus_text(node.gpus)}) is quarantined since {node.quarantine.since or '?'}: "
                f"{node.quarantine.reason}",
            )
        )
    if len(quarantined) > QUARANTINES_LISTED:
        rest = quarantined[QUARANTINES_LISTED:]
        explanation.reasons.append(
            Reason(
                "quarantine",
                f"and {len(rest)} more quarantined {row.flavor} nodes ({_gpus_text(sum(n.gpus for n in rest))})",
            )
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
    usable = [n for n in nodes if n.usable]
    free = sum(n.free for n in usable)
    placeable = {ps.name: sum(n.free // ps.gpus_per_pod for n in usable) for ps in pod_sets}
    blocked = [ps for ps in pod_sets if placeable[ps.name] < ps.count]
    if not blocked:
        return
    pod_set = blocked[0]
    best = max((n.free for n in usable), default=0)
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
        returning = " or quarantined nodes to return" if quarantined else ""
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
    }

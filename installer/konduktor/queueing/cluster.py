"""What `konduktor` reads and writes on a cluster: the team's Workloads and LocalQueues, Kueue's visibility API
where it is served, the published capacity, and (as an administrator) the capacity to publish."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from konduktor.errors import UsageError
from konduktor.kube.client import ApiError, Kube
from konduktor.queueing.capacity import (
    CAPACITY_KEY,
    HEARTBEAT_LEASE,
    HEARTBEAT_NAMESPACE,
    HEARTBEAT_SECONDS,
    PER_NODE_KEY,
    Capacity,
    configmap,
    copy_revision,
    freshness,
    from_json,
    from_per_node_json,
    heartbeat,
    micro_time,
    node_capacity,
    revision,
    running_slices,
    slice_summary,
    summarize,
)
from konduktor.queueing.explain import (
    Explanation,
    Pending,
    Running,
    Source,
    job_name,
    node_requeues,
    pending_order,
    running_jobs,
    why,
    with_freshness,
    with_pod_nodes,
    with_policy,
    with_requeues,
)
from konduktor.quotas.usage import gpu_usage
from konduktor.vocabulary import (
    CAPACITY_CONFIGMAP,
    JOB_NAME_LABEL,
    KUEUE_API,
    REQUEUED_FOR_NODE_HEALTH,
    TEAM_LABEL,
)

VISIBILITY_API = "/apis/visibility.kueue.x-k8s.io/v1beta2"
# Pods that may hold GPUs: bound to a node and not finished (one that finishes leaves a watch as DELETED).
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
# The visibility API is absent (404) or its aggregated server unreachable (503): derive the order instead.
NOT_SERVED = (404, 503)


@dataclass
class TeamQueues:
    namespace: str
    workloads: list[dict[str, Any]]
    local_queues: dict[tuple[str, str], str]  # (namespace, LocalQueue) -> ClusterQueue
    pending: list[Pending]
    source: Source
    capacity: Capacity | None
    running: list[Running]


def read_capacity(kube: Kube) -> Capacity:
    """The capacity to publish, listed with an administrator's rights (nodes, pods, flavors, ClusterQueues)."""
    nodes = kube.list("v1", "Node")
    pods = kube.list("v1", "Pod", field_selector=BOUND_PODS)
    flavors = kube.list(KUEUE_API, "ResourceFlavor")
    queues = kube.list(KUEUE_API, "ClusterQueue")
    held = [found for found in map(running_slices, pods) if found is not None]
    return summarize(node_capacity(nodes, pods, flavors), gpu_usage(queues), slice_summary(nodes, held, flavors))


@dataclass
class Publication:
    """One round of writes: the capacity, its revision, the team namespaces written, those whose copy was already
    this revision (nothing written), those that refused the write with why, and the heartbeat's refusal, if any."""

    capacity: Capacity
    revision: str
    written: list[str]
    unchanged: list[str]
    refused: dict[str, str]
    heartbeat: str | None = None

    @property
    def namespaces(self) -> list[str]:
        return sorted([*self.written, *self.unchanged])


def team_namespaces(kube: Kube) -> list[str]:
    return sorted(n["metadata"]["name"] for n in kube.list("v1", "Namespace", label_selector=TEAM_LABEL))


def write_copies(
    kube: Kube, capacity: Capacity, changed_at: str, namespaces: Sequence[str], known: dict[str, str | None]
) -> Publication:
    """The capacity written to each team namespace whose copy is not this revision. `known` holds each namespace's
    revision as last read or written (read here once for a namespace it lacks) and is kept up to date, so an
    unchanged capacity costs no write and, once known, no read. One namespace that refuses (a team label on a
    namespace the quotas did not grant the publisher, or one still being set up) does not keep the others from
    their answers; it is read again next time."""
    current = revision(capacity)
    done = Publication(capacity, current, [], [], {})
    for namespace in namespaces:
        try:
            if namespace not in known:
                known[namespace] = copy_revision(kube.get("v1", "ConfigMap", CAPACITY_CONFIGMAP, namespace))
            if known[namespace] == current:
                done.unchanged.append(namespace)
                continue
            kube.apply(configmap(capacity, namespace, changed_at))
        except ApiError as problem:
            if problem.status not in (403, 404):
                raise
            known.pop(namespace, None)
            done.refused[namespace] = problem.message
            continue
        known[namespace] = current
        done.written.append(namespace)
    for gone in set(known) - set(namespaces):
        del known[gone]
    return done


def renew_heartbeat(kube: Kube, current: str, now: datetime, period: float = HEARTBEAT_SECONDS) -> str | None:
    """One small write: the heartbeat Lease says revision `current` is the cluster's as of `now`. Returns why it was
    refused (no namespace konduktor-system yet, or no right to it), None when renewed."""
    try:
        kube.apply(heartbeat(current, now, period))
    except ApiError as problem:
        if problem.status not in (403, 404):
            raise
        return problem.message
    return None


def publish_capacity(kube: Kube, now: datetime | None = None) -> Publication:
    """The capacity, listed once, written to every team namespace whose copy differs, and the heartbeat renewed."""
    now = now or datetime.now(UTC)
    capacity = read_capacity(kube)
    done = write_copies(kube, capacity, micro_time(now), team_namespaces(kube), {})
    done.heartbeat = renew_heartbeat(kube, done.revision, now)
    return done


def published_capacity(kube: Kube, namespace: str, now: float | None = None) -> Capacity | None:
    """What the platform publishes to the team, with how fresh it is by the heartbeat and `now` (this machine's
    clock unless given); None where nothing is published (or not to this user)."""
    try:
        found = kube.get("v1", "ConfigMap", CAPACITY_CONFIGMAP, namespace)
    except ApiError as problem:
        if problem.status == 403:
            return None
        raise
    data = (found or {}).get("data") or {}
    if found is None or not (CAPACITY_KEY in data or PER_NODE_KEY in data):
        return None
    if CAPACITY_KEY not in data:  # an earlier publisher's list of every node
        return from_per_node_json(data[PER_NODE_KEY])
    try:
        lease = kube.get("coordination.k8s.io/v1", "Lease", HEARTBEAT_LEASE, HEARTBEAT_NAMESPACE)
    except ApiError as problem:
        if problem.status != 403:
            raise
        lease = None
    fresh = freshness(found, lease, time.time() if now is None else now)
    return replace(from_json(data[CAPACITY_KEY], fresh.as_of), freshness=fresh)


def visible_pending(kube: Kube, namespace: str, local_queue: str, cluster_queue: str) -> list[Pending] | None:
    """Kueue's own pending list of a LocalQueue (VisibilityOnDemand); None where the API is not served."""
    path = f"{VISIBILITY_API}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads"
    try:
        summary = kube.request("GET", path)
    except ApiError as problem:
        if problem.status in NOT_SERVED:
            return None
        raise
    return [
        Pending(
            position=int(item.get("positionInClusterQueue", 0)),
            name=item["metadata"]["name"],
            namespace=namespace,
            job=job_name(item),
            local_queue=local_queue,
            priority=int(item.get("priority", 0)),
            gpus=0,
            created=str(item["metadata"].get("creationTimestamp", "")),
        )
        for item in summary.get("items", [])
    ]


def team_queues(kube: Kube, namespace: str) -> TeamQueues:
    """Everything `konduktor queue` and `why` need, read with a team member's rights."""
    try:
        workloads = kube.list(KUEUE_API, "Workload", namespace)
        queues = kube.list(KUEUE_API, "LocalQueue", namespace)
    except ApiError as problem:
        if problem.status == 403:
            raise UsageError(
                f"you may not read the queues of namespace {namespace}",
                hint="pass -n with your team's namespace, or set it in your kubeconfig context",
            ) from problem
        raise
    local_queues = {(namespace, q["metadata"]["name"]): q["spec"]["clusterQueue"] for q in queues}
    derived = pending_order(workloads, local_queues)
    pending: list[Pending] = []
    source: Source = "visibility"
    for (ns, name), cluster_queue in sorted(local_queues.items()):
        visible = visible_pending(kube, ns, name, cluster_queue)
        if visible is None:
            source = "derived"
            break
        pending.extend(visible)
    if source == "derived":
        pending = derived
    else:
        sizes = {(p.namespace, p.name): p.gpus for p in derived}
        pending = [
            Pending(**{**vars(p), "gpus": sizes.get((p.namespace, p.name), 0)})
            for p in sorted(pending, key=lambda p: p.position)
        ]
    return TeamQueues(
        namespace,
        workloads,
        local_queues,
        pending,
        source,
        published_capacity(kube, namespace),
        running_jobs(workloads),
    )


def readable_cluster_queue(kube: Kube, name: str | None) -> dict[str, Any] | None:
    """A ClusterQueue with its quota and usage, where this identity may read it (an administrator; team members
    may not); None otherwise."""
    if name is None:
        return None
    try:
        return kube.get(KUEUE_API, "ClusterQueue", name)
    except ApiError as problem:
        if problem.status == 403:
            return None
        raise


def job_pods(kube: Kube, namespace: str, job: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The pods of a Job (by the label the Job controller sets), or the Pod itself; none for other kinds."""
    if job is None:
        return []
    if job["kind"] == "Pod":
        return [job]
    if job["kind"] == "Job":
        return kube.list("v1", "Pod", namespace, label_selector=f"{JOB_NAME_LABEL}={job['metadata']['name']}")
    return []


def requeue_events(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    """The health controller's Events of the namespace's requeues off quarantined nodes (a team member may read its
    namespace's Events; none where they may not)."""
    try:
        return kube.list("v1", "Event", namespace, field_selector=f"reason={REQUEUED_FOR_NODE_HEALTH}")
    except ApiError as problem:
        if problem.status == 403:
            return []
        raise


def workload_of_job(workloads: list[dict[str, Any]], job: str) -> dict[str, Any] | None:
    """The job's Workload (owned by it), else a Workload of that name."""
    for workload in workloads:
        if any(o.get("name") == job for o in workload["metadata"].get("ownerReferences", [])):
            return workload
    return next((w for w in workloads if w["metadata"]["name"] == job), None)


def explanation_for(
    team: TeamQueues,
    job: str,
    workload: dict[str, Any] | None,
    job_labels: dict[str, str] | None = None,
    policy: Sequence[str] = (),
    pods: Sequence[dict[str, Any]] = (),
    events: Sequence[dict[str, Any]] = (),
    job_object: dict[str, Any] | None = None,
) -> Explanation:
    """`why` for one job of the team's namespace, from what `team_queues` read, with what the platform's policies
    say of it, where its pods run, and the health controller's requeues of it (from the namespace's `events`;
    `job_object`, the Job or Pod, tells this job from an earlier one of its name)."""
    explanation = why(
        job,
        team.namespace,
        workload,
        workloads=team.workloads,
        local_queues=team.local_queues,
        capacity=team.capacity,
        pending=team.pending,
        job_labels=job_labels,
        source=team.source,
    )
    meta = (job_object or {}).get("metadata", {})
    requeues = node_requeues(
        events,
        job,
        workload["metadata"]["name"] if workload else None,
        meta.get("uid", ""),
        meta.get("creationTimestamp", ""),
    )
    explanation = with_requeues(explanation, requeues, workload, pods, team.capacity)
    return with_freshness(with_pod_nodes(with_policy(explanation, policy), pods, team.capacity), team.capacity)

"""The GPU capacity the platform publishes to team members, in a size that does not grow with the fleet: per GPU
type (ResourceFlavor) its nodes, GPUs, GPUs in service and free, and how the free GPUs are spread over the nodes
(how many nodes have k free GPUs); the quarantined nodes, the most recent first, up to `QUARANTINES_PUBLISHED`
(each type counts them all); per sharing group (its ResourceFlavor) and slice it advertises (`nvidia.com/mig-<profile>`,
`nvidia.com/gpu.shared`) its nodes, slices and free slices; and per team queue its quota and usage of whole GPUs
and of each slice. Nothing else: no pod, job or namespace names.

Team members may read their own namespaces only. Fragmentation ("28 GPUs free, at most 7 per node") and
never-fit ("no node has 12 GPUs") need the spread of free GPUs over the nodes, and who borrows a team's GPUs needs
the other ClusterQueues' usage; both are computed here from what an administrator reads and published as a
ConfigMap in every team namespace, where team members read it with the rights they have (`edit`), and need no
other. The ConfigMap is written only when its content changes (its revision, a hash of the content, is in an
annotation); a single Lease, renewed by the publisher at a slow period, says that the content is still current
(`freshness`; docs/design/capacity.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any, Literal

from konduktor.config.model import selects
from konduktor.gpu.node import allocatable_gpus, taints
from konduktor.gpu.pod import pod_amount, pod_gpus
from konduktor.gpu.sharing import is_slice
from konduktor.kube.conditions import is_true
from konduktor.kube.timestamps import format_time, parse_time
from konduktor.kube.watch import WatchEvent
from konduktor.quotas.usage import TeamUsage, gpu_usage
from konduktor.vocabulary import (
    CAPACITY_CONFIGMAP,
    CAPACITY_PUBLISHER,
    HEALTH_TAINT_KEY,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    SYSTEM_NAMESPACE,
)

# The published summary; `capacity.json` was the list of every node, which a reader still understands.
CAPACITY_KEY = "summary.json"
PER_NODE_KEY = "capacity.json"
REVISION_ANNOTATION = "konduktor.ai/capacity-revision"
CHANGED_AT_ANNOTATION = "konduktor.ai/capacity-changed-at"
# The heartbeat: one Lease in the platform's namespace, which every authenticated user may read (and no other).
HEARTBEAT_LEASE = CAPACITY_CONFIGMAP
HEARTBEAT_NAMESPACE = SYSTEM_NAMESPACE
HEARTBEAT_SECONDS = 60
# A heartbeat older than this many periods says the publisher is gone or blind (its watches fail).
MISSED_HEARTBEATS = 3
QUARANTINES_PUBLISHED = 50  # listed by name, the most recent first; each GPU type counts them all
REASON_CHARS = 160  # of a quarantine's reason (the health controller's annotation), as published


@dataclass(frozen=True)
class Quarantine:
    reason: str
    since: str


@dataclass(frozen=True)
class NodeCapacity:
    """One node as the publisher reads it (never published as such)."""

    name: str
    flavor: str
    gpus: int
    free: int
    schedulable: bool
    quarantine: Quarantine | None = None

    @property
    def usable(self) -> bool:
        """New pods may land here: schedulable, Ready and not quarantined."""
        return self.schedulable and self.quarantine is None


@dataclass(frozen=True)
class QuarantinedNode:
    name: str
    flavor: str
    gpus: int
    reason: str
    since: str

    @property
    def quarantine(self) -> Quarantine:
        return Quarantine(self.reason, self.since)


@dataclass(frozen=True)
class FlavorSummary:
    """One GPU type's nodes, in numbers that do not grow with their count."""

    flavor: str
    nodes: int  # nodes of this type
    gpus: int  # their GPUs
    largest: int  # the most GPUs one node has
    in_service: int  # GPUs on usable nodes (schedulable, Ready, not quarantined)
    free: int  # GPUs no running pod holds, on usable nodes
    free_nodes: tuple[tuple[int, int], ...]  # (k, usable nodes with exactly k free GPUs), k > 0, ascending
    quarantined_nodes: int
    quarantined_gpus: int

    def placeable(self, gpus_per_pod: int) -> int:
        """How many pods of `gpus_per_pod` GPUs the free GPUs take, each pod on one node."""
        return sum(nodes * (k // gpus_per_pod) for k, nodes in self.free_nodes) if gpus_per_pod > 0 else 0

    @property
    def most_free(self) -> int:
        """The most free GPUs on one usable node."""
        return max((k for k, _ in self.free_nodes), default=0)


@dataclass(frozen=True)
class SliceSummary:
    """One sharing group's slices of one resource, in numbers that do not grow with its nodes."""

    flavor: str  # the sharing group, its ResourceFlavor
    resource: str  # nvidia.com/mig-<profile> or nvidia.com/gpu.shared
    nodes: int  # the group's nodes that advertise it
    total: int  # their allocatable slices
    free: int  # slices no running pod holds, on usable nodes
    most_free: int  # the most free slices on one usable node


Fresh = Literal["current", "stale", "unknown"]


@dataclass(frozen=True)
class Freshness:
    """Whether the capacity a team member read is the cluster's current one, by the publisher's heartbeat."""

    state: Fresh
    message: str
    as_of: str = ""  # when the publisher last said this content was current

    def as_json(self) -> dict[str, str]:
        return {"state": self.state, "message": self.message, "asOf": self.as_of}


@dataclass(frozen=True)
class Capacity:
    flavors: tuple[FlavorSummary, ...]
    quarantined: tuple[QuarantinedNode, ...]  # the most recent first, at most QUARANTINES_PUBLISHED
    queues: tuple[TeamUsage, ...]  # whole GPUs, and the slices of the queues that have any
    # As of when it is known current (the heartbeat), else when it changed: not part of the content.
    published_at: str = field(default="", compare=False)
    # The reader's verdict on its age; None where nobody judged it (the publisher's own, a test's).
    freshness: Freshness | None = field(default=None, compare=False)
    slices: tuple[SliceSummary, ...] = ()  # per sharing group and resource, by flavor then resource

    def flavor(self, name: str) -> FlavorSummary | None:
        return next((f for f in self.flavors if f.flavor == name), None)

    @property
    def nodes(self) -> int:
        return sum(f.nodes for f in self.flavors)

    @property
    def all_quarantines_listed(self) -> bool:
        return len(self.quarantined) == sum(f.quarantined_nodes for f in self.flavors)

    def quarantine_of(self, node: str) -> QuarantinedNode | None:
        return next((q for q in self.quarantined if q.name == node), None)

    @property
    def stale(self) -> bool:
        return self.freshness is not None and self.freshness.state == "stale"


def _quarantine(node: Mapping[str, Any]) -> Quarantine | None:
    if not any(taint.key == HEALTH_TAINT_KEY for taint in taints(node)):
        return None
    annotations = node["metadata"].get("annotations", {})
    return Quarantine(reason=annotations.get(QUARANTINE_REASON, "unknown"), since=annotations.get(QUARANTINED_AT, ""))


def running_pod(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """The node a pod is bound to and the GPUs it holds there; None for a pod that holds none (unbound, finished,
    or asking for no GPU)."""
    spec = pod.get("spec", {})
    node = spec.get("nodeName")
    if not node or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        return None
    gpus = pod_gpus(spec)
    return (node, gpus) if gpus else None


def running_slices(pod: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, int], ...]] | None:
    """The node a pod is bound to and the slices it holds there, per resource; None for a pod that holds none."""
    spec = pod.get("spec", {})
    node = spec.get("nodeName")
    if not node or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        return None
    asked = {
        resource
        for key in ("initContainers", "containers")
        for container in spec.get(key) or ()
        for field_ in ("requests", "limits")
        for resource in ((container.get("resources") or {}).get(field_) or {})
        if is_slice(resource)
    }
    held = tuple((r, n) for r in sorted(asked) if (n := pod_amount(spec, r)) > 0)
    return (node, held) if held else None


def held_gpus(pods: Iterable[tuple[str, int]]) -> dict[str, int]:
    """GPUs held per node, from (node, GPUs) of the running pods."""
    held: dict[str, int] = {}
    for node, gpus in pods:
        held[node] = held.get(node, 0) + gpus
    return held


def flavor_of(labels: Mapping[str, str], flavors: Iterable[Mapping[str, Any]]) -> str | None:
    """The first ResourceFlavor whose node labels select a node of these labels."""
    return next(
        (f["metadata"]["name"] for f in flavors if selects(f.get("spec", {}).get("nodeLabels", {}), dict(labels))),
        None,
    )


def group_of(labels: Mapping[str, str], flavors: Iterable[Mapping[str, Any]]) -> str | None:
    """The ResourceFlavor of a node's sharing group: of those that select it, the one with the most node labels (a
    group's flavor selects by its GPU type's labels and the group's own, the type's flavor by the first only)."""
    found = [
        (len(f.get("spec", {}).get("nodeLabels", {})), f["metadata"]["name"])
        for f in flavors
        if selects(f.get("spec", {}).get("nodeLabels", {}), dict(labels))
    ]
    return min(found, key=lambda pair: (-pair[0], pair[1]))[1] if found else None


def allocatable_slices(node: Mapping[str, Any]) -> dict[str, int]:
    """The slices a node advertises (its allocatable MIG instances and shared GPUs), those it has any of."""
    allocatable = node.get("status", {}).get("allocatable") or {}
    return {r: int(str(v)) for r, v in allocatable.items() if is_slice(r) and str(v).isdigit() and int(str(v)) > 0}


def slice_summary(
    nodes: Iterable[Mapping[str, Any]],
    held: Iterable[tuple[str, tuple[tuple[str, int], ...]]],
    flavors: Sequence[Mapping[str, Any]],
) -> tuple[SliceSummary, ...]:
    """Per sharing group and slice resource: the group's nodes advertising it, their slices and the free ones on
    usable nodes (allocatable minus what the running pods hold there). One entry per group and resource, whatever
    the node count."""
    taken: dict[tuple[str, str], int] = {}
    for node_name, slices in held:
        for resource, count in slices:
            taken[(node_name, resource)] = taken.get((node_name, resource), 0) + count
    rows: dict[tuple[str, str], list[int]] = {}  # (flavor, resource) -> [nodes, total, free, most free]
    for node in nodes:
        offered = allocatable_slices(node)
        group = group_of(node["metadata"].get("labels", {}), flavors) if offered else None
        if group is None:
            continue
        name = node["metadata"]["name"]
        usable = (
            is_true(dict(node), "Ready")
            and not node.get("spec", {}).get("unschedulable", False)
            and _quarantine(node) is None
        )
        for resource, count in offered.items():
            free = max(0, count - taken.get((name, resource), 0)) if usable else 0
            row = rows.setdefault((group, resource), [0, 0, 0, 0])
            row[0] += 1
            row[1] += count
            row[2] += free
            row[3] = max(row[3], free)
    return tuple(SliceSummary(f, r, *row) for (f, r), row in sorted(rows.items()))


def read_node(node: Mapping[str, Any], flavor: str, held: int) -> NodeCapacity:
    gpus = allocatable_gpus(dict(node)) or 0
    return NodeCapacity(
        name=node["metadata"]["name"],
        flavor=flavor,
        gpus=gpus,
        free=max(0, gpus - held),
        schedulable=is_true(dict(node), "Ready") and not node.get("spec", {}).get("unschedulable", False),
        quarantine=_quarantine(node),
    )


def node_capacity(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], flavors: list[dict[str, Any]]
) -> list[NodeCapacity]:
    """Every node some ResourceFlavor selects: its GPUs, the GPUs no running pod holds, and its quarantine."""
    held = held_gpus(found for found in map(running_pod, pods) if found is not None)
    found = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        flavor = flavor_of(node["metadata"].get("labels", {}), flavors)
        if flavor is not None:
            found.append(read_node(node, flavor, held.get(node["metadata"]["name"], 0)))
    return found


def summarize(
    nodes: Iterable[NodeCapacity], queues: Iterable[TeamUsage], slices: Iterable[SliceSummary] = ()
) -> Capacity:
    """The published capacity of these nodes and queues: its size depends on the GPU types, the node sizes, the
    teams, the sharing groups' resources and the quarantines listed (at most QUARANTINES_PUBLISHED), never on the
    number of nodes."""
    by_flavor: dict[str, list[NodeCapacity]] = {}
    for node in nodes:
        by_flavor.setdefault(node.flavor, []).append(node)
    flavors = []
    quarantined: list[QuarantinedNode] = []
    for flavor, members in sorted(by_flavor.items()):
        usable = [n for n in members if n.usable]
        spread: dict[int, int] = {}
        for node in usable:
            if node.free > 0:
                spread[node.free] = spread.get(node.free, 0) + 1
        out = [n for n in members if n.quarantine is not None]
        flavors.append(
            FlavorSummary(
                flavor=flavor,
                nodes=len(members),
                gpus=sum(n.gpus for n in members),
                largest=max((n.gpus for n in members), default=0),
                in_service=sum(n.gpus for n in usable),
                free=sum(n.free for n in usable),
                free_nodes=tuple(sorted(spread.items())),
                quarantined_nodes=len(out),
                quarantined_gpus=sum(n.gpus for n in out),
            )
        )
        quarantined += [
            QuarantinedNode(n.name, flavor, n.gpus, n.quarantine.reason[:REASON_CHARS], n.quarantine.since)
            for n in out
            if n.quarantine is not None
        ]
    # The most recent first (a job requeued a moment ago asks of its node), then by name.
    quarantined.sort(key=lambda q: q.name)
    quarantined.sort(key=lambda q: parse_time(q.since) or 0.0, reverse=True)
    return Capacity(tuple(flavors), tuple(quarantined[:QUARANTINES_PUBLISHED]), tuple(queues), slices=tuple(slices))


def to_json(capacity: Capacity) -> str:
    """The published content: canonical (sorted keys, no spaces), so equal content is equal text and revision."""
    return json.dumps(
        {
            "flavors": [
                {
                    "flavor": f.flavor,
                    "nodes": f.nodes,
                    "gpus": f.gpus,
                    "largest": f.largest,
                    "inService": f.in_service,
                    "free": f.free,
                    "freeNodes": [list(pair) for pair in f.free_nodes],
                    "quarantinedNodes": f.quarantined_nodes,
                    "quarantinedGpus": f.quarantined_gpus,
                }
                for f in capacity.flavors
            ],
            "quarantined": [
                {"node": q.name, "flavor": q.flavor, "gpus": q.gpus, "reason": q.reason, "since": q.since}
                for q in capacity.quarantined
            ],
            "queues": [q.row() for q in capacity.queues],
            # Only where some node advertises slices: a cluster without sharing publishes what it did before.
            **(
                {
                    "slices": [
                        {
                            "flavor": s.flavor,
                            "resource": s.resource,
                            "nodes": s.nodes,
                            "total": s.total,
                            "free": s.free,
                            "mostFree": s.most_free,
                        }
                        for s in capacity.slices
                    ]
                }
                if capacity.slices
                else {}
            ),
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def revision(capacity: Capacity) -> str:
    return _digest(to_json(capacity))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _fraction(value: Any) -> Fraction | None:
    return None if value is None else Fraction(str(value))


def _queues(rows: Iterable[Mapping[str, Any]]) -> tuple[TeamUsage, ...]:
    numeric = ("nominal", "borrowing_limit", "lending_limit", "used", "borrowed", "lent")
    return tuple(
        TeamUsage(**{k: (_fraction(v) if k in numeric else v) for k, v in row.items()})  # type: ignore[arg-type]
        for row in rows
    )


def from_json(text: str, published_at: str = "") -> Capacity:
    data = json.loads(text)
    flavors = tuple(
        FlavorSummary(
            flavor=f["flavor"],
            nodes=int(f["nodes"]),
            gpus=int(f["gpus"]),
            largest=int(f["largest"]),
            in_service=int(f["inService"]),
            free=int(f["free"]),
            free_nodes=tuple((int(k), int(n)) for k, n in f.get("freeNodes", [])),
            quarantined_nodes=int(f.get("quarantinedNodes", 0)),
            quarantined_gpus=int(f.get("quarantinedGpus", 0)),
        )
        for f in data.get("flavors", [])
    )
    quarantined = tuple(
        QuarantinedNode(q["node"], q["flavor"], int(q["gpus"]), q["reason"], q["since"])
        for q in data.get("quarantined", [])
    )
    slices = tuple(
        SliceSummary(
            s["flavor"], s["resource"], int(s["nodes"]), int(s["total"]), int(s["free"]), int(s.get("mostFree", 0))
        )
        for s in data.get("slices", [])
    )
    return Capacity(flavors, quarantined, _queues(data.get("queues", [])), published_at, slices=slices)


def from_per_node_json(text: str) -> Capacity:
    """The per-node list an earlier publisher wrote (`capacity.json`), summarized as today's."""
    data = json.loads(text)
    nodes = [
        NodeCapacity(**{**n, "quarantine": Quarantine(**n["quarantine"]) if n.get("quarantine") else None})
        for n in data.get("nodes", [])
    ]
    summary = summarize(nodes, _queues(data.get("queues", [])))
    return Capacity(summary.flavors, summary.quarantined, summary.queues, data.get("publishedAt", ""))


def configmap(capacity: Capacity, namespace: str, changed_at: str) -> dict[str, Any]:
    """The team namespace's copy: the content, its revision and when it changed (both unchanged while it is)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CAPACITY_CONFIGMAP,
            "namespace": namespace,
            "annotations": {REVISION_ANNOTATION: revision(capacity), CHANGED_AT_ANNOTATION: changed_at},
        },
        "data": {CAPACITY_KEY: to_json(capacity)},
    }


def copy_revision(found: Mapping[str, Any] | None) -> str | None:
    """The revision of a team namespace's copy as read, from its content (a copy changed by hand, its annotation
    kept, is another revision); None when there is none (or it holds the per-node list)."""
    data = (found or {}).get("data") or {}
    return _digest(data[CAPACITY_KEY]) if CAPACITY_KEY in data else None


def micro_time(when: datetime) -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds, UTC."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def heartbeat(current: str, now: datetime, period: float = HEARTBEAT_SECONDS) -> dict[str, Any]:
    """The Lease that says the content of revision `current` is the cluster's as of `now`; a reader holds it stale
    once `leaseDurationSeconds` (MISSED_HEARTBEATS periods) have passed without a renewal."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": HEARTBEAT_LEASE,
            "namespace": HEARTBEAT_NAMESPACE,
            "annotations": {REVISION_ANNOTATION: current},
        },
        "spec": {
            "holderIdentity": CAPACITY_PUBLISHER,
            "leaseDurationSeconds": max(1, round(period * MISSED_HEARTBEATS)),
            "renewTime": micro_time(now),
        },
    }


def _ago(seconds: float) -> str:
    return f"{int(seconds)} s" if seconds < 120 else f"{int(seconds // 60)} min"


def freshness(copy: Mapping[str, Any], lease: Mapping[str, Any] | None, now: float) -> Freshness:
    """Whether a team namespace's copy (`copy`, the ConfigMap as read) is the cluster's current capacity, by the
    heartbeat `lease` (None: not readable) and the reader's clock `now` (epoch seconds).

    Current: the heartbeat was renewed within its duration and names the copy's revision, or the copy was written
    after the last renewal (the publisher writes the copies first, then renews). Stale: the heartbeat is older than
    its duration (the publisher stopped, or stopped seeing the cluster), or it names another revision than a copy
    written before it (this namespace's last write failed). Unknown: no heartbeat to read (an earlier platform)."""
    annotations = copy.get("metadata", {}).get("annotations", {})
    changed_at = str(annotations.get(CHANGED_AT_ANNOTATION, ""))
    spec = (lease or {}).get("spec", {})
    renewed_text = str(spec.get("renewTime", ""))
    renewed = parse_time(renewed_text)
    if lease is None or renewed is None:
        return Freshness(
            "unknown",
            "the platform publishes no heartbeat for it here: how old it is cannot be told"
            + (f" (it last changed at {changed_at})" if changed_at else ""),
            changed_at,
        )
    duration = float(spec.get("leaseDurationSeconds") or HEARTBEAT_SECONDS * MISSED_HEARTBEATS)
    as_of = format_time(renewed)
    if now > renewed + duration:
        return Freshness(
            "stale",
            f"the capacity publisher last confirmed it at {as_of}, {_ago(now - renewed)} ago (it renews every "
            f"{_ago(duration / MISSED_HEARTBEATS)}): it may be out of date",
            as_of,
        )
    current = str(lease.get("metadata", {}).get("annotations", {}).get(REVISION_ANNOTATION, ""))
    written = parse_time(changed_at)
    # A copy written after the last renewal is the publisher's newest (it writes the copies, then renews), for
    # at most one heartbeat's duration.
    newer = written is not None and renewed < written <= renewed + duration
    if copy_revision(copy) != current and not newer:
        return Freshness(
            "stale",
            f"the cluster's capacity changed after this namespace's copy (of {changed_at or '?'}) and the copy was "
            "not updated: it is out of date",
            changed_at,
        )
    return Freshness("current", f"current as of {as_of}", as_of)


KubeObject = dict[str, Any]


def slim_node(node: KubeObject) -> KubeObject:
    """What the capacity reads of a Node: labels, the quarantine's annotations and taints, unschedulable, allocatable
    and Ready. A whole Node is ~25 KB decoded; 10,000 of them kept whole would be the publisher's memory."""
    meta, spec, status = node.get("metadata", {}), node.get("spec", {}), node.get("status", {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k in (QUARANTINE_REASON, QUARANTINED_AT)}
    return {
        "metadata": {"name": meta.get("name", ""), "labels": meta.get("labels") or {}, "annotations": annotations},
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {
            "allocatable": status.get("allocatable") or {},
            "conditions": [c for c in status.get("conditions") or [] if c.get("type") == "Ready"],
        },
    }


def slim_pod(pod: KubeObject) -> KubeObject:
    """What the capacity reads of a Pod: where it runs, its phase and its containers' resources."""
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})

    def containers(key: str) -> list[KubeObject]:
        return [
            {k: c[k] for k in ("resources", "restartPolicy") if k in c}
            for c in spec.get(key) or ()
            if c.get("resources")
        ]

    return {
        "metadata": {k: meta[k] for k in ("name", "namespace") if k in meta},
        "spec": {
            "nodeName": spec.get("nodeName", ""),
            "containers": containers("containers"),
            "initContainers": containers("initContainers"),
        },
        "status": {"phase": pod.get("status", {}).get("phase", "")},
    }


class Fleet:
    """The cluster as the publisher knows it from its watches (`konduktor.kube.watch`): nodes (slimmed), the GPUs
    running pods hold per pod, the ResourceFlavors, the ClusterQueues and the team namespaces. `capacity()` is what
    a full list of each would give."""

    def __init__(self) -> None:
        self.nodes: dict[str, KubeObject] = {}
        self.pods: dict[tuple[str, str], tuple[str, int]] = {}
        self.sliced: dict[tuple[str, str], tuple[str, tuple[tuple[str, int], ...]]] = {}  # pods that hold slices
        self.flavors: dict[str, KubeObject] = {}
        self.queues: dict[str, KubeObject] = {}
        self.namespaces: set[str] = set()

    def apply(self, event: WatchEvent) -> None:
        """One watch event of a source named by its kind (Node, Pod, ResourceFlavor, ClusterQueue, Namespace)."""
        if event.source == "Pod":
            if event.type == "SYNC":
                self.pods, self.sliced = {}, {}
            for pod in event.objects:
                key = (pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
                running = None if event.type == "DELETED" else running_pod(pod)
                if running is None:
                    self.pods.pop(key, None)
                else:
                    self.pods[key] = running
                slices = None if event.type == "DELETED" else running_slices(pod)
                if slices is None:
                    self.sliced.pop(key, None)
                else:
                    self.sliced[key] = slices
            return
        if event.source == "Namespace":
            names = {n["metadata"]["name"] for n in event.objects}
            if event.type == "SYNC":
                self.namespaces = names
            elif event.type == "DELETED":
                self.namespaces -= names
            else:
                self.namespaces |= names
            return
        table = {"Node": self.nodes, "ResourceFlavor": self.flavors, "ClusterQueue": self.queues}[event.source]
        if event.type == "SYNC":
            table.clear()
        for obj in event.objects:
            if event.type == "DELETED":
                table.pop(obj["metadata"]["name"], None)
            else:
                table[obj["metadata"]["name"]] = obj

    def capacity(self) -> Capacity:
        held = held_gpus(self.pods.values())
        flavors = [self.flavors[name] for name in sorted(self.flavors)]
        nodes = []
        for name in sorted(self.nodes):
            node = self.nodes[name]
            flavor = flavor_of(node["metadata"].get("labels", {}), flavors)
            if flavor is not None:
                nodes.append(read_node(node, flavor, held.get(name, 0)))
        queues = gpu_usage([self.queues[name] for name in sorted(self.queues)])
        slices = slice_summary((self.nodes[name] for name in sorted(self.nodes)), self.sliced.values(), flavors)
        return summarize(nodes, queues, slices)

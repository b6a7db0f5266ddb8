"""The GPU capacity the platform publishes to team members: per node its GPU type, GPUs, free GPUs and
quarantine, and per team queue its quota and usage. Nothing else: no pod, job or namespace names.

Team members may read their own namespaces only. Fragmentation ("28 GPUs free, at most 7 per node") and
never-fit ("no node has 12 GPUs") need every node's free GPUs, and who borrows a team's GPUs needs the other
ClusterQueues' usage; both are computed here from what an administrator reads and published as a ConfigMap in
every team namespace, where team members read it with the rights they have (`edit`), and need no other.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from konduktor.config.model import selects
from konduktor.gpu.node import allocatable_gpus, taints
from konduktor.gpu.pod import pod_gpus
from konduktor.kube.conditions import is_true
from konduktor.quotas.usage import TeamUsage
from konduktor.vocabulary import (
    CAPACITY_CONFIGMAP,
    HEALTH_TAINT_KEY,
    QUARANTINE_REASON,
    QUARANTINED_AT,
)

CAPACITY_KEY = "capacity.json"


@dataclass(frozen=True)
class Quarantine:
    reason: str
    since: str


@dataclass(frozen=True)
class NodeCapacity:
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
class Capacity:
    nodes: tuple[NodeCapacity, ...]
    queues: tuple[TeamUsage, ...]
    published_at: str = ""


def _quarantine(node: dict[str, Any]) -> Quarantine | None:
    if not any(taint.key == HEALTH_TAINT_KEY for taint in taints(node)):
        return None
    annotations = node["metadata"].get("annotations", {})
    return Quarantine(reason=annotations.get(QUARANTINE_REASON, "unknown"), since=annotations.get(QUARANTINED_AT, ""))


def node_capacity(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], flavors: list[dict[str, Any]]
) -> list[NodeCapacity]:
    """Every node some ResourceFlavor selects: its GPUs, the GPUs no running pod holds, and its quarantine."""
    held: dict[str, int] = {}
    for pod in pods:
        node_name = pod.get("spec", {}).get("nodeName")
        if node_name and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            held[node_name] = held.get(node_name, 0) + pod_gpus(pod.get("spec", {}))
    found = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        labels = node["metadata"].get("labels", {})
        flavor = next(
            (f["metadata"]["name"] for f in flavors if selects(f.get("spec", {}).get("nodeLabels", {}), labels)),
            None,
        )
        if flavor is None:
            continue
        name = node["metadata"]["name"]
        gpus = allocatable_gpus(node) or 0
        found.append(
            NodeCapacity(
                name=name,
                flavor=flavor,
                gpus=gpus,
                free=max(0, gpus - held.get(name, 0)),
                schedulable=is_true(node, "Ready") and not node.get("spec", {}).get("unschedulable", False),
                quarantine=_quarantine(node),
            )
        )
    return found


def to_json(capacity: Capacity) -> str:
    return json.dumps(
        {
            "publishedAt": capacity.published_at,
            "nodes": [asdict(n) for n in capacity.nodes],
            "queues": [q.row() for q in capacity.queues],
        },
        sort_keys=True,
    )


def _fraction(value: Any) -> Fraction | None:
    return None if value is None else Fraction(str(value))


def from_json(text: str) -> Capacity:
    data = json.loads(text)
    nodes = tuple(
        NodeCapacity(**{**n, "quarantine": Quarantine(**n["quarantine"]) if n.get("quarantine") else None})
        for n in data.get("nodes", [])
    )
    numeric = ("nominal", "borrowing_limit", "lending_limit", "used", "borrowed", "lent")
    queues = tuple(
        TeamUsage(**{k: (_fraction(v) if k in numeric else v) for k, v in row.items()})  # type: ignore[arg-type]
        for row in data.get("queues", [])
    )
    return Capacity(nodes=nodes, queues=queues, published_at=data.get("publishedAt", ""))


def configmap(capacity: Capacity, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CAPACITY_CONFIGMAP, "namespace": namespace},
        "data": {CAPACITY_KEY: to_json(capacity)},
    }

"""The fake nodes of the simulated cluster in its API: created or brought back to the spec, waited for, counted."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from konduktor.kube.client import ApiError, Kube
from konduktor.kube.conditions import is_true
from konduktor.sim.nodes import node_manifests, system_node
from konduktor.sim.spec import SimSpec
from konduktor.tools.gobuild import Progress
from konduktor.vocabulary import GPU_RESOURCE
from konduktor.waiting import wait_until

# The taints the node lifecycle controller keeps on a node that is not (yet) Ready or not reachable.
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


class NodeFleet:
    """The system node and the spec's GPU nodes, which kwok plays."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def apply(self, kube: Kube, spec: SimSpec) -> list[str]:
        nodes = [system_node(), *node_manifests(spec.pools, spec.levels)]
        self.progress(f"nodes: applying {len(nodes)} fake nodes")

        def apply(node: dict[str, Any]) -> None:
            # A new node is created with its status in one request, as a kubelet registers its node: kwok's
            # node-initialize stage keeps the capacity and address it finds, so no version of the Node that kwok
            # can read lacks them (creating it bare and setting the status next raced with kwok's defaults).
            try:
                kube.create(node)
                return
            except ApiError as problem:
                if problem.status != 409:
                    raise
            # An existing node (`up` again, a reshaped cluster) is brought back to what the spec says.
            status = node.pop("status")
            kube.apply(node)
            kube.apply_status({"apiVersion": "v1", "kind": "Node", "metadata": node["metadata"], "status": status})

        # A few requests in flight: a thousand nodes take seconds, not minutes, and the API server keeps up.
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(apply, nodes))
        return [n["metadata"]["name"] for n in nodes]

    def wait_ready(self, kube: Kube, names: list[str], timeout: float | None = None) -> None:
        """Until every named node is Ready and schedulable; by default 2 minutes and 0.2 s more per node (a thousand
        nodes come up through one kwok and one node lifecycle controller)."""
        wanted = set(names)

        def ready() -> bool:
            items = kube.list("v1", "Node", label_selector="type=kwok")
            return wanted <= {n["metadata"]["name"] for n in items if is_true(n, "Ready") and not _lifecycle_taints(n)}

        # The node lifecycle controller lifts node.kubernetes.io/not-ready a moment after the node turns Ready; until
        # then nothing schedules there, and `up`'s preflight counts its GPUs as unusable.
        limit = 120 + 0.2 * len(names) if timeout is None else timeout
        wait_until(f"{len(names)} nodes to be Ready and schedulable", ready, timeout=limit, interval=1)

    def counts(self, kube: Kube) -> dict[str, int]:
        """Nodes, Ready nodes and allocatable GPUs in the cluster."""
        nodes = kube.list("v1", "Node")
        return {
            "nodes": len(nodes),
            "ready_nodes": sum(1 for n in nodes if is_true(n, "Ready")),
            "gpus": sum(int(n.get("status", {}).get("allocatable", {}).get(GPU_RESOURCE, 0)) for n in nodes),
        }


def _lifecycle_taints(node: dict[str, Any]) -> list[str]:
    return [t["key"] for t in node.get("spec", {}).get("taints") or () if t.get("key") in LIFECYCLE_TAINTS]

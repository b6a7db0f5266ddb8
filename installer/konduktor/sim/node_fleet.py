"""The fake nodes of the simulated cluster in its API: created or brought back to the spec, waited for, counted."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from konduktor.config.quantity import parse_quantity
from konduktor.errors import KonduktorError
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.conditions import is_true
from konduktor.sim.nodes import node_manifests, system_node
from konduktor.sim.spec import SimSpec
from konduktor.tools.gobuild import Progress
from konduktor.vocabulary import GPU_RESOURCE

# The taints the node lifecycle controller keeps on a node that is not (yet) Ready or not reachable.
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
CREATE_CONCURRENCY = 16


class NodeFleet:
    """The system node and the spec's GPU nodes, which kwok plays."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def apply(self, kube: Kube, spec: SimSpec) -> list[str]:
        nodes = [system_node(), *node_manifests(spec.pools, spec.levels)]
        # Only what is missing or differs from the spec is written: `up` on a running cluster of 1,000 nodes spent
        # 2 minutes re-applying nodes that were already as specified (3 requests each).
        live = {n["metadata"]["name"]: n for n in kube.list("v1", "Node", label_selector="type=kwok")}
        changed = [node for node in nodes if not as_specified(live.get(node["metadata"]["name"]), node)]
        self.progress(f"nodes: applying {len(changed)} of {len(nodes)} fake nodes")

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

        # Requests in flight: each waits on the API server far longer than this process works on it, so 16 at once
        # create ~2x as many nodes a second as 8 did on a busy machine (bench/README.md#fleet-scale).
        with ThreadPoolExecutor(max_workers=CREATE_CONCURRENCY) as pool:
            list(pool.map(apply, changed))
        return [n["metadata"]["name"] for n in nodes]

    def wait_ready(self, kube: Kube, names: list[str], timeout: float | None = None) -> None:
        """Until every named node is Ready and schedulable; by default 2 minutes and 0.2 s more per node (a thousand
        nodes come up through one kwok and one node lifecycle controller).

        One list, then a watch of the Nodes from there (listed again only when the watch breaks): polling the whole
        list every second cost the API server and this process more CPU than the nodes' start itself at 10,000
        nodes (a list of 10,000 Nodes is ~40 MB of JSON)."""
        wanted = set(names)
        # The node lifecycle controller lifts node.kubernetes.io/not-ready a moment after the node turns Ready; until
        # then nothing schedules there, and `up`'s preflight counts its GPUs as unusable.
        limit = 120 + 0.2 * len(names) if timeout is None else timeout
        deadline = time.monotonic() + limit
        waiting = set(wanted)
        while time.monotonic() < deadline:
            listing = kube.request("GET", "/api/v1/nodes", query={"labelSelector": "type=kwok"})
            waiting = wanted - {n["metadata"]["name"] for n in listing.get("items", []) if schedulable(n)}
            version = listing["metadata"]["resourceVersion"]
            try:
                while waiting and time.monotonic() < deadline:
                    self.progress(f"nodes: {len(wanted) - len(waiting)} of {len(wanted)} Ready and schedulable")
                    version = _follow(kube, wanted, waiting, version)
            except ApiError as problem:
                if problem.status not in (None, 410):  # a broken stream or an expired version: list again
                    raise
                continue
            break
        if waiting:
            raise KonduktorError(
                f"timed out after {limit:.0f}s waiting for {len(names)} nodes to be Ready and schedulable: "
                f"{len(waiting)} are not, e.g. {', '.join(sorted(waiting)[:5])}"
            )

    def counts(self, kube: Kube) -> dict[str, int]:
        """Nodes, Ready nodes and allocatable GPUs in the cluster."""
        nodes = kube.list("v1", "Node")
        return {
            "nodes": len(nodes),
            "ready_nodes": sum(1 for n in nodes if is_true(n, "Ready")),
            "gpus": sum(int(n.get("status", {}).get("allocatable", {}).get(GPU_RESOURCE, 0)) for n in nodes),
        }


def as_specified(live: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    """Whether a live Node has what the spec gives it: its labels, annotations and taints (others may add more), and
    its capacity, allocatable and InternalIP."""
    if live is None:
        return False
    meta, want = live.get("metadata", {}), wanted["metadata"]
    if not (want["labels"].items() <= (meta.get("labels") or {}).items()):
        return False
    if not (want["annotations"].items() <= (meta.get("annotations") or {}).items()):
        return False
    taints = live.get("spec", {}).get("taints") or []
    if any(taint not in taints for taint in wanted["spec"].get("taints", [])):
        return False
    status, wanted_status = live.get("status", {}), wanted["status"]
    for field in ("capacity", "allocatable"):
        have = status.get(field) or {}
        for name, amount in wanted_status[field].items():
            if name not in have or parse_quantity(str(have[name])) != parse_quantity(amount):
                return False
    return all(address in (status.get("addresses") or []) for address in wanted_status["addresses"])


def _follow(kube: Kube, wanted: set[str], waiting: set[str], version: str, seconds: int = 5) -> str:
    """Node changes from `version` for up to `seconds` (or until none of `wanted` is left `waiting`), kept in
    `waiting`; returns the last version seen, where the next watch goes on."""
    stream = kube.watch("v1", "Node", resource_version=version, timeout_seconds=seconds)
    try:
        for event in stream:
            node = event.get("object") or {}
            version = node.get("metadata", {}).get("resourceVersion", version)
            name = node.get("metadata", {}).get("name")
            if event.get("type") in ("ADDED", "MODIFIED") and name in wanted:
                (waiting.discard if schedulable(node) else waiting.add)(name)
                if not waiting:
                    break
    finally:
        stream.close()
    return version


def schedulable(node: dict[str, Any]) -> bool:
    """Ready, and without the taints the node lifecycle controller keeps on a node that is not."""
    return is_true(node, "Ready") and not _lifecycle_taints(node)


def _lifecycle_taints(node: dict[str, Any]) -> list[str]:
    return [t["key"] for t in node.get("spec", {}).get("taints") or () if t.get("key") in LIFECYCLE_TAINTS]

"""GPU nodes kept current by a list and a watch of the Node API; `node_reading` reads each as the decision sees it."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from konduktor.health.logs import log
from konduktor.health.node_reading import KUBELET_CONDITIONS, Node
from konduktor.health.telemetry import HealthMetrics
from konduktor.kube.client import ApiError, Kube


def newer(candidate: Node, current: Node | None) -> bool:
    """Whether `candidate` may replace `current` in the cache.

    The watch can deliver an event that was already in flight when the controller's own write returned a newer
    object; applying it would show the node without the taint just placed and plan the quarantine twice.
    resourceVersions are opaque by contract but are etcd revisions in practice; when they do not read as
    numbers, the later arrival wins, as in an informer.
    """
    if current is None:
        return True
    new, old = candidate["metadata"].get("resourceVersion", ""), current["metadata"].get("resourceVersion", "")
    return not (new.isdigit() and old.isdigit()) or int(new) >= int(old)


@dataclass(frozen=True)
class NodeEvent:
    """A change seen by the watch: SYNC carries the whole list (after a start or a 410 Gone)."""

    type: str
    nodes: tuple[Node, ...]


class NodeCache:
    """Every Node by name, as the controller last saw it (watch events and its own writes' responses), and which
    of them changed since the controller last asked (`take_changed`): a pass judges those, not the whole fleet."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        # Until the first list arrives the cache knows no node: deciding then would count the breaker's window
        # from nothing and ignore every fault as "not a known GPU node".
        self.synced = False
        self._changed: set[str] = set()
        self._relisted = False

    def apply(self, event: NodeEvent) -> None:
        if event.type == "SYNC":
            self._changed |= self.nodes.keys()
            self.nodes = {n["metadata"]["name"]: slim(n) for n in event.nodes}
            self._changed |= self.nodes.keys()
            self._relisted = True
            self.synced = True
            return
        for node in event.nodes:
            name = node["metadata"]["name"]
            if event.type == "DELETED":
                if self.nodes.pop(name, None) is not None:
                    self._changed.add(name)
            elif newer(node, self.nodes.get(name)):
                self.nodes[name] = slim(node)
                self._changed.add(name)

    def store(self, node: Node) -> None:
        name = node["metadata"]["name"]
        if newer(node, self.nodes.get(name)):
            self.nodes[name] = slim(node)
            self._changed.add(name)

    def take_changed(self) -> tuple[set[str], bool]:
        """The names of the Nodes added, changed or deleted since the last call, and whether a list replaced the
        cache meanwhile (after a start or a 410 Gone: the controller then judges every node again)."""
        changed, relisted = self._changed, self._relisted
        self._changed, self._relisted = set(), False
        return changed, relisted

    def get(self, name: str) -> Node | None:
        return self.nodes.get(name)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())


def slim(node: Node) -> Node:
    """The parts of a Node the controller reads. A whole Node (managed fields, images, the kubelet's conditions) is
    ~25 KB once decoded: kept whole, 5,000 nodes took 170 MB after the list and grew with every watch event."""
    meta, spec, status = node.get("metadata", {}), node.get("spec", {}), node.get("status", {})
    kept: Node = {
        "metadata": {k: meta[k] for k in ("name", "uid", "resourceVersion", "labels", "annotations") if k in meta},
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {k: status[k] for k in ("capacity", "allocatable") if k in status},
    }
    conditions = [c for c in status.get("conditions") or [] if c.get("type") not in KUBELET_CONDITIONS]
    if conditions:
        kept["status"]["conditions"] = conditions
    return kept


def list_nodes(kube: Kube, page: int = 500) -> tuple[list[Node], str]:
    """All Nodes (slimmed) and the list's resourceVersion, from which a watch continues without a gap.

    In pages, as client-go's reflector lists: one answer with every whole Node of a large cluster, decoded at once,
    would set the controller's peak memory. The pages come from one snapshot of the list's resourceVersion."""
    nodes: list[Node] = []
    query = {"limit": str(page)}
    while True:
        listing: Mapping[str, Any] = kube.request("GET", "/api/v1/nodes", query=query)
        nodes += [slim(node) for node in listing.get("items", [])]
        meta = listing.get("metadata", {})
        if not meta.get("continue"):
            return nodes, str(meta.get("resourceVersion", ""))
        query = {"limit": str(page), "continue": meta["continue"]}


class NodeWatch:
    """A thread that lists the Nodes, then watches them from the list's resourceVersion, and puts what it sees on
    `events`. A watch the server ends or the network drops resumes from the last version seen; one whose version
    has expired (410 Gone) starts over with a list, so no change is lost either way. `relist()` asks for a list
    now: the controller's safety net against a change the watch never delivered."""

    def __init__(self, kube: Kube, metrics: HealthMetrics, timeout_seconds: int = 300) -> None:
        self.kube = kube
        self.metrics = metrics
        self.timeout_seconds = timeout_seconds
        self.events: queue.Queue[NodeEvent] = queue.Queue()
        self._stopping = threading.Event()
        self._relist = threading.Event()
        self._stream: Any = None
        self.lists = 0  # lists made (the first, 410 Gone, relist())
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def relist(self) -> None:
        """List the Nodes again (a SYNC event follows), then watch on from that list."""
        self._relist.set()
        if self._stream is not None:
            self._stream.close()

    def stop(self) -> None:
        self._stopping.set()
        if self._stream is not None:
            self._stream.close()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        version: str | None = None
        backoff = 0.5
        while not self._stopping.is_set():
            try:
                if version is None or self._relist.is_set():
                    self._relist.clear()
                    nodes, version = list_nodes(self.kube)
                    self.events.put(NodeEvent("SYNC", tuple(nodes)))
                    self.lists += 1
                self._stream = self.kube.watch("v1", "Node", version, timeout_seconds=self.timeout_seconds)
                if self._relist.is_set():  # asked while this watch was being opened
                    self._stream.close()
                for event in self._stream:
                    node = event["object"]
                    version = node["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.events.put(NodeEvent(event["type"], (node,)))
                backoff = 0.5
            except ApiError as problem:
                if self._stopping.is_set():
                    return
                self.metrics.api_error("watch", "nodes", problem)
                if problem.status == 410:
                    log(logging.INFO, "node watch expired; listing the nodes again")
                    version = None
                    continue
                log(logging.WARNING, "node watch failed; retrying", error=problem.message, retry_in=backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 30)

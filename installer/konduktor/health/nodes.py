"""GPU nodes kept current by a list and a watch of the Node API; `node_reading` reads each as the decision sees it."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator

from konduktor.health.logs import log
from konduktor.health.node_reading import KUBELET_CONDITIONS, Node
from konduktor.health.telemetry import HealthMetrics
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.watch import ListWatch, WatchEvent, list_pages


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


class NodeCache:
    """Every Node by name, as the controller last saw it (watch events and its own writes' responses), and which
    of them changed since the controller last asked (`take_changed`): a pass judges those, not the whole fleet.
    The pass's taint writers store their responses while the pass applies the watch's events (`TaintWriter`)."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        # Until the first list arrives the cache knows no node: deciding then would count the breaker's window
        # from nothing and ignore every fault as "not a known GPU node".
        self.synced = False
        self._changed: set[str] = set()
        self._relisted = False
        self._lock = threading.Lock()

    def apply(self, event: WatchEvent) -> None:
        """A watch event (kube/watch.py): SYNC replaces every node, the others change one."""
        listed = {n["metadata"]["name"]: slim(n) for n in event.objects} if event.type == "SYNC" else {}
        with self._lock:
            if event.type == "SYNC":
                self._changed |= self.nodes.keys()
                self.nodes = listed
                self._changed |= self.nodes.keys()
                self._relisted = True
                self.synced = True
                return
            for node in event.objects:
                name = node["metadata"]["name"]
                if event.type == "DELETED":
                    if self.nodes.pop(name, None) is not None:
                        self._changed.add(name)
                elif newer(node, self.nodes.get(name)):
                    self.nodes[name] = slim(node)
                    self._changed.add(name)

    def store(self, node: Node) -> None:
        name = node["metadata"]["name"]
        with self._lock:
            if newer(node, self.nodes.get(name)):
                self.nodes[name] = slim(node)
                self._changed.add(name)

    def take_changed(self) -> tuple[set[str], bool]:
        """The names of the Nodes added, changed or deleted since the last call, and whether a list replaced the
        cache meanwhile (after a start or a 410 Gone: the controller then judges every node again)."""
        with self._lock:
            changed, relisted = self._changed, self._relisted
            self._changed, self._relisted = set(), False
        return changed, relisted

    def get(self, name: str) -> Node | None:
        return self.nodes.get(name)

    def __iter__(self) -> Iterator[Node]:
        with self._lock:
            return iter(list(self.nodes.values()))


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


def list_nodes(kube: Kube) -> tuple[list[Node], str]:
    """All Nodes (slimmed) and the list's resourceVersion, from which a watch continues without a gap."""
    return list_pages(kube, "v1", "Node", slim=slim)


def node_watch(kube: Kube, metrics: HealthMetrics, events: queue.Queue[WatchEvent]) -> ListWatch:
    """The Nodes listed, then watched from the list's resourceVersion, onto `events` (kube/watch.py): a dropped
    watch resumes from the last version seen, an expired one (410 Gone) starts over with a list."""

    def failed(_source: str, problem: ApiError) -> None:
        metrics.api_error("watch", "nodes", problem)
        if problem.status == 410:
            log(logging.INFO, "node watch expired; listing the nodes again")
        else:
            log(logging.WARNING, "node watch failed; retrying", error=problem.message)

    return ListWatch(kube, "v1", "Node", events, slim=slim, on_error=failed)

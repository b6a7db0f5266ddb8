"""The list-and-watch loop (`konduktor.kube.watch.ListWatch`) on the simulated cluster: one list, then a watch
resumed from the last version each time the server ends it, with the selectors on both, and nothing missed."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import pytest
from conftest import Sim

from konduktor.kube.watch import ListWatch, WatchEvent
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
NAMESPACE = "kube-watch-test"


@pytest.fixture
def namespace(sim: Sim) -> Iterator[str]:
    sim.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    yield NAMESPACE
    sim.kube.delete("v1", "Namespace", NAMESPACE)
    # Gone before the next test creates it again: a namespace being deleted takes no new object.
    wait_until("the namespace to be gone", lambda: sim.kube.get("v1", "Namespace", NAMESPACE) is None, 120)


def configmap(name: str, kept: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kept": kept}},
    }


def test_a_watch_the_server_ends_resumes_and_selectors_filter(sim: Sim, namespace: str) -> None:
    sim.kube.apply(configmap("before", "yes"))
    sim.kube.apply(configmap("ignored", "no"))
    events: queue.Queue[WatchEvent] = queue.Queue()
    seen: list[WatchEvent] = []
    watch = ListWatch(sim.kube, "v1", "ConfigMap", events, label_selector="kept=yes", timeout_seconds=1)
    watch.start()
    try:
        wait_until("the list", lambda: watch.synced)
        # The server ends each watch after a second: once it has been opened again twice, changes still arrive.
        wait_until("the watch resumed twice", lambda: watch.watches >= 3, timeout=60)
        sim.kube.apply(configmap("after", "yes"))
        sim.kube.apply(configmap("also-ignored", "no"))
        sim.kube.apply(configmap("before", "no"))  # leaves the selector: DELETED

        def arrived() -> bool:
            while not events.empty():
                seen.append(events.get_nowait())
            return any(e.type == "DELETED" for e in seen)

        wait_until("the changes", arrived, timeout=30)
    finally:
        watch.stop()
    names = [(e.type, sorted(o["metadata"]["name"] for o in e.objects)) for e in seen]
    assert names == [("SYNC", ["before"]), ("ADDED", ["after"]), ("DELETED", ["before"])]
    assert watch.lists == 1 and watch.healthy


def test_relist_lists_again_then_watches_on(sim: Sim, namespace: str) -> None:
    """A consumer's safety net: `relist()` delivers the whole list again as a SYNC event, and the watch goes on."""
    sim.kube.apply(configmap("first", "yes"))
    events: queue.Queue[WatchEvent] = queue.Queue()
    watch = ListWatch(sim.kube, "v1", "ConfigMap", events, label_selector="kept=yes")
    watch.start()
    try:
        assert events.get(timeout=30).type == "SYNC"
        wait_until("the watch", lambda: watch.watches >= 1)
        sim.kube.apply(configmap("second", "yes"))
        assert events.get(timeout=30).type == "ADDED"
        watch.relist()
        again = events.get(timeout=30)
        assert (again.type, sorted(o["metadata"]["name"] for o in again.objects)) == ("SYNC", ["first", "second"])
        sim.kube.apply(configmap("third", "yes"))
        after = events.get(timeout=30)
        assert (after.type, after.objects[0]["metadata"]["name"]) == ("ADDED", "third")
    finally:
        watch.stop()
    assert watch.lists == 2

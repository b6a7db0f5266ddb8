"""Which nodes a pass of the health controller judges: those whose inputs changed, those whose signal lasts, and,
in the safety net's full pass after a new list of the Nodes, every GPU node; and the faults a pass takes in while
it writes its taints. Counted or ordered, never timed. (The node cache's own notes of what changed:
test_health_edges.py.)

The session cluster has 4 fake nodes gpu-h100-0000..0003 with 10 H100 each (health_cluster.py).
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from collections.abc import Sequence

import pytest
from health_cluster import (  # noqa: F401 (fixtures: `kube`, the controller's namespace; `clean`, nodes reset)
    NAMESPACE,
    NODES,
    clean,
    controller,
    kube_with_controller_namespace,
    set_allocatable,
    settings,
    write_order,
)
from sim_fixture import health_taints, node

from konduktor.health.decide import RecordEvent, UpdateNode
from konduktor.health.leader import LEASE_API, LEASE_NAME
from konduktor.health.loop import HealthController
from konduktor.health.nodes import list_nodes
from konduktor.health.settings import BreakerSettings
from konduktor.kube.client import Kube
from konduktor.kube.watch import WatchEvent
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim


def listed(health: HealthController, kube: Kube) -> None:
    """What the Node watch delivers after a list."""
    nodes, _ = list_nodes(kube)
    health.nodes.apply(WatchEvent("Node", "SYNC", tuple(nodes)))


def judged(health: HealthController) -> list[int]:
    return [health.judgements[name] for name in NODES]


def test_a_pass_judges_the_node_that_changed_and_not_the_others(kube: Kube) -> None:
    health = controller(kube, settings())
    listed(health, kube)
    health.pass_once(poll=False)
    assert judged(health) == [1, 1, 1, 1]  # after a list, every node

    # A heartbeat as the watch delivers it: a new resourceVersion and the kubelet's Ready condition renewed, nothing
    # that the judgement reads.
    beat = copy.deepcopy(node(kube, NODES[0]))
    beat["metadata"]["resourceVersion"] = str(int(beat["metadata"]["resourceVersion"]) + 1)
    for condition in beat["status"]["conditions"]:
        condition["lastHeartbeatTime"] = "2030-01-01T00:00:00Z"
    health.nodes.apply(WatchEvent("Node", "MODIFIED", (beat,)))
    # A lost GPU on another node.
    victim = NODES[1]
    set_allocatable(kube, victim, 9)
    health.nodes.apply(WatchEvent("Node", "MODIFIED", (node(kube, victim),)))
    health.pass_once(poll=False)
    assert judged(health) == [1, 2, 1, 1]
    assert health_taints(node(kube, victim))

    # A signal that lasts (the GPU is still missing) is judged on every pass while it does; the others are not.
    health.pass_once(poll=False)
    health.pass_once(poll=False)
    assert judged(health) == [1, 4, 1, 1]
    set_allocatable(kube, victim, 10)
    health.nodes.apply(WatchEvent("Node", "MODIFIED", (node(kube, victim),)))
    health.pass_once(poll=False)  # judged once more: the GPU is back
    health.pass_once(poll=False)
    assert judged(health) == [1, 5, 1, 1]


def test_the_full_pass_catches_a_change_whose_event_was_missed(kube: Kube) -> None:
    health = controller(kube, settings())
    listed(health, kube)
    health.pass_once(poll=False)
    victim = NODES[2]
    set_allocatable(kube, victim, 9)  # and the controller never hears of it
    health.pass_once(poll=False)
    assert judged(health) == [1, 1, 1, 1]
    assert not health_taints(node(kube, victim))

    listed(health, kube)  # the safety net: the watch lists every Node again
    health.pass_once(poll=False)
    assert judged(health) == [2, 2, 2, 2]
    assert health_taints(node(kube, victim))


def test_the_loop_lists_and_judges_every_node_again_each_full_pass(kube: Kube) -> None:
    health = controller(kube, settings(full_pass_seconds=1))
    stop = threading.Event()
    loop = threading.Thread(target=health.run, args=(stop,))
    loop.start()
    try:
        wait_until(
            "three lists of the Nodes, each followed by a judgement of every GPU node",
            lambda: health.watch.lists >= 3 and min(judged(health)) >= 3,
            timeout=60,
        )
    finally:
        stop.set()
        loop.join(timeout=30)
    assert not loop.is_alive()


def lease_version(kube: Kube) -> str:
    lease = kube.get(LEASE_API, "Lease", LEASE_NAME, NAMESPACE)
    assert lease is not None
    return str(lease["metadata"]["resourceVersion"])


def other_tool_condition(kube: Kube, name: str, status: str | None) -> None:
    """A GPU condition node-problem-detector's rules (or NVSentinel) set; None takes it away."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions = [
        {
            "type": "GpuMemWatch",
            "status": status,
            "reason": "GpuMemWatchIsNotHealthy",
            "message": "ErrorCode:DCGM_FR_VOLATILE_DBE_DETECTED GPU:3",
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        }
    ]
    kube.apply_status(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"conditions": conditions if status else []},
        },
        "nvsentinel-test",
    )


def burst_over_a_pass(kube: Kube, health: HealthController, later: Sequence[str] = NODES[1:]) -> str:
    """One lost GPU when the pass begins and more (`later`) that the Node watch delivers while it writes the first
    one's taint (put in its queue here, where the watch puts them, so that the order is sure). Returns the
    resourceVersion the API server was at before the pass."""
    listed(health, kube)
    health.pass_once(poll=False)
    _, since = list_nodes(kube)
    first = NODES[0]
    set_allocatable(kube, first, 9)
    health.nodes.apply(WatchEvent("Node", "MODIFIED", (node(kube, first),)))
    for name in later:
        set_allocatable(kube, name, 9)
        health.node_events.put(WatchEvent("Node", "MODIFIED", (node(kube, name),)))
    return since


def test_faults_that_arrive_while_a_pass_writes_its_taints_are_tainted_before_its_conditions(kube: Kube) -> None:
    """The pass takes the later faults in: every node's taint, then every node's condition, in the order of the
    Node watch's changes (one node at a time, so that the order is the controller's and not its threads')."""
    health = controller(kube, settings(node_concurrency=1))
    since = burst_over_a_pass(kube, health)
    plan = health.pass_once(poll=False)

    assert [what for _, what in write_order(kube, since, 2 * len(NODES))] == ["taint"] * 4 + ["condition"] * 4
    assert Counter(type(a).__name__ for a in plan.actions) == {"UpdateNode": 4, "SetCondition": 4, "RecordEvent": 4}
    assert health.metrics.sample("konduktor_quarantines_total", {"reason": "GPULost"}) == 4


def test_the_breaker_counts_the_faults_a_pass_takes_in(kube: Kube) -> None:
    health = controller(kube, settings(breaker=BreakerSettings(max_fraction=1, max_nodes=2)))
    burst_over_a_pass(kube, health)
    plan = health.pass_once(poll=False)

    assert sum(1 for name in NODES if health_taints(node(kube, name))) == 2
    assert plan.breaker.tripped
    assert health.metrics.sample("konduktor_quarantines_blocked_total") == 2


def test_a_pass_takes_faults_in_for_a_bounded_time_and_the_next_pass_has_the_rest(kube: Kube) -> None:
    """A storm that goes on delays a pass's conditions and Events by `take_in_seconds` at most (none here): the
    faults delivered after it wait for the next pass, which taints them."""
    health = controller(kube, settings(node_concurrency=1))
    health.take_in_seconds = 0
    since = burst_over_a_pass(kube, health)
    health.pass_once(poll=False)
    assert [bool(health_taints(node(kube, name))) for name in NODES] == [True, False, False, False]
    assert [what for _, what in write_order(kube, since, 2)] == ["taint", "condition"]

    health._take_node_events(timeout=0)  # as the loop does before each pass
    health.pass_once(poll=False)
    assert all(health_taints(node(kube, name)) for name in NODES)


def test_a_new_fault_of_a_node_whose_taint_is_on_its_way_is_decided_once_it_is_written(kube: Kube) -> None:
    """One writer (node_concurrency 1) taints the four nodes in turn; meanwhile another tool's GPU condition on the
    last of them arrives. It is decided after that node's taint is written, on the node as quarantined: one taint."""
    health = controller(kube, settings(node_concurrency=1))
    listed(health, kube)
    health.pass_once(poll=False)
    for name in NODES:
        set_allocatable(kube, name, 9)
        health.nodes.apply(WatchEvent("Node", "MODIFIED", (node(kube, name),)))
    victim = NODES[-1]
    other_tool_condition(kube, victim, "True")
    try:
        health.node_events.put(WatchEvent("Node", "MODIFIED", (node(kube, victim),)))
        plan = health.pass_once(poll=False)
        taints = [a for a in plan.actions if isinstance(a, UpdateNode) and a.add_taints]
        assert sorted(a.node for a in taints) == NODES
        also = [a for a in plan.actions if isinstance(a, RecordEvent) and a.node == victim]
        assert [a.reason for a in also] == ["GPULost", "GpuMemWatch"]
        assert also[1].message.startswith("also: GpuMemWatch")
    finally:
        other_tool_condition(kube, victim, None)


def test_once_a_fault_arrived_during_a_pass_it_waits_a_moment_for_the_next(kube: Kube) -> None:
    """A burst's reports come unevenly: one that comes after the pass wrote every taint it knew of, but before a
    quiet moment passed, is tainted in the pass too, before any condition. The leader renews its Lease meanwhile
    (the wait outlasts a third of it)."""
    health = controller(kube, settings(node_concurrency=1))  # a 3-s Lease
    health.take_in_quiet_seconds = 5
    wait_until("the controller leads", health._lead, timeout=30)
    *early, late = NODES
    since = burst_over_a_pass(kube, health, later=early[1:])
    renewed = lease_version(kube)

    def report_late() -> None:
        wait_until("the pass's first taints", lambda: all(health_taints(node(kube, name)) for name in early))
        set_allocatable(kube, late, 9)
        health.node_events.put(WatchEvent("Node", "MODIFIED", (node(kube, late),)))

    reporter = threading.Thread(target=report_late)
    reporter.start()
    try:
        health.pass_once(poll=False)
    finally:
        reporter.join(timeout=60)
    assert [what for _, what in write_order(kube, since, 2 * len(NODES))] == ["taint"] * 4 + ["condition"] * 4
    assert lease_version(kube) != renewed and health.leading


def test_when_a_poll_is_due_the_node_watchs_faults_are_decided_in_a_pass_before_it(kube: Kube) -> None:
    """A poll waits on Loki, Prometheus and the API server; a lost GPU need not: the loop's first pass reads no polled
    source, and the poll's pass has nothing left to do for that node."""
    health = controller(kube, settings())
    listed(health, kube)
    health.pass_once(poll=False)
    victim = NODES[2]
    set_allocatable(kube, victim, 9)
    health.nodes.apply(WatchEvent("Node", "MODIFIED", (node(kube, victim),)))
    first, polled = health.passes(poll=True)
    assert [a.node for a in first.actions if isinstance(a, UpdateNode) and a.add_taints] == [victim]
    assert [a for a in polled.actions if a.node == victim] == []
    assert len(health.passes(poll=False)) == 1

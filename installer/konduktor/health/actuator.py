"""The plan's writes, made through the Kubernetes API: taints and annotations, the GPUHealthy condition, Events,
requalification Jobs, the Workloads' requeues and their owners' Events.

The Node writes are `node_writes.write`, the one the installer's quarantine and release use too (how a Node write
survives a concurrent writer is told there); the actuator adds the controller's own: the Nodes read from its
cache and the cache kept current with what it wrote, the metrics, the log, and the work actions.

Each node's writes are made in the plan's order; different nodes are written at the same time (up to
`node_concurrency`), so a burst of faults does not queue behind one node's round trips, and in waves (every node's
first write, its taint, before any node's second), so the burst's last node is not quarantined behind the other
nodes' conditions and Events. A pass's taints go out as they are decided (`TaintWriter`), so that the faults that
arrive while they are on their way need not wait for the slowest of them. How many nodes are
quarantined was decided before any write (the breaker is part of the plan), so concurrency never changes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from konduktor.health.decide import (
    Action,
    DeactivateWorkload,
    NodeState,
    ReactivateWorkload,
    RecordEvent,
    SetCondition,
    StartRequalification,
    TellOwner,
    UpdateNode,
    WorkAction,
)
from konduktor.health.fanout import in_waves
from konduktor.health.logs import log
from konduktor.health.node_writes import write
from konduktor.health.nodes import NodeCache
from konduktor.health.requalification import Requalifier
from konduktor.health.telemetry import HealthMetrics
from konduktor.health.workloads import deactivate, reactivate, tell_owner
from konduktor.kube.client import ApiError, Kube
from konduktor.vocabulary import QUARANTINE_REASON, QUARANTINED_AT

COMPONENT = "konduktor-health"


@dataclass
class Outcome:
    """When each node's last write finished, and the nodes where a write failed (their later writes were skipped)."""

    finished: dict[str, float] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)

    def after(self, earlier: Outcome) -> Outcome:
        """These writes' outcome and that of writes made before them (whose failed nodes they skipped), as one."""
        finished = {**earlier.finished, **self.finished}
        failed = earlier.failed | self.failed
        return Outcome({node: at for node, at in finished.items() if node not in failed}, failed)


class Actuator:
    def __init__(
        self,
        kube: Kube,
        nodes: NodeCache,
        requalifier: Requalifier,
        metrics: HealthMetrics,
        identity: str,
        clock: Callable[[], float] = time.time,
        concurrency: int = 1,
    ) -> None:
        self.kube = kube
        self.nodes = nodes
        self.requalifier = requalifier
        self.metrics = metrics
        self.identity = identity
        self.clock = clock
        self.concurrency = concurrency

    def execute(self, actions: Sequence[Action | WorkAction], states: Mapping[str, NodeState]) -> Outcome:
        by_node: dict[str, list[Action | WorkAction]] = {}
        for action in actions:
            by_node.setdefault(action.node, []).append(action)
        outcome = Outcome()
        outcome.failed = in_waves(
            lambda node, action: self._write(node, action, states, outcome), by_node, self.concurrency
        )
        for node in outcome.failed:
            outcome.finished.pop(node, None)
        return outcome

    def _write(self, node: str, action: Action | WorkAction, states: Mapping[str, NodeState], outcome: Outcome) -> bool:
        """One of a node's writes, made after the ones before it; False when it failed (the node's later writes
        are skipped: its state is not what they assume; the next pass retries)."""
        try:
            self._make(action, states)
        except ApiError as problem:
            verb, resource = _api_target(action)
            self.metrics.api_error(verb, resource, problem)
            log(logging.ERROR, "write failed", node=node, action=type(action).__name__, error=problem.message)
            return False
        outcome.finished[node] = self.clock()
        return True

    def _make(self, action: Action | WorkAction, states: Mapping[str, NodeState]) -> None:
        now = self.clock()
        if isinstance(action, UpdateNode | SetCondition | RecordEvent):
            written = write(self.kube, action, self.nodes.get, COMPONENT, self.identity, now)
            if written is not None:
                self.nodes.store(written)
                if isinstance(action, UpdateNode):
                    self._count(action)
        elif isinstance(action, StartRequalification):
            self.requalifier.start(states[action.node], now)
        elif isinstance(action, DeactivateWorkload):
            deactivate(self.kube, action)
        elif isinstance(action, ReactivateWorkload):
            reactivate(self.kube, action)
        elif isinstance(action, TellOwner):
            tell_owner(self.kube, action, COMPONENT, self.identity, now)
        log(logging.INFO, _describe(action), node=action.node, **_fields(action))

    def _count(self, update: UpdateNode) -> None:
        if update.add_taints and update.annotations.get(QUARANTINED_AT):
            self.metrics.quarantines.labels(reason=quarantine_reason(update.annotations)).inc()
        elif update.remove_taints and QUARANTINED_AT in update.annotations:
            self.metrics.releases.inc()


class TaintWriter:
    """A pass's taints, each written as soon as it is decided, up to the actuator's `concurrency` at a time: in a
    burst, a node decided while other nodes' taints are on their way waits for a free writer, not for the slowest of
    those taints. A node has at most one write on its way (`busy`)."""

    def __init__(self, actuator: Actuator, states: Mapping[str, NodeState]) -> None:
        self._actuator = actuator
        self._states = states
        self._pool = ThreadPoolExecutor(max_workers=max(1, actuator.concurrency), thread_name_prefix="taints")
        self._on_the_way: dict[str, Future[bool]] = {}
        self._outcome = Outcome()

    def start(self, taints: Sequence[Action]) -> None:
        """Each node's taint (`first_taints`; none of a `busy` node)."""
        for action in taints:
            assert action.node not in self._on_the_way, f"{action.node} has a write on its way"
            self._on_the_way[action.node] = self._pool.submit(
                self._actuator._write, action.node, action, self._states, self._outcome
            )

    def busy(self) -> set[str]:
        """The nodes whose taint is on its way."""
        self._collect()
        return set(self._on_the_way)

    def wait(self, timeout: float) -> None:
        """Until a taint on its way is written, or `timeout`."""
        wait(list(self._on_the_way.values()), timeout=timeout, return_when=FIRST_COMPLETED)

    def close(self) -> Outcome:
        """Every taint written: their outcome (as `Actuator.execute`'s)."""
        self._pool.shutdown(wait=True)
        self._collect()
        for node in self._outcome.failed:
            self._outcome.finished.pop(node, None)
        return self._outcome

    def _collect(self) -> None:
        for node, written in list(self._on_the_way.items()):
            if written.done():
                del self._on_the_way[node]
                if not written.result():
                    self._outcome.failed.add(node)


def quarantine_reason(annotations: Mapping[str, str | None]) -> str:
    """The reason word of a quarantine-reason annotation ("Xid79 GPU_HAS_FALLEN_OFF_THE_BUS on ...")."""
    return (annotations.get(QUARANTINE_REASON) or "unknown").split(" ", 1)[0]


def action_name(action: Action | WorkAction) -> str:
    """The action as WITHHELD_ACTIONS names it; a Node update that only records a requalification attempt in the
    annotations belongs to the quarantine, so it counts as a taint write."""
    if isinstance(action, UpdateNode):
        return "untaint" if action.remove_taints else "taint"
    if isinstance(action, SetCondition):
        return "condition"
    if isinstance(action, RecordEvent | TellOwner):
        return "event"
    if isinstance(action, DeactivateWorkload):
        return "requeue"
    if isinstance(action, ReactivateWorkload):
        return "reactivate"
    return "requalification"


def _describe(action: Action | WorkAction) -> str:
    return {
        "taint": "node updated",
        "untaint": "node released",
        "condition": "condition set",
        "event": "event recorded",
        "requalification": "requalification requested",
        "requeue": "workload deactivated for requeueing",
        "reactivate": "workload reactivated",
    }[action_name(action)]


def _fields(action: Action | WorkAction) -> dict[str, Any]:
    if isinstance(action, UpdateNode):
        return {"add": [t.key for t in action.add_taints], "remove": [t.key for t in action.remove_taints]}
    if isinstance(action, SetCondition):
        return {"healthy": action.healthy, "reason": action.reason}
    if isinstance(action, RecordEvent | TellOwner):
        return {"type": action.event_type, "reason": action.reason, "evidence": action.message}
    if isinstance(action, DeactivateWorkload | ReactivateWorkload):
        return {"workload": f"{action.namespace}/{action.name}"}
    return {}


def _api_target(action: Action | WorkAction) -> tuple[str, str]:
    if isinstance(action, UpdateNode):
        return "patch", "nodes"
    if isinstance(action, SetCondition):
        return "patch", "nodes/status"
    if isinstance(action, RecordEvent | TellOwner):
        return "create", "events"
    if isinstance(action, DeactivateWorkload | ReactivateWorkload):
        return "patch", "workloads"
    return "create", "jobs"

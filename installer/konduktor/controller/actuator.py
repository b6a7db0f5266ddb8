"""The plan's writes, made through the Kubernetes API: taints and annotations, the GPUHealthy condition, Events,
requalification Jobs.

`spec.taints` is an atomic list: a write replaces the whole list. Each Node write therefore sends the
resourceVersion of the Node it was computed from (a merge patch with a resourceVersion is a conditional
update); if another writer changed the Node in between, the API answers 409 and the write is computed again
from a fresh read, so a taint added by someone else at the same moment is never dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from konduktor.controller.decide import (
    CONDITION_TYPE,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    Action,
    NodeState,
    RecordEvent,
    SetCondition,
    StartRequalification,
    UpdateNode,
)
from konduktor.controller.logs import log
from konduktor.controller.nodes import Node, NodeCache
from konduktor.controller.requalification import Requalifier
from konduktor.controller.telemetry import HealthMetrics
from konduktor.kube.client import ApiError, Kube

# Our own field manager: the Node's other status fields (capacity, allocatable) belong to their writers, and an
# apply under a shared manager name would remove the fields that manager set before.
FIELD_MANAGER = "konduktor-health"
COMPONENT = "konduktor-health"
EVENT_NAMESPACE = "default"  # where the kubelet records Node events, so `kubectl describe node` shows ours too
_CONFLICT_RETRIES = 5


def timestamp(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_patch(node: Node, update: UpdateNode) -> dict[str, Any] | None:
    """The merge patch that makes `update` on `node`, conditional on its resourceVersion; None if nothing changes.

    A taint is identified by key and effect, as the API does.
    """
    taints: list[dict[str, Any]] = list(node.get("spec", {}).get("taints") or [])
    removed = {(t.key, t.effect) for t in update.remove_taints}
    kept = [t for t in taints if (t.get("key"), t.get("effect")) not in removed]
    present = {(t.get("key"), t.get("effect")) for t in kept}
    added = [
        {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})}
        for t in update.add_taints
        if (t.key, t.effect) not in present
    ]
    annotations = node["metadata"].get("annotations", {})
    changed = {key: value for key, value in update.annotations.items() if annotations.get(key) != value}
    if kept + added == taints and not changed:
        return None
    patch: dict[str, Any] = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}}
    if kept + added != taints:
        patch["spec"] = {"taints": kept + added}
    if changed:
        patch["metadata"]["annotations"] = changed
    return patch


def condition_status(action: SetCondition, now: float) -> dict[str, Any]:
    stamp = timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": action.node},
        "status": {
            "conditions": [
                {
                    "type": CONDITION_TYPE,
                    "status": "True" if action.healthy else "False",
                    "reason": action.reason,
                    "message": action.message,
                    # The decision writes the condition only when its status changes.
                    "lastTransitionTime": stamp,
                    "lastHeartbeatTime": stamp,
                }
            ]
        },
    }


def event(action: RecordEvent, node: Node | None, identity: str, now: float) -> dict[str, Any]:
    stamp = timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        # client-go's naming: the object's name and the time in hexadecimal nanoseconds.
        "metadata": {"name": f"{action.node}.{time.time_ns():x}", "namespace": EVENT_NAMESPACE},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Node",
            "name": action.node,
            **({"uid": node["metadata"]["uid"]} if node and "uid" in node["metadata"] else {}),
        },
        "reason": action.reason,
        "message": action.message,
        "type": action.event_type,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": identity,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


@dataclass
class Outcome:
    """When each node's last write finished, and the nodes where a write failed (their later writes were skipped)."""

    finished: dict[str, float] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)


class Actuator:
    def __init__(
        self,
        kube: Kube,
        nodes: NodeCache,
        requalifier: Requalifier,
        metrics: HealthMetrics,
        identity: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.nodes = nodes
        self.requalifier = requalifier
        self.metrics = metrics
        self.identity = identity
        self.clock = clock

    def execute(self, actions: Sequence[Action], states: Mapping[str, NodeState]) -> Outcome:
        outcome = Outcome()
        for action in actions:
            if action.node in outcome.failed:
                continue  # the node's state is not what the rest of its writes assume; the next pass retries
            try:
                self._make(action, states)
            except ApiError as problem:
                verb, resource = _api_target(action)
                self.metrics.api_error(verb, resource, problem)
                log(
                    logging.ERROR, "write failed", node=action.node, action=type(action).__name__, error=problem.message
                )
                outcome.failed.add(action.node)
                continue
            outcome.finished[action.node] = self.clock()
        return outcome

    def _make(self, action: Action, states: Mapping[str, NodeState]) -> None:
        now = self.clock()
        if isinstance(action, UpdateNode):
            self._update_node(action)
        elif isinstance(action, SetCondition):
            self.nodes.store(self.kube.apply_status(condition_status(action, now), field_manager=FIELD_MANAGER))
        elif isinstance(action, RecordEvent):
            self.kube.create(event(action, self.nodes.get(action.node), self.identity, now))
        elif isinstance(action, StartRequalification):
            self.requalifier.start(states[action.node], now)
        log(logging.INFO, _describe(action), node=action.node, **_fields(action))

    def _update_node(self, update: UpdateNode) -> None:
        node = self.nodes.get(update.node) or self.kube.get("v1", "Node", update.node)
        for _ in range(_CONFLICT_RETRIES):
            if node is None:
                raise ApiError(f"node {update.node} is gone", status=404)
            patch = node_patch(node, update)
            if patch is None:
                return
            try:
                node = self.kube.patch("v1", "Node", update.node, patch)
            except ApiError as problem:
                if problem.status != 409:
                    raise
                node = self.kube.get("v1", "Node", update.node)
                continue
            self.nodes.store(node)
            self._count(update)
            return
        raise ApiError(f"node {update.node} kept changing; gave up after {_CONFLICT_RETRIES} conflicts", status=409)

    def _count(self, update: UpdateNode) -> None:
        if update.add_taints and update.annotations.get(QUARANTINED_AT):
            self.metrics.quarantines.labels(reason=quarantine_reason(update.annotations)).inc()
        elif update.remove_taints and QUARANTINED_AT in update.annotations:
            self.metrics.releases.inc()


def quarantine_reason(annotations: Mapping[str, str | None]) -> str:
    """The reason word of a quarantine-reason annotation ("Xid79 GPU_HAS_FALLEN_OFF_THE_BUS on ...")."""
    return (annotations.get(QUARANTINE_REASON) or "unknown").split(" ", 1)[0]


def action_name(action: Action) -> str:
    """The action as WITHHELD_ACTIONS names it; a Node update that only records a requalification attempt in the
    annotations belongs to the quarantine, so it counts as a taint write."""
    if isinstance(action, UpdateNode):
        return "untaint" if action.remove_taints else "taint"
    if isinstance(action, SetCondition):
        return "condition"
    if isinstance(action, RecordEvent):
        return "event"
    return "requalification"


def _describe(action: Action) -> str:
    return {
        "taint": "node updated",
        "untaint": "node released",
        "condition": "condition set",
        "event": "event recorded",
        "requalification": "requalification requested",
    }[action_name(action)]


def _fields(action: Action) -> dict[str, Any]:
    if isinstance(action, UpdateNode):
        return {"add": [t.key for t in action.add_taints], "remove": [t.key for t in action.remove_taints]}
    if isinstance(action, SetCondition):
        return {"healthy": action.healthy, "reason": action.reason}
    if isinstance(action, RecordEvent):
        return {"type": action.event_type, "reason": action.reason, "evidence": action.message}
    return {}


def _api_target(action: Action) -> tuple[str, str]:
    if isinstance(action, UpdateNode):
        return "patch", "nodes"
    if isinstance(action, SetCondition):
        return "patch", "nodes/status"
    if isinstance(action, RecordEvent):
        return "create", "events"
    return "create", "jobs"

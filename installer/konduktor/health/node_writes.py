"""How a quarantine decision becomes writes to a Node: the taint patch, the GPUHealthy condition, the Event.

Shared by the health controller and `konduktor-install burnin --quarantine`, so a quarantine made by either
looks the same and the controller can release it. No metrics here: the installer does not ship them.

`spec.taints` is an atomic list: a write replaces the whole list. Each Node write therefore sends the
resourceVersion of the Node it was computed from (a merge patch with a resourceVersion is a conditional
update); if another writer changed the Node in between, the API answers 409 and the write is computed again
from a fresh read, so a taint added by someone else at the same moment is never dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from konduktor.health.decide import (
    CONDITION_TYPE,
    Action,
    RecordEvent,
    SetCondition,
    StartRequalification,
    UpdateNode,
)
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.timestamps import format_time

# The controller's own field manager: the Node's other status fields (capacity, allocatable) belong to their
# writers, and an apply under a shared manager name would remove the fields that manager set before.
FIELD_MANAGER = "konduktor-health"
EVENT_NAMESPACE = "default"  # where the kubelet records Node events, so `kubectl describe node` shows ours too
CONFLICT_RETRIES = 5


def node_patch(node: Mapping[str, Any], update: UpdateNode) -> dict[str, Any] | None:
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
    annotations = node["metadata"].get("annotations") or {}
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
    stamp = format_time(now)
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


def event(
    action: RecordEvent, node: Mapping[str, Any] | None, component: str, instance: str, now: float
) -> dict[str, Any]:
    uid = (node or {}).get("metadata", {}).get("uid")
    involved = {"apiVersion": "v1", "kind": "Node", "name": action.node, **({"uid": uid} if uid else {})}
    return object_event(
        involved, EVENT_NAMESPACE, action.event_type, action.reason, action.message, component, instance, now
    )


def object_event(
    involved: Mapping[str, str],
    namespace: str,
    event_type: str,
    reason: str,
    message: str,
    component: str,
    instance: str,
    now: float,
) -> dict[str, Any]:
    """A core/v1 Event about `involved` (apiVersion, kind, name, and uid/namespace when known)."""
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        # client-go's naming: the object's name and the time in hexadecimal nanoseconds.
        "metadata": {"name": f"{involved['name']}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": dict(involved),
        "reason": reason,
        "message": message,
        "type": event_type,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def update_node(kube: Kube, update: UpdateNode, node: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Makes `update` with a conditional patch, recomputed after each conflict. Returns the Node as written,
    or None when nothing had to change."""
    node = node or kube.get("v1", "Node", update.node)
    for _ in range(CONFLICT_RETRIES):
        if node is None:
            raise ApiError(f"node {update.node} is gone", status=404)
        patch = node_patch(node, update)
        if patch is None:
            return None
        try:
            written: dict[str, Any] = kube.patch("v1", "Node", update.node, patch, field_manager=FIELD_MANAGER)
            return written
        except ApiError as problem:
            if problem.status != 409:
                raise
            node = kube.get("v1", "Node", update.node)
    raise ApiError(f"node {update.node} kept changing; gave up after {CONFLICT_RETRIES} conflicts", status=409)


NodeWrite = UpdateNode | SetCondition | RecordEvent


def write(
    kube: Kube,
    action: NodeWrite,
    known: Callable[[str], dict[str, Any] | None] | None,
    component: str,
    instance: str,
    now: float,
) -> dict[str, Any] | None:
    """Makes one Node write of a plan, the same for the controller and the installer. `known(name)` is the Node
    as the caller last read it (the controller's cache; None when it has none there); without `known` the Node is
    read when a write needs it. Returns the Node as written, or None when nothing had to change or the write was
    an Event."""
    if isinstance(action, UpdateNode):
        return update_node(kube, action, known(action.node) if known else None)
    if isinstance(action, SetCondition):
        return kube.apply_status(condition_status(action, now), field_manager=FIELD_MANAGER)
    node = known(action.node) if known else kube.get("v1", "Node", action.node)
    kube.create(event(action, node, component, instance, now), field_manager=FIELD_MANAGER)
    return None


def make_writes(
    kube: Kube, actions: Sequence[Action], component: str, instance: str, done: Callable[[Action], None]
) -> None:
    """The installer's writes of a plan, in order, each Node read fresh (the controller's own go through its
    actuator, with its cache and metrics); `done` is called after each. Starting a requalification is the
    controller's, never planned here."""
    for action in actions:
        if isinstance(action, StartRequalification):
            continue
        write(kube, action, None, component, instance, time.time())
        done(action)

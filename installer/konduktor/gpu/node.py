"""A Node as GPU health reads it: its GPUs, its taints with their effects and its GPUHealthy condition.

One reading for the health controller's decisions and for the quarantine `konduktor-install burnin --quarantine`
plans with the controller's own rules, so both see the same node.

GPUs are counted from `status.allocatable`, not `status.capacity`: the device plugin takes a GPU it found
unhealthy out of allocatable while capacity still lists it, allocatable is what the scheduler hands to pods (a
burn-in Job requesting capacity would stay Pending on such a node), and allocatable below the expected count is
how the controller sees a lost GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from konduktor.vocabulary import GPU_HEALTHY_CONDITION, GPU_RESOURCE

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
TAINT_EFFECTS: tuple[TaintEffect, ...] = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class Taint:
    key: str
    effect: TaintEffect
    value: str = ""


@dataclass(frozen=True)
class GpuNode:
    """What a Node says about its GPUs and their health."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    gpu_healthy: bool | None = None  # the GPUHealthy condition's status; None when absent or Unknown
    gpu_allocatable: int | None = None  # None when the node does not advertise the resource


def allocatable_gpus(node: Mapping[str, Any]) -> int | None:
    """The node's allocatable nvidia.com/gpu; None when it advertises none or the value is not a count."""
    value = (node.get("status", {}).get("allocatable") or {}).get(GPU_RESOURCE)
    # Extended resources are whole numbers, which the API writes as plain digits; anything else is no count.
    text = str(value) if value is not None else ""
    return int(text) if text.isdigit() else None


def taints(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    """The node's taints; one with an effect Kubernetes does not define keeps no pod off and is left out."""
    return tuple(
        Taint(t["key"], cast(TaintEffect, t["effect"]), t.get("value", ""))
        for t in node.get("spec", {}).get("taints") or ()
        if t.get("effect") in TAINT_EFFECTS
    )


def gpu_healthy(node: Mapping[str, Any]) -> bool | None:
    conditions = node.get("status", {}).get("conditions") or ()
    ours = next((c for c in conditions if c.get("type") == GPU_HEALTHY_CONDITION), None)
    return {"True": True, "False": False}.get(ours.get("status", "")) if ours else None


def read_node(node: Mapping[str, Any]) -> GpuNode:
    meta, spec = node["metadata"], node.get("spec", {})
    return GpuNode(
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        taints=taints(node),
        unschedulable=bool(spec.get("unschedulable", False)),
        gpu_healthy=gpu_healthy(node),
        gpu_allocatable=allocatable_gpus(node),
    )

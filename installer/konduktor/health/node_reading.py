"""A Node as the decision sees it: its GPU reading (`konduktor.gpu.node`), the GPUs its type should have, and the
conditions other tools set on it. Pure: `nodes` (the watch and the cache) hands the Nodes in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from konduktor.gpu.node import read_node
from konduktor.gpu.sharing import shares_gpus
from konduktor.health.classify import ForeignCondition
from konduktor.health.decide import CONDITION_TYPE, NodeState
from konduktor.health.settings import HealthSettings
from konduktor.kube.timestamps import parse_time
from konduktor.vocabulary import GPU_COUNT_LABEL, GPU_RESOURCE, PRODUCT_LABEL

Node = dict[str, Any]


def expected_gpus(node: Node, settings: HealthSettings) -> int | None:
    """Whole GPUs the node should have: its GPU type's count from the config, else its nvidia.com/gpu.count label;
    0 on a node labelled for a sharing group, whose GPUs are advertised as slices (its faults show in its Xids)."""
    labels = node["metadata"].get("labels", {})
    if shares_gpus(labels):
        return 0
    product = labels.get(PRODUCT_LABEL)
    for gpu_type in settings.gpu_types.values():
        if gpu_type.product == product:
            return gpu_type.gpus_per_node
    count = labels.get(GPU_COUNT_LABEL, "")
    return int(count) if count.isdigit() else None


def is_gpu_node(node: Node, expected: int | None) -> bool:
    return expected is not None or GPU_RESOURCE in node.get("status", {}).get("capacity", {})


def gpu_node_state(node: Node, settings: HealthSettings, requalification_running: bool = False) -> NodeState | None:
    """The node as the decision sees it, with the GPUs its type should have; None when it is no GPU node."""
    expected = expected_gpus(node, settings)
    return node_state(node, expected, requalification_running) if is_gpu_node(node, expected) else None


# The kubelet's own conditions: node health in general, not the GPUs'; never rules for this controller.
KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


def node_state(
    node: Mapping[str, Any], expected: int | None = None, requalification_running: bool = False
) -> NodeState:
    """The node as the decision sees it: the GPU reading of the Node (`konduktor.gpu.node`), with the GPUs it
    should have and whether its requalification runs, and the conditions other tools set on it."""
    read = read_node(node)
    return NodeState(
        **{f.name: getattr(read, f.name) for f in fields(read)},
        gpu_expected=expected,
        requalification_running=requalification_running,
        conditions=tuple(
            ForeignCondition(
                c.get("type", ""),
                c.get("status", ""),
                f"{c.get('reason', '')}: {c.get('message', '')}".strip(": "),
                c.get("lastTransitionTime", ""),
                parse_time(c.get("lastTransitionTime")),
            )
            for c in node.get("status", {}).get("conditions") or ()
            if c.get("type") not in (CONDITION_TYPE, *KUBELET_CONDITIONS)
        ),
    )

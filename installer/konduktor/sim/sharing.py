"""The GPU Operator's sharing on the simulated cluster: what mig-manager, the device plugin and GPU Feature Discovery
do to a node labelled for a sharing group (docs/design/gpu-sharing.md has the upstream sources).

- `nvidia.com/mig.config=<layout>`: mig-manager reports `nvidia.com/mig.config.state=pending`, applies the layout to
  every GPU and reports `success` (`failed` for a layout it does not have); the device plugin (mixed strategy) then
  advertises one `nvidia.com/mig-<profile>` per instance and `nvidia.com/gpu` 0, and GPU Feature Discovery labels the
  node `nvidia.com/mig.strategy=mixed`, `nvidia.com/mig-<profile>.count` and `.product`. `all-disabled`, or no label,
  gives the whole GPUs back.
- `nvidia.com/device-plugin.config=<name>` naming a time-slicing or MPS config: the device plugin advertises each GPU
  as `replicas` `nvidia.com/gpu.shared` (renameByDefault) and `nvidia.com/gpu` 0; GFD labels
  `nvidia.com/gpu.sharing-strategy` (`time-slicing` | `mps`) and `nvidia.com/gpu.replicas`.

The layouts and configs are the config's sharing groups. A node of a GPU type that has groups carries them in the
annotation `sim.konduktor.ai/sharing` and the label `sim.konduktor.ai/sharing=true` (written by `sim up --config` and
`up`); a `sim up --nodes` cluster has no groups. The GPU agent (konduktor.sim.agent), which plays these components,
watches only the nodes with that label, and `sim fault`, which plays the device plugin withdrawing a faulty GPU,
computes the node's resources with the same functions. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from konduktor.config.model import SharingGroup
from konduktor.gpu.sharing import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_DISABLED_LAYOUT,
    MIG_RESOURCE_PREFIX,
    SHARED_RESOURCE,
    is_gpu_resource,
    mig_resource,
)
from konduktor.vocabulary import GPU_COUNT_LABEL, GPU_RESOURCE

SHARING_ANNOTATION = "sim.konduktor.ai/sharing"
SHARING_NODES_LABEL = "sim.konduktor.ai/sharing"
SHARING_NODES = f"{SHARING_NODES_LABEL}=true"  # the label selector of the nodes the agent plays the operator on
# GPU Feature Discovery's labels for shared GPUs (k8s-device-plugin v0.20.0, internal/lm/resource.go).
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
# The way a group shares (its key in the annotation) -> GFD's nvidia.com/gpu.sharing-strategy value.
STRATEGIES = {"timeSlicing": "time-slicing", "mps": "mps"}

Way = Literal["mig", "timeSlicing", "mps"]
# Group name -> {"mig": {profile: instances per GPU}} | {"timeSlicing": replicas} | {"mps": replicas}.
Groups = dict[str, dict[str, Any]]


def pool_groups(sharing: Mapping[str, SharingGroup]) -> Groups:
    """A GPU type's sharing groups as its simulated nodes carry them."""
    return {
        name: {"mig": dict(group.mig)} if group.mig is not None else {group.way: group.replicas}
        for name, group in sorted(sharing.items())
    }


def groups_annotation(groups: Groups) -> str:
    return json.dumps(groups, sort_keys=True, separators=(",", ":"))


def parse_groups(text: str | None) -> Groups:
    """The annotation's groups; {} when absent or unreadable (a node without groups keeps whole GPUs)."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Sharing:
    """How a node's GPUs are shared: the group (None: whole GPUs), its way, what one GPU advertises, and the
    nvidia.com/mig.config.state mig-manager reports (None: the node has no MIG layout label)."""

    group: str | None = None
    way: Way | None = None
    per_gpu: Mapping[str, int] = field(default_factory=lambda: {GPU_RESOURCE: 1})
    mig_state: Literal["success", "failed"] | None = None


def node_sharing(labels: Mapping[str, str], annotations: Mapping[str, str]) -> Sharing:
    """What the GPU Operator makes of a node's sharing labels, given its type's groups."""
    groups = parse_groups(annotations.get(SHARING_ANNOTATION))
    layout = labels.get(MIG_CONFIG_LABEL)
    if layout is not None:
        group = groups.get(layout, {})
        if layout == MIG_DISABLED_LAYOUT:
            return Sharing(mig_state="success")
        if not isinstance(group.get("mig"), dict):
            return Sharing(mig_state="failed")  # mig-parted has no such layout: the GPUs stay as they were
        per_gpu = {mig_resource(profile): int(count) for profile, count in sorted(group["mig"].items()) if count}
        return Sharing(layout, "mig", {GPU_RESOURCE: 0, **per_gpu}, "success")
    config = labels.get(DEVICE_PLUGIN_CONFIG_LABEL)
    group = groups.get(config or "", {})
    for way in ("timeSlicing", "mps"):
        replicas = group.get(way)
        if isinstance(replicas, int) and replicas > 0:
            return Sharing(
                config, "timeSlicing" if way == "timeSlicing" else "mps", {GPU_RESOURCE: 0, SHARED_RESOURCE: replicas}
            )
    return Sharing()


def advertised(sharing: Sharing, gpus: int) -> dict[str, str]:
    """The device plugin's resources for `gpus` GPUs shared so (quantities as the API writes them)."""
    return {resource: str(count * gpus) for resource, count in sorted(sharing.per_gpu.items())}


def physical_gpus(node: Mapping[str, Any]) -> int:
    """The node's GPUs, sliced or not: GFD's nvidia.com/gpu.count, else its capacity of whole GPUs."""
    count = str((node.get("metadata", {}).get("labels") or {}).get(GPU_COUNT_LABEL, ""))
    if count.isdigit():
        return int(count)
    capacity = str((node.get("status", {}).get("capacity") or {}).get(GPU_RESOURCE, "0"))
    return int(capacity) if capacity.isdigit() else 0


def gfd_labels(sharing: Sharing, gpus: int, product: str) -> dict[str, str]:
    """The labels mig-manager and GFD put on a node shared so (none for whole GPUs without a MIG label)."""
    labels: dict[str, str] = {}
    if sharing.mig_state is not None:
        labels[MIG_CONFIG_STATE_LABEL] = sharing.mig_state
    if sharing.way == "mig":
        labels[MIG_STRATEGY_LABEL] = "mixed"
        for resource, count in sharing.per_gpu.items():
            if resource.startswith(MIG_RESOURCE_PREFIX):
                profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
                labels[f"{resource}.count"] = str(count * gpus)
                labels[f"{resource}.product"] = f"{product}-MIG-{profile}"[:63]
    elif sharing.way is not None:
        labels[SHARING_STRATEGY_LABEL] = STRATEGIES[sharing.way]
        labels[REPLICAS_LABEL] = str(sharing.per_gpu[SHARED_RESOURCE])
    return labels


def _owned(key: str) -> bool:
    # The labels these components write, and only those: never the layout or config labels `up` sets.
    return key in (MIG_CONFIG_STATE_LABEL, MIG_STRATEGY_LABEL, SHARING_STRATEGY_LABEL, REPLICAS_LABEL) or (
        key.startswith(MIG_RESOURCE_PREFIX) and key.endswith((".count", ".product"))
    )


def label_changes(current: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, str | None]:
    """The merge patch of labels from `current` to `wanted` (None removes a label the components wrote)."""
    changes: dict[str, str | None] = {k: v for k, v in wanted.items() if current.get(k) != v}
    changes.update({k: None for k in current if _owned(k) and k not in wanted})
    return changes


def resources_differ(status: Mapping[str, Any], wanted: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether the node's capacity or allocatable GPU resources are not `wanted` (section -> resource -> count)."""
    for section, resources in wanted.items():
        current = {k: str(v) for k, v in (status.get(section) or {}).items() if is_gpu_resource(k)}
        if current != dict(resources):
            return True
    return False


Step = tuple[Literal["labels", "status"], dict[str, Any]]


def operator_steps(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    status: Mapping[str, Any],
    wanted_status: Mapping[str, Mapping[str, str]],
    product: str,
    gpus: int,
) -> list[Step]:
    """What the operator's components do to a node, in order; [] when it already is as they would leave it.

    A MIG layout being applied is reported `pending` first, then the resources change, then `success` and GFD's
    labels: a reader never sees the new resources under a state that says the layout is not applied."""
    sharing = node_sharing(labels, annotations)
    differ = resources_differ(status, wanted_status)
    steps: list[Step] = []
    if differ and sharing.mig_state is not None and labels.get(MIG_CONFIG_STATE_LABEL) != "pending":
        steps.append(("labels", {MIG_CONFIG_STATE_LABEL: "pending"}))
        labels = {**labels, MIG_CONFIG_STATE_LABEL: "pending"}
    changes = label_changes(labels, gfd_labels(sharing, gpus, product))
    if differ:
        steps.append(("status", {section: dict(r) for section, r in wanted_status.items()}))
    if changes:
        steps.append(("labels", changes))
    return steps

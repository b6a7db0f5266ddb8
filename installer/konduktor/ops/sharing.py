"""Which nodes of a GPU type form each sharing group, and giving them their layout (docs/gpu-sharing.md).

A node gets a group's sharing from one GPU Operator label (`SharingGroup.node_label`: `nvidia.com/mig.config` for a
MIG group, `nvidia.com/device-plugin.config` for time-slicing and MPS), valued with the group's name; `up` also marks
it `konduktor.ai/sharing-group=<group>`, so that it knows the node is its to give back when the group shrinks or goes.

The choice is stable: a node already in a group stays in it (idle ones first when the group shrinks), then the free
nodes of the type, idle ones first, then by name. A node that leaves its group gets whole GPUs back: its MIG layout
`all-disabled` (the GPU Operator's default, which it puts on every MIG-capable node without the label), its device
plugin config removed.

Changing a node's layout under running GPU work is refused (docs/design/gpu-sharing.md#changing-a-layout-on-a-node):
mig-manager reconfigures the GPUs under the pods, the device plugin re-advertises. With `drain`, `up` cordons such a
node, evicts its GPU pods (the Eviction API, which honours PodDisruptionBudgets), waits for them to be gone,
relabels it, and uncordons it once mig-manager reports `nvidia.com/mig.config.state=success` (at once when only the
device plugin's config changes). Every step is safe to repeat: a node cordoned for a layout stays marked
(`konduktor.ai/cordoned-for-sharing`) and the next run uncordons it once its layout is in place.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from konduktor.config.model import Config, GpuType, selects
from konduktor.errors import ChangeRefused, PartialApply
from konduktor.gpu.sharing import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_DISABLED_LAYOUT,
    is_gpu_resource,
)
from konduktor.helm.values import MIG_CONFIG_MAP, mig_parted_config
from konduktor.kube.client import ApiError, Kube
from konduktor.vocabulary import SYSTEM_NAMESPACE
from konduktor.waiting import poll_until

# The group `up` put a node in (a label: `kubectl get nodes -L konduktor.ai/sharing-group`).
SHARING_GROUP_LABEL = "konduktor.ai/sharing-group"
# On a node `up` cordoned to change its layout: what its uncordon waits for, mig-manager's success (MIG_MANAGER) or
# nothing (DEVICE_PLUGIN: the device plugin re-reads its config as the label changes).
CORDONED_FOR_SHARING = "konduktor.ai/cordoned-for-sharing"
MIG_MANAGER = "mig-manager"
DEVICE_PLUGIN = "device-plugin"
# How long `up` waits for evicted pods to go and for mig-manager to apply a layout, unless told otherwise.
SHARING_TIMEOUT = 600.0
_FINISHED = ("Succeeded", "Failed")

Say = Callable[[str], None]


# --- what the choice reads ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuWork:
    """An unfinished pod bound to a node that holds GPUs or slices of them."""

    namespace: str
    name: str
    team: str | None  # the config's team whose namespace it runs in

    def describe(self) -> str:
        return f"{self.namespace}/{self.name} ({'team ' + self.team if self.team else 'no team'})"


@dataclass(frozen=True)
class SharingNode:
    """What the choice reads of a Node: its labels, whether it is cordoned and why, and its GPU work."""

    name: str
    labels: Mapping[str, str]
    unschedulable: bool = False
    cordoned_for: str | None = None  # the CORDONED_FOR_SHARING annotation, when `up` cordoned it
    work: tuple[GpuWork, ...] = ()

    @property
    def busy(self) -> bool:
        return bool(self.work)


def holds_gpus(pod: Mapping[str, Any]) -> bool:
    """Whether a pod asks for whole GPUs, MIG instances or shared GPUs (a request or a limit above 0)."""
    spec = pod.get("spec", {})
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for resource, value in (resources.get(kind) or {}).items():
                if is_gpu_resource(resource) and str(value).strip() not in ("0", ""):
                    return True
    return False


def gpu_work(pods: Iterable[Mapping[str, Any]], config: Config) -> dict[str, list[GpuWork]]:
    """Node -> the unfinished pods bound there that hold GPUs or slices, each with its team."""
    teams = {namespace: name for name, team in config.teams.items() for namespace in team.namespaces}
    found: dict[str, list[GpuWork]] = {}
    for pod in pods:
        meta, node = pod.get("metadata", {}), pod.get("spec", {}).get("nodeName")
        if not node or pod.get("status", {}).get("phase") in _FINISHED or not holds_gpus(pod):
            continue
        namespace = meta.get("namespace", "")
        found.setdefault(node, []).append(GpuWork(namespace, meta.get("name", ""), teams.get(namespace)))
    return {node: sorted(work, key=lambda w: (w.namespace, w.name)) for node, work in found.items()}


def sharing_node(node: Mapping[str, Any], work: Mapping[str, Sequence[GpuWork]]) -> SharingNode:
    meta = node["metadata"]
    return SharingNode(
        meta["name"],
        dict(meta.get("labels") or {}),
        bool(node.get("spec", {}).get("unschedulable", False)),
        (meta.get("annotations") or {}).get(CORDONED_FOR_SHARING),
        tuple(work.get(meta["name"], ())),
    )


# --- the choice (pure) ---------------------------------------------------------------------------------------------


def current_group(node: SharingNode, gpu_type: GpuType) -> str | None:
    """The type's group the node is in now: the one `up` marked it with, else the one its GPU Operator label names."""
    marked = node.labels.get(SHARING_GROUP_LABEL)
    if marked in gpu_type.sharing:
        return marked
    for name, group in gpu_type.sharing.items():
        key, value = group.node_label(name)
        if node.labels.get(key) == value:
            return name
    return None


def choose_nodes(gpu_type: GpuType, nodes: Sequence[SharingNode]) -> dict[str, list[str]]:
    """Each group's nodes among the type's: those already in it stay (up to its count; idle ones first, then by
    name), then free nodes, idle ones first, then by name. A group may get fewer than it asks for when the type
    has fewer nodes."""

    def order(node: SharingNode) -> tuple[bool, str]:
        return node.busy, node.name

    chosen: dict[str, list[str]] = {}
    for name, group in gpu_type.sharing.items():
        members = sorted((n for n in nodes if current_group(n, gpu_type) == name), key=order)
        chosen[name] = [n.name for n in members[: group.nodes]]
    taken = {n for names in chosen.values() for n in names}
    free = [n.name for n in sorted(nodes, key=order) if n.name not in taken]
    for name, group in gpu_type.sharing.items():
        wanted = group.nodes - len(chosen[name])
        chosen[name] += free[:wanted]
        free = free[wanted:]
    return chosen


@dataclass(frozen=True)
class NodeChange:
    """One node's labels to change: the group it leaves and the group it joins (None: whole GPUs), the labels to
    set (None: remove), whether its GPUs change layout (not only Konduktor's mark), and its GPU work."""

    node: str
    gpu_type: str
    before: str | None
    after: str | None
    labels: dict[str, str | None]
    layout: bool
    mig: bool  # mig-manager changes the node's MIG layout (else only the device plugin's config changes)
    work: tuple[GpuWork, ...] = ()
    cordoned_by_others: bool = False  # cordoned, not by `up`: a drain leaves the cordon to whoever set it

    def describe(self) -> str:
        way = f"{self.before or 'whole GPUs'} -> {self.after or 'whole GPUs'}"
        what = "layout change" if self.layout else "relabel"
        held = f"; GPU work: {', '.join(w.describe() for w in self.work)}" if self.layout and self.work else ""
        return f"node {self.node} ({self.gpu_type}): {what} {way}{held}"

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "gpu_type": self.gpu_type,
            "from": self.before,
            "to": self.after,
            "layout_change": self.layout,
            "labels": self.labels,
            "work": [{"namespace": w.namespace, "name": w.name, "team": w.team} for w in self.work],
        }


@dataclass(frozen=True)
class SharingPlan:
    """The label changes of every node of the config's GPU types, the groups that get fewer nodes than they ask
    for, and the nodes `up` cordoned for a layout earlier and has not uncordoned yet."""

    changes: list[NodeChange]
    short: list[str] = field(default_factory=list)
    cordoned: list[SharingNode] = field(default_factory=list)
    relaid: list[str] = field(default_factory=list)  # MIG groups whose layout changed under the same name

    @property
    def blocked(self) -> list[NodeChange]:
        """The layout changes on nodes where GPU work runs: refused unless `up` is told to drain them."""
        return [change for change in self.changes if change.layout and change.work]


def sharing_document(planned: SharingPlan | None) -> dict[str, Any] | None:
    """The nodes' sharing labels changed (or that would change), the groups short of nodes, the nodes cordoned for a
    layout that is not in place yet, and the MIG groups whose layout changed under their name; null when the cluster
    was not read."""
    if planned is None:
        return None
    return {
        "changes": [change.as_json() for change in planned.changes],
        "short": planned.short,
        "cordoned": [node.name for node in planned.cordoned],
        "relaid": planned.relaid,
    }


def sharing_lines(planned: SharingPlan | None) -> list[str]:
    """One line per node whose sharing labels change (with the GPU work on it when its layout changes), per group
    short of nodes, per node still cordoned for a layout, and per MIG group whose layout changed under its name."""
    if planned is None:
        return []
    lines = [change.describe() for change in planned.changes]
    lines += [f"sharing group {short}: the cluster has no more nodes of the type" for short in planned.short]
    lines += [f"node {node.name}: cordoned until its GPU layout is in place" for node in planned.cordoned]
    relaid = "its MIG layout changed under the same name: up refuses; give the new layout a new group name"
    lines += [f"sharing group {name}: {relaid}" for name in planned.relaid]
    return lines


def relaid_groups(config: Config, deployed: str | None) -> list[str]:
    """The config's MIG groups whose layout differs from the one mig-manager was given (`deployed`: the config.yaml
    of the installed layouts ConfigMap, None when there is none). mig-manager applies a layout only when a node's
    label changes (docs/design/gpu-sharing.md#changing-a-layout-on-a-node): a new layout under the same name would
    stay unapplied, then be applied under running work whenever mig-manager restarts."""
    if not deployed:
        return []
    installed = (yaml.safe_load(deployed) or {}).get("mig-configs") or {}
    layouts = {name: group.mig for name, _, _, group in config.sharing_groups() if group.mig is not None}
    wanted = yaml.safe_load(mig_parted_config(layouts))["mig-configs"]
    return sorted(name for name in layouts if name in installed and installed[name] != wanted[name])


def wanted_labels(node: SharingNode, gpu_type: GpuType, group: str | None) -> dict[str, str | None]:
    """The labels to change on a node of the type for it to be in `group` (None: whole GPUs), None to remove."""
    labels = node.labels
    wanted: dict[str, str | None] = {}
    if group is not None:
        key, value = gpu_type.sharing[group].node_label(group)
        wanted[key] = value
        wanted[SHARING_GROUP_LABEL] = group
    elif SHARING_GROUP_LABEL in labels:
        wanted[SHARING_GROUP_LABEL] = None
    if MIG_CONFIG_LABEL not in wanted and labels.get(MIG_CONFIG_LABEL, MIG_DISABLED_LAYOUT) != MIG_DISABLED_LAYOUT:
        wanted[MIG_CONFIG_LABEL] = MIG_DISABLED_LAYOUT  # whole GPUs, or shared without MIG
    if DEVICE_PLUGIN_CONFIG_LABEL not in wanted and DEVICE_PLUGIN_CONFIG_LABEL in labels:
        wanted[DEVICE_PLUGIN_CONFIG_LABEL] = None
    if wanted.get(MIG_CONFIG_LABEL, labels.get(MIG_CONFIG_LABEL)) != labels.get(MIG_CONFIG_LABEL):
        wanted[MIG_CONFIG_STATE_LABEL] = None  # mig-manager's report of the old layout: success means the new one
    return {key: value for key, value in wanted.items() if labels.get(key) != value}


def managed(node: SharingNode, gpu_type: GpuType) -> bool:
    """Whether the node's sharing labels are Konduktor's to change: it marked the node, or a label names one of the
    type's groups. Another node's labels are someone else's and stay."""
    return SHARING_GROUP_LABEL in node.labels or current_group(node, gpu_type) is not None


def plan_sharing(config: Config, nodes: Sequence[SharingNode]) -> SharingPlan:
    """The label changes that give every group its nodes and the others whole GPUs (pure)."""
    changes: list[NodeChange] = []
    short: list[str] = []
    for type_name, gpu_type in config.gpu_types.items():
        ours = [n for n in nodes if selects(gpu_type.selector, n.labels)]
        chosen = choose_nodes(gpu_type, ours)
        group_of = {node: group for group, names in chosen.items() for node in names}
        for group, names in chosen.items():
            if len(names) < gpu_type.sharing[group].nodes:
                short.append(f"{group} ({type_name}): {len(names)} of {gpu_type.sharing[group].nodes} nodes")
        for node in ours:
            after = group_of.get(node.name)
            if after is None and not managed(node, gpu_type):
                continue
            labels = wanted_labels(node, gpu_type, after)
            if not labels:
                continue
            layout_keys = {MIG_CONFIG_LABEL, DEVICE_PLUGIN_CONFIG_LABEL}
            layout = bool(layout_keys & set(labels))
            before = current_group(node, gpu_type) or node.labels.get(SHARING_GROUP_LABEL)
            changes.append(
                NodeChange(
                    node.name,
                    type_name,
                    before,
                    after,
                    labels,
                    layout,
                    MIG_CONFIG_LABEL in labels,
                    node.work,
                    node.unschedulable and node.cordoned_for is None,
                )
            )
    cordoned = [n for n in nodes if n.cordoned_for is not None]
    return SharingPlan(sorted(changes, key=lambda c: c.node), short, cordoned)


def refusal(plan: SharingPlan, flag: str) -> ChangeRefused:
    """The error `up` stops with when layouts would change under running GPU work (each node and its pods), or a MIG
    group's layout changed under its name."""
    if plan.relaid:
        names = ", ".join(plan.relaid)
        return ChangeRefused(
            f"the MIG layout of sharing group(s) {names} changed under the same name; nothing was changed",
            hint="mig-manager applies a layout only when a node's label changes: give the new layout a new group name "
            "(its ResourceFlavor and label), and up moves the nodes to it like any layout change (--drain-for-sharing "
            "where GPU work runs); or put the old layout back",
        )
    blocked = plan.blocked
    lines = [change.describe() for change in blocked]
    return ChangeRefused(
        f"{len(blocked)} node(s) would change GPU layout while GPU work runs there; nothing was changed",
        detail="\n".join(lines),
        hint=f"let the work finish, or run again with {flag}: it cordons each node, evicts its GPU pods (honouring "
        "PodDisruptionBudgets), changes the layout and uncordons the node once the layout is in place",
    )


# --- the cluster (edge) --------------------------------------------------------------------------------------------


def read_sharing(kube: Kube, config: Config) -> SharingPlan:
    """The plan for the cluster as it is: its nodes, and the GPU work bound to them. The pods are read only when
    the config has sharing groups or a node carries Konduktor's sharing label or cordon: a cluster that never had
    groups costs one list of its nodes."""
    found = kube.list("v1", "Node")
    marked = any(
        SHARING_GROUP_LABEL in (node["metadata"].get("labels") or {})
        or CORDONED_FOR_SHARING in (node["metadata"].get("annotations") or {})
        for node in found
    )
    work: dict[str, list[GpuWork]] = {}
    if marked or any(config.sharing_groups()):
        pods = kube.list("v1", "Pod", field_selector="status.phase!=Succeeded,status.phase!=Failed")
        work = gpu_work(pods, config)
    plan = plan_sharing(config, [sharing_node(node, work) for node in found])
    if any(group.mig is not None for *_, group in config.sharing_groups()):
        layouts = kube.get("v1", "ConfigMap", MIG_CONFIG_MAP, SYSTEM_NAMESPACE)
        deployed = ((layouts or {}).get("data") or {}).get("config.yaml")
        plan = SharingPlan(plan.changes, plan.short, plan.cordoned, relaid_groups(config, deployed))
    return plan


def apply_sharing(
    kube: Kube,
    config: Config,
    *,
    drain: bool,
    timeout: float = SHARING_TIMEOUT,
    say: Say = lambda _: None,
    flag: str = "--drain-for-sharing",
) -> SharingPlan:
    """Gives every group its nodes (read afresh), draining busy nodes when `drain`; refuses (nothing changed) a layout
    change under running GPU work otherwise. Returns the plan it carried out. A node whose MIG layout is not in place
    within `timeout` stays cordoned: PartialApply, and the next run uncordons it once mig-manager reports success."""
    plan = read_sharing(kube, config)
    if plan.relaid or (plan.blocked and not drain):
        raise refusal(plan, flag)
    deadline = time.monotonic() + timeout
    for change in plan.changes:
        if change.layout and change.work:
            # Cordoned first: no new pod lands on GPUs whose layout is about to change.
            if not change.cordoned_by_others:
                cordon(kube, change.node, MIG_MANAGER if change.mig else DEVICE_PLUGIN)
            evict(kube, change, deadline, say)
        kube.patch("v1", "Node", change.node, {"metadata": {"labels": change.labels}})
        say(f"sharing: {change.describe()}")
    return finish_cordoned(kube, plan, deadline, say)


def cordon(kube: Kube, node: str, waits_for: str) -> None:
    kube.patch(
        "v1",
        "Node",
        node,
        {"metadata": {"annotations": {CORDONED_FOR_SHARING: waits_for}}, "spec": {"unschedulable": True}},
    )


def evict(kube: Kube, change: NodeChange, deadline: float, say: Say) -> None:
    """Evicts the node's GPU pods through the Eviction API and waits for them to be gone; a PodDisruptionBudget
    that refuses (429) is asked again until the deadline."""
    left = {(w.namespace, w.name): w for w in change.work}

    def gone() -> bool:
        for (namespace, name), work in list(left.items()):
            pod = kube.get("v1", "Pod", name, namespace)
            if pod is None or pod.get("spec", {}).get("nodeName") != change.node:
                del left[(namespace, name)]
                continue
            if pod["metadata"].get("deletionTimestamp"):
                continue
            eviction = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
            }
            try:
                kube.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body=eviction)
                say(f"sharing: evicted {work.describe()} from {change.node}")
            except ApiError as problem:
                if problem.status == 404:
                    del left[(namespace, name)]
                elif problem.status != 429:  # 429: a PodDisruptionBudget allows no disruption now
                    raise
        return not left

    if not poll_until(gone, max(0.0, deadline - time.monotonic()), interval=1.0):
        pods = ", ".join(w.describe() for w in left.values())
        raise PartialApply(
            f"node {change.node} is cordoned, but its GPU pods are still there: {pods}",
            hint="a PodDisruptionBudget may allow no eviction now; run up again once they can go (the node stays "
            "cordoned meanwhile), or delete them",
        )


def finish_cordoned(kube: Kube, plan: SharingPlan, deadline: float, say: Say) -> SharingPlan:
    """Uncordons every node `up` cordoned for a layout once the layout is in place (mig-manager's success, or at
    once without MIG); those still waiting at the deadline stay cordoned: PartialApply."""
    names = {c.node for c in plan.changes if c.layout and c.work and not c.cordoned_by_others}
    names |= {node.name for node in plan.cordoned}
    if not names:
        return plan
    waiting = set(names)

    def done() -> bool:
        for name in sorted(waiting):
            found = kube.get("v1", "Node", name)
            if found is None:
                waiting.discard(name)
                continue
            node = sharing_node(found, {})
            if ready(node):
                kube.patch(
                    "v1",
                    "Node",
                    name,
                    {"metadata": {"annotations": {CORDONED_FOR_SHARING: None}}, "spec": {"unschedulable": False}},
                )
                say(f"sharing: node {name} uncordoned, its layout in place")
                waiting.discard(name)
        return not waiting

    if not poll_until(done, max(0.0, deadline - time.monotonic()), interval=2.0):
        states = ", ".join(f"{name} ({state_of(kube, name)})" for name in sorted(waiting))
        raise PartialApply(
            f"the GPU layout of {len(waiting)} node(s) is not in place yet; they stay cordoned: {states}",
            hint="mig-manager reports nvidia.com/mig.config.state on each node; run up again once it is success "
            "(it uncordons them then), or see the mig-manager pod's log when it is failed",
        )
    return plan


def ready(node: SharingNode) -> bool:
    """A node cordoned for a layout may take work again: its MIG layout applied (mig-manager's success), or only the
    device plugin's config changed (it re-reads it as the label changes)."""
    return node.cordoned_for != MIG_MANAGER or node.labels.get(MIG_CONFIG_STATE_LABEL) == "success"


def state_of(kube: Kube, name: str) -> str:
    found = kube.get("v1", "Node", name)
    labels = (found or {}).get("metadata", {}).get("labels") or {}
    return f"{MIG_CONFIG_STATE_LABEL}={labels.get(MIG_CONFIG_STATE_LABEL, '(none)')}"

"""A trace's parts of a GPU against one config's sharing: the slice each fractional job asks for in the replay, and
the nodes of the config's sharing groups as the device plugin makes them.

A job whose pods need part of a GPU (`gpu_fraction`) asks, in the replay of a config, for the smallest shared
resource that covers it (konduktor.gpu.sharing.smallest_covering): a MIG instance covers its compute slices of 7, a
time-sliced or MPS replica 1/replicas (SharingGroup.fraction). It looks first among the resources its team has a
slice quota of, then among those some other team has (borrowed, as Kueue lends them), in the sharing groups of its
GPU type (of every type when the job names none); a config whose slices cover none of it gives the job a whole GPU,
as a whole-GPU config does. A job so mapped holds its slice's part of a GPU in the answer's GPU-hours.

Which of a type's nodes form a group is decided by `up`; the replay gives each group the type's first nodes not yet
in a group, in the config's order: the same count, the same labels and resources, whichever nodes they are.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any

from konduktor.config.model import Config, SharingGroup
from konduktor.gpu.sharing import smallest_covering
from konduktor.vocabulary import GPU_RESOURCE
from konduktor.whatif.trace import TraceJob

GPU_TYPE_LABEL = "konduktor.ai/gpu-type"  # the simulated cluster's label naming a node's GPU type


def offers(config: Config, gpu_type: str | None, team: str | None) -> dict[str, dict[str, Fraction]]:
    """Per sharing group (of the type, or of every type), the resources it advertises that the team (or, for None,
    any team) has a slice quota of, with the part of a GPU each unit is."""
    quoted = {
        (group, resource)
        for name, spec in config.teams.items()
        if team is None or name == team
        for group, quotas in spec.slices.items()
        for resource, quota in quotas.items()
        if quota.quota > 0
    }
    offered: dict[str, dict[str, Fraction]] = {}
    for name, type_name, definition, group in config.sharing_groups():
        if gpu_type is not None and type_name != gpu_type:
            continue
        resources = {
            resource: group.fraction(resource)
            for resource in group.units(definition.gpus_per_node)
            if (name, resource.removeprefix("nvidia.com/")) in quoted
        }
        if resources:
            offered[name] = resources
    return offered


def choice(config: Config, fraction: float, gpu_type: str | None, team: str) -> tuple[str, str, Fraction] | None:
    """The sharing group, resource and part of a GPU a pod needing `fraction` of one asks for; None: a whole GPU.

    The team's own slices first, then anyone's; of those, the smallest that covers the fraction (ties: the
    config's first group)."""
    for scope in (team, None):
        best: tuple[Fraction, int, str, str] | None = None
        for order, (group, resources) in enumerate(offers(config, gpu_type, scope).items()):
            resource = smallest_covering(fraction, resources)
            if resource is not None and (best is None or (resources[resource], order) < best[:2]):
                best = (resources[resource], order, group, resource)
        if best is not None:
            return best[2], best[3], best[0]
    return None


def assign(config: Config, jobs: Sequence[TraceJob]) -> list[TraceJob]:
    """The jobs as one config's replay runs them: each fractional job with the slice it asks for (see `choice`),
    pinned to its group's nodes only when another group advertises the same resource as another part of a GPU."""
    fractions: dict[str, set[Fraction]] = {}
    for _, _, definition, spec in config.sharing_groups():
        for resource in spec.units(definition.gpus_per_node):
            fractions.setdefault(resource, set()).add(spec.fraction(resource))
    assigned = []
    for job in jobs:
        picked = choice(config, job.gpu_fraction, job.gpu_type, job.team) if job.gpu_fraction is not None else None
        if picked is None:
            assigned.append(replace(job, resource=None, share=1.0, group=None))
            continue
        group, resource, share = picked
        pinned = group if len(fractions[resource]) > 1 else None
        assigned.append(replace(job, resource=resource, share=float(share), group=pinned))
    return assigned


def group_selector(config: Config, group: str) -> dict[str, str]:
    """The labels that select a sharing group's nodes: its type's and its own (its ResourceFlavor's nodeLabels)."""
    for name, _, definition, spec in config.sharing_groups():
        if name == group:
            key, value = spec.node_label(name)
            return {**definition.selector, key: value}
    raise KeyError(group)


def shared_nodes(config: Config, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes with the config's sharing groups made: each group's nodes carry its node label and advertise its
    shared resources and no whole GPU, as the device plugin reports them (SharingGroup.units)."""
    groups: dict[str, list[tuple[str, SharingGroup]]] = {}
    for name, type_name, _, group in config.sharing_groups():
        groups.setdefault(type_name, []).extend([(name, group)] * group.nodes)
    seen: dict[str, int] = {}
    made = []
    for node in nodes:
        type_name = str(node.get("metadata", {}).get("labels", {}).get(GPU_TYPE_LABEL, ""))
        members = groups.get(type_name, [])
        index = seen.get(type_name, 0)
        seen[type_name] = index + 1
        if index >= len(members):
            made.append(node)
            continue
        name, group = members[index]
        shared = copy.deepcopy(node)
        key, value = group.node_label(name)
        shared["metadata"]["labels"][key] = value
        units = {
            resource: str(count) for resource, count in group.units(config.gpu_types[type_name].gpus_per_node).items()
        }
        for side in ("capacity", "allocatable"):
            shared["status"][side] = {**shared["status"][side], GPU_RESOURCE: "0", **units}
        made.append(shared)
    return made

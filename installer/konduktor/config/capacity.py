"""CPU and memory that go with a number of GPUs of one type.

A team's cpu/memory quota is its share of the type's GPUs applied to what the nodes leave for jobs:
`gpus / (nodes * gpusPerNode) * nodes * (allocatable - reserve)`; a slice of a shared GPU counts as its part of
one GPU (konduktor.gpu.sharing.gpu_fraction). Kueue needs cpu and memory quota in the
same resource group as the GPUs (otherwise a GPU pod's cpu request is not covered and never admitted),
and Kueue does not check quotas against the nodes, so the split must not promise more than exists.
Values are rounded down (millicores, MiB), so shares of a type never add up to more than its pool.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

from konduktor.config.model import GpuType, ResourceReserve
from konduktor.config.quantity import MEBI, cpu_millicores, format_cpu, format_memory, parse_quantity


@dataclass(frozen=True)
class NodeShare:
    """CPU (millicores) and memory (MiB) available to quota-managed pods."""

    cpu_millicores: int
    memory_mebibytes: int

    @property
    def cpu(self) -> str:
        return format_cpu(self.cpu_millicores)

    @property
    def memory(self) -> str:
        return format_memory(self.memory_mebibytes)


def _pool(gpu_type: GpuType, reserve: ResourceReserve) -> tuple[Fraction, Fraction]:
    """Millicores and bytes of all nodes of the type after the per-node reserve (may be negative)."""
    return _pool_of(
        gpu_type.node_allocatable.cpu, gpu_type.node_allocatable.memory, reserve.cpu, reserve.memory, gpu_type.nodes
    )


@functools.cache
def _pool_of(cpu: str, memory: str, reserve_cpu: str, reserve_memory: str, nodes: int) -> tuple[Fraction, Fraction]:
    # Every team's share of a GPU type starts from the same pool: parse its quantities once, not per team.
    usable_cpu = cpu_millicores(cpu) - cpu_millicores(reserve_cpu)
    usable_memory = parse_quantity(memory) - parse_quantity(reserve_memory)
    return usable_cpu * nodes, usable_memory * nodes


def usable_per_node(gpu_type: GpuType, reserve: ResourceReserve) -> tuple[Fraction, Fraction]:
    """Millicores and bytes one node leaves for jobs; <= 0 means the reserve eats the node."""
    cpu, memory = _pool(gpu_type, reserve)
    return cpu / gpu_type.nodes, memory / gpu_type.nodes


def pool_share(gpu_type: GpuType, reserve: ResourceReserve) -> NodeShare:
    """Everything the type's nodes offer to quota-managed pods."""
    return share_for(gpu_type.capacity, gpu_type, reserve)


def share_for(gpus: int | Fraction, gpu_type: GpuType, reserve: ResourceReserve) -> NodeShare:
    """The cpu and memory that go with `gpus` GPUs of this type (a fraction for slices), rounded down."""
    cpu, memory = _pool(gpu_type, reserve)
    ratio = Fraction(gpus) / (gpu_type.nodes * gpu_type.gpus_per_node)
    return NodeShare(
        cpu_millicores=max(math.floor(cpu * ratio), 0),
        memory_mebibytes=max(math.floor(memory * ratio / MEBI), 0),
    )

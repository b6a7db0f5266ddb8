"""The config's GPU types as fake-node pools for the simulated cluster, and the cluster a config describes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from konduktor.config.load import LoadedConfig, load_config
from konduktor.config.model import Config, Toleration
from konduktor.quotas.render import kueue_manager_settings
from konduktor.sim.cluster import SimSpec
from konduktor.sim.nodes import NodePool, parse_nodes_spec
from konduktor.sim.sharing import pool_groups


def spec_from(config: Path, job_seconds: float) -> SimSpec:
    """The cluster a config file describes."""
    return spec_of(load_config(config).config, job_seconds)


def spec_of_nodes(nodes: str | None, job_seconds: float) -> SimSpec:
    """A cluster of `--nodes` pools (COUNTxGPUS[:PRODUCT],...), by default 4 nodes of 10 H100."""
    return SimSpec(pools=parse_nodes_spec(nodes or "4x10:H100"), job_seconds=job_seconds)


def spec_of(config: Config, job_seconds: float, kueue_settings: dict[str, Any] | None = None) -> SimSpec:
    """The cluster a checked config describes: its GPU types, topology and Kueue settings (or `kueue_settings`,
    those of a fleet's manager)."""
    return SimSpec(
        pools=node_pools(config),
        levels=topology_levels(config),
        job_seconds=job_seconds,
        kueue_settings=kueue_manager_settings(config) if kueue_settings is None else kueue_settings,
    )


def node_pools(source: Config | LoadedConfig) -> list[NodePool]:
    """One pool per GPU type: its node count, GPUs, allocatable, selecting labels and the taints it tolerates.

    The fake nodes carry exactly what the rendered ResourceFlavors select and tolerate, so quotas rendered
    from the same config admit onto them.
    """
    config = _config_of(source)
    return [
        NodePool(
            gpu_type=type_name,
            count=gpu_type.nodes,
            gpus=gpu_type.gpus_per_node,
            product=gpu_type.product,
            cpu=gpu_type.node_allocatable.cpu,
            memory=gpu_type.node_allocatable.memory,
            labels=gpu_type.selector,
            taints=_taints(gpu_type.tolerations),
            sharing=pool_groups(gpu_type.sharing),
        )
        for type_name, gpu_type in config.gpu_types.items()
    ]


def topology_levels(source: Config | LoadedConfig) -> tuple[str, ...]:
    """The node labels of the config's topology, widest first; empty without a topology."""
    config = _config_of(source)
    return tuple(config.topology.levels) if config.topology is not None else ()


def _config_of(source: Config | LoadedConfig) -> Config:
    # Callers holding what load_config returned need not unwrap it.
    return source.config if isinstance(source, LoadedConfig) else source


def _taints(tolerations: list[Toleration]) -> list[dict[str, str]]:
    # A toleration implies the taint real nodes of this type carry (e.g. nvidia.com/gpu:NoSchedule on GKE).
    # One without a key tolerates everything and implies nothing; one without an effect matches NoSchedule.
    taints: list[dict[str, str]] = []
    for toleration in tolerations:
        if toleration.key is None:
            continue
        taint = {"key": toleration.key, "effect": toleration.effect or "NoSchedule"}
        if toleration.operator == "Equal" and toleration.value:
            taint["value"] = toleration.value
        if taint not in taints:
            taints.append(taint)
    return taints

"""Several clusters behind each team's queue (`clusters:`, Kueue's MultiKueue): each team's GPUs per worker.

One truth for lint and render: `worker_quotas` says how many GPUs of each type a team holds on each worker, from
the team's `clusters:` entries or, without them, by the split rule of docs/multicluster.md; `dispatch_workers` says
which workers a team's jobs may go to, in dispatch order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from konduktor.config.findings import Finding, YamlPath, warning
from konduktor.config.model import ClusterAccess, Config, WorkerCluster

# worker -> team -> GPU type -> GPUs
WorkerQuotas = dict[str, dict[str, dict[str, int]]]
Role = Literal["manager", "worker"]


@dataclass(frozen=True)
class MemberAccess:
    """One cluster of a config with `clusters:` as the config names it: its name, role, how it is reached, and
    where in the file that is said (`clusters.manager`, `clusters.workers[0]`)."""

    name: str
    role: Role
    access: ClusterAccess
    path: YamlPath

    @property
    def unnamed(self) -> bool:
        """Neither a kubeconfig nor a context: the simulated cluster of its name, for `up` and `plan`."""
        return self.access.kubeconfig is None and self.access.context is None

    def kubeconfig_file(self, config_dir: Path) -> Path | None:
        """The kubeconfig file it names: ~ expanded, a relative path taken from the config's directory."""
        named = self.access.kubeconfig
        return None if named is None else config_dir / Path(named).expanduser()


def member_accesses(config: Config) -> list[MemberAccess]:
    """The manager, then each worker in dispatch order; empty without `clusters:`."""
    if config.clusters is None:
        return []
    return [
        MemberAccess(config.cluster.name, "manager", config.clusters.manager, ("clusters", "manager")),
        *(
            MemberAccess(worker.name, "worker", worker, ("clusters", "workers", index))
            for index, worker in enumerate(config.clusters.workers)
        ),
    ]


def simulated_members(config: Config) -> list[Finding]:
    """A warning for each member that names no kubeconfig and no context: `up`, `plan` and `down --config` take it
    as the simulated cluster of its name (`up` starts one), which is easily a forgotten context."""
    return [
        warning(
            "L19",
            member.path,
            f"{member.role} {member.name!r} names no kubeconfig and no context: `up`, `plan` and `down --config` "
            f"take it as the simulated cluster {member.name!r} (`up` starts it); `status --config` and `nodes "
            "--config` read that one when it runs, else the current context",
            hint="give its kubeconfig and context to reach a real cluster (docs/multicluster.md)",
        )
        for member in member_accesses(config)
        if member.unnamed
    ]


def split(total: int, weights: list[int]) -> list[int]:
    """`total` in whole parts proportional to `weights` (largest remainder; ties to the earlier, i.e. the worker
    first in dispatch order). The parts add up to `total`; a weight of 0 gets 0 unless all are 0."""
    whole = sum(weights)
    if whole == 0:
        return [0] * len(weights)
    parts = [total * weight // whole for weight in weights]
    remainders = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for index in remainders[: total - sum(parts)]:
        parts[index] += 1
    return parts


def worker_quotas(config: Config) -> WorkerQuotas:
    """Each team's GPUs per worker and type. Only types a worker has appear under it; empty without `clusters:`."""
    if config.clusters is None:
        return {}
    workers = config.clusters.workers
    result: WorkerQuotas = {worker.name: {} for worker in workers}
    for team_name, team in config.teams.items():
        for type_name, limits in team.gpus.items():
            having = [worker for worker in workers if type_name in worker.gpu_types]
            if team.clusters is not None:
                shares = [team.clusters.get(worker.name, {}).get(type_name, 0) for worker in having]
            else:
                gpus_per_node = config.gpu_types[type_name].gpus_per_node if type_name in config.gpu_types else 1
                capacities = [worker.gpu_types[type_name] * gpus_per_node for worker in having]
                shares = split(limits.quota, capacities)
            for worker, share in zip(having, shares, strict=True):
                result[worker.name].setdefault(team_name, {})[type_name] = share
    return result


def dispatch_workers(config: Config, team_name: str, quotas: WorkerQuotas | None = None) -> list[WorkerCluster]:
    """The workers a team's jobs may be dispatched to, in dispatch order: those where it holds GPUs; a team that holds
    none anywhere (borrow-only) may go wherever its GPU types are."""
    if config.clusters is None:
        return []
    quotas = worker_quotas(config) if quotas is None else quotas
    having = [worker for worker in config.clusters.workers if team_name in quotas[worker.name]]
    holding = [worker for worker in having if any(quotas[worker.name][team_name].values())]
    return holding or having


def worker_capacity(config: Config, worker: WorkerCluster, type_name: str) -> int:
    return worker.gpu_types[type_name] * config.gpu_types[type_name].gpus_per_node

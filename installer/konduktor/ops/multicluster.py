"""Several clusters from one config: each member reached as the config names it; `up` and `plan` on every member
(the workers in dispatch order, then the manager); the simulated fleet started and connected; and a worker
connected to the manager: the worker's kubeconfig Secret on the manager, built from the token of the identity
`render` gives the manager's Kueue on the worker (docs/multicluster.md).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from konduktor.burnin.runner import Progress as BurnInProgress
from konduktor.burnin.runner import Say
from konduktor.config.clusters import worker_quotas
from konduktor.config.model import ClusterAccess, Config
from konduktor.errors import UsageError
from konduktor.helm.values import kueue_frameworks
from konduktor.kube.client import Kube
from konduktor.kube.sync import selector_of
from konduktor.ops.plan import UpPlan, plan_up
from konduktor.ops.target import Confirm, Target, resolve_target
from konduktor.ops.up import FleetShare, Report, UpReport, UpRequest, run_up
from konduktor.quotas.multikueue import (
    MANAGER_KINDS,
    TOKEN_SECRET,
    WORKER_KINDS,
    Role,
    kubeconfig_secret,
    kubeconfig_secret_name,
    manager_kueue_settings,
    manager_objects,
    manager_view,
    worker_config,
    worker_kubeconfig,
    worker_objects,
)
from konduktor.quotas.render import owner_labels
from konduktor.quotas.sync import QuotaSet, Takeover
from konduktor.sim.cluster import Progress, SimCluster
from konduktor.sim.kueue import FRAMEWORKS
from konduktor.sim.pools import spec_of
from konduktor.vocabulary import KUEUE_NAMESPACE
from konduktor.waiting import wait_until


@dataclass(frozen=True)
class Member:
    """One cluster of a config with `clusters:`: its name there, its role, and how it is reached."""

    name: str
    role: Role
    target: Target


def members(config: Config, config_dir: Path, *, simulated_unless_named: bool = False) -> list[Member]:
    """The manager, then each worker in dispatch order, reached as the config says: its kubeconfig (~ expanded, a
    relative path taken from the config's directory) and context. A member that names neither is the simulated
    cluster of its name when that one runs (`sim up --config` names them so), or with `simulated_unless_named` (for
    `up`, which starts it) always; else the current context of $KUBECONFIG or ~/.kube/config, as kubectl reads
    them."""
    assert config.clusters is not None
    accesses: list[tuple[str, Role, ClusterAccess]] = [
        (config.cluster.name, "manager", config.clusters.manager),
        *((worker.name, "worker", worker) for worker in config.clusters.workers),
    ]
    found = []
    for name, role, access in accesses:
        unnamed = access.kubeconfig is None and access.context is None
        if unnamed and (simulated_unless_named or SimCluster(name).kubeconfig.exists()):
            target = resolve_target(sim=name)
        else:
            path = None if access.kubeconfig is None else config_dir / Path(access.kubeconfig).expanduser()
            target = resolve_target(path, access.context, read_only=True)
        found.append(Member(name, role, target))
    return found


@dataclass(frozen=True)
class Endpoint:
    """Where a cluster's API server is, and the CA (base64 PEM) that signs its certificate."""

    server: str
    ca_data: str


def endpoint_of(kube: Kube) -> Endpoint:
    """The API server and CA of a cluster as this machine's client reaches it, from the kubeconfig the client loaded
    (its merged files and chosen context), so that the kubeconfig written from it is self-contained."""
    if kube.ca_file is None:
        raise UsageError(f"the kubeconfig of {kube.server} names no certificate authority for its API server")
    return Endpoint(server=kube.server, ca_data=base64.b64encode(Path(kube.ca_file).read_bytes()).decode())


def worker_token(worker: Kube, timeout: float = 60) -> str:
    """The token the worker's token controller put in the manager identity's Secret (applied with the worker's
    objects), once it is there."""

    def token() -> str | None:
        secret = worker.get("v1", "Secret", TOKEN_SECRET, KUEUE_NAMESPACE) or {}
        encoded = secret.get("data", {}).get("token")
        return base64.b64decode(encoded).decode() if encoded else None

    wait_until(f"the token of {TOKEN_SECRET} on the worker", lambda: token() is not None, timeout=timeout)
    return token() or ""


def connect_workers(config: Config, workers: Sequence[Member], manager: Kube) -> None:
    """The Secret on the manager that each worker's MultiKueueCluster reads: a kubeconfig with the worker's endpoint
    and the token of the manager's identity there; and none of a worker the config no longer lists (its
    MultiKueueCluster goes with the manager's quota sync). Safe to re-run (server-side apply)."""
    for worker in workers:
        with worker.target.connect() as kube:
            endpoint = endpoint_of(kube)
            text = worker_kubeconfig(endpoint.server, endpoint.ca_data, worker_token(kube), worker.name)
        manager.apply(kubeconfig_secret(config, worker.name, text))
    kept = {kubeconfig_secret_name(worker.name) for worker in workers}
    for secret in manager.list("v1", "Secret", KUEUE_NAMESPACE, label_selector=selector_of(owner_labels(config))):
        if secret["metadata"]["name"] not in kept:
            manager.delete("v1", "Secret", secret["metadata"]["name"], KUEUE_NAMESPACE)


@dataclass(frozen=True)
class FleetStep:
    """One member of a fleet and what `up` or `plan` gets for it: the config as that cluster sees it and its share."""

    member: Member
    config: Config
    share: FleetShare


def fleet_steps(config: Config, found: Sequence[Member]) -> list[FleetStep]:
    """Each worker in dispatch order, then the manager (its MultiKueueClusters need the workers' identities), of
    the config's `members`: each with its objects from the same render as `render`, the worker identity's rights
    fitted to the Kueue integrations that cluster runs."""
    assert config.clusters is not None
    manager, workers = found[0], found[1:]
    quotas = worker_quotas(config)
    steps = []
    for member, worker in zip(workers, config.clusters.workers, strict=True):
        frameworks = FRAMEWORKS if member.target.simulated else kueue_frameworks()
        objects = worker_objects(config, worker, frameworks, quotas)
        share = FleetShare(QuotaSet(objects, WORKER_KINDS))
        steps.append(FleetStep(member, worker_config(config, worker, quotas), share))

    def connect(kube: Kube) -> None:
        connect_workers(config, workers, kube)

    on_manager = FleetShare(
        QuotaSet(manager_objects(config, quotas), MANAGER_KINDS), manager_kueue_settings(config), connect
    )
    steps.append(FleetStep(manager, manager_view(config), on_manager))
    return steps


def _member_request(request: UpRequest, step: FleetStep) -> UpRequest:
    target = step.member.target
    return replace(
        request,
        config=replace(request.config, config=step.config),
        kubeconfig=None if target.simulated else target.kubeconfig,
        context=target.context,
        sim=target.sim,
        share=step.share,
    )


def run_fleet_up(
    request: UpRequest,
    config_dir: Path,
    *,
    confirm: Confirm | None = None,
    report: Report,
    say: Say,
    progress: BurnInProgress,
) -> list[tuple[Member, UpReport]]:
    """`up` on every member of a checked config with `clusters:`, in `fleet_steps`' order; a member that names no
    cluster is the simulated one of its name, started here. Stops at the first member that fails: re-running
    finishes the fleet, as `up` finishes one cluster."""
    done = []
    config = request.config.config
    for step in fleet_steps(config, members(config, config_dir, simulated_unless_named=True)):
        name = step.member.name
        asked = _member_request(request, step)
        result = run_up(asked, confirm=confirm, report=_named(report, name), say=_named(say, name), progress=progress)
        done.append((step.member, result))
    return done


def plan_fleet(
    config: Config, config_dir: Path, extra: dict[str, Any], takeover: Takeover, say: Say
) -> list[tuple[Member, UpPlan]]:
    """`plan` on every member, as `up` would reach it; reads only."""
    planned = []
    for step in fleet_steps(config, members(config, config_dir, simulated_unless_named=True)):
        target, named = step.member.target, _named(say, step.member.name)
        planned.append((step.member, plan_up(target, step.config, extra, (), takeover, named, step.share)))
    return planned


def start_sim_fleet(config: Config, job_seconds: float, progress: Progress | None = None) -> dict[str, SimCluster]:
    """A simulated cluster for the manager and each worker of a checked config with `clusters:`, named as the config
    names them, each one's objects applied and the workers connected: the workers' GPU nodes as the config describes
    them, the manager without GPU nodes (jobs run on the workers) and with the config's dispatcher. No platform
    chart (`up` installs it too). Safe to re-run: a start that failed midway is finished by the next;
    `SimCluster.down` stops each."""
    say = progress or (lambda _message: None)
    found = [Member(m.name, m.role, resolve_target(sim=m.name)) for m in members(config, Path.cwd())]
    steps = fleet_steps(config, found)
    sims = {}
    for step in steps:
        sims[step.member.name] = SimCluster(step.member.name, progress=_named(say, step.member.name))
        sims[step.member.name].up(spec_of(step.config, job_seconds, step.share.kueue_settings))
    for step in steps:
        say(f"{step.member.name}: applying its objects")
        with step.member.target.connect() as kube:
            if step.share.before_quotas is not None:
                step.share.before_quotas(kube)
            kube.apply_all(step.share.quotas.objects)
    return sims


def _named(say: Progress, cluster: str) -> Progress:
    return lambda message: say(f"{cluster}: {message}")

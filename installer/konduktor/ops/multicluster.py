"""Several clusters from one config: each member reached as the config names it; `up` and `plan` on every member
(the workers in dispatch order, then the manager); the simulated fleet started and connected; and a worker
connected to the manager: the worker's kubeconfig Secret on the manager, built from the token of the identity
`render` gives the manager's Kueue on the worker (docs/multicluster.md).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from konduktor.burnin.runner import Progress as BurnInProgress
from konduktor.burnin.runner import Say
from konduktor.config.clusters import member_accesses, worker_quotas
from konduktor.config.findings import format_path
from konduktor.config.model import Config
from konduktor.errors import KonduktorError, UsageError
from konduktor.helm.values import kueue_frameworks
from konduktor.kube.client import Kube, KubeconfigError
from konduktor.kube.sync import adoption_of, owner_of, selector_of
from konduktor.ops.plan import UpPlan, plan_up
from konduktor.ops.target import Confirm, Target, resolve_target, running_target
from konduktor.ops.up import FleetShare, Report, UpReport, UpRequest, run_up
from konduktor.quotas.multikueue import (
    EVENTS_TOKEN_SECRET,
    MANAGER_KINDS,
    TOKEN_SECRET,
    WORKER_KINDS,
    Role,
    fleet_events_kubeconfig_secret,
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
from konduktor.vocabulary import (
    FLEET_EVENTS_SERVICE_ACCOUNT,
    KUEUE_API,
    KUEUE_NAMESPACE,
    SYSTEM_NAMESPACE,
    fleet_events_secret,
)
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
    found = []
    for one in member_accesses(config):
        if one.unnamed and (simulated_unless_named or SimCluster(one.name).kubeconfig.exists()):
            target = resolve_target(sim=one.name)
        else:
            target = resolve_target(one.kubeconfig_file(config_dir), one.access.context, read_only=True)
        found.append(Member(one.name, one.role, target))
    return found


@contextmanager
def as_member(member: Member, config: Config, config_path: Path) -> Iterator[None]:
    """An error while working on one member of a fleet names it; a kubeconfig of it that does not load gets the
    fleet's hint (the config names it), not a single cluster's."""
    try:
        yield
    except KonduktorError as problem:
        problem.message = f"{member.name} ({member.role}): {problem.message}"
        problem.args = (problem.message,)
        if isinstance(problem, KubeconfigError):
            [path] = [one.path for one in member_accesses(config) if one.name == member.name]
            problem.hint = (
                f"fix {format_path(path)}.kubeconfig or .context in {config_path}; or, to try the fleet on "
                f"simulated clusters, leave out both for every member and start them: konduktor-install sim up "
                f"--config {config_path}"
            )
        raise


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


def worker_token(worker: Kube, secret_name: str = TOKEN_SECRET, timeout: float = 60) -> str:
    """The token the worker's token controller put in an identity's Secret (applied with the worker's objects), once
    it is there."""

    def token() -> str | None:
        secret = worker.get("v1", "Secret", secret_name, KUEUE_NAMESPACE) or {}
        encoded = secret.get("data", {}).get("token")
        return base64.b64decode(encoded).decode() if encoded else None

    wait_until(f"the token of {secret_name} on the worker", lambda: token() is not None, timeout=timeout)
    return token() or ""


def connect_workers(config: Config, workers: Sequence[Member], manager: Kube) -> None:
    """The Secrets on the manager with a kubeconfig for each worker, its endpoint and the token of an identity
    there: the one each worker's MultiKueueCluster reads (Kueue's identity), and the fleet-events relay's; and none
    of a worker the config no longer lists (its MultiKueueCluster goes with the manager's quota sync). Safe to
    re-run (server-side apply)."""
    assert config.clusters is not None
    servers = {worker.name: worker.server for worker in config.clusters.workers}
    # The relay comes with the platform's chart, and its namespace: `up` installs it first; `sim up --config` not.
    relays = manager.get("v1", "Namespace", SYSTEM_NAMESPACE) is not None
    for worker in workers:
        with worker.target.connect() as kube:
            endpoint = endpoint_of(kube)
            server = servers.get(worker.name) or endpoint.server
            kueue = worker_kubeconfig(server, endpoint.ca_data, worker_token(kube), worker.name)
            relay = worker_kubeconfig(
                server,
                endpoint.ca_data,
                worker_token(kube, EVENTS_TOKEN_SECRET),
                worker.name,
                FLEET_EVENTS_SERVICE_ACCOUNT,
            )
        manager.apply(kubeconfig_secret(config, worker.name, kueue))
        if relays:
            manager.apply(fleet_events_kubeconfig_secret(config, worker.name, relay))
    kept = {KUEUE_NAMESPACE: {kubeconfig_secret_name(worker.name) for worker in workers}}
    if relays:
        kept[SYSTEM_NAMESPACE] = {fleet_events_secret(worker.name) for worker in workers}
    for namespace, names in kept.items():
        for secret in manager.list("v1", "Secret", namespace, label_selector=selector_of(owner_labels(config))):
            if secret["metadata"]["name"] not in names:
                manager.delete("v1", "Secret", secret["metadata"]["name"], namespace)


def detach_worker(manager: Kube, config: Config, worker: str, *, dry_run: bool = False) -> list[str]:
    """Tells the manager to stop dispatching to `worker`, before `down` takes the worker down: the worker leaves
    each of the config's MultiKueueConfigs that lists it (one that lists only it is left: Kueue refuses an empty
    list), and its MultiKueueCluster and the manager's kubeconfig Secrets for it are deleted. Only objects this
    config made are touched. Returns what it changed (with `dry_run`, would change). The next `up` puts them back
    while the config still lists the worker."""
    owner = owner_labels(config)
    done = []
    for listed in manager.list(KUEUE_API, "MultiKueueConfig", label_selector=selector_of(owner)):
        name, clusters = listed["metadata"]["name"], listed["spec"].get("clusters", [])
        if worker not in clusters:
            continue
        kept = [cluster for cluster in clusters if cluster != worker]
        if not kept:
            done.append(f"keep MultiKueueConfig {name}: {worker} is its only worker")
            continue
        if not dry_run:
            meta = {"name": name, "labels": listed["metadata"].get("labels", {})}
            manager.apply(
                {"apiVersion": KUEUE_API, "kind": "MultiKueueConfig", "metadata": meta, "spec": {"clusters": kept}}
            )
        done.append(f"change MultiKueueConfig {name}: its workers {', '.join(kept)}")
    for api_version, kind, name, namespace in (
        (KUEUE_API, "MultiKueueCluster", worker, None),
        ("v1", "Secret", kubeconfig_secret_name(worker), KUEUE_NAMESPACE),
        ("v1", "Secret", fleet_events_secret(worker), SYSTEM_NAMESPACE),
    ):
        found = manager.get(api_version, kind, name, namespace)
        if found is None or owner_of(found, owner) is not None or adoption_of(found) is not None:
            continue  # not there, or not made by this config: never deleted
        if not dry_run:
            manager.delete(api_version, kind, name, namespace)
        done.append(f"delete {kind} {namespace + '/' if namespace else ''}{name}")
    return done


def running(member: Member) -> Target:
    """How to reach a member that must already run: a simulated one is refused when it is not running."""
    return member.target if member.target.sim is None else running_target(sim=member.target.sim)


def stop_dispatching_to(config: Config, manager: Member, worker: str, *, dry_run: bool) -> list[str]:
    """`detach_worker` on the config's manager, reached as the config names it."""
    with running(manager).connect() as kube:
        return detach_worker(kube, config, worker, dry_run=dry_run)


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
    config_path: Path,
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
    for step in fleet_steps(config, members(config, config_path.parent, simulated_unless_named=True)):
        name = step.member.name
        asked = _member_request(request, step)
        with as_member(step.member, config, config_path):
            result = run_up(
                asked, confirm=confirm, report=_named(report, name), say=_named(say, name), progress=progress
            )
        done.append((step.member, result))
    return done


def plan_fleet(
    config: Config, config_path: Path, extra: dict[str, Any], takeover: Takeover, say: Say
) -> list[tuple[Member, UpPlan]]:
    """`plan` on every member, as `up` would reach it; reads only. An error names the member it came from."""
    planned = []
    for step in fleet_steps(config, members(config, config_path.parent, simulated_unless_named=True)):
        target, named = step.member.target, _named(say, step.member.name)
        with as_member(step.member, config, config_path):
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

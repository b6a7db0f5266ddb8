"""Several clusters from one config: each member reached as the config names it, the simulated fleet started and
connected, and a worker connected to the manager: the worker's kubeconfig Secret on the manager, built from the
token of the identity `render` gives the manager's Kueue on the worker (docs/multicluster.md).

What is not built yet across clusters (`up`, `plan`, `down`) is listed in docs/multicluster.md.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from konduktor.config.model import ClusterAccess, Config
from konduktor.errors import UsageError
from konduktor.kube.client import Kube
from konduktor.ops.target import Target, resolve_target
from konduktor.quotas.multikueue import (
    TOKEN_SECRET,
    Role,
    kubeconfig_secret,
    manager_kueue_settings,
    render_clusters,
    worker_config,
    worker_kubeconfig,
)
from konduktor.sim.cluster import Progress, SimCluster, SimSpec
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


def members(config: Config, config_dir: Path) -> list[Member]:
    """The manager, then each worker in dispatch order, reached as the config says: its kubeconfig (~ expanded, a
    relative path taken from the config's directory) and context. A member that names neither is the simulated
    cluster of its name when that one runs (`sim up --config` names them so), else the current context of
    $KUBECONFIG or ~/.kube/config, as kubectl reads them."""
    assert config.clusters is not None
    accesses: list[tuple[str, Role, ClusterAccess]] = [
        (config.cluster.name, "manager", config.clusters.manager),
        *((worker.name, "worker", worker) for worker in config.clusters.workers),
    ]
    found = []
    for name, role, access in accesses:
        if access.kubeconfig is None and access.context is None and SimCluster(name).kubeconfig.exists():
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


def endpoint_of(kubeconfig: Path, context: str | None = None) -> Endpoint:
    """The API server and CA of a context of a kubeconfig file (its current one by default); a CA given as a file is
    read, so that the kubeconfig written from it is self-contained."""
    document: dict[str, Any] = yaml.safe_load(kubeconfig.read_text(encoding="utf-8")) or {}
    name = context or document.get("current-context")
    contexts = {entry["name"]: entry["context"] for entry in document.get("contexts", [])}
    clusters = {entry["name"]: entry["cluster"] for entry in document.get("clusters", [])}
    if name not in contexts or contexts[name].get("cluster") not in clusters:
        raise UsageError(f"{kubeconfig}: no context {name!r} with a cluster")
    cluster = clusters[contexts[name]["cluster"]]
    ca_data = cluster.get("certificate-authority-data")
    if ca_data is None and cluster.get("certificate-authority"):
        path = Path(cluster["certificate-authority"])
        if not path.is_absolute():
            path = kubeconfig.parent / path
        ca_data = base64.b64encode(path.read_bytes()).decode()
    if ca_data is None:
        raise UsageError(f"{kubeconfig}: context {name!r} names no certificate authority for its API server")
    return Endpoint(server=cluster["server"], ca_data=ca_data)


def worker_token(worker: Kube, timeout: float = 60) -> str:
    """The token the worker's token controller put in the manager identity's Secret (applied with the worker's
    objects), once it is there."""

    def token() -> str | None:
        secret = worker.get("v1", "Secret", TOKEN_SECRET, KUEUE_NAMESPACE) or {}
        encoded = secret.get("data", {}).get("token")
        return base64.b64decode(encoded).decode() if encoded else None

    wait_until(f"the token of {TOKEN_SECRET} on the worker", lambda: token() is not None, timeout=timeout)
    return token() or ""


def connect_worker(
    config: Config, worker_name: str, worker: Kube, endpoint: Endpoint, manager: Kube, timeout: float = 60
) -> None:
    """The Secret on the manager that the worker's MultiKueueCluster reads: a kubeconfig with the worker's endpoint
    and the token of the manager's identity there. Safe to re-run (server-side apply)."""
    text = worker_kubeconfig(endpoint.server, endpoint.ca_data, worker_token(worker, timeout), worker_name)
    manager.apply(kubeconfig_secret(config, worker_name, text))


def apply_all(kube: Kube, objects: Sequence[dict[str, Any]]) -> None:
    """A rendered cluster's objects, in their order."""
    for obj in objects:
        kube.apply(obj)


def start_sim_fleet(config: Config, job_seconds: float, progress: Progress | None = None) -> dict[str, SimCluster]:
    """A simulated cluster for the manager and each worker of a checked config with `clusters:`, named as the config
    names them, each one's rendered objects applied and the workers connected: the workers' GPU nodes as the config
    describes them, the manager without GPU nodes (jobs run on the workers) and with the config's dispatcher. Safe
    to re-run: a start that failed midway is finished by the next; `SimCluster.down` stops each."""
    assert config.clusters is not None
    say = progress or (lambda _message: None)
    sets = {one.name: one for one in render_clusters(config, FRAMEWORKS)}
    sims = {name: SimCluster(name, progress=_named(say, name)) for name in sets}
    for worker in config.clusters.workers:
        sims[worker.name].up(spec_of(worker_config(config, worker), job_seconds=job_seconds))
    sims[config.cluster.name].up(SimSpec(pools=[], kueue_settings=manager_kueue_settings(config)))
    with Kube(sims[config.cluster.name].kubeconfig) as manager:
        for worker in config.clusters.workers:
            say(f"{worker.name}: applying its objects and connecting it to the manager")
            with Kube(sims[worker.name].kubeconfig) as kube:
                apply_all(kube, sets[worker.name].objects)
                connect_worker(config, worker.name, kube, endpoint_of(sims[worker.name].kubeconfig), manager)
        say(f"{config.cluster.name}: applying the manager's objects")
        apply_all(manager, sets[config.cluster.name].objects)
    return sims


def _named(say: Progress, cluster: str) -> Progress:
    return lambda message: say(f"{cluster}: {message}")

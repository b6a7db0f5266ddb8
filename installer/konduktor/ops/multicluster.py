"""Connecting a MultiKueue manager to a worker: the worker's kubeconfig Secret on the manager, built from the token of
the identity `render` gives the manager's Kueue on the worker (docs/multicluster.md).

The first edge of `up` across clusters; what is not built yet is listed in docs/multicluster.md.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from konduktor.config.model import Config
from konduktor.errors import UsageError
from konduktor.kube.client import Kube
from konduktor.quotas.multikueue import TOKEN_SECRET, kubeconfig_secret, worker_kubeconfig
from konduktor.vocabulary import KUEUE_NAMESPACE
from konduktor.waiting import wait_until


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

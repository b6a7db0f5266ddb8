"""Kubeconfigs for identities other than the simulated cluster's admin: a service account's token (which has
only the rights its RoleBindings give, none by default) and an API server that does not answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from konduktor.kube.client import Kube
from konduktor.sim.processes import free_port


def _write(path: Path, server: str, user: dict[str, Any], cluster: dict[str, Any]) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "target", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "someone", "user": user}],
        "contexts": [{"name": "target", "context": {"cluster": "target", "user": "someone"}}],
        "current-context": "target",
    }
    with path.open("w") as out:
        YAML().dump(document, out)
    return path


def unreachable_kubeconfig(directory: Path) -> Path:
    """A kubeconfig whose API server port nothing listens on: connection refused."""
    port = free_port()
    return _write(
        directory / "unreachable.yaml",
        f"https://127.0.0.1:{port}",
        {"token": "nobody"},
        {"insecure-skip-tls-verify": True},
    )


def service_account_kubeconfig(admin: Kube, admin_kubeconfig: Path, namespace: str, name: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount `namespace/name` (created when missing) with a
    short-lived token from the TokenRequest API."""
    if admin.get("v1", "Namespace", namespace) is None:
        admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    if admin.get("v1", "ServiceAccount", name, namespace) is None:
        admin.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}})
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = admin.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body=request)
    with admin_kubeconfig.open() as source:
        cluster = YAML().load(source)["clusters"][0]["cluster"]
    server = cluster["server"]
    trust = {k: v for k, v in cluster.items() if k in ("certificate-authority", "certificate-authority-data")}
    return _write(path, server, {"token": answer["status"]["token"]}, trust or {"insecure-skip-tls-verify": True})

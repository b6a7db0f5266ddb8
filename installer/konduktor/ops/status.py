"""`status`: what is installed, read from the cluster: the release, the team queues' usage, the health controller's
Deployments and its view of the GPU nodes (mode, leader, fleet breaker, quarantines), and Konduktor's Argo CD
Applications where Argo CD runs. Reads only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from konduktor.errors import KonduktorError
from konduktor.health.health_status import HealthReport, read_health
from konduktor.helm.release import NAMESPACE, RELEASE, Release, current
from konduktor.kube.client import Kube
from konduktor.kube.conditions import condition
from konduktor.ops.multicluster import Member
from konduktor.ops.target import Target
from konduktor.quotas.sync import kueue_served
from konduktor.quotas.usage import TeamUsage, team_usage
from konduktor.vocabulary import BURNIN_NAMESPACE, KUEUE_API

ARGOCD_APPLICATION_CRD = "applications.argoproj.io"
Found = TypeVar("Found")


@dataclass(frozen=True)
class PlatformStatus:
    release: Release | None
    queues: list[TeamUsage]
    controllers: list[dict[str, Any]]  # the health controller's Deployments
    health: HealthReport
    applications: list[dict[str, Any]]  # Konduktor's Argo CD Applications


def installed_release(target: Target) -> Release | None:
    """Konduktor's Helm release on the target; None when it is not installed."""
    return current(target.kubeconfig, RELEASE, NAMESPACE, target.toolbox(), target.context)


def release_document(release: Release | None) -> dict[str, Any]:
    """The release as `status -o json` and `up -o json` show it; `installed` false and the rest null when absent."""
    return {
        "name": RELEASE,
        "namespace": NAMESPACE,
        "installed": release is not None,
        "revision": release.revision if release else None,
        "status": release.status if release else None,
        "chart": release.chart if release else None,
    }


def read_status(target: Target) -> PlatformStatus:
    with target.connect() as kube:
        release = installed_release(target)
        queues = team_usage(kube.list(KUEUE_API, "ClusterQueue")) if kueue_served(kube) else []
        controllers = kube.list(
            "apps/v1", "Deployment", NAMESPACE, label_selector="app.kubernetes.io/component=health-controller"
        )
        health = read_health(kube, BURNIN_NAMESPACE)
        applications = gitops_applications(kube)
    return PlatformStatus(release, queues, controllers, health, applications)


@dataclass(frozen=True)
class WorkerConnection:
    """A worker as the manager's Kueue sees it: its MultiKueueCluster's Active condition."""

    name: str
    active: bool
    reason: str


@dataclass(frozen=True)
class MemberRead(Generic[Found]):
    """What was read from one cluster of several; `found` None when it could not be read, and why."""

    member: Member
    found: Found | None
    problem: str = ""


def read_each(members: list[Member], read: Callable[[Member], Found]) -> list[MemberRead[Found]]:
    """`read` of each cluster; one that cannot be read is reported as such, and the others still are."""
    result: list[MemberRead[Found]] = []
    for member in members:
        try:
            result.append(MemberRead(member, read(member)))
        except KonduktorError as problem:
            result.append(MemberRead(member, None, problem.message))
    return result


def read_fleet_status(members: list[Member]) -> list[MemberRead[tuple[PlatformStatus, list[WorkerConnection]]]]:
    """Each cluster's status, and on the manager each worker's connection."""
    return read_each(
        members,
        lambda m: (read_status(m.target), worker_connections(m.target) if m.role == "manager" else []),
    )


def read_fleet_health(members: list[Member]) -> list[MemberRead[HealthReport]]:
    """Each cluster's GPU nodes, breaker and health controller, as `nodes` reads them."""

    def health(member: Member) -> HealthReport:
        with member.target.connect() as kube:
            return read_health(kube, BURNIN_NAMESPACE)

    return read_each(members, health)


def worker_connections(target: Target) -> list[WorkerConnection]:
    with target.connect() as kube:
        if not kueue_served(kube):
            return []
        clusters = kube.list(KUEUE_API, "MultiKueueCluster")
    result = []
    for cluster in clusters:
        active = condition(cluster, "Active") or {}
        reason = active.get("message") or active.get("reason") or "not reported yet"
        result.append(WorkerConnection(cluster["metadata"]["name"], active.get("status") == "True", reason))
    return result


def gitops_applications(kube: Kube) -> list[dict[str, Any]]:
    """Konduktor's Argo CD Applications (overlays/argocd names them konduktor and konduktor-*), where Argo CD runs."""
    if kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", ARGOCD_APPLICATION_CRD) is None:
        return []
    applications = kube.list("argoproj.io/v1alpha1", "Application")
    return [a for a in applications if a["metadata"]["name"].split("-")[0] == "konduktor"]


def application_state(application: dict[str, Any]) -> tuple[str, str, str, str]:
    """(namespace, name, sync status, health status) as Argo CD reports them; Unknown before its first
    comparison."""
    status, meta = application.get("status") or {}, application["metadata"]
    sync = (status.get("sync") or {}).get("status", "Unknown")
    return meta["namespace"], meta["name"], sync, (status.get("health") or {}).get("status", "Unknown")

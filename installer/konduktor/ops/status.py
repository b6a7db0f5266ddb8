"""`status`: what is installed, read from the cluster: the release, the team queues' usage, the health controller's
Deployments and its view of the GPU nodes (mode, leader, fleet breaker, quarantines), and Konduktor's Argo CD
Applications where Argo CD runs. Reads only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from konduktor.health.health_status import HealthReport, read_health
from konduktor.helm.release import NAMESPACE, RELEASE, Release, current
from konduktor.kube.client import Kube
from konduktor.ops.target import Target
from konduktor.quotas.sync import kueue_served
from konduktor.quotas.usage import TeamUsage, team_usage
from konduktor.vocabulary import BURNIN_NAMESPACE, KUEUE_API

ARGOCD_APPLICATION_CRD = "applications.argoproj.io"


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

"""The app of apps, synced by the real Argo CD on a simulated cluster of its own: bootstrapped as the overlays'
README says (the project and the app of apps only), it syncs overlays/sim-gitops from git, which brings the
platform (konduktor-core with the sim's values) in wave 0 and the team quotas (config.yaml through the plugin)
in wave 1, and the quotas wait for the platform to be Healthy."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from argocd_server import APPLICATION, ArgoCD, GitRepo, application_status, synced_healthy
from conftest import EXAMPLE
from ruamel.yaml import YAML

from konduktor.kube.client import Kube
from konduktor.kube.documents import load_documents
from konduktor.kube.timestamps import parse_time
from konduktor.sim.cluster import SimCluster
from konduktor.sim.pools import spec_from
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until

pytestmark = [pytest.mark.sim, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = "overlays/sim-gitops"
CONFIG_PATH = "clusters/sim"  # the quotas application's path in overlays/sim-gitops
APPS = ("konduktor", "konduktor-platform", "konduktor-quotas")
BOOTSTRAP = "konduktor.ai/bootstrap"


def platform_repo(path: Path) -> GitRepo:
    """A clone of what an admin's fork holds: the overlays and the chart, base/source.yaml naming the fork."""
    repo = GitRepo(path)
    shutil.copytree(ROOT / "overlays", path / "overlays")
    shutil.copytree(ROOT / "charts" / "konduktor-core", path / "charts" / "konduktor-core")
    source = path / "overlays" / "base" / "source.yaml"
    yaml = YAML()
    document: Any = yaml.load(source.read_text())
    document["data"]["repoURL"] = repo.url
    with source.open("w") as handle:
        yaml.dump(document, handle)
    return repo


def bootstrap_objects(repo: GitRepo, kustomize: Path) -> list[dict[str, Any]]:
    built = subprocess.run(
        [str(kustomize), "build", str(repo.path / OVERLAY)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return [doc for doc in load_documents(built) if (doc["metadata"].get("labels") or {}).get(BOOTSTRAP) == "true"]


@pytest.fixture(scope="module")
def gitops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kube, ArgoCD, GitRepo]]:
    cluster = SimCluster("konduktor-gitops")
    cluster.up(spec_from(EXAMPLE, job_seconds=2))
    kube = Kube(cluster.kubeconfig)
    instance = ArgoCD.pinned(Toolbox(), cluster.kubeconfig, tmp_path_factory.mktemp("argocd"))
    try:
        instance.start(kube, os.environ)
        yield kube, instance, platform_repo(tmp_path_factory.mktemp("platform-repo"))
    finally:
        instance.stop()
        kube.close()
        cluster.down()


def summary(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "sync": status.get("sync", {}).get("status"),
        "health": status.get("health"),
        "conditions": status.get("conditions"),
    }


def controller_available(kube: Kube) -> bool:
    controllers = kube.list(
        "apps/v1", "Deployment", "konduktor-system", label_selector="app.kubernetes.io/component=health-controller"
    )
    conditions = [c for d in controllers for c in d.get("status", {}).get("conditions", [])]
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


def stamp(text: str) -> float:
    """A creationTimestamp as epoch seconds."""
    when = parse_time(text)
    assert when is not None, text
    return when


def test_the_app_of_apps_syncs_the_platform_then_the_quotas(gitops: tuple[Kube, ArgoCD, GitRepo]) -> None:
    kube, instance, repo = gitops
    config = YAML(typ="safe").load(EXAMPLE.read_text())
    revision = repo.commit_config(CONFIG_PATH, config, "the platform and examples/config.yaml")

    objects = bootstrap_objects(repo, Toolbox().path("kustomize"))
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("AppProject", "konduktor"),
        ("Application", "konduktor"),
    ]
    for obj in objects:
        kube.apply(obj)

    # The order of events, as seen while the sync runs: a condition's lastTransitionTime can be rewritten by a later
    # flap on a loaded machine, the order in which the two states were first observed cannot. Each look reads the
    # quotas application first and the controller after it, so a look that finds the application finds the
    # controller available unless the application came first (both can change between two looks).
    first_seen: dict[str, int] = {}
    looks = iter(range(1_000_000))

    def observe() -> None:
        look = next(looks)
        if kube.get(*APPLICATION, "konduktor-quotas", "argocd") is not None:
            first_seen.setdefault("quotas application", look)
        if controller_available(kube):
            first_seen.setdefault("controller available", look)

    def all_synced() -> bool:
        observe()
        return all(synced_healthy(application_status(kube, app), revision) for app in APPS)

    wait_until(
        "the app of apps, the platform and the quotas to be Synced and Healthy",
        all_synced,
        timeout=420,
        on_timeout=lambda: AssertionError(
            "\n".join(f"{app}: {summary(application_status(kube, app))}" for app in APPS)
            + f"\n{instance.log('argocd-application-controller')}"
        ),
    )

    # Wave 1 waited for wave 0: the quotas application was created once the platform's health controller was
    # available (first seen no later than the application), and the queues after it.
    assert first_seen["controller available"] <= first_seen["quotas application"], first_seen
    quotas_app = kube.get(*APPLICATION, "konduktor-quotas", "argocd")
    assert quotas_app is not None
    quotas_created = stamp(quotas_app["metadata"]["creationTimestamp"])
    for team in config["teams"]:
        queue = kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", team)
        assert queue is not None, team
        assert stamp(queue["metadata"]["creationTimestamp"]) >= quotas_created
        assert kube.get("kueue.x-k8s.io/v1beta2", "LocalQueue", "default", team) is not None

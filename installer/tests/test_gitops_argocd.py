"""GitOps with the real Argo CD: its application controller, repo server and Konduktor's config management plugin
run as local processes against the simulated cluster and sync from a local git repository holding a team config.

config.yaml is the source of truth in git; the plugin runs `konduktor-install render` on it, so what Argo CD
applies is exactly what `konduktor-install up` would.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import argocd_server as sim_argocd
import pytest
from argocd_server import ArgoCD, GitRepo, application_status, quotas_application, refresh, synced_healthy
from conftest import EXAMPLE, Sim

from konduktor.cli.main import main
from konduktor.kube.client import Kube
from konduktor.quotas.render import CONFIG_LABEL, QUOTA_KINDS
from konduktor.tools.toolbox import Toolbox
from konduktor.vocabulary import TEAM_LABEL
from konduktor.waiting import wait_until

APP = "konduktor-gitops-quotas"
CONFIG_PATH = "clusters/sim"
TEAMS = ("gitops-a", "gitops-b")
CQ = "kueue.x-k8s.io/v1beta2"


CLUSTER = "gitops-lab"


def team_config(quotas: dict[str, int | str]) -> dict[str, Any]:
    """The example cluster's config with teams of this test's own (the session's cluster serves other tests)."""
    return sim_argocd.team_config(EXAMPLE, CLUSTER, quotas)


class Repo(GitRepo):
    def commit_config(self, config: dict[str, Any], message: str) -> str:  # type: ignore[override]
        return super().commit_config(CONFIG_PATH, config, message)


@pytest.fixture(scope="module")
def argocd(sim: Sim, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ArgoCD, Repo]]:
    toolbox = Toolbox()
    home = tmp_path_factory.mktemp("argocd")
    instance = ArgoCD.pinned(toolbox, sim.kubeconfig, home)
    repo = Repo(tmp_path_factory.mktemp("gitops-repo"))
    try:
        instance.start(sim.kube, os.environ)
        yield instance, repo
    finally:
        instance.stop()
        leave_cluster(sim.kube)


APPLICATION = ("argoproj.io/v1alpha1", "Application")


def leave_cluster(kube: Kube) -> None:
    """The session's cluster serves other tests: remove the Applications and what they applied."""
    for app in kube.list("argoproj.io/v1alpha1", "Application", "argocd"):
        kube.patch(
            "argoproj.io/v1alpha1", "Application", app["metadata"]["name"], {"metadata": {"finalizers": None}}, "argocd"
        )
        kube.delete("argoproj.io/v1alpha1", "Application", app["metadata"]["name"], "argocd")
    for api_version, kind in reversed(QUOTA_KINDS):
        for obj in kube.list(api_version, kind, label_selector=f"{CONFIG_LABEL}={CLUSTER}"):
            kube.delete(api_version, kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))


def app_status(kube: Kube) -> dict[str, Any]:
    return application_status(kube, APP)


def synced_to(kube: Kube, revision: str) -> bool:
    return synced_healthy(app_status(kube), revision)


def gpu_quota(queue: dict[str, Any]) -> str:
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                if resource["name"] == "nvidia.com/gpu":
                    return str(resource["nominalQuota"])
    raise AssertionError("no GPU quota")


def generations(kube: Kube) -> dict[str, int]:
    return {team: kube.get(CQ, "ClusterQueue", team)["metadata"]["generation"] for team in TEAMS}  # type: ignore[index]


@pytest.mark.slow
@pytest.mark.sim
def test_config_in_git_syncs_and_quota_change_applies(
    sim: Sim, argocd: tuple[ArgoCD, Repo], capsys: pytest.CaptureFixture[str]
) -> None:
    instance, repo = argocd
    first = repo.commit_config(team_config({"gitops-a": 16, "gitops-b": 16}), "two teams")
    sim.kube.apply(quotas_application(APP, repo.url, CONFIG_PATH))
    wait_until(
        "the quotas application to be Synced and Healthy",
        lambda: synced_to(sim.kube, first),
        timeout=240,
        on_timeout=lambda: AssertionError(f"{app_status(sim.kube)}\n{instance.log('argocd-application-controller')}"),
    )
    assert {gpu_quota(sim.kube.get(CQ, "ClusterQueue", t) or {}) for t in TEAMS} == {"16"}
    before = generations(sim.kube)

    second = repo.commit_config(team_config({"gitops-a": 20, "gitops-b": 16}), "gitops-a gets 20 GPUs")
    refresh(sim.kube, APP)
    wait_until("the quota change to be synced", lambda: synced_to(sim.kube, second), timeout=180)
    assert gpu_quota(sim.kube.get(CQ, "ClusterQueue", "gitops-a") or {}) == "20"
    after = generations(sim.kube)
    assert after["gitops-a"] == before["gitops-a"] + 1
    assert after["gitops-b"] == before["gitops-b"]

    # A sync with nothing changed in git changes no object's generation.
    refresh(sim.kube, APP)
    # reconciledAt has whole seconds and may not move; the annotation goes once the comparison is done.
    wait_until("the refresh to be compared with git", lambda: not refresh_pending(sim.kube), timeout=120)
    assert synced_to(sim.kube, second)
    assert generations(sim.kube) == after

    # `konduktor-install status` shows the application's sync and health.
    assert main(["status", "--kubeconfig", str(sim.kubeconfig), "-o", "json"]) in (0, 1)  # 1: no release here
    status = json.loads(capsys.readouterr().out)
    assert {"namespace": "argocd", "name": APP, "sync": "Synced", "health": "Healthy"} in status["argocd"]


def refresh_pending(kube: Kube) -> bool:
    """The controller removes the refresh annotation once it has compared the application with git."""
    app = kube.get("argoproj.io/v1alpha1", "Application", APP, "argocd") or {"metadata": {}}
    return "argocd.argoproj.io/refresh" in (app["metadata"].get("annotations") or {})


@pytest.mark.slow
@pytest.mark.sim
def test_a_manual_clusterqueue_edit_is_reverted_by_self_heal(sim: Sim, argocd: tuple[ArgoCD, Repo]) -> None:
    _, repo = argocd
    head = repo.head()
    wait_until("the application to be in sync", lambda: synced_to(sim.kube, head), timeout=240)
    wanted = gpu_quota(sim.kube.get(CQ, "ClusterQueue", "gitops-b") or {})
    queue = sim.kube.get(CQ, "ClusterQueue", "gitops-b") or {}
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"] = [
        {**r, "nominalQuota": 99} if r["name"] == "nvidia.com/gpu" else r
        for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    ]
    sim.kube.patch(CQ, "ClusterQueue", "gitops-b", {"spec": {"resourceGroups": queue["spec"]["resourceGroups"]}})
    wait_until(
        "self-heal to restore the quota from git",
        lambda: gpu_quota(sim.kube.get(CQ, "ClusterQueue", "gitops-b") or {}) == wanted,
        timeout=180,
    )


@pytest.mark.slow
@pytest.mark.sim
def test_an_invalid_config_fails_visibly_and_applies_nothing(sim: Sim, argocd: tuple[ArgoCD, Repo]) -> None:
    _, repo = argocd
    before = {t: gpu_quota(sim.kube.get(CQ, "ClusterQueue", t) or {}) for t in TEAMS}
    config = team_config({"gitops-a": 20, "gitops-b": 16})
    config["teams"]["gitops-a"]["gpus"][f"h100-{CLUSTER}"]["quota"] = "thirty"
    good = repo.head()
    repo.commit_config(config, "a typo in a quota")
    refresh(sim.kube, APP)

    def render_error() -> str:
        conditions = app_status(sim.kube).get("conditions") or []
        return " ".join(c.get("message", "") for c in conditions if c.get("type") == "ComparisonError")

    wait_until("the render error to reach the Application's status", lambda: "config.yaml:" in render_error(), 180)
    assert "quota" in render_error()
    assert app_status(sim.kube)["operationState"]["syncResult"]["revision"] == good  # the last sync: the good one
    assert {t: gpu_quota(sim.kube.get(CQ, "ClusterQueue", t) or {}) for t in TEAMS} == before
    # Fixed in the next commit: syncs again.
    fixed = repo.commit_config(team_config({"gitops-a": 20, "gitops-b": 16}), "fix the typo")
    refresh(sim.kube, APP)
    wait_until("the fixed config to sync", lambda: synced_to(sim.kube, fixed), timeout=180)


@pytest.mark.slow
@pytest.mark.sim
def test_removing_a_team_prunes_its_queues_and_rolebindings_but_not_its_namespace(
    sim: Sim, argocd: tuple[ArgoCD, Repo]
) -> None:
    _, repo = argocd
    local_queues = sim.kube.list("kueue.x-k8s.io/v1beta2", "LocalQueue", "gitops-b")
    bindings = [
        b
        for b in sim.kube.list("rbac.authorization.k8s.io/v1", "RoleBinding", "gitops-b")
        if b["metadata"].get("labels", {}).get(TEAM_LABEL) == "gitops-b"
    ]
    assert local_queues and bindings
    alone = team_config({"gitops-a": 20})
    for limit in ("borrowLimit", "lendLimit"):  # validate refuses them with no other team to borrow from or lend to
        alone["teams"]["gitops-a"]["gpus"][f"h100-{CLUSTER}"].pop(limit, None)
    removed = repo.commit_config(alone, "gitops-b leaves")
    refresh(sim.kube, APP)
    wait_until("the team's removal to sync", lambda: synced_to(sim.kube, removed), timeout=180)
    wait_until("gitops-b's ClusterQueue to be pruned", lambda: sim.kube.get(CQ, "ClusterQueue", "gitops-b") is None, 60)
    assert sim.kube.list("kueue.x-k8s.io/v1beta2", "LocalQueue", "gitops-b") == []
    for binding in bindings:
        assert (
            sim.kube.get("rbac.authorization.k8s.io/v1", "RoleBinding", binding["metadata"]["name"], "gitops-b") is None
        )
    namespace = sim.kube.get("v1", "Namespace", "gitops-b")
    assert namespace is not None and namespace.get("status", {}).get("phase") == "Active"
    assert sim.kube.get(CQ, "ClusterQueue", "gitops-a") is not None


def test_the_application_health_check_admins_are_given_is_the_one_the_sim_runs() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "design" / "gitops.md").read_text()
    documented = page.split("```lua\n", 1)[1].split("```", 1)[0]
    assert documented == sim_argocd.APPLICATION_HEALTH

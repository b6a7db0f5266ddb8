"""overlays/: every overlay builds with the pinned kustomize, the sim overlay is konduktor-core as the sim runs it, the
cloud overlays point Argo CD at their own values, and every Argo CD object is accepted by the API server under
Argo CD's own CRD schemas."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import Sim
from ruamel.yaml import YAML

from konduktor.config.load import load_config
from konduktor.helm.release import CHARTS
from konduktor.kube.documents import load_documents, load_generated
from konduktor.quotas.render import render
from konduktor.tools.gobuild import module_dir
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]

OVERLAYS = REPO_ROOT / "overlays"
ALL = sorted(path.parent.name for path in OVERLAYS.glob("*/kustomization.yaml"))
ENVIRONMENTS = sorted(path.parent.name for path in OVERLAYS.glob("*/values.yaml"))
CORE = CHARTS / "konduktor-core"
SIM_VALUES = CORE / "values-sim.yaml"
ARGO_API = "argoproj.io/v1alpha1"
WAVE = "argocd.argoproj.io/sync-wave"


def build(overlay: str) -> list[dict[str, Any]]:
    toolbox = Toolbox()
    flags = []
    if overlay == "sim":  # it renders konduktor-core, from ../../charts, with the pinned helm
        flags = [
            "--enable-helm",
            "--helm-command",
            str(toolbox.path("helm")),
            "--load-restrictor",
            "LoadRestrictionsNone",
        ]
    result = subprocess.run(
        [str(toolbox.path("kustomize")), "build", *flags, str(OVERLAYS / overlay)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return load_generated(result.stdout)


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def wave(obj: dict[str, Any]) -> int:
    return int(obj["metadata"].get("annotations", {}).get(WAVE, "0"))


def test_every_documented_overlay_exists() -> None:
    assert ALL == ["argocd", "bare-metal", "base", "eks", "gke", "sim", "sim-gitops"]
    assert ENVIRONMENTS == ["bare-metal", "eks", "gke"]


@pytest.mark.parametrize("overlay", ALL)
def test_overlay_builds(overlay: str) -> None:
    assert build(overlay)


def identity(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def test_sim_overlay_is_konduktor_core_with_the_sim_values() -> None:
    result = subprocess.run(
        [
            str(Toolbox().path("helm")),
            "template",
            "konduktor",
            str(CORE),
            "--namespace",
            "konduktor-system",
            "--values",
            str(SIM_VALUES),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    chart = {identity(o) for o in load_generated(result.stdout)}
    overlay = build("sim")
    assert {identity(o) for o in overlay} == chart | {("Namespace", "", "konduktor-system")}
    settings = next(o for o in overlay if o["kind"] == "ConfigMap" and "health.yaml" in o.get("data", {}))
    assert YAML(typ="safe").load(settings["data"]["health.yaml"])["dry_run"] is False  # the sim runs its controller
    assert not {o["kind"] for o in overlay} & {"ServiceMonitor", "PrometheusRule"}  # no Prometheus operator there


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_environment_syncs_its_own_overlay_and_values(environment: str) -> None:
    objects = build(environment)
    root = named(objects, "Application", "konduktor")
    assert root["spec"]["source"]["path"] == f"overlays/{environment}"
    platform = named(objects, "Application", "konduktor-platform")
    chart_source, values_source = platform["spec"]["sources"]
    assert chart_source["path"] == "charts/konduktor"
    assert values_source["ref"] == "values"
    for value_file in chart_source["helm"]["valueFiles"]:
        assert value_file.startswith("$values/")
        assert (REPO_ROOT / value_file.removeprefix("$values/")).is_file(), value_file
    assert chart_source["helm"]["valueFiles"] == [f"$values/overlays/{environment}/values.yaml"]
    # Every application and the project name the one repository of base/source.yaml.
    project = named(objects, "AppProject", "konduktor")
    sources = [a["spec"].get("sources") or [a["spec"]["source"]] for a in objects if a["kind"] == "Application"]
    assert {source["repoURL"] for group in sources for source in group} == set(project["spec"]["sourceRepos"])


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_sync_waves_put_operators_before_quotas(environment: str) -> None:
    objects = build(environment)
    project = named(objects, "AppProject", "konduktor")
    platform = named(objects, "Application", "konduktor-platform")
    quotas = named(objects, "Application", "konduktor-quotas")
    namespace = named(objects, "Namespace", "konduktor-system")
    assert wave(project) < wave(platform) < wave(quotas)
    assert wave(namespace) < wave(platform)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # The platform's destination is the namespace of every subchart hook (PreSync); Argo CD creates it first if
    # the overlay's did not, and the chart brings no other namespace its hooks would wait for.
    assert platform["spec"]["destination"]["namespace"] == namespace["metadata"]["name"]
    assert "CreateNamespace=true" in platform["spec"]["syncPolicy"]["syncOptions"]
    assert "ServerSideApply=true" in platform["spec"]["syncPolicy"]["syncOptions"]
    assert "SkipDryRunOnMissingResource=true" in quotas["spec"]["syncPolicy"]["syncOptions"]
    assert quotas["spec"]["syncPolicy"]["retry"]["limit"] > 0  # Kueue's webhooks answer late
    # Custom resources of the environment (e.g. the NicClusterPolicy) need CRDs the platform installs.
    for obj in objects:
        group = obj["apiVersion"].rpartition("/")[0]
        if "." in group and not group.endswith(".k8s.io") and group != "argoproj.io":
            annotations = obj["metadata"]["annotations"]
            assert wave(obj) > wave(platform), identity(obj)
            assert annotations["argocd.argoproj.io/sync-options"] == "SkipDryRunOnMissingResource=true"


def rendered_kinds() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(group, kind) of the cluster-scoped and of the namespaced objects `render` makes for the examples."""
    cluster, namespaced = set(), set()
    for example in sorted((REPO_ROOT / "examples").glob("*.yaml")):
        for obj in render(load_config(example).config):
            group = obj["apiVersion"].rpartition("/")[0]
            (namespaced if "namespace" in obj["metadata"] else cluster).add((group, obj["kind"]))
    return cluster, namespaced


def test_the_quotas_application_may_create_only_what_render_produces() -> None:
    objects = build("base")
    quotas = named(objects, "Application", "konduktor-quotas")
    project = named(objects, "AppProject", quotas["spec"]["project"])
    assert project["metadata"]["name"] != "konduktor"  # not the platform's project, which allows every kind
    spec = project["spec"]
    cluster, namespaced = rendered_kinds()
    assert {(e["group"], e["kind"]) for e in spec["clusterResourceWhitelist"]} == cluster
    assert {(e["group"], e["kind"]) for e in spec["namespaceResourceWhitelist"]} == namespaced
    assert len(spec["clusterResourceWhitelist"]) == len(cluster)
    assert len(spec["namespaceResourceWhitelist"]) == len(namespaced)
    # Any team namespace, but none of the platform's or the system's.
    denied = {d["namespace"].removeprefix("!") for d in spec["destinations"] if d["namespace"].startswith("!")}
    assert {"kube-system", "konduktor-system", "konduktor-burnin", "argocd"} <= denied
    assert spec["destinations"][-1]["namespace"] == "*"
    assert spec["sourceRepos"] == named(objects, "AppProject", "konduktor")["spec"]["sourceRepos"]
    assert wave(project) < wave(quotas)


def test_bootstrap_label_selects_the_project_and_the_app_of_apps() -> None:
    objects = build("base")
    selected = {identity(o) for o in objects if o["metadata"].get("labels", {}).get("konduktor.ai/bootstrap") == "true"}
    assert selected == {("AppProject", "argocd", "konduktor"), ("Application", "argocd", "konduktor")}


# --- against the API server ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def argo_cd_crds(sim: Sim) -> None:
    source = module_dir(Toolbox().tools["argo-cd"]) / "manifests" / "crds"
    crds = [doc for path in sorted(source.glob("*-crd.yaml")) for doc in load_documents(path)]
    assert {crd["spec"]["names"]["kind"] for crd in crds} >= {"Application", "AppProject", "ApplicationSet"}
    for crd in crds:
        sim.kube.apply(crd)

    def established() -> bool:
        for crd in crds:
            found = sim.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd["metadata"]["name"])
            conditions = ((found or {}).get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    wait_until("Argo CD's CRDs to be established", established, timeout=60)
    sim.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "argocd"}})


@pytest.mark.sim
@pytest.mark.parametrize("overlay", [o for o in ALL if o != "sim"])
def test_argo_cd_objects_match_argo_cds_schemas(sim: Sim, argo_cd_crds: None, overlay: str) -> None:
    """Server-side dry run with strict field validation against Argo CD's CRDs: a misspelt field, a wrong type or
    a value the schema refuses fails here instead of in the cluster's Argo CD."""
    argo_objects = [o for o in build(overlay) if o["apiVersion"] == ARGO_API]
    assert {o["kind"] for o in argo_objects} == {"AppProject", "Application"}
    for obj in argo_objects:
        sim.kube.apply(obj, dry_run=True)


@pytest.mark.sim
def test_sim_overlay_is_accepted_by_the_apiserver(sim: Sim) -> None:
    objects = build("sim")
    for namespace in (o for o in objects if o["kind"] == "Namespace"):
        sim.kube.apply(namespace)
    for obj in objects:
        sim.kube.apply(obj, dry_run=True)

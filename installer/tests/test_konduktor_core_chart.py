"""konduktor-core: renders with the real helm for every supported shape, follows the chart conventions, is
accepted by a real kube-apiserver with the Kueue and Prometheus-operator CRDs, and installs and re-upgrades
on the simulated cluster without changing anything the second time."""

from __future__ import annotations

import filecmp
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import Sim
from ruamel.yaml import YAML
from support import CORE, NAMESPACE, helm, render

from konduktor.config.model import KONDUKTOR_IMAGE
from konduktor.helm.release import install_or_upgrade, uninstall
from konduktor.kube.client import Kube
from konduktor.kube.conditions import is_true
from konduktor.kube.documents import load_documents
from konduktor.tools.gobuild import module_dir
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]

# The supported shapes: the fixtures of ci/ and the simulated cluster's runtime values (`up`, overlays/sim).
CI_VALUES = [*sorted((CORE / "ci").glob("*-values.yaml")), CORE / "values-sim.yaml"]


def test_chart_lints() -> None:
    result = helm("lint", str(CORE), "--strict")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_every_supported_shape_renders_with_conventions(values: Path) -> None:
    objects = render(values)
    assert objects
    for obj in objects:
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/part-of") == "konduktor", obj["metadata"]["name"]
        assert labels.get("app.kubernetes.io/managed-by") == "Helm"
    for workload in (o for o in objects if o["kind"] == "Deployment"):
        assert "helm.sh/chart" not in workload["spec"]["selector"]["matchLabels"]
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            assert container["resources"]["requests"]  # our own pods always say what they need


def test_minimal_shape_needs_no_crds() -> None:
    objects = render(CORE / "ci" / "minimal-values.yaml")
    assert not {o["kind"] for o in objects} & {"ServiceMonitor", "PrometheusRule"}
    # Without the teams' policies only the controller's confinement is left (a built-in API, no CRD).
    policies = {o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    assert policies == {
        f"konduktor-konduktor-core-health-{name}" for name in ("node-writes", "jobs", "objects", "workloads")
    }


def test_on_its_own_the_chart_needs_no_prometheus_operator() -> None:
    """Its ServiceMonitor and PrometheusRule are the operator's kinds: off unless asked for (the umbrella asks)."""
    by_default = render()
    assert not [o["kind"] for o in by_default if o["apiVersion"].startswith("monitoring.coreos.com/")]
    asked = render(None, "--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true")
    monitoring = sorted(o["kind"] for o in asked if o["apiVersion"] == "monitoring.coreos.com/v1")
    assert monitoring == ["PrometheusRule", "ServiceMonitor"]


def health_settings(*settings: str) -> dict[str, Any]:
    [config] = [o for o in render(None, *settings) if o["kind"] == "ConfigMap" and "health.yaml" in o.get("data", {})]
    loaded: dict[str, Any] = YAML(typ="safe").load(config["data"]["health.yaml"])
    return loaded


def test_the_controller_finds_loki_and_prometheus_by_their_services() -> None:
    assert not {"loki", "prometheus"} & health_settings().keys()
    named = health_settings(
        *("--set", "controller.services.loki.name=loki", "--set", "controller.settings.loki.tenant=platform"),
        *("--set", "controller.services.prometheus.name=prometheus-operated"),
        *("--set", "controller.services.prometheus.namespace=monitoring"),
    )
    # In the release namespace by the short name, elsewhere by the namespace's; the other loki settings are kept.
    assert named["loki"] == {"url": "http://loki:3100", "tenant": "platform"}
    assert named["prometheus"] == {"url": "http://prometheus-operated.monitoring.svc:9090"}
    given = health_settings(
        "--set", "controller.services.loki.name=loki", "--set", "controller.settings.loki.url=http://l"
    )
    assert given["loki"]["url"] == "http://l"


def test_dashboards_rules_and_policies_come_from_their_sources() -> None:
    """dashboards/ and policies/ are the sources; the chart carries identical copies (scripts/sync-chart-files)."""
    for source, copy in (
        (REPO_ROOT / "dashboards", CORE / "files" / "dashboards"),
        (REPO_ROOT / "policies", CORE / "files" / "policies"),
    ):
        names = sorted(p.name for p in source.glob("*.json")) or sorted(
            p.name for p in source.glob("*.yaml") if p.name != "params.yaml"
        )
        _, mismatch, errors = filecmp.cmpfiles(source, copy, names, shallow=False)
        assert not mismatch and not errors, f"out of date: {mismatch + errors}; run scripts/sync-chart-files"
        assert sorted(p.name for p in copy.iterdir()) == names
    objects = render(None, "--set", "prometheusRule.enabled=true")
    dashboards = [o for o in objects if o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    assert len(dashboards) == len(list((REPO_ROOT / "dashboards").glob("*.json")))
    [rule] = [o for o in objects if o["kind"] == "PrometheusRule"]
    source = YAML(typ="safe").load((CORE / "files" / "alerts" / "konduktor.rules.yaml").read_text())
    rendered = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    expected = [r for g in source["groups"] for r in g["rules"]]
    assert [r.get("expr") for r in rendered] == [r.get("expr") for r in expected]
    for alert in (r for r in rendered if "alert" in r):  # runbooks become absolute links
        assert alert["annotations"]["runbook_url"].startswith("https://")
        assert alert["annotations"]["runbook_url"].endswith(f"docs/runbooks.md#{alert['alert'].lower()}")


def test_policy_bindings_enforce_by_default_and_warn_first_on_request() -> None:
    policies = sorted((REPO_ROOT / "policies").glob("*.yaml"))
    for setting, actions in ((None, ["Deny", "Audit"]), ("policies.validationActions={Warn,Audit}", ["Warn", "Audit"])):
        objects = render(None, *(["--set", setting] if setting else []))
        every = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
        # The controller's confinement always denies: it binds the platform's own account, not the teams'.
        confinement = [o for o in every if o["metadata"]["name"].startswith("konduktor-konduktor-core-health-")]
        assert len(confinement) == 4 and all(o["spec"]["validationActions"] == ["Deny"] for o in confinement)
        bindings = [o for o in every if o not in confinement]
        assert len(bindings) == len(policies) - 1  # params.yaml holds no binding
        for binding in bindings:
            assert binding["spec"]["validationActions"] == actions
            if "paramRef" in binding["spec"]:
                assert binding["spec"]["paramRef"]["namespace"] == NAMESPACE


def test_policy_parameters_default_to_the_shipped_params() -> None:
    """One truth: the chart's defaults render the ConfigMap that policies/params.yaml ships for hand-made installs."""
    [shipped] = load_documents((REPO_ROOT / "policies" / "params.yaml").read_text())
    [rendered] = [o for o in render() if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "konduktor-admission"]
    assert rendered["data"] == shipped["data"]
    team_labellers = render(None, "--set", "policies.teamNamespaces.groups={oidc:platform-admins,system:masters}")
    [params] = [
        o for o in team_labellers if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "konduktor-admission"
    ]
    assert params["data"]["teamNamespaceGroups"] == "oidc:platform-admins,system:masters"


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("controller.replicas=two", "/controller/replicas"),
        ("policies.validationActions={Deny,Warn}", "/policies/validationActions"),
        ("controller.imagee.tag=x", "imagee"),
        ("burnin.namespace=Not_A_Namespace", "/burnin/namespace"),
        ("controller.image.digest=sha256:abc", "/controller/image/digest"),
        ("controller.securityContext=strict", "/controller/securityContext"),
        ("fleetEvents.podSecurityContext=1", "/fleetEvents/podSecurityContext"),
    ],
)
def test_schema_refuses_bad_values(setting: str, complaint: str) -> None:
    result = helm("lint", str(CORE), "--set", setting)
    assert result.returncode != 0
    assert complaint in result.stdout + result.stderr


def test_both_deployments_run_the_image_by_digest_when_one_is_given() -> None:
    def images(*extra: str) -> set[str]:
        deployments = [o for o in render(None, *extra) if o["kind"] == "Deployment"]
        assert len(deployments) == 2  # the health controller and the capacity publisher
        return {c["image"] for d in deployments for c in d["spec"]["template"]["spec"]["containers"]}

    assert images() == {KONDUKTOR_IMAGE}
    assert images("--set", "controller.image.repository=reg.local/k,controller.image.tag=v9") == {"reg.local/k:v9"}
    digest = "sha256:" + "0f" * 32
    pinned = images(
        "--set", f"controller.image.repository=reg.local/k,controller.image.tag=v9,controller.image.digest={digest}"
    )
    assert pinned == {f"reg.local/k@{digest}"}  # the tag is not used


def test_the_fleet_events_relay_runs_only_on_a_manager_and_gets_only_its_secrets() -> None:
    assert not [o for o in render() if "fleet-events" in o["metadata"]["name"]]  # no workers: a single cluster
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(None, "--set", "fleetEvents.workers={west,east}")}
    [secrets] = objects[("Role", "konduktor-konduktor-core-fleet-events")]["rules"]
    assert secrets == {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": ["konduktor-fleet-events-west", "konduktor-fleet-events-east"],
        "verbs": ["get"],
    }
    cluster_rules = objects[("ClusterRole", "konduktor-konduktor-core-fleet-events")]["rules"]
    verbs = {verb for rule in cluster_rules for verb in rule["verbs"]}
    assert verbs == {"list", "get", "create"}
    assert [rule["resources"] for rule in cluster_rules if "create" in rule["verbs"]] == [["events"]]
    [container] = objects[("Deployment", "konduktor-konduktor-core-fleet-events")]["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["command"] == [
        "konduktor-install",
        "relay-fleet-events",
        "--every",
        "10",
        "--worker",
        "west",
        "--worker",
        "east",
    ]


WORKLOADS = {  # each Deployment the chart templates, by the values section that sets its pod
    "controller": "konduktor-konduktor-core-health",
    "capacityPublisher": "konduktor-konduktor-core-capacity-publisher",
    "fleetEvents": "konduktor-konduktor-core-fleet-events",
}
EVERY_WORKLOAD = ("--set", "fleetEvents.workers={west}")  # the relay runs only with workers


def security_contexts(*extra: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each workload's (pod securityContext, its one container's securityContext), by values section."""
    deployments = {o["metadata"]["name"]: o for o in render(None, *EVERY_WORKLOAD, *extra) if o["kind"] == "Deployment"}
    assert set(deployments) == set(WORKLOADS.values())
    contexts = {}
    for section, name in WORKLOADS.items():
        pod = deployments[name]["spec"]["template"]["spec"]
        [container] = pod["containers"]
        contexts[section] = (pod["securityContext"], container["securityContext"])
    return contexts


def test_every_workload_runs_restricted_by_default() -> None:
    restricted_pod = {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    restricted_container = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert security_contexts() == {section: (restricted_pod, restricted_container) for section in WORKLOADS}


@pytest.mark.parametrize("section", WORKLOADS)
def test_each_workloads_security_contexts_are_values_of_its_own(section: str) -> None:
    defaults = security_contexts()
    changed = security_contexts(
        "--set",
        f"{section}.podSecurityContext.runAsUser=1000,{section}.podSecurityContext.fsGroup=2000",
        "--set",
        f"{section}.securityContext.readOnlyRootFilesystem=false,{section}.securityContext.capabilities=null",
    )
    pod, container = changed[section]
    assert pod == {**defaults[section][0], "runAsUser": 1000, "fsGroup": 2000}  # the rest of the defaults stay
    assert container == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": False}  # null drops a key
    assert {s: c for s, c in changed.items() if s != section} == {s: c for s, c in defaults.items() if s != section}


def test_readme_is_generated_from_values() -> None:
    result = subprocess.run(
        [str(Toolbox().path("helm-docs")), "--dry-run", "--chart-search-root", str(CORE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (CORE / "README.md").read_text().strip(), "run scripts/sync-chart-files"


def install_crds(kube: Kube, directory: Path) -> None:
    names = []
    for path in sorted(directory.glob("*.yaml")):
        for crd in load_documents(path):
            kube.apply(crd)
            names.append(crd["metadata"]["name"])

    def established() -> bool:
        for name in names:
            if not is_true(kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name), "Established"):
                return False
        return True

    wait_until("CRDs to be established", established, timeout=60)


@pytest.fixture(scope="module")
def monitoring_crds(sim: Sim) -> None:
    source = module_dir(Toolbox().tools["prometheus-operator"]) / "example" / "prometheus-operator-crd"
    install_crds(sim.kube, source)


@pytest.mark.sim
@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_rendered_objects_are_accepted_by_the_apiserver(sim: Sim, monitoring_crds: None, values: Path) -> None:
    """Server-side dry run with strict field validation: schema errors, unknown fields, bad CEL all fail."""
    sim.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    objects = render(values)
    for namespace in (o for o in objects if o["kind"] == "Namespace"):  # the burn-in namespace, for its Role
        sim.kube.apply(namespace)
    for obj in objects:
        sim.kube.apply(obj, dry_run=True)


def resource_versions(kube: Kube) -> dict[str, str]:
    """Generation where the kind has one (status updates by controllers do not count), else resourceVersion."""
    versions = {}
    for api_version, kind in (
        ("apps/v1", "Deployment"),
        ("v1", "ConfigMap"),
        ("v1", "Service"),
        ("v1", "ServiceAccount"),
        ("rbac.authorization.k8s.io/v1", "Role"),
    ):
        for obj in kube.list(api_version, kind, NAMESPACE, label_selector="app.kubernetes.io/part-of=konduktor"):
            meta = obj["metadata"]
            versions[f"{kind}/{meta['name']}"] = str(meta.get("generation", meta["resourceVersion"]))
    for api_version, kind in (
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ):
        for obj in kube.list(api_version, kind, label_selector="app.kubernetes.io/part-of=konduktor"):
            meta = obj["metadata"]
            versions[f"{kind}/{meta['name']}"] = str(meta.get("generation", meta["resourceVersion"]))
    return versions


@pytest.mark.sim
def test_installs_and_upgrades_with_no_change(sim: Sim, monitoring_crds: None) -> None:
    values = YAML(typ="safe").load((CORE / "values-sim.yaml").read_text())
    try:
        first = install_or_upgrade(sim.kubeconfig, CORE, "konduktor", NAMESPACE, values)
        assert first.status == "deployed"
        before = resource_versions(sim.kube)
        assert "Deployment/konduktor-konduktor-core-health" in before
        second = install_or_upgrade(sim.kubeconfig, CORE, "konduktor", NAMESPACE, values)
        assert (second.status, second.revision) == ("deployed", first.revision + 1)
        assert resource_versions(sim.kube) == before  # the upgrade rewrote nothing
    finally:
        # Its policies enforce: later tests that run Jobs in namespaces of their own must not meet them.
        uninstall(sim.kubeconfig, "konduktor", NAMESPACE)


def test_the_preflight_pods_default_image_is_the_one_the_chart_runs() -> None:
    chart = load_documents(CORE / "Chart.yaml")[0]
    values = load_documents(CORE / "values.yaml")[0]
    assert f"{values['controller']['image']['repository']}:{chart['appVersion']}" == KONDUKTOR_IMAGE

"""Who reaches the logs and the controller's metrics: Loki in one tenant named by all its clients, NetworkPolicies
that admit only those clients (rendered by the umbrella, accepted by the sim's API server), Grafana's admin login
from a Secret and its dashboard sidecar kept to the platform's namespaces."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Sim
from support import NAMESPACE, rendered_health_settings, umbrella_objects, values

from konduktor.health.settings import HealthSettings

TENANT_HEADER = "X-Scope-OrgID"


def policy(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == name]
    return found


def test_loki_is_multi_tenant_and_every_client_names_the_platforms_tenant() -> None:
    settings = values()
    tenant = settings["monitoring"]["lokiTenant"]
    assert settings["loki"]["loki"]["auth_enabled"] is True
    exporter = settings["opentelemetry-collector"]["alternateConfig"]["exporters"]["otlphttp/loki"]
    assert exporter["headers"] == {TENANT_HEADER: tenant}
    [source] = [s for s in settings["kube-prometheus-stack"]["grafana"]["additionalDataSources"] if s["type"] == "loki"]
    assert source["jsonData"]["httpHeaderName1"] == TENANT_HEADER
    assert source["secureJsonData"]["httpHeaderValue1"] == tenant
    controller = HealthSettings.model_validate(rendered_health_settings())
    assert controller.loki is not None and controller.loki.tenant == tenant


def test_grafana_admin_comes_from_a_secret_and_dashboards_only_from_platform_namespaces() -> None:
    settings = values()
    grafana = settings["kube-prometheus-stack"]["grafana"]
    assert grafana["admin"]["existingSecret"] == settings["grafanaAdmin"]["secretName"]
    assert "adminPassword" not in grafana
    # No namespaces named: the sidecar reads only Grafana's own, the release namespace with konduktor-core's dashboards.
    assert grafana["sidecar"]["dashboards"]["searchNamespace"] is None
    [secret] = [o for o in umbrella_objects() if o["kind"] == "Secret"]
    assert secret["metadata"]["name"] == settings["grafanaAdmin"]["secretName"]
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert {grafana["admin"]["userKey"], grafana["admin"]["passwordKey"]} == set(secret["data"])
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    off = umbrella_objects("--set", "grafanaAdmin.createSecret=false")
    assert not [o for o in off if o["kind"] == "Secret"]


def test_only_the_collector_grafana_and_the_controller_reach_loki() -> None:
    objects = umbrella_objects()
    loki = policy(objects, "loki-clients")
    assert loki["metadata"]["namespace"] == NAMESPACE
    assert loki["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "loki"}}
    assert loki["spec"]["policyTypes"] == ["Ingress"]
    clients, own = loki["spec"]["ingress"]
    assert clients["ports"] == [{"protocol": "TCP", "port": 3100}]
    # Every client runs in the release namespace beside Loki.
    assert clients["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "opentelemetry-collector"}}},
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "grafana"}}},
        {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "health-controller"}}},
    ]
    assert own == {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "loki"}}}]}
    # The controller's pods carry the label the policy admits.
    [deployment] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-health")]
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "health-controller"


def test_only_prometheus_reaches_the_controllers_metrics() -> None:
    objects = umbrella_objects()
    metrics = policy(objects, "konduktor-health-metrics")
    assert metrics["metadata"]["namespace"] == NAMESPACE
    [deployment] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-health")]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert metrics["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    [rule] = metrics["spec"]["ingress"]
    [port] = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert rule["ports"] == [{"protocol": "TCP", "port": port["name"]}]
    assert rule["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},
    ]
    assert not [o for o in umbrella_objects("--set", "networkPolicies.enabled=false") if o["kind"] == "NetworkPolicy"]


@pytest.mark.sim
def test_the_policies_and_the_secret_are_accepted_by_the_apiserver(sim: Sim) -> None:
    """Server-side dry run with strict field validation."""
    objects = [o for o in umbrella_objects() if o["kind"] in ("NetworkPolicy", "Secret")]
    sim.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for obj in objects:
        sim.kube.apply(obj, dry_run=True)

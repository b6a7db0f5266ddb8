"""The umbrella chart: pinned dependencies Helm accepts, values that make the pieces work together, and the checks
that can run without the upstream charts (which this machine cannot download): Helm's own lock check, Kueue's
chart and binary from the pinned Kueue module, the umbrella's own templates, and the value-key checker itself.

Not tested here, because it needs the downloaded upstream charts: the rendered size of the release against the
1 MiB Secret limit, and the upstream keys other than Kueue's (hack/check-values.py does that where the network
allows; see charts/konduktor/README.md).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from support import (
    CORE,
    NAMESPACE,
    UMBRELLA,
    copy_charts,
    helm,
    isolated_helm_env,
    render_umbrella,
    rendered_health_settings,
    umbrella_objects,
    values,
)

from konduktor.config.load import load_config
from konduktor.health.prometheus import HEALTH_FIELDS
from konduktor.health.settings import HealthSettings
from konduktor.helm.values import merge_values, umbrella_values
from konduktor.kube.documents import load_documents, load_generated
from konduktor.observability.metrics import DCGM_METRICS, KSM_LABELS_ALLOWLIST, KUBE_STATE_METRICS
from konduktor.quotas.render import KUEUE_CONFIG_API, kueue_manager_settings, render
from konduktor.tools.gobuild import module_dir
from konduktor.tools.toolbox import Toolbox
from konduktor.vocabulary import TEAM_LABEL

REPO_ROOT = Path(__file__).resolve().parents[2]

CHECK_VALUES = UMBRELLA / "hack" / "check-values.py"
OVERLAY_VALUES = sorted((REPO_ROOT / "overlays").glob("*/values.yaml"))
# The platform: these upstream charts and ours, nothing else.
COMPONENTS = {
    "gpu-operator",
    "network-operator",
    "kueue",
    "dcgm-exporter",
    "kube-prometheus-stack",
    "loki",
    "opentelemetry-collector",
    "konduktor-core",
}
EXACT_VERSION = re.compile(r"^v?\d+\.\d+\.\d+$")


def yaml_file(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text())


def dependencies() -> list[dict[str, Any]]:
    deps: list[dict[str, Any]] = yaml_file(UMBRELLA / "Chart.yaml")["dependencies"]
    return deps


def environments() -> list[tuple[str, dict[str, Any]]]:
    """The chart's default values, and each overlay's values file merged over them."""
    return [("default", values())] + [
        (path.parent.name, merge_values(values(), yaml_file(path))) for path in OVERLAY_VALUES
    ]


def kueue_manager_config() -> dict[str, Any]:
    text = values()["kueue"]["managerConfig"]["controllerManagerConfigYaml"]
    config: dict[str, Any] = YAML(typ="safe").load(text)
    return config


# --- Chart.yaml and Chart.lock ---------------------------------------------------------------------------------


def test_dependencies_are_pinned_exactly_and_each_can_be_switched_off() -> None:
    deps = dependencies()
    assert {d["name"] for d in deps} == COMPONENTS
    for dep in deps:
        name = dep.get("alias") or dep["name"]
        assert EXACT_VERSION.match(str(dep["version"])), f"{name}: {dep['version']} is a range, not a pin"
        assert dep["repository"].startswith(("https://", "oci://", "file://")), name
        assert dep["condition"] == f"{name}.enabled"
        assert isinstance(values()[name]["enabled"], bool), f"values.yaml must say whether {name} is on"
    [core] = [d for d in deps if d["name"] == "konduktor-core"]
    assert core["repository"] == "file://../konduktor-core"
    assert core["version"] == yaml_file(CORE / "Chart.yaml")["version"]


def repositories_file(path: Path) -> Path:
    """What `helm repo add` leaves for each HTTP repository of Chart.yaml; `dependency build` wants them known."""
    urls = sorted({d["repository"] for d in dependencies() if d["repository"].startswith("https://")})
    entries = [{"name": f"repo{index}", "url": url} for index, url in enumerate(urls)]
    path.parent.mkdir(parents=True, exist_ok=True)
    YAML().dump({"apiVersion": "", "repositories": entries}, path)
    return path


def dependency_build(chart: Path, home: Path) -> subprocess.CompletedProcess[str]:
    repositories = repositories_file(home / "repositories.yaml")
    return helm(
        "dependency", "build", str(chart), "--repository-config", str(repositories), env=isolated_helm_env(home)
    )


def test_helm_accepts_the_lock_and_only_the_download_can_fail(tmp_path: Path) -> None:
    """`helm dependency build` first checks Chart.lock's digest against Chart.yaml, then downloads. Without network
    it must fail at the download; with network it downloads the charts (into the copy, not the repository)."""
    result = dependency_build(copy_charts(tmp_path / "charts"), tmp_path / "helm")
    output = result.stdout + result.stderr
    assert "out of sync" not in output, output
    if result.returncode != 0:
        assert re.search(r"Unable to get an update|index\.yaml|no such host|dial tcp|failed to fetch", output), output
    else:
        assert len(list((tmp_path / "charts" / "konduktor" / "charts").glob("*.tgz"))) == len(COMPONENTS)


def test_helm_refuses_a_lock_that_no_longer_matches(tmp_path: Path) -> None:
    """The check above is Helm's digest check: a pin changed without updating Chart.lock is refused."""
    chart = copy_charts(tmp_path / "charts")
    text = (chart / "Chart.yaml").read_text()
    kueue = next(d for d in dependencies() if d["name"] == "kueue")
    (chart / "Chart.yaml").write_text(text.replace(f"version: {kueue['version']}", "version: 0.0.1", 1))
    result = dependency_build(chart, tmp_path / "helm")
    assert result.returncode != 0
    assert "out of sync" in result.stderr


def test_the_offline_kueue_is_the_pinned_one() -> None:
    """Kueue's chart and binary used below come from the Kueue module the sim builds; it must be the pinned one."""
    kueue = next(d for d in dependencies() if d["name"] == "kueue")
    assert Toolbox().tools["kueue"].version == f"v{kueue['version']}"


# --- hack/check-values.py --------------------------------------------------------------------------------------


def check_values(charts: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK_VALUES), str(charts), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_kueue_values_exist_in_the_pinned_kueue_chart(tmp_path: Path) -> None:
    charts = tmp_path / "charts"
    charts.mkdir()
    (charts / "kueue").symlink_to(module_dir(Toolbox().tools["kueue"]) / "charts" / "kueue")
    result = check_values(charts)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every key is known to kueue" in result.stdout
    assert "kueue: checked against" not in result.stdout  # the module's chart is the pinned version


def write_chart(directory: Path, metadata: dict[str, Any], chart_values: dict[str, Any], **files: str) -> None:
    directory.mkdir(parents=True)
    YAML().dump(metadata, directory / "Chart.yaml")
    YAML().dump(chart_values, directory / "values.yaml")
    for name, text in files.items():
        path = directory / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def package(source: Path, archive: Path) -> None:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname=source.name)
    shutil.rmtree(source)


def test_check_values_reports_exactly_the_keys_a_chart_does_not_have(tmp_path: Path) -> None:
    """A synthetic umbrella over three charts exercising each rule of the checker."""
    umbrella = tmp_path / "umbrella"
    deps = [
        {"name": "app", "version": "1.0.0", "repository": "https://charts.example", "condition": "app.enabled"},
        {"name": "other", "version": "2.0.0", "repository": "oci://charts.example", "condition": "other.enabled"},
        {"name": "absent", "version": "1.0.0", "repository": "https://charts.example", "condition": "absent.enabled"},
    ]
    umbrella_values = {
        "app": {
            "enabled": True,  # the umbrella's condition, not the chart's
            "image": {"repository": "x", "tag": "1"},  # tag: unknown
            "labels": {"team": "a"},  # under an empty map: free-form
            "config": {"any": {"depth": 1}},  # under a null: free-form
            "service": {"portt": 80},  # typo: unknown
            "extra": {"name": "x", "size": 1},  # name read by a template; size unknown
            "open": {"b": 1},  # a section the schema declares open
            "closed": {"b": 1},  # a section the schema does not: unknown
            "sub": {"replicas": 2, "replicaz": 2},  # subchart directory: replicaz unknown
            "aliased": {"x": 1, "y": 1},  # packaged subchart under its alias: y unknown
        },
        "other": {"enabled": False, "x": 1},
        "absent": {"anything": 1},
        "mine": {"whatever": 1},  # not a dependency: the umbrella's own key
    }
    write_chart(umbrella, {"apiVersion": "v2", "name": "umbrella", "version": "0.1.0", "dependencies": deps}, {})
    YAML().dump(umbrella_values, umbrella / "values.yaml")

    charts = tmp_path / "charts"
    app = charts / "app"
    write_chart(
        app,
        {
            "apiVersion": "v2",
            "name": "app",
            "version": "1.0.0",
            "dependencies": [{"name": "pkg", "version": "3.0.0", "alias": "aliased"}],
        },
        {
            "image": {"repository": "r"},
            "labels": {},
            "config": None,
            "service": {"port": 8080},
            "open": {"a": 1},
            "closed": {"a": 1},
        },
        **{
            "templates__cm.yaml": "name: {{ .Values.extra.name | quote }}",
            "values.schema.json": (
                '{"properties": {"open": {"type": "object", "additionalProperties": true},'
                ' "closed": {"type": "object", "additionalProperties": false}}}'
            ),
        },
    )
    write_chart(app / "charts" / "sub", {"apiVersion": "v2", "name": "sub", "version": "1.0.0"}, {"replicas": 1})
    write_chart(tmp_path / "pkg", {"apiVersion": "v2", "name": "pkg", "version": "3.0.0"}, {"x": 0})
    package(tmp_path / "pkg", app / "charts" / "pkg-3.0.0.tgz")
    write_chart(tmp_path / "other", {"apiVersion": "v2", "name": "other", "version": "2.0.1"}, {"x": 0})
    package(tmp_path / "other", charts / "other-2.0.1.tgz")

    result = check_values(charts, "--chart", str(umbrella))
    assert result.returncode == 1, result.stdout + result.stderr
    reported = sorted(re.findall(r": (\S+): not a value of the pinned chart", result.stdout))
    assert reported == [
        "app.aliased.y",
        "app.closed.b",
        "app.extra.size",
        "app.image.tag",
        "app.service.portt",
        "app.sub.replicaz",
    ]
    assert "absent: not checked" in result.stdout
    assert "other: checked against 2.0.1, but Chart.yaml pins 2.0.0" in result.stdout


# --- values that make the pieces work together -------------------------------------------------------------------


@pytest.mark.parametrize(("environment", "settings"), environments(), ids=[name for name, _ in environments()])
def test_one_node_feature_discovery_and_one_dcgm_exporter(environment: str, settings: dict[str, Any]) -> None:
    gpu_operator, network_operator = settings["gpu-operator"], settings["network-operator"]
    nfds = [
        gpu_operator["enabled"] and gpu_operator["nfd"]["enabled"],
        network_operator["enabled"] and network_operator["nfd"]["enabled"],
    ]
    exporters = [
        gpu_operator["enabled"] and gpu_operator["dcgmExporter"]["enabled"],
        settings["dcgm-exporter"]["enabled"],
    ]
    assert nfds.count(True) == 1, f"{environment}: NFD from GPU Operator, Network Operator: {nfds}"
    assert exporters.count(True) == 1, f"{environment}: DCGM exporter from GPU Operator, standalone: {exporters}"


# Where the operator installs the toolkit (EKS's node image brings its own: see overlays/eks/values.yaml).
OPERATOR_TOOLKIT = [(name, s) for name, s in environments() if s["gpu-operator"]["toolkit"].get("enabled", True)]


@pytest.mark.parametrize(("environment", "settings"), OPERATOR_TOOLKIT, ids=[name for name, _ in OPERATOR_TOOLKIT])
def test_no_container_gets_gpus_by_setting_nvidia_visible_devices(environment: str, settings: dict[str, Any]) -> None:
    """The toolkit the operator installs ignores the variable in unprivileged containers, and the device plugin
    hands GPUs over in a way that needs no variable (CDI, or volume mounts the toolkit accepts)."""
    gpu_operator = settings["gpu-operator"]
    toolkit = {e["name"]: e["value"] for e in gpu_operator["toolkit"]["env"]}
    assert toolkit["ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"] == "false"
    assert toolkit["ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS"] == "true"
    plugin = {e["name"]: e["value"] for e in gpu_operator.get("devicePlugin", {}).get("env", [])}
    strategy = plugin.get(
        "DEVICE_LIST_STRATEGY", "cdi-annotations,cdi-cri" if gpu_operator["cdi"]["enabled"] else "envvar"
    )
    assert "envvar" not in strategy.split(","), f"{environment}: the device plugin passes GPUs by {strategy}"


def test_kueue_configuration_is_v1beta2_and_manages_only_team_namespaces() -> None:
    config = kueue_manager_config()
    assert (config["apiVersion"], config["kind"]) == (KUEUE_CONFIG_API, "Configuration")
    assert config["managedJobsNamespaceSelector"] == {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}
    assert config["metrics"]["enableClusterQueueResources"] is True
    assert {"batch/job", "pod"} <= set(config["integrations"]["frameworks"])  # what SkyPilot and Jobs submit
    # The namespaces `konduktor-install render` creates for the teams are the ones the selector matches.
    objects = render(load_config(REPO_ROOT / "examples" / "config.yaml").config)
    team_namespaces = [o for o in objects if o["kind"] == "Namespace"]
    assert team_namespaces
    assert all(TEAM_LABEL in o["metadata"]["labels"] for o in team_namespaces)


def run_kueue(config: dict[str, Any], tmp_path: Path) -> str:
    """Kueue's own loading: strict decoding, defaulting and validation; it stops at the missing kubeconfig."""
    path = tmp_path / "kueue-config.yaml"
    YAML().dump(config, path)
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")}
    result = subprocess.run(
        [str(Toolbox().path("kueue")), "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=60,
    )
    assert result.returncode != 0  # never runs: there is no cluster
    return result.stdout + result.stderr


def test_kueue_accepts_the_configuration_with_what_a_config_adds(tmp_path: Path) -> None:
    """What `up` installs on a real cluster: the umbrella's Configuration with the example config's settings."""
    example = load_config(REPO_ROOT / "examples" / "config.yaml").config
    text = umbrella_values(example, values())["kueue"]["managerConfig"]["controllerManagerConfigYaml"]
    config = YAML(typ="safe").load(text)
    assert config["fairSharing"] == kueue_manager_settings(example)["fairSharing"]
    output = run_kueue(config, tmp_path)
    assert '"msg":"Initializing"' in output, output
    assert "Unable to load the configuration" not in output
    assert "Unable to validate the configuration" not in output


def test_kueue_refuses_an_unknown_configuration_field(tmp_path: Path) -> None:
    """The check above can fail: Kueue decodes strictly."""
    output = run_kueue({**kueue_manager_config(), "managedJobsNamespaceSelectr": {}}, tmp_path)
    assert "strict decoding error" in output


@pytest.mark.slow  # reads the renders with the pure-Python parser too
def test_the_charts_renders_read_the_same_with_libyaml_as_with_load_documents() -> None:
    """The tests read helm's output with `load_generated` (libyaml, YAML 1.1); it must read it as the YAML 1.2 reader
    does: the umbrella, konduktor-core with every workload and its monitoring objects on, and the pinned Kueue chart
    with the umbrella's values and KueueViz on."""
    umbrella = render_umbrella()
    every_part = ["fleetEvents.workers={west}", "serviceMonitor.enabled=true", "prometheusRule.enabled=true"]
    core = helm("template", "konduktor", str(CORE), "--namespace", NAMESPACE, *(f"--set={s}" for s in every_part))
    for result in (umbrella, core):
        assert result.returncode == 0, result.stderr
        assert load_generated(result.stdout) == load_documents(result.stdout)
    kueue = kueue_chart_output(enableKueueViz=True)
    assert load_generated(kueue) == load_documents(kueue)


def render_kueue_chart(**overrides: Any) -> list[dict[str, Any]]:
    """The pinned Kueue chart (from the Kueue module) with the umbrella's Kueue values, as the umbrella renders it;
    each set of overrides rendered once a test process (a copy each time)."""
    return copy.deepcopy(_rendered_kueue_chart(json.dumps(overrides, sort_keys=True)))


@functools.cache
def _rendered_kueue_chart(overrides: str) -> list[dict[str, Any]]:
    return load_generated(kueue_chart_output(**json.loads(overrides)))


def kueue_chart_output(**overrides: Any) -> str:
    """helm's output for the pinned Kueue chart with the umbrella's Kueue values and the overrides."""
    with tempfile.TemporaryDirectory(prefix="konduktor-kueue-chart-") as scratch:
        values_file = Path(scratch) / "kueue-values.yaml"
        YAML().dump({**values()["kueue"], **overrides}, values_file)
        chart = module_dir(Toolbox().tools["kueue"]) / "charts" / "kueue"
        result = helm("template", "konduktor", str(chart), "--namespace", NAMESPACE, "--values", str(values_file))
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_kueue_webhooks_only_intercept_team_namespaces() -> None:
    """Kueue's job and pod webhooks fail closed; with the selector, a Job or pod outside the team namespaces (a
    Helm hook in konduktor-system or monitoring) never waits for Kueue."""
    objects = render_kueue_chart()
    hooks = [
        hook
        for o in objects
        if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in o["webhooks"]
        if not any("kueue.x-k8s.io" in rule["apiGroups"] for rule in hook["rules"])
    ]
    names = {hook["name"] for hook in hooks}
    assert {"mjob.kb.io", "vjob.kb.io", "mpod.kb.io", "vpod.kb.io", "mdeployment.kb.io"} <= names
    for hook in hooks:
        assert hook["namespaceSelector"] == kueue_manager_config()["managedJobsNamespaceSelector"], hook["name"]
    assert any(o["kind"] == "ServiceMonitor" for o in objects)


def test_kueue_serves_the_visibility_api_and_team_members_may_read_their_own_queues() -> None:
    """`konduktor queue` and `why` read a LocalQueue's pending workloads from Kueue's visibility API: the umbrella
    turns it on, and the ClusterRole the quotas render binds to each team's groups aggregates read access to it."""
    objects = render_kueue_chart()
    [manager] = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("controller-manager")
    ]
    args = manager["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--feature-gates=VisibilityOnDemand=true,WorkloadPriorityClassDefaulting=true" in args
    assert {o["spec"]["group"] for o in objects if o["kind"] == "APIService"} == {"visibility.kueue.x-k8s.io"}

    team_roles = {
        o["roleRef"]["name"]
        for o in render(load_config(REPO_ROOT / "examples" / "config.yaml").config)
        if o["kind"] == "RoleBinding" and o["roleRef"]["kind"] == "ClusterRole"
    }
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    [aggregated] = [roles[name] for name in team_roles if name in roles]  # Kueue's batch user role
    [selector] = aggregated["aggregationRule"]["clusterRoleSelectors"]
    readers = [
        role
        for role in roles.values()
        if selector["matchLabels"].items() <= (role["metadata"].get("labels") or {}).items()
        for rule in role.get("rules", [])
        if "visibility.kueue.x-k8s.io" in rule["apiGroups"]
        and "localqueues/pendingworkloads" in rule["resources"]
        and "get" in rule["verbs"]
    ]
    assert readers
    # Every visibility rule is about LocalQueues or ClusterQueues; none lets a team read another's objects.
    assert not any("clusterqueues/pendingworkloads" in rule["resources"] for role in readers for rule in role["rules"])


def test_kueueviz_is_an_opt_in() -> None:
    assert values()["kueue"]["enableKueueViz"] is False
    assert not [o for o in render_kueue_chart() if "kueueviz" in o["metadata"]["name"]]
    opted_in = {o["kind"] for o in render_kueue_chart(enableKueueViz=True) if "kueueviz" in o["metadata"]["name"]}
    assert {"Deployment", "Service"} <= opted_in


@pytest.mark.parametrize("values_file", [None, *OVERLAY_VALUES], ids=lambda p: p.parent.name if p else "default")
def test_umbrella_templates_render_under_its_schema(values_file: Path | None) -> None:
    """Helm enforces the umbrella's values.schema.json on values.yaml and on each environment's values."""
    objects = umbrella_objects(*(["--values", str(values_file)] if values_file else []))
    # The subcharts' pre-install hooks run before any template, so the only namespace they can use is the release
    # namespace, which helm, `up` and Argo CD create first (test_umbrella_install.py). The one Namespace the chart
    # renders is konduktor-core's burn-in namespace, which no hook uses.
    namespaces = [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"]
    assert namespaces == ["konduktor-burnin"]
    hooks = [o for o in objects if "helm.sh/hook" in o["metadata"].get("annotations", {})]
    assert not [o for o in hooks if o["metadata"].get("namespace") in namespaces]
    assert any(o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-health") for o in objects)


def test_schema_refuses_a_misspelt_component() -> None:
    result = render_umbrella("--set", "gpu-operater.enabled=false")
    assert result.returncode != 0
    assert "gpu-operater" in result.stderr


def test_prometheus_may_read_kueue_metrics() -> None:
    """Kueue's metrics need authorization: the umbrella binds the reader role Kueue's chart defines to the
    ServiceAccount kube-prometheus-stack gives Prometheus."""
    [binding] = [o for o in umbrella_objects() if o["metadata"]["name"].endswith("kueue-metrics-reader")]
    reader_roles = {o["metadata"]["name"] for o in render_kueue_chart() if o["kind"] == "ClusterRole"}
    assert binding["roleRef"]["name"] in reader_roles
    stack = values()["kube-prometheus-stack"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": f"{stack['fullnameOverride']}-prometheus",  # kube-prometheus-stack's name for it
            "namespace": NAMESPACE,
        }
    ]


def test_prometheus_selects_every_monitor_and_rule() -> None:
    spec = values()["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]
    for kind in ("serviceMonitor", "podMonitor", "rule", "probe", "scrapeConfig"):
        assert spec[f"{kind}SelectorNilUsesHelmValues"] is False, kind


def test_the_umbrella_turns_on_the_core_charts_monitor_and_alert_rules() -> None:
    """konduktor-core leaves the Prometheus operator's kinds off; the umbrella, which brings it, turns them on."""
    monitoring = [o for o in umbrella_objects() if o["apiVersion"] == "monitoring.coreos.com/v1"]
    assert sorted(o["kind"] for o in monitoring) == ["PrometheusRule", "ServiceMonitor"]


@pytest.mark.parametrize("values_file", [None, *OVERLAY_VALUES], ids=lambda p: p.parent.name if p else "default")
def test_monitoring_stack_and_its_clients_are_in_the_release_namespace(values_file: Path | None) -> None:
    """No chart is moved out of the release namespace (a namespaceOverride would send its pre-install hooks to a
    namespace that does not exist yet), so the clients reach each service by its short name."""

    def overrides(tree: Any, path: str = "") -> list[str]:
        if not isinstance(tree, dict):
            return []
        found = [f"{path}namespaceOverride" for key in tree if key == "namespaceOverride"]
        return found + [name for key, value in tree.items() for name in overrides(value, f"{path}{key}.")]

    settings = merge_values(values(), yaml_file(values_file)) if values_file else values()
    assert overrides(settings) == []
    controller = rendered_health_settings(values_file)
    stack = settings["kube-prometheus-stack"]
    loki = f"http://{settings['loki']['fullnameOverride']}:3100"
    assert controller["loki"]["url"] == loki
    assert settings["opentelemetry-collector"]["alternateConfig"]["exporters"]["otlphttp/loki"]["endpoint"] == (
        f"{loki}/otlp"
    )
    assert [source["url"] for source in stack["grafana"]["additionalDataSources"]] == [loki]
    # The Prometheus operator names the Service of its Prometheus instances `prometheus-operated`.
    assert controller["prometheus"]["url"] == "http://prometheus-operated:9090"


def test_health_controller_reads_the_kernel_logs_the_collector_ships() -> None:
    """The collector labels kernel lines; Loki indexes those labels; the controller's query selects by them."""
    settings = values()
    controller = HealthSettings.model_validate(rendered_health_settings())
    assert controller.loki is not None
    collector = settings["opentelemetry-collector"]["alternateConfig"]
    kernel_pipeline = collector["service"]["pipelines"]["logs/kernel"]
    [receiver] = kernel_pipeline["receivers"]
    resource = collector["receivers"][receiver]["resource"]
    assert resource["k8s.node.name"] == "${env:OTEL_K8S_NODE_NAME}"
    # Loki turns indexed resource attributes into labels, dots becoming underscores.
    [indexed] = settings["loki"]["loki"]["limits_config"]["otlp_config"]["resource_attributes"]["attributes_config"]
    assert indexed["action"] == "index_label"
    labels = {attribute.replace(".", "_"): attribute for attribute in indexed["attributes"]}
    assert controller.loki.node_label in labels
    assert labels[controller.loki.node_label] == "k8s.node.name"
    selector = dict(re.findall(r'(\w+)="([^"]*)"', controller.loki.query.split("}")[0]))
    assert selector, controller.loki.query
    for label, value in selector.items():
        assert label in labels, f"{label} is not an indexed label"
        assert resource[labels[label]] == value


def test_exporters_publish_what_the_dashboards_and_the_controller_read() -> None:
    settings = values()
    csv = settings["gpu-operator"]["dcgmExporter"]["config"]["data"]
    fields = {line.split(",")[0].strip() for line in csv.splitlines() if line.strip() and not line.startswith("#")}
    missing = ({metric.name for metric in DCGM_METRICS} | set(HEALTH_FIELDS)) - fields
    assert not missing, f"not in the DCGM exporter's counters: {sorted(missing)}"
    allowlist = set(settings["kube-prometheus-stack"]["kube-state-metrics"]["metricLabelsAllowlist"])
    prefix = KSM_LABELS_ALLOWLIST.format("")
    needed = {m.requires.removeprefix(prefix) for m in KUBE_STATE_METRICS if m.requires.startswith(prefix)}
    assert needed and needed <= allowlist


def test_images_list_is_pinned_and_names_the_images_the_values_choose() -> None:
    lines = [line.strip() for line in (UMBRELLA / "images.txt").read_text().splitlines()]
    images = [line for line in lines if line and not line.startswith("#")]
    assert len(images) == len(set(images))
    for image in images:
        name, _, tag = image.split("@")[0].rpartition(":")
        assert name and tag and tag != "latest" and "/" in name, image
    core = yaml_file(CORE / "Chart.yaml")
    core_values = yaml_file(CORE / "values.yaml")
    kueue = next(d for d in dependencies() if d["name"] == "kueue")
    repository = values()["opentelemetry-collector"]["image"]["repository"]
    assert f"{core_values['controller']['image']['repository']}:{core['appVersion']}" in images
    assert f"registry.k8s.io/kueue/kueue:v{kueue['version']}" in images
    assert any(image.startswith(f"{repository}:") for image in images)


def test_readme_is_generated_from_values() -> None:
    result = subprocess.run(
        [str(Toolbox().path("helm-docs")), "--dry-run", "--chart-search-root", str(UMBRELLA)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (UMBRELLA / "README.md").read_text().strip(), "run scripts/sync-chart-files"

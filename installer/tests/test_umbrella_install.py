"""The umbrella's first install on a fresh cluster, with the real helm, on the simulated cluster.

The upstream charts cannot be downloaded here, so `charts/konduktor` (its real templates, values and schema) is
assembled with stand-ins from `data/umbrella/`: charts of the same names that copy what decides install order in
the pinned upstream versions, the hooks (kube-prometheus-stack's admission-webhook ServiceAccount, Role and Job,
pre-install, in its `namespaceOverride`; the GPU and Network Operators' CRD hooks in the release namespace) and
where each chart puts its objects. The install is the README's command, `--wait` included, so the node exporter's
hostNetwork DaemonSet must become Ready on every fake node. konduktor-core is off: it has no hooks and is
installed on the simulated cluster by `up` (test_up.py); the sim runs its own Kueue, so Kueue's stand-in is empty.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, Sim
from ruamel.yaml import YAML

from konduktor.config.load import load_config
from konduktor.helm.release import CHARTS, install_or_upgrade, release_namespace
from konduktor.helm.values import merge_values, umbrella_values
from konduktor.kube.documents import load_documents
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until

STAND_INS = Path(__file__).parent / "data" / "umbrella"
RELEASE = "konduktor"
# A namespace of its own, absent before the test, as the release namespace is on a fresh cluster.
NAMESPACE = "umbrella-install"
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
# The bare-metal shape (Network Operator on) has the most pre-install hooks.
SETTINGS = ("--set", "konduktor-core.enabled=false", "--set", "network-operator.enabled=true")


def yaml_file(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text())


def assemble(destination: Path, home: Path) -> Path:
    """charts/konduktor with each upstream dependency replaced by its stand-in, dependencies built."""
    chart = destination / "konduktor"
    shutil.copytree(CHARTS / "konduktor", chart, ignore=shutil.ignore_patterns("charts", "Chart.lock"))
    yaml = YAML()
    metadata = yaml.load(chart / "Chart.yaml")
    for dependency in metadata["dependencies"]:
        if dependency["name"] == "konduktor-core":
            dependency["repository"] = f"file://{CHARTS / 'konduktor-core'}"
            continue
        stand_in = STAND_INS / dependency["name"]
        assert stand_in.is_dir(), f"{dependency['name']} has no stand-in in {STAND_INS}: audit its hooks and add one"
        dependency["repository"] = f"file://{stand_in}"
        dependency["version"] = yaml_file(stand_in / "Chart.yaml")["version"]
    yaml.dump(metadata, chart / "Chart.yaml")
    built = helm("dependency", "build", str(chart), home=home)
    assert built.returncode == 0, built.stderr
    return chart


def helm(*args: str, home: Path, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The pinned helm with its own cache, config and data."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    command = [str(Toolbox().path("helm")), *args]
    if kubeconfig is not None:
        command += ["--kubeconfig", str(kubeconfig)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)


class Umbrella:
    def __init__(self, chart: Path, home: Path, sim: Sim) -> None:
        self.chart, self.home, self.sim = chart, home, sim

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return helm(*args, home=self.home, kubeconfig=self.sim.kubeconfig)

    def install(self) -> None:
        """The README's command."""
        result = self.helm(
            "upgrade", "--install", RELEASE, str(self.chart), "-n", NAMESPACE, "--create-namespace", "--wait",
            "--timeout", "4m", *SETTINGS,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr

    def uninstall(self) -> None:
        result = self.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait")
        assert result.returncode == 0, result.stderr

    def status(self) -> dict[str, Any]:
        result = self.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json")
        assert result.returncode == 0, result.stderr
        status: dict[str, Any] = json.loads(result.stdout)
        return status

    def objects(self, what: str) -> list[dict[str, Any]]:
        """`helm get manifest` or `helm get hooks`, as objects."""
        result = self.helm("get", what, RELEASE, "-n", NAMESPACE)
        assert result.returncode == 0, result.stderr
        return [o for o in load_documents(result.stdout) if o]

    def generations(self) -> dict[tuple[str, str], int]:
        return {
            (kind, o["metadata"]["name"]): o["metadata"]["generation"]
            for kind in WORKLOADS
            for o in self.sim.kube.list("apps/v1", kind, NAMESPACE)
        }


@pytest.fixture
def umbrella(sim: Sim, tmp_path: Path) -> Iterator[Umbrella]:
    assert sim.kube.get("v1", "Namespace", NAMESPACE) is None, "the release namespace must not exist beforehand"
    chart = assemble(tmp_path / "charts", tmp_path / "helm")
    installed = Umbrella(chart, tmp_path / "helm", sim)
    try:
        yield installed
    finally:
        installed.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait")
        sim.kube.delete("v1", "Namespace", NAMESPACE)
        wait_until(f"namespace {NAMESPACE} to go", lambda: sim.kube.get("v1", "Namespace", NAMESPACE) is None)


def hooks_ran(status: dict[str, Any], names: set[str]) -> None:
    """Each named hook ran in this revision's install or upgrade, and succeeded."""
    phases = {hook["name"]: hook.get("last_run", {}).get("phase") for hook in status.get("hooks", [])}
    assert {name: phases.get(name) for name in names} == dict.fromkeys(names, "Succeeded"), phases


@pytest.mark.sim
@pytest.mark.slow  # the whole umbrella with helm --wait, four times
@pytest.mark.timeout(2400)  # install, upgrade, uninstall and install again, each `--wait` bounded at 600 s
def test_the_first_install_upgrade_and_reinstall_succeed_on_a_fresh_cluster(umbrella: Umbrella, sim: Sim) -> None:
    umbrella.install()

    status = umbrella.status()
    assert status["info"]["status"] == "deployed"
    hooks_ran(
        status,
        {
            "kube-prometheus-stack-admission-create",
            "kube-prometheus-stack-admission-patch",
            "network-operator-keep-ncp",
            "network-operator-upgrade-crd",
        },
    )
    # Every namespaced object, hooks included, is in the namespace helm created before the first hook; the
    # release owns no Namespace that would have to exist before its own hooks.
    hooks, manifest = umbrella.objects("hooks"), umbrella.objects("manifest")
    assert not [o for o in manifest if o["kind"] == "Namespace"]
    for obj in [*hooks, *manifest]:
        assert obj["metadata"].get("namespace", NAMESPACE) == NAMESPACE, (obj["kind"], obj["metadata"])
    # --wait returned, so every DaemonSet is Ready on every node, the hostNetwork node exporter included.
    nodes = len(sim.kube.list("v1", "Node"))
    daemonsets = sim.kube.list("apps/v1", "DaemonSet", NAMESPACE)
    assert {d["metadata"]["name"] for d in daemonsets} == {
        f"{RELEASE}-prometheus-node-exporter",
        f"{RELEASE}-opentelemetry-collector-agent",
    }
    assert all(d["status"]["numberReady"] == nodes for d in daemonsets), [d["status"] for d in daemonsets]

    # An upgrade with nothing changed runs the pre-upgrade hooks (the GPU Operator's CRD upgrade among them) and
    # leaves every workload as it was.
    before = umbrella.generations()
    umbrella.install()
    status = umbrella.status()
    assert status["version"] == 2
    hooks_ran(status, {"gpu-operator-upgrade-crd", "kube-prometheus-stack-admission-create"})
    assert umbrella.generations() == before

    # Uninstall, then install again: the same order on a cluster where the release namespace remains.
    umbrella.uninstall()
    assert not sim.kube.list("apps/v1", "Deployment", NAMESPACE)
    umbrella.install()
    assert umbrella.status()["version"] == 1
    assert umbrella.generations().keys() == before.keys()


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.timeout(1800)  # the install `up` makes and the fixture's uninstall, each `--wait` bounded at 600 s
def test_up_installs_the_umbrella_the_same_way(umbrella: Umbrella, sim: Sim) -> None:
    """`konduktor-install up --kubeconfig` applies the release namespace, then installs the umbrella through
    `install_or_upgrade` (pyhelm3, the pinned helm, --create-namespace, --wait) with the config's values; its other
    steps run in test_up.py. Here that install, and its re-run, with the stand-ins."""
    config = load_config(EXAMPLE).config
    chart_values = yaml_file(umbrella.chart / "values.yaml")
    values = merge_values(
        {"konduktor-core": {"enabled": False}, "network-operator": {"enabled": True}},
        umbrella_values(config, chart_values),
    )
    sim.kube.apply(release_namespace(NAMESPACE))
    first = install_or_upgrade(sim.kubeconfig, umbrella.chart, RELEASE, NAMESPACE, values, wait=True)
    assert (first.revision, first.status) == (1, "deployed")
    before = umbrella.generations()
    again = install_or_upgrade(sim.kubeconfig, umbrella.chart, RELEASE, NAMESPACE, values, wait=True)
    assert (again.revision, again.status) == (2, "deployed")
    assert umbrella.generations() == before
    hooks_ran(umbrella.status(), {"gpu-operator-upgrade-crd", "network-operator-keep-ncp"})


def test_argo_cd_renders_every_hook_into_the_destination_namespace(tmp_path: Path) -> None:
    """Argo CD renders the chart with `helm template` and runs its Helm hooks as PreSync/PostSync hooks in the
    application's destination namespace, which `CreateNamespace=true` creates before them. So no object, hook or
    not, may name another namespace, and the chart may bring no Namespace of its own (it would be synced after the
    PreSync hooks that need it)."""
    chart = assemble(tmp_path / "charts", tmp_path / "helm")
    result = helm("template", RELEASE, str(chart), "-n", NAMESPACE, "--include-crds", *SETTINGS, home=tmp_path / "helm")
    assert result.returncode == 0, result.stderr
    objects = [o for o in load_documents(result.stdout) if o]
    hooks = [o for o in objects if "helm.sh/hook" in o["metadata"].get("annotations", {})]
    assert {h["metadata"]["name"] for h in hooks if h["kind"] == "Job"} >= {
        "kube-prometheus-stack-admission-create",
        "network-operator-upgrade-crd",
        "gpu-operator-upgrade-crd",
    }
    assert not [o for o in objects if o["kind"] == "Namespace"]
    assert {o["metadata"]["namespace"] for o in objects if "namespace" in o["metadata"]} == {NAMESPACE}

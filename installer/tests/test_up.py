"""`konduktor-install up` on the simulated cluster: one command from config to working queues and controller."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, Sim
from sim_fixture import release_nodes

from konduktor.burnin.record import record_of
from konduktor.cli.main import main
from konduktor.health.settings import HealthSettings, load_settings
from konduktor.helm.release import NAMESPACE, RELEASE, current
from konduktor.kube.client import ApiError, Kube
from konduktor.paths import state_dir
from konduktor.queueing.cluster import published_capacity
from konduktor.quotas.sync import crd_losses
from konduktor.sim.gpus import FAULTS_ANNOTATION
from konduktor.sim.workloads import gpu_job
from konduktor.vocabulary import (
    BURNIN_NAMESPACE,
    BURNIN_RESULT,
    HEALTH_TAINT_KEY,
    HELM_NAMESPACE,
    HELM_RELEASE,
    KUEUE_API,
)
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim

NODES = [f"gpu-h100-{i:04d}" for i in range(4)]
HOLD = "pod-complete.stage.kwok.x-k8s.io/delay"  # kwok keeps such a pod Running this long


class Installed:
    """The example's platform as `up` installs it on the session's cluster. A test that needs it calls `ensure()`,
    which runs `up` only when no earlier test of this module left it installed (none yet, or one removed or
    changed it and said so with `changed()`): a test does not reinstall the platform only for the tests after it."""

    def __init__(self, sim: Sim) -> None:
        self.sim, self.current = sim, False

    def ensure(self) -> None:
        if not self.current:
            assert main(["up", str(EXAMPLE), "--sim", self.sim.cluster.name]) == 0
            self.current = True

    def made(self) -> None:
        """The test itself just ran the example's `up`."""
        self.current = True

    def changed(self) -> None:
        self.current = False


@pytest.fixture(scope="module")
def installed(sim: Sim) -> Installed:
    return Installed(sim)


def test_up_installs_applies_and_verifies_then_changes_nothing(
    sim: Sim, installed: Installed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    release_nodes(sim.kube, NODES)  # no verdict recorded on them: `up` burns every one in
    assert main(["up", str(EXAMPLE), "--sim", sim.cluster.name]) == 0
    out, err = capsys.readouterr()
    assert "konduktor-core 0.1.0 revision" in out  # the report is data, on stdout; progress on stderr
    assert "konduktor-core 0.1.0 revision" not in err and "install: helm upgrade --install" in err
    for team in ("team-a", "team-b"):
        queue = sim.kube.get(KUEUE_API, "ClusterQueue", team)
        assert queue is not None
        assert any(c["type"] == "Active" and c["status"] == "True" for c in queue["status"]["conditions"])
    deployments = sim.kube.list(
        "apps/v1", "Deployment", "konduktor-system", label_selector="app.kubernetes.io/part-of=konduktor"
    )
    components = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in deployments}
    assert components == {"health-controller", "capacity-publisher"}
    assert all(d["status"]["availableReplicas"] == 1 for d in deployments)
    # What team members read in `konduktor why`, published by `up` at once, then by the publisher.
    assert all(published_capacity(sim.kube, team) is not None for team in ("team-a", "team-b"))
    namespace = sim.kube.get("v1", "Namespace", "konduktor-system")
    assert namespace is not None  # ready for privileged node agents before helm ran
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert re.search(r"burn-in \S+: 4 PASS, 0 WARN, 0 FAIL, 0 ERROR, 0 SKIPPED", err)  # quick, on every GPU node

    # The policies enforce from the first install: a GPU pod that bypasses the queues is refused.
    spec = gpu_job("bypass", "default", gpus=1, queue=None)["spec"]["template"]["spec"]
    bypass = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bypass", "namespace": "default"}, "spec": spec}
    wait_until("the policies to refuse the bypass", lambda: refusal(sim.kube, bypass) is not None, timeout=60)
    refused = refusal(sim.kube, bypass)
    assert refused is not None and refused.status == 403
    assert "konduktor-gpu-in-team-namespaces" in refused.message
    assert main(["up", str(EXAMPLE), "--sim", sim.cluster.name]) == 0  # safe to re-run
    out = capsys.readouterr().out
    assert "0 quota objects changed" in out
    assert re.search(r"burn-in \S+: 0 node\(s\) burned in, 4 skipped", out)  # each node has its verdict already
    installed.made()


def test_up_gives_the_health_controller_the_settings_of_the_configs_health_section(
    sim: Sim, installed: Installed, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    installed.changed()
    example = tmp_path / "example.yaml"  # the example without its burn-in, which this test does not need
    example.write_text(EXAMPLE.read_text(encoding="utf-8").replace("level: quick ", "level: none  "), encoding="utf-8")
    config = tmp_path / "config.yaml"
    health = "health:\n  affectedWork: {unusable: drain}\n  breaker: {maxNodes: 3}\n"
    config.write_text(example.read_text(encoding="utf-8") + health, encoding="utf-8")
    try:
        assert main(["up", str(config), "--sim", sim.cluster.name]) == 0
        settings = installed_health_settings(sim.kube, tmp_path / "health.yaml")
        assert (settings.affected_work.unusable, settings.breaker.max_nodes) == ("drain", 3)
        assert settings.affected_work.degraded == "drain" and not settings.dry_run  # the sim values, left alone
        # The sim's own controller was restarted with them.
        running = sim.cluster.platform.dir("health-controller") / "mounts" / "0" / "health.yaml"
        assert load_settings(running).breaker.max_nodes == 3
    finally:
        assert main(["up", str(example), "--sim", sim.cluster.name]) == 0  # the example's, for the tests that follow
    assert installed_health_settings(sim.kube, tmp_path / "health.yaml").breaker.max_nodes == 20
    installed.made()


def installed_health_settings(kube: Kube, path: Path) -> HealthSettings:
    """The settings the installed controller would load, from its ConfigMap."""
    [settings_map] = [c for c in kube.list("v1", "ConfigMap", NAMESPACE) if "health.yaml" in c.get("data", {})]
    path.write_text(settings_map["data"]["health.yaml"], encoding="utf-8")
    return load_settings(path)


def test_up_warn_first_admits_and_reports_what_the_policies_would_refuse(
    sim: Sim, installed: Installed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Adopting a cluster that already runs workloads: warn-first admits a violation, `up` reports it (a
    controller-owned pod included), and the default enforces again."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    installed.changed()
    config = tmp_path / "config.yaml"  # the example without its burn-in, which this test does not need
    config.write_text(EXAMPLE.read_text().replace("level: quick ", "level: none  "))
    warn_first = tmp_path / "warn-first.yaml"
    warn_first.write_text("policies:\n  validationActions: [Warn, Audit]\n")
    spec = gpu_job("bypass", "default", gpus=1, queue=None)["spec"]["template"]["spec"]
    bypass = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bypass", "namespace": "default"}, "spec": spec}
    # A ReplicaSet's pod in a team namespace tolerating the health taint: the Pod is the ReplicaSet controller's.
    tolerating = gpu_job("tolerating", "team-a", gpus=1)["spec"]["template"]
    cpu = {"cpu": "100m", "memory": "64Mi"}
    tolerating["spec"]["containers"][0]["resources"] = {"requests": cpu, "limits": cpu}
    tolerating["spec"]["tolerations"] = [{"key": HEALTH_TAINT_KEY, "operator": "Exists"}]
    tolerating["metadata"]["labels"] = {"app": "tolerating"}
    tolerating["spec"]["restartPolicy"] = "Always"
    replica_set = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "tolerating", "namespace": "team-a"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "tolerating"}}, "template": tolerating},
    }
    try:
        assert main(["up", str(config), "--sim", sim.cluster.name, "-f", str(warn_first)]) == 0
        capsys.readouterr()
        wait_until("warn-first to admit the bypass", lambda: admitted(sim.kube, bypass), timeout=60)
        sim.kube.create(replica_set)
        wait_until(
            "the ReplicaSet's pod",
            lambda: bool(sim.kube.list("v1", "Pod", "team-a", label_selector="app=tolerating")),
            timeout=60,
        )
        assert main(["up", str(config), "--sim", sim.cluster.name, "-f", str(warn_first)]) == 0
        out, err = capsys.readouterr()
        assert "policy: Pod default/bypass:" in out and "konduktor-gpu-in-team-namespaces" in out
        assert re.search(r"policy: Pod team-a/tolerating-\S+: .*konduktor-gpu-health-toleration", out)
        assert re.search(r"up: \d+ existing workload\(s\) break the admission policies", err)
    finally:
        sim.kube.delete("apps/v1", "ReplicaSet", "tolerating", "team-a")
        sim.kube.delete("v1", "Pod", "bypass", "default")
        assert main(["up", str(config), "--sim", sim.cluster.name]) == 0  # enforcing again
    wait_until("the policies to refuse again", lambda: refusal(sim.kube, bypass) is not None, timeout=60)
    installed.made()


def refusal(kube: Kube, obj: dict[str, Any]) -> ApiError | None:
    """Why the API server refuses a dry-run create of `obj`, or None when it admits it."""
    try:
        kube.dry_run_create(obj)
    except ApiError as problem:
        return problem
    return None


def admitted(kube: Kube, obj: dict[str, Any]) -> bool:
    """Creates `obj` unless the API server refuses it (as enforcing policies do until warn-first is in force)."""
    try:
        kube.create(obj)
    except ApiError:
        return False
    return True


def test_up_burns_in_the_gpu_nodes_and_quarantines_one_that_fails(
    sim: Sim, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    bad = "gpu-h100-0002"
    sim.kube.patch("v1", "Node", bad, {"metadata": {"annotations": {FAULTS_ANNOTATION: "4=missing"}}})
    try:
        # Every node PASSed the first test's burn-in, and none changed since: only `all` burns them in again.
        assert main(["up", str(EXAMPLE), "--sim", sim.cluster.name, "--burnin", "all"]) == 1
        out, err = capsys.readouterr()
        assert f"burn-in: {bad} FAIL (quarantined): nvidia-smi lists 9 GPUs, the node advertises 10" in out
        assert "up: the platform is installed, but burn-in" in err
        for node in sim.kube.list("v1", "Node", label_selector="type=kwok"):
            tainted = any(t["key"] == HEALTH_TAINT_KEY for t in node["spec"].get("taints", []))
            assert tainted == (node["metadata"]["name"] == bad)
    finally:
        release_nodes(sim.kube, [bad])


def test_up_again_burns_in_only_new_nodes_and_skips_those_whose_gpus_are_in_use(
    sim: Sim, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Re-running `up` on a cluster in use: a node whose GPUs a running pod holds is SKIPPED with that pod named
    (not a failure: exit 0), a node never burned in is burned in, the others keep their recorded verdict; `nodes -o
    wide` shows it."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    busy, new, holder = "gpu-h100-0001", "gpu-h100-0003", "holds-one-gpu"
    # A GPU pod outside the teams' queues: only the policies' GPU system namespaces may run one.
    gpu = {"nvidia.com/gpu": "1"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": holder, "namespace": "kube-system", "annotations": {HOLD: "1h"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": busy},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": gpu, "limits": gpu}}],
        },
    }
    sim.kube.apply(pod)
    for name in (busy, new):  # as if just added to the cluster
        sim.kube.patch("v1", "Node", name, {"metadata": {"annotations": {BURNIN_RESULT: None}}})
    try:
        wait_until("the pod to run", lambda: pod_phase(sim.kube, holder) == "Running", timeout=60)
        before = {n: record_of(node(sim.kube, n)) for n in NODES}
        fresh = [n for n in NODES if before[n] is None and n != busy]  # the earlier tests' leave some judged
        assert main(["up", str(EXAMPLE), "--sim", sim.cluster.name]) == 0
        out, err = capsys.readouterr()
        assert "burn-in" in err and "found nodes that are not fit" not in err
        assert f"  {busy} SKIPPED: busy: GPUs held by 1 running pod(s): kube-system/{holder} (1 GPUs)" in out
        (summary,) = [line for line in out.splitlines() if re.match(r"burn-in \S+: \d+ node", line)]
        assert summary.endswith(f": {len(fresh)} node(s) burned in, {len(NODES) - len(fresh)} skipped")
        after = {n: record_of(node(sim.kube, n)) for n in NODES}
        assert after[busy] is None and all(after[n] == before[n] for n in NODES if before[n] is not None)
        assert all((after[n].verdict, after[n].level) == ("PASS", "quick") for n in fresh)  # type: ignore[union-attr]
        assert main(["nodes", "-o", "wide", "--sim", sim.cluster.name]) == 0
        table = capsys.readouterr().out.splitlines()
        column = table[0].split().index("BURN-IN")
        rows = {line.split()[0]: line.split() for line in table[1:] if line.startswith("gpu-")}
        assert [rows[n][column] for n in NODES if n != busy] == ["PASS"] * 3, table
        assert rows[busy][column] == "-"
    finally:
        sim.kube.delete("v1", "Pod", holder, "kube-system")
        wait_until("the pod to be gone", lambda: sim.kube.get("v1", "Pod", holder, "kube-system") is None, 60)


def node(kube: Kube, name: str) -> dict[str, Any]:
    found = kube.get("v1", "Node", name)
    assert found is not None
    return found


def pod_phase(kube: Kube, name: str) -> str | None:
    found = kube.get("v1", "Pod", name, "kube-system")
    return None if found is None else found.get("status", {}).get("phase")


def test_a_bad_config_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    bad = tmp_path / "config.yaml"
    bad.write_text(EXAMPLE.read_text().replace("gpusPerNode: 10", "gpusPerNode: ten"))
    assert main(["up", str(bad), "--sim", "never-started"]) == 2
    err = capsys.readouterr().err
    assert "config.yaml:" in err and "gpusPerNode" in err and "Traceback" not in err
    assert not (state_dir() / "never-started").exists()


def test_preflight_failure_stops_up_before_any_change(
    sim: Sim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config promising GPUs the cluster does not have: exit 3, and no new quota object exists."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    text = EXAMPLE.read_text().replace("name: gpu-lab", "name: wishful-lab").replace("nodes: 4", "nodes: 6")
    wishful = tmp_path / "config.yaml"
    wishful.write_text(text)
    assert main(["up", str(wishful), "--kubeconfig", str(sim.given_kubeconfig)]) == 3
    err = capsys.readouterr().err
    assert "preflight FAIL" in err and "nothing was changed" in err
    assert not sim.kube.list(KUEUE_API, "ClusterQueue", label_selector="konduktor.ai/config=wishful-lab")


def ssh_inventory_config(directory: Path, ssh: str) -> Path:
    """The example under another cluster name, with GPU hosts to check over SSH."""
    path = directory / "config.yaml"
    text = EXAMPLE.read_text().replace("name: gpu-lab", "name: ssh-lab")
    path.write_text(text + f"preflight:\n  nodes:\n    ssh: {ssh}\n")
    return path


def test_an_unreachable_gpu_host_stops_up_before_any_change(
    sim: Sim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cluster checks pass, the node checks cannot reach the host: exit 3, no release or quota change."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    spec = sim.cluster.spec()  # the config's nodes: earlier tests on the shared cluster change node status
    assert spec is not None
    sim.cluster.apply_nodes(sim.kube, spec)
    config = ssh_inventory_config(tmp_path, "{user: konduktor, port: 1, hosts: [127.0.0.1]}")  # 1: nothing listens
    before = current(sim.kubeconfig, RELEASE, NAMESPACE)
    assert main(["up", str(config), "--kubeconfig", str(sim.given_kubeconfig)]) == 3
    err = capsys.readouterr().err
    assert "preflight FAIL host-reachable (127.0.0.1): cannot run commands on the host" in err
    assert "port 1" in err and "nothing was changed" in err and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("preflight FAIL")] == [
        "preflight FAIL host-reachable (127.0.0.1): cannot run commands on the host"
    ]
    after = current(sim.kubeconfig, RELEASE, NAMESPACE)
    assert (after.revision if after else None) == (before.revision if before else None)
    assert not sim.kube.list(KUEUE_API, "ClusterQueue", label_selector="konduktor.ai/config=ssh-lab")


def test_preflight_pods_without_a_result_stop_up_before_any_change(
    sim: Sim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """preflight.nodes.pod: a Job per GPU node; the fake nodes' pods print nothing, so every node FAILs with that
    reason: exit 3, no release or quota change."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    spec = sim.cluster.spec()
    assert spec is not None
    sim.cluster.apply_nodes(sim.kube, spec)
    config = tmp_path / "config.yaml"
    # The chart's burn-in namespace: once its policies enforce, only the preflight service account there may
    # tolerate the health taint, as these pods do.
    namespace = BURNIN_NAMESPACE
    preflight_jobs = "app.kubernetes.io/component=node-preflight"
    text = EXAMPLE.read_text().replace("name: gpu-lab", "name: pod-lab")
    config.write_text(text + f"preflight:\n  nodes:\n    pod: {{namespace: {namespace}}}\n")
    before = current(sim.kubeconfig, RELEASE, NAMESPACE)
    try:
        assert main(["up", str(config), "--kubeconfig", str(sim.given_kubeconfig)]) == 3
        err = capsys.readouterr().err
        assert [line for line in err.splitlines() if line.startswith("preflight FAIL")] == [
            f"preflight FAIL host-reachable (gpu-h100-{i:04d}): no result from the preflight pod" for i in range(4)
        ]
        assert "the API served no log" in err and "nothing was changed" in err and "Traceback" not in err
        assert len(sim.kube.list("batch/v1", "Job", namespace, label_selector=preflight_jobs)) == 4
    finally:
        for job in sim.kube.list("batch/v1", "Job", namespace, label_selector=preflight_jobs):
            sim.kube.delete("batch/v1", "Job", job["metadata"]["name"], namespace)
    after = current(sim.kubeconfig, RELEASE, NAMESPACE)
    assert (after.revision if after else None) == (before.revision if before else None)
    assert not sim.kube.list(KUEUE_API, "ClusterQueue", label_selector="konduktor.ai/config=pod-lab")


def test_a_missing_ssh_key_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    config = ssh_inventory_config(tmp_path, "{key: keys/id_ed25519}")
    assert main(["up", str(config), "--sim", "never-started"]) == 2
    err = capsys.readouterr().err
    assert f"{config}:" in err and "preflight.nodes.ssh.key: no such file" in err and "Traceback" not in err
    assert not (state_dir() / "never-started").exists()


def test_dry_run_and_plan_show_exactly_a_quota_edit(
    sim: Sim, installed: Installed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    installed.ensure()
    assert main(["plan", str(EXAMPLE), "--sim", sim.cluster.name]) == 0  # in sync
    capsys.readouterr()
    edited = tmp_path / "config.yaml"
    edited.write_text(
        EXAMPLE.read_text().replace(
            "h100: {quota: 20, borrowLimit: 10, lendLimit: 16}", "h100: {quota: 16, borrowLimit: 10, lendLimit: 16}", 1
        )
    )
    assert main(["plan", str(edited), "--sim", sim.cluster.name]) == 1
    release, *changes = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"release konduktor revision \d+ \(deployed\): up to date", release)
    assert changes[0] == "update    ClusterQueue team-a (spec.resourceGroups)"
    # each value that changes, old -> new (the GPUs', and the CPU and memory that follow them)
    assert "    spec.resourceGroups[0].flavors[h100].resources[nvidia.com/gpu].nominalQuota: 20 -> 16" in changes[1:]
    assert all(line.startswith("    spec.resourceGroups[0].flavors[h100].resources[") for line in changes[1:])
    assert main(["plan", str(edited), "--sim", sim.cluster.name, "-o", "json"]) == 1
    [quota] = json.loads(capsys.readouterr().out)["quotas"]
    gpu_path = "spec.resourceGroups[0].flavors[h100].resources[nvidia.com/gpu].nominalQuota"
    assert {"path": gpu_path, "old": "20", "new": "16"} in quota["values"]
    assert main(["up", str(edited), "--sim", sim.cluster.name, "--dry-run"]) == 0
    assert "1 quota objects would change" in capsys.readouterr().out
    queue = sim.kube.get(KUEUE_API, "ClusterQueue", "team-a")
    assert queue is not None
    gpu = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][-1]
    assert str(gpu["nominalQuota"]) == "20"  # the dry run changed nothing


def test_an_interrupted_up_is_finished_by_the_next(
    sim: Sim, installed: Installed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed right after the helm step; the next `up` converges."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    installed.changed()
    for team in ("team-a", "team-b"):  # as if quotas had never been applied
        sim.kube.delete(KUEUE_API, "LocalQueue", "default", team)
    command = [str(Path(sys.executable).with_name("konduktor-install")), "up", str(EXAMPLE), "--sim", sim.cluster.name]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if "quotas: applying" in line:  # helm has finished
            process.kill()
            break
    process.wait()
    assert main(["up", str(EXAMPLE), "--sim", sim.cluster.name]) == 0
    for team in ("team-a", "team-b"):
        assert sim.kube.get(KUEUE_API, "LocalQueue", "default", team) is not None
    installed.made()


def test_down_refuses_while_the_releases_crds_hold_objects_it_did_not_create(
    sim: Sim, installed: Installed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As Kueue's chart does, a CRD made from the release's templates: uninstalling deletes it and every object of it.
    `down` refuses (exit 2) while it holds an object Konduktor did not create, changing nothing; Konduktor's own
    objects of it do not count."""
    group, crd_name = "konduktor.test", "widgets.konduktor.test"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name, "annotations": {HELM_RELEASE: RELEASE, HELM_NAMESPACE: NAMESPACE}},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }
    monkeypatch.delenv("KUBECONFIG", raising=False)
    installed.ensure()
    sim.kube.apply(crd)

    def widget(name: str, labels: dict[str, str]) -> dict[str, Any]:
        meta = {"name": name, "namespace": "default", "labels": labels}
        return {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": meta}

    try:
        wait_until("the CRD to be served", lambda: _served(sim.kube, f"{group}/v1", "Widget"))
        sim.kube.create(widget("ours", {"app.kubernetes.io/managed-by": "konduktor"}))
        assert crd_losses(sim.kube, RELEASE, NAMESPACE) == []  # only Konduktor's own
        sim.kube.create(widget("theirs", {}))
        queues = sorted(q["metadata"]["name"] for q in sim.kube.list(KUEUE_API, "ClusterQueue"))
        release = current(sim.kubeconfig, RELEASE, NAMESPACE)
        capsys.readouterr()
        assert main(["down", "--sim", sim.cluster.name, "--yes"]) == 2
        refusal = capsys.readouterr().err
        assert "1 Widget (widgets.konduktor.test)" in refusal and "--delete-crds" in refusal
        assert sorted(q["metadata"]["name"] for q in sim.kube.list(KUEUE_API, "ClusterQueue")) == queues
        assert current(sim.kubeconfig, RELEASE, NAMESPACE) == release
        assert sim.kube.get(f"{group}/v1", "Widget", "theirs", "default") is not None
    finally:
        sim.kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd_name)


def _served(kube: Kube, api_version: str, kind: str) -> bool:
    try:
        kube.list(api_version, kind)
    except ApiError:
        return False
    return True


def test_down_dry_run_changes_nothing_and_down_names_a_queue_its_workloads_keep(
    sim: Sim, installed: Installed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A team job holds quota in ClusterQueue team-a: `down --dry-run` lists what it would delete and that the queue
    would wait for the job, and changes nothing; `down` deletes, waits (bounded), then names the queue Kueue keeps
    and the workload that holds it (exit 4); once the job is gone, `down` again finishes (exit 0)."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    where = ["--sim", sim.cluster.name]
    installed.ensure()
    installed.changed()  # taken down below; the next test that needs the platform installs it again
    sim.kube.apply(gpu_job("holds-quota", "team-a", gpus=1, run_for="1h"))
    try:
        wait_until("the job's workload to be admitted", lambda: bool(admitted_workloads(sim.kube, "team-a")), 60)
        [workload] = admitted_workloads(sim.kube, "team-a")
        release = current(sim.kubeconfig, RELEASE, NAMESPACE)
        capsys.readouterr()
        assert main(["down", *where, "--dry-run"]) == 0
        planned = capsys.readouterr().out.splitlines()
        assert (
            f"delete release {RELEASE} revision {release.revision if release else '?'} (konduktor-core) in {NAMESPACE}"
            in planned
        )
        assert "delete ClusterQueue team-a" in planned and "delete LocalQueue team-a/default" in planned
        assert f"wait   ClusterQueue team-a: 1 workloads hold quota in it: team-a/{workload}" in planned
        assert sim.kube.get(KUEUE_API, "ClusterQueue", "team-a") is not None  # nothing changed
        assert current(sim.kubeconfig, RELEASE, NAMESPACE) == release

        assert main(["down", *where, "--yes", "--timeout", "5"]) == 4
        err = capsys.readouterr().err
        assert (
            "ClusterQueue team-a: Terminating, finalizer kueue.x-k8s.io/resource-in-use: 1 workloads still reference "
            f"it: team-a/{workload}"
        ) in err
        # and what waits for the queue: its flavor (and cohort), which Kueue keeps while the queue uses them
        assert "ResourceFlavor h100: Terminating, finalizer kueue.x-k8s.io/resource-in-use: ClusterQueue team-a" in err
        assert re.search(r"quota objects deleted, \d+ not gone", err) and "Traceback" not in err
    finally:
        sim.kube.delete("batch/v1", "Job", "holds-quota", "team-a")
    wait_until("the job's workload to go", lambda: not admitted_workloads(sim.kube, "team-a"), 60)
    assert main(["down", *where, "--yes"]) == 0  # converges: the queue is let go
    assert sim.kube.get(KUEUE_API, "ClusterQueue", "team-a") is None


def admitted_workloads(kube: Kube, namespace: str) -> list[str]:
    workloads = kube.list(KUEUE_API, "Workload", namespace)
    return [
        w["metadata"]["name"] for w in workloads if (w.get("status", {}).get("admission") or {}).get("clusterQueue")
    ]


def test_status_then_down_removes_what_up_made(
    sim: Sim, installed: Installed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    installed.changed()  # taken down below; the next test that needs the platform installs it again
    given = ["--kubeconfig", str(sim.given_kubeconfig)]
    assert main(["up", str(EXAMPLE), *given, "--force", "--yes"]) == 2  # a real cluster gets the umbrella chart
    assert main(["up", str(EXAMPLE), "--sim", sim.cluster.name]) == 0
    assert main(["status", *given]) == 0
    assert "konduktor-core revision" in capsys.readouterr().out
    assert main(["down", *given]) == 2  # no terminal to confirm on: nothing is removed without --yes
    assert sim.kube.get(KUEUE_API, "ClusterQueue", "team-a") is not None
    assert main(["down", *given, "--yes"]) == 0
    wait_until(
        "the queues to be gone",
        lambda: not sim.kube.list(KUEUE_API, "ClusterQueue", label_selector="app.kubernetes.io/managed-by=konduktor"),
    )
    assert not sim.kube.list("apps/v1", "Deployment", "konduktor-system")
    assert sim.kube.get("v1", "Namespace", "team-a") is not None  # kept: it holds the team's work
    assert main(["status", *given]) == 1

"""`konduktor-install up` on the simulated cluster: one command from config to working queues and controller."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLE, Sim

from konduktor.cli.main import main
from konduktor.paths import state_dir
from konduktor.quotas.render import KUEUE_API
from konduktor.sim.workloads import gpu_job

pytestmark = pytest.mark.sim


def test_up_installs_applies_and_verifies_then_changes_nothing(
    sim: Sim, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert main(["up", str(EXAMPLE), "--sim", sim.cluster.name]) == 0
    err = capsys.readouterr().err
    assert "konduktor-core revision" in err
    for team in ("team-a", "team-b"):
        queue = sim.kube.get(KUEUE_API, "ClusterQueue", team)
        assert queue is not None
        assert any(c["type"] == "Active" and c["status"] == "True" for c in queue["status"]["conditions"])
    [controller] = sim.kube.list(
        "apps/v1", "Deployment", "konduktor-system", label_selector="app.kubernetes.io/part-of=konduktor"
    )
    assert controller["status"]["availableReplicas"] == 1

    # A GPU pod that bypasses the queues, created before the policies are enforced: up reports it.
    spec = gpu_job("bypass", "default", gpus=1, queue=None)["spec"]["template"]["spec"]
    bypass = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bypass", "namespace": "default"}, "spec": spec}
    sim.kube.create(bypass)
    try:
        assert main(["up", str(EXAMPLE), "--sim", sim.cluster.name]) == 0  # safe to re-run
        err = capsys.readouterr().err
    finally:
        sim.kube.delete("v1", "Pod", "bypass", "default")
    assert "0 quota objects changed" in err
    assert "policy: Pod default/bypass:" in err and "konduktor-gpu-in-team-namespaces" in err
    assert "1 existing GPU workload(s) break the admission policies" in err


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
    assert main(["up", str(wishful), "--kubeconfig", str(sim.kubeconfig)]) == 3
    err = capsys.readouterr().err
    assert "preflight FAIL" in err and "nothing was changed" in err
    assert not sim.kube.list(KUEUE_API, "ClusterQueue", label_selector="konduktor.ai/config=wishful-lab")

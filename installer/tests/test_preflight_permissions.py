"""`preflight` with an identity that may read nothing, on the simulated cluster's real API server and RBAC: the
checks FAIL naming the rights they lack (one SelfSubjectAccessReview per permission), exit 3, and `up` stops
there before changing anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EXAMPLE, Sim
from identities import service_account_kubeconfig

from konduktor.cli.main import main
from konduktor.errors import ExitCode

pytestmark = pytest.mark.sim


@pytest.fixture()
def nobody(sim: Sim, tmp_path: Path) -> Path:
    return service_account_kubeconfig(sim.kube, sim.kubeconfig, "default", "no-rights", tmp_path / "nobody.yaml")


def test_preflight_fails_naming_the_rights_it_lacks(nobody: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", str(EXAMPLE), "--kubeconfig", str(nobody), "-o", "json"]) == ExitCode.CHECK_FAILED
    out = capsys.readouterr().out
    assert "no right to list nodes" in out
    assert "no right to list customresourcedefinitions.apiextensions.k8s.io" in out
    assert '"status": "SKIPPED"' not in out


def test_preflight_passes_the_rights_check_for_the_admin(sim: Sim, capsys: pytest.CaptureFixture[str]) -> None:
    main(["preflight", str(EXAMPLE), "--kubeconfig", str(sim.kubeconfig), "-o", "json"])
    assert "no right to" not in capsys.readouterr().out


def test_up_stops_at_preflight_without_rights(nobody: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", str(EXAMPLE), "--kubeconfig", str(nobody), "--yes"]) == ExitCode.CHECK_FAILED
    said = capsys.readouterr().err
    assert "preflight FAIL gpu-nodes (cluster): no right to list nodes" in said
    assert "nothing was changed" in said


def test_preflight_pods_fail_naming_the_rights_they_lack_in_their_namespace(
    sim: Sim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An identity that may read the cluster (the cluster checks' rights) but do nothing in the preflight pods'
    namespace: the node checks FAIL before any Job, naming each missing right."""
    reader = "preflight-reader"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": reader},
        "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": reader},
        "subjects": [{"kind": "ServiceAccount", "name": reader, "namespace": "default"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
    }
    config = tmp_path / "config.yaml"
    config.write_text(EXAMPLE.read_text() + "preflight:\n  nodes:\n    pod: {namespace: preflight-rights}\n")
    sim.kube.apply(role)
    sim.kube.apply(binding)
    try:
        kubeconfig = service_account_kubeconfig(sim.kube, sim.kubeconfig, "default", reader, tmp_path / "reader.yaml")
        assert main(["preflight", str(config), "--kubeconfig", str(kubeconfig), "-o", "json"]) == ExitCode.CHECK_FAILED
        checks = json.loads(capsys.readouterr().out)["checks"]
        [pods] = [c for c in checks if c["name"] == "preflight-pods"]
        assert pods["status"] == "FAIL"
        for right in ("create jobs.batch", "list jobs.batch", "delete jobs.batch", "list pods", "get pods/log"):
            assert right in pods["summary"], pods["summary"]
        assert "no right to list nodes" not in json.dumps(checks)
        assert sim.kube.get("v1", "Namespace", "preflight-rights") is None  # stopped before anything was made
    finally:
        sim.kube.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", reader)
        sim.kube.delete("rbac.authorization.k8s.io/v1", "ClusterRole", reader)

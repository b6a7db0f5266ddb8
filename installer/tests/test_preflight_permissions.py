"""`preflight` with an identity that may read nothing, on the simulated cluster's real API server and RBAC: the
checks FAIL naming the rights they lack (one SelfSubjectAccessReview per permission), exit 3, and `up` stops
there before changing anything."""

from __future__ import annotations

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

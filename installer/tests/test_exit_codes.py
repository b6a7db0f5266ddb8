"""One exit-code table for every command (konduktor.errors.ExitCode, docs/reference/cli.md's table), pinned per command:
an unreachable API server or an identity without rights is 5, never the 1 of "changes pending", "not
installed" or "a node FAILed"; a kubeconfig that does not load is 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import EXAMPLE, Sim
from identities import service_account_kubeconfig, unreachable_kubeconfig

from konduktor.cli.health import main as health_main
from konduktor.cli.main import main
from konduktor.errors import ExitCode

CLI_REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"

# Every command that talks to a cluster, with the arguments it needs besides --kubeconfig.
CLUSTER_COMMANDS = [
    ["quotas", "diff", str(EXAMPLE)],
    ["quotas", "apply", str(EXAMPLE)],
    ["quotas", "explain"],
    ["publish-capacity"],
    ["status"],
    ["plan", str(EXAMPLE)],
    ["down", "--yes"],
    ["burnin", str(EXAMPLE)],
    ["preflight", str(EXAMPLE)],
    ["up", str(EXAMPLE), "--yes"],
]
# Commands that cannot work at all with an identity that may read nothing (preflight instead FAILs the checks
# whose rights are missing: exit 3, see test_preflight_permissions.py).
NEEDS_RIGHTS = [c for c in CLUSTER_COMMANDS if c[0] not in ("preflight", "up")]


def test_the_cli_reference_has_the_one_table() -> None:
    rows = re.findall(r"^\| (\d+) \| ", CLI_REFERENCE.read_text(), flags=re.MULTILINE)
    assert [int(r) for r in rows] == [int(code) for code in ExitCode]


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda c: " ".join(c[:2]).split("/")[0])
def test_an_unreachable_api_server_is_exit_5(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = unreachable_kubeconfig(tmp_path)
    assert main([*command, "--kubeconfig", str(kubeconfig)]) == ExitCode.UNREACHABLE
    said = capsys.readouterr().err
    assert "error:" in said and "Traceback" not in said


def test_the_health_controller_without_its_api_server_is_exit_5(tmp_path: Path) -> None:
    kubeconfig = unreachable_kubeconfig(tmp_path)
    assert health_main(["run", "--once", "--kubeconfig", str(kubeconfig)]) == ExitCode.UNREACHABLE


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda c: " ".join(c[:2]).split("/")[0])
def test_a_kubeconfig_that_does_not_load_is_exit_2(command: list[str], tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n")
    assert main([*command, "--kubeconfig", str(broken)]) == ExitCode.BAD_INPUT


@pytest.mark.sim
@pytest.mark.parametrize("command", NEEDS_RIGHTS, ids=lambda c: " ".join(c[:2]).split("/")[0])
def test_an_identity_without_rights_is_exit_5(
    command: list[str], sim: Sim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nobody = service_account_kubeconfig(sim.kube, sim.kubeconfig, "default", "no-rights", tmp_path / "nobody.yaml")
    assert main([*command, "--kubeconfig", str(nobody)]) == ExitCode.UNREACHABLE
    said = capsys.readouterr().err
    assert "forbidden" in said.lower() and "Traceback" not in said

"""`plan` diffs the release `up` would install against the deployed one, object by object, and `status`, `plan` and
`up` report structured data on stdout (`-o json`), on the simulated cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, Sim

from konduktor.cli.main import main
from konduktor.errors import ExitCode
from konduktor.helm.release import NAMESPACE, RELEASE, current
from konduktor.paths import state_dir

pytestmark = pytest.mark.sim

SETTINGS = "konduktor-konduktor-core-health"  # the health controller's ConfigMap and Deployment


def plan_json(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, dict[str, Any], str]:
    """`plan -o json`: its exit code, its document (stdout) and what it said on stderr."""
    code = main(["plan", *arguments, "-o", "json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def edits(diff: str) -> list[str]:
    """The lines a unified diff removes or adds, each as its sign and its text without indentation."""
    return [line[0] + line[1:].strip() for line in diff.splitlines() if re.match(r"[-+](?![-+]{2} )", line)]


def test_plan_shows_an_install_then_nothing_then_exactly_a_values_change(
    sim: Sim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    config = tmp_path / "config.yaml"  # the example without its burn-in, which this test does not need
    config.write_text(EXAMPLE.read_text().replace("level: quick ", "level: none  "))
    cluster = ["--sim", sim.cluster.name]
    assert main(["down", *cluster, "--yes"]) == 0
    capsys.readouterr()

    code, planned, _ = plan_json(capsys, str(config), *cluster)
    assert code == ExitCode.NEGATIVE  # a release to install
    release = planned["release"]
    assert (release["installed"], release["revision"], release["status"]) == (False, None, None)
    assert release["wanted"] == {"chart": "konduktor-core", "version": "0.1.0"}
    added = {(c["kind"], c["namespace"], c["name"]) for c in release["changes"] if c["action"] == "add"}
    assert len(added) == len(release["changes"])
    assert {("Deployment", NAMESPACE, SETTINGS), ("ConfigMap", NAMESPACE, SETTINGS)} <= added
    deployment = next(c for c in release["changes"] if c["kind"] == "Deployment")
    assert "+kind: Deployment" in deployment["diff"].splitlines()
    assert {c["action"] for c in planned["quotas"]} == {"create"}  # down removed the quota objects too

    assert main(["up", str(config), *cluster, "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)  # only the report on stdout: progress went to stderr
    assert report["release"]["installed"] is True and isinstance(report["release"]["revision"], int)
    assert report["chart"]["name"] == "konduktor-core" and report["dry_run"] is False
    assert {q["team"]: q["gpus"] for q in report["queues"]}["team-a"] == {"h100": 20}
    assert all(isinstance(step["seconds"], float) for step in report["steps"])
    installed = current(sim.kubeconfig, RELEASE, NAMESPACE)
    assert installed is not None

    assert main(["plan", str(config), *cluster]) == ExitCode.OK
    out = capsys.readouterr().out
    assert out == f"release konduktor revision {installed.revision} (deployed): up to date\n"

    values = tmp_path / "values.yaml"
    values.write_text("controller:\n  settings:\n    breaker:\n      max_nodes: 7\n")
    code, planned, _ = plan_json(capsys, str(config), *cluster, "-f", str(values))
    assert code == ExitCode.NEGATIVE
    assert set(planned) == {"release", "quotas", "sharing"} and planned["quotas"] == []
    assert planned["sharing"] == {"changes": [], "short": [], "cordoned": [], "relaid": []}  # no groups, no labels
    assert set(planned["release"]) == {
        "name",
        "namespace",
        "installed",
        "revision",
        "status",
        "chart",
        "wanted",
        "changes",
    }
    assert planned["release"]["revision"] == installed.revision and planned["release"]["chart"] == "konduktor-core"
    changes = planned["release"]["changes"]
    # The settings change, and the controller's pod template with them (its checksum annotation rolls it).
    assert [(c["action"], c["kind"], c["namespace"], c["name"]) for c in changes] == [
        ("change", "ConfigMap", NAMESPACE, SETTINGS),
        ("change", "Deployment", NAMESPACE, SETTINGS),
    ]
    assert all(set(c) == {"action", "apiVersion", "kind", "namespace", "name", "diff"} for c in changes)
    assert edits(changes[0]["diff"]) == ["-max_nodes: 20", "+max_nodes: 7"]
    [checksum_before, checksum_after] = edits(changes[1]["diff"])
    assert checksum_before.startswith("-checksum/settings: ") and checksum_after.startswith("+checksum/settings: ")

    assert main(["plan", str(config), *cluster, "-f", str(values)]) == ExitCode.NEGATIVE
    table = capsys.readouterr().out.splitlines()
    assert table[0] == (
        f"release konduktor revision {installed.revision} (deployed): 2 objects would change with konduktor-core 0.1.0"
    )
    assert table[1] == f"change    ConfigMap {NAMESPACE}/{SETTINGS}"
    assert "    +      max_nodes: 7" in table
    after = current(sim.kubeconfig, RELEASE, NAMESPACE)
    assert after is not None and after.revision == installed.revision  # plan changed nothing


def test_status_reports_numbers_as_numbers(
    sim: Sim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    cluster = ["--sim", sim.cluster.name]
    if current(sim.kubeconfig, RELEASE, NAMESPACE) is None:
        config_without_burnin = EXAMPLE.read_text().replace("level: quick ", "level: none  ")
        path = tmp_path / "config.yaml"
        path.write_text(config_without_burnin)
        assert main(["up", str(path), *cluster]) == 0
    capsys.readouterr()
    assert main(["status", *cluster, "-o", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert set(status) == {
        "release",
        "health_controllers",
        "health_controller",
        "breaker",
        "queues",
        "gpus",
        "quarantined_nodes",
        "argocd",
    }
    release = status["release"]
    assert release["installed"] is True and release["chart"] == "konduktor-core"
    assert isinstance(release["revision"], int) and release["status"] == "deployed"
    [controller] = status["health_controllers"]
    assert (controller["available"], controller["desired"]) == (1, 1)
    queues = {q["team"]: q for q in status["queues"]}
    assert queues["team-a"]["nominal"] == 20 and isinstance(queues["team-a"]["used"], int)
    assert queues["team-a"]["flavor"] == "h100"
    [gpus] = status["gpus"]
    assert gpus["gpus"] == 40 and isinstance(gpus["quarantined"], int) and isinstance(gpus["cordoned"], int)
    assert isinstance(status["quarantined_nodes"], list) and status["argocd"] == []
    # Whether the controller acts (the simulated cluster runs konduktor-core's controller, acting), who leads (the
    # Lease's holder, when the sim's controller has taken it), its breaker.
    controller = status["health_controller"]
    assert controller["installed"] is True and controller["dry_run"] is False
    assert controller["leader"] is None or isinstance(controller["leader"], str)
    breaker = status["breaker"]
    assert (breaker["limit"], breaker["window_seconds"], breaker["tripped"], breaker["dry_run"]) == (
        2,
        600,
        False,
        False,
    )
    assert main(["status", *cluster]) == 0
    table = capsys.readouterr().out
    assert "1/1 available; acting; " in table and "leader" in table
    assert "breaker" in table and "closed: " in table


def test_plan_for_a_simulated_cluster_not_yet_running_adds_every_object(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing to read on a cluster that does not exist: the chart is rendered as a new cluster would see it."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    code, planned, said = plan_json(capsys, str(EXAMPLE), "--sim", "plan-never-started")
    assert code == ExitCode.NEGATIVE
    assert planned["release"]["installed"] is False and planned["quotas"] == []
    changes = planned["release"]["changes"]
    assert changes and {c["action"] for c in changes} == {"add"}
    # lookup finds no burn-in namespace on a new cluster, so the chart makes it.
    assert {"kind": "Namespace", "name": "konduktor-burnin"} in [
        {"kind": c["kind"], "name": c["name"]} for c in changes
    ]
    assert "plan: the simulated cluster 'plan-never-started' is not running; up creates it" in said
    assert not (state_dir() / "plan-never-started").exists()  # plan starts nothing


@pytest.mark.parametrize("command", ["plan", "up"])
def test_a_values_file_the_charts_schema_refuses_is_bad_input_found_before_any_cluster(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The values files are rendered with the chart on this machine first: a field its values.schema.json refuses
    is exit 2 naming the file, the line and the field, and no cluster is started, read or changed."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("controller:\n  replicas: 1\n")
    bad.write_text("# a typo'd environment overlay\ncontroller:\n  replicas: two\n")
    name = f"{command}-values-never-started"
    code = main([command, str(EXAMPLE), "--sim", name, "-f", str(good), "-f", str(bad)])
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT, err
    assert f"{bad}:3: controller.replicas:" in err and "nothing was changed" in err and "Traceback" not in err
    assert str(good) not in err  # the file that set the refused field, not every file
    assert not (state_dir() / name).exists()

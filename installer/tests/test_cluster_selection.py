"""Which cluster a command talks to, as kubectl and helm choose it: --kubeconfig, --context, KUBECONFIG's files
merged, ~/.kube/config for read-only commands, the simulated cluster for commands that change one when nothing is
named, and a simulated cluster recognised from its own kubeconfig."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, Sim
from ruamel.yaml import YAML

from konduktor.cli.main import main
from konduktor.errors import ExitCode
from konduktor.ops.target import resolve_target
from konduktor.sim.cluster import DEFAULT_NAME


def kubeconfig_of(sim: Sim) -> dict[str, Any]:
    document: dict[str, Any] = YAML(typ="safe").load(sim.kubeconfig.read_text())
    return document


def write(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    YAML(typ="safe").dump(document, path)
    return path


def with_context(sim: Sim, name: str, server: str | None = None) -> dict[str, Any]:
    """The simulated cluster's kubeconfig with its one context renamed, and its server replaced when given."""
    document = kubeconfig_of(sim)
    document["contexts"][0]["name"] = name
    document["current-context"] = name
    if server is not None:
        document["clusters"][0]["cluster"]["server"] = server
    return document


def explained(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code = main(["quotas", "explain", "-o", "json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out) if code == 0 else None


@pytest.mark.sim
def test_a_simulated_clusters_kubeconfig_is_that_cluster(sim: Sim, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's `export KUBECONFIG=$(konduktor-install sim kubeconfig)` keeps `up` and `plan` on the sim."""
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig))
    assert resolve_target().sim == sim.cluster.name
    assert resolve_target(sim.kubeconfig).sim == sim.cluster.name
    assert resolve_target(sim="other").sim == "other"  # --sim wins over the environment


@pytest.mark.sim
def test_sim_and_kubeconfig_together_are_refused(sim: Sim, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["status", "--sim", sim.cluster.name, "--kubeconfig", str(sim.kubeconfig)])
    assert code == ExitCode.BAD_INPUT
    assert "--sim" in capsys.readouterr().err


@pytest.mark.sim
def test_kubeconfig_files_are_merged_as_kubectl_merges_them(
    sim: Sim, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clusters and users in one file, the context in another: only the two together reach the cluster."""
    document = with_context(sim, "merged")
    credentials = write(
        tmp_path / "credentials", {k: v for k, v in document.items() if k not in ("contexts", "current-context")}
    )
    contexts = write(
        tmp_path / "contexts",
        {"apiVersion": "v1", "kind": "Config", "contexts": document["contexts"], "current-context": "merged"},
    )
    monkeypatch.setenv("KUBECONFIG", f"{contexts}:{credentials}")
    code, rows = explained(capsys)
    assert code == 0 and isinstance(rows, list), rows
    monkeypatch.setenv("KUBECONFIG", str(contexts))
    assert explained(capsys)[0] == ExitCode.BAD_INPUT  # the context's cluster is in the other file


@pytest.mark.sim
def test_context_picks_a_context(sim: Sim, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = with_context(sim, "sim")
    unreachable = with_context(sim, "elsewhere", server="https://127.0.0.1:9")
    document = {**good, "contexts": good["contexts"] + unreachable["contexts"], "current-context": "elsewhere"}
    document["clusters"] = good["clusters"] + [{**unreachable["clusters"][0], "name": "elsewhere"}]
    document["contexts"][1]["context"] = {**document["contexts"][1]["context"], "cluster": "elsewhere"}
    kubeconfig = write(tmp_path / "kubeconfig", document)
    assert explained(capsys, "--kubeconfig", str(kubeconfig))[0] == ExitCode.UNREACHABLE  # the current context
    code, rows = explained(capsys, "--kubeconfig", str(kubeconfig), "--context", "sim")
    assert code == 0 and isinstance(rows, list)


@pytest.mark.sim
def test_read_only_commands_read_the_kubectl_default_and_changes_never_do(
    sim: Sim, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing named, `quotas explain` reads ~/.kube/config as kubectl would; `quotas apply` and `down`
    stay on the simulated cluster `konduktor` (not running here), so a production kubeconfig is never changed by
    accident."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    write(tmp_path / ".kube" / "config", with_context(sim, "production"))
    code, rows = explained(capsys)
    assert code == 0 and isinstance(rows, list)
    assert resolve_target().sim == DEFAULT_NAME
    for args in (["quotas", "apply", str(EXAMPLE)], ["down", "--yes"]):
        assert main(args) == ExitCode.BAD_INPUT
        assert f"the simulated cluster {DEFAULT_NAME!r} is not running" in capsys.readouterr().err


def test_inside_a_pod_without_a_kubeconfig_every_command_uses_the_pods_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As kubectl in a pod: the service account the pod was given (how the chart's capacity publisher runs), for
    commands that change the cluster too; any kubeconfig found, or no pod, keeps the rules above."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert resolve_target().sim == DEFAULT_NAME  # not in a pod: the simulated cluster
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    in_pod = resolve_target()
    assert (in_pod.kubeconfig, in_pod.context, in_pod.sim) == (None, None, None)
    assert resolve_target(read_only=True) == in_pod
    write(tmp_path / ".kube" / "config", {"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": []})
    assert resolve_target().sim == DEFAULT_NAME  # a kubeconfig in the pod: the usual rules

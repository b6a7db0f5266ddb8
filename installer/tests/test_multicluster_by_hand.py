"""A fleet applied by hand (docs/multicluster.md#applying-by-hand): what `render --output-dir` writes beside the
manager's objects (Kueue's Configuration, a template of each Secret `up` writes on the manager, saying what to fill
in and what stays base64) and `render --chart-values --cluster`; what `validate` says about a fleet; and how `plan`,
`up` and `down` name a member whose kubeconfig is missing or does not load."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from quota_samples import EXAMPLES, fleet, line_of, write_config
from support import run

from konduktor.config.model import Config
from konduktor.errors import ExitCode
from konduktor.kube.client import Kube, KubeconfigError
from konduktor.quotas.by_hand import BY_HAND_DIR, CA_DATA, KUEUE_CONFIGURATION_FILE, SERVER, TOKEN
from konduktor.quotas.manifests import FILE_NAME
from konduktor.quotas.multikueue import (
    fleet_events_kubeconfig_secret,
    kubeconfig_secret,
    manager_kueue_settings,
    worker_kubeconfig,
)

EXAMPLE = EXAMPLES / "multicluster.yaml"
EAST_SERVER = "https://east-api.internal:6443"


def by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any]) -> tuple[Path, str]:
    """`render --output-dir` of a fleet: the manager's by-hand directory and what render said."""
    path = write_config(tmp_path, data)
    code, _, err = run(capsys, "render", str(path), "--output-dir", str(tmp_path / "out"))
    assert code == 0, err
    return tmp_path / "out" / data["cluster"]["name"] / BY_HAND_DIR, err


def with_east_server() -> dict[str, Any]:
    data = fleet()
    data["clusters"]["workers"][1]["server"] = EAST_SERVER
    return data


def filled(text: str, server: str, ca_data: str, token: str) -> dict[str, Any]:
    """A template filled in as `envsubst '$SERVER $CA_DATA $TOKEN'` does, as the API server stores it: stringData
    goes to data, base64-encoded."""
    for placeholder, value in ((SERVER, server), (CA_DATA, ca_data), (TOKEN, token)):
        text = text.replace(placeholder, value)
    secret: dict[str, Any] = yaml.safe_load(text)
    secret["data"] = {key: base64.b64encode(value.encode()).decode() for key, value in secret.pop("stringData").items()}
    return secret


def test_render_writes_kueues_configuration_for_the_manager_from_the_function_up_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = fleet({"clusters": {"dispatch": "allAtOnce", "workerLostTimeout": "5m"}})
    directory, err = by_hand(tmp_path, capsys, data)
    assert f"wrote 5 files to {directory}" in err
    text = (directory / KUEUE_CONFIGURATION_FILE).read_text()
    configuration = yaml.safe_load(text)
    settings = manager_kueue_settings(Config.model_validate(data))
    assert configuration == {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", **settings}
    assert configuration["multiKueue"] == {
        "dispatcherName": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
        "workerLostTimeout": "5m",
    }
    # It says how to use it: merged section by section into Kueue's Configuration, then Kueue restarted.
    assert "section by section" in text and "kueue.managerConfig.controllerManagerConfigYaml" in text
    assert "rollout restart deployment kueue-controller-manager" in text


def test_the_by_hand_files_stay_out_of_what_kubectl_applies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `kubectl apply -f rendered/<manager>/` reads that directory's files, not its subdirectories: the templates
    # (placeholders) and Kueue's Configuration (no API object) are not among them. The workers get none.
    directory, _ = by_hand(tmp_path, capsys, fleet())
    manager = directory.parent
    assert all(FILE_NAME.match(p.name) for p in manager.iterdir() if p.is_file())
    assert sorted(p.name for p in directory.iterdir()) == [
        KUEUE_CONFIGURATION_FILE,
        "secret-konduktor-fleet-events-east.yaml",
        "secret-konduktor-fleet-events-west.yaml",
        "secret-multikueue-east.yaml",
        "secret-multikueue-west.yaml",
    ]
    for worker in ("west", "east"):
        assert all(p.is_file() for p in (tmp_path / "out" / worker).iterdir())

    # A worker dropped from the config: its templates go on the next render; a file someone put there stays.
    (directory / "notes.txt").write_text("mine")
    data = fleet()
    data["clusters"]["workers"] = data["clusters"]["workers"][:1]
    data["clusters"]["workers"][0]["gpuTypes"] = {"h100": 4}
    directory, err = by_hand(tmp_path, capsys, data)
    assert "removed 2 stale" in err
    assert sorted(p.name for p in directory.iterdir()) == [
        KUEUE_CONFIGURATION_FILE,
        "notes.txt",
        "secret-konduktor-fleet-events-west.yaml",
        "secret-multikueue-west.yaml",
    ]


@pytest.mark.parametrize("worker", ["west", "east"])
def test_a_filled_template_is_the_secret_up_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], worker: str
) -> None:
    data = with_east_server()
    config = Config.model_validate(data)
    directory, _ = by_hand(tmp_path, capsys, data)
    server, ca_data, token = "https://west-api.internal:6443", base64.b64encode(b"PEM").decode(), "eyJhbGciOi.x.y"
    # east's address is in the config: its templates have it and ask for no SERVER.
    expected_server = EAST_SERVER if worker == "east" else server
    for make, name, account in (
        (kubeconfig_secret, f"multikueue-{worker}", "konduktor-multikueue"),
        (fleet_events_kubeconfig_secret, f"konduktor-fleet-events-{worker}", "konduktor-fleet-events"),
    ):
        text = (directory / f"secret-{name}.yaml").read_text()
        assert (SERVER in text) == (worker == "west")
        kubeconfig = worker_kubeconfig(expected_server, ca_data, token, worker, account)
        assert filled(text, server, ca_data, token) == make(config, worker, kubeconfig)
        # The header says where each value comes from, which stays base64 and which is decoded, and how to apply.
        header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
        token_secret = f"{account}-token"
        on_worker = f"--context {worker} -n kueue-system get secret {token_secret} -o jsonpath"
        assert f"{on_worker}='{{.data.ca\\.crt}}')" in header
        assert f"get secret {token_secret} -o jsonpath='{{.data.token}}' | base64 -d)" in header
        assert "CA_DATA stays base64" in header and "TOKEN is plain text" in header
        assert f"< secret-{name}.yaml | kubectl --context hub apply --server-side -f -" in header


def test_chart_values_of_a_fleet_member_are_what_up_passes_there(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", str(EXAMPLE), "--chart-values", "--cluster", "gpu-hub")
    assert code == 0
    manager = yaml.safe_load(out)
    kueue = yaml.safe_load(manager["kueue"]["managerConfig"]["controllerManagerConfigYaml"])
    assert kueue["multiKueue"]["dispatcherName"] == "kueue.x-k8s.io/multikueue-dispatcher-incremental"
    assert kueue["integrations"]["frameworks"]  # the chart's Configuration, the dispatcher merged in
    core = manager["konduktor-core"]
    assert core["fleetEvents"] == {"workers": ["west", "east"]}  # the relay
    assert core["controller"]["settings"]["gpu_types"] == {}  # no GPU nodes on the manager
    code, out, _ = run(capsys, "render", str(EXAMPLE), "--chart-values", "--cluster", "west")
    worker = yaml.safe_load(out)
    assert code == 0 and "fleetEvents" not in worker["konduktor-core"]
    assert "multiKueue" not in yaml.safe_load(worker["kueue"]["managerConfig"]["controllerManagerConfigYaml"])
    code, _, err = run(capsys, "render", str(EXAMPLE), "--chart-values")
    assert code == 2 and "--cluster NAME, one of gpu-hub, west, east" in err


def test_validate_summarises_the_fleet(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "validate", str(EXAMPLE))
    assert (code, out) == (0, "")
    assert err.splitlines()[1:] == [
        "  fleet: manager gpu-hub and 2 workers, dispatch incremental (west, east)",
        "  manager gpu-hub (kubeconfig ~/.kube/config, context gpu-hub): the teams' whole quotas: team-a 12 h100, "
        "team-b 20 h100",
        "  worker west (kubeconfig ~/.kube/config, context west): 16 h100 GPUs; shares: team-a 6 h100, team-b 10 h100",
        "  worker east (kubeconfig ~/.kube/config, context east): 16 h100 GPUs; shares: team-a 6 h100, team-b 10 h100",
    ]
    code, out, _ = run(capsys, "validate", str(EXAMPLE), "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["warnings"] == []
    assert report["fleet"]["manager"] == {
        "name": "gpu-hub",
        "kubeconfig": "~/.kube/config",
        "context": "gpu-hub",
        "simulated": False,
        "teams": {"team-a": {"h100": 12}, "team-b": {"h100": 20}},
    }
    assert [(w["name"], w["gpus"], w["teams"]) for w in report["fleet"]["workers"]] == [
        ("west", {"h100": 16}, {"team-a": {"h100": 6}, "team-b": {"h100": 10}}),
        ("east", {"h100": 16}, {"team-a": {"h100": 6}, "team-b": {"h100": 10}}),
    ]


def test_validate_warns_that_a_member_naming_no_cluster_is_simulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = fleet()
    del data["clusters"]["workers"][1]["context"]
    path = write_config(tmp_path, data)
    code, _, err = run(capsys, "validate", str(path))
    assert code == 0
    line = line_of(data, "- name: east")
    assert (
        f"warning: {path}:{line}: clusters.workers[1]: worker 'east' names no kubeconfig and no context: `up`, `plan` "
        "and `down --config` take it as the simulated cluster 'east'"
    ) in " ".join(err.split())
    assert "valid (2 teams, 1 GPU type, 40 GPUs, 1 warning)" in err
    assert "  worker east (the simulated cluster of its name): " in err
    assert "  worker west (context west): 20 h100 GPUs; shares: team-a 10 h100, team-b 10 h100" in err
    code, out, _ = run(capsys, "validate", str(path), "-o", "json")
    [warning] = json.loads(out)["warnings"]
    assert (warning["path"], warning["line"], warning["rule"]) == ("clusters.workers[1]", line, "L19")


@pytest.mark.parametrize(
    "command", [["plan"], ["up", "--yes"], ["down", "--yes", "--config"], ["down", "--dry-run", "--config"]]
)
def test_a_missing_kubeconfig_is_named_missing_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    # The other members name a context of $KUBECONFIG's files, which exist: only the first worker's file is missing.
    (tmp_path / "fleet.kubeconfig").write_text("{}")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "fleet.kubeconfig"))
    data = fleet()
    data["clusters"]["workers"][0]["kubeconfig"] = "west.kubeconfig"
    path = write_config(tmp_path, data)
    code, out, err = run(capsys, *command, str(path))
    assert code == ExitCode.BAD_INPUT and out == ""
    line = line_of(data, "kubeconfig: west.kubeconfig")
    assert (
        f"error: {path}:{line}: clusters.workers[0].kubeconfig: worker west's kubeconfig west.kubeconfig "
        f"({tmp_path / 'west.kubeconfig'}): no such file"
    ) in " ".join(err.split())
    assert "invalid" not in err.lower()


def test_a_context_without_a_kubeconfig_needs_kubectls_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    path = write_config(tmp_path, fleet())
    code, _, err = run(capsys, "plan", str(path))
    assert code == ExitCode.BAD_INPUT
    assert "3 kubeconfig files are missing" in err
    assert (
        f"{path}:{line_of(fleet(), 'context: west')}: clusters.workers[0].context: worker west names no kubeconfig "
        f"and KUBECONFIG is not set, so kubectl's {tmp_path / '.kube' / 'config'}: no such file"
    ) in " ".join(err.split())


def test_plan_names_the_member_whose_kubeconfig_does_not_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One kubeconfig for all three, with a context for the manager only: the first worker's does not load.
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hub", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "admin", "user": {"token": "t"}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": "admin"}}],
        "current-context": "hub",
    }
    (tmp_path / "fleet.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    data = fleet()
    for member in (data["clusters"]["manager"], *data["clusters"]["workers"]):
        member["kubeconfig"] = "fleet.kubeconfig"
    path = write_config(tmp_path, data)
    for command in (["plan"], ["up", "--yes"]):
        code, _, err = run(capsys, *command, str(path))
        assert code == ExitCode.BAD_INPUT
        said = " ".join(err.split())
        assert f"error: west (worker): cannot load kubeconfig {tmp_path / 'fleet.kubeconfig'}: " in said
        assert (
            f"hint: fix clusters.workers[0].kubeconfig or .context in {path}; or, to try the fleet on simulated "
            f"clusters, leave out both for every member and start them: konduktor-install sim up --config {path}"
        ) in said
        assert "sim up\n" not in err


def test_a_missing_kubeconfig_file_is_said_to_be_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(KubeconfigError, match=r"kubeconfig .*nothere: no such file"):
        Kube(tmp_path / "nothere")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeconfigError, match=r"KUBECONFIG is not set and ~/\.kube/config does not exist"):
        Kube(context="somewhere")
    code, _, err = run(capsys, "quotas", "explain", "--kubeconfig", str(tmp_path / "nothere"))
    assert code == ExitCode.BAD_INPUT and f"kubeconfig {tmp_path / 'nothere'}: no such file" in err

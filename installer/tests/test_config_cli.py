"""`konduktor-install validate | render | schema` as a user runs them: exit codes, stdout data, stderr messages."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from quota_samples import EXAMPLES, edited, seed, write_config
from ruamel.yaml import YAML
from support import run

from konduktor.config import load_config
from konduktor.config.schema import config_schema_text
from konduktor.quotas.render import render


def test_config_cli_validate_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "validate", str(EXAMPLES / "config.yaml"))
    assert (code, out) == (0, "")
    assert "config.yaml: valid (2 teams, 1 GPU type, 40 GPUs, 0 warnings)" in err


def test_config_cli_validate_warnings_exit_zero(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_config(tmp_path, edited({"teams": {"team-a": {"gpus": {"h100": {"quota": 18}}}}}))
    code, out, err = run(capsys, "validate", str(path))
    assert (code, out) == (0, "")
    assert f"warning: {path}:" in err and "gpuTypes.h100: 2 of 40 h100 GPUs are in no team's quota" in err
    assert "hint: quotas: team-a 18, team-b 20; give the rest to a team" in err
    assert "1 warning)" in err


def test_config_cli_validate_lists_every_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = edited(
        {
            "gpuTypes": {"h100": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-A100"}}},
            "teams": {"team-b": {"namespaces": ["team-a"], "gpus": {"h100": {"lendLimit": 21}}}},
        }
    )
    path = write_config(tmp_path, data)
    code, out, err = run(capsys, "validate", str(path))
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert lines[0] == f"error: {path}: 3 errors"
    assert any(
        line.strip().startswith(f"{path}:") and "nodeLabels[nvidia.com/gpu.product]: selects" in line for line in lines
    )
    assert any(
        "teams.team-b.namespaces[0]: namespace 'team-a' already belongs to team team-a" in line for line in lines
    )
    assert any("teams.team-b.gpus.h100.lendLimit: lendLimit 21 is more than the quota 20" in line for line in lines)
    assert sum("hint:" in line for line in lines) == 2


def test_config_cli_validate_single_error_with_hint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    text = (EXAMPLES / "config.yaml").read_text()
    path.write_text(text.replace("gpusPerNode: 10", "gpusPerNode: 10\n    tolerration: []"))
    code, _, err = run(capsys, "validate", str(path))
    assert code == 2
    assert err.splitlines() == [
        f"error: {path}:40: gpuTypes.h100.tolerration: unknown key",
        "hint: did you mean 'tolerations'?",
    ]


def test_config_cli_validate_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "validate", str(tmp_path / "missing.yaml"))
    assert code == 2 and "no such file" in err
    code, _, _ = run(capsys, "validate")
    assert code == 2


def test_config_cli_render_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", str(EXAMPLES / "config.yaml"))
    assert (code, err) == (0, "")
    expected = render(load_config(EXAMPLES / "config.yaml").config)
    assert list(YAML(typ="safe").load_all(StringIO(out))) == expected


def test_config_cli_render_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", str(EXAMPLES / "gke-topology.yaml"), "-o", "json")
    assert code == 0
    listing = json.loads(out)
    assert listing["kind"] == "List"
    assert {o["kind"] for o in listing["items"]} >= {"ClusterQueue", "ResourceFlavor", "Topology", "LocalQueue"}


def test_config_cli_render_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "rendered"
    code, out, err = run(capsys, "render", str(EXAMPLES / "config.yaml"), "--output-dir", str(target))
    assert (code, out) == (0, "")
    files = sorted(p.name for p in target.iterdir())
    assert len(files) == 21 and "wrote 21 files" in err
    assert files[0] == "001-namespace-team-a.yaml"
    assert "010-clusterqueue-team-a.yaml" in files
    # Render again without team-b: its files go, a file the user put there stays.
    (target / "README.md").write_text("rendered by konduktor-install\n")
    data = seed()
    del data["teams"]["team-b"]
    data["teams"]["team-a"]["gpus"]["h100"] = {"quota": 40}
    code, _, err = run(capsys, "render", str(write_config(tmp_path, data)), "--output-dir", str(target))
    assert code == 0 and "removed" in err
    names = {p.name for p in target.iterdir()}
    assert "README.md" in names and not any("team-b" in name for name in names)


def test_config_cli_render_refuses_a_file_as_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    existing = tmp_path / "out.yaml"
    existing.write_text("")
    code, out, err = run(capsys, "render", str(EXAMPLES / "config.yaml"), "--output-dir", str(existing))
    assert (code, out) == (2, "") and "not a directory" in err


def test_config_cli_render_invalid_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_config(tmp_path, edited({"kueue": {"sharing": "greedy"}}))
    code, out, err = run(capsys, "render", str(path))
    assert (code, out) == (2, "")
    assert "kueue.sharing: must be 'fair', 'classic' or 'none'" in err


@pytest.mark.parametrize("output", ["toml", "rendered/", "json/"])
def test_config_cli_render_never_reads_a_format_as_a_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "render", str(EXAMPLES / "config.yaml"), "-o", output)
    assert (code, out) == (2, "") and f"-o {output}: not an output format" in err and "--output-dir" in err
    assert list(tmp_path.iterdir()) == []


def test_config_cli_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schema")
    assert code == 0 and out == config_schema_text()


def test_config_cli_validate_json_reports_every_error_with_its_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "validate", str(EXAMPLES / "config.yaml"), "-o", "json")
    assert code == 0
    assert json.loads(out) == {
        "file": str(EXAMPLES / "config.yaml"),
        "valid": True,
        "errors": [],
        "warnings": [],
        "teams": 2,
        "gpuTypes": 1,
        "gpus": 40,
    }
    path = write_config(tmp_path, edited({"kueue": {"sharing": "greedy"}, "teams": {"team-a": {"namespace": "x"}}}))
    code, out, err = run(capsys, "validate", str(path), "-o", "json")
    report = json.loads(out)
    assert (code, err, report["valid"]) == (2, "", False)
    assert {(e["path"], e["severity"]) for e in report["errors"]} >= {
        ("kueue.sharing", "error"),
        ("teams.team-a.namespace", "error"),
    }
    assert all(isinstance(e["line"], int) for e in report["errors"])
    code, shown, _ = run(capsys, "validate", str(path), "-o", "yaml")
    assert code == 2 and YAML(typ="safe").load(shown) == report  # the same report, as YAML
    code, _, err = run(capsys, "validate", str(path), "-o", "wide")
    assert code == 2 and "-o wide: not an output format" in err

"""The controller's config file: defaults, values, and errors that name file, line and setting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from model_numbers import concrete, numeric_paths, replaced

from konduktor.config.findings import ConfigError
from konduktor.config.load import read_yaml
from konduktor.errors import UsageError
from konduktor.health.settings import HealthSettings, load_settings


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "health.yaml"
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    assert raised.value.exit_code == 2
    return [f.located(str(path)) for f in raised.value.findings]


def test_empty_file_gives_the_defaults(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, "# nothing set\n")) == HealthSettings()


def test_values_are_read(tmp_path: Path) -> None:
    settings = load_settings(
        write(
            tmp_path,
            """\
dry_run: true
allow_noexecute: true
breaker:
  max_fraction: 0.25
  max_nodes: 5
loki:
  url: http://loki.monitoring:3100/
  query: '{job="kernel"} |= "NVRM"'
  node_label: node
prometheus:
  url: https://prometheus.example
""",
        )
    )
    assert settings.dry_run and settings.allow_noexecute
    assert (settings.breaker.max_fraction, settings.breaker.max_nodes) == (0.25, 5)
    assert settings.breaker.window_seconds == 600  # untouched default in a partly set section
    assert settings.loki is not None and settings.loki.url == "http://loki.monitoring:3100"
    assert settings.prometheus is not None and settings.prometheus.url == "https://prometheus.example"


def test_every_error_is_reported_with_its_line_in_file_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
dry_run: maybe
breaker:
  max_fraction: 2
  max_nodes: 0
loki:
  url: ftp://loki
prometheus: {}
""",
    )
    assert problems(path) == [
        f"{path}:1: dry_run: must be true or false (got the string 'maybe')",
        f"{path}:3: breaker.max_fraction: must be <= 1.0",
        f"{path}:4: breaker.max_nodes: must be >= 1",
        f"{path}:5: loki.query: required but missing",
        f"{path}:5: loki.node_label: required but missing",
        f"{path}:6: loki.url: must be an http:// or https:// URL",
        f"{path}:7: prometheus.url: required but missing",
    ]


def test_unknown_keys_get_a_did_you_mean(tmp_path: Path) -> None:
    path = write(tmp_path, "breaker:\n  window_second: 60\ndryrun: true\nwhatever: 1\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    assert [(f.located(str(path)), f.hint) for f in raised.value.findings] == [
        (f"{path}:2: breaker.window_second: unknown key", "did you mean 'window_seconds'?"),
        (f"{path}:3: dryrun: unknown key", "did you mean 'dry_run'?"),
        (f"{path}:4: whatever: unknown key", "valid keys here: " + ", ".join(HealthSettings.model_fields)),
    ]
    # Printed the installer's way: a count, then every error with its hint.
    assert raised.value.message == f"{path}: 3 errors"
    assert raised.value.detail is not None and "  hint: did you mean 'dry_run'?" in raised.value.detail


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "dry_run: true\nbreaker: [1\n")
    (text,) = problems(path)
    assert text.startswith(f"{path}:3: invalid YAML")


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    assert problems(write(tmp_path, "- dry_run\n")) == [
        f"{tmp_path / 'health.yaml'}:1: the top level must be a mapping of settings"
    ]


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as raised:
        load_settings(tmp_path / "absent.yaml")
    assert raised.value.exit_code == 2 and "absent.yaml" in raised.value.message


# Every section set, so that every numeric setting has a place in the file.
FULL: dict[str, Any] = {
    "dedup_window_seconds": 180,
    "cooldown_seconds": 900,
    "gpu_lost_grace_seconds": 60,
    "xid_confirmation_seconds": 600,
    "max_concurrent_requalifications": 2,
    "breaker": {"max_fraction": 0.1, "max_nodes": 20, "window_seconds": 600},
    "loki": {
        "url": "http://loki:3100",
        "query": '{job="kernel"}',
        "node_label": "node",
        "lookback_seconds": 300,
        "late_seconds": 10,
        "limit": 1000,
    },
    "prometheus": {"url": "http://prometheus:9090", "window_seconds": 120},
    "gpu_types": {"h100": {"product": "NVIDIA-H100-80GB-HBM3", "gpus_per_node": 8}},
    "poll_seconds": 5,
    "full_pass_seconds": 300,
    "lease_seconds": 15,
    "node_concurrency": 32,
}
NUMBERS = sorted(numeric_paths(HealthSettings), key=str)


def test_every_section_set_is_valid(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, yaml.safe_dump(FULL))).loki is not None
    assert len(NUMBERS) >= 14 and ("poll_seconds",) in NUMBERS


def test_poll_seconds_true_is_not_a_number(tmp_path: Path) -> None:
    path = write(tmp_path, "dry_run: false\npoll_seconds: true\n")
    assert problems(path) == [f"{path}:2: poll_seconds: must be a number (got true)"]


@pytest.mark.parametrize("pattern", NUMBERS, ids=lambda p: ".".join(map(str, p)))
@pytest.mark.parametrize("value", [True, False, "5", [5]])
def test_numbers_are_strict(tmp_path: Path, pattern: tuple[str | int, ...], value: object) -> None:
    setting = concrete(pattern, FULL)
    text = yaml.safe_dump(replaced(FULL, setting, value))
    _, lines = read_yaml(text, "health.yaml")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    [finding] = raised.value.findings
    assert (finding.path, finding.line) == (setting, lines[setting])
    assert finding.message.startswith("must be a"), finding.message


@pytest.mark.parametrize("text", ["poll_seconds: .inf", "breaker: {window_seconds: .nan}", "cooldown_seconds: 1e999"])
def test_numbers_are_finite(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text + "\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    [finding] = raised.value.findings
    assert finding.line == 1 and finding.hint


def test_whole_numbers_fill_number_settings(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "poll_seconds: 2\nbreaker: {max_fraction: 1}\n"))
    assert (settings.poll_seconds, settings.breaker.max_fraction) == (2.0, 1.0)

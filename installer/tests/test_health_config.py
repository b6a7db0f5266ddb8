"""config.yaml's `health:` section: checked with its lines, turned into the health controller's settings, and
carried by the charts into the settings file the controller loads, unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from quota_samples import EXAMPLES, edited, write_config
from ruamel.yaml import YAML
from support import helm, render_umbrella, run, values

from konduktor.config.findings import ConfigError
from konduktor.config.load import parse_config
from konduktor.config.model import Config, Health
from konduktor.health.settings import AffectedWorkSettings, BreakerSettings, HealthSettings, load_settings
from konduktor.helm.values import controller_settings, umbrella_values
from konduktor.kube.documents import load_documents
from konduktor.ops.chart import chart_for
from konduktor.quotas.manifests import to_yaml

# Every field of the section, none at its default, so that a field lost on the way shows.
EVERY_FIELD: dict[str, Any] = {
    "dryRun": True,
    "affectedWork": {"unusable": "drain", "degraded": "none", "lostGpuUnattributed": "drain"},
    "breaker": {"maxFraction": 0.25, "maxNodes": 3, "windowSeconds": 120},
    "requalification": {"tier": "quick", "maxConcurrent": 4, "cooldownSeconds": 60, "priorityClass": "burnin-low"},
    "allowNoExecute": False,
    "quarantineUnknownXids": True,
    "kernelXidsNeedDcgm": False,
}
# What the controller must read from it.
EXPECTED = {
    "dry_run": True,
    "affected_work": AffectedWorkSettings(unusable="drain", degraded="none", lost_gpu_unattributed="drain"),
    "breaker": BreakerSettings(max_fraction=0.25, max_nodes=3, window_seconds=120),
    "max_concurrent_requalifications": 4,
    "cooldown_seconds": 60,
    "allow_noexecute": False,
    "quarantine_unknown": True,
    "kernel_xids_need_dcgm": False,
}


def config_with(health: dict[str, Any]) -> Config:
    return Config.model_validate(edited({"health": health}))


def read(settings: HealthSettings) -> dict[str, Any]:
    return {key: getattr(settings, key) for key in EXPECTED}


def test_every_field_maps_to_the_controller_setting_it_names() -> None:
    settings = HealthSettings.model_validate(controller_settings(config_with(EVERY_FIELD).health))
    assert read(settings) == EXPECTED
    assert (settings.requalification.tier, settings.requalification.priority_class) == ("quick", "burnin-low")


# examples/config.yaml's GPU types, which `up` passes to the controller whatever its `health:` section says.
GPU_TYPES = {"h100": {"product": "NVIDIA-H100-80GB-HBM3", "gpus_per_node": 10}}


def test_an_absent_section_sets_nothing_so_the_charts_values_stay() -> None:
    assert controller_settings(Health()) == {}
    core = umbrella_values(config_with({}), values())["konduktor-core"]
    assert core["controller"]["settings"] == {"gpu_types": GPU_TYPES}  # the config's GPU types only
    # One field given: only that one, in its section.
    assert controller_settings(config_with({"breaker": {"maxNodes": 5}}).health) == {"breaker": {"max_nodes": 5}}


def test_requalification_off_is_no_burn_in_slot() -> None:
    settings = controller_settings(config_with({"requalification": {"enabled": False}}).health)
    assert settings == {"max_concurrent_requalifications": 0}


def test_the_umbrella_carries_the_section_into_the_settings_file_the_controller_loads(tmp_path: Path) -> None:
    """config.yaml -> umbrella values -> helm template (the chart's schema and template) -> health.yaml ->
    load_settings: what the controller reads is what the config said."""
    values_file = tmp_path / "values.yaml"
    YAML().dump(umbrella_values(config_with(EVERY_FIELD), values()), values_file)
    result = render_umbrella("--values", str(values_file))
    assert result.returncode == 0, result.stderr
    settings = loaded_settings(result.stdout, tmp_path)
    assert read(settings) == EXPECTED
    assert (settings.requalification.tier, settings.requalification.priority_class) == ("quick", "burnin-low")
    assert settings.loki is not None  # the umbrella's own settings are kept beside the config's


def test_on_the_simulated_cluster_the_section_reaches_konduktor_core(tmp_path: Path) -> None:
    """`up` on the simulated cluster installs konduktor-core alone, with the sim's values: the config's settings
    still win (the sim's values turn dry-run on)."""
    chart, chart_values = chart_for(True, config_with({"dryRun": False, "breaker": {"maxNodes": 2}}), {})
    values_file = tmp_path / "values.yaml"
    YAML().dump(chart_values, values_file)
    result = helm("template", "konduktor", str(chart), "--namespace", "konduktor-system", "--values", str(values_file))
    assert result.returncode == 0, result.stderr
    settings = loaded_settings(result.stdout, tmp_path)
    assert settings.dry_run is False and settings.breaker.max_nodes == 2


def loaded_settings(manifests: str, directory: Path) -> HealthSettings:
    """The controller's settings as it loads them from the rendered ConfigMap's health.yaml."""
    [config_map] = [o for o in load_documents(manifests) if o["kind"] == "ConfigMap" and "health.yaml" in o["data"]]
    path = directory / "health.yaml"
    path.write_text(config_map["data"]["health.yaml"], encoding="utf-8")
    return load_settings(path)


CONFIG_LINES = to_yaml([edited({})]).removeprefix("---\n")


@pytest.mark.parametrize(
    ("section", "path", "complaint"),
    [
        ("  dryRun: maybe\n", "health.dryRun", "must be true or false (got the string 'maybe')"),
        ("  affectedWork: {unusable: evict}\n", "health.affectedWork.unusable", "'requeue', 'drain' or 'none'"),
        ("  breaker: {maxFraction: 1.5}\n", "health.breaker.maxFraction", "must be <= 1.0"),
        ("  breaker: {maxNodes: 0}\n", "health.breaker.maxNodes", "must be >= 1"),
        ("  requalification: {tier: soak}\n", "health.requalification.tier", "'quick', 'standard' or 'full'"),
        (
            "  requalification: {maxConcurrent: '2'}\n",
            "health.requalification.maxConcurrent",
            "must be a whole number (got the string '2')",
        ),
        ("  dryrun: true\n", "health.dryrun", "unknown key"),
    ],
)
def test_bad_values_are_reported_with_their_line_and_field(section: str, path: str, complaint: str) -> None:
    text = CONFIG_LINES + "health:\n" + section
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "config.yaml")
    [finding] = raised.value.findings
    assert finding.located("config.yaml").startswith(f"config.yaml:{text.count(chr(10))}: {path}: ")
    assert complaint in finding.message + (finding.hint or "")


def test_a_misspelt_key_suggests_the_right_one() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(CONFIG_LINES + "health:\n  dryrun: true\n", "config.yaml")
    assert raised.value.findings[0].hint == "did you mean 'dryRun'?"


def test_requalification_off_with_its_settings_given_is_an_error() -> None:
    text = CONFIG_LINES + "health:\n  requalification:\n    enabled: false\n    tier: full\n"
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "config.yaml")
    [finding] = raised.value.findings
    assert finding.rule == "L18" and finding.line == text.count("\n")
    assert finding.located("config.yaml").endswith(
        "health.requalification.tier: requalification is turned off (enabled: false), so tier would do nothing"
    )


@pytest.mark.parametrize(("policy", "warned"), [("drain", True), ("none", True), ("requeue", False)])
def test_noexecute_with_a_policy_that_keeps_pods_is_a_warning(policy: str, warned: bool) -> None:
    text = CONFIG_LINES + f"health:\n  allowNoExecute: true\n  affectedWork:\n    unusable: {policy}\n"
    loaded = parse_config(text, "config.yaml")
    found = [f for f in loaded.warnings if f.rule == "L18"]
    assert bool(found) == warned
    if warned:
        assert found[0].line == text.count("\n") and "evicts the pods" in found[0].message


def test_validate_reports_bad_health_values_with_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_config(tmp_path, edited({"health": {"breaker": {"maxNodes": 0}, "dryRun": "yes"}}))
    code, out, err = run(capsys, "validate", str(path))
    assert (code, out) == (2, "")
    assert f"{path}:" in err and "health.breaker.maxNodes: " in err and "health.dryRun: " in err

    code, out, _ = run(capsys, "validate", "-o", "json", str(path))
    report = json.loads(out)
    assert code == 2 and report["valid"] is False
    assert sorted(e["path"] for e in report["errors"]) == ["health.breaker.maxNodes", "health.dryRun"]
    assert all(isinstance(e["line"], int) for e in report["errors"])


def test_render_prints_the_chart_values_up_passes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_config(tmp_path, edited({"health": EVERY_FIELD}))
    code, out, _ = run(capsys, "render", "--chart-values", str(path))
    assert code == 0
    printed = YAML(typ="safe").load(out)
    config = config_with(EVERY_FIELD)
    assert printed == umbrella_values(config, values())
    assert printed["konduktor-core"] == {
        "policies": {"priorityClasses": list(config.priorities)},
        "controller": {"settings": {**controller_settings(config.health), "gpu_types": GPU_TYPES}},
    }


def test_the_examples_commented_section_is_valid_and_shows_the_controllers_defaults() -> None:
    text = (EXAMPLES / "config.yaml").read_text(encoding="utf-8")
    start = text.index("# health:")
    section = "\n".join(line.removeprefix("# ") for line in text[start:].splitlines())
    config = parse_config(text[:start] + section + "\n", "config.yaml").config
    assert config.health.dry_run is False  # the section was read, not left out
    shown = HealthSettings.model_validate(controller_settings(config.health))
    assert shown == HealthSettings()

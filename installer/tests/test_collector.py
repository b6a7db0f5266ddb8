"""The umbrella's collector configuration is loaded by the collector it deploys: built with the collector builder
from exactly the components that configuration uses, at the release in the umbrella's image list."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest
import yaml
from otelcol import MANIFEST, UMBRELLA_VALUES, collector, component_type, umbrella_config, validate

pytestmark = pytest.mark.slow  # builds the collector (Go) on a cold cache

KINDS = ("receivers", "processors", "exporters", "extensions")


@pytest.fixture(scope="module")
def otelcol() -> Path:
    return collector()


def test_the_collector_is_the_release_the_umbrella_deploys() -> None:
    images = (UMBRELLA_VALUES.parent / "images.txt").read_text().split()
    [image] = [i for i in images if i.startswith("otel/opentelemetry-collector-k8s:")]
    assert image.rpartition(":")[2] == yaml.safe_load(MANIFEST.read_text())["dist"]["version"]


def test_the_collector_has_exactly_the_components_the_configuration_uses(otelcol: Path, tmp_path: Path) -> None:
    listed = subprocess.run([str(otelcol), "components"], capture_output=True, text=True, check=True, timeout=60)
    compiled = yaml.safe_load(listed.stdout)
    config = umbrella_config(tmp_path)
    for kind in KINDS:
        used = {component_type(name) for name in config.get(kind, {})}
        assert {component_type(c["name"]) for c in compiled[kind] or []} == used, kind


def test_the_umbrellas_configuration_is_valid(otelcol: Path, tmp_path: Path) -> None:
    result = validate(otelcol, umbrella_config(tmp_path), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_configuration_is_refused_with_the_reason(otelcol: Path, tmp_path: Path) -> None:
    config = copy.deepcopy(umbrella_config(tmp_path))
    config["receivers"]["filelog/kernel"]["start_at"] = "middle"
    result = validate(otelcol, config, tmp_path)
    assert result.returncode != 0
    assert "invalid start_at location 'middle'" in result.stderr

    config = umbrella_config(tmp_path)
    config["service"]["pipelines"]["logs/kernel"]["exporters"] = ["otlphttp/nowhere"]
    result = validate(otelcol, config, tmp_path)
    assert result.returncode != 0 and "otlphttp/nowhere" in result.stderr

"""The GPU Operator's values for the config's sharing groups: the MIG strategy, mig-manager's layouts and the device
plugin's configs, in the pinned chart's keys (docs/design/gpu-sharing.md#the-gpu-operators-values)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import run

from konduktor.config.load import load_config, parse_config
from konduktor.helm.values import (
    DEVICE_PLUGIN_CONFIG_MAP,
    MIG_CONFIG_MAP,
    gpu_operator_values,
    umbrella_defaults,
    umbrella_values,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design" / "gpu-sharing.md"

# The keys these values set, as NVIDIA/gpu-operator v26.7.0's chart has them (deployments/gpu-operator/values.yaml
# lines 134-135, 271-279 and 419-428; its templates mig_config.yaml, plugin_config.yaml and clusterpolicy.yaml read
# them): the chart cannot be downloaded here, so they are stored, with their source lines in the design page.
# `data` is a free-form map (`data: {}` upstream): the ConfigMap's keys.
GPU_OPERATOR_KEYS = {
    ("mig", "strategy"),
    ("migManager", "config", "name"),
    ("migManager", "config", "create"),
    ("migManager", "config", "default"),
    ("migManager", "config", "data"),
    ("devicePlugin", "config", "name"),
    ("devicePlugin", "config", "create"),
    ("devicePlugin", "config", "default"),
    ("devicePlugin", "config", "data"),
}

SHARED = textwrap.dedent("""\
    version: 1
    cluster: {name: gpu-lab}
    gpuTypes:
      h100:
        product: NVIDIA-H100-80GB-HBM3
        nodes: 4
        gpusPerNode: 8
        nodeAllocatable: {cpu: "200", memory: 1964Gi}
        sharing:
          h100-mig: {nodes: 1, mig: {3g.40gb: 1, 1g.10gb: 2, 2g.20gb: 1}}
          h100-shared: {nodes: 1, timeSlicing: {replicas: 4}}
      a100:
        product: NVIDIA-A100-SXM4-80GB
        nodes: 2
        gpusPerNode: 8
        nodeAllocatable: {cpu: "200", memory: 1964Gi}
        sharing:
          a100-mig: {nodes: 1, mig: {1g.10gb: 7}}
          a100-mps: {nodes: 1, mps: {replicas: 2}}
    teams:
      team-a:
        namespaces: [team-a]
        gpus: {h100: {quota: 16}, a100: {quota: 0}}
        slices:
          h100-mig: {mig-1g.10gb: {quota: 16}}
          h100-shared: {gpu.shared: {quota: 32}}
          a100-mig: {mig-1g.10gb: {quota: 56}}
          a100-mps: {gpu.shared: {quota: 16}}
    topology: {levels: [kubernetes.io/hostname]}
    """)


def leaves(values: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Each key path down to a leaf, or to a `data` map (free-form upstream)."""
    for key, value in values.items():
        if isinstance(value, dict) and key != "data":
            yield from leaves(value, (*path, key))
        else:
            yield (*path, key)


def test_mig_groups_get_the_mixed_strategy_and_a_layout_each_plus_all_disabled() -> None:
    values = gpu_operator_values(parse_config(SHARED).config)
    assert values["mig"] == {"strategy": "mixed"}
    config = values["migManager"]["config"]
    assert {k: config[k] for k in ("name", "create", "default")} == {
        "name": MIG_CONFIG_MAP,
        "create": True,
        "default": "all-disabled",
    }
    assert list(config["data"]) == ["config.yaml"]
    parted = yaml.safe_load(config["data"]["config.yaml"])
    assert parted == {
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "h100-mig": [
                {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}
            ],
            "a100-mig": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        },
    }


def test_time_slicing_and_mps_groups_get_a_device_plugin_config_each() -> None:
    config = gpu_operator_values(parse_config(SHARED).config)["devicePlugin"]["config"]
    assert {k: config[k] for k in ("name", "create", "default")} == {
        "name": DEVICE_PLUGIN_CONFIG_MAP,
        "create": True,
        "default": "",  # no label: no config, whole GPUs
    }
    assert sorted(config["data"]) == ["a100-mps", "h100-shared"]
    shared = {"renameByDefault": True, "failRequestsGreaterThanOne": True}
    assert yaml.safe_load(config["data"]["h100-shared"]) == {
        "version": "v1",
        "sharing": {"timeSlicing": {**shared, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
    }
    assert yaml.safe_load(config["data"]["a100-mps"]) == {
        "version": "v1",
        "sharing": {"mps": {**shared, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}},
    }


def test_only_the_ways_a_config_uses_are_told() -> None:
    only_ts = SHARED.replace("h100-mig: {nodes: 1, mig: {3g.40gb: 1, 1g.10gb: 2, 2g.20gb: 1}}", "")
    only_ts = only_ts.replace("a100-mig: {nodes: 1, mig: {1g.10gb: 7}}", "")
    only_ts = only_ts.replace("h100-mig: {mig-1g.10gb: {quota: 16}}", "").replace(
        "a100-mig: {mig-1g.10gb: {quota: 56}}", ""
    )
    values = gpu_operator_values(parse_config(only_ts).config)
    assert set(values) == {"devicePlugin"}  # the chart's own MIG strategy and mig-manager settings stand


def test_a_config_without_sharing_gives_exactly_the_values_it_gave_before() -> None:
    example = load_config(EXAMPLES / "config.yaml").config
    assert gpu_operator_values(example) == {}
    values = umbrella_values(example, umbrella_defaults())
    assert set(values) == {"kube-prometheus-stack", "konduktor-core", "kueue"}


def test_the_umbrella_passes_them_under_the_gpu_operator() -> None:
    config = parse_config(SHARED).config
    assert umbrella_values(config, umbrella_defaults())["gpu-operator"] == gpu_operator_values(config)


def test_every_key_set_is_one_of_the_pinned_charts_recorded_in_the_design_page() -> None:
    values = gpu_operator_values(parse_config(SHARED).config)
    assert set(leaves(values)) == GPU_OPERATOR_KEYS
    page = DESIGN.read_text()
    for key in GPU_OPERATOR_KEYS:
        assert f"`{'.'.join(key)}`" in page, f"{'.'.join(key)} is not recorded in {DESIGN.name}"


def test_the_example_validates_cleanly_and_its_values_name_its_groups() -> None:
    loaded = load_config(EXAMPLES / "shared-gpus.yaml")
    assert loaded.warnings == []
    config = loaded.config
    groups = [name for name, *_ in config.sharing_groups()]
    assert groups
    values = gpu_operator_values(config)
    layouts = set(yaml.safe_load(values["migManager"]["config"]["data"]["config.yaml"])["mig-configs"])
    plugin = set(values["devicePlugin"]["config"]["data"])
    assert layouts | plugin == {*groups, "all-disabled"}


def test_render_chart_values_shows_them(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", str(EXAMPLES / "shared-gpus.yaml"), "--chart-values")
    assert code == 0
    rendered = yaml.safe_load(out)
    assert rendered["gpu-operator"] == gpu_operator_values(load_config(EXAMPLES / "shared-gpus.yaml").config)
    code, out, _ = run(capsys, "render", str(EXAMPLES / "config.yaml"), "--chart-values")
    assert "gpu-operator" not in yaml.safe_load(out)

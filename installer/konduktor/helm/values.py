"""Umbrella chart values a config implies (pure).

Kueue's chart takes its whole manager Configuration as one YAML string, so the config's Kueue settings (fair
sharing, waitForPodsReady, excluded resources) are merged into the umbrella's string, section by section.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from konduktor.alerts.render import kube_prometheus_stack_values
from konduktor.config.model import Config
from konduktor.quotas.render import kueue_manager_settings


def merge_sections(base: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` over `base`, merged one level deep (a section such as `metrics` keeps its other keys)."""
    merged = copy.deepcopy(base)
    for section, values in settings.items():
        if isinstance(values, dict) and isinstance(merged.get(section), dict):
            merged[section] = {**merged[section], **values}
        else:
            merged[section] = copy.deepcopy(values)
    return merged


def umbrella_values(config: Config, chart_values: dict[str, Any]) -> dict[str, Any]:
    """Values to pass on top of the chart's (and an environment's): Kueue's Configuration with the config's
    settings, and Alertmanager's routes and receivers from its `alerts:` section. `chart_values` are the chart
    defaults merged with the environment's values files."""
    values: dict[str, Any] = {"kube-prometheus-stack": kube_prometheus_stack_values(config)}
    manager = chart_values.get("kueue", {}).get("managerConfig", {}).get("controllerManagerConfigYaml")
    if manager:
        configuration = merge_sections(yaml.safe_load(manager), kueue_manager_settings(config))
        text = yaml.safe_dump(configuration, sort_keys=False)
        values["kueue"] = {"managerConfig": {"controllerManagerConfigYaml": text}}
    return values


def merge_values(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """Helm's rule for values files: maps merge key by key, everything else is replaced."""
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged

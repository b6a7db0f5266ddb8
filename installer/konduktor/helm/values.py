"""Umbrella chart values a config implies (pure).

Kueue's chart takes its whole manager Configuration as one YAML string, so the config's Kueue settings (fair
sharing, waitForPodsReady, excluded resources) are merged into the umbrella's string, section by section.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from konduktor.alerts.render import kube_prometheus_stack_values
from konduktor.config.model import Config, Health, SharingGroup
from konduktor.gpu.sharing import MIG_DISABLED_LAYOUT
from konduktor.paths import product_dir
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


def controller_settings(health: Health) -> dict[str, Any]:
    """The health controller's settings (its config file, konduktor-core's `controller.settings`) that the
    config's `health:` section gives. Only what the section sets: the rest keeps the chart's values (and those of
    an environment's values files), whose defaults are the controller's own."""
    requalification = health.requalification
    given: dict[str, Any] = {
        "dry_run": health.dry_run,
        "allow_noexecute": health.allow_no_execute,
        "quarantine_unknown": health.quarantine_unknown_xids,
        "kernel_xids_need_dcgm": health.kernel_xids_need_dcgm,
        "cooldown_seconds": requalification.cooldown_seconds,
        # No Job slot is no requalification: the controller has no other switch for it.
        "max_concurrent_requalifications": 0 if requalification.enabled is False else requalification.max_concurrent,
        "breaker": {
            "max_fraction": health.breaker.max_fraction,
            "max_nodes": health.breaker.max_nodes,
            "window_seconds": health.breaker.window_seconds,
        },
        "affected_work": {
            "unusable": health.affected_work.unusable,
            "degraded": health.affected_work.degraded,
            "lost_gpu_unattributed": health.affected_work.lost_gpu_unattributed,
        },
        "requalification": {"tier": requalification.tier, "priority_class": requalification.priority_class},
    }
    return _without_unset(given)


def _without_unset(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` without the None values and the sections left empty."""
    kept: dict[str, Any] = {}
    for key, value in settings.items():
        setting = (_without_unset(value) or None) if isinstance(value, dict) else value
        if setting is not None:
            kept[key] = setting
    return kept


def core_values(config: Config) -> dict[str, Any]:
    """konduktor-core's values the config implies: the priority classes its admission policy admits (the config's
    WorkloadPriorityClasses, which the quotas render), the controller settings of its `health:` section with
    its GPU types (a node of a type with fewer GPUs than `gpusPerNode` has lost one), the image of its
    `image:` section (what it sets), and on a fleet's manager (a config with `clusters:`) the workers whose Events
    to job owners the relay copies there."""
    settings = controller_settings(config.health)
    settings["gpu_types"] = {
        name: {"product": gpu.product, "gpus_per_node": gpu.gpus_per_node} for name, gpu in config.gpu_types.items()
    }
    controller: dict[str, Any] = {"settings": settings}
    if image := config.image.chart_values():
        controller["image"] = image
    values = {"policies": {"priorityClasses": list(config.priorities)}, "controller": controller}
    if config.clusters is not None:
        values["fleetEvents"] = {"workers": [worker.name for worker in config.clusters.workers]}
    return values


def controller_image(core_chart_values: dict[str, Any], app_version: str) -> str:
    """The image konduktor-core runs with these values (its defaults merged in), as its `konduktor-core.image`
    template writes it: repository@digest, else repository:tag, the tag defaulting to the chart's appVersion."""
    image = core_chart_values.get("controller", {}).get("image", {})
    if image.get("digest"):
        return f"{image['repository']}@{image['digest']}"
    return f"{image['repository']}:{image.get('tag') or app_version}"


def umbrella_values(
    config: Config, chart_values: dict[str, Any], kueue_settings: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Values to pass on top of the chart's (and an environment's): Kueue's Configuration with the config's
    settings (or `kueue_settings`), Alertmanager's routes and receivers from its `alerts:` section, and the health
    controller's settings from its `health:` section. `chart_values` are the chart defaults merged with the
    environment's values files."""
    values: dict[str, Any] = {"kube-prometheus-stack": kube_prometheus_stack_values(config)}
    values["konduktor-core"] = core_values(config)
    if operator := gpu_operator_values(config):
        values["gpu-operator"] = operator
    manager = chart_values.get("kueue", {}).get("managerConfig", {}).get("controllerManagerConfigYaml")
    if manager:
        settings = kueue_manager_settings(config) if kueue_settings is None else kueue_settings
        configuration = merge_sections(yaml.safe_load(manager), settings)
        text = yaml.safe_dump(configuration, sort_keys=False)
        values["kueue"] = {"managerConfig": {"controllerManagerConfigYaml": text}}
    return values


# The ConfigMaps the GPU Operator's chart creates from the sharing groups (in the release namespace): mig-manager's
# layouts and the device plugin's named configs.
MIG_CONFIG_MAP = "konduktor-mig-layouts"
DEVICE_PLUGIN_CONFIG_MAP = "konduktor-device-plugin-sharing"


def gpu_operator_values(config: Config) -> dict[str, Any]:
    """The GPU Operator's values for the config's sharing groups (docs/design/gpu-sharing.md#the-gpu-operators-values);
    none for a config without groups, so that the chart's own values stand.

    MIG groups: the `mixed` strategy and mig-manager's layouts, one per group named after it plus `all-disabled`
    (the default of a node without the label, and the layout `up` gives a node that leaves a group): a custom
    ConfigMap replaces the operator's own layouts. Time-slicing and MPS groups: one device plugin config each, named
    after the group; a node without the label gets none (the plugin's flags: whole GPUs)."""
    groups = [(name, group) for name, _, _, group in config.sharing_groups()]
    if not groups:
        return {}
    values: dict[str, Any] = {}
    layouts = {name: group.mig for name, group in groups if group.mig is not None}
    if layouts:
        values["mig"] = {"strategy": "mixed"}
        values["migManager"] = {
            "config": {
                "name": MIG_CONFIG_MAP,
                "create": True,
                "default": MIG_DISABLED_LAYOUT,
                "data": {"config.yaml": mig_parted_config(layouts)},
            }
        }
    shared = {name: device_plugin_config(group) for name, group in groups if group.mig is None}
    if shared:
        values["devicePlugin"] = {
            "config": {"name": DEVICE_PLUGIN_CONFIG_MAP, "create": True, "default": "", "data": shared}
        }
    return values


def mig_parted_config(layouts: dict[str, dict[str, int]]) -> str:
    """mig-parted's config file (`version: v1`, `mig-configs`): every GPU of a node with the group's label gets the
    group's layout; `all-disabled` turns MIG off."""
    configs: dict[str, Any] = {MIG_DISABLED_LAYOUT: [{"devices": "all", "mig-enabled": False}]}
    for name, layout in layouts.items():
        configs[name] = [{"devices": "all", "mig-enabled": True, "mig-devices": dict(sorted(layout.items()))}]
    return yaml.safe_dump({"version": "v1", "mig-configs": configs}, sort_keys=False)


def device_plugin_config(group: SharingGroup) -> str:
    """The device plugin's config file for a time-slicing or MPS group: each GPU as `replicas` renamed
    nvidia.com/gpu.shared, a pod asking for more than one refused."""
    way = "timeSlicing" if group.time_slicing is not None else "mps"
    sharing = {
        way: {
            "renameByDefault": True,
            "failRequestsGreaterThanOne": True,
            "resources": [{"name": "nvidia.com/gpu", "replicas": group.replicas}],
        }
    }
    return yaml.safe_dump({"version": "v1", "sharing": sharing}, sort_keys=False)


def merge_values(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """Helm's rule for values files: maps merge key by key, everything else is replaced."""
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def kueue_frameworks() -> list[str]:
    """The Kueue integrations the umbrella chart runs (its Kueue Configuration's integrations.frameworks)."""
    return list(umbrella_kueue_configuration()["integrations"]["frameworks"])


def umbrella_kueue_configuration() -> dict[str, Any]:
    """The Kueue Configuration the umbrella chart ships (kueue.managerConfig.controllerManagerConfigYaml)."""
    configuration: dict[str, Any] = yaml.safe_load(
        umbrella_defaults()["kueue"]["managerConfig"]["controllerManagerConfigYaml"]
    )
    return configuration


def umbrella_kueue_feature_gates() -> dict[str, bool]:
    """The Kueue feature gates the umbrella chart sets (kueue.controllerManager.featureGates): gate -> enabled."""
    gates = umbrella_defaults()["kueue"]["controllerManager"]["featureGates"]
    return {gate["name"]: bool(gate["enabled"]) for gate in gates}


def umbrella_defaults() -> dict[str, Any]:
    """The umbrella chart's own values.yaml, as the wheel carries it."""
    loaded: dict[str, Any] = yaml.safe_load(
        (product_dir("charts") / "konduktor" / "values.yaml").read_text(encoding="utf-8")
    )
    return loaded

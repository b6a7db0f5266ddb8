"""The chart `up` and `plan` install and its values: on the simulated cluster Konduktor's own chart, else the
umbrella; the config's settings merged over the values files; and the image the release runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from konduktor.config.model import Config
from konduktor.errors import UsageError
from konduktor.helm.release import CHARTS
from konduktor.helm.values import controller_image, core_values, merge_values, umbrella_values
from konduktor.kube.documents import load_documents
from konduktor.tools.catalog import load_tools


def skipped_on_sim() -> dict[str, str]:
    """What the umbrella installs that the simulated cluster cannot run, and why: its fake nodes run no containers,
    and Kueue (the version the tools pin) already runs beside its control plane."""
    return {
        "gpu-operator": "no real GPUs or drivers on fake nodes",
        "network-operator": "no NICs on fake nodes",
        "dcgm-exporter": "no GPUs to measure",
        "kube-prometheus-stack": "fake nodes run no containers",
        "loki": "fake nodes run no containers",
        "opentelemetry-collector": "fake nodes run no containers",
        "kueue": f"the simulated cluster runs Kueue {load_tools()['kueue'].version} as a local process",
    }


def chart_for(
    simulated: bool, config: Config, extra: dict[str, Any], kueue_settings: dict[str, Any] | None = None
) -> tuple[Path, dict[str, Any]]:
    """The chart and the values to install.

    On the simulated cluster only Konduktor's own chart (fake nodes run no GPU operator, and Kueue runs beside
    the control plane); else the umbrella, with the config's Kueue settings (or `kueue_settings`, a fleet
    manager's) merged into Kueue's Configuration. The config's `health:` settings go to konduktor-core's controller
    settings in both, over the values files.
    """
    if simulated:
        core = CHARTS / "konduktor-core"
        values = merge_values(load_documents(core / "values-sim.yaml")[0], extra)
        return core, merge_values(values, core_values(config))
    umbrella = CHARTS / "konduktor"
    if not (umbrella / "charts").is_dir():
        raise UsageError(
            "the umbrella chart's dependencies are not downloaded",
            hint=f"run `helm dependency build {umbrella}` where the chart repositories are reachable "
            "(or unpack the air-gapped chart bundle there), then re-run",
        )
    effective = merge_values(load_documents(umbrella / "values.yaml")[0], extra)
    return umbrella, merge_values(extra, umbrella_values(config, effective, kueue_settings))


def chart_image(chart: Path, chart_values: dict[str, Any]) -> str:
    """The konduktor image the release runs (health controller, capacity publisher): konduktor-core's defaults,
    the umbrella's, then the values `up` passes (values files and the config's `image:`)."""
    core = CHARTS / "konduktor-core"
    values = load_documents(core / "values.yaml")[0]
    if chart != core:
        values = merge_values(values, load_documents(chart / "values.yaml")[0].get("konduktor-core", {}))
        chart_values = chart_values.get("konduktor-core", {})
    app_version = str(load_documents(core / "Chart.yaml")[0]["appVersion"])
    return controller_image(merge_values(values, chart_values), app_version)

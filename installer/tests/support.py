"""Helpers several test modules share, so that no test module imports another: running the CLI as a user does,
the charts rendered with the pinned helm (konduktor-core alone, and the umbrella with konduktor-core as its only
dependency), a team's Kueue objects for the simulated cluster, and the what-if traces under data/.

Fixtures shared by several modules live in conftest.py (the session's) or in the helper module of their topic
(`sim_fixture`, `admission`, `health_cluster`, ...); config data in `quota_samples`.
"""

from __future__ import annotations

import atexit
import copy
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from konduktor.cli.main import main
from konduktor.helm.release import CHARTS
from konduktor.kube.documents import load_generated
from konduktor.tools.toolbox import Toolbox
from konduktor.vocabulary import TEAM_LABEL

UMBRELLA = CHARTS / "konduktor"
CORE = CHARTS / "konduktor-core"
NAMESPACE = "konduktor-system"  # the release's namespace, as `up` installs it
WHATIF_DATA = Path(__file__).parent / "data" / "whatif"  # the what-if traces
V1BETA2 = "kueue.x-k8s.io/v1beta2"


# --- the CLI ---------------------------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`konduktor-install ARGV` in this process: the exit code, stdout and stderr (never a traceback)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return code, captured.out, captured.err


# --- the charts, rendered with the pinned helm -----------------------------------------------------------------


def helm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Toolbox().path("helm")), *args], capture_output=True, text=True, check=False, env=env)


def render(values: Path | None = None, *extra: str) -> list[dict[str, Any]]:
    """konduktor-core's objects as `helm template` renders them (with a values file when given)."""
    args = ["template", "konduktor", str(CORE), "--namespace", NAMESPACE, *extra]
    if values:
        args += ["--values", str(values)]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return load_generated(result.stdout)


def values() -> dict[str, Any]:
    """The umbrella's values.yaml (read once a test process; a copy each time)."""
    return copy.deepcopy(_umbrella_values())


@functools.cache
def _umbrella_values() -> dict[str, Any]:
    loaded: dict[str, Any] = YAML(typ="safe").load((UMBRELLA / "values.yaml").read_text())
    return loaded


def isolated_helm_env(home: Path) -> dict[str, str]:
    """Helm with its own, empty cache, config and data: nothing from the user's helm setup takes part."""
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }


def copy_charts(destination: Path) -> Path:
    """The umbrella and konduktor-core side by side, as file://../konduktor-core expects, outside the repo."""
    for chart in (UMBRELLA, CORE):
        shutil.copytree(chart, destination / chart.name)
    return destination / UMBRELLA.name


def stripped_umbrella(destination: Path) -> Path:
    """The umbrella with konduktor-core as its only dependency: its own templates and core, without downloads."""
    chart = copy_charts(destination)
    metadata = YAML(typ="safe").load((chart / "Chart.yaml").read_text())
    metadata["dependencies"] = [d for d in metadata["dependencies"] if d["name"] == "konduktor-core"]
    YAML().dump(metadata, chart / "Chart.yaml")
    (chart / "Chart.lock").unlink()
    return chart


@functools.cache
def built_umbrella() -> Path:
    """The stripped umbrella with its dependency built, once a test process: the charts do not change during a run,
    and each test that renders them needs only `helm template`."""
    root = Path(tempfile.mkdtemp(prefix="konduktor-umbrella-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    chart = stripped_umbrella(root / "charts")
    built = helm("dependency", "build", str(chart), env=isolated_helm_env(root / "helm"))
    assert built.returncode == 0, built.stderr
    return chart


def render_umbrella(*args: str) -> subprocess.CompletedProcess[str]:
    return helm("template", "konduktor", str(built_umbrella()), "--namespace", NAMESPACE, *args)


def umbrella_objects(*args: str) -> list[dict[str, Any]]:
    """The umbrella's objects as `helm template` renders them with these arguments."""
    result = render_umbrella(*args)
    assert result.returncode == 0, result.stderr
    return load_generated(result.stdout)


def rendered_health_settings(values_file: Path | None = None) -> dict[str, Any]:
    """The health controller's settings as konduktor-core renders them inside the umbrella."""
    objects = umbrella_objects(*(["--values", str(values_file)] if values_file else []))
    [config] = [o for o in objects if o["kind"] == "ConfigMap" and "health.yaml" in o.get("data", {})]
    loaded: dict[str, Any] = YAML(typ="safe").load(config["data"]["health.yaml"])
    return loaded


# --- Kueue objects for the simulated cluster -------------------------------------------------------------------


def queue_objects(namespace: str, gpus: int) -> list[dict[str, Any]]:
    """One flavor for the H100 nodes, a ClusterQueue with `gpus` of quota, a LocalQueue `default`.

    Named apart from examples/config.yaml's objects, which other tests apply to the same cluster."""
    return [
        # A team's namespace, where the admission policies let GPU Jobs through a LocalQueue.
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {TEAM_LABEL: namespace}}},
        {
            "apiVersion": V1BETA2,
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100-plain"},
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                # the GPU nodes carry the nvidia.com/gpu taint, as GPU nodes usually do
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        {
            "apiVersion": V1BETA2,
            "kind": "ClusterQueue",
            "metadata": {"name": namespace},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "h100-plain",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "100"},
                                    {"name": "memory", "nominalQuota": "1000Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": V1BETA2,
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": namespace},
            "spec": {"clusterQueue": namespace},
        },
    ]

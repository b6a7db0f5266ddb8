"""The `sim` pytest fixture: one running simulated cluster per test session, for every suite that needs one
(installer/tests and e2e: pyproject's pytest `pythonpath` makes this module importable from both).

Clusters started by tests live in their own state directory, apart from the user's (`konduktor-install sim
up`); tool builds are shared through the cache. The fixture is never skipped: when the cluster cannot start,
every test that needs it fails with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from konduktor.health.settings import HealthSettings
from konduktor.kube.client import ApiError, Kube
from konduktor.paths import product_dir
from konduktor.sim.cluster import SimCluster
from konduktor.sim.gpus import FAULTS_ANNOTATION, LOGS_ANNOTATION
from konduktor.sim.pools import spec_from
from konduktor.vocabulary import (
    BURNIN_RESULT,
    HEALTH_TAINT_KEY,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    REQUALIFICATION_RESULT,
    REQUALIFIED_AT,
    SYSTEM_NAMESPACE,
)

# The session's cluster is the one examples/config.yaml describes: 4 nodes x 10 H100, fair sharing.
EXAMPLE = product_dir("examples") / "config.yaml"


@dataclass
class Sim:
    cluster: SimCluster
    kube: Kube

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig

    @property
    def given_kubeconfig(self) -> Path:
        """The simulated cluster's kubeconfig copied to a file of the user's: commands that are given it treat the
        cluster as any real cluster (its own file would be recognised as the simulated cluster)."""
        given = self.cluster.root / "given-kubeconfig.yaml"
        given.write_text(self.kubeconfig.read_text())
        return given


def installer_events(kube: Kube) -> list[dict[str, Any]]:
    """The Events `konduktor-install` wrote (burn-in quarantines)."""
    events = kube.list("v1", "Event", "default")
    return [e for e in events if e.get("source", {}).get("component") == "konduktor-install"]


def node(kube: Kube, name: str) -> dict[str, Any]:
    found = kube.get("v1", "Node", name)
    assert found is not None
    return found


def health_taints(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in obj["spec"].get("taints", []) if t["key"] == HEALTH_TAINT_KEY]


def patch_node(kube: Kube, name: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """A conditional merge patch computed from a fresh read of the Node, retried on conflict."""
    for _ in range(10):
        current = kube.get("v1", "Node", name)
        assert current is not None, f"no node {name}"
        patch = change(current)
        patch.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
        try:
            kube.patch("v1", "Node", name, patch)
            return
        except ApiError as problem:
            if problem.status != 409:
                raise
    raise AssertionError(f"could not patch {name}")


def release_nodes(kube: Kube, names: Sequence[str]) -> None:
    """Leave nodes as the other tests expect them: no health taint, annotation or condition, no recorded burn-in
    verdict, no injected GPU fault, no quarantine Event."""
    annotations = (QUARANTINED_AT, QUARANTINE_REASON, REQUALIFIED_AT, REQUALIFICATION_RESULT, BURNIN_RESULT)
    for name in names:
        patch_node(
            kube,
            name,
            lambda node: {
                "metadata": {"annotations": dict.fromkeys((*annotations, FAULTS_ANNOTATION, LOGS_ANNOTATION))},
                "spec": {"taints": [t for t in node["spec"].get("taints", []) if t["key"] != HEALTH_TAINT_KEY]},
            },
        )
        # An apply that names no condition removes the one this manager set.
        kube.apply_status(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {}}, "konduktor-health"
        )
    for event in installer_events(kube):
        kube.delete("v1", "Event", event["metadata"]["name"], "default")


@pytest.fixture(scope="session")
def sim() -> Iterator[Sim]:
    cluster = SimCluster("konduktor-test")
    try:  # a start that fails midway leaves no process behind either
        cluster.up(spec_from(EXAMPLE, job_seconds=2))
        with Kube(cluster.kubeconfig) as kube:
            yield Sim(cluster, kube)
    finally:
        cluster.down()


@contextmanager
def health_settings_deployed(kube: Kube) -> Iterator[Callable[[HealthSettings], None]]:
    """Deploys health controller settings as konduktor-core does (its ConfigMap, which triage, `nodes` and `status`
    read); a ConfigMap of an installed konduktor-core is set aside meanwhile and put back. The namespace stays, as
    `up` would leave it (deleting it would still be going on when a later test installs there)."""
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
    existing = kube.list("v1", "ConfigMap", SYSTEM_NAMESPACE, label_selector="app.kubernetes.io/name=konduktor-core")
    for config_map in existing:
        kube.delete("v1", "ConfigMap", config_map["metadata"]["name"], SYSTEM_NAMESPACE)

    def deployed(health: HealthSettings) -> None:
        text = yaml.safe_dump(health.model_dump(mode="json", exclude_none=True))
        ours = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "triage-test-health",
                "namespace": SYSTEM_NAMESPACE,
                "labels": {"app.kubernetes.io/name": "konduktor-core"},
            },
            "data": {"health.yaml": text},
        }
        kube.apply(ours)

    try:
        yield deployed
    finally:
        kube.delete("v1", "ConfigMap", "triage-test-health", SYSTEM_NAMESPACE)
        for config_map in existing:
            meta = config_map["metadata"]
            kept = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
            kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": kept, "data": config_map.get("data", {})})


@pytest.fixture(autouse=True)
def platform_stopped(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test on the session's cluster, konduktor-core's processes (which `up` starts there) are stopped: the
    tests that run a health controller of their own must not meet another one acting on the same nodes."""
    yield
    if "sim" in request.fixturenames:
        sim: Sim = request.getfixturevalue("sim")
        sim.cluster.platform.stop()

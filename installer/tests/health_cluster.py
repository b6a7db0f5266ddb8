"""The health controller's tests on the session cluster: its namespace, its settings and a controller in this
process, the nodes and Events it writes, and putting them back, shared by the modules that run it against the
simulated cluster (test_health_cluster.py, test_health_work_cluster.py, test_health_lost_gpu_cluster.py,
test_alert_delivery.py, test_tenancy.py, test_image.py).

The session cluster has 4 fake nodes gpu-h100-0000..0003 with 10 H100 each, tainted nvidia.com/gpu:NoSchedule.
A module that imports the fixtures `kube_with_controller_namespace` (named `kube`) and `clean` (autouse) gets the
controller's namespace for the module and the nodes reset around each test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admission import policies_lifted
from ruamel.yaml import YAML
from sim_fixture import EXAMPLE, Sim, health_taints, patch_node

from konduktor.config.load import load_config
from konduktor.errors import KonduktorError
from konduktor.health.decide import CONDITION_TYPE
from konduktor.health.leader import LEASE_API, LEASE_NAME
from konduktor.health.loop import HealthController
from konduktor.health.settings import BreakerSettings, HealthSettings, RequalificationSettings
from konduktor.kube.client import Kube
from konduktor.quotas.sync import sync_quotas
from konduktor.sim.gpus import FAULTS_ANNOTATION
from konduktor.sim.workloads import is_true
from konduktor.vocabulary import (
    HEALTH_TAINT_KEY,
    KUEUE_API,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    REQUALIFICATION_RESULT,
    REQUALIFIED_AT,
)
from konduktor.waiting import wait_until

NODES = [f"gpu-h100-{i:04d}" for i in range(4)]
NAMESPACE = "konduktor-health-test"  # the Lease and the requalification Jobs
# The controller's annotations, and the sim's fault injection for its GPU agent.
OUR_ANNOTATIONS = (QUARANTINED_AT, QUARANTINE_REASON, REQUALIFIED_AT, REQUALIFICATION_RESULT, FAULTS_ANNOTATION)
FOREIGN_TAINT = "ops.example.com/maintenance"
TEST_MANAGER = "health-test"  # the field manager this test writes node status with (as a kubelet would)
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
XID_13 = "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)"
XID_48 = (
    "NVRM: Xid (PCI:0000:5d:00): 48, pid=2001, name=python, An uncorrectable double bit error (DBE) has been detected"
)
XID_31 = (
    "NVRM: Xid (PCI:0000:9a:00): 31, pid=2002, name=python, Ch 00000010, intr 00000000. "
    "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1c_00000000. "
    "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"
)
XID_43 = "NVRM: Xid (PCI:0000:ab:00): 43, pid=2003, name=python, Ch 00000008"


def gpu_condition(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in obj["status"].get("conditions", []) if c["type"] == CONDITION_TYPE), None)


def write_order(kube: Kube, since: str, count: int) -> list[tuple[str, str]]:
    """(node, "taint" | "condition"): the first time each node showed the controller's taint and its condition, in
    the order of a Node watch from resourceVersion `since` (the order the API server made the writes in), until
    `count` of them."""
    changes: list[tuple[str, str]] = []
    stream = kube.watch("v1", "Node", since, timeout_seconds=30)
    try:
        for event in stream:
            if event["type"] != "MODIFIED":
                continue
            obj = event["object"]
            name = obj["metadata"]["name"]
            if health_taints(obj) and (name, "taint") not in changes:
                changes.append((name, "taint"))
            if gpu_condition(obj) is not None and (name, "condition") not in changes:
                changes.append((name, "condition"))
            if len(changes) == count:
                break
    finally:
        stream.close()
    return changes


def our_events(kube: Kube, name: str | None = None) -> list[dict[str, Any]]:
    events = kube.list("v1", "Event", "default")
    return [
        e
        for e in events
        if e.get("source", {}).get("component") == "konduktor-health"
        and (name is None or e["involvedObject"]["name"] == name)
    ]


def set_allocatable(kube: Kube, name: str, gpus: int) -> None:
    """What a device plugin does when a GPU falls off the bus (or comes back)."""
    kube.apply_status(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
        },
        field_manager=TEST_MANAGER,
    )


def reset_node(kube: Kube, name: str) -> None:
    set_allocatable(kube, name, 10)
    patch_node(
        kube,
        name,
        lambda n: {
            "metadata": {"annotations": dict.fromkeys(OUR_ANNOTATIONS)},
            "spec": {
                "taints": [t for t in n["spec"].get("taints", []) if t["key"] not in (HEALTH_TAINT_KEY, FOREIGN_TAINT)]
            },
        },
    )
    # An apply that no longer names the condition removes it: the controller's manager owns nothing else there.
    kube.apply_status(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {}}, "konduktor-health"
    )


def leave_cluster(kube: Kube) -> None:
    """A module's end: the nodes as found, the controller's namespace gone."""
    reset_cluster(kube)
    kube.delete("v1", "Namespace", NAMESPACE)
    # Gone, not terminating: the next module creates it again, and a terminating namespace refuses new objects.
    wait_until(f"namespace {NAMESPACE} to be deleted", lambda: kube.get("v1", "Namespace", NAMESPACE) is None)


def reset_cluster(kube: Kube) -> None:
    for name in NODES:
        reset_node(kube, name)
    for item in our_events(kube):
        kube.delete("v1", "Event", item["metadata"]["name"], "default")
    for job in kube.list("batch/v1", "Job", NAMESPACE):
        kube.delete("batch/v1", "Job", job["metadata"]["name"], NAMESPACE)
    for config_map in kube.list("v1", "ConfigMap", NAMESPACE, label_selector="konduktor.ai/burnin-run"):
        kube.delete("v1", "ConfigMap", config_map["metadata"]["name"], NAMESPACE)
    kube.delete(LEASE_API, "Lease", LEASE_NAME, NAMESPACE)


def controller_namespace(kube: Kube) -> None:
    """The Lease's and the requalification Jobs' namespace, with the burn-in's service account."""
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    kube.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "konduktor-burnin", "namespace": NAMESPACE}}
    )


def health_events(kube: Kube, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
    """The health controller's Events in a namespace (on jobs and Workloads), of one object when `name` is given."""
    return [
        e
        for e in kube.list("v1", "Event", namespace)
        if e.get("source", {}).get("component") == "konduktor-health"
        and (name is None or e["involvedObject"]["name"] == name)
    ]


def with_team_queues(sim: Sim) -> Iterator[Kube]:
    """For a module whose jobs Kueue admits: the controller's namespace and examples/config.yaml's team queues,
    active, and no admission policy; the cluster left as found after."""
    with policies_lifted(sim.kube):
        controller_namespace(sim.kube)
        sync_quotas(sim.kube, load_config(EXAMPLE).config, prune=False, dry_run=False)
        wait_until(
            "team-a's ClusterQueue to be active",
            lambda: is_true(sim.kube.get(KUEUE_API, "ClusterQueue", "team-a"), "Active"),
        )
        yield sim.kube
        leave_cluster(sim.kube)


@pytest.fixture(scope="module", name="kube")
def kube_with_controller_namespace(sim: Sim) -> Iterator[Kube]:
    """The controller's namespace, with no admission policy (an earlier module may have installed the chart's)."""
    with policies_lifted(sim.kube):
        controller_namespace(sim.kube)
        yield sim.kube
        leave_cluster(sim.kube)


@pytest.fixture(autouse=True)
def clean(kube: Kube) -> Iterator[None]:
    reset_cluster(kube)
    yield
    reset_cluster(kube)


def settings(**overrides: Any) -> HealthSettings:
    base: dict[str, Any] = {
        "gpu_lost_grace_seconds": 0,
        "cooldown_seconds": 3600,  # no requalification unless a test asks for one
        "breaker": BreakerSettings(max_fraction=1, max_nodes=4),
        "requalification": RequalificationSettings(tier="quick", namespace=NAMESPACE),
        "lease_seconds": 3,
        "poll_seconds": 1,
    }
    return HealthSettings(**{**base, **overrides})


def controller(kube: Kube, health: HealthSettings, name: str = "test", **options: Any) -> HealthController:
    return HealthController(
        kube, health, identity=f"{name}-{time.monotonic_ns()}", lease_namespace=NAMESPACE, **options
    )


def write_config(path: Path, health: HealthSettings) -> Path:
    with path.open("w") as handle:
        YAML(typ="safe").dump(health.model_dump(mode="json"), handle)
    return path


def wait_for_job(kube: Kube, name: str) -> None:
    def stuck() -> KonduktorError:
        job = kube.get("batch/v1", "Job", name, NAMESPACE) or {}
        pods = kube.list("v1", "Pod", NAMESPACE, label_selector=f"batch.kubernetes.io/job-name={name}")
        events = [
            f"{e['involvedObject']['name']}: {e['reason']}: {e['message']}" for e in kube.list("v1", "Event", NAMESPACE)
        ]
        state = {"job": job.get("status"), "pods": [p.get("status") for p in pods], "events": events}
        return KonduktorError(f"burn-in Job {name} did not finish: {json.dumps(state)[:4000]}")

    wait_until(f"burn-in Job {name} to finish", lambda: job_finished(kube, name), timeout=60, on_timeout=stuck)


def job_finished(kube: Kube, name: str) -> bool:
    job = kube.get("batch/v1", "Job", name, NAMESPACE) or {}
    return any(
        c["type"] in ("Complete", "Failed") and c["status"] == "True"
        for c in job.get("status", {}).get("conditions", [])
    )

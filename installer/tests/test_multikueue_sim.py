"""MultiKueue on simulated clusters: a manager and a worker, each its own control plane, Kueue and kwok nodes, set up
from one config's rendered objects; a job submitted on the manager runs on the worker and its status comes back.

Two clusters of their own (not the session's), started once for this module and removed after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from konduktor.config.model import Config
from konduktor.kube.client import Kube
from konduktor.kube.conditions import is_true
from konduktor.ops.multicluster import apply_all, connect_worker, endpoint_of
from konduktor.quotas.multikueue import manager_kueue_settings, render_clusters, worker_config
from konduktor.sim.cluster import SimCluster, SimSpec
from konduktor.sim.kueue import FRAMEWORKS
from konduktor.sim.pools import spec_of
from konduktor.sim.workloads import gpu_job, running_on, workload_of
from konduktor.vocabulary import KUEUE_API
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim

MANAGER, WORKER = "mk-hub", "mk-west"
TEAM = "mk-team"


def fleet() -> Config:
    """One worker of 2 nodes x 8 H100 behind a manager; one team holding all 16 GPUs."""
    return Config.model_validate(
        {
            "version": 1,
            "cluster": {"name": MANAGER},
            "kueue": {"sharing": "none"},
            "clusters": {"workers": [{"name": WORKER, "gpuTypes": {"h100": 2}}]},
            "topology": {"levels": ["kubernetes.io/hostname"]},
            "gpuTypes": {
                "h100": {
                    "product": "NVIDIA-H100-80GB-HBM3",
                    "nodes": 2,
                    "gpusPerNode": 8,
                    "nodeAllocatable": {"cpu": "96", "memory": "1000Gi"},
                }
            },
            "teams": {TEAM: {"namespaces": [TEAM], "gpus": {"h100": {"quota": 16}}}},
        }
    )


@dataclass
class Fleet:
    config: Config
    manager: Kube
    worker: Kube


@pytest.fixture(scope="module")
def fleet_up() -> Iterator[Fleet]:
    config = fleet()
    sets = {one.name: one for one in render_clusters(config, FRAMEWORKS)}
    manager_sim, worker_sim = SimCluster(MANAGER), SimCluster(WORKER)
    try:
        worker_spec = spec_of(worker_config(config, config.clusters.workers[0]), job_seconds=600)  # type: ignore[union-attr]
        worker_sim.up(worker_spec)
        # The manager has no GPU nodes: the jobs run on the workers.
        manager_sim.up(SimSpec(pools=[], kueue_settings=manager_kueue_settings(config)))
        with Kube(manager_sim.kubeconfig) as manager, Kube(worker_sim.kubeconfig) as worker:
            apply_all(worker, sets[WORKER].objects)
            connect_worker(config, WORKER, worker, endpoint_of(worker_sim.kubeconfig), manager)
            apply_all(manager, sets[MANAGER].objects)
            yield Fleet(config, manager, worker)
    finally:
        manager_sim.down()
        worker_sim.down()


def workload(kube: Kube, job: str) -> dict[str, Any]:
    found = workload_of(kube, TEAM, job)
    assert found is not None
    return found


def test_the_manager_connects_to_the_worker_and_a_job_runs_there(fleet_up: Fleet) -> None:
    manager, worker = fleet_up.manager, fleet_up.worker
    wait_until(
        "the worker's MultiKueueCluster to be connected",
        lambda: is_true(manager.get(KUEUE_API, "MultiKueueCluster", WORKER), "Active"),
        timeout=120,
    )
    wait_until(
        "the team's queue on the manager to be active",
        lambda: is_true(manager.get(KUEUE_API, "ClusterQueue", TEAM), "Active"),
        timeout=120,
    )
    manager.create(gpu_job("dispatched", TEAM, gpus=8, pods=1, run_for="600s"))

    # Kueue's webhook hands the manager's Job to MultiKueue: the manager's Job controller leaves it alone.
    job = manager.get("batch/v1", "Job", "dispatched", TEAM)
    assert job is not None and job["spec"].get("managedBy") == "kueue.x-k8s.io/multikueue"

    def dispatched() -> bool:
        found = workload_of(manager, TEAM, "dispatched")
        return found is not None and found.get("status", {}).get("clusterName") == WORKER

    wait_until("the manager's workload to be admitted on the worker", dispatched, timeout=180)
    # The job runs on the worker's nodes, admitted there against the worker's own queue.
    wait_until("its pod to run on the worker", lambda: len(running_on(worker, TEAM, "dispatched")) == 1, timeout=120)
    assert is_true(workload(worker, "dispatched"), "Admitted")
    assert workload(worker, "dispatched")["status"]["admission"]["clusterQueue"] == TEAM
    # Nothing runs on the manager, which has no GPU nodes.
    assert running_on(manager, TEAM, "dispatched") == {}

    # The worker Job's status is mirrored to the manager's Job.
    def mirrored() -> bool:
        local = manager.get("batch/v1", "Job", "dispatched", TEAM) or {}
        return local.get("status", {}).get("active") == 1

    wait_until("the worker Job's status on the manager's Job", mirrored, timeout=120)
    checks = workload(manager, "dispatched")["status"]["admissionChecks"]
    assert [(check["name"], check["state"]) for check in checks] == [(f"multikueue-{TEAM}", "Ready")]

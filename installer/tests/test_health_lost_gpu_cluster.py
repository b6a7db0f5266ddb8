"""A GPU lost under two running jobs on one node, on the simulated cluster with the real Kueue (examples/config.yaml's
queues) and a real Prometheus holding the DCGM exporter's Xid series: the job that held the GPU is requeued and runs
again elsewhere, the other keeps running; without DCGM's pod attribution both are requeued (the documented default).
Both jobs' owners are told what happened, in plain words."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import Sim
from health_cluster import (
    NODES,
    controller,
    health_events,
    reset_cluster,
    set_allocatable,
    settings,
    with_team_queues,
)
from sim_fixture import health_taints, node

from konduktor.health.loop import HealthController
from konduktor.health.settings import PrometheusSettings
from konduktor.kube.client import Kube
from konduktor.sim.workloads import gpu_job, running_on, workload_of
from konduktor.vocabulary import REQUEUE_LABEL
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim

TEAM = "team-a"
JOBS = ("holder", "bystander")
FAULTY = NODES[0]


@pytest.fixture(scope="module")
def kube(sim: Sim) -> Iterator[Kube]:
    yield from with_team_queues(sim)


@pytest.fixture(autouse=True)
def clean(kube: Kube) -> Iterator[None]:
    reset_cluster(kube)
    yield
    for name in NODES:
        kube.patch("v1", "Node", name, {"spec": {"unschedulable": None}})
    for job in JOBS:
        kube.delete("batch/v1", "Job", job, TEAM)
    wait_until("the jobs' pods to be gone", lambda: not any(pods(kube, job) for job in JOBS), timeout=60)
    reset_cluster(kube)
    for event in health_events(kube, TEAM):
        kube.delete("v1", "Event", event["metadata"]["name"], TEAM)


def pods(kube: Kube, job: str) -> list[dict[str, Any]]:
    return kube.list("v1", "Pod", TEAM, label_selector=f"batch.kubernetes.io/job-name={job}")


def workload(kube: Kube, job: str) -> dict[str, Any]:
    found = workload_of(kube, TEAM, job)
    assert found is not None
    return found


def start_both_on_one_node(kube: Kube) -> dict[str, str]:
    """Both jobs (4 GPUs each) running on FAULTY: the other nodes are cordoned until they run, then uncordoned so
    that a requeued job has somewhere to go. Returns each job's pod."""
    for name in NODES[1:]:
        kube.patch("v1", "Node", name, {"spec": {"unschedulable": True}})
    for job in JOBS:
        kube.create(gpu_job(job, TEAM, gpus=4, run_for="600s"))
    wait_until("both jobs to run", lambda: all(len(running_on(kube, TEAM, job)) == 1 for job in JOBS), timeout=90)
    for name in NODES[1:]:
        kube.patch("v1", "Node", name, {"spec": {"unschedulable": None}})
    placed = {job: next(iter(running_on(kube, TEAM, job).items())) for job in JOBS}
    assert {where for _, where in placed.values()} == {FAULTY}
    return {job: pod for job, (pod, _) in placed.items()}


def dcgm_xid_series(now: float, holder_pod: str, bystander_pod: str) -> str:
    """OpenMetrics text of the exporter's DCGM_FI_DEV_XID_ERRORS on FAULTY, with its Kubernetes pod mapping on: GPU 3,
    held by `holder_pod`, takes Xid 48 (a double-bit ECC error, for which the device plugin withdraws the GPU); GPU 5,
    held by `bystander_pod`, and GPU 7, held by no pod, stay quiet."""
    held = 'Hostname="{}",pod="{}",namespace="team-a",container="train"'
    series = {
        ("3", held.format(FAULTY, holder_pod)): (0, 0, 48),
        ("5", held.format(FAULTY, bystander_pod)): (0, 0, 0),
        ("7", f'Hostname="{FAULTY}"'): (0, 0, 0),
    }
    lines = [
        f'DCGM_FI_DEV_XID_ERRORS{{gpu="{gpu}",{labels}}} {value} {at:.3f}'
        for (gpu, labels), values in series.items()
        for at, value in zip((now - 50, now - 30, now - 10), values, strict=True)
    ]
    return "\n".join([*lines, "# EOF", ""])


def requeued_and_running_elsewhere(health: HealthController, kube: Kube, job: str) -> None:
    """Passes of the controller until Kueue has evicted `job`'s Workload and it was reactivated, then until it runs
    again on another node."""

    def reactivated() -> bool:
        health.reconcile_once()
        found = workload(kube, job)
        return REQUEUE_LABEL not in found["metadata"].get("labels", {}) and found["spec"].get("active", True)

    wait_until(f"{job}'s workload to be evicted and reactivated", reactivated, timeout=90)
    wait_until(
        f"{job} to run again on a healthy node",
        lambda: len(placed := running_on(kube, TEAM, job)) == 1 and FAULTY not in placed.values(),
        timeout=90,
    )


def test_dcgm_names_the_holder_of_the_lost_gpu_it_is_requeued_and_the_other_job_keeps_running(
    kube: Kube, prometheus: Callable[[str], str]
) -> None:
    started = start_both_on_one_node(kube)
    url = prometheus(dcgm_xid_series(time.time(), started["holder"], started["bystander"]))
    set_allocatable(kube, FAULTY, 9)  # the device plugin withdrew GPU 3
    health = controller(kube, settings(prometheus=PrometheusSettings(url=url)))
    plan = health.reconcile_once()
    assert health_taints(node(kube, FAULTY))
    deactivated = [a.name for a in plan.work if type(a).__name__ == "DeactivateWorkload"]
    assert deactivated == [workload(kube, "holder")["metadata"]["name"]]

    requeued_and_running_elsewhere(health, kube, "holder")
    assert running_on(kube, TEAM, "bystander") == {started["bystander"]: FAULTY}  # the same pod, never stopped
    assert workload(kube, "bystander")["spec"].get("active", True)

    (holder,) = health_events(kube, TEAM, "holder")
    assert (holder["type"], holder["reason"]) == ("Warning", "RequeuedForNodeHealth")
    assert f"GPU node {FAULTY} was quarantined" in holder["message"]
    assert (
        f"DCGM names its pod {started['holder']} as the holder of GPU 3, which the device plugin withdrew after Xid 48."
        in holder["message"]
    )
    assert "Next: requeued." in holder["message"]
    (bystander,) = health_events(kube, TEAM, "bystander")
    assert (bystander["type"], bystander["reason"]) == ("Warning", "NodeQuarantined")
    assert f"DCGM names team-a/{started['holder']} as the holder of the lost GPU 3" in bystander["message"]
    assert "this workload's GPUs are not affected. Next: left to finish." in bystander["message"]


def test_without_attribution_both_jobs_on_the_node_are_requeued_and_told_why(kube: Kube) -> None:
    start_both_on_one_node(kube)
    set_allocatable(kube, FAULTY, 9)
    health = controller(kube, settings())  # no Prometheus: which pod held the GPU cannot be known
    plan = health.reconcile_once()
    deactivated = sorted(a.name for a in plan.work if type(a).__name__ == "DeactivateWorkload")
    assert deactivated == sorted(workload(kube, job)["metadata"]["name"] for job in JOBS)

    for job in JOBS:
        requeued_and_running_elsewhere(health, kube, job)
        (event,) = health_events(kube, TEAM, job)
        assert (event["type"], event["reason"]) == ("Warning", "RequeuedForNodeHealth")
        assert "Which pod held the lost GPU is not known (no DCGM series to tell" in event["message"]
        assert "2 workloads hold GPUs on that node and any of them may have." in event["message"]
        assert "Next: requeued." in event["message"]

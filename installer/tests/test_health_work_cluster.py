"""The work on a faulty node, on the simulated cluster with the real Kueue and examples/config.yaml's queues: a
2-pod job with 8 GPUs per pod spans two of the 4 H100 nodes; a fault on one of them is handled by its policy."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from conftest import Sim
from health_cluster import (
    XID_13,
    XID_48,
    XID_79,
    controller,
    health_events,
    our_events,
    reset_cluster,
    set_allocatable,
    settings,
    with_team_queues,
)
from loki_api import LokiApi
from sim_fixture import health_settings_deployed, health_taints, installer_events, node, release_nodes

from konduktor.health.breaker import BREAKER_ANNOTATION
from konduktor.health.leader import LEASE_API, LEASE_NAME
from konduktor.health.loop import HealthController
from konduktor.health.settings import AffectedWorkSettings, HealthSettings, PrometheusSettings
from konduktor.kube.client import Kube
from konduktor.kube.timestamps import parse_time
from konduktor.sim.gpus import FAULTS_ANNOTATION
from konduktor.sim.workloads import gpu_job, is_true, job_state, running_on, workload_of
from konduktor.vocabulary import HEALTH_TAINT_KEY, REQUEUE_LABEL, SYSTEM_NAMESPACE
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim

TEAM = "team-a"  # examples/config.yaml: 20 guaranteed H100s
JOB = "fault-train"


@pytest.fixture(scope="module")
def kube(sim: Sim) -> Iterator[Kube]:
    yield from with_team_queues(sim)


@pytest.fixture(autouse=True)
def clean(kube: Kube) -> Iterator[None]:
    reset_cluster(kube)
    yield
    kube.delete("batch/v1", "Job", JOB, TEAM)
    kube.patch("v1", "Namespace", TEAM, {"metadata": {"labels": {HEALTH_OPT_OUT: None}}})
    wait_until("the job's pods to be gone", lambda: not job_pods(kube), timeout=60)
    reset_cluster(kube)
    # The next test's Job has the same name and may start within a second of this one's last pod: triage tells Jobs
    # of one name apart by time, so this Job's Events go with it (the Event TTL would remove them after an hour).
    for event in health_events(kube, TEAM) + scheduled_events(kube):
        kube.delete("v1", "Event", event["metadata"]["name"], TEAM)


HEALTH_OPT_OUT = settings().opt_out_label


def scheduled_events(kube: Kube) -> list[dict[str, Any]]:
    """The scheduler's Events of the Job's pods."""
    return [
        e
        for e in kube.list("v1", "Event", TEAM)
        if e.get("reason") == "Scheduled" and e["involvedObject"]["name"].startswith(f"{JOB}-")
    ]


def job_pods(kube: Kube) -> list[dict[str, Any]]:
    return kube.list("v1", "Pod", TEAM, label_selector=f"batch.kubernetes.io/job-name={JOB}")


def start_job(kube: Kube, labels: dict[str, str] | None = None) -> dict[str, str]:
    job = gpu_job(JOB, TEAM, gpus=8, pods=2, run_for="600s")
    job["metadata"]["labels"].update(labels or {})
    kube.create(job)
    wait_until("both pods to run", lambda: len(running_on(kube, TEAM, JOB)) == 2, timeout=90)
    placed = running_on(kube, TEAM, JOB)
    assert len(set(placed.values())) == 2  # 8 of 10 GPUs each: one pod per node
    return placed


def workload(kube: Kube) -> dict[str, Any]:
    found = workload_of(kube, TEAM, JOB)
    assert found is not None
    return found


def xid_on(api: LokiApi, name: str, line: str) -> None:
    api.add(name, f"[12345.678901] {line}")


def requeue_until_readmitted(health: HealthController, kube: Kube, faulty: str) -> dict[str, str]:
    """Passes of the controller until Kueue has evicted the workload and readmitted it after reactivation."""

    def evicted() -> bool:
        health.reconcile_once()
        wl = workload(kube)
        return REQUEUE_LABEL not in wl["metadata"].get("labels", {}) and wl["spec"].get("active", True)

    wait_until("the workload to be evicted and reactivated", evicted, timeout=90)

    def readmitted() -> bool:
        placed = running_on(kube, TEAM, JOB)
        return len(placed) == 2 and is_true(workload(kube), "Admitted")

    wait_until("the workload to be readmitted and run", readmitted, timeout=90)
    return running_on(kube, TEAM, JOB)


def test_a_fatal_fault_requeues_the_job_onto_healthy_nodes_and_tells_its_owner(kube: Kube, loki: LokiApi) -> None:
    api = loki
    placed = start_job(kube)
    faulty = sorted(placed.values())[0]
    created = workload(kube)["metadata"]["creationTimestamp"]
    xid_on(api, faulty, XID_79)
    health = controller(kube, settings(loki=api.settings()))
    plan = health.reconcile_once()
    assert health_taints(node(kube, faulty))
    assert [type(a).__name__ for a in plan.work] == ["DeactivateWorkload", "TellOwner"]

    moved = requeue_until_readmitted(health, kube, faulty)
    assert faulty not in moved.values()
    assert set(moved) != set(placed)  # new pods, made by the Job after Kueue resumed it
    requeued = workload(kube)
    assert requeued["metadata"]["creationTimestamp"] == created  # the same Workload: same quota, same queue place
    assert is_true(requeued, "Requeued")

    job = kube.get("batch/v1", "Job", JOB, TEAM)
    assert job is not None
    for name in (JOB, requeued["metadata"]["name"]):
        (event,) = health_events(kube, TEAM, name)
        assert event["reason"] == "RequeuedForNodeHealth"
        assert f"GPU node {faulty} was quarantined" in event["message"]
        assert "Xid 79, GPU has fallen off the bus" in event["message"]
        pod_there = next(p for p, n in placed.items() if n == faulty)
        assert pod_there in event["message"] and "Next: requeued." in event["message"]
    (on_job,) = health_events(kube, TEAM, JOB)
    assert on_job["involvedObject"]["uid"] == job["metadata"]["uid"]


def test_an_application_xid_changes_nothing(kube: Kube, loki: LokiApi) -> None:
    api = loki
    placed = start_job(kube)
    busy = sorted(placed.values())[0]
    xid_on(api, busy, XID_13)
    plan = controller(kube, settings(loki=api.settings())).reconcile_once()
    assert plan.work == () and not health_taints(node(kube, busy))
    assert running_on(kube, TEAM, JOB) == placed and workload(kube)["spec"].get("active", True)
    assert health_events(kube, TEAM) == []


def test_drain_leaves_running_pods_alone_and_keeps_new_ones_away(kube: Kube, loki: LokiApi) -> None:
    placed = start_job(kube)
    degraded = sorted(placed.values())[0]
    xid_on(loki, degraded, XID_48)  # a double-bit ECC error: degraded, so `drain` by default
    plan = controller(kube, settings(loki=loki.settings())).reconcile_once()
    assert health_taints(node(kube, degraded))
    assert [type(a).__name__ for a in plan.work] == ["TellOwner"]
    assert running_on(kube, TEAM, JOB) == placed
    assert workload(kube)["spec"].get("active", True) and is_true(workload(kube), "Admitted")
    (event,) = health_events(kube, TEAM, JOB)
    assert "Next: left to finish." in event["message"]


def test_dry_run_evicts_nothing_and_tells_the_owner_what_would_have_happened(kube: Kube, loki: LokiApi) -> None:
    api = loki
    placed = start_job(kube)
    faulty = sorted(placed.values())[0]
    xid_on(api, faulty, XID_79)
    plan = controller(kube, settings(loki=api.settings(), dry_run=True)).reconcile_once()
    assert [type(a).__name__ for a in plan.work_withheld] == ["DeactivateWorkload"]
    assert not health_taints(node(kube, faulty)) and running_on(kube, TEAM, JOB) == placed
    unchanged = workload(kube)
    assert unchanged["spec"].get("active", True) and REQUEUE_LABEL not in unchanged["metadata"].get("labels", {})
    assert our_events(kube) == []  # nothing on the node: its Event, like its taint, is withheld

    job = kube.get("batch/v1", "Job", JOB, TEAM)
    assert job is not None
    for name, uid in ((JOB, job["metadata"]["uid"]), (unchanged["metadata"]["name"], unchanged["metadata"]["uid"])):
        (event,) = health_events(kube, TEAM, name)
        assert (event["type"], event["reason"]) == ("Normal", "WouldRequeueForNodeHealth")
        assert event["involvedObject"]["uid"] == uid
        assert f"GPU node {faulty} would have been quarantined" in event["message"]
        assert "Xid 79, GPU has fallen off the bus" in event["message"]
        assert "Dry-run: nothing was done; the workload would have been requeued." in event["message"]


def test_dry_run_tells_an_owner_once_while_the_fault_stays(kube: Kube) -> None:
    """A dry-run leaves the node in service, so the lost GPU is judged again on every pass (no dedup window
    here); the owner hears of it once. The job is the only one holding GPUs on the node, so it held the lost GPU and
    would have been requeued."""
    placed = start_job(kube)
    degraded = sorted(placed.values())[0]
    set_allocatable(kube, degraded, 9)
    health = controller(kube, settings(dry_run=True, dedup_window_seconds=0))
    first, second = health.reconcile_once(), health.reconcile_once()
    assert [type(a).__name__ for a in first.work] == [type(a).__name__ for a in second.work] == ["TellOwner"]
    (event,) = health_events(kube, TEAM, JOB)
    assert (event["type"], event["reason"]) == ("Normal", "WouldRequeueForNodeHealth")
    assert "this is the only workload holding GPUs on that node" in event["message"]
    assert "the workload would have been requeued" in event["message"]
    assert not health_taints(node(kube, degraded)) and running_on(kube, TEAM, JOB) == placed


@pytest.mark.parametrize("where", ["job", "namespace"])
def test_an_opted_out_workload_is_never_evicted_only_told(kube: Kube, loki: LokiApi, where: str) -> None:
    api = loki
    if where == "namespace":
        kube.patch("v1", "Namespace", TEAM, {"metadata": {"labels": {HEALTH_OPT_OUT: "true"}}})
    placed = start_job(kube, {HEALTH_OPT_OUT: "true"} if where == "job" else None)
    faulty = sorted(placed.values())[0]
    xid_on(api, faulty, XID_79)
    plan = controller(kube, settings(loki=api.settings())).reconcile_once()
    assert health_taints(node(kube, faulty))
    assert [type(a).__name__ for a in plan.work] == ["TellOwner"]
    assert running_on(kube, TEAM, JOB) == placed and workload(kube)["spec"].get("active", True)
    (event,) = health_events(kube, TEAM, JOB)
    assert "not requeued because" in event["message"]


def triage(sim: Sim, *args: str) -> subprocess.CompletedProcess[str]:
    """`konduktor-install triage` as a new process."""
    return subprocess.run(
        [sys.executable, "-c", "from konduktor.cli.main import run; run()", "triage", *args,
         "--kubeconfig", str(sim.kubeconfig)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def judged(found: subprocess.CompletedProcess[str]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """`triage -o json`'s culprits, and its nodes by name."""
    report = json.loads(found.stdout)
    return report["culprits"], {n["node"]: n for n in report["nodes"]}


def test_triage_names_the_node_with_the_fault_and_the_evidence(sim: Sim, kube: Kube, loki: LokiApi) -> None:
    api = loki
    placed = start_job(kube)
    faulty, healthy = sorted(placed.values())
    clean = triage(sim, JOB, "-n", TEAM, "-o", "json")
    assert clean.returncode == 1, clean.stderr  # no fault yet: nothing to blame
    assert judged(clean)[0] == []

    xid_on(api, faulty, XID_79)
    xid_on(api, healthy, XID_13)  # the job's own fault on the other node: context, not blame
    none = AffectedWorkSettings(unusable="none")
    controller(kube, settings(loki=api.settings(), affected_work=none)).reconcile_once()
    found = triage(sim, JOB, "-n", TEAM, "-o", "json")
    assert found.returncode == 0, found.stderr
    culprits, nodes = judged(found)
    assert culprits == [faulty]
    assert set(nodes) == {faulty, healthy}
    # The controller's quarantine annotation, GPUHealthy condition and Event say one fact: shown once, the Event.
    assert [(s["source"], s["reason"]) for s in nodes[faulty]["evidence"]] == [("event", "Xid79")]
    assert any("GPU has fallen off the bus" in s["message"] for s in nodes[faulty]["evidence"])
    assert [(s["reason"], s["fault"]) for s in nodes[healthy]["evidence"]] == [("Xid13", False)]
    assert nodes[faulty]["pods"] == [p for p, n in placed.items() if n == faulty]

    table = triage(sim, JOB, "-n", TEAM)
    assert table.returncode == 0 and "CULPRIT" in table.stdout, table.stdout
    assert table.stdout.count("Xid79") == 1, table.stdout


def test_triage_of_a_missing_job_is_bad_input(sim: Sim, kube: Kube) -> None:
    missing = triage(sim, "no-such-job", "-n", TEAM)
    assert missing.returncode == 2
    assert "no Job no-such-job in namespace team-a" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_triage_burnin_names_the_faulty_node_of_a_four_node_job_and_quarantines_it_once(sim: Sim, kube: Kube) -> None:
    """A 4-pod job, one pod per node (7 of 10 GPUs each), ends; one of its nodes has a GPU that corrupts data (the
    sim's GPU agent). `triage --burnin --quarantine` burns in just those nodes, names that node with the burn-in's
    evidence and quarantines it; a second triage finds the same and adds no taint and no second quarantine."""
    kube.create(gpu_job(JOB, TEAM, gpus=7, pods=4, run_for="2s"))
    wait_until("the job to complete", lambda: job_state(kube, TEAM, JOB) == "complete", timeout=120)
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in job_pods(kube)}
    assert len(set(placed.values())) == 4, placed
    bad = sorted(placed.values())[2]
    kube.patch("v1", "Node", bad, {"metadata": {"annotations": {FAULTS_ANNOTATION: "7=sdc"}}})
    try:
        for _ in range(2):
            found = triage(sim, JOB, "-n", TEAM, "--burnin", "--quarantine", "-o", "json")
            assert found.returncode == 0, found.stderr
            culprits, nodes = judged(found)
            assert culprits == [bad]
            assert set(nodes) == set(placed.values())
            [burnin] = [e for e in nodes[bad]["evidence"] if e["source"] == "burnin"]
            assert burnin["reason"] == "BurnInFail" and "FAIL: matmul_sdc: mismatch" in burnin["message"]
            assert all(e["reason"] == "BurnInPass" for n in set(nodes) - {bad} for e in nodes[n]["evidence"])
            taints = [t for t in node(kube, bad)["spec"]["taints"] if t["key"] == HEALTH_TAINT_KEY]
            assert taints == [{"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}]
            reasons = [e["reason"] for e in installer_events(kube) if e["involvedObject"]["name"] == bad]
            assert reasons == ["BurnInFailed"]  # the second run leaves the node in quarantine to the controller
        assert "in quarantine already" in found.stderr
    finally:
        release_nodes(kube, sorted(set(placed.values())))


@pytest.fixture
def deploy(kube: Kube) -> Iterator[Callable[[HealthSettings], None]]:
    """Deploys health controller settings as konduktor-core does (`sim_fixture.health_settings_deployed`)."""
    with health_settings_deployed(kube) as deployed:
        yield deployed


def test_triage_reads_the_kernel_logs_of_the_jobs_nodes_in_its_window_and_quarantines_through_the_breaker(
    sim: Sim, kube: Kube, loki: LokiApi, deploy: Callable[[HealthSettings], None]
) -> None:
    """No controller ran: the Xid 79 in Loki on one of the job's nodes is the evidence that names it, the job's
    own Xid 13 on the other is shown only; Loki out of reach is said, and the rest of the evidence stands.
    `--quarantine` then quarantines the culprit as the controller would: not while the controller's breaker is
    tripped (its Lease says so), once after it is reset, and not again."""
    deploy(HealthSettings(loki=loki.settings()))
    placed = start_job(kube)
    faulty, healthy = sorted(placed.values())
    xid_on(loki, faulty, XID_79)
    xid_on(loki, healthy, XID_13)
    xid_on(loki, "gpu-h100-9999", XID_79)  # not one of the job's nodes

    def found_both() -> bool:
        _, nodes = judged(triage(sim, JOB, "-n", TEAM, "-o", "json"))
        return sum(len(n["evidence"]) for n in nodes.values()) == 2

    wait_until("Loki to serve both lines", found_both, timeout=30)
    found = triage(sim, JOB, "-n", TEAM, "-o", "json")
    assert found.returncode == 0, found.stderr
    culprits, nodes = judged(found)
    assert culprits == [faulty]
    [fault] = nodes[faulty]["evidence"]
    assert (fault["source"], fault["reason"], fault["fault"]) == ("kernel-log", "Xid79", True)
    assert "GPU_HAS_FALLEN_OFF_THE_BUS" in fault["message"]
    assert [(s["source"], s["reason"], s["fault"]) for s in nodes[healthy]["evidence"]] == [
        ("kernel-log", "Xid13", False)
    ]
    assert "not read: DCGM: no Prometheus in the health controller's settings" in found.stderr
    unreachable = triage(sim, JOB, "-n", TEAM, "--loki", "http://127.0.0.1:9", "-o", "json")
    assert unreachable.returncode == 1  # nothing else blames a node
    assert "not read: kernel logs: Loki at http://127.0.0.1:9" in unreachable.stderr

    try:
        with tripped_breaker(kube):
            held = triage(sim, JOB, "-n", TEAM, "--quarantine", "-o", "json")
            assert held.returncode == 0, held.stderr
            assert "quarantine suppressed: circuit breaker open" in held.stderr
            assert health_taints(node(kube, faulty)) == []
            assert [e["reason"] for e in installer_events(kube) if e["involvedObject"]["name"] == faulty] == [
                "QuarantineSuppressed"
            ]
        for _ in range(2):
            done = triage(sim, JOB, "-n", TEAM, "--quarantine", "-o", "json")
            assert done.returncode == 0, done.stderr
            assert health_taints(node(kube, faulty)) == [
                {"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}
            ]
            reasons = [e["reason"] for e in installer_events(kube) if e["involvedObject"]["name"] == faulty]
            assert reasons == ["QuarantineSuppressed", "Xid79"]  # the second run writes nothing
        assert health_taints(node(kube, healthy)) == []
        assert "in quarantine already" in done.stderr
    finally:
        release_nodes(kube, [faulty, healthy])


@contextmanager
def tripped_breaker(kube: Kube) -> Iterator[None]:
    """The health controller's Lease with its breaker tripped, as the controller leaves it; then reset, as an
    operator resets it (a Lease made here is removed)."""
    trip = {BREAKER_ANNOTATION: "2026-01-01T00:00:00Z"}
    made = kube.get(LEASE_API, "Lease", LEASE_NAME, SYSTEM_NAMESPACE) is None
    if made:
        metadata = {"name": LEASE_NAME, "namespace": SYSTEM_NAMESPACE, "annotations": trip}
        kube.create({"apiVersion": LEASE_API, "kind": "Lease", "metadata": metadata})
    else:
        kube.patch(LEASE_API, "Lease", LEASE_NAME, {"metadata": {"annotations": trip}}, SYSTEM_NAMESPACE)
    try:
        yield
    finally:
        if made:
            kube.delete(LEASE_API, "Lease", LEASE_NAME, SYSTEM_NAMESPACE)
        else:
            reset = {"metadata": {"annotations": {BREAKER_ANNOTATION: None}}}
            kube.patch(LEASE_API, "Lease", LEASE_NAME, reset, SYSTEM_NAMESPACE)


def dcgm_series(start: float, faulty: str, other: str) -> str:
    """OpenMetrics text: on `faulty`, a double-bit ECC error on GPU 3 just after `start` and a row remap failure on
    GPU 5 since before it; quiet on `other`."""
    series = {
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", faulty, "3"): (0, 0, 2, 2),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", faulty, "5"): (0, 1, 1, 1),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", other, "3"): (0, 0, 0, 0),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", other, "5"): (0, 0, 0, 0),
    }
    lines = []
    for (metric, host, gpu), values in series.items():
        for at, value in zip((start - 40, start - 20, start + 1, start + 2), values, strict=True):
            lines.append(f'{metric}{{gpu="{gpu}",Hostname="{host}"}} {value} {at:.3f}')
    return "\n".join([*lines, "# EOF", ""])


def test_triage_reads_the_dcgm_series_of_the_jobs_nodes_and_confirms_kernel_xids_by_them(
    sim: Sim,
    kube: Kube,
    loki: LokiApi,
    prometheus: Callable[[str], str],
    deploy: Callable[[HealthSettings], None],
) -> None:
    """With Prometheus in the controller's settings: a double-bit ECC error in the job's window on one node names
    it, with the row remap failure it had since before the job; an Xid 79 log line on the other that DCGM did not
    report is shown, not blamed (as the controller would not act on it), and Prometheus out of reach is said."""
    placed = start_job(kube)
    faulty, other = sorted(placed.values())
    started = parse_time(kube.get("batch/v1", "Job", JOB, TEAM)["status"]["startTime"])
    assert started is not None
    wait_until("the ECC error's time to have come", lambda: time.time() > started + 3, timeout=10)
    url = prometheus(dcgm_series(started, faulty, other))
    deploy(HealthSettings(loki=loki.settings(), prometheus=PrometheusSettings(url=url)))
    xid_on(loki, other, XID_79)

    wait_until(
        "Loki to serve the line",
        lambda: judged(triage(sim, JOB, "-n", TEAM, "-o", "json"))[1][other]["evidence"],
        timeout=30,
    )
    found = triage(sim, JOB, "-n", TEAM, "-o", "json")
    assert found.returncode == 0, found.stderr
    culprits, nodes = judged(found)
    assert culprits == [faulty]
    remap, ecc = sorted(nodes[faulty]["evidence"], key=lambda e: e["at"])
    assert (ecc["source"], ecc["reason"], ecc["fault"]) == ("dcgm", "EccDoubleBitError", True)
    assert 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="3"} = 2' in ecc["message"]
    assert ecc["at"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started + 1))
    assert (remap["source"], remap["reason"], remap["fault"]) == ("dcgm", "RowRemapFailure", True)
    assert remap["at"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))  # set before; counted from start
    [line] = nodes[other]["evidence"]
    assert (line["source"], line["reason"], line["fault"]) == ("kernel-log", "Xid79", False)
    unreachable = triage(sim, JOB, "-n", TEAM, "--prometheus", "http://127.0.0.1:9", "-o", "json")
    assert unreachable.returncode == 1
    assert "not read: DCGM: Prometheus at http://127.0.0.1:9" in unreachable.stderr

"""The health controller against the simulated cluster, a Loki-API HTTP server and a real Prometheus.

The session cluster has 4 fake nodes gpu-h100-0000..0003 with 10 H100 each, tainted nvidia.com/gpu:NoSchedule.
Every test leaves the nodes as it found them: our taint, annotations, condition and Events are removed and the
allocatable GPUs restored, because other tests schedule Jobs onto these nodes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import Sim
from garbage_api import serving
from health_cluster import (  # noqa: F401 (fixtures: `kube`, the controller's namespace; `clean`, nodes reset)
    FOREIGN_TAINT,
    NAMESPACE,
    NODES,
    XID_13,
    XID_31,
    XID_43,
    XID_48,
    XID_79,
    clean,
    controller,
    gpu_condition,
    kube_with_controller_namespace,
    our_events,
    set_allocatable,
    settings,
    wait_for_job,
    write_config,
    write_order,
)
from loki_api import LokiApi
from otelcol import Collector, collector, kernel_pipeline
from sim_fixture import health_settings_deployed, health_taints, node, patch_node

from konduktor.burnin.manifests import NODE_ANNOTATION, node_job
from konduktor.burnin.tiers import options_for_tier
from konduktor.cli.main import main as cli_main
from konduktor.health.breaker import BREAKER_ANNOTATION, BREAKER_RESET_ANNOTATION
from konduktor.health.decide import CONDITION_TYPE, Taint, UpdateNode
from konduktor.health.leader import LEASE_API, LEASE_NAME
from konduktor.health.loop import CURSOR_ANNOTATION, HealthController
from konduktor.health.nodes import list_nodes
from konduktor.health.prometheus import HEALTH_FIELDS, PrometheusSource
from konduktor.health.requalification_runs import REQUALIFICATION_LABEL
from konduktor.health.server import HealthServer
from konduktor.health.settings import (
    BreakerSettings,
    HealthSettings,
    LokiSettings,
    PrometheusSettings,
)
from konduktor.health.telemetry import HealthMetrics
from konduktor.kube.client import Kube
from konduktor.kube.watch import WatchEvent
from konduktor.sim.cluster import free_port
from konduktor.sim.gpus import FAULTS_ANNOTATION
from konduktor.vocabulary import (
    HEALTH_TAINT_KEY,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    REQUALIFICATION_RESULT,
    SYSTEM_NAMESPACE,
)
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim


# --- the cluster side ------------------------------------------------------------------------------------------


def writers(obj: dict[str, Any], *path: str) -> set[str]:
    """The field managers that own the field at `path` (fieldsV1 keys) of the object."""
    found = set()
    for entry in obj["metadata"].get("managedFields") or ():
        fields = entry.get("fieldsV1") or {}
        for key in path:
            fields = fields.get(key) if isinstance(fields, dict) else None
        if fields is not None:
            found.add(entry["manager"])
    return found


# --- a Loki that speaks query_range ----------------------------------------------------------------------------


# --- the controller --------------------------------------------------------------------------------------------


def loki_settings(url: str, **overrides: Any) -> LokiSettings:
    return LokiSettings(url=url, query='{job="kernel"} |~ "NVRM: Xid|SXid"', node_label="node", **overrides)


def run_once_cli(sim: Sim, config: Path) -> dict[str, Any]:
    """`konduktor-health run --once` as a new process."""
    done = subprocess.run(
        [sys.executable, "-m", "konduktor.cli.health", "run", "--once", "--kubeconfig", str(sim.kubeconfig),
         "--config", str(config), "--lease-namespace", NAMESPACE],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# --- acceptance ------------------------------------------------------------------------------------------------


def test_a_lost_gpu_is_quarantined_and_a_passing_requalification_releases_it(kube: Kube) -> None:
    victim = "gpu-h100-0001"
    set_allocatable(kube, victim, 8)
    plan = controller(kube, settings()).reconcile_once()
    quarantined = node(kube, victim)
    assert health_taints(quarantined) == [{"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}]
    condition = gpu_condition(quarantined)
    assert condition is not None and (condition["status"], condition["reason"]) == ("False", "GPULost")
    assert quarantined["metadata"]["annotations"][QUARANTINE_REASON].startswith("GPULost")
    # `kubectl get node --show-managed-fields` names the controller as the writer of its taint and its condition.
    assert writers(quarantined, "f:spec", "f:taints") == {"konduktor-health"}
    assert writers(quarantined, "f:status", "f:conditions", f'k:{{"type":"{CONDITION_TYPE}"}}') == {"konduktor-health"}
    (evented,) = our_events(kube, victim)
    assert (evented["type"], evented["reason"]) == ("Warning", "GPULost")
    assert "allocatable nvidia.com/gpu 8 < expected 10" in evented["message"]
    # One fault: the taint with its annotations, the condition, one Event; nothing for the healthy nodes.
    assert sorted(type(a).__name__ for a in plan.actions) == ["RecordEvent", "SetCondition", "UpdateNode"]
    assert {a.node for a in plan.actions} == {victim}
    # Someone else's taint arrives meanwhile; the controller's cached Node is now stale (409 on its next write).
    patch_node(
        kube,
        victim,
        lambda n: {"spec": {"taints": [*n["spec"]["taints"], {"key": FOREIGN_TAINT, "effect": "PreferNoSchedule"}]}},
    )

    # The GPU is back; after the cool-down (0 here) the node is requalified by a burn-in Job on it.
    set_allocatable(kube, victim, 10)
    patch_node(kube, victim, lambda _: {"metadata": {"annotations": {FAULTS_ANNOTATION: "4=ecc"}}})
    requalifying = controller(kube, settings(cooldown_seconds=0))
    requalifying.reconcile_once()
    (job,) = kube.list("batch/v1", "Job", NAMESPACE, label_selector=f"{REQUALIFICATION_LABEL}=true")
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["annotations"][NODE_ANNOTATION] == victim
    assert {"key": HEALTH_TAINT_KEY, "operator": "Exists"} in pod["tolerations"]
    assert pod["serviceAccountName"] == "konduktor-burnin"
    wait_for_job(kube, job["metadata"]["name"])

    # The burn-in reads the step logs through pods/log (the sim's GPU agent prints what the node's GPUs say):
    # another GPU of the node still reports uncorrectable ECC errors, so it FAILs and the node stays out.
    requalifying.reconcile_once()
    kept = node(kube, victim)
    assert health_taints(kept) and kept["metadata"]["annotations"][REQUALIFICATION_RESULT].startswith("FAIL")
    assert kept["metadata"]["annotations"][REQUALIFICATION_RESULT] == "FAIL: ecc: 1 problem(s)"
    assert any(e["reason"] == "RequalificationFailed" for e in our_events(kube, victim))

    # Repaired: the next attempt's GPUs are healthy, and PASS releases the node.
    patch_node(kube, victim, lambda _: {"metadata": {"annotations": {FAULTS_ANNOTATION: None}}})
    passing = controller(kube, settings(cooldown_seconds=0))
    passing.reconcile_once()
    jobs = kube.list("batch/v1", "Job", NAMESPACE, label_selector=f"{REQUALIFICATION_LABEL}=true")
    assert len(jobs) == 2
    second = next(j for j in jobs if j["metadata"]["name"] != job["metadata"]["name"])
    wait_for_job(kube, second["metadata"]["name"])
    passing.reconcile_once()
    released = node(kube, victim)
    assert health_taints(released) == []
    assert QUARANTINED_AT not in released["metadata"].get("annotations", {})
    assert released["metadata"]["annotations"][REQUALIFICATION_RESULT].startswith("PASS")
    condition = gpu_condition(released)
    assert condition is not None and (condition["status"], condition["reason"]) == ("True", "RequalificationPassed")
    # Taints the controller did not place stay: the GPU pool's and the one added meanwhile.
    assert {t["key"] for t in released["spec"]["taints"]} == {"nvidia.com/gpu", FOREIGN_TAINT}
    assert passing.metrics.sample("konduktor_releases_total") == 1
    assert passing.metrics.sample("konduktor_requalifications_total", {"verdict": "PASS"}) == 1


def test_xid_79_quarantines_xid_13_does_not_and_repeats_cost_no_writes(kube: Kube, loki: LokiApi) -> None:
    api = loki
    faulty, busy = "gpu-h100-0002", "gpu-h100-0003"
    first = api.add(faulty, f"[12345.678901] {XID_79}")
    api.add(busy, f"Jan 12 10:00:00 {busy} kernel: {XID_13}")
    # The same fault reported 1,000 more times (a driver repeats itself), read in pages of 300.
    api.push([(faulty, f"[{12345 + offset}.000000] {XID_79}", first + offset * 1000) for offset in range(1, 1001)])
    queries_before = api.loki.query_ranges()
    health = controller(kube, settings(loki=api.settings(limit=300)))
    plan = health.reconcile_once()

    quarantined = node(kube, faulty)
    assert health_taints(quarantined) == [{"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}]
    condition = gpu_condition(quarantined)
    assert condition is not None and (condition["status"], condition["reason"]) == ("False", "Xid79")
    (evidence,) = our_events(kube, faulty)
    assert evidence["reason"] == "Xid79" and XID_79 in evidence["message"]
    # 1,001 lines: one quarantine of three writes (taint and annotations, condition, Event), and nothing more.
    assert len([a for a in plan.actions if a.node == faulty]) == 3
    assert health.metrics.sample("konduktor_quarantines_total", {"reason": "Xid79"}) == 1
    assert (
        health.metrics.sample(
            "konduktor_gpu_faults_total", {"node": faulty, "kind": "xid", "code": "79", "reason": "Xid79"}
        )
        == 1
    )
    assert api.loki.query_ranges() - queries_before >= 4  # 1,002 lines in pages of 300

    # Xid 13 is the application's fault: an Event for its users, the node stays schedulable.
    untouched = node(kube, busy)
    assert health_taints(untouched) == [] and gpu_condition(untouched) is None
    (warning,) = our_events(kube, busy)
    assert (warning["type"], warning["reason"]) == ("Warning", "Xid13")


def test_xid_48_quarantines_and_application_xids_31_and_43_do_not(kube: Kube, loki: LokiApi) -> None:
    api = loki
    broken, busy = "gpu-h100-0001", "gpu-h100-0000"
    api.add(broken, f"[ 4242.000001] {XID_48}")  # dmesg
    api.add(busy, f"Nov 22 03:00:00 {busy} kernel: {XID_31}")  # syslog
    api.add(busy, f"[Sun Nov 22 03:00:01 2026] {XID_43}")  # dmesg -T
    health = controller(kube, settings(loki=api.settings()))
    health.reconcile_once()

    quarantined = node(kube, broken)
    assert health_taints(quarantined) == [{"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}]
    condition = gpu_condition(quarantined)
    assert condition is not None and (condition["status"], condition["reason"]) == ("False", "Xid48")
    (evidence,) = our_events(kube, broken)
    assert evidence["reason"] == "Xid48" and XID_48 in evidence["message"]
    # Page faults and stopped channels are the application's: Events for its users, the node stays in service.
    untouched = node(kube, busy)
    assert health_taints(untouched) == [] and gpu_condition(untouched) is None
    assert sorted(e["reason"] for e in our_events(kube, busy)) == ["Xid31", "Xid43"]


def test_a_loki_restart_loses_no_kernel_line_and_counts_none_twice(kube: Kube, loki: LokiApi) -> None:
    """A line Loki took just before it restarted is still read (its write-ahead log), once: the controller's
    cursor, not Loki's memory, decides what was already counted."""
    api = loki
    faulty = "gpu-h100-0002"
    api.add(faulty, f"[ 7000.000001] {XID_79}")
    api.loki.restart()
    health = controller(kube, settings(loki=api.settings()))
    health.reconcile_once()
    quarantined = [{"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}]
    assert health_taints(node(kube, faulty)) == quarantined

    api.loki.restart()
    again = health.reconcile_once()
    assert [a for a in again.actions if a.node == faulty] == []
    assert health.metrics.sample("konduktor_quarantines_total", {"reason": "Xid79"}) == 1
    assert len(our_events(kube, faulty)) == 1


def test_a_kernel_line_reaches_the_controller_through_the_collector_and_loki(
    kube: Kube, loki: LokiApi, tmp_path: Path
) -> None:
    """The whole path with the umbrella's pipeline: a line appended to a node's kern.log, that node's collector
    (file_log -> batch -> otlp_http), Loki (OTLP, `source` and `k8s_node_name` as labels), the controller (the
    umbrella's query), the taint. A collector restart loses no line written while it was down and sends none again."""
    api = loki
    first, second = "gpu-h100-0001", "gpu-h100-0003"
    binary = collector()
    collectors = []
    for name in (first, second):
        workdir = tmp_path / name
        workdir.mkdir()
        # A node's kern.log is never empty: the collector tracks a file by its first bytes.
        (workdir / "kern.log").write_text("Nov 24 00:00:00 node kernel: [    0.000000] Linux version 6.8.0\n")
        health = free_port()
        config = kernel_pipeline(
            workdir / "storage", workdir / "kern.log", api.loki.url, api.tenant, (health, free_port())
        )
        (workdir / "storage").mkdir()
        collectors.append(Collector(binary, config, name, workdir, health))
    health = controller(kube, settings(loki=api.settings()))

    def tainted(name: str) -> bool:
        health.reconcile_once()
        return bool(health_taints(node(kube, name)))

    def checkpointed(running: Collector) -> bool:
        """The collector saved its place in the file (file_storage writes one bbolt file per receiver)."""
        return any(path.stat().st_size > 0 for path in (running.workdir / "storage").iterdir())

    def append(workdir: Path, line: str) -> None:
        with (workdir / "kern.log").open("a") as log:
            log.write(f"Nov 24 00:00:00 node kernel: [ 1234.567890] {line}\n")

    try:
        for running in collectors:
            running.start()
            wait_until("the collector to be ready", running.ready, timeout=60)
        append(collectors[0].workdir, XID_79)
        wait_until(f"{first} to be tainted through collector and Loki", lambda: tainted(first), timeout=60)

        # The second node's collector is down while its kernel logs the fault, and comes back.
        append(collectors[1].workdir, "eth0: link up")
        wait_until("the collector to read on", lambda: checkpointed(collectors[1]), timeout=60)
        collectors[1].stop()
        append(collectors[1].workdir, XID_79)
        collectors[1].start()
        wait_until("the collector to be ready again", collectors[1].ready, timeout=60)
        wait_until(f"{second} to be tainted after the collector restart", lambda: tainted(second), timeout=60)
        collectors[0].stop()
        collectors[0].start()  # restarted: it must not ship the first line again
        wait_until("the first collector to be ready again", collectors[0].ready, timeout=60)
        health.reconcile_once()
    finally:
        for running in collectors:
            running.stop()
    assert health.metrics.sample("konduktor_quarantines_total", {"reason": "Xid79"}) == 2
    for name in (first, second):
        assert [e["reason"] for e in our_events(kube, name)] == ["Xid79"]
    query = {"query": '{source="kernel"}', "start": str(time.time_ns() - 3600 * 10**9), "limit": "100"}
    answer = requests.get(
        f"{api.loki.url}/loki/api/v1/query_range", params=query, headers={"X-Scope-OrgID": api.tenant}, timeout=30
    ).json()
    shipped = sorted(
        (stream["stream"]["k8s_node_name"], value[1].rsplit("] ", 1)[1])
        for stream in answer["data"]["result"]
        for value in stream["values"]
    )
    # Every line written after the collectors started, once each: none lost, none sent twice.
    assert shipped == [(first, XID_79), (second, XID_79), (second, "eth0: link up")]


def test_a_restarted_controller_does_not_count_loki_lines_twice(
    sim: Sim, kube: Kube, loki: LokiApi, tmp_path: Path
) -> None:
    api = loki
    busy = "gpu-h100-0000"
    config = write_config(tmp_path / "health.yaml", settings(loki=api.settings()))
    api.add(busy, XID_13)
    assert [w["reason"] for w in run_once_cli(sim, config)["writes"]] == ["Xid13"]
    lease = kube.get(LEASE_API, "Lease", LEASE_NAME, NAMESPACE)
    assert lease is not None and CURSOR_ANNOTATION in lease["metadata"]["annotations"]
    assert lease["spec"].get("holderIdentity") is None  # handed back on exit

    # A new process reads on from the saved cursor: the line it already acted on is not read again.
    assert run_once_cli(sim, config)["writes"] == []
    api.add(busy, XID_13.replace("SM 0", "SM 1"))
    assert [w["reason"] for w in run_once_cli(sim, config)["writes"]] == ["Xid13"]
    assert len(our_events(kube, busy)) == 2


def test_the_breaker_stops_quarantining_when_more_nodes_fail_than_the_cap(kube: Kube, loki: LokiApi) -> None:
    api = loki
    first, second = "gpu-h100-0000", "gpu-h100-0001"  # half of the fleet
    api.add(first, XID_79)
    api.add(second, XID_79, time.time_ns() + 1000)
    health = controller(kube, settings(loki=api.settings(), breaker=BreakerSettings(max_fraction=1, max_nodes=1)))
    plan = health.reconcile_once()

    assert plan.breaker.tripped
    assert health_taints(node(kube, first)) and not health_taints(node(kube, second))
    # The second node is still reported unhealthy, loudly, but not taken out of scheduling.
    condition = gpu_condition(node(kube, second))
    assert condition is not None and condition["status"] == "False"
    (suppressed,) = [e for e in our_events(kube, second) if e["reason"] == "QuarantineSuppressed"]
    assert "circuit breaker open" in suppressed["message"]
    assert any(n.level == "error" and "circuit breaker tripped" in n.message for n in plan.notices)
    metrics = health.metrics
    assert metrics.sample("konduktor_quarantine_breaker_tripped") == 1
    assert metrics.sample("konduktor_quarantine_breaker_limit") == 1
    assert metrics.sample("konduktor_quarantine_breaker_window_quarantines") == 1
    assert metrics.sample("konduktor_quarantines_blocked_total") == 1
    assert metrics.sample("konduktor_quarantined_nodes") == 1


def test_a_burst_on_every_node_is_written_at_once_and_the_breaker_still_caps_it(kube: Kube, loki: LokiApi) -> None:
    """Four faults in one pass, nodes written concurrently: the breaker, decided before any write, lets exactly
    three through, and each of those gets its writes once."""
    api = loki
    stamp = time.time_ns()
    api.push([(name, f"[ 9000.00000{i}] {XID_79}", stamp + i * 1000) for i, name in enumerate(NODES)])
    capped = settings(loki=api.settings(), breaker=BreakerSettings(max_fraction=1, max_nodes=3), node_concurrency=4)
    health = controller(kube, capped)
    plan = health.reconcile_once()

    tainted = [name for name in NODES if health_taints(node(kube, name))]
    assert len(tainted) == 3 and plan.breaker.tripped
    for name in tainted:
        assert [e["reason"] for e in our_events(kube, name)] == ["Xid79"]
        writes = [type(a).__name__ for a in plan.actions if a.node == name]
        assert writes == ["UpdateNode", "SetCondition", "RecordEvent"]
    (spared,) = set(NODES) - set(tainted)
    assert [e["reason"] for e in our_events(kube, spared)] == ["QuarantineSuppressed"]
    assert health.metrics.sample("konduktor_quarantines_total", {"reason": "Xid79"}) == 3


def test_a_burst_taints_every_node_before_any_node_gets_its_condition(kube: Kube, loki: LokiApi) -> None:
    """The pass's writes go in waves: every node's taint, then every node's condition. One node at a time, so that
    the order is the actuator's and not the threads'; seen in the order of the Node watch's changes."""
    _, listed_at = list_nodes(kube)
    stamp = time.time_ns()
    loki.push([(name, f"[ 9100.00000{i}] {XID_79}", stamp + i * 1000) for i, name in enumerate(NODES)])
    health = controller(kube, settings(loki=loki.settings(), node_concurrency=1))
    health.reconcile_once()

    changes = write_order(kube, listed_at, 2 * len(NODES))
    assert [what for _, what in changes] == ["taint"] * len(NODES) + ["condition"] * len(NODES), changes


def test_a_health_taint_placed_by_someone_else_is_never_removed(kube: Kube) -> None:
    manual = "gpu-h100-0002"
    patch_node(
        kube,
        manual,
        lambda n: {
            "spec": {
                "taints": [*n["spec"]["taints"], {"key": HEALTH_TAINT_KEY, "value": "manual", "effect": "NoSchedule"}]
            }
        },
    )
    # A burn-in of that node passes (an operator ran it); the controller clears nothing it did not place.
    job = node_job("20250101-000000", manual, 10, options_for_tier("quick"), NAMESPACE)
    job["metadata"]["labels"][REQUALIFICATION_LABEL] = "true"
    job["spec"]["template"]["spec"]["serviceAccountName"] = "konduktor-burnin"
    kube.create(job)
    wait_for_job(kube, job["metadata"]["name"])
    plan = controller(kube, settings()).reconcile_once()
    assert any("not placed by this controller" in n.message for n in plan.notices)
    assert health_taints(node(kube, manual)) == [{"key": HEALTH_TAINT_KEY, "value": "manual", "effect": "NoSchedule"}]
    assert [a for a in plan.actions if a.node == manual] == []


def test_dry_run_writes_nothing(sim: Sim, kube: Kube, loki: LokiApi, tmp_path: Path) -> None:
    api = loki
    set_allocatable(kube, "gpu-h100-0001", 9)
    api.add("gpu-h100-0002", XID_79)
    before = {name: node(kube, name)["metadata"]["resourceVersion"] for name in NODES}
    config = write_config(tmp_path / "health.yaml", settings(loki=api.settings(), dry_run=True, cooldown_seconds=0))
    result = run_once_cli(sim, config)
    assert result["writes"] == []
    assert {(w["action"], w["node"]) for w in result["withheld"]} >= {
        ("taint", "gpu-h100-0001"),
        ("taint", "gpu-h100-0002"),
    }
    after = {name: node(kube, name)["metadata"]["resourceVersion"] for name in NODES}
    assert after == before
    assert our_events(kube) == []
    assert kube.get(LEASE_API, "Lease", LEASE_NAME, NAMESPACE) is None
    assert kube.list("batch/v1", "Job", NAMESPACE) == []


# --- Prometheus ------------------------------------------------------------------------------------------------


def openmetrics(now: float) -> str:
    """A double-bit ECC error on one GPU of gpu-h100-0002, a failed row remap on gpu-h100-0003, quiet elsewhere."""
    quiet = [0, 0, 0, 0]
    series_by_metric = {
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": {"gpu-h100-0002": [0, 0, 2, 2], "gpu-h100-0000": quiet},
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": {"gpu-h100-0003": [0, 1, 1, 1], "gpu-h100-0000": quiet},
    }
    lines = []
    for name, values in series_by_metric.items():
        for host, series in values.items():
            for offset, value in zip((80, 60, 40, 20), series, strict=True):
                lines.append(
                    f'{name}{{gpu="3",Hostname="{host}",modelName="NVIDIA H100 80GB HBM3"}} {value} {now - offset:.3f}'
                )
    return "\n".join([*lines, "# EOF", ""])


def test_dcgm_faults_in_prometheus_quarantine_their_nodes(kube: Kube, prometheus: Callable[[str], str]) -> None:
    url = prometheus(openmetrics(time.time()))
    health = controller(kube, settings(prometheus=PrometheusSettings(url=url)))
    health.reconcile_once()
    ecc, remap = node(kube, "gpu-h100-0002"), node(kube, "gpu-h100-0003")
    assert health_taints(ecc) and health_taints(remap)
    assert ecc["metadata"]["annotations"][QUARANTINE_REASON].startswith("EccDoubleBitError")
    assert remap["metadata"]["annotations"][QUARANTINE_REASON].startswith("RowRemapFailure")
    (evidence,) = [e for e in our_events(kube, "gpu-h100-0002") if e["reason"] == "EccDoubleBitError"]
    assert 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="3"} = 2' in evidence["message"]
    assert health_taints(node(kube, "gpu-h100-0000")) == []
    assert health.metrics.sample("konduktor_signal_source_up", {"source": "prometheus"}) == 1


def test_a_poll_reads_the_raw_samples_of_the_nodes_whose_health_series_moved_alone(
    prometheus: Callable[[str], str],
) -> None:
    """A fleet's quiet GPUs are not read sample by sample on every poll: only the nodes with a series that moved in
    the window, which includes every fault `read` finds. Quiet here: a counter and an Xid code that hold a non-zero
    value from before the window (old errors), and every health field at zero on 40 more nodes."""
    now = time.time()
    lines = openmetrics(now).removesuffix("# EOF\n").splitlines()
    old = {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 5, "DCGM_FI_DEV_XID_ERRORS": 79}
    for name, value in old.items():
        for offset in (80, 60, 40, 20):
            lines.append(f'{name}{{gpu="1",Hostname="gpu-h100-0004"}} {value} {now - offset:.3f}')
    for index in range(10, 50):
        for name in HEALTH_FIELDS:
            lines += [f'{name}{{gpu="0",Hostname="gpu-h100-{index:04d}"}} 0 {now - t:.3f}' for t in (80, 60, 40, 20)]
    # OpenMetrics keeps a family's samples together: sorted by name, each series' samples stay in time order.
    url = prometheus("\n".join([*sorted(lines, key=lambda line: line.split("{")[0]), "# EOF", ""]))
    source = PrometheusSource(PrometheusSettings(url=url), HealthMetrics())

    assert source.moved_nodes(now) == ["gpu-h100-0002", "gpu-h100-0003"]
    found = {(f.sample.node, f.sample.metric, f.sample.value) for f in source.read(now)}
    assert found == {
        ("gpu-h100-0002", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2),
        ("gpu-h100-0003", "DCGM_FI_DEV_ROW_REMAP_FAILURE", 1),
    }
    assert source.read(now) == []  # each fault once


# --- the watch loop --------------------------------------------------------------------------------------------


def test_the_watch_loop_acts_within_a_poll_and_serves_health_and_metrics(kube: Kube, loki: LokiApi) -> None:
    api = loki
    health = controller(kube, settings(loki=api.settings()), name="loop")
    server = HealthServer(health.metrics.registry, health.healthy, port=0, host="127.0.0.1")
    server.start()
    stop = threading.Event()
    loop = threading.Thread(target=health.run, args=(stop,))
    loop.start()
    try:
        wait_until("the controller to lead", lambda: health.leading, timeout=30)
        # A poll with nothing to do first, so the signals below meet a controller in its steady state.
        wait_until(
            "the controller to poll Loki",
            lambda: health.metrics.sample("konduktor_signal_source_up", {"source": "loki"}) == 1,
            timeout=30,
        )
        # A watch signal: the node's GPUs drop (grace 0).
        started = time.monotonic()
        set_allocatable(kube, "gpu-h100-0001", 9)
        wait_until("the lost GPU to be tainted", lambda: bool(health_taints(node(kube, "gpu-h100-0001"))), 30, 0.05)
        watch_latency = time.monotonic() - started
        # A log signal: a line stamped now.
        stamp = api.add("gpu-h100-0002", XID_79)
        wait_until("the Xid 79 node to be tainted", lambda: bool(health_taints(node(kube, "gpu-h100-0002"))), 30, 0.05)
        log_latency = time.time_ns() / 1e9 - stamp / 1e9
        print(f"\nlatency: lost GPU -> taint {watch_latency:.3f}s; Loki line -> taint {log_latency:.3f}s (poll 1s)")

        base = f"http://127.0.0.1:{server.port}"
        assert requests.get(f"{base}/healthz", timeout=5).status_code == 200
        expected = (
            'konduktor_quarantines_total{reason="Xid79"} 1.0',
            'konduktor_detection_latency_seconds_count{source="kernel_log"} 1.0',
            "konduktor_quarantined_nodes 2.0",
        )
        # The metrics are recorded once the pass that made the writes ends, just after the taint is visible.
        wait_until(
            "the metrics to show both quarantines",
            lambda: all(line in requests.get(f"{base}/metrics", timeout=5).text for line in expected),
            10,
        )
    finally:
        stop.set()
        loop.join(timeout=30)
        server.stop()
    lease = kube.get(LEASE_API, "Lease", LEASE_NAME, NAMESPACE)
    assert lease is not None and lease["spec"].get("holderIdentity") is None


def test_a_lost_gpu_is_tainted_while_loki_answers_garbage(sim: Sim, kube: Kube, tmp_path: Path) -> None:
    """The controller process outlives every malformed Loki answer: the source is marked down, /healthz answers,
    and the Node watch still quarantines a node that loses a GPU."""
    garbage = [
        b"[]",
        b'{"status":"success","data":{"resultType":"streams","result":[{"stream":{"node":"gpu-h100-0001"},'
        b'"values":[["not-a-number","NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."]]}]}}',
        b'{"status":"success","data":{"resultType":"streams","result":[{"stream":"node","values":{}}]}}',
    ]
    with serving(garbage) as url:
        config = write_config(tmp_path / "health.yaml", settings(loki=loki_settings(url)))
        port = free_port()
        log = (tmp_path / "controller.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "konduktor.cli.health", "run", "--kubeconfig", str(sim.kubeconfig),
             "--config", str(config), "--lease-namespace", NAMESPACE, "--port", str(port)],
            env={**os.environ, "POD_NAME": "garbage-test"}, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"

        def metrics() -> str:
            try:
                return requests.get(f"{base}/metrics", timeout=5).text
            except requests.RequestException:
                return ""

        try:
            wait_until("the controller to lead", lambda: holder(kube) == "garbage-test", timeout=60)
            # Three failed polls: each garbage answer has been read (the last one repeats).
            wait_until(
                "Loki to be polled past every garbage answer",
                lambda: (tmp_path / "controller.log").read_text(errors="replace").count("cannot read kernel logs") >= 3,
                timeout=60,
            )
            assert process.poll() is None, (tmp_path / "controller.log").read_text()
            assert 'konduktor_signal_source_up{source="loki"} 0.0' in metrics()
            set_allocatable(kube, "gpu-h100-0001", 9)
            wait_until("the lost GPU to be tainted", lambda: bool(health_taints(node(kube, "gpu-h100-0001"))), 30)
            assert process.poll() is None, (tmp_path / "controller.log").read_text()
            assert requests.get(f"{base}/healthz", timeout=5).status_code == 200
            assert 'konduktor_signal_source_up{source="loki"} 0.0' in metrics()
        finally:
            process.terminate()
            process.wait(timeout=30)
    said = (tmp_path / "controller.log").read_text(errors="replace")
    assert "bug:" not in said and "Traceback" not in said, said


def test_a_write_computed_from_a_stale_node_is_redone_and_keeps_the_other_writers_taint(kube: Kube) -> None:
    victim = "gpu-h100-0003"
    health = controller(kube, settings())
    nodes, _ = list_nodes(kube)
    health.nodes.apply(WatchEvent("Node", "SYNC", tuple(nodes)))  # the controller's view, about to go stale
    patch_node(
        kube,
        victim,
        lambda n: {"spec": {"taints": [*n["spec"]["taints"], {"key": FOREIGN_TAINT, "effect": "NoSchedule"}]}},
    )
    ours = Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy")
    outcome = health.actuator.execute([UpdateNode(victim, add_taints=(ours,), annotations={QUARANTINED_AT: "x"})], {})
    assert not outcome.failed
    assert {t["key"] for t in node(kube, victim)["spec"]["taints"]} == {
        "nvidia.com/gpu",
        FOREIGN_TAINT,
        HEALTH_TAINT_KEY,
    }


def test_killing_the_leader_hands_over_to_the_standby(sim: Sim, kube: Kube, tmp_path: Path) -> None:
    config = write_config(tmp_path / "health.yaml", settings(lease_seconds=2))
    log = (tmp_path / "leader.log").open("wb")
    leader = subprocess.Popen(
        [sys.executable, "-m", "konduktor.cli.health", "run", "--kubeconfig", str(sim.kubeconfig),
         "--config", str(config), "--lease-namespace", NAMESPACE, "--port", "0"],
        env={**os.environ, "POD_NAME": "replica-a"}, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    standby = controller(kube, settings(lease_seconds=2), name="replica-b")
    stop = threading.Event()
    loop = threading.Thread(target=standby.run, args=(stop,))
    try:
        wait_until("replica-a to lead", lambda: holder(kube) == "replica-a", timeout=60)
        started = time.time()
        loop.start()

        def renewed_past_a_lease() -> bool:
            # The Lease as the standby last read it: renewed by replica-a after the Lease would have expired had
            # replica-a stopped when the standby started, so the standby has had its chance to take it over.
            seen = standby.lease.lease if standby.lease is not None else None
            renewed = (seen or {}).get("spec", {}).get("renewTime")
            return bool(renewed) and datetime.fromisoformat(renewed).timestamp() > started + 2

        wait_until("the standby to see replica-a renew the Lease", renewed_past_a_lease, timeout=30)
        assert holder(kube) == "replica-a" and not standby.leading
        leader.send_signal(signal.SIGKILL)  # no chance to hand the Lease back
        leader.wait(timeout=10)
        set_allocatable(kube, "gpu-h100-0002", 9)
        wait_until("the standby to lead", lambda: holder(kube) == standby.identity, timeout=30)
        wait_until("the standby to quarantine", lambda: bool(health_taints(node(kube, "gpu-h100-0002"))), timeout=30)
        lease = kube.get(LEASE_API, "Lease", LEASE_NAME, NAMESPACE)
        assert lease is not None and lease["spec"]["leaseTransitions"] == 1
    finally:
        if leader.poll() is None:
            leader.kill()
        stop.set()
        if loop.is_alive():
            loop.join(timeout=30)


def holder(kube: Kube) -> str | None:
    lease = kube.get(LEASE_API, "Lease", LEASE_NAME, NAMESPACE)
    return None if lease is None else lease["spec"].get("holderIdentity")


def test_an_api_server_restart_loses_no_fault(sim: Sim, kube: Kube, loki: LokiApi, tmp_path: Path) -> None:
    """The API server dies (and every watch with it) while a fault is reported: the controller keeps running
    and acts once the server is back; a GPU lost after the restart is seen through the new watch."""
    api = loki
    config = write_config(tmp_path / "health.yaml", settings(loki=api.settings()))
    log = (tmp_path / "controller.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "konduktor.cli.health", "run", "--kubeconfig", str(sim.kubeconfig),
         "--config", str(config), "--lease-namespace", NAMESPACE, "--port", "0"],
        env={**os.environ, "POD_NAME": "survivor"}, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until("the controller to lead", lambda: holder(kube) == "survivor", timeout=60)
        apiserver = int((sim.cluster.cluster_dir / "pids" / "kube-apiserver.pid").read_text())
        os.kill(apiserver, signal.SIGKILL)
        wait_until("the API server to be gone", lambda: not sim.cluster.api_ready(), timeout=30)
        api.add("gpu-h100-0002", XID_79)
        # Renewals fail for as long as the Lease lasts (3 s, one attempt a second): the controller loses the lead
        # while the server is down, and must take it again once the server is back.
        wait_until(
            "the lease renewals to fail for a whole lease",
            lambda: (
                (tmp_path / "controller.log").read_text(errors="replace").count("cannot reach the leader Lease") >= 3
            ),
            timeout=30,
        )
        assert process.poll() is None, (tmp_path / "controller.log").read_text()[-3000:]

        restarted = sim.cluster.kwokctl("start", "cluster", "--wait", "2m")
        assert restarted.returncode == 0, restarted.stderr[-2000:]
        wait_until("the API server to answer", sim.cluster.api_ready, timeout=60)
        wait_until("the Xid 79 node to be tainted", lambda: bool(health_taints(node(kube, "gpu-h100-0002"))), 60)
        set_allocatable(kube, "gpu-h100-0003", 9)
        wait_until("the lost GPU to be tainted", lambda: bool(health_taints(node(kube, "gpu-h100-0003"))), 30)
        assert [e["reason"] for e in our_events(kube, "gpu-h100-0002")] == ["Xid79"]  # acted on once
    finally:
        process.kill()
        process.wait(timeout=10)
        log.close()
        # Kueue and the GPU agent lost their connections too: `sim up` repairs whatever did not come back.
        spec = sim.cluster.spec()
        assert spec is not None
        sim.cluster.up(spec)


def test_a_gpu_condition_set_by_another_tool_quarantines_once(kube: Kube) -> None:
    victim, other_tool = "gpu-h100-0001", "nvsentinel-test"

    def condition(status: dict[str, Any]) -> None:
        kube.apply_status(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": victim}, "status": status}, other_tool
        )

    condition(
        {
            "conditions": [
                {
                    "type": "GpuMemWatch",
                    "status": "True",
                    "reason": "GpuMemWatchIsNotHealthy",
                    "message": "ErrorCode:DCGM_FR_VOLATILE_DBE_DETECTED GPU:3",
                    "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "lastHeartbeatTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            ]
        }
    )
    try:
        health = controller(kube, settings())
        health.reconcile_once()
        quarantined = node(kube, victim)
        assert health_taints(quarantined) == [{"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}]
        ours = gpu_condition(quarantined)
        assert ours is not None and (ours["status"], ours["reason"]) == ("False", "GpuMemWatch")
        (event,) = our_events(kube, victim)
        assert "DCGM_FR_VOLATILE_DBE_DETECTED" in event["message"]
        # The other tool's condition is still there on the next passes: nothing more is written.
        version = node(kube, victim)["metadata"]["resourceVersion"]
        assert [a for a in health.reconcile_once().actions if a.node == victim] == []
        assert node(kube, victim)["metadata"]["resourceVersion"] == version
        assert health_taints(node(kube, "gpu-h100-0000")) == []
    finally:
        condition({})  # an apply that names no condition removes the other tool's


def test_a_tripped_breaker_outlives_a_restart_until_an_operator_resets_it(kube: Kube, loki: LokiApi) -> None:
    api = loki
    tight = settings(loki=api.settings(), breaker=BreakerSettings(max_fraction=1, max_nodes=1))

    def run_loop(name: str) -> tuple[HealthController, threading.Event, threading.Thread]:
        health = controller(kube, tight, name=name)
        stop = threading.Event()
        loop = threading.Thread(target=health.run, args=(stop,))
        loop.start()
        wait_until(f"{name} to lead", lambda: health.leading, timeout=30)
        return health, stop, loop

    def tripped(health: HealthController) -> bool:
        return health.metrics.sample("konduktor_quarantine_breaker_tripped") == 1

    first, stop, loop = run_loop("first")
    try:
        api.add("gpu-h100-0000", XID_79)
        api.add("gpu-h100-0001", XID_79, time.time_ns() + 1000)
        wait_until("the breaker to trip", lambda: tripped(first), timeout=30)
        lease = kube.get(LEASE_API, "Lease", LEASE_NAME, NAMESPACE)
        assert lease is not None and BREAKER_ANNOTATION in lease["metadata"]["annotations"]
    finally:
        stop.set()
        loop.join(timeout=30)

    # A new process takes the lead: still tripped, so a new fault is reported but quarantines nothing.
    second, stop, loop = run_loop("second")
    try:
        wait_until("the trip to be restored from the Lease", lambda: tripped(second), timeout=10)
        api.add("gpu-h100-0002", XID_79)
        wait_until("the fault to be reported", lambda: gpu_condition(node(kube, "gpu-h100-0002")) is not None, 30)
        assert health_taints(node(kube, "gpu-h100-0002")) == []

        # The trip removed from the Lease by hand (no reset stamp): the held-back node is quarantined, and the
        # controller stamps the reset, from which the window counts again.
        kube.patch(LEASE_API, "Lease", LEASE_NAME, {"metadata": {"annotations": {BREAKER_ANNOTATION: None}}}, NAMESPACE)
        wait_until("the held-back node to be quarantined", lambda: bool(health_taints(node(kube, "gpu-h100-0002"))), 30)
        lease = kube.get(LEASE_API, "Lease", LEASE_NAME, NAMESPACE)
        assert lease is not None and BREAKER_RESET_ANNOTATION in lease["metadata"]["annotations"]
    finally:
        stop.set()
        loop.join(timeout=30)


def run_cli(sim: Sim, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main([*args, "--kubeconfig", str(sim.kubeconfig)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def breaker_resets(kube: Kube) -> list[dict[str, Any]]:
    return [e for e in kube.list("v1", "Event", SYSTEM_NAMESPACE) if e["reason"] == "BreakerReset"]


@pytest.fixture
def deploy(kube: Kube) -> Iterator[Callable[[HealthSettings], None]]:
    with health_settings_deployed(kube) as deployed:
        yield deployed


def test_a_reset_breaker_quarantines_the_nodes_it_held_back_within_seconds(
    sim: Sim, kube: Kube, loki: LokiApi, capsys: pytest.CaptureFixture[str], deploy: Callable[[HealthSettings], None]
) -> None:
    """The default limit on these 4 nodes is 2. Two faults are quarantined; a third (a kernel-log Xid, read once)
    and a fourth (a lost GPU, seen on every pass) are held back, and `nodes` says so. `nodes breaker reset` records
    who and why on the Lease, and both held nodes are quarantined within seconds, not after the duplicate filter's
    window (180 s here)."""
    ours = settings(loki=loki.settings(), breaker=BreakerSettings())
    health = HealthController(kube, ours, identity=f"breaker-{time.monotonic_ns()}", lease_namespace=SYSTEM_NAMESPACE)
    deploy(ours)  # `nodes` judges with the controller's settings, as konduktor-core deploys them
    kube.delete(LEASE_API, "Lease", LEASE_NAME, SYSTEM_NAMESPACE)
    stop = threading.Event()
    loop = threading.Thread(target=health.run, args=(stop,))
    loop.start()

    def cli(*args: str) -> tuple[int, str, str]:
        return run_cli(sim, capsys, *args)

    def tainted(name: str) -> bool:
        return bool(health_taints(node(kube, name)))

    try:
        wait_until("the controller to lead", lambda: health.leading, timeout=30)
        loki.add(NODES[0], XID_79)
        loki.add(NODES[1], XID_79, time.time_ns() + 1000)
        wait_until("two quarantines", lambda: tainted(NODES[0]) and tainted(NODES[1]), timeout=30)
        assert health.metrics.sample("konduktor_quarantine_breaker_tripped") == 0  # two is an ordinary week
        loki.add(NODES[2], XID_79)
        set_allocatable(kube, NODES[3], 9)
        wait_until("both held back", lambda: all(gpu_condition(node(kube, n)) is not None for n in NODES[2:]), 30)
        assert not tainted(NODES[2]) and not tainted(NODES[3])

        document = json.loads(cli("nodes", "-o", "json")[1])
        breaker = document["breaker"]
        assert (breaker["tripped"], breaker["quarantines"], breaker["limit"]) == (True, 2, 2)
        assert breaker["counted"] == NODES[:2] and breaker["window_seconds"] == 600
        assert (document["controller"]["leader"], document["controller"]["dry_run"]) == (health.identity, False)
        steps = {row["node"]: row["next_step"] for row in document["nodes"]}
        assert all(steps[n].startswith("breaker tripped: held back") for n in NODES[2:]), steps
        code, out, _ = cli("nodes")
        assert code == 0 and "breaker: TRIPPED since " in out and f"next: {NODES[2]}: breaker tripped" in out
        assert cli("nodes", "breaker")[0] == 1

        code, _, err = cli("nodes", "breaker", "reset", "--reason", "two boards replaced, rack 7 checked")
        assert code == 0 and "breaker: reset" in err
        wait_until("the held nodes to be quarantined", lambda: tainted(NODES[2]) and tainted(NODES[3]), timeout=20)
        [reset] = breaker_resets(kube)
        assert reset["involvedObject"]["kind"] == "Lease" and reset["involvedObject"]["name"] == LEASE_NAME
        assert reset["message"].startswith("fleet breaker reset by ")
        assert (
            "two boards replaced, rack 7 checked" in reset["message"]
            and f"({NODES[0]}, {NODES[1]})" in reset["message"]
        )

        # The window counts from the reset: the two nodes quarantined since; the breaker is closed.
        breaker = json.loads(cli("nodes", "-o", "json")[1])["breaker"]
        assert (breaker["tripped"], breaker["counted"]) == (False, NODES[2:]) and breaker["reset_at"]
        code, _, err = cli("nodes", "breaker", "reset", "--reason", "again")
        assert code == 0 and "nothing to reset" in err
        assert len(breaker_resets(kube)) == 1
    finally:
        stop.set()
        loop.join(timeout=30)
        kube.delete(LEASE_API, "Lease", LEASE_NAME, SYSTEM_NAMESPACE)
        for event in breaker_resets(kube):
            kube.delete("v1", "Event", event["metadata"]["name"], SYSTEM_NAMESPACE)


@contextlib.contextmanager
def unanswering_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """A Prometheus that accepts each connection and never answers (hung, or still evaluating): its URL and the
    connections it holds. A client that gives up closes its connection; the server closes them all at the end."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                request = b""
                while b"\r\n\r\n" not in request:  # the request read, so that what is left to read is the close
                    request += connection.recv(65536)
                held.append(connection)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", held
    finally:
        listener.close()
        for connection in held:
            connection.close()


def closed_by_client(connection: socket.socket) -> bool:
    """Whether the client has closed this connection (its request given up)."""
    connection.setblocking(False)
    try:
        return connection.recv(65536, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    finally:
        connection.setblocking(True)


def test_a_lost_gpu_is_tainted_while_prometheus_has_not_answered_the_dcgm_read(kube: Kube) -> None:
    """The loop reads DCGM on a thread of its own: a lost GPU reported while Prometheus holds the poll's read
    unanswered is tainted before that read gives up (its 10-s timeout), not after it."""
    with unanswering_server() as (url, held):
        health = controller(kube, settings(prometheus=PrometheusSettings(url=url)), name="dcgm-hung")
        stop = threading.Event()
        loop = threading.Thread(target=health.run, args=(stop,))
        loop.start()
        try:
            wait_until("the controller to lead", lambda: health.leading, timeout=30)
            wait_until("the DCGM read to reach Prometheus", lambda: bool(held), timeout=30)
            read = held[0]
            set_allocatable(kube, "gpu-h100-0001", 9)
            wait_until("the lost GPU to be tainted", lambda: bool(health_taints(node(kube, "gpu-h100-0001"))), 30, 0.05)
            assert not closed_by_client(read), "the taint waited for the DCGM read to give up"
        finally:
            stop.set()
            loop.join(timeout=30)

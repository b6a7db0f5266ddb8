"""The pure parts of the health controller's edges: what is read from Nodes, Loki, Prometheus and Jobs, and the
writes computed for the API. The cluster round trips are in test_health_cluster.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from konduktor.gpu.kernel_log import parse_line
from konduktor.health.classify import DcgmSample, DuplicateFilter, Finding, LostGpuWatch, classify_report
from konduktor.health.decide import CONDITION_TYPE, RecordEvent, SetCondition, Taint, UpdateNode, first_taints
from konduktor.health.logs import JsonFormatter
from konduktor.health.loki import LokiCursor, cursor_after, entries, line_key, unseen
from konduktor.health.node_reading import expected_gpus, is_gpu_node, node_state
from konduktor.health.node_states import NodeStates
from konduktor.health.node_writes import node_patch
from konduktor.health.nodes import NodeCache
from konduktor.health.prometheus import DcgmSeries, Novelty, shape, signal
from konduktor.health.requalification import run_id_for
from konduktor.health.requalification_runs import Run, acted_on, run_of
from konduktor.health.settings import GpuTypeSettings, HealthSettings, load_settings
from konduktor.health.signals import DcgmSignal
from konduktor.health.telemetry import HealthMetrics
from konduktor.kube.watch import WatchEvent
from konduktor.observability.metrics import HEALTH_CONTROLLER_METRICS
from konduktor.vocabulary import HEALTH_TAINT_KEY, QUARANTINED_AT, REQUALIFIED_AT

OURS = {"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}
GPU_POOL = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}


def a_node(
    name: str = "gpu-1",
    *,
    taints: list[dict[str, str]] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    allocatable: str | None = "8",
    conditions: list[dict[str, str]] | None = None,
    version: str = "100",
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": version,
            "labels": labels or {"nvidia.com/gpu.count": "8"},
            "annotations": annotations or {},
        },
        "spec": {"taints": taints or []},
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": allocatable} if allocatable is not None else {},
            "conditions": conditions or [],
        },
    }


# --- Nodes -----------------------------------------------------------------------------------------------------


def test_the_configured_gpu_type_outranks_the_count_label() -> None:
    # GPU Feature Discovery lowers its count label when a GPU is gone: the config's count cannot drift.
    node = a_node(labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "7"})
    configured = HealthSettings(gpu_types={"h100": GpuTypeSettings(product="NVIDIA-H100-80GB-HBM3", gpus_per_node=8)})
    assert expected_gpus(node, configured) == 8
    assert expected_gpus(node, HealthSettings()) == 7
    assert expected_gpus(a_node(labels={"nvidia.com/gpu.count": "many"}), HealthSettings()) is None


def test_gpu_nodes_are_those_expected_to_have_gpus_or_advertising_them() -> None:
    cpu = a_node(labels={})
    cpu["status"]["capacity"] = {"cpu": "64"}
    assert not is_gpu_node(cpu, None)
    assert is_gpu_node(a_node(labels={}), None)
    assert is_gpu_node(cpu, 8)


def test_node_state_reads_taints_condition_and_gpus() -> None:
    node = a_node(
        taints=[OURS, GPU_POOL],
        annotations={QUARANTINED_AT: "2025-01-01T00:00:00Z"},
        allocatable="6",
        conditions=[{"type": "Ready", "status": "True"}, {"type": CONDITION_TYPE, "status": "False"}],
    )
    state = node_state(node, 8, requalification_running=True)
    assert state.taints == (
        Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy"),
        Taint("nvidia.com/gpu", "NoSchedule", ""),
    )
    assert (state.gpu_healthy, state.gpu_allocatable, state.gpu_expected) == (False, 6, 8)
    assert state.requalification_running and state.annotations[QUARANTINED_AT]
    assert node_state(a_node(allocatable=None), 8, False).gpu_allocatable is None


def test_the_cache_keeps_its_own_newer_write_over_an_older_watch_event() -> None:
    cache = NodeCache()
    cache.apply(WatchEvent("Node", "SYNC", (a_node(version="100"),)))
    cache.store(a_node(taints=[OURS], version="105"))  # the response to our own write
    cache.apply(WatchEvent("Node", "MODIFIED", (a_node(version="103"),)))  # in flight before the write
    assert cache.get("gpu-1") is not None and cache.get("gpu-1")["spec"]["taints"] == [OURS]  # type: ignore[index]
    cache.apply(WatchEvent("Node", "DELETED", (a_node(version="106"),)))
    assert cache.get("gpu-1") is None


def test_the_cache_notes_which_nodes_changed_for_the_next_pass() -> None:
    cache = NodeCache()
    cache.apply(WatchEvent("Node", "SYNC", (a_node("a", version="10"), a_node("b", version="11"))))
    assert cache.take_changed() == ({"a", "b"}, True)
    assert cache.take_changed() == (set(), False)
    cache.apply(WatchEvent("Node", "MODIFIED", (a_node("a", version="12", allocatable="7"),)))
    cache.apply(WatchEvent("Node", "MODIFIED", (a_node("b", version="9"),)))  # older than the cache's: not applied
    assert cache.take_changed() == ({"a"}, False)
    cache.store(a_node("b", taints=[OURS], version="13"))  # the response to our own write
    cache.apply(WatchEvent("Node", "DELETED", (a_node("a", version="14"),)))
    cache.apply(WatchEvent("Node", "DELETED", (a_node("c", version="15"),)))  # never known
    assert cache.take_changed() == ({"a", "b"}, False)
    # A new list replaces the cache: a node gone since counts as changed too.
    cache.apply(WatchEvent("Node", "SYNC", (a_node("d", version="16"),)))
    assert cache.take_changed() == ({"b", "d"}, True)


def test_a_later_round_judges_the_changed_nodes_and_keeps_the_lasting_ones_for_the_next_pass() -> None:
    """A pass judged the lasting signals (a GPU missing, within its grace) when it began; its later rounds judge only
    the nodes that changed since, and the lasting ones stay due for the next pass."""
    clock = [1000.0]
    states = NodeStates(HealthSettings(gpu_lost_grace_seconds=60), LostGpuWatch(60, clock=lambda: clock[0]))
    nodes = {"a": a_node("a", allocatable="7"), "b": a_node("b")}
    states.refresh(nodes, True, nodes.get, set())
    assert states.watch_signals(False, clock[0]) == []  # a is short of a GPU, in its grace
    nodes["b"] = a_node("b", allocatable="7", version="101")
    states.refresh({"b"}, False, nodes.get, set())
    assert states.watch_signals(False, clock[0], lasting=False) == []
    assert states.judgements == {"a": 1, "b": 2}
    clock[0] += 61
    assert [s.finding.node for s in states.watch_signals(False, clock[0])] == ["a", "b"]
    assert states.judgements == {"a": 2, "b": 3}


# --- Node writes -----------------------------------------------------------------------------------------------


def quarantine(node: str = "gpu-1") -> UpdateNode:
    return UpdateNode(
        node, add_taints=(Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy"),), annotations={QUARANTINED_AT: "t"}
    )


def test_a_taint_is_added_to_the_whole_list_under_the_read_version() -> None:
    patch = node_patch(a_node(taints=[GPU_POOL]), quarantine())
    assert patch == {
        "metadata": {"resourceVersion": "100", "annotations": {QUARANTINED_AT: "t"}},
        "spec": {"taints": [GPU_POOL, OURS]},
    }


def test_nothing_to_write_when_the_node_already_shows_the_change() -> None:
    assert node_patch(a_node(taints=[OURS], annotations={QUARANTINED_AT: "t"}), quarantine()) is None


def test_release_removes_only_our_taint_and_deletes_annotations() -> None:
    ours = Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy")
    release = UpdateNode("gpu-1", remove_taints=(ours,), annotations={QUARANTINED_AT: None, REQUALIFIED_AT: "t2"})
    node = a_node(taints=[GPU_POOL, OURS, {"key": "other", "effect": "NoExecute"}], annotations={QUARANTINED_AT: "t"})
    patch = node_patch(node, release)
    assert patch is not None
    assert patch["spec"]["taints"] == [GPU_POOL, {"key": "other", "effect": "NoExecute"}]
    assert patch["metadata"]["annotations"] == {QUARANTINED_AT: None, REQUALIFIED_AT: "t2"}


def test_a_nodes_first_write_goes_first_only_when_it_adds_a_taint() -> None:
    ours = Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy")
    quarantine = UpdateNode("gpu-1", add_taints=(ours,), annotations={QUARANTINED_AT: "t"})
    condition = SetCondition("gpu-1", False, "GPULost", "GPU_LOST")
    release = UpdateNode("gpu-2", remove_taints=(ours,))
    also = RecordEvent("gpu-3", "Warning", "Xid79", "also: ...")
    escalation = UpdateNode("gpu-3", add_taints=(Taint(HEALTH_TAINT_KEY, "NoExecute", "unhealthy"),))
    first, rest = first_taints([quarantine, condition, release, also, escalation])
    assert first == [quarantine]
    assert rest == [condition, release, also, escalation]


# --- Loki ------------------------------------------------------------------------------------------------------


def test_the_cursor_survives_its_text_form() -> None:
    cursor = LokiCursor(1_700_000_000_000_000_000, frozenset({"1699999999000000000.abcdef123456"}))
    assert LokiCursor.decode(cursor.encode()) == cursor
    assert LokiCursor.decode(LokiCursor(5).encode()) == LokiCursor(5)
    assert LokiCursor.decode("edited by hand") is None
    assert LokiCursor.decode(None) is None


def answer(*streams: tuple[dict[str, str], list[list[str]]]) -> dict[str, Any]:
    result = [{"stream": labels, "values": values} for labels, values in streams]
    return {"status": "success", "data": {"resultType": "streams", "result": result}}


def test_lines_of_all_streams_come_oldest_first_and_unlabelled_ones_are_skipped() -> None:
    found = entries(
        answer(
            ({"node": "b"}, [["30", "late"], ["10", "early", '{"trace":"x"}']]),
            ({"job": "kernel"}, [["20", "no node label"]]),
        ),
        "node",
    )
    assert [(line.node if line else None, stamp) for line, _, stamp in found] == [("b", 10), (None, 20), ("b", 30)]


def test_lines_read_again_in_the_margin_are_handed_out_once() -> None:
    labels = {"node": "a"}
    first = entries(answer((labels, [["100", "x"], ["200", "y"]])), "node")
    seen: set[str] = set()
    assert [line.line for line, _, _ in first if line] == [line.line for line in unseen(first, seen)]
    cursor = cursor_after(seen, end_ns=250, late_ns=100)
    # Only the line inside [end - late, end) needs remembering.
    assert cursor.seen == {line_key(labels, 200, "y")}
    # The next read starts at 150: it sees "y" again, and a line of another node that arrived late.
    again = entries(answer((labels, [["200", "y"]]), ({"node": "b"}, [["180", "late"]])), "node")
    assert [line.line for line in unseen(again, set(cursor.seen))] == ["late"]


def test_two_identical_lines_at_the_same_time_on_two_nodes_are_two_lines() -> None:
    assert line_key({"node": "a"}, 1, "x") != line_key({"node": "b"}, 1, "x")


# --- Prometheus ------------------------------------------------------------------------------------------------


def series(metric: str, *points: tuple[float, float]) -> DcgmSeries:
    return DcgmSeries("gpu-1", "0", metric, points)


def test_a_counter_rise_is_a_fault_from_the_sample_that_rose() -> None:
    found = signal(series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", (10, 4), (20, 4), (30, 6), (40, 1)))
    # 4 -> 6 is +2; 6 -> 1 is an exporter restart, whose new value 1 is all new.
    assert found == DcgmSignal(DcgmSample("gpu-1", "0", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 3), 30, "counter")
    assert signal(series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", (10, 4), (20, 4))) is None
    assert signal(series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", (10, 4))) is None  # one sample shows no rise


def test_the_xid_gauge_is_a_fault_when_it_changes_to_a_code() -> None:
    assert signal(series("DCGM_FI_DEV_XID_ERRORS", (10, 0), (20, 79), (30, 79))) == DcgmSignal(
        DcgmSample("gpu-1", "0", "DCGM_FI_DEV_XID_ERRORS", 79), 20, "code"
    )
    # The code of an old Xid that is still shown is not a new fault.
    assert signal(series("DCGM_FI_DEV_XID_ERRORS", (10, 79), (20, 79))) is None


def test_a_state_gauge_is_a_fault_since_the_start_of_its_last_run() -> None:
    found = signal(series("DCGM_FI_DEV_ROW_REMAP_FAILURE", (10, 1), (20, 0), (30, 1), (40, 1)))
    assert found is not None and (found.since, found.sample.value, found.shape) == (30, 1, "state")
    assert signal(series("DCGM_FI_DEV_ROW_REMAP_FAILURE", (10, 1), (20, 0))) is None


def test_field_shapes() -> None:
    assert shape("DCGM_FI_DEV_THERMAL_VIOLATION") == "counter"  # a duration counter in the inventory
    assert shape("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL") == "counter"
    assert shape("DCGM_FI_DEV_ROW_REMAP_PENDING") == "state"
    assert shape("DCGM_FI_DEV_XID_ERRORS") == "code"


def test_each_fault_is_handed_out_once_while_it_stays_in_the_window() -> None:
    novelty = Novelty(window_seconds=120)
    rise = signal(series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", (10, 0), (20, 1)))
    state = signal(series("DCGM_FI_DEV_ROW_REMAP_FAILURE", (10, 1)))
    assert rise is not None and state is not None
    assert novelty.new([rise, state], now=30) == [rise, state]
    assert novelty.new([rise, state], now=40) == []
    # The state ended and came back: a new fault. The rise left the window and is forgotten.
    assert novelty.new([], now=200) == []
    assert novelty.new([state], now=210) == [state]


# --- requalification -------------------------------------------------------------------------------------------


def a_job(*conditions: dict[str, str], completed: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if completed:
        status["completionTime"] = completed
    return {
        "metadata": {
            "name": "kb-1",
            "annotations": {"konduktor.ai/node": "gpu-1", "konduktor.ai/burnin-tier": "quick"},
        },
        "status": status,
    }


def test_a_job_run_is_finished_when_complete_or_failed() -> None:
    assert run_of(a_job()) == Run("kb-1", "gpu-1", "quick", None, None)
    done = run_of(a_job({"type": "Complete", "status": "True"}, completed="2025-01-01T00:00:10Z"))
    assert done is not None and done.finished_at == 1735689610 and done.failure is None
    failed = run_of(
        a_job(
            {
                "type": "Failed",
                "status": "True",
                "reason": "DeadlineExceeded",
                "message": "Job was active longer than specified deadline",
                "lastTransitionTime": "2025-01-01T00:00:20Z",
            }
        )
    )
    assert failed is not None and failed.failure == "DeadlineExceeded: Job was active longer than specified deadline"
    assert run_of({"metadata": {"name": "not-ours"}}) is None


def test_a_finished_run_was_acted_on_when_the_node_was_stamped_after_it_ended() -> None:
    run = Run("kb-1", "gpu-1", "quick", 1735689610.0, None)
    stamped = node_state(a_node(annotations={REQUALIFIED_AT: "2025-01-01T00:00:10Z"}), 8, False)
    earlier = node_state(a_node(annotations={REQUALIFIED_AT: "2025-01-01T00:00:09Z"}), 8, False)
    assert acted_on(run, stamped) and not acted_on(run, earlier)
    assert not acted_on(run, node_state(a_node(), 8, False))


def test_run_ids_are_valid_and_distinct_per_node() -> None:
    first, second = run_id_for("gpu-1", 1735689600), run_id_for("gpu-2", 1735689600)
    assert first.startswith("20250101-000000-") and len(first) <= 20 and first != second


# --- metrics and the core's small additions --------------------------------------------------------------------


def _xid79() -> Finding:
    report = parse_line("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.")
    assert report is not None
    return classify_report(report, "gpu-1", HealthSettings())


def test_every_metric_of_the_contract_is_exported_with_its_labels() -> None:
    metrics = HealthMetrics()
    text = generate_latest(metrics.registry).decode()
    for metric in HEALTH_CONTROLLER_METRICS:
        assert f"# TYPE {metric.name} {metric.type.value}" in text
    metrics.fault(_xid79())
    assert (
        'konduktor_gpu_faults_total{code="79",kind="xid",node="gpu-1",reason="Xid79"} 1.0'
        in generate_latest(metrics.registry).decode()
    )


def test_a_released_node_loses_its_quarantine_series() -> None:
    metrics = HealthMetrics()
    metrics.quarantine_state({"gpu-1": "Xid79", "gpu-2": "GPULost"})
    metrics.quarantine_state({"gpu-2": "GPULost"})
    assert metrics.sample("konduktor_node_quarantined", {"node": "gpu-1", "reason": "Xid79"}) is None
    assert metrics.sample("konduktor_node_quarantined", {"node": "gpu-2", "reason": "GPULost"}) == 1
    assert metrics.sample("konduktor_quarantined_nodes") == 1


def test_a_forgotten_fault_passes_the_duplicate_filter_again() -> None:
    watch = LostGpuWatch(0, clock=lambda: 5.0)
    finding = watch.observe("gpu-1", 7, 8)
    assert finding is not None and watch.short_since("gpu-1") == 5.0
    duplicates = DuplicateFilter(180, clock=lambda: 0.0)
    assert duplicates.admit(finding) and not duplicates.admit(finding)
    duplicates.forget(finding)
    assert duplicates.admit(finding)


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_a_config_without_settings_is_the_defaults(text: str, tmp_path: Path) -> None:
    path = tmp_path / "health.yaml"
    path.write_text(text)
    assert load_settings(path) == HealthSettings()


def test_log_lines_are_json_objects_with_their_fields() -> None:
    record = logging.LogRecord("konduktor.health", logging.WARNING, __file__, 1, "write failed", None, None)
    record.fields = {"node": "gpu-1", "error": "409"}
    entry = json.loads(JsonFormatter().format(record))
    assert entry["level"] == "warning" and entry["message"] == "write failed"
    assert (entry["node"], entry["error"]) == ("gpu-1", "409")


def test_a_forgotten_dcgm_fault_is_handed_out_again() -> None:
    novelty = Novelty(window_seconds=120)
    rise = signal(series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", (10, 0), (20, 1)))
    assert rise is not None and novelty.new([rise], now=30) == [rise]
    novelty.forget(rise)
    assert novelty.new([rise], now=31) == [rise]

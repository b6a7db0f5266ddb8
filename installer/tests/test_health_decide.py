"""Decisions: quarantine, circuit breaker, opt-out, dry-run, ownership of taints, NoExecute, requalification."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from konduktor.burnin.results import CheckResult, NodeVerdict, Verdict
from konduktor.gpu.kernel_log import parse_line
from konduktor.health.classify import Finding, LostGpuWatch, classify_report
from konduktor.health.decide import (
    Action,
    BreakerState,
    NodeState,
    Plan,
    RecordEvent,
    SetCondition,
    StartRequalification,
    Taint,
    UpdateNode,
    breaker_limit,
    decide,
    quarantined_by_us,
    restore_breaker,
)
from konduktor.health.settings import BreakerSettings, HealthSettings
from konduktor.vocabulary import (
    HEALTH_TAINT_KEY,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    REQUALIFICATION_RESULT,
    REQUALIFIED_AT,
)

NOW = 1_750_000_000.0  # 2025-06-15T15:06:40Z
DEFAULTS = HealthSettings()
GPU_OPERATOR_TAINT = Taint("nvidia.com/gpu", "NoSchedule", "present")


def xid(node: str, code: int, bus: int = 0x3B) -> Finding:
    report = parse_line(f"NVRM: Xid (PCI:0000:{bus:02x}:00): {code}, test")
    assert report is not None
    return classify_report(report, node, DEFAULTS)


def verdict(node: str, outcome: str, detail: str = "ok") -> NodeVerdict:
    """A burn-in verdict decided by one check whose summary is `detail`."""
    check = CheckResult("dcgm_diag", Verdict(outcome), "dcgm", summary=detail)
    return NodeVerdict(node, "NVIDIA H100 80GB HBM3", "H100-SXM", Verdict(outcome), (check,))


def fleet(count: int, labels: Mapping[str, str] | None = None) -> dict[str, NodeState]:
    return {f"gpu-{i}": NodeState(f"gpu-{i}", labels=labels or {}) for i in range(count)}


def stamp(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def quarantined(name: str, at: float = NOW - 3600, reason: str = "Xid79 GPU_HAS_FALLEN_OFF_THE_BUS") -> NodeState:
    return NodeState(
        name,
        annotations={QUARANTINED_AT: stamp(at), QUARANTINE_REASON: reason},
        taints=(GPU_OPERATOR_TAINT, Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy")),
        gpu_healthy=False,
    )


def new_quarantines(actions: Sequence[Action]) -> list[str]:
    return [a.node for a in actions if isinstance(a, UpdateNode) and a.add_taints and QUARANTINED_AT in a.annotations]


T = TypeVar("T")


def of_type(actions: Sequence[Action], kind: type[T]) -> list[T]:
    return [a for a in actions if isinstance(a, kind)]


def apply(plan: Plan, nodes: Mapping[str, NodeState]) -> dict[str, NodeState]:
    """What the Kubernetes edge would leave behind after carrying out the plan."""
    result = dict(nodes)
    for action in plan.actions:
        if isinstance(action, UpdateNode):
            node = result[action.node]
            taints = tuple(t for t in node.taints if t not in action.remove_taints) + action.add_taints
            annotations = {**node.annotations, **action.annotations}
            result[action.node] = replace(
                node, taints=taints, annotations={k: v for k, v in annotations.items() if v is not None}
            )
        elif isinstance(action, SetCondition):
            result[action.node] = replace(result[action.node], gpu_healthy=action.healthy)
    return result


# --- quarantine -------------------------------------------------------------------------------------------


def test_a_hardware_fault_quarantines_with_two_node_writes_and_one_event() -> None:
    nodes = fleet(10)
    plan = decide([xid("gpu-1", 48)], nodes, BreakerState(), DEFAULTS, NOW)
    update, condition, event = plan.actions
    assert update == UpdateNode(
        "gpu-1",
        add_taints=(Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy"),),
        annotations={QUARANTINED_AT: "2025-06-15T15:06:40Z", QUARANTINE_REASON: "Xid48 GPU_ECC_DBE on 0000:3b:00"},
    )
    assert condition == SetCondition(
        "gpu-1", False, "Xid48", "GPU_ECC_DBE: Double-bit ECC error; recommended action: reset_gpu"
    )
    assert isinstance(event, RecordEvent) and event.event_type == "Warning" and event.reason == "Xid48"
    assert "NVRM: Xid (PCI:0000:3b:00): 48, test" in event.message  # the evidence travels with the event
    assert plan.breaker.recent == (NOW,)


def test_application_xid_only_records_an_event() -> None:
    plan = decide([xid("gpu-1", 13)], fleet(3), BreakerState(), DEFAULTS, NOW)
    assert [type(a) for a in plan.actions] == [RecordEvent]
    assert plan.breaker.recent == ()


def test_a_repeat_on_a_quarantined_node_writes_nothing_and_a_new_fault_only_an_event() -> None:
    nodes = {"gpu-1": quarantined("gpu-1")}
    assert decide([xid("gpu-1", 79)], nodes, BreakerState(), DEFAULTS, NOW).actions == ()
    plan = decide([xid("gpu-1", 48)], nodes, BreakerState(), DEFAULTS, NOW)
    assert [type(a) for a in plan.actions] == [RecordEvent]


def test_two_findings_for_one_node_in_one_round_quarantine_it_once() -> None:
    plan = decide([xid("gpu-1", 79), xid("gpu-1", 79, bus=0x3C)], fleet(10), BreakerState(), DEFAULTS, NOW)
    assert new_quarantines(plan.actions) == ["gpu-1"]
    assert len(of_type(plan.actions, SetCondition)) == 1


def test_unknown_node_is_ignored_with_a_notice() -> None:
    plan = decide([xid("ghost", 79)], fleet(2), BreakerState(), DEFAULTS, NOW)
    assert plan.actions == ()
    assert plan.notices[0].node == "ghost"


# --- NoExecute ----------------------------------------------------------------------------------------------


def test_noexecute_only_for_unusable_nodes_and_only_when_allowed() -> None:
    allowed = HealthSettings(allow_noexecute=True)

    def effect(finding: Finding, settings: HealthSettings) -> str:
        (update,) = of_type(decide([finding], fleet(10), BreakerState(), settings, NOW).actions, UpdateNode)
        return update.add_taints[0].effect

    assert effect(xid("gpu-1", 79), DEFAULTS) == "NoSchedule"
    assert effect(xid("gpu-1", 79), allowed) == "NoExecute"
    assert effect(xid("gpu-1", 48), allowed) == "NoSchedule"  # faulty GPU, node still usable


def test_unusable_fault_on_a_quarantined_node_escalates_to_noexecute_when_allowed() -> None:
    nodes = {"gpu-1": quarantined("gpu-1", reason="Xid48 GPU_ECC_DBE")}
    plan = decide([xid("gpu-1", 79)], nodes, BreakerState(), HealthSettings(allow_noexecute=True), NOW)
    (update,) = of_type(plan.actions, UpdateNode)
    assert update.add_taints == (Taint(HEALTH_TAINT_KEY, "NoExecute", "unhealthy"),)
    assert plan.breaker.recent == ()  # not a new quarantine
    assert not of_type(decide([xid("gpu-1", 79)], nodes, BreakerState(), DEFAULTS, NOW).actions, UpdateNode)


# --- circuit breaker ---------------------------------------------------------------------------------------


def test_breaker_limit_is_the_fraction_rounded_up_at_least_two_and_at_most_the_cap() -> None:
    assert breaker_limit(100, BreakerSettings(max_fraction=0.1, max_nodes=20)) == 10
    assert breaker_limit(101, BreakerSettings(max_fraction=0.1, max_nodes=20)) == 11
    assert breaker_limit(1000, BreakerSettings(max_fraction=0.1, max_nodes=20)) == 20
    assert breaker_limit(5, BreakerSettings(max_fraction=0.1, max_nodes=20)) == 2
    assert breaker_limit(100, BreakerSettings(max_fraction=0.29, max_nodes=50)) == 29
    assert breaker_limit(0, BreakerSettings()) == 2
    # The cap wins over the floor: an admin who asks for one gets one.
    assert breaker_limit(4, BreakerSettings(max_fraction=0.1, max_nodes=1)) == 1


def test_the_default_breaker_lets_a_four_node_cluster_quarantine_two_nodes_and_holds_back_the_third() -> None:
    nodes, breaker = fleet(4), BreakerState()
    for i in range(2):  # an ordinary week: two faults in ten minutes
        plan = decide([xid(f"gpu-{i}", 79)], nodes, breaker, DEFAULTS, NOW + i * 60)
        assert new_quarantines(plan.actions) == [f"gpu-{i}"] and not plan.breaker.tripped and plan.held == ()
        nodes, breaker = apply(plan, nodes), plan.breaker
    third = xid("gpu-2", 79)
    plan = decide([third], nodes, breaker, DEFAULTS, NOW + 120)
    assert new_quarantines(plan.actions) == [] and plan.breaker.tripped
    assert plan.held == (third,)  # the loop decides it again once an operator resets the breaker


def test_the_window_counts_quarantines_in_place_made_since_the_last_reset() -> None:
    window = BreakerSettings(window_seconds=600)
    nodes = {
        "a": quarantined("a", at=NOW - 300),
        "b": quarantined("b", at=NOW - 60),
        "c": NodeState("c", annotations={REQUALIFIED_AT: stamp(NOW - 30)}),  # quarantined at NOW - 200, released
    }
    assert restore_breaker(nodes, window, NOW).recent == (NOW - 300, NOW - 60)
    assert restore_breaker(nodes, window, NOW, reset_at=NOW - 100).recent == (NOW - 60,)
    # The stamps have whole seconds: a quarantine in the second of the reset counts.
    assert restore_breaker(nodes, window, NOW, reset_at=NOW - 60 + 0.5).recent == (NOW - 60,)


def test_half_the_fleet_faulting_quarantines_only_the_fraction_and_trips_loudly() -> None:
    nodes = fleet(20)
    settings = HealthSettings(breaker=BreakerSettings(max_fraction=0.1, max_nodes=50))
    plan = decide([xid(f"gpu-{i}", 79) for i in range(10)], nodes, BreakerState(), settings, NOW)
    assert new_quarantines(plan.actions) == ["gpu-0", "gpu-1"]
    assert plan.breaker.tripped and plan.breaker.tripped_at == NOW
    assert any(n.level == "error" and "tripped" in n.message for n in plan.notices)
    suppressed = [e.node for e in of_type(plan.actions, RecordEvent) if e.reason == "QuarantineSuppressed"]
    assert suppressed == [f"gpu-{i}" for i in range(2, 10)]
    # Blocked nodes still get the condition: detection goes on, only the quarantine stops.
    assert {c.node for c in of_type(plan.actions, SetCondition)} == {f"gpu-{i}" for i in range(10)}


def test_the_absolute_cap_applies_on_a_large_fleet() -> None:
    settings = HealthSettings(breaker=BreakerSettings(max_fraction=0.5, max_nodes=3))
    plan = decide([xid(f"gpu-{i}", 79) for i in range(500)], fleet(1000), BreakerState(), settings, NOW)
    assert len(new_quarantines(plan.actions)) == 3


def test_a_tripped_breaker_stays_open_until_reset() -> None:
    settings = HealthSettings(breaker=BreakerSettings(max_fraction=0.1, max_nodes=1, window_seconds=600))
    nodes = fleet(20)
    first = decide([xid("gpu-0", 79), xid("gpu-1", 79)], nodes, BreakerState(), settings, NOW)
    assert first.breaker.tripped
    nodes = apply(first, nodes)
    later = decide([xid("gpu-2", 79)], nodes, first.breaker, settings, NOW + 86_400)
    assert new_quarantines(later.actions) == []
    after_reset = decide([xid("gpu-2", 79)], nodes, BreakerState(), settings, NOW + 86_400)
    assert new_quarantines(after_reset.actions) == ["gpu-2"]


def test_quarantines_spread_beyond_the_window_do_not_trip() -> None:
    settings = HealthSettings(breaker=BreakerSettings(max_fraction=1, max_nodes=1, window_seconds=600))
    nodes, breaker = fleet(5), BreakerState()
    for i in range(5):
        plan = decide([xid(f"gpu-{i}", 79)], nodes, breaker, settings, NOW + i * 600)
        assert new_quarantines(plan.actions) == [f"gpu-{i}"]
        nodes, breaker = apply(plan, nodes), plan.breaker
    assert not breaker.tripped


def test_releases_continue_while_the_breaker_is_open() -> None:
    tripped = BreakerState(recent=(NOW,), tripped_at=NOW)
    plan = decide(
        [],
        {"gpu-1": quarantined("gpu-1")},
        tripped,
        DEFAULTS,
        NOW,
        results=[verdict("gpu-1", "PASS", "all tiers passed")],
    )
    (update,) = of_type(plan.actions, UpdateNode)
    assert update.remove_taints == (Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy"),)


def test_breaker_restored_from_annotations_after_a_restart() -> None:
    nodes = {"a": quarantined("a", at=NOW - 60), "b": quarantined("b", at=NOW - 7200), "c": NodeState("c")}
    assert restore_breaker(nodes, BreakerSettings(window_seconds=600), NOW).recent == (NOW - 60,)


@settings(max_examples=200, deadline=None)
@given(
    gpu_nodes=st.integers(min_value=1, max_value=40),
    fraction=st.floats(min_value=0.01, max_value=1.0),
    cap=st.integers(min_value=1, max_value=10),
    window=st.integers(min_value=1, max_value=1000),
    rounds=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=400), st.lists(st.integers(min_value=0, max_value=39), max_size=8)
        ),
        max_size=25,
    ),
)
def test_breaker_never_allows_more_than_the_limit_in_any_window(
    gpu_nodes: int, fraction: float, cap: int, window: int, rounds: list[tuple[int, list[int]]]
) -> None:
    breaker_settings = BreakerSettings(max_fraction=fraction, max_nodes=cap, window_seconds=window)
    settings = HealthSettings(breaker=breaker_settings)
    limit = breaker_limit(gpu_nodes, breaker_settings)
    nodes, breaker, now = fleet(gpu_nodes), BreakerState(), NOW
    times: list[float] = []
    for step, targets in rounds:
        now += step
        plan = decide([xid(f"gpu-{i % gpu_nodes}", 79) for i in targets], nodes, breaker, settings, now)
        times += [now] * len(new_quarantines(plan.actions))
        nodes, breaker = apply(plan, nodes), plan.breaker
    for t in times:
        assert sum(1 for u in times if t - window < u <= t) <= limit


# --- opt-out and dry-run ------------------------------------------------------------------------------------


def test_opted_out_node_gets_no_write_at_all() -> None:
    nodes = fleet(3, labels={"konduktor.ai/gpu-health-opt-out": "true"})
    nodes["gpu-2"] = replace(quarantined("gpu-2"), labels={"konduktor.ai/gpu-health-opt-out": "true"})
    plan = decide(
        [xid("gpu-0", 79), xid("gpu-1", 13)],
        nodes,
        BreakerState(),
        DEFAULTS,
        NOW,
        results=[verdict("gpu-2", "PASS", "")],
    )
    assert plan.actions == () and plan.withheld == ()
    assert {n.node for n in plan.notices} == {"gpu-0", "gpu-1", "gpu-2"}


def test_opt_out_label_value_must_be_true_and_the_label_is_configurable() -> None:
    nodes = fleet(10, labels={"konduktor.ai/gpu-health-opt-out": "false", "team/keep-out": "true"})
    assert new_quarantines(decide([xid("gpu-0", 79)], nodes, BreakerState(), DEFAULTS, NOW).actions)
    custom = HealthSettings(opt_out_label="team/keep-out")
    assert decide([xid("gpu-0", 79)], nodes, BreakerState(), custom, NOW).actions == ()


def test_dry_run_plans_no_write_but_shows_what_it_would_do() -> None:
    dry = HealthSettings(dry_run=True)
    nodes = {**fleet(10), "gpu-q": quarantined("gpu-q", at=NOW - 86_400)}
    plan = decide(
        [xid("gpu-1", 79), xid("gpu-2", 13)],
        nodes,
        BreakerState(),
        dry,
        NOW,
        results=[verdict("gpu-q", "FAIL", "dcgm diag r2 failed")],
    )
    assert plan.actions == ()
    assert new_quarantines(plan.withheld) == ["gpu-1"]
    assert (
        plan.withheld
        == decide(
            [xid("gpu-1", 79), xid("gpu-2", 13)],
            nodes,
            BreakerState(),
            DEFAULTS,
            NOW,
            results=[verdict("gpu-q", "FAIL", "dcgm diag r2 failed")],
        ).actions
    )
    assert plan.breaker.recent == (NOW,)  # the breaker still counts, so dry-run shows when it would trip


# --- ownership --------------------------------------------------------------------------------------------


def test_pass_removes_only_our_taint_and_leaves_a_cordon_and_other_taints() -> None:
    maintenance = Taint("example.com/maintenance", "NoSchedule", "")
    node = quarantined("gpu-1")
    node = replace(node, unschedulable=True, taints=(*node.taints, maintenance))
    plan = decide(
        [], {"gpu-1": node}, BreakerState(), DEFAULTS, NOW, results=[verdict("gpu-1", "PASS", "all tiers passed")]
    )
    (update,) = of_type(plan.actions, UpdateNode)
    assert update.remove_taints == (Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy"),)
    assert update.annotations[QUARANTINED_AT] is None and update.annotations[QUARANTINE_REASON] is None
    assert update.annotations[REQUALIFICATION_RESULT] == "PASS: dcgm_diag: all tiers passed"
    assert of_type(plan.actions, SetCondition) == [
        SetCondition("gpu-1", True, "RequalificationPassed", "dcgm_diag: all tiers passed")
    ]
    after = apply(plan, {"gpu-1": node})["gpu-1"]
    assert after.unschedulable and after.taints == (GPU_OPERATOR_TAINT, maintenance)


def test_our_taint_key_placed_by_someone_else_is_never_removed_or_claimed() -> None:
    foreign = NodeState("gpu-1", taints=(Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy"),), gpu_healthy=False)
    assert not quarantined_by_us(foreign)
    plan = decide([], {"gpu-1": foreign}, BreakerState(), DEFAULTS, NOW, results=[verdict("gpu-1", "PASS", "ok")])
    assert not of_type(plan.actions, UpdateNode)
    assert of_type(plan.actions, SetCondition)[0].healthy  # our condition is ours to clear
    plan = decide([xid("gpu-1", 79)], {"gpu-1": replace(foreign, gpu_healthy=None)}, BreakerState(), DEFAULTS, NOW)
    assert not of_type(plan.actions, UpdateNode)  # no annotation: a later PASS would remove their taint
    assert plan.breaker.recent == ()


def test_pass_on_a_healthy_node_writes_nothing() -> None:
    plan = decide([], fleet(2), BreakerState(), DEFAULTS, NOW, results=[verdict("gpu-1", "PASS", "ok")])
    assert plan.actions == ()


# --- burn-in results and requalification ------------------------------------------------------------------


def test_fail_keeps_the_quarantine_and_records_why() -> None:
    plan = decide(
        [],
        {"gpu-1": quarantined("gpu-1")},
        BreakerState(),
        DEFAULTS,
        NOW,
        results=[verdict("gpu-1", "FAIL", "gpu 3: 612 TFLOPS < 0.9 x median")],
    )
    (update,) = of_type(plan.actions, UpdateNode)
    assert update.remove_taints == () and update.add_taints == ()
    assert update.annotations == {
        REQUALIFIED_AT: stamp(NOW),
        REQUALIFICATION_RESULT: "FAIL: dcgm_diag: gpu 3: 612 TFLOPS < 0.9 x median",
    }
    (event,) = of_type(plan.actions, RecordEvent)
    assert event.reason == "RequalificationFailed"


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [("WARN", "RequalificationWarned"), ("ERROR", "RequalificationError"), ("SKIPPED", "RequalificationSkipped")],
)
def test_only_pass_releases(outcome: str, reason: str) -> None:
    plan = decide(
        [], {"gpu-1": quarantined("gpu-1")}, BreakerState(), DEFAULTS, NOW, results=[verdict("gpu-1", outcome, "why")]
    )
    (update,) = of_type(plan.actions, UpdateNode)
    assert update.remove_taints == () and update.annotations[REQUALIFICATION_RESULT] == f"{outcome}: dcgm_diag: why"
    assert [e.reason for e in of_type(plan.actions, RecordEvent)] == [reason]
    assert not of_type(plan.actions, SetCondition)


def test_fail_on_a_node_in_service_quarantines_it() -> None:
    plan = decide([], fleet(10), BreakerState(), DEFAULTS, NOW, results=[verdict("gpu-3", "FAIL", "ecc")])
    assert new_quarantines(plan.actions) == ["gpu-3"]
    assert of_type(plan.actions, SetCondition)[0].reason == "BurnInFailed"


def test_requalification_starts_after_cooldown_within_the_concurrency_limit() -> None:
    settings = HealthSettings(cooldown_seconds=900, max_concurrent_requalifications=2)
    nodes = {
        "old": quarantined("old", at=NOW - 7200),
        "older": quarantined("older", at=NOW - 9000),
        "oldest": quarantined("oldest", at=NOW - 9999),
        "fresh": quarantined("fresh", at=NOW - 60),
        "running": replace(quarantined("running", at=NOW - 9999), requalification_running=True),
        "retried": replace(
            quarantined("retried", at=NOW - 9999),
            annotations={QUARANTINED_AT: stamp(NOW - 9999), REQUALIFIED_AT: stamp(NOW - 100)},
        ),
        "healthy": NodeState("healthy"),
    }
    plan = decide([], nodes, BreakerState(), settings, NOW)
    assert of_type(plan.actions, StartRequalification) == [StartRequalification("oldest")]


def test_requalification_waits_for_gpus_cordons_and_opt_out() -> None:
    nodes = {
        "missing-gpu": replace(quarantined("missing-gpu"), gpu_allocatable=7, gpu_expected=8),
        "cordoned": replace(quarantined("cordoned"), unschedulable=True),
        "opted-out": replace(quarantined("opted-out"), labels={"konduktor.ai/gpu-health-opt-out": "true"}),
        "ready": replace(quarantined("ready"), gpu_allocatable=8, gpu_expected=8),
    }
    plan = decide([], nodes, BreakerState(), HealthSettings(max_concurrent_requalifications=10), NOW)
    assert of_type(plan.actions, StartRequalification) == [StartRequalification("ready")]


def test_a_node_quarantined_this_round_does_not_start_requalification() -> None:
    plan = decide([xid("gpu-1", 79)], fleet(10), BreakerState(), HealthSettings(cooldown_seconds=0), NOW)
    assert not of_type(plan.actions, StartRequalification)


def test_lost_gpu_to_release_round_trip() -> None:
    clock_now = [NOW]
    watch = LostGpuWatch(0, lambda: clock_now[0])
    nodes = {"gpu-1": NodeState("gpu-1", gpu_allocatable=7, gpu_expected=8), **fleet(9)}
    lost = watch.observe("gpu-1", 7, 8)
    assert lost is not None
    plan = decide([lost], nodes, BreakerState(), DEFAULTS, NOW)
    nodes = apply(plan, nodes)
    assert quarantined_by_us(nodes["gpu-1"])
    nodes["gpu-1"] = replace(nodes["gpu-1"], gpu_allocatable=8)  # reboot brought the GPU back
    later = NOW + DEFAULTS.cooldown_seconds
    assert of_type(decide([], nodes, plan.breaker, DEFAULTS, later).actions, StartRequalification)
    released = apply(decide([], nodes, plan.breaker, DEFAULTS, later, results=[verdict("gpu-1", "PASS", "ok")]), nodes)[
        "gpu-1"
    ]
    assert not quarantined_by_us(released) and released.gpu_healthy
    assert all(t.key != HEALTH_TAINT_KEY for t in released.taints)

"""The node-health view and the release decisions, on Node objects as the API returns them."""

from __future__ import annotations

from typing import Any

import pytest

from konduktor.burnin.record import BurnInRecord
from konduktor.burnin.results import CheckResult, NodeVerdict, Verdict
from konduktor.burnin.tiers import Step, Tier, options_for_tier
from konduktor.burnin.verdict import NodeEvidence, judge_node
from konduktor.errors import ChangeRefused, ExitCode, UsageError
from konduktor.health.breaker import (
    BREAKER_ANNOTATION,
    BREAKER_RESET_ANNOTATION,
    BreakerView,
    breaker_view,
    controller_view,
)
from konduktor.health.decide import CONDITION_TYPE, RecordEvent, SetCondition, UpdateNode
from konduktor.health.health_view import TABLE_WIDTH, Health, capacity, health_view, render_next, render_table
from konduktor.health.node_reading import node_state
from konduktor.health.release import release_hints, release_plan, requalification_plan, requalify_outcome
from konduktor.health.settings import HealthSettings
from konduktor.sim.gpus import FakeNode, parse_faults, step_log
from konduktor.vocabulary import (
    BURNIN_RESULT,
    HEALTH_TAINT_KEY,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    REQUALIFICATION_RESULT,
    REQUALIFIED_AT,
)

H100 = "NVIDIA-H100-80GB-HBM3"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
TAINT = {"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}


def node(
    name: str,
    *,
    taints: tuple[dict[str, str], ...] = (),
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    healthy: str | None = None,
    message: str = "",
    unschedulable: bool = False,
    gpus: int = 10,
) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True"}]
    if healthy is not None:
        conditions.append(
            {
                "type": CONDITION_TYPE,
                "status": healthy,
                "reason": "Xid79" if healthy == "False" else "RequalificationPassed",
                "message": message,
                "lastTransitionTime": "2027-01-15T07:00:00Z",
            }
        )
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "7",
            "labels": {"nvidia.com/gpu.product": H100, **(labels or {})},
            "annotations": annotations or {},
        },
        "spec": {"taints": list(taints), **({"unschedulable": True} if unschedulable else {})},
        "status": {
            "capacity": {"nvidia.com/gpu": "10"},
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": conditions,
        },
    }


QUARANTINED = {QUARANTINED_AT: "2027-01-15T07:30:00Z", QUARANTINE_REASON: "Xid79 GPU_HAS_FALLEN_OFF_THE_BUS on GPU3"}


def quarantined(name: str, **extra: Any) -> dict[str, Any]:
    return node(
        name,
        taints=extra.pop("taints", (TAINT,)),
        annotations={**QUARANTINED, **extra.pop("annotations", {})},
        healthy="False",
        message="Xid 79: GPU fell off the bus",
        **extra,
    )


def event(name: str, component: str, at: str, message: str = "quarantined (NoSchedule): Xid 79") -> dict[str, Any]:
    return {
        "involvedObject": {"kind": "Node", "name": name},
        "message": message,
        "lastTimestamp": at,
        "reportingComponent": component,
        "source": {"component": component},
    }


def job(name: str, finished: bool) -> dict[str, Any]:
    conditions = [{"type": "Complete", "status": "True", "lastTransitionTime": "2027-01-15T07:40:00Z"}]
    return {
        "metadata": {"name": f"burnin-{name}", "annotations": {"konduktor.ai/node": name}},
        "status": {"conditions": conditions, "completionTime": "2027-01-15T07:40:00Z"} if finished else {},
    }


def test_each_state_with_its_reason_owner_and_since() -> None:
    cpu = {"metadata": {"name": "cpu-0", "labels": {}}, "spec": {}, "status": {"capacity": {"cpu": "8"}}}
    nodes = [
        node("a-healthy", healthy="True"),
        quarantined("b-controller"),
        quarantined("c-manual"),
        quarantined("d-requalifying"),
        node("e-foreign", taints=({"key": HEALTH_TAINT_KEY, "value": "rma", "effect": "NoSchedule"},)),
        node("f-cordoned", unschedulable=True),
        node("g-suppressed", healthy="False", message="breaker open"),
        node("h-opted-out", labels={"konduktor.ai/gpu-health-opt-out": "true"}),
        quarantined("i-forgotten"),
        cpu,
    ]
    events = [
        event("b-controller", "konduktor-health", "2027-01-15T07:30:00Z"),
        event("c-manual", "konduktor-health", "2027-01-14T07:30:00Z"),
        event("c-manual", "konduktor-install", "2027-01-15T07:30:00Z"),  # the newest quarantine says who
        event("i-forgotten", "konduktor-health", "2027-01-15T07:31:00Z", message="released: PASS"),
    ]
    jobs = [job("d-requalifying", finished=False), job("b-controller", finished=True)]
    views = {v.node: v for v in health_view(nodes, events, jobs)}
    assert list(views) == sorted(n["metadata"]["name"] for n in nodes[:-1])  # GPU nodes only, by name
    states = {name: (v.state, v.quarantine_owner) for name, v in views.items()}
    assert states == {
        "a-healthy": (Health.HEALTHY, None),
        "b-controller": (Health.QUARANTINED, "konduktor-health"),
        "c-manual": (Health.QUARANTINED, "konduktor-install"),
        "d-requalifying": (Health.REQUALIFYING, "konduktor"),
        "e-foreign": (Health.QUARANTINED, "other"),
        "f-cordoned": (Health.CORDONED, None),
        "g-suppressed": (Health.UNHEALTHY, None),
        "h-opted-out": (Health.OPTED_OUT, None),
        "i-forgotten": (Health.QUARANTINED, "konduktor"),
    }
    ours = views["b-controller"]
    assert ours.reason == QUARANTINED[QUARANTINE_REASON]
    assert (ours.since, ours.evidence) == ("2027-01-15T07:30:00Z", "Xid 79: GPU fell off the bus")
    assert views["e-foreign"].reason == f"someone else's taint {HEALTH_TAINT_KEY}=rma"
    assert views["g-suppressed"].since == "2027-01-15T07:00:00Z"


def test_last_verdict_from_the_requalification_annotations() -> None:
    stamps = {REQUALIFIED_AT: "2027-01-15T07:50:00Z", REQUALIFICATION_RESULT: "FAIL: ecc: GPU3 uncorrected"}
    [view] = health_view([quarantined("a", annotations=stamps)])
    assert (view.last_verdict, view.last_verdict_at, view.last_verdict_detail) == (
        "FAIL",
        "2027-01-15T07:50:00Z",
        "ecc: GPU3 uncorrected",
    )
    [never] = health_view([node("b")])
    assert (never.last_verdict, never.last_verdict_at) == (None, None)


def test_last_verdict_is_the_newest_of_the_requalification_and_the_recorded_burnin() -> None:
    """`up` and `burnin` record their verdict on the node (`burnin.record`); the view shows the newest verdict."""
    record = BurnInRecord("PASS", "quick", "20270115-074000", "2027-01-15T07:55:00Z", "f")
    burned = {BURNIN_RESULT: record.encode()}
    [view] = health_view([node("a", annotations=burned)])
    assert (view.last_verdict, view.last_verdict_at, view.last_verdict_detail) == (
        "PASS",
        "2027-01-15T07:55:00Z",
        "burn-in 20270115-074000 at level quick",
    )
    older = {REQUALIFIED_AT: "2027-01-15T07:50:00Z", REQUALIFICATION_RESULT: "FAIL: ecc", **burned}
    assert health_view([node("a", annotations=older)])[0].last_verdict == "PASS"
    newer = {**older, REQUALIFIED_AT: "2027-01-15T07:59:00Z"}
    assert health_view([node("a", annotations=newer)])[0].last_verdict == "FAIL"
    assert "PASS 5m ago" in render_table(health_view([node("a", annotations=burned)]), NOW)


def test_the_json_shape_is_pinned() -> None:
    [view] = health_view([quarantined("a", gpus=9)], [event("a", "konduktor-health", "2027-01-15T07:30:00Z")])
    assert view.row() == {
        "node": "a",
        "state": "quarantined",
        "reason": "Xid79 GPU_HAS_FALLEN_OFF_THE_BUS on GPU3",
        "evidence": "Xid 79: GPU fell off the bus",
        "since": "2027-01-15T07:30:00Z",
        "quarantine_owner": "konduktor-health",
        "last_verdict": None,
        "last_verdict_at": None,
        "last_verdict_detail": None,
        "product": H100,
        "gpus": 10,
        "gpus_allocatable": 9,
        "cordoned": False,
        "opted_out": False,
        "next_step": None,
    }


def test_capacity_counts_quarantined_and_cordoned_gpus_once() -> None:
    views = health_view(
        [node("a"), quarantined("b"), quarantined("c", unschedulable=True), node("d", unschedulable=True)]
    )
    [h100] = capacity(views)
    assert (h100.gpus, h100.quarantined, h100.cordoned) == (40, 20, 10)
    assert h100.describe() == f"40 {H100} GPUs, 20 quarantined, 10 cordoned"
    assert capacity(health_view([node("a")]))[0].describe() == f"10 {H100} GPUs"


def test_the_table_fits_100_columns_wraps_the_reason_uncut_and_wide_adds_the_evidence() -> None:
    reason = "Xid79 " + " ".join(["GPU_HAS_FALLEN_OFF_THE_BUS"] * 6)
    long_reason = {QUARANTINE_REASON: reason}
    views = health_view(
        [quarantined("gpu-h100-0001", annotations=long_reason), node("gpu-h100-0002")],
        [event("gpu-h100-0001", "konduktor-install", "2027-01-15T07:30:00Z")],
    )
    table = render_table(views, NOW)
    lines = table.splitlines()
    assert all(len(line) <= TABLE_WIDTH for line in lines), table
    assert lines[0].split() == ["NODE", "STATE", "GPUS", "SINCE", "OWNER", "BURN-IN", "REASON"]
    assert lines[1].split()[:5] == ["gpu-h100-0001", "quarantined", "10/10", "30m", "konduktor-install"]
    column = lines[0].index("REASON")
    wrapped = [lines[1][column:], *(line[column:] for line in lines[2:] if not line[:column].strip())]
    assert len(wrapped) > 1 and " ".join(wrapped) == reason  # every word, each line within the reason's column
    assert lines[len(wrapped) + 1].startswith("gpu-h100-0002")
    wide = render_table(views, NOW, wide=True)
    assert "Xid 79: GPU fell off the bus" in wide and "EVIDENCE" in wide and "Xid 79" not in table
    headers = wide.splitlines()[0].split()
    assert headers[-3:] == ["PRODUCT", "STATE-CHANGED-AT", "EVIDENCE"] and len(set(headers)) == len(headers)


# --- what happens next, and the breaker -----------------------------------------------------------------------------


def steps(
    nodes: list[dict[str, Any]],
    settings: HealthSettings | None = None,
    breaker: BreakerView | None = None,
    busy: dict[str, list[str]] | None = None,
    jobs: tuple[dict[str, Any], ...] = (),
) -> dict[str, str | None]:
    views = health_view(nodes, (), jobs, settings, breaker=breaker, busy=busy, now=NOW)
    return {view.node: view.next_step for view in views}


def breaker(tripped: bool) -> BreakerView:
    return BreakerView(2, 2, 600, "2027-01-15T07:55:00Z" if tripped else None, None, ("a", "b"), False)


def test_a_quarantined_node_says_why_it_waits_and_what_happens_next() -> None:
    eight = {"nvidia.com/gpu.count": "8"}
    found = steps(
        [
            quarantined("a-gpu-missing", labels=eight, gpus=7),
            quarantined("b-due"),
            quarantined("c-cooling", annotations={QUARANTINED_AT: "2027-01-15T07:55:00Z"}),
            quarantined("d-cordoned", unschedulable=True),
            quarantined("e-busy"),
            quarantined("f-requalifying"),
            node("g-held", healthy="False"),
            node("h-healthy"),
            node("i-foreign", taints=({"key": HEALTH_TAINT_KEY, "value": "rma", "effect": "NoSchedule"},)),
        ],
        breaker=breaker(tripped=True),
        busy={"e-busy": ["team-a/train-0"], "f-requalifying": ["team-a/train-1"]},
        jobs=(job("f-requalifying", finished=False),),
    )
    assert found["a-gpu-missing"] == (
        "waiting: 1 of 8 GPUs missing from allocatable; requalifies when the device plugin reports 8"
    )
    assert found["b-due"] == "requalification burn-in due: starts when a slot is free (at most 2 at once)"
    assert found["c-cooling"] == "requalification burn-in scheduled in 10m (after the cooldown)"
    assert found["d-cordoned"] == (
        "waiting: cordoned by someone else; requalifies once uncordoned (kubectl uncordon d-cordoned)"
    )
    assert found["e-busy"] == (
        "requalification burn-in due: starts when a slot is free (at most 2 at once); it cannot start before the "
        "1 GPU pod still running (team-a/train-0) finish (it needs every GPU)"
    )
    assert (found["f-requalifying"] or "").startswith("requalification burn-in waits for the 1 GPU pod still running")
    assert found["g-held"] == (
        "breaker tripped: held back; quarantined within seconds of konduktor-install nodes breaker reset --reason '...'"
    )
    assert found["h-healthy"] is None
    assert (found["i-foreign"] or "").startswith("someone else's taint")
    # Once the breaker is closed again, the held-back node has no next step of its own: the controller acts.
    assert steps([node("g-held", healthy="False")], breaker=breaker(tripped=False)) == {"g-held": None}


def requalification(name: str, finished: str | None) -> dict[str, Any]:
    """The controller's requalification Job of a node (`konduktor.health.requalification`), finished at `finished`."""
    found = job(name, finished=finished is not None)
    found["metadata"]["labels"] = {"konduktor.ai/requalification": "true"}
    if finished is not None:
        found["status"]["conditions"][0]["lastTransitionTime"] = finished
        found["status"]["completionTime"] = finished
    return found


def test_a_requalification_is_one_state_from_its_start_to_its_verdict() -> None:
    def seen(node: dict[str, Any], *jobs: dict[str, Any]) -> tuple[Health, str | None]:
        [view] = health_view([node], (), jobs, now=NOW)
        return view.state, view.next_step

    # The controller's burn-in runs, then has finished: until the controller acts on its verdict (at its next poll),
    # the node is still requalifying, never "quarantined, burn-in due" while its only burn-in is done.
    running = seen(quarantined("a"), requalification("a", None))
    assert running == (
        Health.REQUALIFYING,
        "requalification burn-in running: PASS releases the node, anything else keeps it out",
    )
    done = seen(quarantined("a"), requalification("a", "2027-01-15T07:40:00Z"))
    assert done == (
        Health.REQUALIFYING,
        "requalification burn-in finished at 2027-01-15T07:40:00Z; the controller acts on its verdict at its next "
        "poll: PASS releases the node, anything else keeps it out",
    )
    # The verdict acted on: a FAIL stamps the node (it rests again), a PASS releases it.
    failed = {REQUALIFIED_AT: "2027-01-15T07:40:03Z", REQUALIFICATION_RESULT: "FAIL: kernel_log: 1 recent Xid"}
    state, step = seen(quarantined("a", annotations=failed), requalification("a", "2027-01-15T07:40:00Z"))
    assert state is Health.QUARANTINED and (step or "").startswith("requalification burn-in due")
    passed = {REQUALIFIED_AT: "2027-01-15T07:40:03Z", REQUALIFICATION_RESULT: "PASS: inventory: 10 x H100"}
    released = node("a", healthy="True", annotations=passed)
    assert seen(released, requalification("a", "2027-01-15T07:40:00Z")) == (Health.HEALTHY, None)
    # A Job that ended before the quarantine was acted on then; a manual burn-in's verdict is not the controller's.
    assert seen(quarantined("a"), requalification("a", "2027-01-15T07:20:00Z"))[0] is Health.QUARANTINED
    assert seen(quarantined("a"), job("a", finished=True))[0] is Health.QUARANTINED


def test_the_next_step_follows_the_controllers_settings() -> None:
    off = HealthSettings(max_concurrent_requalifications=0)
    assert steps([quarantined("a")], off)["a"] == (
        "requalification is off: stays out until konduktor-install nodes release a --reason '...'"
    )
    dry = HealthSettings(dry_run=True)
    assert (steps([quarantined("a")], dry)["a"] or "").startswith("the controller runs dry and starts no burn-in")


def test_the_table_is_followed_by_each_next_step_within_the_width() -> None:
    views = health_view([quarantined("gpu-h100-0001", gpus=9, labels={"nvidia.com/gpu.count": "10"})], now=NOW)
    lines = render_next(views).splitlines()
    assert lines[0].startswith("next: gpu-h100-0001: waiting: 1 of 10 GPUs missing from allocatable;")
    assert len(lines) == 2 and all(len(line) <= TABLE_WIDTH for line in lines)


def test_the_breaker_view_counts_what_the_controller_counts() -> None:
    fleet = [
        quarantined("a", annotations={QUARANTINED_AT: "2027-01-15T07:55:00Z"}),
        quarantined("b", annotations={QUARANTINED_AT: "2027-01-15T07:58:00Z"}),
        quarantined("c"),  # 30 minutes ago: out of the window
        node("d", annotations={REQUALIFIED_AT: "2027-01-15T07:59:00Z"}),  # released by hand: no longer counts
    ]
    states = {n["metadata"]["name"]: node_state(n) for n in fleet}
    closed = breaker_view(states, HealthSettings(), {}, NOW)
    assert (closed.quarantines, closed.limit, closed.counted, closed.tripped) == (2, 2, ("a", "b"), False)
    assert closed.describe() == (
        "closed: 2 of at most 2 automatic quarantines in the last 10m used; a quarantine past the limit trips it"
    )
    lease = {BREAKER_ANNOTATION: "2027-01-15T07:59:00Z"}
    tripped = breaker_view(states, HealthSettings(), lease, NOW)
    assert tripped.tripped_since == "2027-01-15T07:59:00Z"
    assert tripped.describe().startswith(
        "TRIPPED since 2027-01-15T07:59:00Z (2 of at most 2 automatic quarantines in the last 10m used)"
    )
    assert tripped.row()["tripped"] is True and BreakerView.from_row(tripped.row()) == tripped
    # After a reset only the later quarantines count.
    reset = breaker_view(states, HealthSettings(), {BREAKER_RESET_ANNOTATION: "2027-01-15T07:56:00Z"}, NOW)
    assert (reset.quarantines, reset.counted, reset.reset_at) == (1, ("b",), "2027-01-15T07:56:00Z")


def test_the_controller_view_names_its_mode_and_leader() -> None:
    lease = {"spec": {"holderIdentity": "konduktor-health-7d9f", "renewTime": "2027-01-15T07:59:55.000000Z",
                      "leaseDurationSeconds": 15}}  # fmt: skip
    acting = controller_view(HealthSettings(), lease, NOW)
    assert acting.describe() == "acting; leader konduktor-health-7d9f"
    assert controller_view(HealthSettings(), lease, NOW + 60).describe().endswith("(Lease expired)")
    dry = controller_view(HealthSettings(dry_run=True), None, NOW)
    assert dry.describe() == "dry run: decides and reports, writes nothing; no leader (dry-run replicas hold no Lease)"
    assert controller_view(None, None, NOW).describe() == "not installed (no konduktor-core settings)"
    assert controller_view(HealthSettings(), {"spec": {}}, NOW).leader is None


# --- release --------------------------------------------------------------------------------------------------------


def test_release_removes_our_taint_and_annotations_sets_the_condition_and_says_who() -> None:
    state = node_state(quarantined("a", taints=(TAINT, {"key": "other", "effect": "NoSchedule"})), None, False)
    update, condition, recorded = release_plan(state, "GPU3 replaced", "alice", NOW)
    assert isinstance(update, UpdateNode) and isinstance(condition, SetCondition) and isinstance(recorded, RecordEvent)
    assert [t.key for t in update.remove_taints] == [HEALTH_TAINT_KEY]  # only ours
    assert update.annotations == {
        QUARANTINED_AT: None,
        QUARANTINE_REASON: None,
        REQUALIFIED_AT: "2027-01-15T08:00:00Z",
        REQUALIFICATION_RESULT: "RELEASED: released by alice: GPU3 replaced",
    }
    assert (condition.healthy, condition.reason) == (True, "ReleasedManually")
    assert (recorded.event_type, recorded.message) == ("Normal", "released by alice: GPU3 replaced")


def test_release_finishes_a_half_done_manual_release_and_has_nothing_to_do_twice() -> None:
    # The old runbook removed the taint and the annotations by hand and left the condition behind.
    leftover = node_state(node("a", healthy="False"), None, False)
    assert [type(a) for a in release_plan(leftover, "repaired", "bob", NOW)] == [UpdateNode, SetCondition, RecordEvent]
    assert release_plan(node_state(node("b", healthy="True"), None, False), "again", "bob", NOW) == ()


def test_release_refuses_a_taint_someone_else_placed_and_needs_a_reason() -> None:
    foreign = node_state(node("a", taints=(TAINT,)), None, False)
    with pytest.raises(ChangeRefused) as refused:
        release_plan(foreign, "repaired", "alice", NOW)
    assert refused.value.exit_code == ExitCode.CHECK_FAILED and "kubectl taint node a" in (refused.value.hint or "")
    with pytest.raises(UsageError):
        release_plan(node_state(quarantined("b"), None, False), "  ", "alice", NOW)


def verdict(name: str, result: Verdict) -> NodeVerdict:
    return NodeVerdict(name, H100, "h100-sxm5", result, (CheckResult("ecc", result, "passive", "ecc"),))


def test_requalification_releases_on_pass_and_keeps_the_node_out_otherwise() -> None:
    state = node_state(quarantined("a"), None, False)
    passed = requalification_plan(state, verdict("a", Verdict.PASS), NOW).actions
    assert any(isinstance(a, UpdateNode) and a.remove_taints for a in passed)
    assert [a.reason for a in passed if isinstance(a, RecordEvent)] == ["RequalificationPassed"]
    failed = requalification_plan(state, verdict("a", Verdict.FAIL), NOW).actions
    assert not any(isinstance(a, UpdateNode) and a.remove_taints for a in failed)
    [update] = [a for a in failed if isinstance(a, UpdateNode)]
    assert update.annotations[REQUALIFICATION_RESULT] == "FAIL: ecc: ecc"


def test_a_failed_requalification_says_why_on_its_verdict_line_in_the_events_words() -> None:
    # After `sim fault --kind xid79 --gpu 3`: nvidia-smi still lists the ten GPUs, the device plugin offers nine.
    faulty = FakeNode("a", H100, 10, parse_faults("3=xid"))
    logs = {Step.PASSIVE.value: step_log(Step.PASSIVE.value, faulty)}
    failed = judge_node(NodeEvidence("a", H100, 9, logs), options_for_tier(Tier.QUICK))
    why = "inventory: 10 GPUs present, 9 expected; kernel_log: 1 recent hardware Xid(s)"
    assert requalify_outcome(failed, released=False) == f"requalify a: FAIL ({why}); stays quarantined"
    plan = requalification_plan(node_state(quarantined("a"), None, False), failed, NOW)
    assert [a.message for a in plan.actions if isinstance(a, RecordEvent)] == [f"stays quarantined: {why}"]
    assert requalify_outcome(verdict("a", Verdict.PASS), released=True) == "requalify a: PASS; released"


def test_a_manual_burnin_pass_on_a_quarantined_node_says_how_to_release_it() -> None:
    nodes = [quarantined("a"), node("b"), quarantined("c")]
    hints = release_hints([verdict("a", Verdict.PASS), verdict("b", Verdict.PASS), verdict("c", Verdict.FAIL)], nodes)
    assert len(hints) == 1 and "konduktor-install nodes release a --reason" in hints[0]

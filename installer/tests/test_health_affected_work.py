"""The workloads on a quarantined node: policy per fault class, opt-out, breaker, dry-run, and the owner's Event."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from konduktor.gpu.kernel_log import parse_line
from konduktor.health.affected import (
    AffectedWorkload,
    ObjectRef,
    RequeuingWorkload,
    owner_message,
    signal_words,
)
from konduktor.health.classify import Finding, LostGpuWatch, classify_report
from konduktor.health.decide import (
    BreakerState,
    DeactivateWorkload,
    NodeState,
    Plan,
    ReactivateWorkload,
    TellOwner,
    UpdateNode,
    decide,
    plan_nodes,
    plan_work,
)
from konduktor.health.settings import AffectedWorkSettings, BreakerSettings, HealthSettings

NOW = 1_750_000_000.0  # 2025-06-15T15:06:40Z
OPT_OUT = HealthSettings().opt_out_label
NODES = {f"gpu-{i}": NodeState(f"gpu-{i}") for i in range(10)}
JOB = ObjectRef("batch/v1", "Job", "train", "uid-job")


def xid(node: str, code: int) -> Finding:
    report = parse_line(f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, name=python, test")
    assert report is not None
    return classify_report(report, node, HealthSettings())


def lost_gpu(node: str) -> Finding:
    watch = LostGpuWatch(0, clock=lambda: NOW)
    found = watch.observe(node, 8, 10)
    assert found is not None
    return found


def workload(node: str = "gpu-1", **changes: object) -> AffectedWorkload:
    base: dict[str, object] = {
        "namespace": "team-a",
        "name": "job-train-1a2b3",
        "node": node,
        "pods": ("train-0-x", "train-1-y"),
        "uid": "uid-wl",
        "owner": JOB,
    }
    return AffectedWorkload(**{**base, **changes})  # type: ignore[arg-type]


def plan(
    findings: Sequence[Finding],
    work: Sequence[AffectedWorkload] = (),
    state: BreakerState | None = None,
    **settings: object,
) -> Plan:
    health = HealthSettings(**settings)  # type: ignore[arg-type]
    by_node: dict[str, list[AffectedWorkload]] = {}
    for item in work:
        by_node.setdefault(item.node, []).append(item)
    return decide(findings, NODES, state or BreakerState(), health, NOW, work=by_node)


def test_an_unusable_node_requeues_its_workload_and_tells_the_job_and_the_workload() -> None:
    made = plan([xid("gpu-1", 79)], [workload()])
    deactivate, told = made.work
    assert isinstance(deactivate, DeactivateWorkload)
    assert (deactivate.namespace, deactivate.name) == ("team-a", "job-train-1a2b3")
    assert deactivate.reason == "Xid79 on gpu-1 at 2025-06-15T15:06:40Z"
    assert isinstance(told, TellOwner)
    assert [o.kind for o in told.objects] == ["Job", "Workload"]
    assert told.reason == "RequeuedForNodeHealth"
    assert "GPU node gpu-1 was quarantined at 2025-06-15T15:06:40Z: Xid 79, GPU has fallen off the bus" in told.message
    assert "Pods of this workload on it: train-0-x, train-1-y." in told.message
    assert "Next: requeued." in told.message


def test_a_degraded_fault_drains_by_default_and_the_owner_is_told_its_pods_finish() -> None:
    made = plan([lost_gpu("gpu-1")], [workload()])
    (told,) = made.work
    assert isinstance(told, TellOwner) and told.reason == "NodeQuarantined"
    assert "Next: left to finish." in told.message


@pytest.mark.parametrize(
    ("unusable", "expected"),
    [("requeue", ["DeactivateWorkload", "TellOwner"]), ("drain", ["TellOwner"]), ("none", ["TellOwner"])],
)
def test_the_policy_of_the_fault_class_decides(unusable: str, expected: list[str]) -> None:
    made = plan([xid("gpu-1", 79)], [workload()], affected_work=AffectedWorkSettings(unusable=unusable))  # type: ignore[arg-type]
    assert [type(a).__name__ for a in made.work] == expected


def test_requeue_for_degraded_faults_when_configured() -> None:
    made = plan([lost_gpu("gpu-1")], [workload()], affected_work=AffectedWorkSettings(degraded="requeue"))
    assert any(isinstance(a, DeactivateWorkload) for a in made.work)


def test_an_application_xid_never_touches_a_workload() -> None:
    assert plan([xid("gpu-1", 13)], [workload()]).work == ()


@pytest.mark.parametrize(
    ("change", "by"),
    [({"owner_labels": {OPT_OUT: "true"}}, "Job train"), ({"namespace_labels": {OPT_OUT: "true"}}, "namespace team-a")],
)
def test_an_opted_out_workload_is_only_told(change: dict[str, object], by: str) -> None:
    (told,) = plan([xid("gpu-1", 79)], [workload(**change)]).work
    assert isinstance(told, TellOwner)
    assert f"not requeued because {by} carries {OPT_OUT}=true" in told.message


def test_a_tripped_breaker_quarantines_nothing_and_requeues_nothing() -> None:
    made = plan([xid("gpu-1", 79)], [workload()], state=BreakerState(tripped_at=NOW - 60))
    assert made.work == ()


def test_the_breaker_limits_requeues_with_the_quarantines() -> None:
    work = [workload(node=f"gpu-{i}", name=f"wl-{i}") for i in range(3)]
    made = plan([xid(f"gpu-{i}", 79) for i in range(3)], work, breaker=BreakerSettings(max_fraction=1, max_nodes=2))
    assert sorted(a.name for a in made.work if isinstance(a, DeactivateWorkload)) == ["wl-0", "wl-1"]


def test_dry_run_withholds_the_requeue_and_tells_the_owner_what_would_have_happened() -> None:
    made = plan([xid("gpu-1", 79)], [workload()], dry_run=True)
    assert made.actions == ()
    (deactivate,) = made.work_withheld
    assert isinstance(deactivate, DeactivateWorkload)
    (told,) = made.work  # the only write dry-run makes
    assert isinstance(told, TellOwner) and [o.kind for o in told.objects] == ["Job", "Workload"]
    assert (told.event_type, told.reason) == ("Normal", "WouldRequeueForNodeHealth")
    assert "would have been quarantined" in told.message
    assert "Dry-run: nothing was done; the workload would have been requeued." in told.message


def test_dry_run_tells_a_drained_workload_that_its_node_would_have_been_quarantined() -> None:
    made = plan([lost_gpu("gpu-1")], [workload()], dry_run=True)
    assert made.work_withheld == ()
    (told,) = made.work
    assert isinstance(told, TellOwner) and (told.event_type, told.reason) == ("Normal", "NodeWouldBeQuarantined")
    assert "the workload would have been left to finish" in told.message


def test_dry_run_with_a_tripped_breaker_tells_no_one() -> None:
    """Nothing would have happened to the workload: there is nothing to tell."""
    made = plan([xid("gpu-1", 79)], [workload()], state=BreakerState(tripped_at=NOW - 60), dry_run=True)
    assert made.work == () and made.work_withheld == ()


def test_an_opted_out_node_gets_no_write_and_its_work_none() -> None:
    nodes = {**NODES, "gpu-1": NodeState("gpu-1", labels={OPT_OUT: "true"})}
    made = decide([xid("gpu-1", 79)], nodes, BreakerState(), HealthSettings(), NOW, work={"gpu-1": [workload()]})
    assert made.actions == () and made.work == ()


def test_a_workload_someone_deactivated_is_left_to_them() -> None:
    assert plan([xid("gpu-1", 79)], [workload(active=False)]).work == ()


def test_a_node_already_quarantined_requeues_nothing_again() -> None:
    first = plan([xid("gpu-1", 79)], [workload()])
    assert first.work
    (update,) = [a for a in first.actions if isinstance(a, UpdateNode)]
    annotations = {k: v for k, v in update.annotations.items() if v is not None}
    quarantined = {**NODES, "gpu-1": replace(NODES["gpu-1"], taints=update.add_taints, annotations=annotations)}
    again = decide([xid("gpu-1", 79)], quarantined, BreakerState(), HealthSettings(), NOW, work={"gpu-1": [workload()]})
    assert again.work == ()


@pytest.mark.parametrize(
    ("active", "reserved", "reactivated"),
    [(False, True, False), (False, False, True), (True, False, True), (True, True, True)],
)
def test_a_workload_we_deactivated_is_reactivated_once_kueue_released_its_quota(
    active: bool, reserved: bool, reactivated: bool
) -> None:
    waiting = RequeuingWorkload("team-a", "wl", "gpu-1", active=active, quota_reserved=reserved)
    made = decide([], NODES, BreakerState(), HealthSettings(), NOW, requeuing=[waiting])
    assert [type(a) for a in made.work] == ([ReactivateWorkload] if reactivated else [])


def test_signal_words_name_the_code_and_its_meaning() -> None:
    assert signal_words(xid("gpu-1", 79)) == "Xid 79, GPU has fallen off the bus"
    assert signal_words(lost_gpu("gpu-1")) == "GPU_LOST, GPUs missing from allocatable"


def test_the_owner_message_without_pods_and_for_policy_none() -> None:
    message = owner_message(workload(pods=()), xid("gpu-1", 79), NOW, "untouched", dry_run=False, opt_out_label=OPT_OUT)
    assert "Pods of this workload on it: none." in message
    assert message.endswith("Next: nothing is done to the workload (affected-work policy none).")


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_node_writes_are_planned_without_the_work_and_the_work_after(dry_run: bool) -> None:
    """The decision's two steps (`decide` is both): the Node writes and the nodes whose work they affect, with no
    workload read yet (the controller writes the taints first), then the work's writes from those nodes alone."""
    findings = [xid("gpu-1", 79), xid("gpu-2", 48)]
    health = HealthSettings(dry_run=dry_run)
    nodes_only = plan_nodes(findings, NODES, BreakerState(), health, NOW)
    assert nodes_only.work == nodes_only.work_withheld == ()
    assert [(a.state.name, a.finding.code) for a in nodes_only.affected] == [("gpu-1", 79), ("gpu-2", 48)]
    work = {"gpu-1": [workload()], "gpu-2": [workload("gpu-2", name="other", uid="uid-other")]}
    planned = plan_work(nodes_only, health, NOW, work)
    told = [a for a in (*planned.work, *planned.work_withheld) if isinstance(a, TellOwner)]
    assert [(a.node, a.objects[-1].name) for a in told] == [("gpu-1", "job-train-1a2b3"), ("gpu-2", "other")]
    assert planned.actions == nodes_only.actions and planned.withheld == nodes_only.withheld

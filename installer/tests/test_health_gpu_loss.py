"""A GPU lost under running work: the decision table (which workload held it), DCGM's attribution read from a
Prometheus answer, and the owners' Events the decision plans."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from konduktor.health.affected import AffectedWorkload, ObjectRef
from konduktor.health.classify import DcgmSample, Finding, LostGpuWatch, classify_dcgm
from konduktor.health.decide import BreakerState, DeactivateWorkload, NodeState, Plan, TellOwner, decide
from konduktor.health.gpu_loss import (
    Attribution,
    LostGpu,
    is_device_plugin_xid,
    judge_lost_gpu,
)
from konduktor.health.prometheus import PrometheusSource, attribution
from konduktor.health.settings import AffectedWorkSettings, HealthSettings, PrometheusSettings
from konduktor.health.telemetry import HealthMetrics
from konduktor.observability.answers import SourceError

NOW = 1_750_000_000.0
OPT_OUT = HealthSettings().opt_out_label
DEFAULTS = AffectedWorkSettings()


def job(name: str, pods: tuple[str, ...], gpus: int = 4, **changes: Any) -> AffectedWorkload:
    owner = ObjectRef("batch/v1", "Job", name, f"uid-{name}")
    base: dict[str, Any] = {
        "namespace": "team-a",
        "name": f"job-{name}-1a2b3",
        "node": "gpu-1",
        "pods": pods,
        "uid": f"uid-wl-{name}",
        "owner": owner,
        "gpus": gpus,
    }
    return AffectedWorkload(**{**base, **changes})


A = job("a", ("a-0",))
B = job("b", ("b-0",))
CPU = job("tools", ("tools-0",), gpus=0)


def held(gpu: str, *pods: str, code: int = 48) -> LostGpu:
    return LostGpu(gpu, code, tuple(("team-a", pod) for pod in pods))


def policies(
    work: Sequence[AffectedWorkload],
    found: Attribution | None,
    missing: int = 1,
    settings: AffectedWorkSettings = DEFAULTS,
) -> dict[str, tuple[str, str]]:
    judged = judge_lost_gpu(work, missing, found, settings)
    return {name.split("-")[1]: (j.policy, j.basis) for (_, name), j in judged.items()}


# --- the decision table ---------------------------------------------------------------------------------------


def test_dcgm_names_the_holder_its_workload_is_requeued_and_the_others_left_to_finish() -> None:
    found = Attribution((held("3", "a-0"),), mapped=True)
    assert policies([A, B, CPU], found) == {
        "a": ("requeue", "holder"),
        "b": ("drain", "elsewhere"),
        "tools": ("drain", "no-gpu"),
    }


def test_two_lost_gpus_held_by_two_workloads_requeue_both() -> None:
    found = Attribution((held("3", "a-0"), held("5", "b-0", code=79)), mapped=True)
    assert policies([A, B], found, missing=2) == {"a": ("requeue", "holder"), "b": ("requeue", "holder")}


def test_a_lost_gpu_that_no_pod_held_touches_no_workload() -> None:
    found = Attribution((held("3"),), mapped=True)
    assert policies([A, B], found) == {"a": ("drain", "idle"), "b": ("drain", "idle")}


def test_a_holder_that_is_gone_from_the_node_leaves_the_others_to_finish() -> None:
    """The crashed pod was replaced elsewhere; the workloads still on the node did not hold the GPU."""
    found = Attribution((held("3", "old-0"),), mapped=True)
    assert policies([A, B], found) == {"a": ("drain", "elsewhere"), "b": ("drain", "elsewhere")}


@pytest.mark.parametrize(
    ("found", "missing"),
    [
        (None, 1),  # no Prometheus, or it could not be read
        (Attribution((), mapped=True), 1),  # no Xid on any GPU: the GPU went without one DCGM saw
        (Attribution((held("3"),), mapped=False), 1),  # the exporter's pod mapping is off
        (Attribution((held("3", "a-0"),), mapped=True), 2),  # two GPUs missing, one shown
    ],
)
def test_without_attribution_the_only_gpu_holder_is_the_one(found: Attribution | None, missing: int) -> None:
    assert policies([A, CPU], found, missing) == {"a": ("requeue", "sole"), "tools": ("drain", "no-gpu")}


def test_without_attribution_several_gpu_holders_are_each_requeued_by_default() -> None:
    assert policies([A, B, CPU], None) == {
        "a": ("requeue", "unattributed"),
        "b": ("requeue", "unattributed"),
        "tools": ("drain", "no-gpu"),
    }


def test_without_attribution_several_gpu_holders_follow_the_configured_policy() -> None:
    drain = AffectedWorkSettings(lost_gpu_unattributed="drain")
    assert policies([A, B], None, settings=drain) == {"a": ("drain", "unattributed"), "b": ("drain", "unattributed")}
    advice = judge_lost_gpu([A, B], 1, None, drain)[("team-a", A.name)].why
    assert "requeue it yourself (kubectl kueue stop workload, then resume)" in advice


def test_a_workload_someone_deactivated_does_not_count_as_a_gpu_holder() -> None:
    assert policies([A, job("b", ("b-0",), active=False)], None)["a"] == ("requeue", "sole")


def test_the_holders_policy_is_the_unusable_class_and_the_others_the_degraded_class() -> None:
    found = Attribution((held("3", "a-0"),), mapped=True)
    settings = AffectedWorkSettings(unusable="none", degraded="requeue")
    assert policies([A, B], found, settings=settings) == {"a": ("none", "holder"), "b": ("requeue", "elsewhere")}


@pytest.mark.parametrize(
    ("code", "withdrawn"),
    [*((code, False) for code in (0, 13, 31, 43, 45, 68, 109)), *((code, True) for code in (48, 79, 94))],
)
def test_the_device_plugin_withdraws_gpus_for_every_xid_but_the_ones_it_skips(code: int, withdrawn: bool) -> None:
    assert is_device_plugin_xid(code) is withdrawn


# --- DCGM's attribution from a Prometheus answer --------------------------------------------------------------


def series(gpu: str, values: Sequence[float], **extra: str) -> dict[str, Any]:
    metric = {"__name__": "DCGM_FI_DEV_XID_ERRORS", "Hostname": "gpu-1", "gpu": gpu, **extra}
    return {"metric": metric, "values": [[NOW - 30 + i, str(v)] for i, v in enumerate(values)]}


def answer(*found: dict[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": list(found)}}


def test_the_gpu_that_showed_a_device_plugin_xid_is_lost_with_the_pods_that_held_it() -> None:
    read = attribution(
        answer(
            series("3", [0, 48, 48], pod="a-0", namespace="team-a", container="main"),
            series("5", [0, 0, 0], pod="b-0", namespace="team-a", container="main"),
            series("6", [13, 13]),  # an application Xid: the device plugin keeps the GPU
            series("7", [0, 0]),
        ),
        PrometheusSettings(url="http://prometheus:9090"),
    )
    assert read == Attribution((LostGpu("3", 48, (("team-a", "a-0"),)),), mapped=True)


def test_a_holder_that_let_go_of_the_gpu_before_its_xid_was_read_is_still_named() -> None:
    """The holder's process died with the Xid and its pod ended; the exporter read the Xid after the kubelet had
    released the GPU, on a series without pod labels."""
    read = attribution(
        answer(
            series("3", [0, 0], pod="a-0", namespace="team-a", container="main"),
            series("3", [48]),
            series("5", [0, 0, 0], pod="b-0", namespace="team-a", container="main"),
        ),
        PrometheusSettings(url="http://prometheus:9090"),
    )
    assert read == Attribution((LostGpu("3", 48, (("team-a", "a-0"),)),), mapped=True)


def test_the_pod_labels_are_read_by_their_configured_names() -> None:
    old = PrometheusSettings(url="http://p:9090", pod_label="pod_name", namespace_label="pod_namespace")
    read = attribution(answer(series("3", [79], pod_name="a-0", pod_namespace="team-a")), old)
    assert read == Attribution((LostGpu("3", 79, (("team-a", "a-0"),)),), mapped=True)


def test_series_without_pod_labels_say_the_mapping_is_off() -> None:
    read = attribution(answer(series("3", [0, 48]), series("4", [0, 0])), PrometheusSettings(url="http://p:9090"))
    assert read == Attribution((LostGpu("3", 48),), mapped=False)


def test_an_answer_of_the_wrong_shape_is_a_source_error() -> None:
    broken = answer({"metric": {"gpu": "3"}, "values": [[NOW, "soon"]]})
    with pytest.raises(SourceError, match=r"data.result\[0\].values\[0\]\[1\]"):
        attribution(broken, PrometheusSettings(url="http://p:9090"))


# --- the decision's writes and the owners' words ---------------------------------------------------------------


def lost_gpu(node: str = "gpu-1") -> Finding:
    found = LostGpuWatch(0, clock=lambda: NOW).observe(node, 9, 10)
    assert found is not None
    return found


def plan(work: Sequence[AffectedWorkload], found: Attribution | None, **settings: Any) -> Plan:
    nodes = {f"gpu-{i}": NodeState(f"gpu-{i}", gpu_allocatable=9 if i == 1 else 10, gpu_expected=10) for i in range(10)}
    attributions = {"gpu-1": found} if found is not None else {}
    return decide(
        [lost_gpu()],
        nodes,
        BreakerState(),
        HealthSettings(**settings),
        NOW,
        work={"gpu-1": list(work)},
        attribution=attributions,
    )


def told(made: Plan, name: str) -> TellOwner:
    (found,) = [a for a in made.work if isinstance(a, TellOwner) and a.objects[0].name == name]
    return found


def test_the_holder_is_requeued_and_both_owners_are_told_in_plain_words() -> None:
    made = plan([A, B], Attribution((held("3", "a-0"),), mapped=True))
    assert [(a.name) for a in made.work if isinstance(a, DeactivateWorkload)] == [A.name]
    holder, other = told(made, "a"), told(made, "b")
    assert holder.reason == "RequeuedForNodeHealth"
    assert "DCGM names its pod a-0 as the holder of GPU 3, which the device plugin withdrew after Xid 48." in (
        holder.message
    )
    assert "Next: requeued." in holder.message
    assert other.reason == "NodeQuarantined"
    assert "DCGM names team-a/a-0 as the holder of the lost GPU 3; this workload's GPUs are not affected." in (
        other.message
    )
    assert "Next: left to finish." in other.message


def test_without_attribution_each_gpu_holder_is_requeued_and_told_why() -> None:
    made = plan([A, B], None)
    assert sorted(a.name for a in made.work if isinstance(a, DeactivateWorkload)) == [A.name, B.name]
    for name in ("a", "b"):
        message = told(made, name).message
        assert "Which pod held the lost GPU is not known (no DCGM series to tell" in message
        assert "2 workloads hold GPUs on that node and any of them may have." in message
        assert "a hung job left running would hold its GPUs and quota until someone noticed" in message


def test_an_opted_out_holder_is_only_told() -> None:
    made = plan([job("a", ("a-0",), owner_labels={OPT_OUT: "true"}), B], Attribution((held("3", "a-0"),), mapped=True))
    assert not [a for a in made.work if isinstance(a, DeactivateWorkload)]
    assert "not requeued because Job a carries" in told(made, "a").message


def test_dry_run_tells_the_holder_it_would_have_been_requeued() -> None:
    made = plan([A, B], Attribution((held("3", "a-0"),), mapped=True), dry_run=True)
    assert [a.name for a in made.work_withheld if isinstance(a, DeactivateWorkload)] == [A.name]
    assert told(made, "a").reason == "WouldRequeueForNodeHealth"
    assert told(made, "b").reason == "NodeWouldBeQuarantined"


def quarantined_by(finding: Finding, work: Sequence[AffectedWorkload]) -> dict[str, NodeState]:
    """The nodes after a first decision quarantined gpu-1 for `finding`."""
    nodes = {f"gpu-{i}": NodeState(f"gpu-{i}", gpu_allocatable=9 if i == 1 else 10, gpu_expected=10) for i in range(10)}
    first = decide([finding], nodes, BreakerState(), HealthSettings(), NOW - 60, work={"gpu-1": list(work)})
    (update,) = [a for a in first.actions if type(a).__name__ == "UpdateNode"]
    annotations = {k: v for k, v in update.annotations.items() if v is not None}
    return {**nodes, "gpu-1": replace(nodes["gpu-1"], taints=update.add_taints, annotations=annotations)}


def dcgm_xid_48() -> Finding:
    found = classify_dcgm(DcgmSample("gpu-1", "3", "DCGM_FI_DEV_XID_ERRORS", 48), HealthSettings())
    assert found is not None and found.quarantine and not found.node_unusable
    return found


def test_a_gpu_lost_on_a_node_its_xid_quarantined_before_requeues_the_holder_alone() -> None:
    """DCGM's Xid 48 quarantined the node a minute ago and drained both jobs; the device plugin then withdrew the
    GPU. The holder is requeued and told; the other job, told at the quarantine, hears nothing more."""
    nodes = quarantined_by(dcgm_xid_48(), [A, B])
    found = Attribution((held("3", "a-0"),), mapped=True)
    made = decide(
        [lost_gpu()], nodes, BreakerState(), HealthSettings(), NOW, work={"gpu-1": [A, B]}, attribution={"gpu-1": found}
    )
    assert [a.name for a in made.work if isinstance(a, DeactivateWorkload)] == [A.name]
    (holder,) = [a for a in made.work if isinstance(a, TellOwner)]
    assert holder.objects[0].name == "a" and holder.reason == "RequeuedForNodeHealth"
    assert "was quarantined at 2025-06-15T15:05:40Z" in holder.message  # when it was, not now
    assert not [a for a in made.actions if type(a).__name__ == "UpdateNode"]  # no second quarantine


def test_a_gpu_lost_again_on_a_quarantined_node_whose_holder_has_left_changes_nothing() -> None:
    nodes = quarantined_by(lost_gpu(), [A, B])
    made = decide(
        [lost_gpu()],
        nodes,
        BreakerState(),
        HealthSettings(),
        NOW,
        work={"gpu-1": [B]},
        attribution={"gpu-1": Attribution((held("3", "a-0"),), mapped=True)},
    )
    assert made.work == ()


def test_a_lost_gpu_and_its_xid_in_one_call_requeue_the_holder_once() -> None:
    made = decide(
        [lost_gpu(), dcgm_xid_48()],
        {f"gpu-{i}": NodeState(f"gpu-{i}", gpu_allocatable=9 if i == 1 else 10, gpu_expected=10) for i in range(10)},
        BreakerState(),
        HealthSettings(),
        NOW,
        work={"gpu-1": [A, B]},
        attribution={"gpu-1": Attribution((held("3", "a-0"),), mapped=True)},
    )
    assert [a.name for a in made.work if isinstance(a, DeactivateWorkload)] == [A.name]
    assert sorted(a.objects[0].name for a in made.work if isinstance(a, TellOwner)) == ["a", "b"]


def test_the_attribution_is_read_from_a_real_prometheus(prometheus: Callable[[str], str]) -> None:
    """The query the controller asks, answered by Prometheus over the exporter's Xid series of two nodes."""
    now = time.time()
    lines = []
    for gpu, labels, values in (
        ("3", ',pod="a-0",namespace="team-a",container="train"', (0, 48)),
        ("5", ',pod="b-0",namespace="team-a",container="train"', (0, 0)),
        ("7", "", (0, 0)),
    ):
        for at, value in zip((now - 40, now - 10), values, strict=True):
            lines.append(f'DCGM_FI_DEV_XID_ERRORS{{gpu="{gpu}",Hostname="gpu-1"{labels}}} {value} {at:.3f}')
    lines.append(f'DCGM_FI_DEV_XID_ERRORS{{gpu="0",Hostname="gpu-2",pod="c-0",namespace="team-b"}} 79 {now - 10:.3f}')
    url = prometheus("\n".join([*lines, "# EOF", ""]))
    source = PrometheusSource(PrometheusSettings(url=url), HealthMetrics())
    assert source.attribution("gpu-1", now - 120, now) == Attribution(
        (LostGpu("3", 48, (("team-a", "a-0"),)),), mapped=True
    )
    assert source.attribution("gpu-9", now - 120, now) == Attribution((), mapped=False)
    assert source.attribution("gpu-1", now - 120, now - 30) == Attribution((), mapped=True)  # before the Xid

"""One reading of a Node's GPUs, taints and GPUHealthy condition, shared by the health controller and the quarantine
that `konduktor-install burnin --quarantine` plans."""

from __future__ import annotations

from typing import Any

from konduktor.burnin.results import CheckResult, NodeVerdict, Verdict
from konduktor.config.model import selects
from konduktor.gpu.node import GpuNode, Taint, allocatable_gpus, read_node
from konduktor.health.decide import SetCondition, UpdateNode
from konduktor.health.node_reading import node_state
from konduktor.health.quarantine import quarantine_plan
from konduktor.vocabulary import GPU_HEALTHY_CONDITION, GPU_RESOURCE, HEALTH_TAINT_KEY, QUARANTINED_AT


def a_node(
    *,
    taints: list[dict[str, str]] | None = None,
    capacity: str | None = "8",
    allocatable: str | None = "8",
    healthy: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "capacity": {GPU_RESOURCE: capacity} if capacity is not None else {},
        "allocatable": {GPU_RESOURCE: allocatable} if allocatable is not None else {},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    if healthy is not None:
        status["conditions"].append({"type": GPU_HEALTHY_CONDITION, "status": healthy})
    return {
        "metadata": {"name": "gpu-1", "labels": {"a": "b"}, "annotations": {QUARANTINED_AT: "2025-01-01T00:00:00Z"}},
        "spec": {"taints": taints or [], "unschedulable": True},
        "status": status,
    }


def test_gpus_are_counted_from_allocatable_which_the_device_plugin_lowers_for_a_bad_gpu() -> None:
    assert allocatable_gpus(a_node(capacity="8", allocatable="7")) == 7
    # Capacity alone is no GPU a pod can get.
    assert allocatable_gpus(a_node(capacity="8", allocatable=None)) is None
    assert allocatable_gpus(a_node(allocatable="0")) == 0
    assert allocatable_gpus(a_node(allocatable="1500m")) is None  # not a count of devices


def test_taints_keep_their_effects_and_unknown_effects_are_left_out() -> None:
    node = a_node(
        taints=[
            {"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoExecute"},
            {"key": GPU_RESOURCE, "effect": "NoSchedule"},
            {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
            {"key": "odd", "effect": "Sometimes"},
        ]
    )
    assert read_node(node).taints == (
        Taint(HEALTH_TAINT_KEY, "NoExecute", "unhealthy"),
        Taint(GPU_RESOURCE, "NoSchedule", ""),
        Taint("soft", "PreferNoSchedule", "x"),
    )


def test_the_gpu_healthy_condition_reads_true_false_or_unknown() -> None:
    assert read_node(a_node(healthy="True")).gpu_healthy is True
    assert read_node(a_node(healthy="False")).gpu_healthy is False
    # Unknown is not "unhealthy": a quarantine still has to set the condition to False.
    assert read_node(a_node(healthy="Unknown")).gpu_healthy is None
    assert read_node(a_node()).gpu_healthy is None


def test_the_whole_reading() -> None:
    assert read_node(a_node(allocatable="6", healthy="False")) == GpuNode(
        name="gpu-1",
        labels={"a": "b"},
        annotations={QUARANTINED_AT: "2025-01-01T00:00:00Z"},
        unschedulable=True,
        gpu_healthy=False,
        gpu_allocatable=6,
    )


def test_the_controller_reads_the_node_as_gpu_health_does() -> None:
    node = a_node(allocatable="7", healthy="False")
    state = node_state(node, 8, requalification_running=True)
    assert (state.gpu_allocatable, state.gpu_expected, state.requalification_running) == (7, 8, True)
    assert read_node(node) == GpuNode(**{k: getattr(state, k) for k in GpuNode.__dataclass_fields__})


def test_the_burnin_quarantine_reads_the_node_as_the_controller_does() -> None:
    """An Unknown GPUHealthy condition is set to False with the quarantine; a taint of no known effect is ignored."""
    node = a_node(taints=[{"key": "x", "effect": "?"}], healthy="Unknown")
    node["spec"]["unschedulable"] = False
    check = CheckResult("dcgm_diag", Verdict.FAIL, "dcgm", "memory test failed", ("DCGM diag: memory FAIL",))
    failed = NodeVerdict("gpu-1", None, None, Verdict.FAIL, (check,))
    plan = quarantine_plan([failed], [node], now=1_700_000_000.0)
    [update] = [a for a in plan.actions if isinstance(a, UpdateNode)]
    assert [t.key for t in update.add_taints] == [HEALTH_TAINT_KEY]
    assert [a.healthy for a in plan.actions if isinstance(a, SetCondition)] == [False]


def test_a_selector_matches_every_label_it_names_with_exactly_its_value() -> None:
    labels = {"nvidia.com/gpu.product": "H100", "zone": "a"}
    assert selects({"nvidia.com/gpu.product": "H100"}, labels)
    assert selects({}, labels)
    assert not selects({"nvidia.com/gpu.product": "H100", "rack": "1"}, labels)
    assert not selects({"zone": "b"}, labels)

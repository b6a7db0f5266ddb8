"""The sim's fake GPUs: their step output goes through the real parsers and verdicts, healthy or with faults."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from konduktor.burnin.results import Verdict
from konduktor.burnin.thresholds import DEFAULT_THRESHOLDS, GpuModel
from konduktor.burnin.tiers import Tier, options_for_tier
from konduktor.burnin.verdict import NodeEvidence, judge_run
from konduktor.sim.agent import cri_log, fake_node, logs_object, pod_logs
from konduktor.sim.gpus import FAULTS, FakeNode, FaultSpecError, parse_faults, step_log

STANDARD = options_for_tier(Tier.STANDARD)


def product_of(model: GpuModel) -> str:
    """A product label the model's own patterns accept (GPU feature discovery's spelling)."""
    return "NVIDIA-" + model.product_patterns[0].replace("(-80GB)?", "").replace("\\", "")


def judge(node: FakeNode) -> dict[str, Verdict]:
    logs = {step.value: step_log(step.value, node) for step in STANDARD.steps}
    (verdict,) = judge_run([NodeEvidence(node.name, node.product, node.gpus, logs)], STANDARD)
    return {"node": verdict.verdict} | {check.check: check.verdict for check in verdict.checks}


@pytest.mark.parametrize("model", DEFAULT_THRESHOLDS.models, ids=lambda m: m.key)
def test_healthy_fake_gpus_pass_every_standard_check_of_their_model(model: GpuModel) -> None:
    verdicts = judge(FakeNode("n1", product_of(model), 8))
    assert FakeNode("n1", product_of(model), 8).model == model
    assert verdicts["node"] is Verdict.PASS
    assert Verdict.FAIL not in verdicts.values() and Verdict.ERROR not in verdicts.values()


@pytest.mark.parametrize(
    ("fault", "check"),
    [
        ("ecc", "ecc"),
        ("ecc", "dcgm_diag"),
        ("xid", "kernel_log"),
        ("missing", "inventory"),
        ("slow", "matmul_tflops"),
        ("slow", "nccl_allreduce"),
        ("sdc", "matmul_sdc"),
    ],
)
def test_each_injected_fault_fails_the_check_that_catches_it(fault: str, check: str) -> None:
    assert fault in FAULTS
    verdicts = judge(FakeNode("n1", "NVIDIA-H100-80GB-HBM3", 8, parse_faults(f"3={fault}")))
    assert verdicts["node"] is Verdict.FAIL
    assert verdicts[check] is Verdict.FAIL


def test_unknown_models_still_print_but_are_not_judged_on_performance() -> None:
    verdicts = judge(FakeNode("n1", "NVIDIA-Tesla-T4", 4))
    assert verdicts["matmul_tflops"] is Verdict.SKIPPED and verdicts["node"] is not Verdict.FAIL


def test_fault_specs() -> None:
    assert parse_faults(" 3=slow, 5=ecc ,") == {3: "slow", 5: "ecc"}
    assert parse_faults(None) == {}
    for bad in ("3", "x=ecc", "3=melted"):
        with pytest.raises(FaultSpecError, match="expected <gpu index>="):
            parse_faults(bad)


def test_steps_the_sim_cannot_play_and_silent_nodes_print_nothing() -> None:
    assert step_log("gpu-burn", FakeNode("n1", "NVIDIA-H100-80GB-HBM3", 8)) is None
    assert step_log("passive", FakeNode("n1", "NVIDIA-H100-80GB-HBM3", 8, silent=True)) is None


def test_pods_get_one_log_file_per_step_container_in_cri_format() -> None:
    node = fake_node(
        {
            "metadata": {
                "name": "gpu-0",
                "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "annotations": {"sim.konduktor.ai/gpu-faults": "1=sdc, bogus"},
            },
            "status": {"capacity": {"nvidia.com/gpu": "8"}},
        }
    )
    assert (node.gpus, node.faults) == (8, {})  # a bad annotation is ignored (and logged), never a crash
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"initContainers": [{"name": "passive"}], "containers": [{"name": "matmul"}, {"name": "sidecar"}]},
    }
    logs = pod_logs(pod, node)
    assert sorted(logs) == ["matmul", "passive"]
    assert logs["passive"].rstrip().endswith('KONDUKTOR-STEP-END {"step": "passive", "exit_code": 0, "seconds": 1}')
    obj = logs_object(pod, {name: Path(f"/logs/{name}.log") for name in logs})
    assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"}]
    assert obj["spec"]["logs"][0] == {"containers": ["matmul"], "logsFile": "/logs/matmul.log"}
    at = datetime(2026, 11, 22, 1, 2, 3, 456789, tzinfo=UTC)
    assert cri_log("a\nb", at) == (
        "2026-11-22T01:02:03.456789000Z stdout F a\n2026-11-22T01:02:03.456789000Z stdout F b\n"
    )

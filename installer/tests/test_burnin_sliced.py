"""Burn-in of a node whose GPUs are shared: its Job asks for the slices the node advertises and runs the passive
step alone; the other steps of the level are SKIPPED with their reason; the verdict comes from the same parsers."""

from __future__ import annotations

from typing import Any

from konduktor.burnin.plan import select_targets, target_job
from konduktor.burnin.results import Verdict
from konduktor.burnin.sliced import judge_sliced, slice_request
from konduktor.burnin.tiers import Step, options_for_tier
from konduktor.burnin.verdict import NodeEvidence
from konduktor.burnin.verdict.common import DCGM_DIAG, INVENTORY, MATMUL_TFLOPS, NCCL_ALLREDUCE
from konduktor.sim.agent import seen_by
from konduktor.sim.gpus import FakeNode, step_log

MIG = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "16", "nvidia.com/mig-3g.40gb": "8", "cpu": "96"}
SHARED = {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "32"}


def gpu_node(name: str, allocatable: dict[str, str]) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
    }
    return {"metadata": {"name": name, "labels": labels}, "spec": {}, "status": {"allocatable": allocatable}}


def test_a_sliced_node_is_burned_in_through_its_slices() -> None:
    assert slice_request(gpu_node("a", MIG)) == {"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-3g.40gb": 8}
    assert slice_request(gpu_node("b", SHARED)) == {"nvidia.com/gpu.shared": 1}  # failRequestsGreaterThanOne
    assert slice_request(gpu_node("c", {"nvidia.com/gpu": "8"})) == {}
    nodes = [gpu_node("mig", MIG), gpu_node("shared", SHARED), gpu_node("whole", {"nvidia.com/gpu": "8"})]
    mig, shared, whole = select_targets(nodes, None, [])  # every node with GPUs to offer, sliced or not
    assert (mig.expected_gpus, shared.expected_gpus, whole.slices) == (8, 1, ())
    options = options_for_tier("standard")
    job = target_job(mig, "20260101-000000", options, "konduktor-burnin", None)
    containers = [*job["spec"]["template"]["spec"]["initContainers"], *job["spec"]["template"]["spec"]["containers"]]
    assert [c["name"] for c in containers] == [Step.PASSIVE.value]
    [limits] = [c["resources"]["limits"] for c in containers]
    assert "nvidia.com/gpu" not in limits
    assert (limits["nvidia.com/mig-1g.10gb"], limits["nvidia.com/mig-3g.40gb"]) == (16, 8)
    whole_job = target_job(whole, "20260101-000000", options, "konduktor-burnin", None)
    assert len(whole_job["spec"]["template"]["spec"]["initContainers"]) == len(options.steps) - 1


def test_its_passive_step_is_judged_and_the_rest_is_skipped_with_the_reason() -> None:
    options = options_for_tier("standard")
    fake = FakeNode("mig", "NVIDIA-H100-80GB-HBM3", 8)
    evidence = NodeEvidence("mig", fake.product, 8, {Step.PASSIVE.value: step_log(Step.PASSIVE.value, fake)})
    verdict = judge_sliced(evidence, options)
    assert verdict.verdict is Verdict.PASS
    checks = {c.check: c for c in verdict.checks}
    assert checks[INVENTORY].verdict is Verdict.PASS
    for skipped in (DCGM_DIAG, MATMUL_TFLOPS, NCCL_ALLREDUCE):
        assert checks[skipped].verdict is Verdict.SKIPPED and checks[skipped].reasons, skipped
    # A fault the passive step sees still fails the node: an Xid 79 in the kernel log.
    broken = FakeNode("mig", "NVIDIA-H100-80GB-HBM3", 8, {3: "xid"})
    evidence = NodeEvidence("mig", fake.product, 8, {Step.PASSIVE.value: step_log(Step.PASSIVE.value, broken)})
    assert judge_sliced(evidence, options).verdict is Verdict.FAIL


def test_the_sims_gpus_are_those_the_pod_holds() -> None:
    node = FakeNode("shared", "NVIDIA-H100-80GB-HBM3", 8)

    def pod(limits: dict[str, str]) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "passive", "resources": {"limits": limits}}]}}

    assert seen_by(pod({"nvidia.com/gpu.shared": "1"}), node).gpus == 1
    assert seen_by(pod({"nvidia.com/mig-1g.10gb": "16"}), node).gpus == 8
    assert seen_by(pod({"nvidia.com/gpu": "8"}), node).gpus == 8

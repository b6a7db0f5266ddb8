"""Burn-in of a node whose GPUs are shared below one GPU (MIG, time-slicing, MPS): what can be tested there, what
the Job asks for, and what is skipped and why (docs/design/gpu-sharing.md#burn-in-of-a-shared-node).

Such a node advertises no whole `nvidia.com/gpu`, so the Job asks for its slices instead: every MIG instance the
node advertises (the pod then holds every GPU, as a whole-GPU burn-in does, and nvidia-smi lists each physical GPU),
or one time-sliced / MPS replica (the device plugin refuses more than one per container with
`failRequestsGreaterThanOne`, so the pod sees one GPU). It runs the passive step alone: nvidia-smi's state, ECC,
remapped rows and NVLink of the GPUs it sees, and the node's kernel log. The other steps are reported SKIPPED with
their reason. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from konduktor.burnin.results import CheckResult, NodeVerdict, Verdict, worst
from konduktor.burnin.tiers import BurnInOptions, Step
from konduktor.burnin.verdict import NodeEvidence, judge_node
from konduktor.burnin.verdict.common import DCGM_DIAG, GPU_BURN, MATMUL_TFLOPS, NCCL_ALLREDUCE
from konduktor.gpu.sharing import MIG_RESOURCE_PREFIX, SHARED_RESOURCE

# Why each step does not run on a sliced node; the check it would have produced is SKIPPED with this reason.
SKIPPED = {
    Step.DCGM: (
        DCGM_DIAG,
        "DCGM diagnostics drive whole GPUs and need them idle; a shared node's GPUs are held through their slices, "
        "and NVLink is off in MIG mode (burn it in whole: nvidia.com/mig.config=all-disabled, or no sharing label)",
    ),
    Step.MATMUL: (
        MATMUL_TFLOPS,
        "the TFLOPS goals are per whole GPU; a MIG instance has part of the SMs and a CUDA process sees one MIG "
        "instance only, and a time-sliced or MPS replica shares its SMs with other pods",
    ),
    Step.GPU_BURN: (GPU_BURN, "its goals are per whole GPU, which a slice is not"),
    Step.NCCL: (
        NCCL_ALLREDUCE,
        "MIG instances have no peer-to-peer path (PCIe or NVLink) between them, and a shared replica is one GPU",
    ),
}


def slice_request(node: Mapping[str, Any]) -> dict[str, int]:
    """What a burn-in pod asks for on a node that advertises slices instead of whole GPUs: every MIG instance,
    or one shared replica; {} when the node advertises neither."""
    allocatable = node.get("status", {}).get("allocatable") or {}
    counts = {name: int(str(value)) for name, value in allocatable.items() if str(value).isdigit()}
    mig = {name: count for name, count in sorted(counts.items()) if name.startswith(MIG_RESOURCE_PREFIX) and count}
    if mig:
        return mig
    return {SHARED_RESOURCE: 1} if counts.get(SHARED_RESOURCE) else {}


def visible_gpus(request: Mapping[str, int], physical: int) -> int:
    """The GPUs nvidia-smi lists in a pod holding `request` on a node of `physical` GPUs."""
    return 1 if SHARED_RESOURCE in request else physical


def sliced_options(options: BurnInOptions) -> BurnInOptions:
    """The asked tier's options with the passive step alone."""
    return replace(options, dcgm_level=None, matmul_seconds=None, gpu_burn_seconds=None, nccl_one_node=False)


def skipped_checks(options: BurnInOptions) -> tuple[CheckResult, ...]:
    """A SKIPPED check, with its reason, for each step of the asked tier that a sliced node does not run."""
    return tuple(
        CheckResult(SKIPPED[step][0], Verdict.SKIPPED, step.value, "sliced node", (SKIPPED[step][1],))
        for step in options.steps
        if step in SKIPPED
    )


def judge_sliced(evidence: NodeEvidence, options: BurnInOptions) -> NodeVerdict:
    """A sliced node's verdict: its passive step judged as any node's, and the rest of the asked tier SKIPPED."""
    verdict = judge_node(evidence, sliced_options(options))
    checks = (*verdict.checks, *skipped_checks(options))
    return replace(verdict, checks=checks, verdict=worst(c.verdict for c in checks))

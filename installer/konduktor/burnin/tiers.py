"""What runs in each burn-in tier, in which image, for how long.

The same `BurnInOptions` value renders the Jobs (manifests.py) and judges their output
(verdict.py), so what was run and what it is held against cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Literal

from konduktor.burnin.thresholds import NcclAlgorithm
from konduktor.errors import UsageError


class Tier(StrEnum):
    QUICK = "quick"  # passive state only: seconds, safe on a live node
    STANDARD = "standard"  # + DCGM diag, matmul burn-in, one-node NCCL
    FULL = "full"  # + DCGM level 4, a longer soak, and node pairs over the fabric


class Step(StrEnum):
    """One tool run inside the per-node Job; also its container name and its log's key."""

    PASSIVE = "passive"
    DCGM = "dcgm-diag"
    MATMUL = "matmul"
    NCCL = "nccl-allreduce"
    GPU_BURN = "gpu-burn"


# The container of the node-pair Job; not a per-node step.
PAIR_STEP = "nccl-pair"


@dataclass(frozen=True)
class BurnInImages:
    """Container images per tool; pin digests (`image@sha256:...`) in production."""

    # DCGM release the GPU Operator ships (docs/design/burnin.md#images); nvidia-smi is injected by
    # the NVIDIA container toolkit, so the passive step reuses this image.
    dcgm: str = "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"
    # First NGC PyTorch release with Blackwell support; runs matmul.py and allreduce.py.
    pytorch: str = "nvcr.io/nvidia/pytorch:25.01-py3"
    # NGC has no nccl-tests image; CoreWeave's public build ships all_reduce_perf (docs/design/burnin.md#images).
    nccl_tests: str = "ghcr.io/coreweave/nccl-tests:12.9.1-devel-ubuntu24.04-nccl2.29.2-1-d73ec07"
    nccl_tests_binary: str = "/opt/nccl_tests/build/all_reduce_perf"  # where that image installs it
    # gpu-burn publishes no registry image (docs/design/burnin.md#gpu-burn): the step runs only when one is given.
    gpu_burn: str | None = None


DcgmPrivilege = Literal["sys_admin", "privileged"]


@dataclass(frozen=True)
class BurnInOptions:
    tier: Tier
    dcgm_level: int | None = None  # None: no DCGM step
    matmul_seconds: int | None = None  # None: no matmul step
    # Square BF16 operands; 8192 is gpu-burn's and gpu-fryer's tile (docs/design/burnin.md#matmul-pitfalls).
    matmul_size: int = 8192
    # One large size, -b == -e: `# Avg bus bandwidth` then equals the gated number; 16 GiB is
    # what the one-node goals were measured at (docs/design/burnin.md#nccl-tests, #achievable-fractions).
    nccl_bytes: str = "16G"
    nccl_one_node: bool = False
    # Pinned, never left to NCCL: NVLS and ring busbw differ by ~30 % (docs/design/burnin.md#nccl-tests).
    nccl_algorithm: NcclAlgorithm = NcclAlgorithm.NVLS
    pair_bytes: int = 8 << 30  # two-node goal measured at 8 GiB (docs/design/burnin.md#thresholds)
    gpu_burn_seconds: int | None = None
    images: BurnInImages = field(default_factory=BurnInImages)
    # CRI-O rejects privileged pods with device-plugin GPUs, so SYS_ADMIN is the default
    # (docs/design/burnin.md#jobs-on-kubernetes).
    dcgm_privilege: DcgmPrivilege = "sys_admin"
    # Image pulls (the PyTorch image is ~10 GB) and scheduling count against the Job deadline.
    schedule_slack_s: int = 900
    ttl_after_finished_s: int = 3600  # long enough for the installer to read the logs
    # E.g. a lowest class on a live cluster (docs/design/burnin.md#jobs-on-kubernetes).
    priority_class: str | None = None
    cpu: str = "8"
    memory: str = "64Gi"

    @property
    def steps(self) -> tuple[Step, ...]:
        """Steps in run order: cheapest first, so a broken node fails fast."""
        planned = [Step.PASSIVE]
        if self.dcgm_level is not None:
            planned.append(Step.DCGM)
        if self.matmul_seconds is not None:
            planned.append(Step.MATMUL)
        if self.gpu_burn_seconds is not None and self.images.gpu_burn:
            planned.append(Step.GPU_BURN)
        if self.nccl_one_node:
            planned.append(Step.NCCL)
        return tuple(planned)

    def timeout_s(self, step: Step) -> int:
        """Wall-clock limit of one step; a step that hits it is an ERROR, not a FAIL."""
        match step:
            case Step.PASSIVE:
                return 120
            case Step.DCGM:
                # L2 ~2 min, L3 ~15 min (docs/design/burnin.md#tiers); L4 runs tens of minutes.
                return {1: 300, 2: 900, 3: 2700}.get(self.dcgm_level or 0, 7200)
            case Step.MATMUL:
                return (self.matmul_seconds or 0) + 600  # setup, warm-up, per-window digests
            case Step.GPU_BURN:
                return (self.gpu_burn_seconds or 0) + 300
            case Step.NCCL:
                return 900  # 1-3 min typical (docs/design/burnin.md#tiers)
        raise AssertionError(step)

    @property
    def deadline_s(self) -> int:
        return sum(self.timeout_s(step) for step in self.steps) + self.schedule_slack_s


def options_for_tier(tier: Tier | str, **overrides: object) -> BurnInOptions:
    """Defaults per tier (docs/design/burnin.md#tiers), then the caller's overrides."""
    try:
        tier = Tier(tier)
    except ValueError:
        raise UsageError(
            f"unknown burn-in level {tier!r}", hint=f"use one of: {', '.join(t.value for t in Tier)}"
        ) from None
    match tier:
        case Tier.QUICK:
            base = BurnInOptions(tier=tier)
        case Tier.STANDARD:
            # DCGM level 2 (~2 min) and a 10 min matmul + SDC run (docs/design/burnin.md#tiers).
            base = BurnInOptions(tier=tier, dcgm_level=2, matmul_seconds=600, nccl_one_node=True)
        case Tier.FULL:
            base = BurnInOptions(tier=tier, dcgm_level=4, matmul_seconds=3600, nccl_one_node=True)
    try:
        return replace(base, **overrides)  # type: ignore[arg-type]
    except TypeError as exc:
        raise UsageError(f"bad burn-in option: {exc}") from None

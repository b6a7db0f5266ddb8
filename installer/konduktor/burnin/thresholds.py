"""Per GPU model physical peaks and burn-in goals, kept as data.

Goals are fractions of a physical peak, so a model is described by its datasheet numbers and a
few ratios; a second rule compares each GPU with the median of its node, which catches one slow
GPU among healthy peers. Every number cites the heading of docs/design/burnin.md it comes from.

Bands: at or above `pass_at` is PASS, down to `fail_below` is WARN, below it FAIL. The goals in
docs/design/burnin.md#thresholds are the PASS lines; the WARN margin under them (10 % of the goal by default) exists
because those goals come from other people's systems (cooling, power caps, clocks differ) and a
result just under a goal is a reason to look, not proof of a bad part. Only FAIL quarantines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class NcclAlgorithm(StrEnum):
    """All-reduce bus bandwidth is only comparable within one algorithm (docs/design/burnin.md#nccl-tests)."""

    RING = "ring"
    NVLS = "nvls"  # NVLink SHARP: busbw can exceed the NVLink line rate


@dataclass(frozen=True)
class Band:
    """PASS at or above `pass_at`, WARN down to `fail_below`, FAIL under it (fractions of a reference)."""

    pass_at: float
    fail_below: float

    def __post_init__(self) -> None:
        if not 0 < self.fail_below <= self.pass_at:
            raise ValueError(f"band needs 0 < fail_below <= pass_at, got {self.fail_below}, {self.pass_at}")


WARN_MARGIN = 0.10


def goal(pass_at: float) -> Band:
    """A band whose WARN zone is the default margin under the goal."""
    return Band(pass_at=pass_at, fail_below=round(pass_at * (1 - WARN_MARGIN), 4))


@dataclass(frozen=True)
class GpuModel:
    """One exact GPU SKU: physical peaks (dense, per GPU) and goals as fractions of them."""

    key: str  # stable id for reports and config overrides
    name: str
    product_patterns: tuple[str, ...]  # full-match regexes over a normalised product name
    bf16_dense_tflops: float
    hbm_tb_s: float
    nvlink_gb_s: float | None  # per direction; None without NVLink
    nvswitch: bool  # every NVLink of every GPU must be up (HGX / NVL systems)
    pcie_gb_s: float | None  # host link per direction; None when the host link is not PCIe
    matmul_bf16: Band  # fraction of bf16_dense_tflops
    nccl_allreduce: Mapping[NcclAlgorithm, Band]  # one-node busbw as fraction of nvlink_gb_s
    nvlink_p2p: Band | None = None  # fraction of nvlink_gb_s
    pcie_copy: Band | None = None  # fraction of pcie_gb_s
    hbm_copy: Band | None = None  # fraction of hbm_tb_s
    dcgm_ignored_tests: frozenset[str] = frozenset()


# Gen5 x16 carries ~63 GB/s per direction (docs/design/burnin.md#physical-peaks); Gen4 runs at half the per-lane rate.
_PCIE5_X16 = 63.0
_PCIE4_X16 = _PCIE5_X16 / 2

# BF16 matmul goal for every model: 0.70 of the dense peak; good cuBLAS matmuls reach 0.73-0.87
# (docs/design/burnin.md#thresholds, #achievable-fractions).
_MATMUL = goal(0.70)
# NVLink pair copy goal: 0.70 of one direction of NVLink (docs/design/burnin.md#thresholds).
_NVLINK_P2P = goal(0.70)
# PCIe H2D/D2H on Gen5 x16: 0.75 x 63 ~ 47 GB/s (docs/design/burnin.md#thresholds).
_PCIE5_COPY = goal(0.75)
# H100/H200 one-node all_reduce: ring >= 0.9 x 370 = 333 GB/s, NVLS >= 0.9 x 480 = 430 GB/s,
# against 450 GB/s of NVLink per direction (docs/design/burnin.md#thresholds).
_HOPPER_NCCL = {NcclAlgorithm.RING: goal(round(333 / 450, 3)), NcclAlgorithm.NVLS: goal(round(430 / 450, 3))}

GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel(
        key="a100-sxm4-80gb",
        name="A100 SXM4 80GB",
        product_patterns=(r"A100-SXM4-80GB",),
        bf16_dense_tflops=312.0,  # docs/design/burnin.md#physical-peaks
        hbm_tb_s=2.04,  # docs/design/burnin.md#physical-peaks
        nvlink_gb_s=300.0,  # NVLink3 300 / 600 GB/s (docs/design/burnin.md#physical-peaks)
        nvswitch=True,
        pcie_gb_s=_PCIE4_X16,  # PCIe4 x16 (docs/design/burnin.md#physical-peaks)
        matmul_bf16=_MATMUL,  # A100 >= 218 TFLOPS (docs/design/burnin.md#thresholds)
        # A100 >= 210 GB/s (docs/design/burnin.md#thresholds). NVLS needs Hopper-generation NVSwitch, so NCCL runs ring
        # on A100 whatever NCCL_NVLS_ENABLE says; both keys carry the ring goal.
        nccl_allreduce={NcclAlgorithm.RING: goal(0.70), NcclAlgorithm.NVLS: goal(0.70)},
        nvlink_p2p=_NVLINK_P2P,  # A100 210 GB/s (docs/design/burnin.md#thresholds)
        pcie_copy=goal(round(21 / _PCIE4_X16, 3)),  # Azure A100 >= 21 GB/s (docs/design/burnin.md#thresholds)
        hbm_copy=goal(round(1.17 / 2.04, 3)),  # DCGM A100 floor ~1.17 TB/s (docs/design/burnin.md#thresholds)
    ),
    GpuModel(
        key="h100-sxm5",
        name="H100 SXM5 80GB",
        # nvidia-smi calls the SXM5 part "NVIDIA H100 80GB HBM3" (GFD label NVIDIA-H100-80GB-HBM3).
        product_patterns=(r"H100-80GB-HBM3", r"H100-SXM5-80GB"),
        bf16_dense_tflops=989.0,  # docs/design/burnin.md#physical-peaks
        hbm_tb_s=3.35,  # docs/design/burnin.md#physical-peaks
        nvlink_gb_s=450.0,  # NVLink4 450 / 900 GB/s (docs/design/burnin.md#physical-peaks)
        nvswitch=True,
        pcie_gb_s=_PCIE5_X16,  # docs/design/burnin.md#physical-peaks
        matmul_bf16=_MATMUL,  # H100 >= 692 TFLOPS (docs/design/burnin.md#thresholds)
        nccl_allreduce=_HOPPER_NCCL,
        nvlink_p2p=_NVLINK_P2P,  # H100 315 GB/s (docs/design/burnin.md#thresholds)
        pcie_copy=_PCIE5_COPY,
        hbm_copy=goal(round(1.905 / 3.35, 3)),  # DCGM H100 floor 1905000 MB/s (docs/design/burnin.md#thresholds)
    ),
    GpuModel(
        key="h100-pcie",
        name="H100 PCIe 80GB",
        product_patterns=(r"H100-PCIE(-80GB)?",),
        bf16_dense_tflops=756.0,  # docs/design/burnin.md#physical-peaks
        hbm_tb_s=2.0,  # docs/design/burnin.md#physical-peaks
        nvlink_gb_s=300.0,  # NVLink bridge 600 GB/s bidirectional (docs/design/burnin.md#physical-peaks)
        nvswitch=False,  # bridges join pairs only; unbridged links are legitimately inactive
        pcie_gb_s=_PCIE5_X16,  # docs/design/burnin.md#physical-peaks
        matmul_bf16=_MATMUL,  # general 0.70 rule; no measured MAMF for this SKU (docs/design/burnin.md#thresholds)
        nccl_allreduce={},  # no documented one-node figure: judged SKIPPED, not guessed
        nvlink_p2p=_NVLINK_P2P,  # general 0.70 x uni rule (docs/design/burnin.md#thresholds), bridged pairs only
        pcie_copy=_PCIE5_COPY,
    ),
    GpuModel(
        key="h200-sxm",
        name="H200 SXM 141GB",
        product_patterns=(r"H200", r"H200-141GB-HBM3E"),
        bf16_dense_tflops=989.0,  # docs/design/burnin.md#physical-peaks
        hbm_tb_s=4.8,  # docs/design/burnin.md#physical-peaks
        nvlink_gb_s=450.0,  # docs/design/burnin.md#physical-peaks
        nvswitch=True,
        pcie_gb_s=_PCIE5_X16,  # docs/design/burnin.md#physical-peaks
        matmul_bf16=_MATMUL,  # H200 >= 692 TFLOPS (docs/design/burnin.md#thresholds)
        nccl_allreduce=_HOPPER_NCCL,  # measured 482 NVLS / 368 ring (docs/design/burnin.md#achievable-fractions)
        nvlink_p2p=_NVLINK_P2P,  # H200 315 GB/s (docs/design/burnin.md#thresholds)
        pcie_copy=_PCIE5_COPY,
        hbm_copy=goal(round(2.333 / 4.8, 3)),  # DCGM H200 floor 2333 GB/s (docs/design/burnin.md#thresholds)
    ),
    GpuModel(
        key="b200",
        name="B200 (HGX)",
        product_patterns=(r"B200", r"B200-\d+GB-HBM3E"),
        bf16_dense_tflops=2250.0,  # docs/design/burnin.md#physical-peaks
        hbm_tb_s=8.0,  # docs/design/burnin.md#physical-peaks
        nvlink_gb_s=900.0,  # NVLink5 900 / 1800 GB/s (docs/design/burnin.md#physical-peaks)
        nvswitch=True,
        pcie_gb_s=_PCIE5_X16,  # docs/design/burnin.md#physical-peaks
        matmul_bf16=_MATMUL,  # B200 >= 1575 TFLOPS (docs/design/burnin.md#thresholds)
        # 0.9 x 845.7 GB/s measured @16 GiB on one P6-B200 node with NCCL defaults, which use NVLS on
        # NVSwitch systems (docs/design/burnin.md#achievable-fractions); no ring figure is documented, so
        # ring runs are SKIPPED.
        nccl_allreduce={NcclAlgorithm.NVLS: goal(round(0.9 * 845.7 / 900, 3))},
        nvlink_p2p=_NVLINK_P2P,  # general 0.70 x uni rule (docs/design/burnin.md#thresholds)
        pcie_copy=_PCIE5_COPY,
    ),
    GpuModel(
        key="gb200",
        name="GB200",
        product_patterns=(r"GB200", r"GB200-\d+GB-HBM3E"),
        bf16_dense_tflops=2500.0,  # docs/design/burnin.md#physical-peaks
        hbm_tb_s=8.0,  # docs/design/burnin.md#physical-peaks
        nvlink_gb_s=900.0,  # docs/design/burnin.md#physical-peaks
        nvswitch=True,
        pcie_gb_s=None,  # host link is NVLink-C2C (docs/design/burnin.md#physical-peaks)
        matmul_bf16=_MATMUL,  # MAMF 1822 TF = 0.729 of peak (docs/design/burnin.md#achievable-fractions)
        # 0.9 x 835 GB/s, the low end of NVL72 racks @4-8 GiB (docs/design/burnin.md#achievable-fractions).
        nccl_allreduce={NcclAlgorithm.NVLS: goal(round(0.9 * 835 / 900, 3))},
        nvlink_p2p=goal(round(613 / 900, 3)),  # Crusoe GB200 floor 613 GB/s (docs/design/burnin.md#thresholds)
        # Hosts without Fabric Manager fail DCGM's `software` test; Crusoe skips it for gb200
        # (docs/design/burnin.md#jobs-on-kubernetes).
        dcgm_ignored_tests=frozenset({"software"}),
    ),
    GpuModel(
        key="l40s",
        name="L40S",
        product_patterns=(r"L40S",),
        bf16_dense_tflops=362.0,  # docs/design/burnin.md#physical-peaks
        hbm_tb_s=0.86,  # GDDR6 (docs/design/burnin.md#physical-peaks)
        nvlink_gb_s=None,  # docs/design/burnin.md#physical-peaks
        nvswitch=False,
        pcie_gb_s=None,  # no PCIe generation in docs/design/burnin.md#physical-peaks: copy checks SKIPPED
        matmul_bf16=_MATMUL,  # general 0.70 rule (docs/design/burnin.md#thresholds)
        nccl_allreduce={},  # no NVLink; no documented PCIe-only figure
    ),
)


@dataclass(frozen=True)
class PassiveLimits:
    """Limits for the quick tier (nvidia-smi state and kernel log)."""

    # SRAM corrected ECC above 10 000 fails (Azure `check_gpu_ecc 20000000 10000`,
    # docs/design/burnin.md#passive-limits).
    sram_corrected_max: int = 10_000
    # Xids count as current for the last 2 h (Azure, docs/design/burnin.md#passive-limits); older ones only warn,
    # because dmesg keeps lines since boot and a repaired GPU may not have been rebooted. Which
    # codes are hardware faults is the health controller's catalogue (konduktor.gpu.catalog).
    recent_kernel_log_s: float = 2 * 3600
    # Clock-event bits that are not throttling: GPU idle 0x1 and SW power cap 0x4 (Azure,
    # docs/design/burnin.md#passive-limits).
    benign_clock_events: int = 0x1 | 0x4


@dataclass(frozen=True)
class Thresholds:
    """All goals of one burn-in, overridable per cluster with `dataclasses.replace`."""

    version: str = "konduktor-burnin@1"
    models: tuple[GpuModel, ...] = GPU_MODELS
    # Each GPU within 10 % of its node's median (gpu-fryer's tolerance, docs/design/burnin.md#thresholds); GPUs
    # of one healthy node already differ by ~5 % (docs/design/burnin.md#achievable-fractions), so WARN starts
    # only under 0.90.
    node_median: Band = Band(pass_at=0.90, fail_below=0.85)
    # Two-node all_reduce over 8 x 400G: 350 GB/s, to be calibrated on the first healthy pairs
    # (docs/design/burnin.md#thresholds).
    nccl_pair_gb_s: float = 350.0
    nccl_pair: Band = Band(pass_at=1.0, fail_below=0.9)
    passive: PassiveLimits = field(default_factory=PassiveLimits)

    def model(self, key: str) -> GpuModel | None:
        return next((m for m in self.models if m.key == key), None)


DEFAULT_THRESHOLDS = Thresholds()

# GFD suffixes that do not change the silicon: time-slicing renames the product "<name>-SHARED".
_SHARING_SUFFIX = re.compile(r"-SHARED$")
# MIG changes the SM count and memory, so none of the per-GPU goals apply.
_MIG = re.compile(r"-MIG-|MIG-\d+G")


def normalise_product(product: str) -> str:
    """`NVIDIA H100 80GB HBM3` (nvidia-smi) and `NVIDIA-H100-80GB-HBM3` (GFD label) -> `H100-80GB-HBM3`."""
    name = re.sub(r"[\s_]+", "-", product.strip()).upper()
    name = re.sub(r"^(NVIDIA-)?(TESLA-)?", "", name)
    return _SHARING_SUFFIX.sub("", name)


def gpu_model_for(product: str | None, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> GpuModel | None:
    """The model of an `nvidia.com/gpu.product` label or nvidia-smi name; None when not in the table.

    Matching is exact per SKU, never per family: an H100 PCIe is not an H100 SXM, an A100 40GB is not
    the 80GB part, and an H200 NVL is not the SXM part (docs/design/burnin.md#thresholds: goals per exact SKU).
    """
    if not product:
        return None
    name = normalise_product(product)
    if _MIG.search(name):
        return None
    for model in thresholds.models:
        if any(re.fullmatch(pattern, name) for pattern in model.product_patterns):
            return model
    return None

"""What every check shares: the check names, grading against a band, and a per-GPU metric judged against
its peak and the node median."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

from konduktor.burnin.results import CheckResult, Evidence, Verdict, worst
from konduktor.burnin.thresholds import Band

# Check names: one JUnit testcase each.
INVENTORY = "inventory"
ECC = "ecc"
ROW_REMAP = "row_remap"
RETIRED_PAGES = "retired_pages"
CLOCK_EVENTS = "clock_events"
NVLINK_STATE = "nvlink_state"
KERNEL_LOG = "kernel_log"
DCGM_DIAG = "dcgm_diag"
MATMUL_TFLOPS = "matmul_tflops"
MATMUL_SDC = "matmul_sdc"
NCCL_ALLREDUCE = "nccl_allreduce"
GPU_BURN = "gpu_burn"
NCCL_PAIR = "nccl_pair"

# NVML clock-event bits (docs/design/burnin.md#nvidia-smi).
CLOCK_EVENT_NAMES = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def grade(value: float, reference: float, band: Band) -> Verdict:
    fraction = value / reference
    if fraction >= band.pass_at:
        return Verdict.PASS
    return Verdict.WARN if fraction >= band.fail_below else Verdict.FAIL


def fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def check_result(
    check: str,
    step: str,
    verdict: Verdict,
    summary: str,
    reasons: Iterable[str] = (),
    evidence: Iterable[Evidence] = (),
) -> CheckResult:
    return CheckResult(check, verdict, step, summary, tuple(reasons), tuple(evidence))


def decode_clock_events(bits: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_NAMES.items() if bits & bit] or ["none"]


def judge_per_gpu_metric(
    check: str,
    step: str,
    metric: str,
    unit: str,
    values: Mapping[int, float],
    peak: float,
    band: Band,
    median_band: Band,
) -> CheckResult:
    """Used for matmul TFLOPS and for any per-GPU bandwidth (HBM, PCIe, NVLink pairs)."""
    if not values:
        return check_result(check, step, Verdict.ERROR, "no values", ["no GPU reported a value"])
    median = statistics.median(values.values())
    verdicts: list[Verdict] = []
    reasons: list[str] = []
    evidence: list[Evidence] = []
    for gpu, value in sorted(values.items()):
        absolute = grade(value, peak, band)
        relative = grade(value, median, median_band) if median > 0 else Verdict.PASS
        verdicts += [absolute, relative]
        evidence.append(Evidence(metric, value, band.pass_at * peak, unit, round(value / peak, 4), gpu))
        if absolute is not Verdict.PASS:
            reasons.append(
                f"GPU{gpu}: {fmt(value)} {unit} is {value / peak:.0%} of the {fmt(peak)} {unit} peak "
                f"(goal {band.pass_at:.0%}, FAIL under {band.fail_below:.0%})"
            )
        if relative is not Verdict.PASS:
            reasons.append(
                f"GPU{gpu}: {fmt(value)} {unit} is {value / median:.0%} of the node median {fmt(median)} "
                f"(goal {median_band.pass_at:.0%}, FAIL under {median_band.fail_below:.0%})"
            )
    lowest = min(values.values())
    summary = f"min {fmt(lowest)} / med {fmt(median)} {unit} ({lowest / peak:.0%})"
    return check_result(check, step, worst(verdicts), summary, reasons, evidence)

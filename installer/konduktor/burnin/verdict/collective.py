"""Collectives: `#wrong` values and bus bandwidth, for one node's NCCL and for node pairs."""

from __future__ import annotations

from konduktor.burnin.parsers.collective import CollectiveResult
from konduktor.burnin.results import CheckResult, Evidence, Verdict
from konduktor.burnin.thresholds import Band, GpuModel
from konduktor.burnin.tiers import BurnInOptions, Step
from konduktor.burnin.verdict.common import NCCL_ALLREDUCE, check_result, fmt, grade


def judge_collective(
    check: str,
    step: str,
    result: CollectiveResult,
    exit_code: int | None,
    reference_gb_s: float | None,
    band: Band | None,
    expected_ranks: int | None = None,
    skip_reason: str = "",
) -> CheckResult:
    """`#wrong` and out-of-bounds values fail on any model; busbw at the largest size is graded
    against `band` x `reference_gb_s` (the NVLink peak for one node, the pair goal for two)."""
    reasons: list[str] = list(result.errors[:3])
    evidence: list[Evidence] = []
    wrong = result.wrong
    if (wrong or 0) > 0 or (result.out_of_bounds or 0) > 0:
        reasons.insert(0, f"wrong data: {wrong or 0} wrong elements, {result.out_of_bounds or 0} out of bounds")
        evidence.append(Evidence("wrong_elements", wrong, 0.0, "elements"))
        return check_result(check, step, Verdict.FAIL, "wrong data", reasons, evidence)
    largest = result.largest
    if largest is None:
        return check_result(check, step, Verdict.ERROR, "no result", reasons or ["no measurement rows"])
    busbw = largest.busbw_gb_s
    size_gib = largest.size_bytes / (1 << 30)
    if wrong is None:
        reasons.append("data validation was off (-c 0); correctness not checked")
    if expected_ranks is not None and result.ranks is not None and result.ranks != expected_ranks:
        return check_result(
            check,
            step,
            Verdict.ERROR,
            f"{result.ranks} ranks",
            [f"ran on {result.ranks} ranks, expected {expected_ranks}", *reasons],
        )
    if reference_gb_s is None or band is None:
        evidence.append(Evidence("busbw", busbw, None, "GB/s"))
        verdict = Verdict.SKIPPED
        reasons.insert(0, skip_reason or "no bandwidth goal for this GPU model")
        summary = f"{fmt(busbw)} GB/s (not judged)"
    else:
        verdict = grade(busbw, reference_gb_s, band)
        threshold = band.pass_at * reference_gb_s
        evidence.append(Evidence("busbw", busbw, threshold, "GB/s", round(busbw / reference_gb_s, 4)))
        if verdict is not Verdict.PASS:
            reasons.insert(
                0,
                f"busbw {fmt(busbw)} GB/s at {size_gib:g} GiB is under the goal {fmt(threshold)} GB/s "
                f"(FAIL under {fmt(band.fail_below * reference_gb_s)})",
            )
        summary = f"{fmt(busbw)} GB/s @ {size_gib:g} GiB"
    if exit_code not in (None, 0) and verdict is not Verdict.FAIL:
        return check_result(
            check,
            step,
            Verdict.ERROR,
            f"exit {exit_code}",
            [f"the benchmark exited {exit_code} though its output shows no failure", *reasons],
            evidence,
        )
    return check_result(check, step, verdict, summary, reasons, evidence)


def judge_nccl_one_node(
    result: CollectiveResult, exit_code: int | None, model: GpuModel | None, options: BurnInOptions, expected_gpus: int
) -> CheckResult:
    band = model.nccl_allreduce.get(options.nccl_algorithm) if model else None
    reference = model.nvlink_gb_s if model else None
    skip = (
        "GPU model not in the thresholds table; bandwidth not judged"
        if model is None
        else f"no documented {options.nccl_algorithm.value} all_reduce goal for {model.name}"
    )
    return judge_collective(
        NCCL_ALLREDUCE,
        Step.NCCL.value,
        result,
        exit_code,
        reference,
        band,
        expected_ranks=expected_gpus,
        skip_reason=skip,
    )

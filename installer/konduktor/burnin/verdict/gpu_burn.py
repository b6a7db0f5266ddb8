"""gpu-burn (optional second opinion)."""

from __future__ import annotations

import statistics

from konduktor.burnin.parsers.gpu_burn import GpuBurnResult
from konduktor.burnin.results import CheckResult, Evidence, Verdict
from konduktor.burnin.thresholds import Band
from konduktor.burnin.tiers import Step
from konduktor.burnin.verdict.common import GPU_BURN, check_result, grade


def judge_gpu_burn(result: GpuBurnResult, expected_gpus: int, median_band: Band) -> CheckResult:
    step = Step.GPU_BURN.value
    # gpu-burn exits 0 whatever happened (docs/design/burnin.md#gpu-burn), so the exit code is not consulted.
    fails = [f"GPU{gpu}: FAULTY (compare errors)" for gpu, state in sorted(result.status.items()) if state == "FAULTY"]
    fails += [f"GPU{gpu}: DIED during the run" for gpu in sorted(result.died)]
    if result.all_died:
        fails.append("every GPU process died")
    evidence = [Evidence("gflops", rate, None, "Gflop/s", gpu=gpu) for gpu, rate in sorted(result.gflops.items())]
    evidence += [Evidence("compare_errors", n, 0.0, "errors", gpu=gpu) for gpu, n in sorted(result.errors.items())]
    if fails:
        return check_result(GPU_BURN, step, Verdict.FAIL, "faulty", fails, evidence)
    if not result.summary_seen or len(result.status) < expected_gpus:
        return check_result(
            GPU_BURN,
            step,
            Verdict.ERROR,
            "incomplete",
            [f"summary lists {len(result.status)} of {expected_gpus} GPUs"],
            evidence,
        )
    rates = result.gflops
    median = statistics.median(rates.values()) if rates else 0.0
    slow = [
        f"GPU{gpu}: {rate:.0f} Gflop/s is {rate / median:.0%} of the node median"
        for gpu, rate in sorted(rates.items())
        if median and grade(rate, median, median_band) is not Verdict.PASS
    ]
    if slow:
        # The figure is the last progress sample, too noisy to quarantine on; matmul judges speed.
        return check_result(GPU_BURN, step, Verdict.WARN, "slow GPU", slow, evidence)
    return check_result(GPU_BURN, step, Verdict.PASS, f"{len(result.status)} OK", (), evidence)

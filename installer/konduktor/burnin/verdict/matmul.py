"""Our matmul burn-in: throughput and silent data corruption."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace

from konduktor.burnin.parsers.matmul import MatmulRun
from konduktor.burnin.results import CheckResult, Evidence, Verdict, worst
from konduktor.burnin.thresholds import DEFAULT_THRESHOLDS, GpuModel, Thresholds
from konduktor.burnin.tiers import Step
from konduktor.burnin.verdict.common import (
    MATMUL_SDC,
    MATMUL_TFLOPS,
    check_result,
    decode_clock_events,
    judge_per_gpu_metric,
)


def fleet_reference_digests(runs: Iterable[MatmulRun]) -> dict[str, str]:
    """The digest most GPUs of one comparison key agree on, across every node of the run.

    Only a strict majority counts: with no majority there is no reference, and each node is
    judged against its own GPUs.
    """
    votes: dict[str, Counter[str]] = {}
    for run in runs:
        for gpu in run.gpus:
            if gpu.status == "ok" and gpu.digest and gpu.digest_key:
                votes.setdefault(gpu.digest_key, Counter())[gpu.digest] += 1
    references = {}
    for key, counter in votes.items():
        digest, count = counter.most_common(1)[0]
        if count * 2 > sum(counter.values()):
            references[key] = digest
    return references


def judge_matmul(
    run: MatmulRun,
    model: GpuModel | None,
    expected_gpus: int,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    reference_digests: Mapping[str, str] | None = None,
) -> tuple[CheckResult, CheckResult]:
    return (
        _judge_matmul_tflops(run, model, expected_gpus, thresholds),
        _judge_matmul_sdc(run, reference_digests or {}),
    )


def _judge_matmul_tflops(
    run: MatmulRun, model: GpuModel | None, expected_gpus: int, thresholds: Thresholds
) -> CheckResult:
    step = Step.MATMUL.value
    problems: list[tuple[Verdict, str]] = []
    for gpu in run.gpus:
        if gpu.status != "ok":
            # A GPU that crashes under load failed, as gpu-burn's DIED (docs/design/burnin.md#matmul-pitfalls); one that
            # never started (import, allocation) says nothing about the hardware.
            verdict = Verdict.FAIL if gpu.phase == "compute" else Verdict.ERROR
            problems.append((verdict, f"GPU{gpu.index} {gpu.phase or 'run'} error: {gpu.error}"))
    if len(run.gpus) < expected_gpus:
        problems.append((Verdict.ERROR, f"{len(run.gpus)} of {expected_gpus} GPUs reported a result"))
    if not run.summary_seen:
        problems.append((Verdict.ERROR, "no summary line: the output is truncated"))
    values = {g.index: g.tflops_min for g in run.gpus if g.status == "ok" and g.tflops_min is not None}
    dtypes = {g.dtype for g in run.gpus if g.status == "ok"}
    measured_values = [Evidence("tflops_min", v, None, "TFLOPS", gpu=i) for i, v in sorted(values.items())]
    if model is None:
        measured = check_result(
            MATMUL_TFLOPS,
            step,
            Verdict.SKIPPED,
            "not judged",
            ["GPU model not in the thresholds table; TFLOPS not judged"],
            measured_values,
        )
    elif dtypes - {"bfloat16"}:
        measured = check_result(
            MATMUL_TFLOPS,
            step,
            Verdict.SKIPPED,
            "not judged",
            [f"goals are for bfloat16, the run used {', '.join(sorted(dtypes))}"],
            measured_values,
        )
    elif not values:
        measured = check_result(MATMUL_TFLOPS, step, Verdict.ERROR, "no result", ["no GPU finished a timed window"])
    else:
        measured = judge_per_gpu_metric(
            MATMUL_TFLOPS,
            step,
            "tflops_min",
            "TFLOPS",
            values,
            model.bf16_dense_tflops,
            model.matmul_bf16,
            thresholds.node_median,
        )
    throttled = [
        f"GPU{g.index}: {', '.join(decode_clock_events(bits))} during the run"
        for g in run.gpus
        if g.clock_event_reasons_seen is not None
        and (bits := g.clock_event_reasons_seen & ~thresholds.passive.benign_clock_events)
    ]
    if throttled:
        problems.append((Verdict.WARN, "; ".join(throttled)))
    if not problems:
        return measured
    return replace(
        measured,
        verdict=worst([measured.verdict, *(v for v, _ in problems)]),
        reasons=(*measured.reasons, *(r for _, r in problems)),
    )


def _judge_matmul_sdc(run: MatmulRun, references: Mapping[str, str]) -> CheckResult:
    step = Step.MATMUL.value
    finished = [g for g in run.gpus if g.status == "ok" and g.digest]
    if not finished:
        return check_result(MATMUL_SDC, step, Verdict.ERROR, "no digests", ["no GPU produced a digest"])
    reasons: list[str] = []
    evidence: list[Evidence] = []
    notes: list[str] = []
    groups: dict[str | None, list[int]] = {}
    for position, gpu in enumerate(finished):
        groups.setdefault(gpu.digest_key, []).append(position)
        if gpu.nonfinite:
            reasons.append(f"GPU{gpu.index}: {gpu.nonfinite} NaN/Inf values in the product")
        if gpu.digest_mismatch_windows:
            reasons.append(f"GPU{gpu.index}: {gpu.digest_mismatch_windows} window(s) computed a different product")
    for key, positions in groups.items():
        members = [finished[p] for p in positions]
        counts = Counter(g.digest for g in members)
        reference = references.get(key) if key else None
        source = "the fleet"
        if reference is None:
            digest, count = counts.most_common(1)[0]
            if count * 2 > len(members):
                reference, source = digest, "its node peers"
        if reference is None:
            if len(members) == 1:
                notes.append(f"GPU{members[0].index}: no peer of the same model to compare with")
                continue
            reasons.append(f"GPUs {', '.join(str(g.index) for g in members)} disagree with no majority digest")
            continue
        for gpu in members:
            evidence.append(Evidence("digest", gpu.digest, gpu=gpu.index))
            if gpu.digest != reference:
                reasons.append(f"GPU{gpu.index}: product differs from {source} (silent data corruption)")
    if reasons:
        return check_result(MATMUL_SDC, step, Verdict.FAIL, "mismatch", reasons + notes, evidence)
    return check_result(MATMUL_SDC, step, Verdict.PASS, f"{len(finished)} identical", notes, evidence)

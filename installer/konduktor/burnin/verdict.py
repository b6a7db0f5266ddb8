"""Burn-in verdicts: parsed facts and thresholds in, PASS/WARN/FAIL/ERROR/SKIPPED out.

Pure functions. Each check states its reasons and evidence (measured value, goal, fraction of
peak); a node's verdict is the worst of its checks. Missing or truncated output is ERROR, never
PASS; an unknown GPU model makes performance checks SKIPPED, while correctness checks (ECC,
digests, NCCL `#wrong`) need no model and are still judged.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from konduktor.burnin.isolation import IsolationPlan, PairOutcome
from konduktor.burnin.parsers.allreduce import parse_allreduce_bench
from konduktor.burnin.parsers.collective import CollectiveResult
from konduktor.burnin.parsers.common import OutputError
from konduktor.burnin.parsers.dcgm import DcgmDiag, DcgmWarning, parse_dcgm_diag
from konduktor.burnin.parsers.gpu_burn import GpuBurnResult, parse_gpu_burn
from konduktor.burnin.parsers.matmul import MatmulRun, parse_matmul
from konduktor.burnin.parsers.nccl_tests import parse_nccl_tests
from konduktor.burnin.parsers.passive import PassiveSnapshot, parse_passive_snapshot
from konduktor.burnin.parsers.step import StepLog, split_step_log
from konduktor.burnin.results import CheckResult, Evidence, NodeVerdict, PairVerdict, Verdict, worst
from konduktor.burnin.thresholds import (
    DEFAULT_THRESHOLDS,
    Band,
    GpuModel,
    PassiveLimits,
    Thresholds,
    gpu_model_for,
)
from konduktor.burnin.tiers import PAIR_STEP, BurnInOptions, Step
from konduktor.gpu.catalog import CATALOG, Catalog

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

# dcgmErrorSeverity_t values that mean "usable, watch it" or "a setting": a failed test whose every
# error has one of these is a WARN (DCGM dcgm_errors.h: 1 monitor, 5 config).
_DCGM_SOFT_SEVERITIES = frozenset({0, 1, 5})
# dcgmi exit codes: DCGM_ST_NVVS_ERROR (-30) and DCGM_ST_NVVS_ISOLATE_ERROR (-51) (docs/design/burnin.md#dcgmi-diag).
_DCGM_EXIT_MEANING = {226: "a test failed", 205: "a failure that needs the GPU isolated"}


def grade(value: float, reference: float, band: Band) -> Verdict:
    fraction = value / reference
    if fraction >= band.pass_at:
        return Verdict.PASS
    return Verdict.WARN if fraction >= band.fail_below else Verdict.FAIL


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _result(
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


# --------------------------------------------------------------------------------------------
# A per-GPU metric against a fraction of the physical peak and against the node median.


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
        return _result(check, step, Verdict.ERROR, "no values", ["no GPU reported a value"])
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
                f"GPU{gpu}: {_fmt(value)} {unit} is {value / peak:.0%} of the {_fmt(peak)} {unit} peak "
                f"(goal {band.pass_at:.0%}, FAIL under {band.fail_below:.0%})"
            )
        if relative is not Verdict.PASS:
            reasons.append(
                f"GPU{gpu}: {_fmt(value)} {unit} is {value / median:.0%} of the node median {_fmt(median)} "
                f"(goal {median_band.pass_at:.0%}, FAIL under {median_band.fail_below:.0%})"
            )
    lowest = min(values.values())
    summary = f"min {_fmt(lowest)} / med {_fmt(median)} {unit} ({lowest / peak:.0%})"
    return _result(check, step, worst(verdicts), summary, reasons, evidence)


# --------------------------------------------------------------------------------------------
# Quick tier: nvidia-smi state and the kernel log.


def judge_passive(
    snapshot: PassiveSnapshot,
    model: GpuModel | None,
    expected_gpus: int,
    limits: PassiveLimits,
    label_model: GpuModel | None = None,
    catalog: Catalog = CATALOG,
) -> tuple[CheckResult, ...]:
    step = Step.PASSIVE.value
    return (
        _judge_inventory(snapshot, model, expected_gpus, label_model, step),
        _judge_ecc(snapshot, limits, step),
        _judge_row_remap(snapshot, step),
        _judge_retired_pages(snapshot, step),
        _judge_clock_events(snapshot, limits, step),
        _judge_nvlink_state(snapshot, model, step),
        _judge_kernel_log(snapshot, limits, catalog, step),
    )


def _judge_inventory(
    snapshot: PassiveSnapshot, model: GpuModel | None, expected: int, label_model: GpuModel | None, step: str
) -> CheckResult:
    found = len(snapshot.gpus)
    names = sorted({g.name or "?" for g in snapshot.gpus})
    evidence = [Evidence("gpu_count", found, float(expected)), Evidence("gpu_names", ", ".join(names))]
    if found != expected:
        return _result(
            INVENTORY,
            step,
            Verdict.FAIL,
            f"{found}/{expected} GPUs",
            [f"nvidia-smi lists {found} GPUs, the node advertises {expected}"],
            evidence,
        )
    if len(names) > 1:
        return _result(
            INVENTORY,
            step,
            Verdict.WARN,
            "mixed models",
            [f"GPUs of different models in one node: {', '.join(names)}"],
            evidence,
        )
    reported = gpu_model_for(names[0]) if names else None
    if label_model is not None and reported is not None and reported.key != label_model.key:
        return _result(
            INVENTORY,
            step,
            Verdict.WARN,
            "label mismatch",
            [f"node label says {label_model.name}, nvidia-smi reports {names[0]}"],
            evidence,
        )
    if model is None:
        return _result(
            INVENTORY,
            step,
            Verdict.PASS,
            f"{found} GPUs (model not in thresholds)",
            [f"GPU model {names[0] if names else '?'} has no thresholds; performance checks are skipped"],
            evidence,
        )
    return _result(INVENTORY, step, Verdict.PASS, f"{found} x {model.name}", (), evidence)


def _judge_ecc(snapshot: PassiveSnapshot, limits: PassiveLimits, step: str) -> CheckResult:
    reasons: list[str] = []
    evidence: list[Evidence] = []
    reported = False
    for gpu in snapshot.gpus:
        if gpu.ecc_enabled is not None:
            reported = True
            if not gpu.ecc_enabled:
                # Without ECC, memory errors become silent data corruption (docs/design/burnin.md#passive-limits).
                reasons.append(f"GPU{gpu.index}: ECC is disabled")
        counters = (
            ("ecc_uncorrected_volatile", gpu.ecc_uncorrected_volatile, 0),
            ("sram_uncorrected_volatile", gpu.sram_uncorrected_volatile, 0),
            ("sram_corrected_volatile", gpu.sram_corrected_volatile, limits.sram_corrected_max),
        )
        for metric, count, allowed in counters:
            if count is None:
                continue
            reported = True
            if count > allowed:
                reasons.append(f"GPU{gpu.index}: {metric} = {count} (allowed {allowed})")
                evidence.append(Evidence(metric, count, float(allowed), "errors", gpu=gpu.index))
    if not reported:
        return _result(ECC, step, Verdict.SKIPPED, "not reported", ["nvidia-smi reported no ECC state"])
    if reasons:
        return _result(ECC, step, Verdict.FAIL, f"{len(reasons)} problem(s)", reasons, evidence)
    return _result(ECC, step, Verdict.PASS, "on, no uncorrected errors")


def _judge_row_remap(snapshot: PassiveSnapshot, step: str) -> CheckResult:
    if not snapshot.remapped_rows:
        return _result(
            ROW_REMAP,
            step,
            Verdict.SKIPPED,
            "not reported",
            ["no row-remapping data (GPUs before Ampere retire pages instead)"],
        )
    reasons = []
    evidence = []
    for row in snapshot.remapped_rows:
        # A pending remap needs a GPU reset before the row is replaced; a failed remap means the
        # spare rows are exhausted (docs/design/burnin.md#passive-limits).
        if row.pending:
            reasons.append(f"{row.bus_id}: row remap pending")
        if row.failure:
            reasons.append(f"{row.bus_id}: row remap failed")
        evidence.append(Evidence("remapped_rows_uncorrectable", row.uncorrectable, None, "rows"))
    if reasons:
        return _result(ROW_REMAP, step, Verdict.FAIL, "remap pending/failed", reasons, evidence)
    return _result(ROW_REMAP, step, Verdict.PASS, "none pending", (), evidence)


def _judge_retired_pages(snapshot: PassiveSnapshot, step: str) -> CheckResult:
    states = [(g.index, g.retired_pages_pending) for g in snapshot.gpus if g.retired_pages_pending is not None]
    if not states:
        return _result(
            RETIRED_PAGES,
            step,
            Verdict.SKIPPED,
            "not reported",
            ["no page-retirement data (Ampere and later remap rows instead)"],
        )
    pending = [index for index, is_pending in states if is_pending]
    if pending:
        return _result(
            RETIRED_PAGES,
            step,
            Verdict.FAIL,
            "retirement pending",
            [f"GPU{i}: a page retirement waits for a reset" for i in pending],
        )
    return _result(RETIRED_PAGES, step, Verdict.PASS, "none pending")


def _judge_clock_events(snapshot: PassiveSnapshot, limits: PassiveLimits, step: str) -> CheckResult:
    reasons = []
    evidence = []
    for gpu in snapshot.gpus:
        if gpu.clock_event_reasons is None:
            continue
        evidence.append(Evidence("clock_event_reasons", f"0x{gpu.clock_event_reasons:x}", gpu=gpu.index))
        throttling = gpu.clock_event_reasons & ~limits.benign_clock_events
        if throttling:
            reasons.append(f"GPU{gpu.index}: clocks held back by {', '.join(decode_clock_events(throttling))}")
    if not evidence:
        return _result(CLOCK_EVENTS, step, Verdict.SKIPPED, "not reported")
    if reasons:
        # Throttling is a cooling or power problem to look at, not proof of a bad GPU (Azure warns).
        return _result(CLOCK_EVENTS, step, Verdict.WARN, "throttling", reasons, evidence)
    return _result(CLOCK_EVENTS, step, Verdict.PASS, "no throttling", (), evidence)


def _judge_nvlink_state(snapshot: PassiveSnapshot, model: GpuModel | None, step: str) -> CheckResult:
    if snapshot.nvlink is None:
        return _result(NVLINK_STATE, step, Verdict.SKIPPED, "not reported")
    if not any(s.active_links or s.inactive_links for s in snapshot.nvlink):
        return _result(NVLINK_STATE, step, Verdict.SKIPPED, "no NVLink")
    reasons = []
    for state in snapshot.nvlink:
        if not state.inactive_links:
            continue
        # Some links up and some down is a fault on any model; on NVSwitch systems every link must be up.
        if state.active_links or (model is not None and model.nvswitch):
            links = ", ".join(str(link) for link in state.inactive_links)
            reasons.append(f"GPU{state.gpu}: NVLink {links} inactive")
    evidence = [Evidence("inactive_links", len(s.inactive_links), 0.0, "links", gpu=s.gpu) for s in snapshot.nvlink]
    if reasons:
        return _result(NVLINK_STATE, step, Verdict.FAIL, "links down", reasons, evidence)
    return _result(NVLINK_STATE, step, Verdict.PASS, "all links up", (), evidence)


def _judge_kernel_log(snapshot: PassiveSnapshot, limits: PassiveLimits, catalog: Catalog, step: str) -> CheckResult:
    if snapshot.kernel_events is None:
        return _result(
            KERNEL_LOG,
            step,
            Verdict.ERROR,
            "unreadable",
            ["the kernel log could not be read, so Xids are unknown", *snapshot.problems],
        )
    fails: list[str] = []
    warns: list[str] = []
    counts: Counter[str] = Counter()
    for event in snapshot.kernel_events:
        label = "fell off the bus" if event.kind == "fell-off-bus" else f"{event.kind.upper()} {event.code}"
        counts[label] += 1
        age = (
            snapshot.uptime_s - event.seconds_since_boot
            if snapshot.uptime_s is not None and event.seconds_since_boot is not None
            else None
        )
        entry = None if event.kind == "fell-off-bus" else catalog.lookup(event.kind, event.code)
        hardware = event.kind == "fell-off-bus" or (entry is not None and entry.quarantine)
        recent = age is not None and age <= limits.recent_kernel_log_s
        where = f" at {event.pci}" if event.pci else ""
        if hardware and recent:
            fails.append(f"{label}{where}, {age:.0f} s ago")
        else:
            when = f"{age:.0f} s ago" if age is not None else "time unknown"
            warns.append(f"{label}{where} ({when})")
    evidence = [Evidence("kernel_log_events", count, 0.0, label) for label, count in sorted(counts.items())]
    if fails:
        return _result(KERNEL_LOG, step, Verdict.FAIL, f"{len(fails)} recent hardware Xid(s)", fails + warns, evidence)
    if warns:
        # Old hardware faults and codes the catalogue does not quarantine on are for a human to read.
        return _result(KERNEL_LOG, step, Verdict.WARN, f"{len(warns)} Xid line(s)", warns, evidence)
    return _result(KERNEL_LOG, step, Verdict.PASS, "no Xids")


# --------------------------------------------------------------------------------------------
# DCGM diagnostics.


def judge_dcgm(diag: DcgmDiag, exit_code: int | None, ignored_tests: frozenset[str] = frozenset()) -> CheckResult:
    step = Step.DCGM.value
    if diag.runtime_error:
        return _result(DCGM_DIAG, step, Verdict.ERROR, "did not run", [f"DCGM: {diag.runtime_error}"])
    if not diag.tests:
        return _result(DCGM_DIAG, step, Verdict.ERROR, "no tests", ["dcgmi reported no test results"])
    verdicts: list[Verdict] = []
    reasons: list[str] = []
    evidence: list[Evidence] = []
    failed = unanswered_tests = 0
    for test in diag.tests:
        statuses = {test.status, *(r.status for r in test.results)}
        if not statuses & {"Fail", "Warn"}:
            unanswered = [(r.entity, r.status, r.warnings) for r in test.results if r.status not in _DCGM_OUTCOMES]
            if test.status not in _DCGM_OUTCOMES and not unanswered:
                unanswered = [("", test.status, test.warnings)]
            if unanswered and test.name in ignored_tests:
                reasons.append(f"{test.name} gave no result, ignored for this GPU model")
            elif unanswered:
                # Error rows, "Not Run", statuses this parser does not know: the test gave no answer.
                where = "; ".join(
                    f"{entity or 'all'} {status or 'no status'}" + (f" ({said[0].message})" if said else "")
                    for entity, status, said in unanswered
                )
                unanswered_tests += 1
                verdicts.append(Verdict.ERROR)
                reasons.append(f"{test.name} ({test.category}) has no result: {where}")
                evidence += [Evidence(f"dcgm.{test.name}", s, gpu=_entity_index(e)) for e, s, _ in unanswered]
                continue
            verdicts.append(Verdict.PASS if "Pass" in statuses else Verdict.SKIPPED)
            continue
        failing = [r for r in test.results if r.status in {"Fail", "Warn"}]
        # The test summary repeats every entity's errors; keep each message once.
        warnings = list({w.message: w for w in [*(w for r in failing for w in r.warnings), *test.warnings]}.values())
        where = ", ".join(r.entity for r in failing) or "all"
        messages = "; ".join(w.message for w in warnings[:3]) or "no message"
        if test.name in ignored_tests:
            reasons.append(f"{test.name} {test.status} on {where} ignored for this GPU model: {messages}")
            continue
        failed += 1
        verdict = _dcgm_test_verdict(test.status, warnings)
        verdicts.append(verdict)
        reasons.append(f"{test.name} ({test.category}) {test.status} on {where}: {messages}")
        evidence += [Evidence(f"dcgm.{test.name}", r.status, gpu=_entity_index(r.entity)) for r in failing] or [
            Evidence(f"dcgm.{test.name}", test.status)
        ]
    verdict = worst(verdicts)
    if exit_code not in (None, 0) and verdict in {Verdict.PASS, Verdict.SKIPPED}:
        meaning = _DCGM_EXIT_MEANING.get(exit_code, "an error")
        return _result(
            DCGM_DIAG,
            step,
            Verdict.ERROR,
            f"exit {exit_code}",
            [f"dcgmi exited {exit_code} ({meaning}) but its report shows no failing test", *reasons],
            evidence,
        )
    if exit_code in _DCGM_EXIT_MEANING and verdict is not Verdict.PASS:
        reasons.append(f"dcgmi exited {exit_code}: {_DCGM_EXIT_MEANING[exit_code]}")
    if failed:
        summary = f"{failed}/{len(diag.tests)} tests failed"
    elif unanswered_tests:
        summary = f"{unanswered_tests}/{len(diag.tests)} tests without a result"
    else:
        summary = f"{len(diag.tests)} tests passed"
    return _result(DCGM_DIAG, step, verdict, summary, reasons, evidence)


# The statuses that are an answer; Fail and Warn are judged above, Pass and Skip may pass or skip.
_DCGM_OUTCOMES = frozenset({"Pass", "Skip", "Fail", "Warn"})


def _dcgm_test_verdict(status: str, warnings: Sequence[DcgmWarning]) -> Verdict:
    if status == "Warn":
        return Verdict.WARN
    # dcgmi prints per-GPU Warn as Fail; the error severity tells a monitor/config finding from a
    # GPU that should be isolated or reset.
    severities = [w.severity for w in warnings]
    if severities and all(s is not None and s in _DCGM_SOFT_SEVERITIES for s in severities):
        return Verdict.WARN
    return Verdict.FAIL


def _entity_index(entity: str) -> int | None:
    digits = "".join(ch for ch in entity if ch.isdigit())
    return int(digits) if digits else None


# --------------------------------------------------------------------------------------------
# Our matmul burn-in: throughput and silent data corruption.


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
        measured = _result(
            MATMUL_TFLOPS,
            step,
            Verdict.SKIPPED,
            "not judged",
            ["GPU model not in the thresholds table; TFLOPS not judged"],
            measured_values,
        )
    elif dtypes - {"bfloat16"}:
        measured = _result(
            MATMUL_TFLOPS,
            step,
            Verdict.SKIPPED,
            "not judged",
            [f"goals are for bfloat16, the run used {', '.join(sorted(dtypes))}"],
            measured_values,
        )
    elif not values:
        measured = _result(MATMUL_TFLOPS, step, Verdict.ERROR, "no result", ["no GPU finished a timed window"])
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
        return _result(MATMUL_SDC, step, Verdict.ERROR, "no digests", ["no GPU produced a digest"])
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
        return _result(MATMUL_SDC, step, Verdict.FAIL, "mismatch", reasons + notes, evidence)
    return _result(MATMUL_SDC, step, Verdict.PASS, f"{len(finished)} identical", notes, evidence)


# --------------------------------------------------------------------------------------------
# Collectives: one-node NCCL and node pairs.


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
        return _result(check, step, Verdict.FAIL, "wrong data", reasons, evidence)
    largest = result.largest
    if largest is None:
        return _result(check, step, Verdict.ERROR, "no result", reasons or ["no measurement rows"])
    busbw = largest.busbw_gb_s
    size_gib = largest.size_bytes / (1 << 30)
    if wrong is None:
        reasons.append("data validation was off (-c 0); correctness not checked")
    if expected_ranks is not None and result.ranks is not None and result.ranks != expected_ranks:
        return _result(
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
        summary = f"{_fmt(busbw)} GB/s (not judged)"
    else:
        verdict = grade(busbw, reference_gb_s, band)
        threshold = band.pass_at * reference_gb_s
        evidence.append(Evidence("busbw", busbw, threshold, "GB/s", round(busbw / reference_gb_s, 4)))
        if verdict is not Verdict.PASS:
            reasons.insert(
                0,
                f"busbw {_fmt(busbw)} GB/s at {size_gib:g} GiB is under the goal {_fmt(threshold)} GB/s "
                f"(FAIL under {_fmt(band.fail_below * reference_gb_s)})",
            )
        summary = f"{_fmt(busbw)} GB/s @ {size_gib:g} GiB"
    if exit_code not in (None, 0) and verdict is not Verdict.FAIL:
        return _result(
            check,
            step,
            Verdict.ERROR,
            f"exit {exit_code}",
            [f"the benchmark exited {exit_code} though its output shows no failure", *reasons],
            evidence,
        )
    return _result(check, step, verdict, summary, reasons, evidence)


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


def judge_pair(
    nodes: tuple[str, str],
    log: str | None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    expected_ranks: int | None = None,
) -> PairVerdict:
    """The rank-0 log of a pair Job (allreduce.py under torchrun)."""

    def judge(envelope: StepLog) -> tuple[CheckResult, ...]:
        result = parse_allreduce_bench(envelope.output)
        return (
            judge_collective(
                NCCL_PAIR,
                PAIR_STEP,
                result,
                envelope.exit_code,
                thresholds.nccl_pair_gb_s,
                thresholds.nccl_pair,
                expected_ranks,
            ),
        )

    (check,) = _judge_step(NCCL_PAIR, PAIR_STEP, log, judge)
    return PairVerdict(nodes, check)


def pair_outcomes(pairs: Iterable[PairVerdict]) -> tuple[PairOutcome, ...]:
    """What the isolation planner learns: PASS/WARN pass, FAIL fails; ERROR and SKIPPED teach nothing."""
    return tuple(
        PairOutcome(p.nodes, p.result.verdict in {Verdict.PASS, Verdict.WARN})
        for p in pairs
        if p.result.verdict in {Verdict.PASS, Verdict.WARN, Verdict.FAIL}
    )


# --------------------------------------------------------------------------------------------
# gpu-burn (optional second opinion).


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
        return _result(GPU_BURN, step, Verdict.FAIL, "faulty", fails, evidence)
    if not result.summary_seen or len(result.status) < expected_gpus:
        return _result(
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
        return _result(GPU_BURN, step, Verdict.WARN, "slow GPU", slow, evidence)
    return _result(GPU_BURN, step, Verdict.PASS, f"{len(result.status)} OK", (), evidence)


# --------------------------------------------------------------------------------------------
# Steps, nodes and runs.


@dataclass(frozen=True)
class NodeEvidence:
    """What the Job runner collected from one node."""

    node: str
    gpu_product: str | None  # the node's nvidia.com/gpu.product label
    expected_gpus: int  # allocatable nvidia.com/gpu
    step_logs: Mapping[str, str | None]  # container (step) name -> log text; None: no log


def _judge_step(
    check: str, step: str, log: str | None, judge: Callable[[StepLog], tuple[CheckResult, ...]]
) -> tuple[CheckResult, ...]:
    """Parse and judge one step's log; a step that did not finish can still FAIL, never PASS."""
    if log is None:
        return (
            _result(
                check,
                step,
                Verdict.ERROR,
                "no log",
                ["the step left no log: not scheduled, image pull failure, or deadline"],
            ),
        )
    envelope = split_step_log(log)
    try:
        checks = judge(envelope)
    except (OutputError, KeyError, ValueError, TypeError) as exc:
        return (_result(check, step, Verdict.ERROR, "unreadable", [*_ending(envelope), f"output unreadable: {exc}"]),)
    if envelope.finished and not envelope.timed_out:
        return checks
    return tuple(
        c if c.verdict is Verdict.FAIL else replace(c, verdict=Verdict.ERROR, reasons=(*_ending(envelope), *c.reasons))
        for c in checks
    )


def _ending(envelope: StepLog) -> list[str]:
    if envelope.timed_out:
        return [f"the step hit its time limit (exit {envelope.exit_code})"]
    if not envelope.finished:
        return ["the step ended without its end line (killed, deadline, or log cut)"]
    return []


def resolve_model(evidence: NodeEvidence, thresholds: Thresholds) -> tuple[GpuModel | None, GpuModel | None]:
    """(model to judge with, model named by the label). The label decides; nvidia-smi names
    stand in when the node has no label (GPU feature discovery not installed)."""
    label_model = gpu_model_for(evidence.gpu_product, thresholds)
    if label_model is not None or evidence.gpu_product:
        return label_model, label_model
    log = evidence.step_logs.get(Step.PASSIVE.value)
    if log:
        try:
            snapshot = parse_passive_snapshot(split_step_log(log).output)
        except OutputError:
            return None, None
        names = {g.name for g in snapshot.gpus if g.name}
        if len(names) == 1:
            return gpu_model_for(names.pop(), thresholds), None
    return None, None


def judge_node(
    evidence: NodeEvidence,
    options: BurnInOptions,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    reference_digests: Mapping[str, str] | None = None,
) -> NodeVerdict:
    model, label_model = resolve_model(evidence, thresholds)
    expected = evidence.expected_gpus
    ignored = model.dcgm_ignored_tests if model else frozenset()
    # Per step: the check named when the step yields nothing, and how its output is judged.
    judges: dict[Step, tuple[str, Callable[[StepLog], tuple[CheckResult, ...]]]] = {
        Step.PASSIVE: (
            INVENTORY,
            lambda e: judge_passive(parse_passive_snapshot(e.output), model, expected, thresholds.passive, label_model),
        ),
        Step.DCGM: (DCGM_DIAG, lambda e: (judge_dcgm(parse_dcgm_diag(e.output), e.exit_code, ignored),)),
        Step.MATMUL: (
            MATMUL_TFLOPS,
            lambda e: judge_matmul(parse_matmul(e.output), model, expected, thresholds, reference_digests),
        ),
        Step.NCCL: (
            NCCL_ALLREDUCE,
            lambda e: (judge_nccl_one_node(parse_nccl_tests(e.output), e.exit_code, model, options, expected),),
        ),
        Step.GPU_BURN: (
            GPU_BURN,
            lambda e: (judge_gpu_burn(parse_gpu_burn(e.output), expected, thresholds.node_median),),
        ),
    }
    checks: list[CheckResult] = []
    for step in options.steps:
        check, judge = judges[step]
        checks += _judge_step(check, step.value, evidence.step_logs.get(step.value), judge)
    return aggregate_node(evidence.node, evidence.gpu_product, model, checks)


def aggregate_node(
    node: str, gpu_product: str | None, model: GpuModel | None, checks: Sequence[CheckResult]
) -> NodeVerdict:
    return NodeVerdict(node, gpu_product, model.key if model else None, worst(c.verdict for c in checks), tuple(checks))


def judge_run(
    evidence: Sequence[NodeEvidence],
    options: BurnInOptions,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[NodeVerdict, ...]:
    """Judge every node; matmul digests are compared across the whole run, not only within nodes."""
    runs = []
    for node in evidence:
        log = node.step_logs.get(Step.MATMUL.value)
        if log and Step.MATMUL in options.steps:
            try:
                runs.append(parse_matmul(split_step_log(log).output))
            except OutputError:
                continue
    references = fleet_reference_digests(runs)
    return tuple(judge_node(node, options, thresholds, references) for node in evidence)


def apply_isolation(
    nodes: Sequence[NodeVerdict], plan: IsolationPlan, pairs: Sequence[PairVerdict]
) -> tuple[NodeVerdict, ...]:
    """Add each node's `nccl_pair` finding from the fault-isolation plan and re-aggregate."""
    by_node: dict[str, list[PairVerdict]] = {}
    for pair in pairs:
        for name in pair.nodes:
            by_node.setdefault(name, []).append(pair)
    updated = []
    for node in nodes:
        tested = by_node.get(node.node, [])
        evidence = [
            Evidence(
                "pair_busbw", next((e.measured for e in p.result.evidence if e.metric == "busbw"), None), None, "GB/s"
            )
            for p in tested
        ]
        peers = [f"{'+'.join(p.nodes)}: {p.result.verdict.value} {p.result.summary}" for p in tested]
        if node.node in plan.implicated:
            check = _result(
                NCCL_PAIR,
                PAIR_STEP,
                Verdict.FAIL,
                "implicated",
                ["failed together with a node that passed with others", *peers],
                evidence,
            )
        elif node.node in plan.undetermined:
            check = _result(
                NCCL_PAIR,
                PAIR_STEP,
                Verdict.WARN,
                "undetermined",
                ["in failing pairs that could not be attributed to one node", *peers],
                evidence,
            )
        elif node.node in plan.cleared:
            check = _result(NCCL_PAIR, PAIR_STEP, Verdict.PASS, "cleared", peers, evidence)
        else:
            updated.append(node)
            continue
        checks = (*[c for c in node.checks if c.check != NCCL_PAIR], check)
        updated.append(replace(node, checks=checks, verdict=worst(c.verdict for c in checks)))
    return tuple(updated)

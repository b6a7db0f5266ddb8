"""Quick tier: nvidia-smi state and the kernel log."""

from __future__ import annotations

from collections import Counter

from konduktor.burnin.parsers.passive import PassiveSnapshot
from konduktor.burnin.results import CheckResult, Evidence, Verdict
from konduktor.burnin.thresholds import GpuModel, PassiveLimits, gpu_model_for
from konduktor.burnin.tiers import Step
from konduktor.burnin.verdict.common import (
    CLOCK_EVENTS,
    ECC,
    INVENTORY,
    KERNEL_LOG,
    NVLINK_STATE,
    RETIRED_PAGES,
    ROW_REMAP,
    check_result,
    decode_clock_events,
)
from konduktor.gpu.catalog import CATALOG, Catalog


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
        return check_result(
            INVENTORY,
            step,
            Verdict.FAIL,
            _count_mismatch(found, expected),
            [f"nvidia-smi lists {found} GPUs, the node advertises {expected}"],
            evidence,
        )
    if len(names) > 1:
        return check_result(
            INVENTORY,
            step,
            Verdict.WARN,
            "mixed models",
            [f"GPUs of different models in one node: {', '.join(names)}"],
            evidence,
        )
    reported = gpu_model_for(names[0]) if names else None
    if label_model is not None and reported is not None and reported.key != label_model.key:
        return check_result(
            INVENTORY,
            step,
            Verdict.WARN,
            "label mismatch",
            [f"node label says {label_model.name}, nvidia-smi reports {names[0]}"],
            evidence,
        )
    if model is None:
        return check_result(
            INVENTORY,
            step,
            Verdict.PASS,
            f"{found} GPUs (model not in thresholds)",
            [f"GPU model {names[0] if names else '?'} has no thresholds; performance checks are skipped"],
            evidence,
        )
    return check_result(INVENTORY, step, Verdict.PASS, f"{found} x {model.name}", (), evidence)


def _count_mismatch(found: int, expected: int) -> str:
    """The count in words: a bare "10/9" (listed/expected) was read the other way round, as 9 of 10 present."""
    if found < expected:
        return f"{found} of {expected} GPUs present"
    # More listed than expected: the device plugin withdrew a GPU nvidia-smi still sees (a critical Xid), or the
    # node has more GPUs than its GPU type says.
    return f"{found} GPUs present, {expected} expected"


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
        return check_result(ECC, step, Verdict.SKIPPED, "not reported", ["nvidia-smi reported no ECC state"])
    if reasons:
        return check_result(ECC, step, Verdict.FAIL, f"{len(reasons)} problem(s)", reasons, evidence)
    return check_result(ECC, step, Verdict.PASS, "on, no uncorrected errors")


def _judge_row_remap(snapshot: PassiveSnapshot, step: str) -> CheckResult:
    if not snapshot.remapped_rows:
        return check_result(
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
        return check_result(ROW_REMAP, step, Verdict.FAIL, "remap pending/failed", reasons, evidence)
    return check_result(ROW_REMAP, step, Verdict.PASS, "none pending", (), evidence)


def _judge_retired_pages(snapshot: PassiveSnapshot, step: str) -> CheckResult:
    states = [(g.index, g.retired_pages_pending) for g in snapshot.gpus if g.retired_pages_pending is not None]
    if not states:
        return check_result(
            RETIRED_PAGES,
            step,
            Verdict.SKIPPED,
            "not reported",
            ["no page-retirement data (Ampere and later remap rows instead)"],
        )
    pending = [index for index, is_pending in states if is_pending]
    if pending:
        return check_result(
            RETIRED_PAGES,
            step,
            Verdict.FAIL,
            "retirement pending",
            [f"GPU{i}: a page retirement waits for a reset" for i in pending],
        )
    return check_result(RETIRED_PAGES, step, Verdict.PASS, "none pending")


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
        return check_result(CLOCK_EVENTS, step, Verdict.SKIPPED, "not reported")
    if reasons:
        # Throttling is a cooling or power problem to look at, not proof of a bad GPU (Azure warns).
        return check_result(CLOCK_EVENTS, step, Verdict.WARN, "throttling", reasons, evidence)
    return check_result(CLOCK_EVENTS, step, Verdict.PASS, "no throttling", (), evidence)


def _judge_nvlink_state(snapshot: PassiveSnapshot, model: GpuModel | None, step: str) -> CheckResult:
    if snapshot.nvlink is None:
        return check_result(NVLINK_STATE, step, Verdict.SKIPPED, "not reported")
    if not any(s.active_links or s.inactive_links for s in snapshot.nvlink):
        return check_result(NVLINK_STATE, step, Verdict.SKIPPED, "no NVLink")
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
        return check_result(NVLINK_STATE, step, Verdict.FAIL, "links down", reasons, evidence)
    return check_result(NVLINK_STATE, step, Verdict.PASS, "all links up", (), evidence)


def _judge_kernel_log(snapshot: PassiveSnapshot, limits: PassiveLimits, catalog: Catalog, step: str) -> CheckResult:
    if snapshot.kernel_events is None:
        return check_result(
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
        return check_result(
            KERNEL_LOG, step, Verdict.FAIL, f"{len(fails)} recent hardware Xid(s)", fails + warns, evidence
        )
    if warns:
        # Old hardware faults and codes the catalogue does not quarantine on are for a human to read.
        return check_result(KERNEL_LOG, step, Verdict.WARN, f"{len(warns)} Xid line(s)", warns, evidence)
    return check_result(KERNEL_LOG, step, Verdict.PASS, "no Xids")

"""Classification of kernel reports, DCGM samples, lost GPUs and burn-in verdicts; duplicate suppression."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from konduktor.burnin.results import CheckResult, NodeVerdict, Verdict
from konduktor.gpu.catalog import RecommendedAction, Severity
from konduktor.gpu.kernel_log import parse_line
from konduktor.health.classify import (
    DcgmSample,
    DuplicateFilter,
    Finding,
    ForeignCondition,
    LostGpuWatch,
    XidConfirmations,
    burnin_finding,
    classify_dcgm,
    classify_report,
    condition_finding,
    verdict_detail,
)
from konduktor.health.decide import BreakerState, NodeState, UpdateNode, decide
from konduktor.health.settings import HealthSettings, NodeConditionRule, PrometheusSettings

DEFAULTS = HealthSettings()


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def judge(line: str, settings: HealthSettings = DEFAULTS, node: str = "gpu-1") -> Finding:
    report = parse_line(line)
    assert report is not None, line
    return classify_report(report, node, settings)


def test_xid_79_quarantines_and_marks_the_node_unusable() -> None:
    line = "[5.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
    finding = judge(line)
    assert (finding.severity, finding.action) == (Severity.CRITICAL, RecommendedAction.REBOOT)
    assert finding.quarantine and finding.node_unusable
    assert (finding.node, finding.reason, finding.gpu, finding.evidence) == ("gpu-1", "Xid79", "0000:3b:00", line)


def test_xid_from_a_mig_instance_is_judged_as_the_physical_gpus() -> None:
    plain = judge("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.")
    line = "[5.0] NVRM: Xid (PCI:0000:3b:00 GPU-I:03 GPU-CI:00): 79, pid=1, name=x, GPU has fallen off the bus."
    finding = judge(line)
    assert (finding.gpu, finding.reason, finding.quarantine, finding.evidence) == ("0000:3b:00", "Xid79", True, line)
    assert (finding.severity, finding.action) == (plain.severity, plain.action)


@pytest.mark.parametrize("code", [13, 31, 43, 45, 68])
def test_application_xids_never_quarantine_even_with_quarantine_unknown(code: int) -> None:
    finding = judge(f"NVRM: Xid (PCI:0000:3b:00): {code}, app fault", HealthSettings(quarantine_unknown=True))
    assert not finding.quarantine


def test_unknown_xid_warns_without_quarantine_by_default() -> None:
    finding = judge("NVRM: Xid (PCI:0000:3b:00): 999, new in a future driver")
    assert (finding.name, finding.severity, finding.action) == ("UNKNOWN_XID", Severity.WARNING, RecommendedAction.NONE)
    assert not finding.quarantine


def test_unknown_codes_quarantine_when_configured() -> None:
    settings = HealthSettings(quarantine_unknown=True)
    for line in ("NVRM: Xid (PCI:0000:3b:00): 999, new", "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 1, x"):
        finding = judge(line, settings)
        assert finding.quarantine and finding.action == RecommendedAction.QUARANTINE
        assert not finding.node_unusable


def test_sxid_fatal_token_escalates_a_non_fatal_code() -> None:
    non_fatal = judge("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 46 egress")
    fatal = judge("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Fatal, Link 46 egress")
    assert not non_fatal.quarantine
    assert fatal.quarantine and fatal.action == RecommendedAction.CONTACT_SUPPORT
    assert (fatal.kind, fatal.reason) == ("sxid", "SXid12028")


def test_sxid_fabric_fatal() -> None:
    finding = judge("nvidia-nvswitch0: SXid (PCI:0000:59:00.0): 23001, Fatal, Link 12 Always Fatal")
    assert finding.quarantine and finding.node_unusable and finding.action == RecommendedAction.REBOOT


@pytest.mark.parametrize(
    ("text", "action", "quarantine", "unusable"),
    [
        ("0x0 (None) to 0x1 (GPU Reset Required)", RecommendedAction.RESET_GPU, True, False),
        ("0x0 (None) to 0x2 (Node Reboot Required)", RecommendedAction.REBOOT, True, True),
        ("0x0 (None) to 0x4 (Drain and Reset)", RecommendedAction.RESET_GPU, True, False),
        ("0x1 (GPU Reset Required) to 0x0 (None)", RecommendedAction.NONE, False, False),
        ("0x0 (None) to 0x9 (Something New)", RecommendedAction.NONE, False, False),
    ],
)
def test_xid_154_follows_the_drivers_recovery_action(
    text: str, action: RecommendedAction, quarantine: bool, unusable: bool
) -> None:
    finding = judge(f"NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action changed from {text}")
    assert (finding.action, finding.quarantine, finding.node_unusable) == (action, quarantine, unusable)


def test_unrecognised_xid_154_text_is_a_warning() -> None:
    finding = judge("NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action changed")
    assert finding.severity == Severity.WARNING and "unrecognised" in finding.meaning


def test_peermem_is_reported_not_quarantined() -> None:
    finding = judge("nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context")
    assert (finding.kind, finding.reason, finding.quarantine) == ("peermem", "PeermemError", False)


@pytest.mark.parametrize(
    ("metric", "value", "quarantine", "reason"),
    [
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 1, True, "RowRemapFailure"),
        ("DCGM_FI_DEV_ROW_REMAP_PENDING", 1, True, "RowRemapPending"),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2, True, "EccDoubleBitError"),
        ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 50, False, "NVLinkErrors"),
        ("DCGM_FI_DEV_THERMAL_VIOLATION", 3e9, False, "ThermalViolation"),
        ("DCGM_FI_DEV_POWER_VIOLATION", 1e6, False, "PowerViolation"),
        ("DCGM_FI_DEV_XID_ERRORS", 79, True, "Xid79"),
        ("DCGM_FI_DEV_XID_ERRORS", 13, False, "Xid13"),
    ],
)
def test_dcgm_samples(metric: str, value: float, quarantine: bool, reason: str) -> None:
    finding = classify_dcgm(DcgmSample("gpu-1", "3", metric, value), DEFAULTS)
    assert finding is not None
    assert (finding.quarantine, finding.reason, finding.gpu) == (quarantine, reason, "3")
    assert metric in finding.evidence and 'gpu="3"' in finding.evidence


@pytest.mark.parametrize(
    ("metric", "value"),
    [
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", math.nan),
        ("DCGM_FI_DEV_XID_ERRORS", 0),
        ("DCGM_FI_DEV_XID_ERRORS", math.inf),
        ("DCGM_FI_DEV_GPU_TEMP", 90),  # a reading, not a health series
    ],
)
def test_dcgm_samples_without_a_fault(metric: str, value: float) -> None:
    assert classify_dcgm(DcgmSample("gpu-1", "0", metric, value), DEFAULTS) is None


def burnin(outcome: Verdict, *checks: CheckResult) -> NodeVerdict:
    return NodeVerdict("gpu-1", "NVIDIA H100 80GB HBM3", "H100-SXM", outcome, checks)


def test_burnin_verdicts() -> None:
    slow = CheckResult("matmul_bf16", Verdict.FAIL, "matmul", summary="612 TFLOPS < 0.9 x median")
    failed = burnin_finding(burnin(Verdict.FAIL, CheckResult("ecc", Verdict.PASS, "passive"), slow))
    assert failed is not None and failed.quarantine and failed.reason == "BurnInFailed"
    assert failed.evidence == "matmul_bf16: 612 TFLOPS < 0.9 x median"  # only the check that decided
    warned = burnin_finding(
        burnin(Verdict.WARN, CheckResult("clocks", Verdict.WARN, "passive", reasons=("thermal throttling",)))
    )
    assert warned is not None and not warned.quarantine and warned.evidence == "clocks: thermal throttling"
    for outcome in (Verdict.PASS, Verdict.ERROR, Verdict.SKIPPED):
        assert burnin_finding(burnin(outcome)) is None


def test_verdict_detail_without_deciding_checks() -> None:
    assert verdict_detail(burnin(Verdict.ERROR)) == "0 checks, verdict ERROR"


def test_a_thousand_identical_lines_pass_the_filter_once() -> None:
    clock = FakeClock()
    duplicates = DuplicateFilter(180, clock)
    line = "[1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    admitted = 0
    for _ in range(1000):
        clock.now += 0.1
        admitted += duplicates.admit(judge(line))
    assert admitted == 1


def test_filter_keys_on_node_code_gpu_and_action() -> None:
    clock = FakeClock()
    duplicates = DuplicateFilter(180, clock)
    assert duplicates.admit(judge("NVRM: Xid (PCI:0000:3b:00): 79, x"))
    assert duplicates.admit(judge("NVRM: Xid (PCI:0000:3c:00): 79, x"))  # another GPU
    assert duplicates.admit(judge("NVRM: Xid (PCI:0000:3b:00): 79, x", node="gpu-2"))  # another node
    assert duplicates.admit(judge("NVRM: Xid (PCI:0000:3b:00): 48, x"))  # another code
    assert not duplicates.admit(judge("NVRM: Xid (PCI:0000:3b:00): 79, different text"))
    # An escalation of the same code on the same GPU is news.
    recovery = "NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action changed from {}"
    assert duplicates.admit(judge(recovery.format("0x0 (None) to 0x1 (GPU Reset Required)")))
    assert duplicates.admit(judge(recovery.format("0x1 (GPU Reset Required) to 0x2 (Node Reboot Required)")))


def test_filter_lets_a_fault_through_again_after_the_window_and_forgets_old_keys() -> None:
    clock = FakeClock()
    duplicates = DuplicateFilter(180, clock)
    for bus in range(50):
        duplicates.admit(judge(f"NVRM: Xid (PCI:0000:{bus:02x}:00): 79, x"))
    clock.now += 179
    assert not duplicates.admit(judge("NVRM: Xid (PCI:0000:00:00): 79, x"))
    clock.now += 1
    assert duplicates.admit(judge("NVRM: Xid (PCI:0000:00:00): 79, x"))
    assert len(duplicates) == 1  # memory stays bounded by the faults of one window


def test_lost_gpu_waits_out_the_grace_period() -> None:
    clock = FakeClock()
    watch = LostGpuWatch(60, clock)
    assert watch.observe("gpu-1", allocatable=7, expected=8) is None
    clock.now += 59
    assert watch.observe("gpu-1", allocatable=7, expected=8) is None
    clock.now += 1
    finding = watch.observe("gpu-1", allocatable=7, expected=8)
    assert finding is not None
    assert (finding.kind, finding.reason, finding.quarantine) == ("gpu_lost", "GPULost", True)
    assert "7 < expected 8" in finding.evidence


def test_lost_gpu_restored_within_grace_is_forgotten() -> None:
    clock = FakeClock()
    watch = LostGpuWatch(60, clock)
    assert watch.observe("gpu-1", allocatable=0, expected=8) is None  # device plugin restarting
    clock.now += 30
    assert watch.observe("gpu-1", allocatable=8, expected=8) is None
    clock.now += 40
    assert watch.observe("gpu-1", allocatable=0, expected=8) is None  # a new shortfall starts over
    watch.forget("gpu-1")
    clock.now += 100
    assert watch.observe("gpu-1", allocatable=0, expected=8) is None


# --- conditions other tools set -----------------------------------------------------------------------------------


def condition_findings(
    node: str, conditions: Sequence[ForeignCondition], requalified_at: float | None, rules: Sequence[NodeConditionRule]
) -> list[Finding]:
    found = (condition_finding(node, c, requalified_at, rules) for c in conditions)
    return [f for f in found if f is not None]


def foreign(kind: str, status: str, changed_at: float | None = 100.0) -> ForeignCondition:
    return ForeignCondition(kind, status, "NvmlError: GPU 3 memory errors", "2026-11-22T03:00:00Z", changed_at)


def test_gpu_conditions_of_other_tools_quarantine_per_rule_and_status() -> None:
    rules = HealthSettings().node_conditions
    conditions = (
        foreign("GpuMemWatch", "True"),
        foreign("GpuNvlinkWatch", "False"),  # healthy as that tool says it
        foreign("AcceleratedHardwareReady", "False"),
        foreign("SomethingElse", "True"),
    )
    findings = condition_findings("n1", conditions, None, rules)
    assert [(f.reason, f.kind, f.quarantine, f.action) for f in findings] == [
        ("GpuMemWatch", "condition", True, RecommendedAction.QUARANTINE),
        ("AcceleratedHardwareReady", "condition", True, RecommendedAction.QUARANTINE),
    ]
    assert findings[0].evidence == (
        "condition GpuMemWatch=True since 2026-11-22T03:00:00Z set by another tool: NvmlError: GPU 3 memory errors"
    )
    warn_only = [NodeConditionRule(type="GpuMemWatch", quarantine=False)]
    (finding,) = condition_findings("n1", conditions, None, warn_only)
    assert (finding.quarantine, finding.severity) == (False, Severity.WARNING)
    assert condition_findings("n1", conditions, None, []) == []


def test_a_condition_older_than_the_last_requalification_is_stale() -> None:
    rules = HealthSettings().node_conditions
    old, new = foreign("GpuMemWatch", "True", 100.0), foreign("GpuPcieWatch", "True", 300.0)
    assert [f.reason for f in condition_findings("n1", (old, new), 200.0, rules)] == ["GpuPcieWatch"]
    # A transition time nobody can read is not stale: the condition counts.
    assert [f.reason for f in condition_findings("n1", (foreign("GpuMemWatch", "True", None),), 200.0, rules)] == [
        "GpuMemWatch"
    ]


# --- a kernel-log Xid alone does not quarantine where DCGM reports Xids ----------------------------------------

WITH_DCGM = HealthSettings(prometheus=PrometheusSettings(url="http://prometheus:9090"))
XID_79 = "[5.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."


def dcgm_xid(node: str, code: int) -> Finding:
    finding = classify_dcgm(DcgmSample(node, "3", "DCGM_FI_DEV_XID_ERRORS", code), WITH_DCGM)
    assert finding is not None
    return finding


def test_a_forged_xid_line_is_reported_but_quarantines_nothing_and_does_not_count_for_the_breaker() -> None:
    confirmations = XidConfirmations(600, clock=FakeClock())
    forged = [confirmations.judge(judge(XID_79, WITH_DCGM, node=f"gpu-{i}"), WITH_DCGM) for i in range(10)]
    for finding in forged:
        assert (finding.quarantine, finding.node_unusable, finding.severity) == (False, False, Severity.WARNING)
        assert finding.action is RecommendedAction.NONE and "not confirmed by DCGM_FI_DEV_XID_ERRORS" in finding.meaning
        assert finding.reason == "Xid79" and "Xid (PCI:0000:3b:00): 79" in finding.evidence
    nodes = {f"gpu-{i}": NodeState(f"gpu-{i}") for i in range(10)}
    plan = decide(forged, nodes, BreakerState(), WITH_DCGM, 1000.0)
    assert not [a for a in plan.actions if isinstance(a, UpdateNode)]
    assert plan.breaker == BreakerState()  # ten forged lines neither trip nor fill the breaker


def test_dcgm_confirms_the_same_code_on_the_same_node_within_the_window() -> None:
    clock = FakeClock()
    confirmations = XidConfirmations(600, clock=clock)
    confirmations.record(dcgm_xid("gpu-1", 79))
    confirmed = confirmations.judge(judge(XID_79, WITH_DCGM, node="gpu-1"), WITH_DCGM)
    assert (
        confirmed.quarantine and confirmed.node_unusable and "confirmed by DCGM_FI_DEV_XID_ERRORS" in confirmed.evidence
    )
    assert not confirmations.judge(judge(XID_79, WITH_DCGM, node="gpu-2"), WITH_DCGM).quarantine  # another node
    confirmations.record(dcgm_xid("gpu-3", 48))
    assert not confirmations.judge(judge(XID_79, WITH_DCGM, node="gpu-3"), WITH_DCGM).quarantine  # another code
    clock.now += 601
    assert not confirmations.judge(judge(XID_79, WITH_DCGM, node="gpu-1"), WITH_DCGM).quarantine  # too late
    # DCGM's own finding is judged by the catalog and quarantines by itself.
    assert confirmations.judge(dcgm_xid("gpu-4", 79), WITH_DCGM).quarantine


def test_without_dcgm_or_when_turned_off_the_kernel_log_is_the_xid_source() -> None:
    confirmations = XidConfirmations(600, clock=FakeClock())
    assert confirmations.judge(judge(XID_79), DEFAULTS).quarantine
    trusting = WITH_DCGM.model_copy(update={"kernel_xids_need_dcgm": False})
    assert confirmations.judge(judge(XID_79, trusting), trusting).quarantine
    # Only Xids that would quarantine wait: an SXid has no DCGM counterpart, an application Xid never quarantines.
    sxid = judge(
        "[1.0] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Fatal, Link 10 egress non-posted PRIV error", WITH_DCGM
    )
    assert confirmations.judge(sxid, WITH_DCGM) == sxid
    app = judge("[5.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, Graphics Exception", WITH_DCGM)
    assert confirmations.judge(app, WITH_DCGM) == app

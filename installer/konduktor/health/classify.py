"""Signals -> findings: what a kernel report, a DCGM sample, a GPU count or a burn-in verdict says about a node.

Pure functions over the catalog and the settings, plus two small stateful filters (duplicates, lost-GPU
grace) whose clock is injected so that tests control time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from konduktor.burnin.results import NodeVerdict, Verdict
from konduktor.gpu.catalog import (
    CATALOG,
    DCGM_RULES,
    DCGM_XID_FIELD,
    Catalog,
    CatalogEntry,
    FindingKind,
    RecommendedAction,
    ReportKind,
    Severity,
)
from konduktor.gpu.kernel_log import KernelReport
from konduktor.health.settings import HealthSettings, NodeConditionRule

DedupKey = tuple[str, str, str | None, RecommendedAction]


@dataclass(frozen=True)
class Finding:
    """One judged signal about one node: how bad, what fixes it, whether to quarantine, and the evidence.

    `reason` is CamelCase (a Node condition / Event reason); `evidence` is the log line or the metric and
    its value, shown to the on-call engineer as-is.
    """

    node: str
    kind: FindingKind
    code: int | None
    gpu: str | None
    name: str
    meaning: str
    severity: Severity
    action: RecommendedAction
    quarantine: bool
    node_unusable: bool
    reason: str
    evidence: str

    @property
    def dedup_key(self) -> DedupKey:
        # The action is part of the key so that an escalation (Xid 154 "GPU Reset" -> "Node Reboot")
        # on the same GPU is not mistaken for a repeat.
        return (self.node, self.reason, self.gpu, self.action)


@dataclass(frozen=True)
class DcgmSample:
    """One DCGM exporter series for one GPU. `value`: the gauge's value, or a counter's increase over the
    query window (the watch loop's PromQL decides which); above zero means the fault happened."""

    node: str
    gpu: str
    metric: str
    value: float


def catalog_entry(
    kind: ReportKind, code: int | None, message: str, settings: HealthSettings, catalog: Catalog = CATALOG
) -> CatalogEntry:
    """The catalog's judgement of one report, with the rules the table alone cannot express."""
    entry = catalog.lookup(kind, code)
    if entry is None:
        # Unknown codes warn; quarantining them is opt-in because an unmapped code that defaulted to
        # fatal caused NVSentinel's false-quarantine floods (docs/design/gpu-faults.md#unknown-codes).
        action = RecommendedAction.QUARANTINE if settings.quarantine_unknown else RecommendedAction.NONE
        return CatalogEntry(
            kind,
            code,
            f"UNKNOWN_{kind.upper()}",
            "not in the catalog",
            Severity.WARNING,
            action,
            quarantine=settings.quarantine_unknown,
        )
    if kind == "xid" and code == 154:
        recovery = _last_parenthesised(message).lower()
        return catalog.xid_154_recovery.get(recovery) or replace(
            entry, severity=Severity.WARNING, meaning=f"unrecognised recovery action {recovery!r}"
        )
    if kind == "sxid" and not entry.quarantine and _sxid_token(message) == "fatal":
        # The driver's Fatal/Non-fatal token is authoritative for NVSentinel (docs/design/gpu-faults.md#sxid-classes):
        # a "Fatal" report of a code the guide lists as non-fatal still takes the node out.
        return replace(
            entry,
            severity=Severity.CRITICAL,
            action=RecommendedAction.CONTACT_SUPPORT,
            quarantine=True,
            meaning=f"{entry.meaning} (reported fatal)",
        )
    return entry


def classify_report(report: KernelReport, node: str, settings: HealthSettings, catalog: Catalog = CATALOG) -> Finding:
    """Judge one kernel log report from `node`.

    An Xid the driver attributes to a MIG GPU instance (`GPU-I:NN` in the line) is judged as the same Xid on its
    physical GPU, whose PCI address the line names: a contained one (94, the application ones) stays the fault of the
    work on that instance, and one that quarantines takes the node out as any other. The finding names the GPU and the
    instance (`gpu` is the GPU's PCI address, the name carries `GPU-I:NN` as the driver writes it), so the Event and
    the quarantine reason say both (docs/design/gpu-sharing.md#faults-on-a-mig-gpu)."""
    entry = catalog_entry(report.kind, report.code, report.message, settings, catalog)
    if report.gpu_instance is not None:
        instance = report.gpu_instance
        scope = "fault of the node" if entry.quarantine else "fault of the work on that instance only"
        entry = replace(
            entry,
            name=f"{entry.name} GPU-I:{instance:02d}",
            meaning=f"{entry.meaning} on MIG instance {instance} of the GPU, a {scope}",
        )
    return _finding(node, report.kind, entry, report.pci, report.raw)


def classify_dcgm(sample: DcgmSample, settings: HealthSettings, catalog: Catalog = CATALOG) -> Finding | None:
    """Judge one DCGM sample; None when it shows no fault or is not a health series."""
    if not (math.isfinite(sample.value) and sample.value > 0):
        return None
    evidence = f'{sample.metric}{{gpu="{sample.gpu}"}} = {sample.value:g}'
    if sample.metric == DCGM_XID_FIELD:
        # This gauge holds the code of the last Xid, so it is judged by the Xid catalog.
        entry = catalog_entry("xid", int(sample.value), "", settings, catalog)
        return _finding(sample.node, "xid", entry, sample.gpu, evidence)
    rule = DCGM_RULES.get(sample.metric)
    if rule is None:
        return None
    return Finding(
        sample.node,
        "dcgm",
        None,
        sample.gpu,
        rule.field_name,
        rule.meaning,
        rule.severity,
        rule.action,
        rule.quarantine,
        False,
        rule.reason,
        evidence,
    )


@dataclass(frozen=True)
class ForeignCondition:
    """A Node condition another tool set (not our GPUHealthy)."""

    type: str
    status: str
    detail: str  # "reason: message"
    since: str  # lastTransitionTime as written
    changed_at: float | None  # the same, parsed


def condition_finding(
    node: str, condition: ForeignCondition, requalified_at: float | None, rules: Sequence[NodeConditionRule]
) -> Finding | None:
    """A GPU condition another tool set on the node, when a rule says it means unhealthy GPUs. One that turned
    bad before the node's last requalification is stale: the burn-in since then judged the node, and some tools
    never clear their conditions (node-problem-detector #215), which would otherwise quarantine the node again
    after every release."""
    kind, status, detail, since = condition.type, condition.status, condition.detail, condition.since
    rule = next((r for r in rules if r.type == kind and r.status == status), None)
    if rule is None:
        return None
    changed = condition.changed_at
    if requalified_at is not None and changed is not None and changed <= requalified_at:
        return None
    return Finding(
        node,
        "condition",
        None,
        None,
        kind,
        detail or f"{kind}={status}",
        Severity.CRITICAL if rule.quarantine else Severity.WARNING,
        RecommendedAction.QUARANTINE if rule.quarantine else RecommendedAction.NONE,
        rule.quarantine,
        False,
        kind,
        f"condition {kind}={status} since {since or '?'} set by another tool: {detail or 'no message'}",
    )


def burnin_finding(result: NodeVerdict) -> Finding | None:
    """A failed burn-in is hardware evidence in its own right; WARN is worth an Event; the rest judge nothing."""
    if result.verdict is Verdict.FAIL:
        return Finding(
            result.node,
            "burnin",
            None,
            None,
            "BURNIN_FAILED",
            "Burn-in failed",
            Severity.CRITICAL,
            RecommendedAction.CONTACT_SUPPORT,
            True,
            False,
            "BurnInFailed",
            verdict_detail(result),
        )
    if result.verdict is Verdict.WARN:
        return Finding(
            result.node,
            "burnin",
            None,
            None,
            "BURNIN_WARNED",
            "Burn-in passed with warnings",
            Severity.WARNING,
            RecommendedAction.NONE,
            False,
            False,
            "BurnInWarned",
            verdict_detail(result),
        )
    return None


def node_pairs_finding(node: str, evidence: str) -> Finding:
    """NCCL failed on every node pair with `node` while its partners passed with other nodes: the bisection's
    culprit, hardware evidence as a burn-in FAIL is."""
    return Finding(
        node,
        "burnin",
        None,
        None,
        "NCCL_NODE_PAIRS_FAILED",
        "NCCL failed on every node pair with this node",
        Severity.CRITICAL,
        RecommendedAction.CONTACT_SUPPORT,
        True,
        False,
        "NodePairsFailed",
        evidence,
    )


def verdict_detail(result: NodeVerdict) -> str:
    """Why the node got its verdict, in one line: the checks that decided it and their reasons."""
    deciding = [c for c in result.checks if c.verdict is result.verdict]
    if not deciding:
        return f"{len(result.checks)} checks, verdict {result.verdict}"
    return "; ".join(f"{c.check}: {c.summary or ', '.join(c.reasons) or c.verdict}" for c in deciding)


def _finding(node: str, kind: FindingKind, entry: CatalogEntry, gpu: str | None, evidence: str) -> Finding:
    prefix = {"xid": "Xid", "sxid": "SXid"}.get(kind)
    reason = f"{prefix}{entry.code}" if prefix and entry.code is not None else "PeermemError"
    return Finding(
        node,
        kind,
        entry.code,
        gpu,
        entry.name,
        entry.meaning,
        entry.severity,
        entry.action,
        entry.quarantine,
        entry.node_unusable,
        reason,
        evidence,
    )


def _last_parenthesised(message: str) -> str:
    start, end = message.rfind("("), message.rfind(")")
    return message[start + 1 : end].strip() if 0 <= start < end else ""


def _sxid_token(message: str) -> str:
    return message.split(",", 1)[0].strip().lower()


def needs_confirmation(finding: Finding, settings: HealthSettings) -> bool:
    """A kernel-log Xid that would take the node out, on a cluster where DCGM reports Xids too.

    Anyone who can write to the log store can forge a kernel line; the DCGM exporter reads the driver itself. So
    where both are read, a log line alone does not quarantine: DCGM_FI_DEV_XID_ERRORS must show the same code on
    the same node. SXid and peermem lines have no DCGM counterpart and rely on the log pipeline's ingest identity.
    """
    return (
        settings.prometheus is not None
        and settings.kernel_xids_need_dcgm
        and finding.kind == "xid"
        and finding.quarantine
        and not finding.evidence.startswith(DCGM_XID_FIELD)
    )


def unconfirmed(finding: Finding) -> Finding:
    """The finding reported (an Event for the on-call engineer) but not acted on."""
    return replace(
        finding,
        severity=Severity.WARNING,
        action=RecommendedAction.NONE,
        quarantine=False,
        node_unusable=False,
        meaning=f"{finding.meaning}; not confirmed by {DCGM_XID_FIELD} on the node, so not acted on",
    )


class XidConfirmations:
    """The Xid codes DCGM reported per node within a window, to confirm kernel-log Xids by (`needs_confirmation`).

    The exporter's gauge and the log line reach the controller by different paths and in either order. A line
    that arrives first is only reported; the DCGM finding quarantines on its own when it comes. A line that
    arrives after DCGM's report of the same code is confirmed and acted on with the log line as evidence.
    """

    def __init__(self, window_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window_seconds
        self._clock = clock
        self._seen: dict[tuple[str, int], float] = {}

    def record(self, finding: Finding) -> None:
        """Remember a DCGM Xid finding (others are ignored)."""
        if finding.kind == "xid" and finding.code is not None and finding.evidence.startswith(DCGM_XID_FIELD):
            self._seen[(finding.node, finding.code)] = self._clock()

    def judge(self, finding: Finding, settings: HealthSettings) -> Finding:
        """`finding` as is when it needs no confirmation or has one; else reported only."""
        if not needs_confirmation(finding, settings) or finding.code is None:
            return finding
        now = self._clock()
        self._seen = {key: at for key, at in self._seen.items() if now - at < self._window}
        if (finding.node, finding.code) in self._seen:
            return replace(finding, evidence=f"{finding.evidence} (confirmed by {DCGM_XID_FIELD})")
        return unconfirmed(finding)


class DuplicateFilter:
    """Lets the first finding of a fault through and drops repeats (same node, reason, GPU, action) for a
    window, so that a burst of identical lines costs no cluster writes. A fault still reporting after the
    window passes through again, which the decision step turns into no write when nothing changed."""

    def __init__(self, window_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window_seconds
        self._clock = clock
        # Insertion order is first-seen order, so expired keys are always at the front.
        self._first_seen: dict[DedupKey, float] = {}

    def admit(self, finding: Finding) -> bool:
        now = self._clock()
        self._forget_expired(now)
        key = finding.dedup_key
        if key in self._first_seen:
            return False
        self._first_seen[key] = now
        return True

    def forget(self, finding: Finding) -> None:
        """Let the next report of this fault through again: its writes failed, and a repeat must retry them."""
        self._first_seen.pop(finding.dedup_key, None)

    def __len__(self) -> int:
        return len(self._first_seen)

    def _forget_expired(self, now: float) -> None:
        while self._first_seen:
            key, seen = next(iter(self._first_seen.items()))
            if now - seen < self._window:
                return
            del self._first_seen[key]


class LostGpuWatch:
    """Reports a node whose allocatable `nvidia.com/gpu` stays below its expected count for a grace period.

    The grace rides out device-plugin restarts, which withdraw a node's GPUs from allocatable for a few
    seconds; a GPU that fell off the bus stays missing.
    """

    def __init__(self, grace_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._grace = grace_seconds
        self._clock = clock
        self._short_since: dict[str, float] = {}

    def observe(self, node: str, allocatable: int, expected: int) -> Finding | None:
        if allocatable >= expected:
            self._short_since.pop(node, None)
            return None
        now = self._clock()
        since = self._short_since.setdefault(node, now)
        if now - since < self._grace:
            return None
        return Finding(
            node,
            "gpu_lost",
            None,
            None,
            "GPU_LOST",
            "GPUs missing from allocatable",
            Severity.CRITICAL,
            RecommendedAction.REBOOT,
            True,
            False,
            "GPULost",
            f"allocatable nvidia.com/gpu {allocatable} < expected {expected} for {now - since:.0f}s",
        )

    def short_since(self, node: str) -> float | None:
        """When the node was first seen short of GPUs (by the injected clock), or None while it is not."""
        return self._short_since.get(node)

    def forget(self, node: str) -> None:
        """The node is gone from the cluster."""
        self._short_since.pop(node, None)

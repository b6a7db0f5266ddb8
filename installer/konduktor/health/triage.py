"""Triage of a job: which of the nodes it ran on shows a GPU fault in its time window, with the evidence.

Pure: the caller reads the job's nodes and their health signals (triage_sources.py) and gets a judgement, to
which a burn-in of those nodes, run on request, adds its verdicts; and, on request, the findings by which the
health controller's `decide` quarantines the culprits.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from konduktor.burnin.results import BurnInReport, PairVerdict, Verdict
from konduktor.gpu.kernel_log import parse_line
from konduktor.health.classify import (
    Finding,
    burnin_finding,
    classify_dcgm,
    classify_report,
    needs_confirmation,
    node_pairs_finding,
    unconfirmed,
    verdict_detail,
)
from konduktor.health.settings import HealthSettings
from konduktor.health.signals import DcgmSignal, LogLine
from konduktor.kube.timestamps import format_time

# A fault found shortly after the job ended still counts: detection takes seconds to minutes (a lost GPU waits
# gpu_lost_grace_seconds, DCGM is scraped every 30 s), and a job often dies of the fault before it is reported.
LATE_SECONDS = 600.0

Source = Literal["quarantine", "condition", "event", "kernel-log", "dcgm", "burnin"]
TABLE_WIDTH = 100  # triage's table and notes, as `konduktor-install nodes`
PODS_WIDTH = 30  # the pods column wraps beyond this, between pod names
GAP = "  "
INDENT = "  "  # a signal's continued lines in the evidence column; a note's


@dataclass(frozen=True)
class Sighting:
    """One health signal on a node: the quarantine, the GPUHealthy condition, an Event of the controller, a kernel
    log line from Loki, a DCGM series from Prometheus, or a burn-in verdict (undated: run on request, after the
    job, it counts whatever the job's window)."""

    at: float | None
    source: Source
    reason: str
    message: str
    fault: bool  # it points at the node; an application Xid points at the job itself
    # The controller's judgement of the signal, by which triage can quarantine the node; the controller's own
    # records (quarantine, condition, Events) have none: it has acted on them already.
    finding: Finding | None = None


@dataclass(frozen=True)
class NodeRecord:
    node: str
    pods: tuple[str, ...]  # the job's pods seen on it (live pods, scheduling Events, the controller's Events)
    signals: tuple[Sighting, ...]
    requalified_at: float | None = None  # when it last passed a burn-in out of quarantine


@dataclass(frozen=True)
class Triage:
    job: str
    namespace: str
    start: float
    end: float
    nodes: tuple[NodeRecord, ...]
    culprits: tuple[str, ...]

    def evidence(self, node: NodeRecord) -> list[Sighting]:
        """The node's signals in the job's window, each fact once (`one_per_fact`)."""
        return one_per_fact([s for s in node.signals if in_window(s, self.start, self.end)])

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for node in self.nodes:
            seen = self.evidence(node)
            rows.append(
                {
                    "node": node.node,
                    "verdict": "CULPRIT" if node.node in self.culprits else "clean",
                    "pods": ", ".join(node.pods),
                    "evidence": "; ".join(_signal(s) for s in seen) or "-",
                }
            )
        return rows

    def as_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "namespace": self.namespace,
            "window": {"start": _stamp(self.start), "end": _stamp(self.end)},
            "culprits": list(self.culprits),
            "nodes": [
                {
                    "node": n.node,
                    "pods": list(n.pods),
                    "culprit": n.node in self.culprits,
                    "evidence": [
                        {
                            "at": _stamp(s.at),
                            "source": s.source,
                            "reason": s.reason,
                            "message": s.message,
                            "fault": s.fault,
                        }
                        for s in self.evidence(n)
                    ],
                }
                for n in self.nodes
            ],
        }


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    return textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""]


def render_table(found: Triage, width: int = TABLE_WIDTH) -> str:
    """NODE, VERDICT, PODS and EVIDENCE within `width` columns: the pods wrap between names past PODS_WIDTH, and each
    signal of the evidence starts a line of its own and wraps within its column, never cut."""
    rows = [(r["node"], r["verdict"], r["pods"] or "-", r["evidence"]) for r in found.rows()]
    evidence = {node.node: [_signal(s) for s in found.evidence(node)] or ["-"] for node in found.nodes}
    node_width = max([len("NODE"), *(len(r[0]) for r in rows)])
    verdict_width = max([len("VERDICT"), *(len(r[1]) for r in rows)])
    longest_pod = max([len(p) for r in rows for p in r[2].split(", ")], default=0)
    packed = {r[0]: _pack(r[2].split(", "), max(PODS_WIDTH, longest_pod)) for r in rows}
    pods_width = max([len("PODS"), *(len(line) for lines in packed.values() for line in lines)])
    head = node_width + verdict_width + pods_width + 3 * len(GAP)
    room = max(width - head, 20)
    lines = [_line(("NODE", "VERDICT", "PODS", "EVIDENCE"), (node_width, verdict_width, pods_width))]
    for node, verdict, _, _ in rows:
        pod_lines = packed[node]
        told = [line for signal in evidence[node] for line in _wrap(signal, room, INDENT)]
        for index in range(max(len(pod_lines), len(told))):
            first = index == 0
            cells = (
                node if first else "",
                verdict if first else "",
                pod_lines[index] if index < len(pod_lines) else "",
                told[index] if index < len(told) else "",
            )
            lines.append(_line(cells, (node_width, verdict_width, pods_width)))
    return "\n".join(lines) + "\n"


def _pack(names: Sequence[str], width: int) -> list[str]:
    """Names joined by ", " on lines of at most `width` (a longer name alone on its line), never split."""
    lines: list[str] = []
    for name in names:
        if lines and len(lines[-1]) + 2 + len(name) + 1 <= width:
            lines[-1] += f", {name}"
        else:
            if lines:
                lines[-1] += ","
            lines.append(name)
    return lines or [""]


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return GAP.join([*(cell.ljust(w) for cell, w in zip(cells, widths, strict=False)), cells[-1]]).rstrip()


def _signal(sighting: Sighting) -> str:
    return f"{_stamp(sighting.at)} {sighting.source} {sighting.reason}: {sighting.message}"


def wrap_note(note: str, width: int = TABLE_WIDTH) -> str:
    """A note of triage's (`not read: ...`, `hint: ...`) wrapped to `width` columns, continued lines indented."""
    return "\n".join(_wrap(note, width, INDENT * 2))


# The controller records one quarantine three times: its Event (with the evidence), the GPUHealthy condition (the
# meaning and the recommended action) and the quarantine annotation (the reason). Most telling first.
_RECORDS: tuple[Source, ...] = ("event", "condition", "quarantine")


def one_per_fact(signals: Sequence[Sighting]) -> list[Sighting]:
    """The signals with the controller's records of one fault shown once: of its Event, condition and annotation
    with the same reason, the most telling that is there (the Event expires after an hour; the others stay)."""
    present = {(s.source, s.reason) for s in signals}

    def shadowed(sighting: Sighting) -> bool:
        if sighting.source not in _RECORDS:
            return False
        better = _RECORDS[: _RECORDS.index(sighting.source)]
        return any((source, sighting.reason) in present for source in better)

    return [s for s in signals if not shadowed(s)]


def in_window(sighting: Sighting, start: float, end: float) -> bool:
    """During the job or shortly after it; an undated signal (a condition without a time) counts.

    From the whole second the job started in: the cluster stamps its records (annotations, conditions, core Events)
    in whole seconds, rounded down, so a fault in the job's first second is stamped before a start read to the
    microsecond from the scheduler's Event."""
    return sighting.at is None or math.floor(start) <= sighting.at <= end + LATE_SECONDS


def judge(job: str, namespace: str, start: float, end: float, nodes: Sequence[NodeRecord]) -> Triage:
    """The culprits: the job's nodes with a node fault in its window. Application faults are shown, never blamed."""
    culprits = tuple(sorted(n.node for n in nodes if any(s.fault and in_window(s, start, end) for s in n.signals)))
    return Triage(job, namespace, start, end, tuple(sorted(nodes, key=lambda n: n.node)), culprits)


def _stamp(when: float | None) -> str:
    return "-" if when is None else format_time(when)


def with_sightings(found: Triage, extra: Mapping[str, Sequence[Sighting]]) -> Triage:
    """The same triage judged again with more signals on its nodes (a burn-in's)."""
    nodes = [replace(n, signals=(*n.signals, *extra.get(n.node, ()))) for n in found.nodes]
    return judge(found.job, found.namespace, found.start, found.end, nodes)


def kernel_sightings(
    lines: Sequence[LogLine], settings: HealthSettings, dcgm: Mapping[str, Sequence[Sighting]] | None = None
) -> dict[str, list[Sighting]]:
    """The Xid and SXid lines of the nodes' kernel logs, judged by the controller's catalog: a fault that takes
    the node out of service (Xid 79, 48, ...) blames it; an application's own Xid (13, 31, 43) is shown only.

    Where the controller reads DCGM too, a kernel Xid blames a node only when DCGM's Xid gauge showed the same code
    on it (`dcgm`, the node's DCGM sightings), as the controller acts on it: a log line alone can be forged."""
    confirmed = {
        (node, s.finding.code)
        for node, seen in (dcgm or {}).items()
        for s in seen
        if s.finding is not None and s.finding.kind == "xid"
    }
    found: dict[str, list[Sighting]] = {}
    for line in lines:
        report = parse_line(line.line)
        if report is None:
            continue
        finding = classify_report(report, line.node, settings)
        if needs_confirmation(finding, settings) and (line.node, finding.code) not in confirmed:
            finding = unconfirmed(finding)
        message = f"{finding.name}: {line.line.strip()}"
        at = line.timestamp_ns / 1e9
        sighting = Sighting(at, "kernel-log", finding.reason, message, finding.quarantine, finding)
        found.setdefault(line.node, []).append(sighting)
    return found


def dcgm_sightings(signals: Sequence[DcgmSignal], settings: HealthSettings) -> dict[str, list[Sighting]]:
    """The faults DCGM's series showed on the nodes, judged as the controller judges them: an Xid by the catalog,
    other fields by their rule (a double-bit ECC error blames the node, clocks throttled for heat are shown only)."""
    found: dict[str, list[Sighting]] = {}
    for signal in signals:
        finding = classify_dcgm(signal.sample, settings)
        if finding is None:
            continue
        message = f"{finding.name}: {finding.evidence}"
        sighting = Sighting(signal.since, "dcgm", finding.reason, message, finding.quarantine, finding)
        found.setdefault(finding.node, []).append(sighting)
    return found


def burnin_sightings(report: BurnInReport) -> dict[str, list[Sighting]]:
    """A burn-in of the job's nodes as signals. A FAIL blames its node, and so does the node-pair bisection
    (`pair_culprits`); PASS, WARN, ERROR (the run could not judge) and SKIPPED are shown, never blamed."""
    run = f"{report.tier} burn-in {report.run_id}"
    found: dict[str, list[Sighting]] = {}
    for verdict in report.nodes:
        message = f"{run}: {verdict.verdict.value}: {verdict_detail(verdict)}"
        fault = verdict.verdict is Verdict.FAIL
        reason = f"BurnIn{verdict.verdict.value.title()}"
        finding = burnin_finding(verdict) if fault else None
        found.setdefault(verdict.node, []).append(Sighting(None, "burnin", reason, message, fault, finding))
    for node, partners in pair_culprits(report.pairs).items():
        message = f"{run}: NCCL failed on every pair with it ({', '.join(partners)}); those nodes passed with others"
        finding = node_pairs_finding(node, message)
        found.setdefault(node, []).append(Sighting(None, "burnin", "NodePairsFailed", message, True, finding))
    return found


def pair_culprits(pairs: Sequence[PairVerdict]) -> dict[str, list[str]]:
    """Bisection of multi-node NCCL: a node every one of whose pairs failed, while each of those partners passed
    with some other node, is the bad one; its failed partners come with it as evidence."""
    passed = {n for p in pairs if p.result.verdict in (Verdict.PASS, Verdict.WARN) for n in p.nodes}
    failed_with: dict[str, list[str]] = {}
    for pair in pairs:
        if pair.result.verdict is Verdict.FAIL:
            a, b = pair.nodes
            failed_with.setdefault(a, []).append(b)
            failed_with.setdefault(b, []).append(a)
    return {
        node: sorted(partners)
        for node, partners in failed_with.items()
        if node not in passed and all(partner in passed for partner in partners)
    }


def culprit_findings(found: Triage) -> list[Finding]:
    """What triage's quarantine hands to the controller's `decide`: for each culprit, the finding of its earliest
    fault in the window (a burn-in's, run now, last). Left out: a node the controller holds in quarantine already
    (it is the controller's to handle), and evidence older than the node's last requalification (it passed a
    burn-in since)."""
    findings = []
    for node in found.nodes:
        if node.node not in found.culprits or any(s.source == "quarantine" for s in node.signals):
            continue
        since = node.requalified_at
        usable = [s for s in found.evidence(node) if s.fault and (s.at is None or since is None or s.at > since)]
        usable.sort(key=lambda s: (s.at is None, s.at or 0.0))
        first = next((s.finding for s in usable if s.finding is not None), None)
        if first is not None:
            findings.append(first)
    return findings

"""What a preflight check concludes, and the report of all checks: a table, JSON or YAML."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ruamel.yaml import YAML


class Status(StrEnum):
    PASS = "PASS"
    WARN = "WARN"  # fit, but look at it: it can surprise later (a taint, a version nobody tested)
    FAIL = "FAIL"  # not fit: installing now would break or promise what the cluster does not have
    SKIPPED = "SKIPPED"  # not judged; the summary says why (nothing to check, or a check it depends on failed)


_RANK = {Status.SKIPPED: 0, Status.PASS: 1, Status.WARN: 2, Status.FAIL: 3}


def worst(statuses: Iterable[Status]) -> Status:
    return max(statuses, key=_RANK.__getitem__, default=Status.SKIPPED)


@dataclass(frozen=True)
class Check:
    """One check on one subject: the cluster, a GPU type, a node or an SSH host."""

    name: str
    status: Status
    summary: str
    subject: str = "cluster"
    evidence: tuple[str, ...] = ()  # what was seen, one fact a line
    hint: str | None = None  # what to do about a WARN or FAIL


def check(
    name: str,
    status: Status,
    summary: str,
    subject: str = "cluster",
    evidence: Iterable[str] = (),
    hint: str | None = None,
) -> Check:
    return Check(name, status, summary, subject, tuple(evidence), hint)


@dataclass(frozen=True)
class PreflightReport:
    checks: tuple[Check, ...]

    @property
    def status(self) -> Status:
        return worst(c.status for c in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status is Status.FAIL)


def report_to_dict(report: PreflightReport) -> dict[str, Any]:
    counts = {status.value: sum(c.status is status for c in report.checks) for status in Status}
    return {
        "status": report.status.value,
        "counts": counts,
        "checks": [
            {
                "name": c.name,
                "subject": c.subject,
                "status": c.status.value,
                "summary": c.summary,
                "evidence": list(c.evidence),
                "hint": c.hint,
            }
            for c in report.checks
        ],
    }


def render_json(report: PreflightReport) -> str:
    return json.dumps(report_to_dict(report), indent=2) + "\n"


def render_yaml(report: PreflightReport) -> str:
    stream = io.StringIO()
    YAML(typ="safe", pure=True).dump(report_to_dict(report), stream)
    return stream.getvalue()


def render_table(report: PreflightReport) -> str:
    """One row per check, then the evidence and hint of every check that is not a PASS."""
    header = ("STATUS", "CHECK", "SUBJECT", "SUMMARY")
    rows = [(c.status.value, c.name, c.subject, c.summary) for c in report.checks]
    lines = _aligned([header, *rows])
    details = [c for c in report.checks if c.status is not Status.PASS and (c.evidence or c.hint)]
    if details:
        lines.append("")
    for item in details:
        lines.append(f"{item.status.value} {item.name} ({item.subject}):")
        lines += [f"  {fact}" for fact in item.evidence]
        if item.hint:
            lines += [f"  hint: {line}" for line in item.hint.splitlines()]
    return "\n".join(lines) + "\n"


def _aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def summary_line(report: PreflightReport) -> str:
    """`preflight: FAIL (9 PASS, 1 WARN, 1 FAIL, 2 SKIPPED)` for stderr."""
    counts = ", ".join(f"{sum(c.status is s for c in report.checks)} {s.value}" for s in Status)
    return f"preflight: {report.status.value} ({counts})"

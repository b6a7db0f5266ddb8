"""GPU fault lines of the kernel log (`dmesg`, quick tier)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from konduktor.gpu.catalog import ReportKind
from konduktor.gpu.kernel_log import parse_line


@dataclass(frozen=True)
class KernelLogEvent:
    kind: ReportKind | Literal["fell-off-bus"]  # "fell-off-bus": the driver's own line, no Xid
    code: int | None
    pci: str | None
    seconds_since_boot: float | None
    line: str


_DMESG_TIME = re.compile(r"^\[\s*(\d+\.\d+)\]")
_FELL_OFF = re.compile(r"GPU at PCI:([0-9a-fA-F:.]+).*fallen off the bus")


def parse_kernel_log(text: str) -> tuple[KernelLogEvent, ...]:
    """GPU fault lines from `dmesg`, read by the health controller's parser so both agree on them.

    The `[seconds since boot]` prefix is kept: with the uptime it dates each line.
    """
    events = []
    for raw in text.splitlines():
        line = raw.strip()
        stamp = _DMESG_TIME.match(line)
        seconds = float(stamp.group(1)) if stamp else None
        if report := parse_line(line):
            events.append(KernelLogEvent(report.kind, report.code, report.pci, seconds, line))
        elif match := _FELL_OFF.search(line):
            events.append(KernelLogEvent("fell-off-bus", None, match.group(1).lower(), seconds, line))
    return tuple(events)

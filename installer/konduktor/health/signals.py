"""What the sources hand to the decision: a kernel log line (from Loki or the node's own kernel files) and a DCGM
signal (from Prometheus). Pure: the edges that read them (`loki`, `kernel_files`, `prometheus`) build these, and
the decisions (`triage`, `loop`'s pass) read them without importing an edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from konduktor.health.classify import DcgmSample

# How a DCGM field shows a fault: a counter that rises, the code of the last Xid that changes, a state held.
SignalShape = Literal["counter", "code", "state"]


@dataclass(frozen=True)
class LogLine:
    node: str
    timestamp_ns: int
    line: str


@dataclass(frozen=True)
class DcgmSignal:
    sample: DcgmSample
    since: float  # when the series first showed the fault
    shape: SignalShape

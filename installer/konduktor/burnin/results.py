"""What a burn-in concludes: a verdict per check, per node and per node pair, with its evidence."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Verdict(StrEnum):
    PASS = "PASS"
    WARN = "WARN"  # below a warn level or a soft signal (throttling); never quarantines
    FAIL = "FAIL"  # hardware evidence; the only verdict that quarantines a node
    ERROR = "ERROR"  # no usable result: timeout, crash, missing or truncated output
    SKIPPED = "SKIPPED"  # deliberately not judged (unknown GPU model, per-model skip)


# Hardware evidence outranks missing data, which outranks a soft warning: a node with one FAIL
# and one ERROR is still a FAIL, and a node that PASSed what ran but lost one result is ERROR.
_RANK = {Verdict.SKIPPED: 0, Verdict.PASS: 1, Verdict.WARN: 2, Verdict.ERROR: 3, Verdict.FAIL: 4}


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The most severe verdict; SKIPPED when nothing was judged."""
    return max(verdicts, key=_RANK.__getitem__, default=Verdict.SKIPPED)


@dataclass(frozen=True)
class Evidence:
    """One measured fact behind a verdict, with the goal it was held against."""

    metric: str
    measured: float | int | str | None
    threshold: float | None = None
    unit: str = ""
    fraction_of_peak: float | None = None
    gpu: int | None = None


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check on one node (or one node pair)."""

    check: str
    verdict: Verdict
    step: str
    summary: str = ""  # a few words for the table cell
    reasons: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True)
class NodeVerdict:
    """All checks of one node and their aggregate."""

    node: str
    gpu_product: str | None
    gpu_model: str | None  # thresholds key; None when the product is not in the table
    verdict: Verdict
    checks: tuple[CheckResult, ...]

    @property
    def quarantine(self) -> bool:
        return self.verdict is Verdict.FAIL


@dataclass(frozen=True)
class PairVerdict:
    """A multi-node NCCL test of two nodes; a FAIL implicates at least one of them."""

    nodes: tuple[str, str]
    result: CheckResult


@dataclass(frozen=True)
class BurnInReport:
    """Everything one burn-in run concluded, ready to render."""

    run_id: str
    tier: str
    thresholds_version: str
    nodes: tuple[NodeVerdict, ...]
    pairs: tuple[PairVerdict, ...] = ()

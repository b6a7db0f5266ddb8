"""The short answer to "is the proposal better?": per team, its waits, its loss to preemption, its borrowing and its
use of its quota, each better, worse or no different, where a difference smaller than the noise threshold counts as
none.

Pure: two results in, verdicts out. The threshold is the faithfulness tolerance the virtual engine is held to against
a simulated cluster (docs/design/whatif-engine.md): a wait within 10% or one trace minute, whichever is larger, is
the same wait; GPU-hours within 10% or 0.1 GPU-hour; utilisation within 2 percentage points.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from konduktor.whatif.metrics import Answer, Result

Word = Literal["better", "worse", "more", "less", "no difference"]
WAIT_FLOOR = 60.0  # seconds
HOURS_FLOOR = 0.1  # GPU-hours
SHARE = 0.10
UTILISATION_POINTS = 0.02


@dataclass(frozen=True)
class Verdict:
    team: str
    aspect: str  # waits, preemption loss, borrowing, utilisation
    word: Word
    before: float | None
    after: float | None
    unit: str  # "s", "GPU-h" or "share"

    def as_json(self) -> dict[str, object]:
        return {
            "team": self.team,
            "aspect": self.aspect,
            "verdict": self.word,
            "before": self.before,
            "after": self.after,
            "unit": self.unit,
        }


def differs(before: float, after: float, floor: float) -> bool:
    return abs(after - before) > max(floor, SHARE * max(abs(before), abs(after)))


def _judge(before: float | None, after: float | None, floor: float, lower_is_better: bool) -> Word:
    if before is None or after is None or not differs(before, after, floor):
        return "no difference"
    return "better" if (after < before) == lower_is_better else "worse"


def team_verdicts(team: str, before: Answer, after: Answer) -> list[Verdict]:
    borrowed: Word = "no difference"
    if differs(before.borrowed_gpu_hours, after.borrowed_gpu_hours, HOURS_FLOOR):
        borrowed = "more" if after.borrowed_gpu_hours > before.borrowed_gpu_hours else "less"
    used: Word = "no difference"
    if (
        before.utilisation is not None
        and after.utilisation is not None
        and abs(after.utilisation - before.utilisation) > UTILISATION_POINTS
    ):
        used = "better" if after.utilisation > before.utilisation else "worse"
    return [
        Verdict(
            team,
            "waits",
            _judge(before.wait_p95, after.wait_p95, WAIT_FLOOR, True),
            before.wait_p95,
            after.wait_p95,
            "s",
        ),
        Verdict(
            team,
            "preemption loss",
            _judge(before.lost_gpu_hours, after.lost_gpu_hours, HOURS_FLOOR, True),
            before.lost_gpu_hours,
            after.lost_gpu_hours,
            "GPU-h",
        ),
        Verdict(team, "borrowing", borrowed, before.borrowed_gpu_hours, after.borrowed_gpu_hours, "GPU-h"),
        Verdict(team, "utilisation", used, before.utilisation, after.utilisation, "share"),
    ]


def verdicts(before: Result, after: Result) -> list[Verdict]:
    """Each team's verdicts, `after` (the proposal) against `before`; teams in one result only are left out."""
    return [
        verdict
        for team in sorted(set(before.teams) & set(after.teams))
        for verdict in team_verdicts(team, before.teams[team], after.teams[team])
    ]


def shown(verdict: Verdict) -> str:
    """One verdict in words: `waits better (p95 2.1 h -> 1.3 h)`."""
    if verdict.before is None or verdict.after is None:
        return f"{verdict.aspect} {verdict.word}"
    if verdict.unit == "s":
        figures = f"p95 {verdict.before / 60:.1f} -> {verdict.after / 60:.1f} min"
    elif verdict.unit == "share":
        figures = f"{verdict.before * 100:.0f}% -> {verdict.after * 100:.0f}% of quota"
    else:
        figures = f"{verdict.before:.1f} -> {verdict.after:.1f} GPU-h"
    return f"{verdict.aspect} {verdict.word} ({figures})"

"""`whatif --sweep`: one team's quota, borrowing limit or lending limit set to each of several values, the trace
replayed once per value on the virtual engine, and the smallest value that meets the admin's target.

The spelling: `TEAM.GPUTYPE.FIELD=START:STOP:STEP` (or `=V1,V2,...`), FIELD one of quota, borrowLimit, lendLimit,
as config.yaml spells them; a target `TEAM.p50=DURATION` or `TEAM.p95=DURATION` (`1h`, `30m`, `90s`). Each value
is a config of its own, checked as `validate` checks it before any replay.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from konduktor.config.model import duration_seconds
from konduktor.errors import UsageError
from konduktor.whatif.metrics import Result

FIELDS = ("quota", "borrowLimit", "lendLimit")
_SPEC = re.compile(r"^(?P<team>[^.=]+)\.(?P<gpu>[^.=]+)\.(?P<field>[A-Za-z]+)=(?P<values>.+)$")
_TARGET = re.compile(r"^(?P<team>[^.=]+)\.(?P<figure>p50|p95)=(?P<limit>.+)$")


@dataclass(frozen=True)
class Sweep:
    team: str
    gpu_type: str
    field: str
    values: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.team}.{self.gpu_type}.{self.field}"


@dataclass(frozen=True)
class Target:
    team: str
    figure: str  # p50 or p95
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.team}.{self.figure}"


def parse_sweep(text: str) -> Sweep:
    match = _SPEC.match(text.strip())
    if match is None or match["field"] not in FIELDS:
        raise UsageError(
            f"--sweep {text}: expected TEAM.GPUTYPE.FIELD=START:STOP:STEP or =V1,V2,...",
            hint=f"FIELD is one of {', '.join(FIELDS)}, e.g. --sweep team-a.h100.quota=16:32:4",
        )
    values = _values(text, match["values"])
    return Sweep(match["team"], match["gpu"], match["field"], values)


def _values(text: str, spelled: str) -> tuple[int, ...]:
    try:
        if ":" in spelled:
            start, stop, step = (int(part) for part in spelled.split(":"))
            if step <= 0 or stop < start:
                raise ValueError
            values = tuple(range(start, stop + 1, step))
        else:
            values = tuple(sorted({int(part) for part in spelled.split(",")}))
    except ValueError:
        raise UsageError(
            f"--sweep {text}: {spelled!r} is not START:STOP:STEP (whole numbers, STOP >= START, STEP > 0) "
            "nor a list of whole numbers",
            hint="e.g. 16:32:4 or 16,24,32",
        ) from None
    if not values or min(values) < 0 or len(values) > 50:
        raise UsageError(f"--sweep {text}: between 1 and 50 values >= 0", hint="e.g. 16:32:4")
    return values


def parse_target(text: str) -> Target:
    match = _TARGET.match(text.strip())
    seconds = duration_seconds(match["limit"]) if match else 0.0
    if match is None or seconds <= 0:
        raise UsageError(
            f"--target {text}: expected TEAM.p50=DURATION or TEAM.p95=DURATION", hint="e.g. --target team-a.p95=1h"
        )
    return Target(match["team"], match["figure"], seconds)


def variant(config_text: str, sweep: Sweep, value: int) -> str:
    """The config with the swept field set to `value` (comments and layout kept)."""
    yaml = YAML()
    data: Any = yaml.load(config_text)
    try:
        limits = data["teams"][sweep.team]["gpus"][sweep.gpu_type]
    except (KeyError, TypeError):
        raise UsageError(
            f"--sweep {sweep.name}: the config has no teams.{sweep.team}.gpus.{sweep.gpu_type}",
            hint="name a team and a GPU type of the config",
        ) from None
    limits[sweep.field] = value
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def write_variants(config: Path, sweep: Sweep, folder: Path) -> list[Path]:
    """One config file per swept value, in `folder`, named after the value (they are shown by name)."""
    text = config.read_text()
    paths = []
    for value in sweep.values:
        path = folder / f"{sweep.name}={value}.yaml"
        path.write_text(variant(text, sweep, value))
        paths.append(path)
    return paths


def smallest_meeting(points: list[tuple[int, float | None]], target: Target) -> int | None:
    """The smallest swept value whose figure meets the target (None: no value does)."""
    meeting = [value for value, figure in points if figure is not None and figure <= target.seconds]
    return min(meeting) if meeting else None


def sweep_rows(sweep: Sweep, points: list[tuple[int, Result]], target: Target | None) -> list[dict[str, str]]:
    """A row per value and team: the waits and the use of quota; the smallest value meeting the target marked."""
    best = smallest_meeting(_figures(points, target), target) if target else None
    rows = []
    for value, result in points:
        for team, answer in sorted(result.teams.items()):
            rows.append(
                {
                    sweep.field: str(value),
                    "team": team,
                    "wait p50": _minutes(answer.wait_p50),
                    "wait p95": _minutes(answer.wait_p95),
                    "utilisation": "-" if answer.utilisation is None else f"{answer.utilisation * 100:.0f}%",
                    "target": "smallest meeting it" if value == best and target and team == target.team else "",
                }
            )
    return rows


def sweep_columns(sweep: Sweep) -> list[str]:
    return [sweep.field, "team", "wait p50", "wait p95", "utilisation", "target"]


def sweep_document(sweep: Sweep, points: list[tuple[int, Result]], target: Target | None) -> dict[str, Any]:
    """`whatif --sweep -o json`."""
    document: dict[str, Any] = {
        "sweep": {"team": sweep.team, "gpu_type": sweep.gpu_type, "field": sweep.field, "values": list(sweep.values)},
        "points": [
            {
                "value": value,
                "teams": {
                    team: {"wait_p50": a.wait_p50, "wait_p95": a.wait_p95, "utilisation": a.utilisation}
                    for team, a in sorted(result.teams.items())
                },
            }
            for value, result in points
        ],
    }
    if target is not None:
        document["target"] = {
            "team": target.team,
            "figure": target.figure,
            "seconds": target.seconds,
            "smallest": smallest_meeting(_figures(points, target), target),
        }
    return document


def _figures(points: list[tuple[int, Result]], target: Target | None) -> list[tuple[int, float | None]]:
    if target is None:
        return []
    figures = []
    for value, result in points:
        answer = result.teams.get(target.team)
        figure = None if answer is None else (answer.wait_p50 if target.figure == "p50" else answer.wait_p95)
        figures.append((value, figure))
    return figures


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min"

"""The trace format: the jobs a what-if replays, read from CSV or JSON Lines.

One job a row (CSV, with a header) or a line (JSON Lines, one object each), with these fields:

| field          | required | meaning                                                                 |
| -------------- | -------- | ----------------------------------------------------------------------- |
| `submit`       | yes      | seconds after the trace's start (a number), or an ISO-8601 time with a  |
|                |          | zone (`2026-05-01T09:00:00Z`); times are made relative to the earliest  |
| `duration`     | yes      | seconds the job runs once all its pods run (> 0)                        |
| `team`         | yes      | a team of the config, or one of its namespaces                          |
| `pods`         | no       | pods of the job, all needed at once (default 1)                         |
| `gpus_per_pod` | yes      | GPUs each pod asks for (>= 1)                                           |
| `gpu_type`     | no       | a `gpuTypes` key of the config; empty: Kueue picks a flavor             |
| `priority`     | no       | a priority class of the config; empty: the config's default             |
| `name`         | no       | a name for reports (default `job-<line>`)                               |
| `gpu_fraction` | no       | part of one GPU each pod needs, > 0 and < 1 (`gpus_per_pod` 1): the     |
|                |          | replay asks for the smallest slice of the config that covers it, or a   |
|                |          | whole GPU when none does (konduktor.whatif.slices)                      |

Every bad row is reported at once with its `file:line` and field, as a config error is (exit 2).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from konduktor.config.findings import ConfigError, Finding, error
from konduktor.config.model import Config

FIELDS = ("submit", "duration", "team", "pods", "gpus_per_pod", "gpu_type", "priority", "name", "gpu_fraction")
REQUIRED = ("submit", "duration", "team", "gpus_per_pod")
MAX_ERRORS = 50  # a file of the wrong kind reports the first ones, not thousands


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace: when it is submitted (seconds from the trace's start), for how long it runs, where."""

    name: str
    submit: float
    duration: float
    team: str
    pods: int
    gpus_per_pod: int
    gpu_type: str | None = None
    priority: str | None = None
    line: int = field(default=0, compare=False)  # where the job is in its file, for errors against a config
    gpu_fraction: float | None = None  # part of one GPU each pod needs (the trace's); None: gpus_per_pod whole GPUs
    # What the replay of one config asks for instead of whole GPUs (konduktor.whatif.slices.assign): a shared
    # resource (nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared), the part of a GPU one unit of it is, and the sharing
    # group whose nodes the pods must land on (None: any that advertises the resource).
    resource: str | None = None
    share: float = 1.0
    group: str | None = None

    @property
    def gpus(self) -> float:
        """The GPUs the job holds: a slice counts as its part of a GPU."""
        return self.pods * self.share if self.resource is not None else self.pods * self.gpus_per_pod

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.duration / 3600

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("line")
        return data


class _RowError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def load_trace(path: Path) -> list[TraceJob]:
    """The jobs of a trace file (`.csv`, or `.jsonl`/`.ndjson`/`.json` lines), sorted by submit time.

    Raises ConfigError (exit 2) naming every bad row's file:line and field."""
    jobs, findings = read_trace(path)
    if findings:
        raise ConfigError(str(path), findings)
    return jobs


def read_trace(path: Path) -> tuple[list[TraceJob], list[Finding]]:
    """The jobs of the trace's good rows, and what is wrong with the others (a file that cannot be read raises)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as problem:
        raise ConfigError(str(path), [error("trace", (), f"cannot read the trace: {problem}")]) from problem
    rows = _jsonl_rows(text) if path.suffix.lower() in (".jsonl", ".ndjson", ".json") else _csv_rows(text)
    return _parse(rows)


def parse_rows(filename: str, rows: Iterable[tuple[int, dict[str, Any] | str]]) -> list[TraceJob]:
    """Rows (line, fields; or line, a message for a row that is not one) -> jobs, or one ConfigError for all."""
    jobs, findings = _parse(rows)
    if findings:
        raise ConfigError(filename, findings)
    return jobs


def _parse(rows: Iterable[tuple[int, dict[str, Any] | str]]) -> tuple[list[TraceJob], list[Finding]]:
    """The jobs of the good rows, sorted by submit time, and a finding for each bad row."""
    findings: list[Finding] = []
    raw: list[tuple[int, TraceJob, datetime | None]] = []
    names: dict[str, int] = {}
    for line, row in rows:
        if len(findings) >= MAX_ERRORS:
            break
        if isinstance(row, str):
            findings.append(_at(line, error("trace", (), row)))
            continue
        try:
            job, absolute = _job(line, row)
        except _RowError as problem:
            findings.append(_at(line, error("trace", (problem.field,), str(problem))))
            continue
        if job.name in names:
            findings.append(_at(line, error("trace", ("name",), f"{job.name!r} is also on line {names[job.name]}")))
            continue
        names[job.name] = line
        raw.append((line, job, absolute))
    if not findings and not raw:
        findings.append(error("trace", (), "the trace has no jobs"))
    kinds = {absolute is None for _, _, absolute in raw}
    if len(kinds) > 1:
        line = next(line for line, _, absolute in raw if (absolute is None) != (raw[0][2] is None))
        findings.append(
            _at(line, error("trace", ("submit",), "mixes seconds and ISO times: use one kind in the whole trace"))
        )
    if not raw or len(kinds) > 1:
        return [], findings
    if raw[0][2] is not None:
        start = min(absolute for _, _, absolute in raw if absolute is not None)
        jobs = [_shifted(job, (absolute - start).total_seconds()) for _, job, absolute in raw if absolute is not None]
    else:
        start_seconds = min(job.submit for _, job, _ in raw)
        jobs = [_shifted(job, job.submit - start_seconds) for _, job, _ in raw]
    return sorted(jobs, key=lambda job: (job.submit, job.name)), findings


def _shifted(job: TraceJob, submit: float) -> TraceJob:
    return replace(job, submit=submit)


def _at(line: int, finding: Finding) -> Finding:
    return Finding(finding.rule, finding.severity, finding.path, finding.message, finding.hint, line)


def _csv_rows(text: str) -> Iterator[tuple[int, dict[str, Any] | str]]:
    reader = csv.reader(text.splitlines())
    header: list[str] | None = None
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [cell.strip().lower() for cell in row]
            unknown = [cell for cell in header if cell not in FIELDS]
            missing = [name for name in REQUIRED if name not in header]
            if unknown or missing:
                parts = [f"unknown column {c!r}" for c in unknown] + [f"missing column {m!r}" for m in missing]
                yield line, f"header: {'; '.join(parts)} (columns: {', '.join(FIELDS)})"
                return
            continue
        if len(row) != len(header):
            yield line, f"{len(row)} cells, the header has {len(header)}"
            continue
        yield line, {name: cell.strip() for name, cell in zip(header, row, strict=True) if cell.strip() != ""}


def _jsonl_rows(text: str) -> Iterator[tuple[int, dict[str, Any] | str]]:
    for line, content in enumerate(text.splitlines(), start=1):
        if not content.strip():
            continue
        try:
            value = json.loads(content)
        except ValueError as problem:
            yield line, f"not JSON: {problem}"
            continue
        if not isinstance(value, dict):
            yield line, "each line must be a JSON object"
            continue
        unknown = [key for key in value if key not in FIELDS]
        if unknown:
            yield line, f"unknown field {unknown[0]!r} (fields: {', '.join(FIELDS)})"
            continue
        yield line, {key: item for key, item in value.items() if item is not None and item != ""}


def _job(line: int, row: dict[str, Any]) -> tuple[TraceJob, datetime | None]:
    for name in REQUIRED:
        if name not in row:
            raise _RowError(name, "missing")
    submit, absolute = _submit(row["submit"])
    duration = _number(row, "duration")
    if duration <= 0:
        raise _RowError("duration", f"must be > 0 seconds, not {row['duration']}")
    pods = _count(row, "pods", 1)
    gpus = _count(row, "gpus_per_pod", None)
    fraction = _fraction(row, gpus)
    return (
        TraceJob(
            name=_text(row, "name") or f"job-{line}",
            submit=submit,
            duration=duration,
            team=_text(row, "team") or "",
            pods=pods,
            gpus_per_pod=gpus,
            gpu_type=_text(row, "gpu_type"),
            priority=_text(row, "priority"),
            line=line,
            gpu_fraction=fraction,
        ),
        absolute,
    )


def _submit(value: Any) -> tuple[float, datetime | None]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        text = str(value)
        try:
            number = float(text)
        except ValueError:
            return 0.0, _moment(text)
    if not math.isfinite(number) or number < 0:
        raise _RowError("submit", f"must be seconds >= 0, not {value}")
    return number, None


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise _RowError("submit", f"{text!r} is neither seconds nor an ISO-8601 time") from None
    if moment.tzinfo is None:
        raise _RowError("submit", f"{text!r} has no time zone (add Z or +00:00)")
    return moment


def _number(row: dict[str, Any], name: str) -> float:
    value = row[name]
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        raise _RowError(name, f"{value!r} is not a number of seconds") from None
    if not math.isfinite(number):
        raise _RowError(name, f"{value!r} is not a number of seconds")
    return number


def _count(row: dict[str, Any], name: str, default: int | None) -> int:
    if name not in row:
        assert default is not None
        return default
    value = row[name]
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        raise _RowError(name, f"{value!r} is not a whole number") from None
    if not number.is_integer() or number < 1:
        raise _RowError(name, f"must be a whole number >= 1, not {value}")
    return int(number)


def _fraction(row: dict[str, Any], gpus_per_pod: int) -> float | None:
    if "gpu_fraction" not in row:
        return None
    value = row["gpu_fraction"]
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        raise _RowError("gpu_fraction", f"{value!r} is not a number") from None
    if not 0 < number < 1:
        raise _RowError("gpu_fraction", f"must be > 0 and < 1 (part of one GPU), not {value}")
    if gpus_per_pod != 1:
        raise _RowError("gpu_fraction", f"a pod asks for part of one GPU: gpus_per_pod must be 1, not {gpus_per_pod}")
    return number


def _text(row: dict[str, Any], name: str) -> str | None:
    value = row.get(name)
    return None if value is None else str(value).strip() or None


def write_csv(jobs: Iterable[TraceJob], handle: Any) -> None:
    """Jobs in the trace's CSV form (what the importers write); the gpu_fraction column only when a job has one."""
    listed = list(jobs)
    fractions = any(job.gpu_fraction is not None for job in listed)
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(FIELDS if fractions else FIELDS[:-1])
    for job in listed:
        row: list[Any] = [
            _seconds_text(job.submit),
            _seconds_text(job.duration),
            job.team,
            job.pods,
            job.gpus_per_pod,
            job.gpu_type or "",
            job.priority or "",
            job.name,
        ]
        if fractions:
            row.append("" if job.gpu_fraction is None else f"{job.gpu_fraction:g}")
        writer.writerow(row)


def _seconds_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


def against(jobs: Iterable[TraceJob], config: Config) -> tuple[list[TraceJob], list[Finding]]:
    """The jobs with each team given as the config's team name, and a finding for every team, GPU type or
    priority the config does not have, with a hint naming what it has."""
    namespaces = {ns: name for name, team in config.teams.items() for ns in team.namespaces}
    hints = {
        "team": f"the config's teams: {', '.join(config.teams)}; their namespaces: {', '.join(namespaces)}",
        "gpu_type": f"the config's gpuTypes: {', '.join(config.gpu_types)}",
        "priority": f"the config's priorities: {', '.join(config.priorities) or 'none'}",
    }
    findings: list[Finding] = []
    checked = []
    for job in jobs:
        team = job.team if job.team in config.teams else namespaces.get(job.team)
        problems = []
        if team is None:
            problems.append(("team", f"{job.team!r} is neither a team nor a namespace of the config"))
        if job.gpu_type is not None and job.gpu_type not in config.gpu_types:
            problems.append(("gpu_type", f"{job.gpu_type!r} is not one of the config's gpuTypes"))
        if job.priority is not None and job.priority not in config.priorities:
            problems.append(("priority", f"{job.priority!r} is not one of the config's priorities"))
        for name, message in problems:
            findings.append(Finding("trace", "error", (name,), message, hints[name], job.line or None))
        if team is not None:
            checked.append(replace(job, team=team))
        if len(findings) >= MAX_ERRORS:
            break
    return checked, findings

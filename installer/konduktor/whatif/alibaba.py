"""Importer for the Alibaba GPU cluster trace v2023 (`cluster-trace-gpu-v2023/csv/openb_pod_list_*.csv` in
alibaba/clusterdata): its tasks as trace jobs.

Its columns: name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time,
deletion_time, scheduled_time (times in seconds). The mapping rule:

- a task is a one-pod job; tasks without GPUs (num_gpu 0) are left out;
- `submit` is creation_time; `duration` is deletion_time - scheduled_time (what it held once placed); a task
  never scheduled (empty scheduled_time, phase Pending) or with no run time is left out;
- GPUs per pod: num_gpu; a GPU-sharing task (num_gpu 1, gpu_milli < 1000) keeps its part of a GPU as the trace's
  `gpu_fraction` (gpu_milli / 1000): the replay asks for the smallest slice of the config's sharing that covers it,
  or a whole GPU when the config has none (konduktor.whatif.slices);
- the team: the trace names no users, so each task goes to one of the given teams by a stable hash of its
  name (CRC-32 of the name, modulo the number of teams): the same file always gives the same split;
- the priority class: from the task's QoS, by the given mapping (default: LS, Guaranteed and Burstable ->
  `standard`, BE -> `opportunistic`);
- `gpu_spec` (Alibaba's GPU models, e.g. `V100M16|V100M32`) is dropped: the config's GPU types are others.

Failed tasks are kept: they held their GPUs until deleted.
"""

from __future__ import annotations

import csv
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from konduktor.config.findings import ConfigError, Finding, error
from konduktor.whatif.trace import MAX_ERRORS, TraceJob

COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
DEFAULT_PRIORITIES = {"LS": "standard", "Guaranteed": "standard", "Burstable": "standard", "BE": "opportunistic"}


@dataclass(frozen=True)
class Imported:
    jobs: list[TraceJob]
    without_gpus: int  # tasks left out: no GPU
    never_ran: int  # tasks left out: never scheduled, or no run time


def team_of(name: str, teams: Sequence[str]) -> str:
    return teams[zlib.crc32(name.encode()) % len(teams)]


def import_alibaba(path: Path, teams: Sequence[str], priorities: Mapping[str, str] | None = None) -> Imported:
    """The GPU tasks of an openb_pod_list CSV as trace jobs; bad rows are a ConfigError (exit 2) with file:line."""
    if not teams:
        raise ConfigError(str(path), [error("alibaba", (), "give at least one team to map tasks to")])
    classes = dict(DEFAULT_PRIORITIES if priorities is None else priorities)
    findings: list[Finding] = []
    jobs: list[TraceJob] = []
    without_gpus = never_ran = 0
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as problem:
        raise ConfigError(str(path), [error("alibaba", (), f"cannot read: {problem}")]) from problem
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None or [cell.strip() for cell in header] != list(COLUMNS):
        raise ConfigError(
            str(path),
            [Finding("alibaba", "error", (), f"the header must be {','.join(COLUMNS)}", None, 1)],
        )
    for row in reader:
        line = reader.line_num
        if len(findings) >= MAX_ERRORS:
            break
        if not row:
            continue
        if len(row) != len(COLUMNS):
            findings.append(Finding("alibaba", "error", (), f"{len(row)} cells, not {len(COLUMNS)}", None, line))
            continue
        cells = dict(zip(COLUMNS, (cell.strip() for cell in row), strict=True))
        try:
            gpus = _whole(cells, "num_gpu")
            milli = _whole(cells, "gpu_milli") if cells["gpu_milli"] else 1000
            created = _whole(cells, "creation_time")
            deleted = _whole(cells, "deletion_time")
            scheduled = _whole(cells, "scheduled_time") if cells["scheduled_time"] else None
        except ValueError as problem:
            findings.append(Finding("alibaba", "error", (str(problem.args[1]),), str(problem.args[0]), None, line))
            continue
        if gpus == 0:
            without_gpus += 1
            continue
        if scheduled is None or deleted <= scheduled:
            never_ran += 1
            continue
        qos = cells["qos"]
        if qos not in classes:
            findings.append(
                Finding(
                    "alibaba",
                    "error",
                    ("qos",),
                    f"{qos!r} has no priority class (known: {', '.join(classes)})",
                    None,
                    line,
                )
            )
            continue
        jobs.append(
            TraceJob(
                name=cells["name"] or f"task-{line}",
                submit=float(created),
                duration=float(deleted - scheduled),
                team=team_of(cells["name"], teams),
                pods=1,
                gpus_per_pod=gpus,
                priority=classes[qos],
                line=line,
                gpu_fraction=milli / 1000 if gpus == 1 and 0 < milli < 1000 else None,
            )
        )
    if findings:
        raise ConfigError(str(path), findings)
    if jobs:
        start = min(job.submit for job in jobs)
        jobs = sorted(
            (replace(j, submit=j.submit - start, line=0) for j in jobs), key=lambda job: (job.submit, job.name)
        )
    return Imported(jobs, without_gpus, never_ran)


def _whole(cells: Mapping[str, str], name: str) -> int:
    text = cells[name]
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number", name) from None
    if value < 0:
        raise ValueError(f"must be >= 0, not {value}", name)
    return value

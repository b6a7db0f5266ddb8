"""`whatif`: load a config (and another to compare), load the trace, replay it on each, and measure."""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from konduktor.config.findings import ConfigError, Finding
from konduktor.config.load import load_config
from konduktor.config.model import Config, GpuQuota, Team
from konduktor.errors import UsageError
from konduktor.sim.kueue import crds as kueue_crds
from konduktor.tools.gobuild import module_dir
from konduktor.tools.toolbox import Toolbox
from konduktor.whatif.metrics import Answer, Result, measure
from konduktor.whatif.replay import DEFAULT_SPEEDUP, Progress, Replay, replay
from konduktor.whatif.report import Replayed, render
from konduktor.whatif.slices import assign
from konduktor.whatif.sweep import Sweep, write_variants
from konduktor.whatif.trace import MAX_ERRORS, TraceJob, against, read_trace
from konduktor.whatif.verdict import shown as shown_verdict
from konduktor.whatif.verdict import verdicts
from konduktor.whatif.virtual import replay_virtual

Engine = Literal["virtual", "cluster"]
# The figures of the answer, in table order: (key, label, how to show it).
FIGURES: tuple[tuple[str, str, str], ...] = (
    ("jobs", "jobs", "int"),
    ("finished", "finished", "int"),
    ("unfinished", "unfinished", "int"),
    ("gpu_hours", "GPU-hours held", "float"),
    ("useful_gpu_hours", "GPU-hours of finished runs", "float"),
    ("wait_p50", "wait p50", "duration"),
    ("wait_p95", "wait p95", "duration"),
    ("wait_max", "wait max", "duration"),
    ("preemptions", "preemptions", "int"),
    ("lost_gpu_hours", "GPU-hours lost to preemption", "float"),
    ("borrowed_gpu_hours", "borrowed GPU-hours", "float"),
    ("lent_gpu_hours", "lent GPU-hours", "float"),
    ("utilisation", "utilisation (of quota)", "percent"),
    ("wait_quota", "job-hours waiting for quota", "float"),
    ("wait_fragmentation", "job-hours waiting for a node (fragmentation)", "float"),
)


@dataclass
class Run:
    config_path: Path
    config: Config
    replay: Replay
    result: Result


def quotas_of(config: Config) -> tuple[dict[str, float], dict[str, float], int]:
    """Each team's nominal GPUs, the GPUs it may lend, and the cluster's GPUs (its shared ones too). A slice quota
    counts as its part of a GPU (SharingGroup.fraction), as the slices held do."""
    groups = {name: group for name, _, _, group in config.sharing_groups()}

    def lends(q: GpuQuota) -> int:
        return q.quota if q.lend_limit is None else min(q.lend_limit, q.quota)

    def in_gpus(team: Team, amount: Callable[[GpuQuota], int]) -> float:
        whole = sum(amount(q) for q in team.gpus.values())
        sliced = sum(
            (
                groups[group].fraction(f"nvidia.com/{resource}") * amount(q)
                for group, quotas in team.slices.items()
                for resource, q in quotas.items()
            ),
            Fraction(0),
        )
        return whole if not sliced else float(whole + sliced)

    quotas = {name: in_gpus(team, lambda q: q.quota) for name, team in config.teams.items()}
    lendable = {name: in_gpus(team, lends) for name, team in config.teams.items()}
    return quotas, lendable, sum(t.nodes * t.gpus_per_node for t in config.gpu_types.values())


def load(
    config_path: Path, trace_path: Path, trace: tuple[list[TraceJob], list[Finding]] | None = None
) -> tuple[Config, list[TraceJob]]:
    """The config and the trace's jobs checked against it, each part of a GPU given the config's slice for it
    (konduktor.whatif.slices.assign): every error of the trace, of its form or against the
    config, exits 2 with its file:line, all in one report. `trace`: what `read_trace` read of it already, when
    several configs are checked against one trace."""
    config = load_config(config_path).config
    jobs, findings = trace if trace is not None else read_trace(trace_path)
    checked, mismatches = against(jobs, config)
    findings = sorted([*findings, *mismatches], key=lambda finding: finding.line or 0)[:MAX_ERRORS]
    if findings:
        raise ConfigError(str(trace_path), findings)
    return config, assign(config, checked)


def load_all(config_paths: list[Path], trace_path: Path) -> list[tuple[Config, list[TraceJob]]]:
    """Every config, and the trace (read once) checked against each, before any replay."""
    trace = read_trace(trace_path)
    return [load(path, trace_path, trace) for path in config_paths]


def run_one(
    config_path: Path,
    trace_path: Path,
    engine: Engine = "virtual",
    speedup: float = DEFAULT_SPEEDUP,
    horizon: float | None = None,
    progress: Callable[[Progress], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> Run:
    """One config's replay of the trace on the engine named: `virtual` (Kueue's own code on virtual time, the
    default) or `cluster` (a simulated cluster in wall-clock time at `speedup`)."""
    config, jobs = load(config_path, trace_path)
    return run_loaded(config_path, config, jobs, engine, speedup, horizon, progress, say)


def run_loaded(
    config_path: Path,
    config: Config,
    jobs: list[TraceJob],
    engine: Engine = "virtual",
    speedup: float = DEFAULT_SPEEDUP,
    horizon: float | None = None,
    progress: Callable[[Progress], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> Run:
    """The replay of jobs already checked against the config (a sweep replays one trace against many)."""
    if engine == "virtual":
        binary, crds = virtual_engine(say)
        replayed = replay_virtual(config, jobs, binary, crds, horizon, say, progress=progress)
    else:
        replayed = replay(config, jobs, speedup, horizon, progress, say)
    return Run(config_path, config, replayed, measured(config, jobs, replayed))


def measured(config: Config, jobs: list[TraceJob], replayed: Replay) -> Result:
    """The answer of a replay of the config's quotas."""
    quotas, lendable, gpus = quotas_of(config)
    return measure(jobs, replayed.events, replayed.end, quotas, lendable, gpus)


def virtual_engine(say: Callable[[str], None] | None = None) -> tuple[Path, list[dict[str, Any]]]:
    """The engine's binary (built on first use into the tool cache) and the CRDs of the pinned Kueue."""
    toolbox = Toolbox(progress=say)
    return toolbox.path("whatif-engine"), kueue_crds(module_dir(toolbox.tools["kueue"]))


def figure(answer: Answer, key: str) -> float | None:
    if key.startswith("wait_") and key.removeprefix("wait_") in answer.wait_hours:
        return answer.wait_hours[key.removeprefix("wait_")]
    value = getattr(answer, key)
    return None if value is None else float(value)


def shown(value: float | None, kind: str) -> str:
    if value is None:
        return "-"
    value = value + 0.0  # -0.0 is 0
    if kind == "int":
        return str(round(value))
    if kind == "percent":
        return f"{value * 100:.0f}%"
    if kind == "duration":  # minutes, as the report's charts
        return f"{value / 60:.1f} min"
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


def rows(runs: list[Run]) -> list[dict[str, str]]:
    """Table rows: one per team and figure (and the cluster's), a column per config, and the difference."""
    scopes = [*sorted({team for run in runs for team in run.result.teams}), "cluster"]
    table = []
    for scope in scopes:
        for key, label, kind in FIGURES:
            row = {"scope": scope, "figure": label}
            values = []
            for index, run in enumerate(runs):
                answer = run.result.cluster if scope == "cluster" else run.result.teams.get(scope)
                value = figure(answer, key) if answer is not None else None
                values.append(value)
                row[_column(runs, index)] = shown(value, kind)
            if len(runs) == 2:
                before, after = values
                row["difference"] = shown(after - before, kind) if before is not None and after is not None else "-"
            table.append(row)
    return table


def _column(runs: list[Run], index: int) -> str:
    names = [run.config_path.name for run in runs]
    return names[index] if len(set(names)) == len(names) else str(runs[index].config_path)


def columns(runs: list[Run]) -> list[str]:
    return [
        "scope",
        "figure",
        *[_column(runs, i) for i in range(len(runs))],
        *(["difference"] if len(runs) == 2 else []),
    ]


def document(runs: list[Run]) -> dict[str, Any]:
    """`whatif -o json`: one entry per config, in the order given. The same inputs give the same bytes on the
    virtual engine (how long the replay took is said on stderr, not here)."""
    return {
        "configs": [
            {
                "config": str(run.config_path),
                "engine": "cluster" if run.replay.speedup else "virtual",
                **({"speedup": run.replay.speedup, "scaled": run.replay.scaled} if run.replay.speedup else {}),
                "limits": run.replay.limits,
                "jobs": job_rows(run),
                **run.result.as_json(),
            }
            for run in runs
        ],
        **({"verdicts": [v.as_json() for v in verdicts(runs[0].result, runs[1].result)]} if len(runs) == 2 else {}),
    }


def verdict_lines(runs: list[Run]) -> list[str]:
    """The comparison's short answer, a line per team: the second config against the first."""
    if len(runs) != 2:
        return []
    by_team: dict[str, list[str]] = {}
    for verdict in verdicts(runs[0].result, runs[1].result):
        by_team.setdefault(verdict.team, []).append(shown_verdict(verdict))
    return [f"{team}: {'; '.join(said)}" for team, said in by_team.items()]


def job_rows(run: Run) -> list[dict[str, Any]]:
    """What happened to each job: submitted, first admitted, finished (trace seconds), evictions."""
    seen: dict[str, dict[str, Any]] = {}
    for event in sorted(run.replay.events, key=lambda e: e.time):
        row = seen.setdefault(event.job, {"job": event.job, "evictions": 0, "events": []})
        row["events"].append([round(event.time, 1), event.kind, *([event.detail] if event.detail else [])])
        if event.kind == "evicted":
            row["evictions"] += 1
        if event.kind in ("submitted", "admitted", "finished"):
            row.setdefault(event.kind, round(event.time, 1))
    return list(seen.values())


def run_all(
    config_paths: list[Path],
    loaded: list[tuple[Config, list[TraceJob]]],
    engine: Engine = "virtual",
    speedup: float = DEFAULT_SPEEDUP,
    horizon: float | None = None,
    progress: Callable[[Progress], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> list[Run]:
    """Each config's replay of the trace. On the virtual engine the replays run at once, as many as the machine
    has cores (each is a process of its own, and one replay uses about one core), their progress shown as one; on
    the cluster engine one after another, each on a new simulated cluster."""
    if engine != "virtual":
        return [
            run_loaded(path, config, jobs, engine, speedup, horizon, progress, say)
            for path, (config, jobs) in zip(config_paths, loaded, strict=True)
        ]
    binary, crds = virtual_engine(say)
    together = _Together(len(loaded), progress)

    def replayed(index: int) -> Run:
        config, jobs = loaded[index]
        replay = replay_virtual(config, jobs, binary, crds, horizon, say, progress=together.part(index))
        return Run(config_paths[index], config, replay, measured(config, jobs, replay))

    with ThreadPoolExecutor(max_workers=max(1, min(len(loaded), os.cpu_count() or 1))) as pool:
        return list(pool.map(replayed, range(len(loaded))))


class _Together:
    """The progress of replays running at once, as one replay's: their jobs done added up, the trace time of the
    one furthest behind, final when every one is."""

    def __init__(self, count: int, progress: Callable[[Progress], None] | None) -> None:
        self.parts: list[Progress | None] = [None] * count
        self.progress = progress
        self.lock = threading.Lock()

    def part(self, index: int) -> Callable[[Progress], None] | None:
        progress = self.progress
        if progress is None:
            return None

        def told(step: Progress) -> None:
            with self.lock:
                self.parts[index] = step
                steps = [part for part in self.parts if part is not None]
                final = len(steps) == len(self.parts) and all(part.final for part in steps)
                combined = Progress(
                    replayed=min(part.replayed for part in steps),
                    done=sum(part.done for part in steps),
                    total=sum(part.total for part in steps),
                    eta=0.0 if final else None,
                    final=final,
                )
                progress(combined)

        return told


def report(runs: list[Run], trace: Path) -> str:
    """`whatif --report`: the page of the runs, their columns named as in the table."""
    replayed = [Replayed(_column(runs, index), run.result) for index, run in enumerate(runs)]
    return render(replayed, str(trace), rows(runs), columns(runs))


def run_sweep(
    config_path: Path,
    trace_path: Path,
    sweep: Sweep,
    horizon: float | None = None,
    say: Callable[[str], None] | None = None,
) -> list[tuple[int, Result]]:
    """The trace replayed on the virtual engine once per swept value, as many at once as the machine has cores;
    every value's config is checked before any replay."""
    trace = read_trace(trace_path)  # once, checked against each value's config
    with tempfile.TemporaryDirectory(prefix="konduktor-sweep-") as scratch:
        paths = write_variants(config_path, sweep, Path(scratch))
        loaded = []
        for value, path in zip(sweep.values, paths, strict=True):
            try:
                loaded.append(load(path, trace_path, trace))
            except ConfigError as problem:
                first = next(finding for finding in problem.findings if finding.is_error)
                raise UsageError(
                    f"--sweep {sweep.name}={value}: the config it makes is not valid: {first.message}",
                    hint=first.hint or "sweep values the config allows",
                ) from None
    runs = run_all(paths, loaded, horizon=horizon, say=say)
    return [(value, run.result) for value, run in zip(sweep.values, runs, strict=True)]

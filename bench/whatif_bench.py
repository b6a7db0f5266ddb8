"""What-if replay speed: a 14-day trace of 2,000 jobs on examples/config.yaml's 40 GPUs, and (with --large) 10,000
jobs of 20 teams on 1,000 nodes; wall time by phase (cluster start, replay), jobs finished, per-team p50 waits,
and how far each job's held time exceeds its duration (the control plane's latency x the speedup).

    .venv/bin/python bench/whatif_bench.py [--engine virtual|cluster] [--speedup N] [--jobs 2000] [--days 14]
        [--horizon S] [--large]

The virtual engine (the default) reports its wall time, the engine's peak memory and the cost per event.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import resource
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from konduktor.paths import product_dir
from konduktor.whatif.replay import Progress
from konduktor.whatif.run import Run, run_one
from konduktor.whatif.trace import TraceJob, write_csv

EXAMPLE = product_dir("examples") / "config.yaml"
SHAPES = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8)]  # (pods, GPUs per pod), drawn with WEIGHTS
WEIGHTS = [40, 25, 20, 12, 3]


class CpuSampler:
    """CPU seconds of every process of the replay's simulated cluster, by program (kube-apiserver, etcd, kueue, kwok,
    ...), read from /proc every 2 s while the replay runs: where the time goes. A process's last reading counts."""

    def __init__(self, state: str) -> None:
        self.marker = state
        self.seen: dict[int, tuple[str, float]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while not self.stop.wait(2):
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit() or int(entry.name) == os.getpid():
                    continue
                try:
                    args = (entry / "cmdline").read_bytes().split(b"\0")
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if any(self.marker.encode() in arg for arg in args):
                    program = Path(args[0].decode(errors="replace")).name
                    if program.startswith("python"):  # the sim's own agents and the platform's processes
                        named = [Path(a.decode()).name for a in args[1:] if a and not a.startswith(b"-")]
                        program = named[0] if named else program
                    self.seen[int(entry.name)] = (program, (int(fields[11]) + int(fields[12])) / tick)

    def __enter__(self) -> CpuSampler:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()

    def by_program(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for program, seconds in self.seen.values():
            totals[program] = totals.get(program, 0.0) + seconds
        return dict(sorted(totals.items(), key=lambda item: -item[1]))


def print_cpu(sampler: CpuSampler, submitted: int, wall: float) -> None:
    """Each program's CPU seconds, in all and per job submitted."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    cpu = {**sampler.by_program(), "replay driver (this process)": own.ru_utime + own.ru_stime}
    print(f"CPU seconds, {sum(cpu.values()):.0f} in all over {wall:.0f} s wall ({submitted} jobs submitted):")
    for program, seconds in cpu.items():
        print(f"  {program:<32} {seconds:7.0f} s  {1000 * seconds / max(submitted, 1):6.0f} ms per job")


def print_held(run: Run, trace: list[TraceJob], speedup: float) -> None:
    """How long each finished run held its GPUs beyond its duration (the cluster engine's control plane)."""
    finished = {e.job for e in run.replay.events if e.kind == "finished"}
    by_name = {job.name: job for job in trace}
    held = {}
    admitted: dict[str, float] = {}
    for event in sorted(run.replay.events, key=lambda e: e.time):
        if event.kind == "admitted":
            admitted[event.job] = event.time
        elif event.kind == "finished" and event.job in admitted:
            held[event.job] = event.time - admitted[event.job] - by_name[event.job].duration
    extra = sorted(held.values())
    if extra:
        print(
            f"held beyond duration (trace s): p50 {extra[len(extra) // 2]:.0f}, max {extra[-1]:.0f} "
            f"= {extra[len(extra) // 2] / speedup:.2f} s wall at p50; {len(finished)} finished runs"
        )


def print_engine(events: int, wall: float, days: float) -> None:
    """The virtual engine's cost: per event, its peak memory (it is this process's child), and the speed."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"virtual engine: {events} events, {1e6 * wall / max(events, 1):.0f} us wall per event, "
        f"{children.ru_maxrss / 1024:.0f} MiB peak RSS, {children.ru_utime + children.ru_stime:.0f} CPU s; "
        f"{days * 86400 / max(wall, 1e-9):.0f}x the trace's time"
    )


def synthetic(jobs: int, days: float, teams: list[str], gpus: int, load: float, seed: int) -> list[TraceJob]:
    """Poisson arrivals over `days`, job shapes as SHAPES, log-normal durations scaled so that the trace asks for
    `load` of the cluster's GPU-hours; teams drawn with Zipf-like weights (one team submits the most)."""
    rng = random.Random(seed)
    span = days * 86400
    mean_gpus = sum(p * g * w for (p, g), w in zip(SHAPES, WEIGHTS, strict=True)) / sum(WEIGHTS)
    mean_duration = load * gpus * span / jobs / mean_gpus
    team_weights = [1 / (rank + 1) for rank in range(len(teams))]
    submits = sorted(rng.uniform(0, span) for _ in range(jobs))
    result = []
    for index, submit in enumerate(submits):
        pods, per_pod = rng.choices(SHAPES, WEIGHTS)[0]
        duration = max(60.0, rng.lognormvariate(0, 1) * mean_duration / 1.6487)  # e^(1/2): the mean of LN(0, 1)
        team = rng.choices(teams, team_weights)[0]
        result.append(TraceJob(f"job-{index}", round(submit), round(duration), team, pods, per_pod))
    return result


def large_config(path: Path, nodes: int, teams: int) -> list[str]:
    data: dict[str, Any] = YAML(typ="safe").load(EXAMPLE.read_text())
    data["cluster"]["name"] = "whatif-bench"
    data["gpuTypes"]["h100"]["nodes"] = nodes
    data["gpuTypes"]["h100"]["gpusPerNode"] = 8
    share = nodes * 8 // teams
    names = [f"team-{i:02d}" for i in range(teams)]
    data["teams"] = {
        name: {
            "namespaces": [name],
            "fairShareWeight": 1,
            "gpus": {"h100": {"quota": share, "borrowLimit": share // 2, "lendLimit": share * 4 // 5}},
        }
        for name in names
    }
    data["alerts"]["routes"]["teams"] = {}
    out = io.StringIO()
    YAML(typ="safe").dump(data, out)
    path.write_text(out.getvalue())
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["virtual", "cluster"], default="virtual")
    parser.add_argument("--speedup", type=float, default=None, help="--engine cluster only")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--days", type=float, default=14)
    parser.add_argument("--load", type=float, default=0.7, help="the trace's GPU-hours / the cluster's")
    parser.add_argument("--large", action="store_true", help="1,000 nodes x 8 GPUs, 20 teams, 10,000 jobs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--horizon", type=float, default=None, help="trace seconds (default: the trace's days)")
    args = parser.parse_args()
    os.environ.setdefault("KONDUKTOR_STATE", tempfile.mkdtemp(prefix="konduktor-whatif-bench-"))
    work = Path(tempfile.mkdtemp(prefix="whatif-bench-"))
    if args.large:
        config = work / "config.yaml"
        teams, gpus, jobs = large_config(config, 1000, 20), 8000, args.jobs or 10_000
    else:
        config, teams, gpus, jobs = EXAMPLE, ["team-a", "team-b"], 40, args.jobs or 2000
    speedup = args.speedup or args.days * 86400 / 240  # the trace in 4 minutes, one for the cluster's start
    trace = synthetic(jobs, args.days, teams, gpus, args.load, args.seed)
    trace_path = work / "trace.csv"
    with trace_path.open("w") as handle:
        write_csv(trace, handle)
    print(
        f"trace: {jobs} jobs over {args.days:g} days, {sum(j.gpu_hours for j in trace):.0f} GPU-hours asked "
        f"of {gpus * args.days * 24:.0f}; {len(teams)} teams on {gpus} GPUs; "
        + (f"speedup {speedup:.0f}x" if args.engine == "cluster" else "virtual engine")
    )
    steps: list[str] = []
    last = [0.0]

    def progress(step: Progress) -> None:
        if time.monotonic() - last[0] >= 30 or step.final:
            last[0] = time.monotonic()
            print(f"  replayed {step.replayed / 3600:.1f} h, {step.done}/{step.total} done, ETA {step.eta or 0:.0f}s")

    started = time.monotonic()
    horizon = args.horizon or args.days * 86400
    with CpuSampler(os.environ["KONDUKTOR_STATE"]) as sampler:
        run = run_one(config, trace_path, args.engine, speedup, horizon, progress=progress, say=steps.append)
    total = time.monotonic() - started
    result = run.result
    print(
        f"wall: {total:.0f} s in all; replay {run.replay.wall_seconds:.0f} s; "
        f"cluster start and stop (or the engine's build check) {total - run.replay.wall_seconds:.0f} s"
    )
    if args.engine == "virtual":
        print_engine(len(run.replay.events), run.replay.wall_seconds, args.days)
    print(
        f"jobs finished {result.cluster.finished}/{result.cluster.jobs}; GPU-hours held "
        f"{result.cluster.gpu_hours:.0f}, of finished runs {result.cluster.useful_gpu_hours:.0f}; "
        f"utilisation {100 * (result.cluster.utilisation or 0):.0f}%"
    )
    print_held(run, trace, speedup)
    print_cpu(sampler, sum(1 for job in trace if job.submit < horizon), total)
    for team, answer in sorted(result.teams.items()):
        p50 = "-" if answer.wait_p50 is None else f"{answer.wait_p50 / 60:.1f} min"
        print(f"  {team}: {answer.finished}/{answer.jobs} finished, wait p50 {p50}, preemptions {answer.preemptions}")


if __name__ == "__main__":
    main()

"""What-if faithfulness against speed: the seed's small traces (installer/tests/data/whatif) replayed on
examples/config.yaml at rising speedups; per team, the p50 wait and how far it strays from the slowest replay's,
as a share of the larger of the two waits and the trace's mean job duration (a few seconds' difference in a wait of
seconds is no error to an admin; the same in a job's length is). The highest speedup whose every team's p50 stays
within the tolerance (the test suite's 20%) is the one to default to.

    .venv/bin/python bench/whatif_faithfulness_bench.py [--speedups 30,60,120,240,480] [--traces queue,greedy]

With --engines, each trace on the virtual engine against the cluster engine at the first speedup instead: the jobs
admitted, the evictions per team, and per team the p50 and p95 waits of both and their difference (the virtual
engine is held to 10% or one trace minute).

    .venv/bin/python bench/whatif_faithfulness_bench.py --engines [--speedups 30] [--traces greedy,reclaim,...]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("KONDUKTOR_STATE", tempfile.mkdtemp(prefix="konduktor-whatif-faithfulness-"))

from pathlib import Path

from konduktor.whatif.run import Run, run_one
from konduktor.whatif.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "config.yaml"
TRACES = ROOT / "installer" / "tests" / "data" / "whatif"
TOLERANCE = 0.2
HORIZON = {"queue": 2000.0, "greedy": 2400.0, "reclaim": 2400.0, "fragmented": 2400.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speedups", default="30,60,120,240,480")
    parser.add_argument("--traces", default="queue,greedy")
    parser.add_argument("--engines", action="store_true", help="the virtual engine against the cluster engine")
    args = parser.parse_args()
    speedups = [float(s) for s in args.speedups.split(",")]
    if args.engines:
        for name in args.traces.split(","):
            compare_engines(name, speedups[0])
        return
    faithful = max(speedups)
    for name in args.traces.split(","):
        jobs = load_trace(TRACES / f"{name}.csv")
        scale = sum(job.duration for job in jobs) / len(jobs)
        waits: dict[float, dict[str, float]] = {}
        for speedup in speedups:
            started = time.monotonic()
            run = run_one(EXAMPLE, TRACES / f"{name}.csv", "cluster", speedup, horizon=HORIZON.get(name))
            waits[speedup] = {t: r.wait_p50 for t, r in sorted(run.result.teams.items()) if r.wait_p50 is not None}
            reference = waits[speedups[0]]
            strays = {t: abs(w - reference[t]) / max(reference[t], w, scale) for t, w in waits[speedup].items()}
            within = all(s <= TOLERANCE for s in strays.values()) and waits[speedup].keys() == reference.keys()
            if not within:
                faithful = min(faithful, speedups[speedups.index(speedup) - 1])
            shown = ", ".join(f"{t} p50 {w:.0f} s ({100 * strays[t]:.0f}%)" for t, w in waits[speedup].items())
            print(
                f"{name} at {speedup:.0f}x: {shown}; {'within' if within else 'beyond'} {TOLERANCE:.0%}; "
                f"{time.monotonic() - started:.0f} s wall"
            )
    print(f"highest speedup within {TOLERANCE:.0%} on every trace: {faithful:.0f}x")


def compare_engines(name: str, speedup: float) -> None:
    """One trace on both engines: what differs, per team."""
    started = time.monotonic()
    virtual = run_one(EXAMPLE, TRACES / f"{name}.csv", "virtual", horizon=HORIZON.get(name))
    middle = time.monotonic()
    cluster = run_one(EXAMPLE, TRACES / f"{name}.csv", "cluster", speedup, horizon=HORIZON.get(name))
    ended = time.monotonic()

    def jobs(run: Run, kind: str) -> set[str]:
        return {e.job for e in run.replay.events if e.kind == kind}

    same = jobs(virtual, "admitted") == jobs(cluster, "admitted")
    print(
        f"{name}: virtual {middle - started:.1f} s wall, cluster at {speedup:.0f}x {ended - middle:.0f} s; "
        f"the same jobs admitted: {same}; evicted: virtual {sorted(jobs(virtual, 'evicted'))}, "
        f"cluster {sorted(jobs(cluster, 'evicted'))}"
    )
    for team, answer in sorted(virtual.result.teams.items()):
        reference = cluster.result.teams[team]
        for figure in ("wait_p50", "wait_p95"):
            ours, theirs = getattr(answer, figure), getattr(reference, figure)
            if ours is None or theirs is None:
                continue
            within = abs(ours - theirs) <= max(60.0, 0.1 * max(ours, theirs))
            print(
                f"  {team} {figure}: virtual {ours:.0f} s, cluster {theirs:.0f} s, difference {ours - theirs:+.0f} s "
                f"({'within' if within else 'beyond'} 10% or a minute)"
            )


if __name__ == "__main__":
    main()

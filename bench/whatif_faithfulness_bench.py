"""What-if faithfulness against speed: the seed's small traces (installer/tests/data/whatif) replayed on
examples/config.yaml at rising speedups; per team, the p50 wait and how far it strays from the slowest replay's,
as a share of the larger of the two waits and the trace's mean job duration (a few seconds' difference in a wait of
seconds is no error to an admin; the same in a job's length is). The highest speedup whose every team's p50 stays
within the tolerance (the test suite's 20%) is the one to default to.

    .venv/bin/python bench/whatif_faithfulness_bench.py [--speedups 30,60,120,240,480] [--traces queue,greedy]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("KONDUKTOR_STATE", tempfile.mkdtemp(prefix="konduktor-whatif-faithfulness-"))

from pathlib import Path

from konduktor.whatif.run import run_one
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
    args = parser.parse_args()
    speedups = [float(s) for s in args.speedups.split(",")]
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


if __name__ == "__main__":
    main()

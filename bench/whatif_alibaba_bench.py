"""What-if at the size of Alibaba's public GPU trace (cluster-trace-gpu-v2023, openb_pod_list_default.csv: 6,203
GPU tasks over 149 days): `trace alibaba` then `whatif` on the virtual engine against two configs (examples/config.yaml
and the same with team-a's quota raised to 24 and team-b's lowered to 16); the wall time of each step.

Give the real file with --pods; without it (this machine reaches no host that serves it) a pod list of the same
size and shape is made: Poisson arrivals over 149 days, 44% of the tasks asking for part of a GPU (one GPU until
GPU sharing is configured), the rest 1, 2, 4 or 8 GPUs, log-normal durations.

    .venv/bin/python bench/whatif_alibaba_bench.py [--pods openb_pod_list_default.csv] [--tasks 6203] [--days 149]
"""

from __future__ import annotations

import argparse
import csv
import random
import tempfile
import time
from pathlib import Path

from whatif_bench import EXAMPLE

from konduktor.whatif.alibaba import COLUMNS, import_alibaba
from konduktor.whatif.run import run_one
from konduktor.whatif.trace import write_csv


def pod_list(path: Path, tasks: int, days: float, seed: int) -> None:
    """A pod list in openb's columns: `tasks` GPU tasks, 44% fractional."""
    rng = random.Random(seed)
    span = int(days * 86400)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for index, created in enumerate(sorted(rng.randrange(span) for _ in range(tasks))):
            fractional = rng.random() < 0.44
            gpus = 1 if fractional else rng.choices([1, 2, 4, 8], [60, 20, 12, 8])[0]
            milli = rng.choice([100, 250, 500]) if fractional else 1000
            duration = max(60, int(rng.lognormvariate(7.5, 1.5)))
            qos = rng.choices(["LS", "Burstable", "BE"], [50, 20, 30])[0]
            writer.writerow(
                [
                    f"pod-{index:05d}",
                    4000 * gpus,
                    16384 * gpus,
                    gpus,
                    milli,
                    "",
                    qos,
                    "Succeeded",
                    created,
                    created + duration,
                    created,
                ]
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=Path, default=None)
    parser.add_argument("--tasks", type=int, default=6203)
    parser.add_argument("--days", type=float, default=149)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="whatif-alibaba-bench-"))
    pods = args.pods
    if pods is None:
        pods = work / "openb_pod_list_synthetic.csv"
        pod_list(pods, args.tasks, args.days, args.seed)
    started = time.monotonic()
    imported = import_alibaba(pods, ["team-a", "team-b"])
    trace = work / "trace.csv"
    with trace.open("w") as handle:
        write_csv(imported.jobs, handle)
    print(f"trace alibaba: {len(imported.jobs)} jobs from {pods.name} in {time.monotonic() - started:.1f} s")
    proposal = work / "proposal.yaml"
    text = EXAMPLE.read_text()
    first = text.index("quota: 20")
    second = text.index("quota: 20", first + 1)
    proposal.write_text(text[:first] + "quota: 24" + text[first + 9 : second] + "quota: 16" + text[second + 9 :])
    total = 0.0
    for config in (EXAMPLE, proposal):
        begun = time.monotonic()
        run = run_one(config, trace, "virtual")
        wall = time.monotonic() - begun
        total += wall
        waits = ", ".join(
            f"{team} p95 {(answer.wait_p95 or 0) / 3600:.1f} h" for team, answer in sorted(run.result.teams.items())
        )
        print(
            f"{config.name}: {wall:.0f} s wall, {len(run.replay.events)} events, "
            f"{run.result.cluster.finished}/{run.result.cluster.jobs} finished; {waits}"
        )
    print(f"both configs: {total:.0f} s wall")


if __name__ == "__main__":
    main()

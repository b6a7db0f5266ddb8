"""What-if at the size of Alibaba's public GPU trace (cluster-trace-gpu-v2023, openb_pod_list_default.csv: 6,203
GPU tasks over 149 days): `trace alibaba` then `whatif` on the virtual engine against two configs (examples/config.yaml
and the same with team-a's quota raised to 24 and team-b's lowered to 16), replayed at once as `whatif --against`
replays them; the wall time of each replay and of both. With
`--sliced`, the second config is examples/config.yaml's cluster with one of its 4 nodes cut into MIG instances (each
GPU three 1g.10gb and one 4g.40gb; the teams' whole-GPU quotas 15, slice quotas in place of the rest): the tasks
asking for part of a GPU take a slice there and a whole GPU in the first; per team the waits, and the GPU-hours held,
a slice counted as its part of a GPU.

Give the real file with --pods (csv/openb_pod_list_default.csv of https://github.com/alibaba/clusterdata, directory
cluster-trace-gpu-v2023; the repository keeps no copy); without it a pod list of the same size and shape is made:
Poisson arrivals over 149 days, 44% of the tasks asking for part of a GPU (one GPU until GPU sharing is
configured), the rest 1, 2, 4 or 8 GPUs, log-normal durations.

    .venv/bin/python bench/whatif_alibaba_bench.py [--pods openb_pod_list_default.csv] [--tasks 6203] [--days 149]
        [--sliced]
"""

from __future__ import annotations

import argparse
import csv
import random
import tempfile
import time
from pathlib import Path

import yaml
from whatif_bench import EXAMPLE

from konduktor.whatif.alibaba import COLUMNS, import_alibaba
from konduktor.whatif.run import load, load_all, run_all
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


def sliced(path: Path) -> None:
    """examples/config.yaml's 4 nodes of 10 H100 with one in MIG instances (30 1g.10gb, a seventh of a GPU: the tenth
    GPU tasks; 10 4g.40gb, four sevenths: the quarter and half ones), three whole (30 GPUs, 15 a team); each team a
    half of the slices."""
    config = yaml.safe_load(EXAMPLE.read_text())
    config["gpuTypes"]["h100"]["sharing"] = {"h100-mig": {"nodes": 1, "mig": {"1g.10gb": 3, "4g.40gb": 1}}}
    for team in config["teams"].values():
        team["gpus"]["h100"] = {"quota": 15, "borrowLimit": 10, "lendLimit": 12}
        team["slices"] = {"h100-mig": {"mig-1g.10gb": {"quota": 15}, "mig-4g.40gb": {"quota": 5}}}
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=Path, default=None)
    parser.add_argument("--tasks", type=int, default=6203)
    parser.add_argument("--days", type=float, default=149)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sliced", action="store_true", help="against a config with GPU slices, not a quota change")
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
    proposal = work / ("sliced.yaml" if args.sliced else "proposal.yaml")
    if args.sliced:
        sliced(proposal)
    else:
        text = EXAMPLE.read_text()
        first = text.index("quota: 20")
        second = text.index("quota: 20", first + 1)
        proposal.write_text(text[:first] + "quota: 24" + text[first + 9 : second] + "quota: 16" + text[second + 9 :])
    fractional = sum(1 for job in imported.jobs if job.gpu_fraction is not None)
    print(f"{fractional} of the jobs ask for part of a GPU")
    configs = [EXAMPLE, proposal]
    begun = time.monotonic()
    runs = run_all(configs, load_all(configs, trace))  # as `whatif --against` runs them: at once
    total = time.monotonic() - begun
    for config, run in zip(configs, runs, strict=True):
        waits = ", ".join(
            f"{team} p95 {(answer.wait_p95 or 0) / 3600:.1f} h, {answer.wait_hours['quota']:.0f} job-h waiting "
            f"for quota, {answer.gpu_hours:.0f} GPU-h held"
            for team, answer in sorted(run.result.teams.items())
        )
        sliced_jobs = sum(1 for job in load(config, trace)[1] if job.resource is not None)
        print(
            f"{config.name}: {run.replay.wall_seconds:.0f} s wall, {len(run.replay.events)} events, "
            f"{run.result.cluster.finished}/{run.result.cluster.jobs} finished, {sliced_jobs} on a slice, "
            f"{run.result.cluster.gpu_hours:.0f} GPU-h held; {waits}"
        )
    print(f"both configs, replayed at once: {total:.0f} s wall")


if __name__ == "__main__":
    main()

"""Team quotas: validate + render cost for 10, 100 and 1,000 teams x 4 GPU types, and (with --reclaim)
how long the simulated cluster takes to hand a team its borrowed GPUs back.

    .venv/bin/python bench/quotas_bench.py [--repeat 5] [--reclaim 3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
from typing import Any

from ruamel.yaml import YAML

GPU_TYPES = {
    "h100": "NVIDIA-H100-80GB-HBM3",
    "h200": "NVIDIA-H200",
    "a100": "NVIDIA-A100-SXM4-80GB",
    "l40s": "NVIDIA-L40S",
}


def config_text(teams: int) -> str:
    """A lint-clean config: every team gets 8 GPUs of every type, nodes sized to fit them all."""
    nodes = teams  # 8 GPUs per node, one node's worth per team and type
    data: dict[str, Any] = {
        "version": 1,
        "cluster": {"name": "bench"},
        "kueue": {"sharing": "fair"},
        "capacityReserve": {"cpu": "8", "memory": "64Gi"},
        "topology": {"name": "bench-topology", "levels": ["konduktor.ai/topology-rack", "kubernetes.io/hostname"]},
        "gpuTypes": {
            name: {
                "product": product,
                "nodes": nodes,
                "gpusPerNode": 8,
                "nodeAllocatable": {"cpu": "192", "memory": "1900Gi"},
            }
            for name, product in GPU_TYPES.items()
        },
        "priorities": {"opportunistic": 100, "standard": 1000},
        "teams": {
            f"team-{i:04d}": {
                "namespaces": [f"team-{i:04d}"],
                "groups": [f"team-{i:04d}"],
                "gpus": {name: {"quota": 8, "borrowLimit": 8} for name in GPU_TYPES},
            }
            for i in range(teams)
        },
    }
    stream = io.StringIO()
    YAML().dump(data, stream)
    return stream.getvalue()


def render_figures(repeat: int) -> None:
    from konduktor.config.load import parse_config
    from konduktor.quotas.render import render

    print(f"validate + render, median of {repeat} runs ({len(GPU_TYPES)} GPU types):")
    print(f"  {'teams':>6} {'objects':>8} {'total s':>9} {'per team ms':>12}")
    per_team = {}
    for teams in (10, 100, 1000):
        text = config_text(teams)
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            objects = render(parse_config(text, "bench.yaml").config)
            times.append(time.perf_counter() - started)
        total = statistics.median(times)
        per_team[teams] = total / teams
        print(f"  {teams:>6} {len(objects):>8} {total:>9.3f} {1000 * total / teams:>12.2f}")
    print(f"  per-team cost ratio 1000 vs 10 teams: {per_team[1000] / per_team[10]:.2f} (1.0 = linear)")


def reclaim_figures(rounds: int) -> None:
    os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(prefix="konduktor-bench-")
    from pathlib import Path

    from konduktor.config.load import load_config
    from konduktor.kube.client import Kube
    from konduktor.quotas.sync import sync_quotas
    from konduktor.sim.cluster import SimCluster
    from konduktor.sim.pools import spec_from
    from konduktor.sim.workloads import admitted_gpus, gpu_job
    from konduktor.waiting import wait_until

    example = Path(__file__).resolve().parents[1] / "examples" / "config.yaml"
    cluster = SimCluster("bench-reclaim")
    cluster.up(spec_from(example, job_seconds=600))
    kube = Kube(cluster.kubeconfig)
    try:
        sync_quotas(kube, load_config(example).config, prune=True, dry_run=False)
        seconds = []
        for round_ in range(rounds):
            for i in range(6):
                kube.create(gpu_job(f"a-{round_}-{i}", "team-a", gpus=5, priority="opportunistic"))
            wait_until("team-a to borrow", lambda: admitted_gpus(kube, "team-a") == 30, timeout=120)
            started = time.monotonic()
            for i in range(4):
                kube.create(gpu_job(f"b-{round_}-{i}", "team-b", gpus=5, priority="standard"))
            wait_until(
                "team-b to get its quota", lambda: admitted_gpus(kube, "team-b") == 20, timeout=300, interval=0.2
            )
            seconds.append(time.monotonic() - started)
            for namespace in ("team-a", "team-b"):
                for job in kube.list("batch/v1", "Job", namespace):
                    kube.delete("batch/v1", "Job", job["metadata"]["name"], namespace)
            wait_until("jobs to go", lambda: admitted_gpus(kube, "team-a") + admitted_gpus(kube, "team-b") == 0)
        print(
            f"reclaim 20 GPUs from a borrowing team, {rounds} rounds: "
            f"p50 {statistics.median(seconds):.1f} s, max {max(seconds):.1f} s"
        )
    finally:
        kube.close()
        cluster.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reclaim", type=int, default=0, help="rounds of the reclaim scenario on a sim cluster")
    args = parser.parse_args()
    render_figures(args.repeat)
    if args.reclaim:
        reclaim_figures(args.reclaim)


if __name__ == "__main__":
    main()

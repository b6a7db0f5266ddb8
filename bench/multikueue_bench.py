"""Several clusters (MultiKueue): validate + render of 10, 100 and 1,000 teams over 4 and 16 worker clusters, every
team's quota split over the workers (the split rule), and the objects per cluster.

    .venv/bin/python bench/multikueue_bench.py [--repeat 5]

Dispatch on simulated clusters (latency, admission rate) is measured by bench/multikueue_dispatch_bench.py.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from typing import Any

from ruamel.yaml import YAML

from konduktor.config import parse_config
from konduktor.quotas.multikueue import render_clusters

FRAMEWORKS = ["batch/job", "pod", "jobset.x-k8s.io/jobset"]


def config_text(teams: int, workers: int) -> str:
    """A lint-clean config: each worker has `teams` nodes of 8 H100, every team 8 GPUs per worker (split)."""
    data: dict[str, Any] = {
        "version": 1,
        "cluster": {"name": "hub"},
        "kueue": {"sharing": "fair"},
        "capacityReserve": {"cpu": "8", "memory": "64Gi"},
        "topology": {"levels": ["kubernetes.io/hostname"]},
        "clusters": {"workers": [{"name": f"worker-{w:02d}", "gpuTypes": {"h100": teams}} for w in range(workers)]},
        "gpuTypes": {
            "h100": {
                "product": "NVIDIA-H100-80GB-HBM3",
                "nodes": teams * workers,
                "gpusPerNode": 8,
                "nodeAllocatable": {"cpu": "192", "memory": "1900Gi"},
            }
        },
        "teams": {
            f"team-{i:04d}": {"namespaces": [f"team-{i:04d}"], "gpus": {"h100": {"quota": 8 * workers}}}
            for i in range(teams)
        },
        "alerts": {"receivers": {"platform": {"webhook": {"url": {"secret": "platform-webhook", "key": "url"}}}}},
    }
    stream = io.StringIO()
    YAML().dump(data, stream)
    return stream.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'teams':>6} {'workers':>7} {'validate s':>11} {'render s':>9} {'objects manager':>16} {'per worker':>11}")
    for workers in (4, 16):
        for teams in (10, 100, 1000):
            text = config_text(teams, workers)
            validate, render = [], []
            sets = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                config = parse_config(text, "bench.yaml").config
                validate.append(time.perf_counter() - start)
                start = time.perf_counter()
                sets = render_clusters(config, FRAMEWORKS)
                render.append(time.perf_counter() - start)
            print(
                f"{teams:>6} {workers:>7} {statistics.median(validate):>11.3f} {statistics.median(render):>9.3f} "
                f"{len(sets[0].objects):>16} {len(sets[1].objects):>11}"
            )


if __name__ == "__main__":
    main()

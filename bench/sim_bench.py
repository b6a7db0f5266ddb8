"""Simulated cluster figures: tool build times, cold/warm `sim up`, and 1,000 fake GPU nodes to Ready.

    .venv/bin/python bench/sim_bench.py [--nodes 1000]

Runs in its own state directory (tools come from the shared cache) and removes its clusters afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(prefix="konduktor-bench-")

from konduktor.kube.client import Kube
from konduktor.kube.timestamps import parse_time
from konduktor.sim.cluster import SimCluster, SimSpec
from konduktor.sim.nodes import parse_nodes_spec
from konduktor.tools.catalog import load_tools
from konduktor.tools.gobuild import installed


def timed(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def ready_lag_seconds(kube: Kube) -> list[float]:
    """Per node: Ready transition minus creation (the API's timestamps have 1 s resolution)."""
    lags = []
    for node in kube.list("v1", "Node", label_selector="type=kwok"):
        created = parse_time(node["metadata"]["creationTimestamp"])
        for item in node["status"].get("conditions", []):
            if item["type"] == "Ready" and item["status"] == "True":
                ready = parse_time(item["lastTransitionTime"])
                if created is not None and ready is not None:
                    lags.append(ready - created)
    return lags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000, help="fake GPU nodes for the scale run")
    args = parser.parse_args()

    print("tool builds (cold, from the cache manifests):")
    for tool in load_tools().values():
        if not tool.packages:
            continue  # a manifest source, nothing is built
        build = installed(tool)
        print(f"  {tool.name:<11} {tool.version:<9} {build.seconds if build else float('nan'):8.1f} s")

    small = SimSpec(pools=parse_nodes_spec("4x10:H100"))
    cluster = SimCluster("bench")
    try:
        cold = timed(lambda: cluster.up(small))
        warm = timed(lambda: cluster.up(small))
        cluster.down(keep=True)
        restart = timed(lambda: cluster.up(small))
        cluster.down()
        print(f"sim up, new cluster (tools cached): {cold:6.1f} s")
        print(f"sim up, already running:           {warm:6.1f} s")
        print(f"sim up, after down --keep:         {restart:6.1f} s")

        big = SimSpec(pools=parse_nodes_spec(f"{args.nodes}x8:H100"))
        total = timed(lambda: cluster.up(big))
        kube = Kube(cluster.kubeconfig)
        lags = ready_lag_seconds(kube)
        kube.close()
        print(
            f"{args.nodes} nodes: sim up to all Ready {total:6.1f} s "
            f"({1000 * total / args.nodes:.1f} ms per node, includes control plane start)"
        )
        print(
            f"  per-node create->Ready lag: p50 {statistics.median(lags):.0f} s, "
            f"p95 {percentile(lags, 0.95):.0f} s, max {max(lags):.0f} s"
        )
    finally:
        cluster.down()


if __name__ == "__main__":
    main()

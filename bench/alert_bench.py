"""Fault -> notification latency of the alerting path on the simulated cluster: a GPU falls off the bus, the real
health controller quarantines the node, the real Prometheus (konduktor-core's rules, the quarantine alert's `for`
shortened to 1 s) fires, and the real Alertmanager (the configuration `render` makes from examples/config.yaml,
group_wait and group_interval 1 s) POSTs to a webhook receiver in this process.

    .venv/bin/python bench/alert_bench.py [--samples 8]

A new sim cluster `bench-alerts` with one GPU node per sample, in its own state directory (tools from the shared
cache), removed afterwards. Scrape and evaluation intervals are 1 s, so about 1-3 s of each figure is those
intervals, not processing; in a cluster the chart's `for: 1m` and Alertmanager's group_wait (30 s) add to it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(prefix="konduktor-bench-")
# The pipeline (Prometheus, Alertmanager, the receiver) is the one the end-to-end alert tests run.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "installer" / "tests"))

from alert_pipeline import alert_pipeline, health_controller, scraped
from ruamel.yaml import YAML

from konduktor.config import load_config
from konduktor.health.settings import BreakerSettings, HealthSettings
from konduktor.kube.client import Kube
from konduktor.sim.cluster import SimCluster, SimSpec
from konduktor.sim.nodes import node_name, parse_nodes_spec
from konduktor.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]
STATE = Path(os.environ["KONDUKTOR_STATE"])
GPUS = 8
NAMESPACE = "konduktor-alert-bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8, help="faults, one fresh node each")
    args = parser.parse_args()
    spec = parse_nodes_spec(f"{args.samples}x{GPUS}:H100")
    names = [node_name(pool, i) for pool in spec for i in range(pool.count)]
    cluster = SimCluster("bench-alerts", progress=lambda m: print(f"  {m}", file=sys.stderr))
    cluster.up(SimSpec(pools=spec))
    kube = Kube(cluster.kubeconfig)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    settings = HealthSettings(
        gpu_lost_grace_seconds=0,
        cooldown_seconds=86400,  # no requalification during the run
        breaker=BreakerSettings(max_fraction=1, max_nodes=args.samples),
        poll_seconds=1,
        lease_seconds=3,
    )
    config = STATE / "health.yaml"
    with config.open("w") as handle:
        YAML(typ="safe").dump(settings.model_dump(mode="json"), handle)
    latencies = []
    try:
        (STATE / "pipeline").mkdir()
        example = load_config(ROOT / "examples" / "config.yaml").config
        with (
            alert_pipeline(example, STATE / "pipeline") as pipeline,
            health_controller(cluster.kubeconfig, config, pipeline.controller_port, NAMESPACE, STATE / "h.log"),
        ):
            wait_until("Prometheus to scrape the controller", scraped(pipeline), timeout=60)
            for name in names:
                fault = time.time()
                kube.patch(
                    "v1", "Node", name, {"status": {"allocatable": {"nvidia.com/gpu": str(GPUS - 1)}}},
                    subresource="status",
                )  # fmt: skip

                def arrived(node: str = name, since: float = fault) -> bool:
                    return any(
                        alert["labels"].get("node") == node
                        for _, alert in pipeline.receiver.alerts("KonduktorNodeQuarantined", "firing", since)
                    )

                wait_until(f"the alert about {name}", arrived, timeout=120, interval=0.05)
                [received] = [
                    n.received
                    for n, alert in pipeline.receiver.alerts("KonduktorNodeQuarantined", "firing", fault)
                    if alert["labels"]["node"] == name
                ]
                latencies.append(received - fault)
                print(f"  {name}: {received - fault:.2f} s", file=sys.stderr)
    finally:
        kube.close()
        cluster.down()
    ordered = sorted(latencies)
    p99 = statistics.quantiles(ordered, n=100, method="inclusive")[98] if len(ordered) > 1 else ordered[0]
    print(f"GPU fault -> webhook notification ({len(ordered)} samples): p50 {statistics.median(ordered):.2f} s, "
          f"p99 {p99:.2f} s, max {ordered[-1]:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()

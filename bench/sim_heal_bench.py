"""How long a job hit by a GPU fault waits to run again with the simulated cluster's own health controller:
`sim fault NODE --kind xid79` under a running job -> node quarantined -> job requeued through Kueue -> running again
on a healthy node, p50/p99/max over N faults.

    .venv/bin/python bench/sim_heal_bench.py [--samples 5] [--poll 5]

A new sim cluster `bench-heal` set up by `konduktor-install up` with examples/config.yaml's teams and samples + 2
H100 nodes; the controller is konduktor-core's, run by the sim as a local process with the chart's settings and its
service account (poll `--poll` seconds, the chart's default 5; the breaker opened wide so that every fault is
acted on). Each sample submits a 1-pod, 8-GPU job to team-a, injects an Xid 79 on its node (the kernel line the
controller reads, the GPU gone from allocatable) and times the quarantine and the job running again on another
node. Every sample leaves its node quarantined, so each uses a fresh one. Runs in its own state directory and
removes its cluster.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(prefix="konduktor-bench-")
os.environ.pop("KUBECONFIG", None)

import yaml

from konduktor.cli.main import main as konduktor_install
from konduktor.kube.client import Kube
from konduktor.sim.cluster import SimCluster
from konduktor.sim.faults import inject
from konduktor.sim.workloads import gpu_job, running_on
from konduktor.vocabulary import HEALTH_TAINT_KEY
from konduktor.waiting import wait_until

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "config.yaml"
NAME = "bench-heal"
TEAM = "team-a"


def quarantined(kube: Kube, name: str) -> bool:
    node = kube.get("v1", "Node", name) or {}
    return any(t["key"] == HEALTH_TAINT_KEY for t in node.get("spec", {}).get("taints", []))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def one_sample(kube: Kube, cluster: SimCluster, name: str) -> tuple[float, float]:
    """Seconds from the fault to the quarantine, and to the job's pod running on another node."""
    kube.create(gpu_job(name, TEAM, gpus=8, run_for="600s"))
    wait_until("the pod to run", lambda: len(running_on(kube, TEAM, name)) == 1, timeout=120)
    placed = running_on(kube, TEAM, name)
    faulty = next(iter(placed.values()))
    started = time.monotonic()
    inject(kube, cluster.root, faulty, "xid79", 0)
    wait_until("the node to be quarantined", lambda: quarantined(kube, faulty), timeout=120, interval=0.1)
    taint = time.monotonic() - started

    def moved() -> bool:
        now = running_on(kube, TEAM, name)
        return len(now) == 1 and faulty not in now.values() and not set(now) & set(placed)

    wait_until("the job to run again on a healthy node", moved, timeout=300, interval=0.1)
    took = time.monotonic() - started
    kube.delete("batch/v1", "Job", name, TEAM)
    wait_until("the job's pods to go", lambda: not running_on(kube, TEAM, name), timeout=120)
    return taint, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--poll", type=float, default=5.0)
    args = parser.parse_args()

    work = Path(os.environ["KONDUKTOR_STATE"])
    config = yaml.safe_load(EXAMPLE.read_text())
    config["gpuTypes"]["h100"]["nodes"] = args.samples + 2
    config["burnin"]["level"] = "none"
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    settings = {"poll_seconds": args.poll, "breaker": {"max_fraction": 1.0, "max_nodes": 100}}
    (work / "values.yaml").write_text(yaml.safe_dump({"controller": {"settings": settings}}))
    cluster = SimCluster(NAME)
    try:
        code = konduktor_install(["up", str(work / "config.yaml"), "--sim", NAME, "-f", str(work / "values.yaml")])
        if code != 0:
            raise SystemExit(f"up exited {code}")
        with Kube(cluster.kubeconfig) as kube:
            figures = [one_sample(kube, cluster, f"heal-{sample}") for sample in range(args.samples)]
        taints, runs = [t for t, _ in figures], [r for _, r in figures]
        for what, values in (("fault -> node quarantined", taints), ("fault -> job running on a healthy node", runs)):
            print(
                f"{what}, {len(values)} samples (poll {args.poll:g} s): p50 {statistics.median(values):.1f} s, "
                f"p99 {percentile(values, 0.99):.1f} s, max {max(values):.1f} s "
                f"(samples {', '.join(f'{v:.1f}' for v in values)})"
            )
    finally:
        cluster.down()


if __name__ == "__main__":
    main()

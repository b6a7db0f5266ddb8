"""How long a job hit by a GPU fault waits to run again: fault -> node quarantined -> Workload requeued through
Kueue -> readmitted and its pods running on healthy nodes, p50/p99/max.

    .venv/bin/python bench/requeue_bench.py [--samples 5] [--poll 1]

A new sim cluster `bench-requeue` with examples/config.yaml's queues and 2 x samples + 2 H100 nodes (10 GPUs each),
and the health controller's watch loop in this process with `affected_work.degraded: requeue`. Each sample
starts a 2-pod job with 8 GPUs per pod (one pod per node), takes a GPU off one of its nodes (what a device plugin
reports when a GPU falls off the bus), and times until both pods run again, on other nodes. Every sample leaves
one node quarantined, so each uses fresh nodes. Runs in its own state directory and removes its cluster.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(prefix="konduktor-bench-")

from konduktor.config.load import load_config
from konduktor.health.loop import HealthController
from konduktor.health.settings import AffectedWorkSettings, BreakerSettings, HealthSettings
from konduktor.kube.client import Kube
from konduktor.quotas.sync import sync_quotas
from konduktor.sim.cluster import SimCluster
from konduktor.sim.pools import spec_of_nodes
from konduktor.sim.workloads import gpu_job, is_true, running_on, workload_of
from konduktor.waiting import wait_until

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "config.yaml"
TEAM = "team-a"
LEASE_NAMESPACE = "konduktor-bench"


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def one_sample(kube: Kube, name: str) -> float:
    """Seconds from a lost GPU under a running 2-pod job to both pods running again on other nodes."""
    kube.create(gpu_job(name, TEAM, gpus=8, pods=2, run_for="600s"))
    wait_until("both pods to run", lambda: len(running_on(kube, TEAM, name)) == 2, timeout=120)
    placed = running_on(kube, TEAM, name)
    faulty = sorted(placed.values())[0]
    started = time.monotonic()
    kube.patch("v1", "Node", faulty, {"status": {"allocatable": {"nvidia.com/gpu": "9"}}}, subresource="status")

    def readmitted() -> bool:
        now = running_on(kube, TEAM, name)
        return (
            len(now) == 2
            and faulty not in now.values()
            and not set(now) & set(placed)
            and is_true(workload_of(kube, TEAM, name), "Admitted")
        )

    wait_until("the job to run again on healthy nodes", readmitted, timeout=300, interval=0.1)
    took = time.monotonic() - started
    kube.delete("batch/v1", "Job", name, TEAM)
    wait_until("the job's pods to go", lambda: not running_on(kube, TEAM, name), timeout=120)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--poll", type=float, default=1.0)
    args = parser.parse_args()

    cluster = SimCluster("bench-requeue")
    cluster.up(spec_of_nodes(f"{2 * args.samples + 2}x10:H100", job_seconds=600))
    kube = Kube(cluster.kubeconfig)
    stop = threading.Event()
    loop: threading.Thread | None = None
    try:
        sync_quotas(kube, load_config(EXAMPLE).config, prune=True, dry_run=False)
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}})
        health = HealthSettings(
            gpu_lost_grace_seconds=0,
            cooldown_seconds=86400,
            poll_seconds=args.poll,
            breaker=BreakerSettings(max_fraction=1, max_nodes=100),
            affected_work=AffectedWorkSettings(degraded="requeue"),
        )
        controller = HealthController(kube, health, identity="bench", lease_namespace=LEASE_NAMESPACE)
        loop = threading.Thread(target=controller.run, args=(stop,))
        loop.start()
        wait_until("the controller to lead", lambda: controller.leading, timeout=60)
        seconds = [one_sample(kube, f"requeue-{sample}") for sample in range(args.samples)]
        print(
            f"fault -> requeued and running again on healthy nodes, {len(seconds)} samples (poll {args.poll:g} s): "
            f"p50 {statistics.median(seconds):.1f} s, p99 {percentile(seconds, 0.99):.1f} s, max {max(seconds):.1f} s"
        )
        print("samples: " + ", ".join(f"{s:.1f}" for s in seconds))
    finally:
        stop.set()
        if loop is not None:
            loop.join(timeout=60)
        kube.close()
        cluster.down()


if __name__ == "__main__":
    main()

"""MultiKueue dispatch on simulated clusters: a manager and three workers (each its own control plane, Kueue and kwok
nodes, 4 nodes x 8 H100), one team holding the workers' 96 GPUs. Two figures:

1. latency: a 1-GPU job created on the manager -> its pod Running on a worker, p50/p99/max over N jobs submitted
   one at a time (all kept running);
2. the manager's admission rate: M 1-GPU jobs of S seconds created at once, far beyond the quota, so that up to M
   workloads wait on the manager and are dispatched as GPUs free: dispatched per second, and the time until all
   finished.

With `--audit`, each worker's kube-apiserver logs the requests of the manager's identity there (the token
MultiKueue's client uses), and the bench prints their rate while the jobs are dispatched: requests per second,
p50 and max over one-second steps, and the share of seconds at 5 or more. MultiKueue builds its client for a worker
from the kubeconfig alone (Kueue's multikueuecluster.go: clientcmd.RESTConfigFromKubeConfig), so client-go's default
rate limit applies: 5 requests a second after a burst of 10.

    .venv/bin/python bench/multikueue_dispatch_bench.py [--samples 20] [--jobs 1000] [--seconds 30]
        [--dispatch allAtOnce|incremental] [--audit]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

# Before any cluster is made: clusters of this process live apart from the user's, and kwokctl reads the audit
# policy's path when it creates a cluster.
os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(prefix="konduktor-bench-")

from konduktor.config.model import Config
from konduktor.kube.client import Kube
from konduktor.kube.conditions import is_true
from konduktor.kube.timestamps import parse_time
from konduktor.ops.multicluster import start_sim_fleet
from konduktor.quotas.multikueue import MULTIKUEUE_SERVICE_ACCOUNT
from konduktor.sim.cluster import SimCluster
from konduktor.sim.workloads import gpu_job
from konduktor.vocabulary import KUEUE_API, KUEUE_NAMESPACE

AUDIT_POLICY = Path(os.environ["KONDUKTOR_STATE"]) / "audit-policy.yaml"
MANAGER_IDENTITY = f"system:serviceaccount:{KUEUE_NAMESPACE}:{MULTIKUEUE_SERVICE_ACCOUNT}"
POLICY = f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["{MANAGER_IDENTITY}"]
  - level: None
"""

MANAGER, WORKERS, TEAM = "bench-hub", ["bench-w1", "bench-w2", "bench-w3"], "bench-team"


def fleet(dispatch: str) -> Config:
    return Config.model_validate(
        {
            "version": 1,
            "cluster": {"name": MANAGER},
            "kueue": {"sharing": "none"},
            "clusters": {"dispatch": dispatch, "workers": [{"name": w, "gpuTypes": {"h100": 4}} for w in WORKERS]},
            "topology": {"levels": ["kubernetes.io/hostname"]},
            "gpuTypes": {
                "h100": {
                    "product": "NVIDIA-H100-80GB-HBM3",
                    "nodes": 4 * len(WORKERS),
                    "gpusPerNode": 8,
                    "nodeAllocatable": {"cpu": "96", "memory": "1000Gi"},
                }
            },
            "teams": {TEAM: {"namespaces": [TEAM], "gpus": {"h100": {"quota": 32 * len(WORKERS)}}}},
        }
    )


def running_pod(workers: list[Kube], job: str) -> bool:
    for worker in workers:
        pods = worker.list("v1", "Pod", TEAM, label_selector=f"batch.kubernetes.io/job-name={job}")
        if any(p.get("status", {}).get("phase") == "Running" for p in pods):
            return True
    return False


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def latency(manager: Kube, workers: list[Kube], samples: int) -> list[float]:
    found = []
    for i in range(samples):
        name = f"latency-{i}"
        started = time.monotonic()
        manager.create(gpu_job(name, TEAM, gpus=1, run_for="3600s"))
        while not running_pod(workers, name):
            if time.monotonic() - started > 300:
                raise SystemExit(f"{name}: no pod running on a worker after 300 s")
            time.sleep(0.1)
        found.append(time.monotonic() - started)
    return found


def workloads(manager: Kube) -> list[dict[str, Any]]:
    return [w for w in manager.list(KUEUE_API, "Workload", TEAM) if w["metadata"]["name"].startswith("job-rate-")]


def rate(manager: Kube, jobs: int, seconds: int, capacity: int) -> dict[str, float]:
    started = time.monotonic()
    for i in range(jobs):
        manager.create(gpu_job(f"rate-{i}", TEAM, gpus=1, run_for=f"{seconds}s"))
    created = time.monotonic() - started
    dispatched_at: dict[str, float] = {}
    while True:
        found = workloads(manager)
        now = time.monotonic() - started
        for w in found:
            if w.get("status", {}).get("clusterName") and w["metadata"]["name"] not in dispatched_at:
                dispatched_at[w["metadata"]["name"]] = now
        finished = sum(1 for w in found if is_true(w, "Finished"))
        if finished == jobs:
            break
        if now > 3 * 3600:
            raise SystemExit(f"only {finished} of {jobs} jobs finished after 3 h")
        time.sleep(2)
    times = sorted(dispatched_at.values())
    first_round = times[min(len(times), capacity) - 1]  # as many as the GPUs hold: no job had to finish first
    return {
        "created": created,
        "dispatched": len(times),
        "first_round": first_round,
        "last_dispatch": times[-1],
        "all_finished": now,
    }


def request_rate(audit_logs: list[Path], since: float, until: float) -> dict[str, Any]:
    """The manager identity's requests to each worker, per wall second between `since` and `until` (Unix times):
    p50 and max over the seconds and workers, in all and per resource (client-go limits each REST client, and
    controller-runtime makes one per kind), and the share of seconds at 5 or more."""
    per_second: Counter[tuple[int, int]] = Counter()
    per_kind: dict[str, Counter[tuple[int, int]]] = {}
    for index, path in enumerate(audit_logs):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("user", {}).get("username") != MANAGER_IDENTITY or entry.get("stage") != "ResponseComplete":
                continue
            if entry.get("verb") == "watch":
                continue  # a watch is one long request, not limited
            at = parse_time(entry["requestReceivedTimestamp"])
            if at is not None and since <= at < until:
                ref = entry.get("objectRef", {})
                kind = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                per_second[(index, int(at))] += 1
                per_kind.setdefault(f"{entry.get('verb')} {kind}", Counter())[(index, int(at))] += 1
    keys = [(i, s) for i in range(len(audit_logs)) for s in range(int(since), int(until))]
    seconds = [per_second[key] for key in keys]
    kinds = {
        kind: (sum(counts.values()), statistics.median(counts[k] for k in keys), max(counts.values()))
        for kind, counts in sorted(per_kind.items(), key=lambda item: -sum(item[1].values()))
    }
    by_resource: Counter[str] = Counter()
    for kind, counts in per_kind.items():
        by_resource[kind.split(" ", 1)[1]] += sum(counts.values())
    return {
        "p50": statistics.median(seconds),
        "max": max(seconds),
        "at_limit": sum(1 for n in seconds if n >= 5) / len(seconds),
        "requests": sum(seconds),
        "kinds": kinds,
        # client-go limits each kind's client: its mean rate per worker against the 5/s.
        "per_resource": {r: n / len(keys) for r, n in by_resource.most_common()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=30, help="each rate job's run time")
    parser.add_argument("--dispatch", default="allAtOnce", choices=["allAtOnce", "incremental"])
    parser.add_argument("--audit", action="store_true", help="the manager's request rate to each worker")
    args = parser.parse_args()
    if args.audit:
        AUDIT_POLICY.write_text(POLICY)
        os.environ["KWOK_KUBE_AUDIT_POLICY"] = str(AUDIT_POLICY)
    config = fleet(args.dispatch)
    began = time.monotonic()
    sims = {name: SimCluster(name) for name in (MANAGER, *WORKERS)}
    try:
        start_sim_fleet(config, job_seconds=600)
        print(f"fleet: a manager and {len(WORKERS)} workers started and connected in {time.monotonic() - began:.0f} s")
        manager = Kube(sims[MANAGER].kubeconfig)
        workers = [Kube(sims[w].kubeconfig) for w in WORKERS]
        while not all(is_true(manager.get(KUEUE_API, "MultiKueueCluster", w), "Active") for w in WORKERS):
            time.sleep(0.5)
        waits = latency(manager, workers, args.samples)
        print(
            f"latency, created on the manager -> pod Running on a worker ({args.dispatch}, {args.samples} jobs): "
            f"p50 {statistics.median(waits):.2f} s, p99 {percentile(waits, 0.99):.2f} s, max {max(waits):.2f} s"
        )
        for i in range(args.samples):
            manager.delete("batch/v1", "Job", f"latency-{i}", TEAM, propagation="Background")
        capacity = 32 * len(WORKERS)
        burst_began = time.time()
        figures = rate(manager, args.jobs, args.seconds, capacity)
        print(
            f"admission rate, {args.jobs} jobs of 1 GPU x {args.seconds} s on {capacity} GPUs: created in "
            f"{figures['created']:.0f} s; the first {min(capacity, args.jobs)} (what the GPUs hold) dispatched by "
            f"{figures['first_round']:.0f} s; all dispatched by {figures['last_dispatch']:.0f} s "
            f"({figures['dispatched'] / figures['last_dispatch']:.2f} workloads/s); all finished at "
            f"{figures['all_finished']:.0f} s (the GPUs alone allow {args.jobs * args.seconds / capacity:.0f} s)"
        )
        if args.audit:
            logs = [sims[w].cluster_dir / "logs" / "audit.log" for w in WORKERS]
            until = burst_began + figures["last_dispatch"]
            found = request_rate(logs, burst_began, until)
            print(
                f"the manager's requests to each worker while dispatching ({found['requests']:.0f} in all): "
                f"p50 {found['p50']:.0f}/s, max {found['max']:.0f}/s, {100 * found['at_limit']:.0f}% of the seconds "
                f"at 5/s or more"
            )
            for kind, (total, p50, peak) in list(found["kinds"].items())[:8]:
                print(f"  {kind}: {total}, p50 {p50:.0f}/s, max {peak}/s per worker")
            rates = ", ".join(f"{r} {rate:.1f}/s" for r, rate in found["per_resource"].items())
            print(f"  mean per worker, by resource: {rates}")
    finally:
        for sim in sims.values():
            sim.down()


if __name__ == "__main__":
    main()

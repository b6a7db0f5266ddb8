"""`konduktor why` on a large cluster, the pure core only: 1,000 pending workloads of one team and 1,000 GPU
nodes (plus 100 admitted workloads and 20 teams' quota rows), timed for the job at the back of the queue.

Prints figures; asserts nothing.

    .venv/bin/python bench/why_bench.py [--pending 1000] [--nodes 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from fractions import Fraction
from typing import Any

from konduktor.queueing.capacity import NodeCapacity, Quarantine, summarize
from konduktor.queueing.explain import pending_order, why
from konduktor.quotas.usage import TeamUsage

TEAMS = 20


def workload(index: int, *, admitted: bool) -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]
    return {
        "metadata": {
            "name": f"job-{index}-w",
            "namespace": "team-0",
            "uid": f"uid-{index:06d}",
            "creationTimestamp": f"2026-11-23T{index // 3600 % 24:02d}:{index // 60 % 60:02d}:{index % 60:02d}Z",
            "ownerReferences": [{"kind": "Job", "name": f"job-{index}"}],
        },
        "spec": {
            "queueName": "default",
            "priority": (100, 1000, 10000)[index % 3],
            "podSets": [
                {
                    "name": "main",
                    "count": 1 + index % 4,
                    "template": {"spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}]}},
                }
            ],
        },
        "status": {"conditions": conditions if admitted else []},
    }


def usage(team: int) -> TeamUsage:
    return TeamUsage(
        team=f"team-{team}",
        cluster_queue=f"team-{team}",
        cohort="lab",
        flavor="h100",
        resource="nvidia.com/gpu",
        nominal=Fraction(400),
        borrowing_limit=Fraction(100),
        lending_limit=None,
        used=Fraction(400),
        borrowed=Fraction(0),
        lent=Fraction(0),
        admitted_workloads=5,
        pending_workloads=0,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    admitted = [workload(i, admitted=True) for i in range(100)]
    pending = [workload(100 + i, admitted=False) for i in range(args.pending)]
    workloads = admitted + pending
    local_queues = {(f"team-{t}", "default"): f"team-{t}" for t in range(TEAMS)}
    nodes = tuple(
        NodeCapacity(
            f"gpu-{i:05d}", "h100", 8, 7, True, Quarantine("Xid 79", "2026-11-23T19:00:00Z") if i % 50 == 0 else None
        )
        for i in range(args.nodes)
    )
    capacity = summarize(nodes, tuple(usage(t) for t in range(TEAMS)))  # what team members read
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        order = pending_order(workloads, local_queues)
        last = order[-1]
        target = next(w for w in workloads if w["metadata"]["name"] == last.name)
        explanation = why(
            last.job, "team-0", target, workloads=workloads, local_queues=local_queues, capacity=capacity, pending=order
        )
        times.append(time.perf_counter() - start)
    print(f"why: {args.pending} pending workloads, {len(admitted)} admitted, {args.nodes} nodes, {TEAMS} teams")
    print(f"  verdict: {explanation.state}, position {explanation.position}, {len(explanation.reasons)} reasons")
    median, worst = statistics.median(times) * 1000, max(times) * 1000
    print(f"  time: median {median:.1f} ms, max {worst:.1f} ms ({args.repeat} runs)")


if __name__ == "__main__":
    main()

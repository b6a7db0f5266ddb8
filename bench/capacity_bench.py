"""The published capacity at fleet scale, the pure core only: synthetic Nodes and Pods (8 GPUs per node, pods of
1 to 8 GPUs, 1% of the nodes quarantined) through the watch events the publisher applies
(`konduktor.queueing.capacity.Fleet`), for 1,000, 5,000 and 10,000 nodes and 10 and 100 teams.

For each: the ConfigMap a team member reads, its size and the writes per minute into etcd, before (the list of
every node, rewritten in every team namespace every 30 s, its timestamp changing each time) and now (the summary,
written only when it changes, at most once per settle period, and one heartbeat Lease per period), for an idle
fleet and for one whose jobs churn (each GPU pod runs `--job-minutes` on average, so nodes/job-minutes pods finish
and as many start every minute). Writes are counted by replaying one minute of events in 10-second rounds and
comparing each round's revision with the last; the time to compute one round is measured too. With `--sliced`, one
node in ten is in a MIG sharing group (`h100-mig`: 2 mig-1g.10gb, 1 mig-2g.20gb and 1 mig-3g.40gb per GPU) and one
in ten time-sliced (`h100-shared`: 4 gpu.shared per GPU), their pods asking for slices and every team's queue
holding a quota of each: the published slices per group and resource, and the queues' slice rows.

With `--sim NAME`, on a running simulated cluster instead (`konduktor-install sim up --nodes 2000x8:H100 --name
NAME`): the publisher's service (`queueing.publisher.serve`, as an administrator) on its nodes with `--sim-teams`
team namespaces, a ResourceFlavor of the nodes' product and `--sim-quarantined` nodes quarantined, then an idle
fleet for `--minutes`: the ConfigMap's size and the writes counted by watching every copy and the heartbeat Lease;
then one more node quarantined: the copies written and how long after. The nodes are released at the end.

Prints figures; asserts nothing.

    .venv/bin/python bench/capacity_bench.py [--nodes 1000,5000,10000] [--teams 10,100] [--job-minutes 60] [--sliced]
    .venv/bin/python bench/capacity_bench.py --sim NAME [--sim-teams 40] [--minutes 2] [--sim-quarantined 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import threading
import time
from dataclasses import asdict
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from konduktor.kube.client import ApiError, Kube
from konduktor.kube.watch import WatchEvent
from konduktor.queueing.capacity import (
    HEARTBEAT_SECONDS,
    Fleet,
    configmap,
    flavor_of,
    heartbeat,
    micro_time,
    read_node,
    revision,
    slim_node,
    slim_pod,
)
from konduktor.queueing.cluster import Publication
from konduktor.queueing.publisher import SETTLE_SECONDS, serve
from konduktor.quotas.usage import TeamUsage
from konduktor.sim.cluster import SimCluster
from konduktor.vocabulary import (
    CAPACITY_CONFIGMAP,
    HEALTH_TAINT_KEY,
    KUEUE_API,
    PRODUCT_LABEL,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    SYSTEM_NAMESPACE,
    TEAM_LABEL,
)

BEFORE_EVERY = 30  # seconds between the earlier publisher's rounds (its chart default)
SIZES = (1, 2, 4, 8)
FLAVOR = {"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}
NOW = "2026-11-28T10:00:00Z"
# With --sliced: the sharing groups' flavors (as quotas/render.py writes them), what one of their nodes advertises
# and the label that puts a node in it, by node index modulo 10.
MIG_1G, MIG_2G, MIG_3G, SHARED = (
    "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb", "nvidia.com/gpu.shared"
)  # fmt: skip
GROUPS = {
    3: ("h100-mig", "nvidia.com/mig.config", {MIG_1G: 16, MIG_2G: 8, MIG_3G: 8}),
    4: ("h100-shared", "nvidia.com/device-plugin.config", {SHARED: 32}),
}
GROUP_FLAVORS = tuple(
    {"metadata": {"name": name}, "spec": {"nodeLabels": {**FLAVOR["spec"]["nodeLabels"], label: name}}}
    for name, label, _ in GROUPS.values()
)
SLICES = [MIG_1G, MIG_2G, MIG_3G, SHARED]


def node(index: int, sliced: bool = False) -> dict[str, Any]:
    name = f"gpu-h100-{index:05d}"
    quarantined = index % 100 == 7
    group = GROUPS.get(index % 10) if sliced else None
    found = {
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "kubernetes.io/hostname": name,
                "konduktor.ai/topology-block": f"block-{index // 64}",
                "konduktor.ai/topology-rack": f"rack-{index // 16}",
            },
            "annotations": {QUARANTINE_REASON: "Xid 79: GPU has fallen off the bus", QUARANTINED_AT: NOW}
            if quarantined
            else {},
        },
        "spec": {"taints": [{"key": HEALTH_TAINT_KEY, "effect": "NoSchedule"}]} if quarantined else {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "224", "memory": "2Ti"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    if group is not None:
        name_, label, offered = group
        found["metadata"]["labels"][label] = name_
        found["status"]["allocatable"] = {
            "nvidia.com/gpu": "0", "cpu": "224", "memory": "2Ti", **{r: str(n) for r, n in offered.items()}
        }  # fmt: skip
    return found


Pod = tuple[str, str, int, str]  # name, node, count, resource


def pod(name: str, on: str, gpus: int, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-0"},
        "spec": {"nodeName": on, "containers": [{"name": "main", "resources": {"limits": {resource: gpus}}}]},
        "status": {"phase": "Running"},
    }


def queue(team: int, admitted: int, sliced: bool = False) -> dict[str, Any]:
    """A ClusterQueue with its usage, as Kueue reports it; with `sliced`, as quotas/render.py writes it for the
    sharing groups (every flavor lists every resource, a quota of each slice on its group's flavor)."""
    resources = ["nvidia.com/gpu", *SLICES] if sliced else ["nvidia.com/gpu"]
    quota = {("h100", "nvidia.com/gpu"): 80, **{(g[0], r): n for g in GROUPS.values() for r, n in g[2].items()}}
    flavors = ["h100", *(f["metadata"]["name"] for f in GROUP_FLAVORS)] if sliced else ["h100"]
    used = {("h100", "nvidia.com/gpu"): 8 * admitted, **({("h100-mig", MIG_1G): team % 16} if sliced else {})}
    return {
        "metadata": {"name": f"team-{team}"},
        "spec": {
            "cohort": "lab",
            "resourceGroups": [
                {
                    "coveredResources": resources,
                    "flavors": [
                        {"name": f, "resources": [{"name": r, "nominalQuota": quota.get((f, r), 0)} for r in resources]}
                        for f in flavors
                    ],
                }
            ],
        },
        "status": {
            "admittedWorkloads": admitted,
            "pendingWorkloads": 2,
            "flavorsUsage": [
                {"name": f, "resources": [{"name": r, "total": str(n)}]} for (f, r), n in sorted(used.items())
            ],
        },
    }


def fleet_of(nodes: int, teams: int, rng: random.Random, sliced: bool = False) -> tuple[Fleet, list[Pod]]:
    """The fleet after its lists: every node, pods filling a random share of each (slices on a sharing group's
    node), the teams' queues."""
    fleet = Fleet()
    node_objects = [node(i, sliced) for i in range(nodes)]
    pods: list[Pod] = []
    for index, obj in enumerate(node_objects):
        group = GROUPS.get(index % 10) if sliced else None
        for resource, offered in group[2].items() if group is not None else [("nvidia.com/gpu", 8)]:
            used = 0
            while used < offered and rng.random() < 0.8:
                count = min(rng.choice(SIZES), offered - used)
                pods.append((f"p-{index}-{resource[11:]}-{used}", obj["metadata"]["name"], count, resource))
                used += count
    fleet.apply(WatchEvent("Node", "SYNC", tuple(slim_node(n) for n in node_objects)))
    fleet.apply(WatchEvent("Pod", "SYNC", tuple(slim_pod(pod(*p)) for p in pods)))
    fleet.apply(WatchEvent("ResourceFlavor", "SYNC", (FLAVOR, *(GROUP_FLAVORS if sliced else ()))))
    fleet.apply(WatchEvent("ClusterQueue", "SYNC", tuple(queue(t, 5, sliced) for t in range(teams))))
    return fleet, pods


def before_size(fleet: Fleet, teams: int) -> int:
    """The earlier publisher's ConfigMap data: every GPU node, with the time of the round."""
    held: dict[str, int] = {}
    for node_name, gpus in fleet.pods.values():
        held[node_name] = held.get(node_name, 0) + gpus
    nodes = [
        read_node(n, flavor_of(n["metadata"]["labels"], [FLAVOR]) or "h100", held.get(name, 0))
        for name, n in sorted(fleet.nodes.items())
    ]
    data = {
        "publishedAt": "2026-11-28T10:00:00+00:00",
        "nodes": [asdict(n) for n in nodes],
        "queues": [usage_row(t) for t in range(teams)],
    }
    return len(json.dumps(data, sort_keys=True))


def usage_row(team: int) -> dict[str, Any]:
    row = TeamUsage(
        f"team-{team}", f"team-{team}", "lab", "h100", "nvidia.com/gpu", Fraction(80), None, None, Fraction(40),
        Fraction(0), Fraction(0), 5, 2,
    )  # fmt: skip
    return row.row()


def churn_minute(fleet: Fleet, pods: list[Pod], finishing: int, rng: random.Random) -> int:
    """One minute of churn in 10-second rounds: jobs finish and others start in their place (the same GPUs on the
    same node, as a queue refills a freed node), ClusterQueue usage moves; returns the rounds whose content
    changed (each one a write per team namespace)."""
    rounds = int(60 // SETTLE_SECONDS)
    changed = 0
    last = revision(fleet.capacity())
    for round_index in range(rounds):
        for _ in range(finishing // rounds):
            slot = rng.randrange(len(pods))
            name, on, gpus, resource = pods[slot]
            fleet.apply(WatchEvent("Pod", "DELETED", (slim_pod(pod(name, on, gpus, resource)),)))
            if rng.random() < 0.9:  # most freed GPUs are taken again within the round
                pods[slot] = (f"{name}-{round_index}", on, gpus, resource)
                fleet.apply(WatchEvent("Pod", "ADDED", (slim_pod(pod(*pods[slot])),)))
        current = revision(fleet.capacity())
        changed += current != last
        last = current
    return changed


def count_writes(kube: Kube, kind: str, namespace: str | None, version: str, seconds: float) -> list[str]:
    """The MODIFIED and ADDED events of `kind` named konduktor-capacity for `seconds`, as namespace names."""
    seen: list[str] = []
    end = time.monotonic() + seconds
    with contextlib.suppress(ApiError):
        stream = kube.watch(
            "v1" if kind == "ConfigMap" else "coordination.k8s.io/v1",
            kind,
            version,
            namespace=namespace,
            timeout_seconds=int(seconds),
            field_selector=f"metadata.name={CAPACITY_CONFIGMAP}",
        )
        for event in stream:
            if event["type"] in ("ADDED", "MODIFIED"):
                seen.append(event["object"]["metadata"]["namespace"])
            if time.monotonic() > end:
                break
    return seen


def on_sim(name: str, teams: int, minutes: float, quarantined: int) -> None:
    kube = Kube(SimCluster(name).kubeconfig)
    nodes = kube.list("v1", "Node", label_selector=PRODUCT_LABEL)
    product = nodes[0]["metadata"]["labels"][PRODUCT_LABEL]
    kube.apply({"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": "bench-gpu"},
                "spec": {"nodeLabels": {PRODUCT_LABEL: product}}})  # fmt: skip
    for namespace in (SYSTEM_NAMESPACE, *(f"bench-team-{t}" for t in range(teams))):
        labels = {TEAM_LABEL: namespace} if namespace != SYSTEM_NAMESPACE else {}
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}})
    for obj in nodes[:quarantined]:  # as the health controller leaves a quarantined node
        quarantine(kube, obj["metadata"]["name"])
    stop = threading.Event()
    rounds: list[Publication] = []
    start = time.monotonic()
    service = threading.Thread(target=serve, args=(kube, stop), kwargs={"on_round": rounds.append}, daemon=True)
    service.start()
    while not rounds and service.is_alive():
        time.sleep(0.5)
    first = time.monotonic() - start
    copy = kube.get("v1", "ConfigMap", CAPACITY_CONFIGMAP, "bench-team-0") or {}
    size = len(json.dumps(copy.get("data", {})))
    print(
        f"sim {name}: {len(nodes)} GPU nodes, {teams} team namespaces: first round after {first:.1f} s "
        f"(lists and watches), {len(rounds[0].written)} copies written, ConfigMap data {size / 1024:.1f} KiB"
    )
    configmaps = kube.request("GET", "/api/v1/configmaps", query={"limit": "1"})["metadata"]["resourceVersion"]
    results: dict[str, list[str]] = {}
    seconds = minutes * 60

    def count(key: str, kind: str, namespace: str | None) -> None:
        results[key] = count_writes(kube, kind, namespace, configmaps, seconds)

    watchers = [
        threading.Thread(target=count, args=("cm", "ConfigMap", None)),
        threading.Thread(target=count, args=("lease", "Lease", SYSTEM_NAMESPACE)),
    ]
    for watcher in watchers:
        watcher.start()
    for watcher in watchers:
        watcher.join()
    print(
        f"  idle {minutes:g} min: {len(results.get('cm', []))} ConfigMap writes, "
        f"{len(results.get('lease', []))} heartbeat Lease writes"
    )
    # One more node quarantined: every copy written once, within the settle period.
    done = len(rounds)
    changed = time.monotonic()
    quarantine(kube, nodes[quarantined]["metadata"]["name"])
    while not any(r.written for r in rounds[done:]) and time.monotonic() - changed < 120:
        time.sleep(0.2)
    written = sum(len(r.written) for r in rounds[done:])
    print(f"  a node quarantined: {written} copies written {time.monotonic() - changed:.1f} s later")
    stop.set()
    service.join(timeout=30)
    for obj in nodes[: quarantined + 1]:
        kube.patch("v1", "Node", obj["metadata"]["name"], {"metadata": {"annotations": {QUARANTINE_REASON: None}},
                   "spec": {"taints": None}})  # fmt: skip


def quarantine(kube: Kube, name: str) -> None:
    patch = {
        "metadata": {"annotations": {QUARANTINE_REASON: "Xid 79: GPU has fallen off the bus", QUARANTINED_AT: NOW}},
        "spec": {"taints": [{"key": HEALTH_TAINT_KEY, "effect": "NoSchedule"}]},
    }
    kube.patch("v1", "Node", name, patch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,5000,10000")
    parser.add_argument("--teams", default="10,100")
    parser.add_argument("--job-minutes", type=float, default=60)
    parser.add_argument("--sliced", action="store_true", help="one node in ten in a MIG group, one time-sliced")
    parser.add_argument("--sim", metavar="NAME", help="measure on this running simulated cluster instead")
    parser.add_argument("--sim-teams", type=int, default=40)
    parser.add_argument("--minutes", type=float, default=2)
    parser.add_argument("--sim-quarantined", type=int, default=20, help="nodes quarantined before the measurement")
    args = parser.parse_args()
    if args.sim:
        on_sim(args.sim, args.sim_teams, args.minutes, args.sim_quarantined)
        return
    lease_bytes = len(json.dumps(heartbeat("0123456789abcdef", datetime.now(UTC))))
    print(
        f"before: every {BEFORE_EVERY} s, each team namespace; now: on change, at most every {SETTLE_SECONDS:.0f} s, "
        f"and a heartbeat Lease ({lease_bytes} B) every {HEARTBEAT_SECONDS} s"
    )
    print(
        "nodes   teams | ConfigMap before   now    | idle writes/min (KiB/min) before -> now "
        "| churn writes/min (KiB/min) before -> now | round ms"
    )
    for nodes in (int(n) for n in args.nodes.split(",")):
        for teams in (int(t) for t in args.teams.split(",")):
            rng = random.Random(nodes * 1000 + teams)
            fleet, pods = fleet_of(nodes, teams, rng, args.sliced)
            times = []
            for _ in range(3):
                start = time.perf_counter()
                capacity = fleet.capacity()
                times.append(time.perf_counter() - start)
            now_size = len(json.dumps(configmap(capacity, "team-0", micro_time(datetime.now(UTC)))))
            old_size = before_size(fleet, teams)
            old_writes = teams * 60 // BEFORE_EVERY
            idle_rounds = churn_minute(fleet, pods, 0, rng)
            idle_writes = idle_rounds * teams + 60 // HEARTBEAT_SECONDS
            changed = churn_minute(fleet, pods, max(1, round(nodes / args.job_minutes)), rng)
            churn_writes = changed * teams + 60 // HEARTBEAT_SECONDS
            churn_kb = (changed * teams * now_size + lease_bytes) / 1024
            idle_kb = (idle_rounds * teams * now_size + lease_bytes) / 1024
            print(
                f"{nodes:>6} {teams:>6} | {old_size / 1024:>9.0f} KiB {now_size / 1024:>6.1f} KiB "
                f"| {old_writes:>5} ({old_writes * old_size / 1024:>7.0f}) -> {idle_writes:>3} ({idle_kb:>5.1f}) "
                f"| {old_writes:>5} ({old_writes * old_size / 1024:>7.0f}) -> {churn_writes:>4} ({churn_kb:>6.0f}) "
                f"| {statistics.median(times) * 1000:>6.0f}"
            )


if __name__ == "__main__":
    main()

"""Fleet scale (#41): the simulated cluster at 1,000, 5,000 and 10,000 GPU nodes (start time, memory per
component), the admin's commands at (10 teams, 1,000 nodes), (100, 5,000) and (100, 10,000), and Kueue's admissions
per second with the umbrella's settings (100 ClusterQueues in a cohort, 10,000 pending one-GPU workloads).

    .venv/bin/python bench/fleet_bench.py sim [--sizes 1000,5000,10000]
    .venv/bin/python bench/fleet_bench.py fleet [--sizes 10x1000,100x5000,100x10000] [--runs 3] [--workloads 10000]

Runs in its own state directory (tools come from the shared cache) and removes its clusters afterwards. Each
figure is printed with the machine's load average, since other work may share the cores.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

os.environ.setdefault("KONDUKTOR_STATE", tempfile.mkdtemp(prefix="konduktor-fleet-bench-"))

from konduktor.config.load import load_config
from konduktor.config.model import Config
from konduktor.errors import KonduktorError
from konduktor.kube.client import Kube
from konduktor.kube.timestamps import parse_time
from konduktor.ops.up import UpRequest, run_up
from konduktor.quotas.sync import stop_policy
from konduktor.sim.cluster import SimCluster, SimSpec
from konduktor.sim.nodes import parse_nodes_spec
from konduktor.sim.pools import spec_of
from konduktor.vocabulary import KUEUE_API
from konduktor.waiting import wait_until

ENTRY = "from konduktor.cli.main import run; run()"
GPUS_PER_NODE = 8

# The programs of a simulated cluster, by the name of their executable (the GPU agent is `python -m ...`).
COMPONENTS = {
    "etcd": "etcd",
    "kube-apiserver": "kube-apiserver",
    "kube-controller-manager": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler",
    "kwok-controller": "kwok",
    "kueue": "kueue",
}


def load() -> str:
    return " ".join(f"{n:.2f}" for n in os.getloadavg())


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB: now and its peak."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def cpu_seconds(pid: int) -> float:
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def component_of(pid: int) -> str | None:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    name = Path(args[0]).name
    if name in COMPONENTS:
        return COMPONENTS[name]
    if "konduktor.sim.agent" in args:
        return "gpu-agent"
    return None


def memory_by_component(cluster: SimCluster) -> dict[str, tuple[int, int, float]]:
    """Component -> (RSS MiB, peak RSS MiB, CPU s so far)."""
    found: dict[str, tuple[int, int, float]] = {}
    for pid in cluster.processes():
        name = component_of(pid)
        if name is None:
            continue
        try:
            rss, peak = memory_kib(pid)
            cpu = cpu_seconds(pid)
        except OSError:
            continue
        found[name] = (rss // 1024, peak // 1024, cpu)
    return found


class Stages:
    """The sim's progress messages with the seconds since `reset` at which each came."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.started = time.monotonic()
        self.seen: list[tuple[float, str]] = []

    def __call__(self, message: str) -> None:
        self.seen.append((time.monotonic() - self.started, message))

    def first(self, prefix: str) -> float:
        return next((at for at, message in self.seen if message.startswith(prefix)), float("nan"))


def start_figures(cluster: SimCluster, stages: Stages, spec: SimSpec, size: int) -> None:
    """`sim up` of a new cluster of `size` GPU nodes, by stage."""
    stages.reset()
    cluster.up(spec)
    total = time.monotonic() - stages.started
    applying = stages.first("nodes: applying")
    created = next((at for at, message in stages.seen if " Ready and schedulable" in message), total)
    print(
        f"    sim up to all {size} nodes Ready and schedulable {total:7.1f} s: control plane and Kueue "
        f"{applying:5.1f} s, nodes created in {created - applying:6.1f} s ({size / (created - applying):.0f}/s), "
        f"then Ready in {total - created:6.1f} s; {1000 * (total - applying) / size:.1f} ms per node; "
        f"load average {load()}"
    )


def memory_figures(
    cluster: SimCluster, size: int, previous: tuple[int, dict[str, tuple[int, int, float]]] | None
) -> tuple[int, dict[str, tuple[int, int, float]]]:
    """RSS of each component of a settled cluster, per node, and what each node added since the previous size."""
    time.sleep(30)  # a settled cluster
    memory = memory_by_component(cluster)
    total_rss = sum(rss for rss, _, _ in memory.values())
    for name, (rss, peak, cpu) in sorted(memory.items()):
        print(
            f"      {name:<24} RSS {rss:6d} MiB (peak {peak:6d}), {1024 * rss / size:7.1f} KiB per node, "
            f"CPU {cpu:7.1f} s"
        )
    print(f"      {'all':<24} RSS {total_rss:6d} MiB, {1024 * total_rss / size:7.1f} KiB per node")
    if previous is not None:
        before_size, before = previous
        added = {n: memory[n][0] - before[n][0] for n in memory if n in before}
        print(
            f"      each node added from {before_size} to {size}: "
            + ", ".join(f"{n} {1024 * mib / (size - before_size):.0f} KiB" for n, mib in sorted(added.items()))
            + f"; all {1024 * sum(added.values()) / (size - before_size):.0f} KiB"
        )
    return size, memory


def sim_figures(sizes: list[int], keep_last: bool = False) -> None:
    """`sim up --nodes SIZEx8:H100` of a new cluster at each size: start time and memory."""
    print(f"simulated cluster, nodes of 8 H100 (load average before: {load()})")
    stages = Stages()
    cluster = SimCluster("fleet", progress=stages)
    previous: tuple[int, dict[str, tuple[int, int, float]]] | None = None
    try:
        for index, size in enumerate(sizes):
            print(f"  {size} nodes:")
            start_figures(cluster, stages, SimSpec(pools=parse_nodes_spec(f"{size}x8:H100")), size)
            previous = memory_figures(cluster, size, previous)
            if not (keep_last and index == len(sizes) - 1):
                cluster.down()
    except BaseException:
        cluster.down()
        raise


def fleet_config(teams: int, nodes: int, topology: bool = False) -> str:
    """A lint-clean config of `teams` teams sharing `nodes` nodes of 8 H100 in one cohort: each team's quota its
    share of the GPUs, free to borrow as much again. No burn-in: `up` is timed for its other steps."""
    quota = nodes * GPUS_PER_NODE // teams
    data: dict[str, Any] = {
        "version": 1,
        "cluster": {"name": "fleet"},
        "kueue": {"sharing": "fair", "fairSharingStrategies": ["LessThanInitialShare"]},
        "capacityReserve": {"cpu": "8", "memory": "64Gi"},
        "gpuTypes": {
            "h100": {
                "product": "NVIDIA-H100-80GB-HBM3",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "nodes": nodes,
                "gpusPerNode": GPUS_PER_NODE,
                "nodeAllocatable": {"cpu": "192", "memory": "1900Gi"},
            }
        },
        "priorities": {"opportunistic": 100, "standard": 1000, "default": 1000},
        "teams": {
            f"team-{i:03d}": {
                "namespaces": [f"team-{i:03d}"],
                "groups": [f"team-{i:03d}"],
                "gpus": {"h100": {"quota": quota, "borrowLimit": quota}},
            }
            for i in range(teams)
        },
        "burnin": {"level": "none"},
    }
    if topology:
        data["topology"] = {
            "name": "fleet-topology",
            "levels": ["konduktor.ai/topology-rack", "kubernetes.io/hostname"],
        }
    stream = io.StringIO()
    YAML().dump(data, stream)
    return stream.getvalue()


def command_time(args: list[str]) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the command's process, exit code, last line of its output) of one new process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", ENTRY, *args], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return wall, cpu, done.returncode, (lines[-1] if lines else "")[:70]


def up_figures(config: Path, sim: str) -> None:
    """`up` by step (in-process, as bench/up_bench.py): on the new cluster, then again."""
    for label in ("up (the platform installed)", "up again (nothing to change)"):
        started = time.monotonic()
        try:
            result = run_up(UpRequest(load_config(config), sim=sim))
        except KonduktorError as problem:  # the figures of the commands below still say something
            print(f"    {label:<32} failed after {time.monotonic() - started:.1f} s: {problem.message}")
            continue
        steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in result.steps)
        print(f"    {label:<32} {time.monotonic() - started:7.1f} s: {steps}; load {load()}")


def cli_figures(config: Path, sim: str, runs: int) -> None:
    """Each command as an admin runs it, a new process each time, on the simulated cluster `sim`."""
    target = ["--sim", sim]
    commands = {
        "validate": ["validate", str(config)],
        "render": ["render", str(config)],
        "plan": ["plan", str(config), *target],
        "quotas apply (up's quotas step)": ["quotas", "apply", str(config), *target],
        "quotas explain": ["quotas", "explain", *target],
        "quotas explain team-000": ["quotas", "explain", "team-000", *target],
        "status": ["status", *target],
        "nodes": ["nodes", *target],
        "nodes --state quarantined": ["nodes", "--state", "quarantined", *target],
        "nodes -o json": ["nodes", "-o", "json", *target],
    }
    for label, args in commands.items():
        measured = [command_time(args) for _ in range(runs)]
        walls = sorted(m[0] for m in measured)
        cpus = sorted(m[1] for m in measured)
        *_, code, said = measured[-1]
        print(
            f"    {label:<32} wall {walls[len(walls) // 2]:6.2f} s (max {walls[-1]:6.2f}), "
            f"CPU {cpus[len(cpus) // 2]:5.2f} s, exit {code}: {said}"
        )
    print(f"    load average {load()}")


BENCH_MANAGER = "konduktor-fleet-bench"
PAUSE = "registry.k8s.io/pause:3.10"


def queue_counts(kube: Kube) -> tuple[int, int]:
    """(pending, admitted) workloads over every ClusterQueue, as Kueue reports them in their status."""
    queues = kube.list(KUEUE_API, "ClusterQueue")
    pending = sum(q.get("status", {}).get("pendingWorkloads", 0) for q in queues)
    admitted = sum(q.get("status", {}).get("admittedWorkloads", 0) for q in queues)
    return pending, admitted


def one_gpu_workload(index: int, namespace: str) -> dict[str, Any]:
    """A Workload of one pod asking one GPU, as Kueue's job integration would make for a one-GPU Job; made directly,
    as Kueue's own scheduler benchmark does, so that only admission is measured (no pods start)."""
    resources = {"requests": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "4Gi"}}
    return {
        "apiVersion": KUEUE_API,
        "kind": "Workload",
        "metadata": {"name": f"one-gpu-{index:05d}", "namespace": namespace},
        "spec": {
            "queueName": "default",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}
                            ],
                        }
                    },
                }
            ],
        },
    }


def kueue_figures(cluster: SimCluster, config: Config, workloads: int) -> None:
    """Every ClusterQueue held, `workloads` one-GPU Workloads spread over the teams' LocalQueues, then every queue
    released at once: admissions per second until all are admitted, and the CPU each component spent on them."""
    teams = sorted(config.teams)
    with Kube(cluster.kubeconfig, timeout=60) as kube:
        for team in teams:
            kube.apply(stop_policy(team, "Hold"), field_manager=BENCH_MANAGER)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda i: kube.create(one_gpu_workload(i, teams[i % len(teams)])), range(workloads)))
        created = time.monotonic() - started
        wait_until(
            f"Kueue to see {workloads} pending workloads",
            lambda: queue_counts(kube)[0] >= workloads,
            timeout=600,
            interval=2,
        )
        print(
            f"    {workloads} one-GPU Workloads in {len(teams)} held ClusterQueues of one cohort: created in "
            f"{created:.0f} s ({workloads / created:.0f}/s), all pending after {time.monotonic() - started:.0f} s"
        )
        cpu_before = memory_by_component(cluster)
        released = time.monotonic()
        # All at once: one after another, the releases themselves paced the admissions (each queue's workloads
        # were admitted within the second of its release).
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda team: kube.apply(stop_policy(team, "None"), field_manager=BENCH_MANAGER), teams))
        released_in = time.monotonic() - released
        wait_until(
            "every workload to be admitted", lambda: queue_counts(kube)[1] >= workloads, timeout=1800, interval=2
        )
        cpu_after = memory_by_component(cluster)
        admitted_at = sorted(
            parse_time(c["lastTransitionTime"]) or 0.0
            for w in kube.list(KUEUE_API, "Workload")
            for c in w.get("status", {}).get("conditions", [])
            if c["type"] == "Admitted" and c["status"] == "True"
        )
    admitted = len(admitted_at)
    span = max(admitted_at[-1] - admitted_at[0], 1.0)
    busiest = max(Counter(int(at) for at in admitted_at).values())
    print(
        f"    released in {released_in:.1f} s: {admitted} admitted over {span:.0f} s (first to last Admitted "
        f"condition, 1 s resolution): {admitted / span:.1f} admissions/s, {busiest} in the busiest second; "
        f"load {load()}"
    )
    spent = {n: cpu_after[n][2] - cpu_before[n][2] for n in sorted(cpu_after) if n in cpu_before}
    print(
        "    CPU over the admissions: "
        + ", ".join(
            f"{n} {cpu:.1f} s ({1000 * cpu / max(admitted, 1):.1f} ms each)" for n, cpu in sorted(spent.items())
        )
    )


def fleet_figures(sizes: list[tuple[int, int]], runs: int, workloads: int, keep_last: bool) -> None:
    """At each size, on a new simulated cluster made from the config: its start and memory, `up` by step, at the
    last size Kueue's admissions (which leave the workloads admitted), then the admin's commands."""
    print(f"fleet, teams x nodes of 8 H100 (load average before: {load()})")
    workdir = Path(tempfile.mkdtemp(prefix="konduktor-fleet-"))
    stages = Stages()
    cluster = SimCluster("fleet", progress=stages)
    previous: tuple[int, dict[str, tuple[int, int, float]]] | None = None
    try:
        for index, (teams, nodes) in enumerate(sizes):
            path = workdir / f"fleet-{teams}x{nodes}.yaml"
            path.write_text(fleet_config(teams, nodes))
            config = load_config(path).config
            print(f"  {teams} teams, {nodes} nodes ({path}):")
            start_figures(cluster, stages, spec_of(config, 5.0), nodes)
            previous = memory_figures(cluster, nodes, previous)
            up_figures(path, cluster.name)
            if index == len(sizes) - 1 and workloads:
                kueue_figures(cluster, config, workloads)
            cli_figures(path, cluster.name, runs)
            if not (keep_last and index == len(sizes) - 1):
                cluster.down()
    except BaseException:
        cluster.down()
        raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="part", required=True)
    sim = commands.add_parser("sim", help="the simulated cluster's start time and memory")
    sim.add_argument("--sizes", default="1000,5000,10000")
    sim.add_argument("--keep", action="store_true", help="leave the last cluster running (named `fleet`)")
    fleet = commands.add_parser("fleet", help="at each teams x nodes: the sim's start, `up`, the admin's commands")
    fleet.add_argument("--sizes", default="10x1000,100x5000,100x10000", help="TEAMSxNODES,...")
    fleet.add_argument("--runs", type=int, default=3, help="runs of each command")
    fleet.add_argument("--workloads", type=int, default=10000, help="one-GPU Workloads at the last size (0: none)")
    fleet.add_argument("--keep", action="store_true", help="leave the last cluster running (named `fleet`)")
    args = parser.parse_args()
    if args.part == "sim":
        sim_figures([int(n) for n in args.sizes.split(",")], keep_last=args.keep)
    else:
        sizes = [(int(t), int(n)) for t, n in (size.split("x") for size in args.sizes.split(","))]
        fleet_figures(sizes, args.runs, args.workloads, keep_last=args.keep)


if __name__ == "__main__":
    main()

"""Health controller figures on the simulated cluster with many fake GPU nodes: fault-to-taint latency of the Node
watch signal (a lost GPU) and of the Loki signal (an Xid 79 line), a burst of simultaneous faults, API writes per
fault and per duplicate, the controller's memory and its CPU with no faults (idle: while the new cluster settles, then
once it sends no more Node changes) and for a full pass. The burst is also timed from kube-apiserver's audit log, with
the CPU each program on the machine used meanwhile.

    .venv/bin/python bench/health_bench.py [--nodes 1000,5000,10000] [--samples 60] [--log-samples 40] [--poll 1]
                                           [--burst 500] [--node-concurrency 32] [--duplicates 1000] [--via-collector]

For each node count: a new sim cluster `bench-health` (COUNT x 8 H100) whose kube-apiserver keeps an audit log of
writes; `konduktor-health run` as a subprocess against it; the pinned Loki, configured as the umbrella deploys
it (kernel lines written as its collector ships them); taints seen through a Node watch in this process. Runs in
its own state directory (tools come from the shared cache) and removes its clusters afterwards.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(prefix="konduktor-bench-")
# kwokctl reads it when it creates a cluster: kube-apiserver then logs the requests the policy selects.
os.environ["KWOK_KUBE_AUDIT_POLICY"] = os.path.join(os.environ["KONDUKTOR_STATE"], "audit-policy.yaml")
# The Loki query_range server is the one the health controller's tests use.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "installer" / "tests"))

import requests
from cpu_by_program import TICKS, program, sample
from loki_api import Loki, LokiApi, new_tenant
from otelcol import Collector, collector, kernel_pipeline
from ruamel.yaml import YAML

from konduktor.health.decide import TAINT_VALUE
from konduktor.health.loop import HealthController
from konduktor.health.settings import BreakerSettings, GpuTypeSettings, HealthSettings, LokiSettings
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.timestamps import parse_time
from konduktor.kube.watch import WatchEvent
from konduktor.sim.cluster import SimCluster, SimSpec, free_port, tail
from konduktor.sim.nodes import PRODUCTS, node_manifests, node_name, parse_nodes_spec
from konduktor.vocabulary import HEALTH_TAINT_KEY

ROOT = Path(__file__).resolve().parents[1]
STATE = Path(os.environ["KONDUKTOR_STATE"])
AUDIT_POLICY = Path(os.environ["KWOK_KUBE_AUDIT_POLICY"])
CLUSTER = "bench-health"
NAMESPACE = "konduktor-health-bench"  # the controller's Lease
GPUS = 8
BENCH_AGENT = "konduktor-health-bench"  # this process's requests, told apart from the controller's in the audit log
WRITE_VERBS = {"create", "update", "patch", "delete"}
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
# The goals at 10,000 nodes (issue #41).
WATCH_GOAL = 0.5
RSS_GOAL_MIB = 200
IDLE_CPU_GOAL = 0.05  # of a core
BURST_RATE_GOAL = 100  # nodes quarantined per second
REST_SECONDS = 30
# Settled: fewer Node changes a second than this, over 10 s; waited for at most SETTLE_SECONDS.
SETTLED_EVENTS = 2.0
SETTLE_SECONDS = 600
FULL_PASS_SECONDS = HealthSettings().full_pass_seconds

POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    namespaces: [kube-node-lease]
  - level: Metadata
    verbs: [create, update, patch, delete]
    resources:
      - {group: "", resources: [nodes, nodes/status, events]}
      - {group: coordination.k8s.io, resources: [leases]}
      - {group: batch, resources: [jobs]}
  - level: None
"""


# --- observing the cluster ----------------------------------------------------------------------------------------


class TaintWatch:
    """When this process first saw each node carry the quarantine taint, from a Node watch."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.seen: dict[str, float] = {}
        self.events = 0  # Node changes seen: the cluster's own traffic, which every Node watch pays for
        self.changed = threading.Condition()
        self._stream: Any = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="taint-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        if self._stream is not None:
            self._stream.close()
        self._thread.join(timeout=10)

    def wait(self, names: Sequence[str], timeout: float = 60) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not all(name in self.seen for name in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [n for n in names if n not in self.seen]
                    raise TimeoutError(f"{len(missing)} nodes not tainted after {timeout:.0f}s: {missing[:5]}")
                self.changed.wait(left)
            return {name: self.seen[name] for name in names}

    def _note(self, node: dict[str, Any], at: float) -> None:
        taints = node.get("spec", {}).get("taints") or []
        if any(t.get("key") == HEALTH_TAINT_KEY and t.get("value") == TAINT_VALUE for t in taints):
            with self.changed:
                self.seen.setdefault(node["metadata"]["name"], at)
                self.changed.notify_all()

    def _run(self) -> None:
        version: str | None = None
        while not self._stopping:
            try:
                if version is None:
                    listing = self.kube.request("GET", "/api/v1/nodes")
                    version = listing["metadata"]["resourceVersion"]
                    for node in listing["items"]:
                        self._note(node, time.monotonic())
                self._stream = self.kube.watch("v1", "Node", version)
                for event in self._stream:
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.events += 1
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._note(event["object"], time.monotonic())
            except ApiError as problem:
                if self._stopping:
                    return
                if problem.status == 410:
                    version = None
                time.sleep(0.1)


class AuditLog:
    """The controller's writes, from kube-apiserver's audit log (it sends the Python client's User-Agent)."""

    def __init__(self, path: Path, agent: str) -> None:
        self.path = path
        self.agent = agent

    def mark(self) -> int:
        return self.path.stat().st_size

    def writes_since(self, offset: int) -> Counter[str]:
        """Write requests by resource (`nodes`, `nodes/status`, `events`, `leases`), failed ones as `...:409`."""
        counts: Counter[str] = Counter()
        with self.path.open("rb") as handle:
            handle.seek(offset)
            for raw in handle:
                entry = json.loads(raw)
                if entry.get("userAgent") != self.agent or entry.get("verb") not in WRITE_VERBS:
                    continue
                ref = entry.get("objectRef", {})
                resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                code = entry.get("responseStatus", {}).get("code", 0)
                counts[resource if code < 400 else f"{resource}:{code}"] += 1
        return counts

    def burst_span(self, offset: int, names: Sequence[str]) -> float:
        """The burst as kube-apiserver saw it: from the first lost GPU's write arriving to the last taint written
        (the controller's successful patches of those Nodes; its conditions are `nodes/status`)."""
        wanted, first, last = set(names), math.inf, 0.0
        with self.path.open("rb") as handle:
            handle.seek(offset)
            for raw in handle:
                entry = json.loads(raw)
                ref = entry.get("objectRef", {})
                if ref.get("resource") != "nodes" or ref.get("name") not in wanted or entry.get("verb") != "patch":
                    continue
                if entry.get("userAgent") == BENCH_AGENT:
                    first = min(first, parse_time(entry["requestReceivedTimestamp"]) or math.inf)
                elif entry.get("userAgent") == self.agent and entry.get("responseStatus", {}).get("code") == 200:
                    last = max(last, 0.0 if ref.get("subresource") else parse_time(entry["stageTimestamp"]) or 0.0)
        return last - first


class Controller:
    """`konduktor-health run` as its own process, as in the cluster."""

    def __init__(self, kubeconfig: Path, config: Path, log: Path) -> None:
        self.port = free_port()
        self.log = log
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                [str(ROOT / ".venv" / "bin" / "konduktor-health"), "run", "--kubeconfig", str(kubeconfig),
                 "--config", str(config), "--lease-namespace", NAMESPACE, "--port", str(self.port)],
                stdout=output, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def metric(self, name: str) -> float | None:
        try:
            text = requests.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text
        except requests.RequestException:
            return None
        found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        return float(found[1]) if found else None

    def wait_synced(self, nodes: int, timeout: float = 300) -> tuple[float, float]:
        """Seconds until the controller leads and has judged every GPU node once, and the CPU seconds from its
        serving /metrics (imports done, the watch about to list) to then: what a full pass (a list of every Node,
        every GPU node judged) costs."""
        started = time.monotonic()
        serving: float | None = None
        while (value := self.metric("konduktor_gpu_nodes")) != nodes:
            if serving is None and value is not None:
                serving = self.cpu_seconds()
            if self.process.poll() is not None or time.monotonic() - started > timeout:
                raise RuntimeError(f"controller not synced (exit {self.process.poll()}):\n{tail(self.log, 30)}")
            time.sleep(0.05)
        return time.monotonic() - started, self.cpu_seconds() - (serving if serving is not None else 0.0)

    def memory_mib(self) -> tuple[float, float]:
        """Resident set now and at its peak."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        kib = {key: int(value.split()[0]) for key, value in re.findall(r"^(VmRSS|VmHWM):\s+(.+)$", status, re.M)}
        return kib["VmRSS"] / 1024, kib["VmHWM"] / 1024

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(") ", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cpu_share(self, seconds: float) -> float:
        """Cores used over the next `seconds`."""
        before = self.cpu_seconds()
        time.sleep(seconds)
        return (self.cpu_seconds() - before) / seconds

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- the runs -----------------------------------------------------------------------------------------------------


@dataclass
class Figures:
    nodes: int
    poll: float
    sim_up: float = 0.0
    synced: float = 0.0
    watch: list[float] = field(default_factory=list)
    log: list[float] = field(default_factory=list)
    log_path: str = "Loki"
    burst: list[float] = field(default_factory=list)
    burst_inject: float = 0.0
    burst_last: float = 0.0
    burst_span: float = 0.0  # in kube-apiserver's audit log
    burst_cpu: float = 0.0  # the controller's, from the first injection to the last taint seen
    burst_machine: list[float] = field(default_factory=list)  # the machine's busy and total CPU seconds meanwhile
    burst_programs: list[tuple[str, float]] = field(default_factory=list)  # cores each program used meanwhile
    fault_writes: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    duplicate_writes: Counter[str] = field(default_factory=Counter)
    lease_writes_per_s: float = 0.0
    rss_synced: float = 0.0
    rss_after: float = 0.0
    rss_peak: float = 0.0
    cpu: float = 0.0
    cpu_rest: float = 0.0
    events_rest: float = 0.0
    cpu_settling: float = 0.0
    events_settling: float = 0.0
    settled_after: float = 0.0
    cpu_full_pass: float = 0.0
    pass_ms: float = 0.0  # in this process: CPU per pass with one heartbeat event
    pass_judged: float = 0.0  # nodes judged per such pass
    load_rest: float = 0.0
    load_runs: float = 0.0
    run_seconds: float = 0.0

    @property
    def faults(self) -> int:
        return len(self.watch) + len(self.log) + len(self.burst)


def lose_gpu(kube: Kube, name: str) -> None:
    """What the device plugin reports when a GPU falls off the bus: allocatable below the type's count."""
    kube.patch("v1", "Node", name, {"status": {"allocatable": {"nvidia.com/gpu": str(GPUS - 1)}}}, subresource="status")


def health_settings(loki: LokiSettings, poll: float, nodes: int, node_concurrency: int) -> HealthSettings:
    return HealthSettings(
        gpu_lost_grace_seconds=0,
        cooldown_seconds=86400,  # no requalification burn-ins during the run
        # Every fault of the run is a new quarantine inside one window: the breaker must let them all through.
        breaker=BreakerSettings(max_fraction=1, max_nodes=nodes),
        gpu_types={"h100": GpuTypeSettings(product=PRODUCTS["H100"], gpus_per_node=GPUS)},
        loki=loki,
        poll_seconds=poll,
        node_concurrency=node_concurrency,
    )


@dataclass
class Bench:
    """One node count's cluster, controller and observers."""

    kube: Kube
    loki: LokiApi
    watch: TaintWatch
    audit: AuditLog
    poll: float
    rng: random.Random
    # With --via-collector: each Xid sample node's collector, and its kern.log.
    collectors: dict[str, Collector] = field(default_factory=dict)

    def lost_gpus(self, names: Sequence[str]) -> list[float]:
        latencies = []
        for name in names:  # one fresh node per sample: only a passing burn-in lifts the taint
            at = time.monotonic()
            lose_gpu(self.kube, name)
            latencies.append(self.watch.wait([name])[name] - at)
            time.sleep(self.rng.uniform(0.2, 0.8))
        return latencies

    def stop_collectors(self) -> None:
        for running in self.collectors.values():
            running.stop()

    def xid_lines(self, names: Sequence[str]) -> list[float]:
        latencies = []
        for name in names:
            # Spaced at random against the poll, so the samples cover every phase of it.
            time.sleep(self.rng.uniform(0.2, 1.2) * self.poll)
            at = time.monotonic()
            if name in self.collectors:
                with (self.collectors[name].workdir / "kern.log").open("a") as kern_log:
                    kern_log.write(f"Nov 24 00:00:00 {name} kernel: [{time.time():.6f}] {XID_79}\n")
            else:
                self.loki.add(name, f"[{time.time():.6f}] {XID_79}")
            latencies.append(self.watch.wait([name], timeout=30 + 3 * self.poll)[name] - at)
        return latencies

    def burst(self, names: Sequence[str], figures: Figures, controller: Controller) -> None:
        at: dict[str, float] = {}
        mark, cpu, machine, processes = self.audit.mark(), controller.cpu_seconds(), machine_cpu(), sample()
        sampled = time.monotonic()

        def inject(name: str) -> None:
            at[name] = time.monotonic()
            lose_gpu(self.kube, name)

        first = time.monotonic()
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(inject, names))
        figures.burst_inject = time.monotonic() - first
        seen = self.watch.wait(names, timeout=300)
        figures.burst = [seen[name] - at[name] for name in names]
        figures.burst_last = max(seen.values()) - first
        figures.burst_cpu = controller.cpu_seconds() - cpu
        figures.burst_machine = [after - before for after, before in zip(machine_cpu(), machine, strict=True)]
        figures.burst_span = self.audit.burst_span(mark, names)
        by_program: Counter[str] = Counter()
        for key, (argv, own, _) in sample().items():
            if key in processes:
                by_program[program(argv)] += own - processes[key][1]
        seconds = time.monotonic() - sampled
        figures.burst_programs = [(name, ticks / TICKS / seconds) for name, ticks in by_program.most_common(8)]

    def duplicates(self, name: str, repeats: int) -> None:
        """The same line a driver keeps printing, for a node it quarantined a moment ago; returns once read."""
        line = f"[{time.time():.6f}] {XID_79}"
        base = time.time_ns()
        self.loki.push([(name, line, base + k * 1000) for k in range(repeats)])
        # The second query Loki answers after the push began after it, so it covered every line.
        answered = self.loki.loki.query_ranges()
        deadline = time.monotonic() + 60
        while self.loki.loki.query_ranges() < answered + 2 and time.monotonic() < deadline:
            time.sleep(0.1)

    def settle(self, since: int | None = None, events: int = 0) -> None:
        """The condition and the Event follow each taint; a read takes up to a poll. With `since`, first until the
        controller has recorded `events` Events after that audit log offset: in a burst they come after every taint
        and every condition."""
        deadline = time.monotonic() + 120
        while since is not None and self.audit.writes_since(since)["events"] < events:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the controller recorded fewer than {events} Events in 120 s")
            time.sleep(0.5)
        time.sleep(2 * self.poll + 1)


def start_loki() -> tuple[Loki, LokiApi]:
    """The pinned Loki as the umbrella configures it, and a tenant of this run."""
    server = Loki(Path(tempfile.mkdtemp(prefix="loki-", dir=STATE)))
    server.start()
    return server, new_tenant(server)


def start_collectors(names: Sequence[str], loki: LokiApi) -> dict[str, Collector]:
    """One collector per node with the umbrella's kernel pipeline, each reading its own kern.log."""
    binary, started = collector(), {}
    for name in names:
        workdir = STATE / "collectors" / name
        (workdir / "storage").mkdir(parents=True)
        (workdir / "kern.log").write_text(f"Nov 24 00:00:00 {name} kernel: [    0.000000] Linux version 6.8.0\n")
        health = free_port()
        config = kernel_pipeline(
            workdir / "storage", workdir / "kern.log", loki.loki.url, loki.tenant, (health, free_port())
        )
        started[name] = Collector(binary, config, name, workdir, health)
        started[name].start()
    for running in started.values():
        deadline = time.monotonic() + 60
        while not running.ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"collector of {running.node} not ready:\n{tail(running.log, 20)}")
            time.sleep(0.2)
    return started


def write_config(path: Path, settings: HealthSettings) -> Path:
    with path.open("w") as handle:
        YAML(typ="safe").dump(settings.model_dump(mode="json", exclude_none=True), handle)
    return path


def but_leases(writes: Counter[str]) -> Counter[str]:
    """The writes but the Lease's (renewals and the Loki cursor, counted apart)."""
    return Counter({key: count for key, count in writes.items() if not key.startswith("leases")})


def machine_cpu() -> tuple[float, float]:
    """CPU seconds of all cores since boot: busy, and in all."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / TICKS, sum(ticks) / TICKS


def node_event_rate(watch: TaintWatch, seconds: float) -> float:
    before = watch.events
    time.sleep(seconds)
    return (watch.events - before) / seconds


def measure_rest(controller: Controller, watch: TaintWatch, count: int, figures: Figures) -> None:
    """Until the first pass, and with no faults after it: the full pass's CPU, the RSS, the idle CPU, once the new
    cluster has settled (a new 10,000-node cluster keeps writing to its Nodes for a minute or so after they are
    Ready, near the controller manager's 200 requests/s) and while it is still settling."""
    figures.synced, figures.cpu_full_pass = controller.wait_synced(count)
    figures.rss_synced, _ = controller.memory_mib()
    time.sleep(2)  # the first poll's answers
    events = watch.events
    figures.cpu_settling = controller.cpu_share(REST_SECONDS)
    figures.events_settling = (watch.events - events) / REST_SECONDS
    started = time.monotonic()
    while node_event_rate(watch, 10) > SETTLED_EVENTS and time.monotonic() - started < SETTLE_SECONDS:
        pass
    figures.settled_after = time.monotonic() - started
    events = watch.events
    figures.cpu_rest = controller.cpu_share(REST_SECONDS)
    figures.events_rest = (watch.events - events) / REST_SECONDS
    figures.load_rest = os.getloadavg()[0]


UNREACHABLE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def idle_passes(count: int, passes: int = 200) -> tuple[float, float]:
    """The loop's pass in this process with `count` GPU nodes (the sim's Node objects) in its cache and one Node
    event per pass that changes nothing the judgement reads (a heartbeat): CPU milliseconds per pass and nodes
    judged per pass. Dry-run and no poll, so a pass reads its cache and calls no API server: the part of the idle
    cost that grows with the fleet, apart from the watch, the polls and the Lease."""
    nodes = node_manifests(parse_nodes_spec(f"{count}x{GPUS}:H100"))
    for version, node in enumerate(nodes, start=1):
        node["metadata"]["resourceVersion"] = str(version)
        node["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "0"}]
    settings = HealthSettings(
        dry_run=True, gpu_types={"h100": GpuTypeSettings(product=PRODUCTS["H100"], gpus_per_node=GPUS)}
    )
    kubeconfig = STATE / "unreachable.yaml"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    with Kube(kubeconfig) as kube:
        controller = HealthController(kube, settings, identity="bench", lease_namespace=NAMESPACE)
        controller.nodes.apply(WatchEvent("Node", "SYNC", tuple(nodes)))
        controller.pass_once(poll=False)
        judged, started = controller.judgements.total(), time.process_time()
        for beat in range(passes):
            node = nodes[beat % count]
            node["metadata"]["resourceVersion"] = str(count + beat + 1)
            node["status"]["conditions"][0]["lastHeartbeatTime"] = str(beat)
            controller.nodes.apply(WatchEvent("Node", "MODIFIED", (node,)))
            controller.pass_once(poll=False)
        cpu = time.process_time() - started
        return 1000 * cpu / passes, (controller.judgements.total() - judged) / passes


def run(count: int, args: argparse.Namespace) -> Figures:
    figures = Figures(count, args.poll, log_path="kern.log -> collector -> Loki" if args.via_collector else "Loki")
    figures.pass_ms, figures.pass_judged = idle_passes(count)
    if args.passes_only:
        return figures
    names = [node_name(pool, i) for pool in parse_nodes_spec(f"{count}x{GPUS}:H100") for i in range(pool.count)]
    samples, log_samples = min(args.samples, count // 4), min(args.log_samples, count // 4)
    watch_nodes, log_nodes = names[:samples], names[samples : samples + log_samples]
    burst_nodes = names[samples + log_samples :][: args.burst]

    started = time.monotonic()
    cluster = SimCluster(
        CLUSTER, progress=lambda m: print(f"  [{time.monotonic() - started:6.1f}s] {m}", file=sys.stderr)
    )
    cluster.up(SimSpec(pools=parse_nodes_spec(f"{count}x{GPUS}:H100")))
    figures.sim_up = time.monotonic() - started
    kube = Kube(cluster.kubeconfig)
    audit = AuditLog(cluster.cluster_dir / "logs" / "audit.log", kube.api.user_agent)
    kube.api.user_agent = BENCH_AGENT
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    loki_server, loki = start_loki()
    config = write_config(
        STATE / f"health-{count}.yaml", health_settings(loki.settings(), args.poll, count, args.node_concurrency)
    )
    watch = TaintWatch(kube)
    watch.start()
    bench = Bench(kube, loki, watch, audit, args.poll, random.Random(count))
    controller = Controller(cluster.kubeconfig, config, STATE / f"controller-{count}.log")
    bench.collectors = start_collectors(log_nodes, loki) if args.via_collector else {}
    try:
        measure_rest(controller, watch, count, figures)
        cpu_start, run_start, start_mark = controller.cpu_seconds(), time.monotonic(), audit.mark()

        figures.watch = bench.lost_gpus(watch_nodes)
        figures.log = bench.xid_lines(log_nodes)
        bench.burst(burst_nodes, figures, controller)
        bench.settle(since=start_mark, events=figures.faults)
        figures.fault_writes = but_leases(audit.writes_since(start_mark))

        duplicate_mark = audit.mark()
        bench.duplicates(log_nodes[0], args.duplicates)
        bench.settle()
        figures.duplicates = args.duplicates
        figures.duplicate_writes = but_leases(audit.writes_since(duplicate_mark))

        figures.run_seconds = time.monotonic() - run_start
        figures.load_runs = os.getloadavg()[1]  # 5-minute average: the runs take a few minutes
        figures.cpu = controller.cpu_seconds() - cpu_start
        figures.rss_after, figures.rss_peak = controller.memory_mib()
        figures.lease_writes_per_s = audit.writes_since(start_mark)["leases"] / figures.run_seconds
    finally:
        controller.stop()
        watch.stop()
        bench.stop_collectors()
        loki_server.stop()
        kube.close()
        cluster.down()
    return figures


# --- the report ---------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def spread(values: Sequence[float]) -> str:
    return " ".join(f"{percentile(values, q):7.3f}" for q in (0.5, 0.99, 1.0))


def report_passes(f: Figures) -> None:
    print(
        f"  a pass with one heartbeat event, in this process: {f.pass_ms:.3f} ms CPU, "
        f"{f.pass_judged:.0f} nodes judged (load average {os.getloadavg()[0]:.1f})"
    )


def report(f: Figures) -> None:
    node_writes = f.fault_writes["nodes"] + f.fault_writes["nodes/status"]
    conflicts = sum(v for k, v in f.fault_writes.items() if ":" in k)
    duplicate_writes = sum(f.duplicate_writes.values())
    rate = len(f.burst) / f.burst_last if f.burst_last else 0.0
    print(f"\n{f.nodes} GPU nodes x {GPUS} H100 (sim up {f.sim_up:.1f} s; controller synced in {f.synced:.1f} s)")
    print(f"  {'figure':<52} {'p50 s':>7} {'p99 s':>7} {'max s':>7}   goal")
    print(f"  {f'lost GPU -> taint (watch), {len(f.watch)} samples':<52} {spread(f.watch)}   p99 <= {WATCH_GOAL} s")
    print(
        f"  {f'Xid 79 line -> taint ({f.log_path}, poll {f.poll:g} s), {len(f.log)} samples':<52} {spread(f.log)}"
        f"   p99 <= {f.poll + 1:g} s (poll + 1 s)"
    )
    print(f"  {f'burst of {len(f.burst)} lost GPUs, each fault -> taint':<52} {spread(f.burst)}")
    print(
        f"  burst: injected in {f.burst_inject:.2f} s, last taint {f.burst_last:.2f} s after the first fault "
        f"({f.burst_last - f.burst_inject:.2f} s after the last): {rate:.0f} nodes quarantined/s   "
        f"goal >= {BURST_RATE_GOAL} nodes/s"
    )
    busy, total = f.burst_machine or [0.0, 0.0]
    cores = os.cpu_count() or 1
    print(
        f"  burst in kube-apiserver's audit log: first lost GPU received -> last taint written {f.burst_span:.2f} s: "
        f"{len(f.burst) / f.burst_span if f.burst_span > 0 else 0:.0f} nodes/s; meanwhile the controller used "
        f"{1000 * f.burst_cpu / len(f.burst):.1f} ms CPU a fault ({100 * f.burst_cpu / f.burst_last:.0f}% of a core), "
        f"the machine {busy / total * cores if total else 0:.2f} of {cores} cores"
    )
    print("  cores used during the burst, by program: " + ", ".join(f"{n} {c:.2f}" for n, c in f.burst_programs))
    print(
        f"  API writes per fault ({f.faults} faults): {node_writes / f.faults:.2f} node "
        f"(patch {f.fault_writes['nodes']}, status {f.fault_writes['nodes/status']}) + "
        f"{f.fault_writes['events'] / f.faults:.2f} Event; conflicts {conflicts}   goal <= 2 + 1 Event"
    )
    print(f"  API writes for {f.duplicates} duplicate lines: {duplicate_writes} {dict(f.duplicate_writes)}   goal 0")
    print(f"  Lease writes (renewal + Loki cursor): {f.lease_writes_per_s:.2f}/s")
    print(
        f"  controller RSS: {f.rss_synced:.0f} MiB after the initial list, {f.rss_after:.0f} MiB after the runs "
        f"(peak {f.rss_peak:.0f} MiB)   goal <= {RSS_GOAL_MIB} MiB"
    )
    print(
        f"  controller CPU with no faults, the new cluster settling: {100 * f.cpu_settling:.1f}% of a core "
        f"({REST_SECONDS} s after the first pass, {f.events_settling:.0f} Node changes/s)"
    )
    print(
        f"  controller CPU with no faults, the cluster settled: {100 * f.cpu_rest:.1f}% of a core ({REST_SECONDS} s, "
        f"{f.events_rest:.1f} Node changes/s, {f.settled_after:.0f} s later; load average {f.load_rest:.1f})   "
        f"goal <= {100 * IDLE_CPU_GOAL:.0f}%"
    )
    print(
        f"  full pass (list every Node, judge every GPU node): {f.cpu_full_pass:.2f} s CPU, every "
        f"{FULL_PASS_SECONDS:.0f} s: {100 * f.cpu_full_pass / FULL_PASS_SECONDS:.2f}% of a core"
    )
    print(
        f"  controller CPU over the {f.run_seconds:.0f} s of runs: {f.cpu:.1f} s ({100 * f.cpu / f.run_seconds:.0f}%; "
        f"load average {f.load_runs:.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--nodes", default="1000,5000,10000", help="comma-separated node counts (default 1000,5000,10000)"
    )
    parser.add_argument("--samples", type=int, default=60, help="lost-GPU samples per node count")
    parser.add_argument("--log-samples", type=int, default=40, help="Xid 79 log line samples per node count")
    parser.add_argument("--poll", type=float, default=1.0, help="the controller's poll_seconds")
    parser.add_argument("--burst", type=int, default=500, help="simultaneous lost GPUs")
    parser.add_argument(
        "--node-concurrency",
        type=int,
        default=HealthSettings().node_concurrency,
        help="the controller's node_concurrency: nodes whose pods are read and writes made at once",
    )
    parser.add_argument(
        "--via-collector",
        action="store_true",
        help="Xid samples written to each node's kern.log and shipped by its collector (the umbrella's pipeline)",
    )
    parser.add_argument("--duplicates", type=int, default=1000, help="repeats of an Xid line already acted on")
    parser.add_argument(
        "--passes-only", action="store_true", help="only the in-process pass figure: no cluster, no controller process"
    )
    args = parser.parse_args()
    AUDIT_POLICY.write_text(POLICY)
    for count in (int(part) for part in args.nodes.split(",")):
        figures = run(count, args)
        if args.passes_only:
            print(f"\n{count} GPU nodes x {GPUS} H100")
        else:
            report(figures)
        report_passes(figures)


if __name__ == "__main__":
    main()

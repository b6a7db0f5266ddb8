"""The replay: a trace's jobs on a fresh simulated cluster with a config's nodes, queues and policies.

The cluster is the one `konduktor-install sim up --config` makes (konduktor.sim.pools.spec_of) and its quotas
are what `up` applies (konduktor.quotas.sync); Kueue, kube-scheduler and the Job controller are the real ones.
Each trace job becomes a batch Job in its team's namespace, created at its submit time / speedup; kwok
completes each pod `duration / speedup` seconds after it starts (the pod-complete stage's per-pod delay). A
watch on Workloads records when Kueue admits, evicts and finishes each job, and why it waits.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from konduktor.config.model import Config, duration_seconds
from konduktor.errors import KonduktorError, UsageError
from konduktor.kube.client import ApiError, Kube, WatchStream
from konduktor.kube.conditions import condition, is_true
from konduktor.quotas.render import DEFAULT_LOCAL_QUEUE
from konduktor.quotas.sync import sync_quotas, wait_queues_active
from konduktor.sim.cluster import SimCluster
from konduktor.sim.pools import spec_of
from konduktor.sim.workloads import gpu_job
from konduktor.vocabulary import GPU_RESOURCE, KUEUE_API
from konduktor.whatif.metrics import Event, cause_of
from konduktor.whatif.slices import group_selector
from konduktor.whatif.trace import TraceJob

CLUSTER_NAME = "konduktor-whatif"
DEFAULT_SPEEDUP = 60.0
JOB_LABEL = "konduktor.ai/whatif"
PODS_READY_FLOOR = 30.0  # wall seconds: a loaded 2-core machine takes several seconds to start a job's pods
TICK = 0.1  # wall seconds between submission checks


@dataclass(frozen=True)
class Progress:
    replayed: float  # trace seconds
    done: int
    total: int
    eta: float | None  # wall seconds left, at best
    final: bool = False


@dataclass
class Replay:
    events: list[Event]
    end: float  # trace seconds replayed
    speedup: float
    scaled: list[str]  # the Kueue settings scaled with the speedup, as `name: before -> after`
    wall_seconds: float = 0.0
    unmatched: list[str] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)  # what the engine's answer cannot show


def scaled_settings(settings: dict[str, Any], speedup: float) -> tuple[dict[str, Any], list[str]]:
    """Kueue's time-valued settings divided by the speedup, and what was scaled (`name: before -> after`).

    waitForPodsReady's timeout and recoveryTimeout and its requeuing backoff; admission fair sharing's usage
    half-life and sampling interval when the config sets them. Kueue's backoff is whole seconds: at least 1; the
    pods-ready timeouts at least PODS_READY_FLOOR wall seconds.
    """
    result = copy.deepcopy(settings)
    said: list[str] = []

    def duration(section: dict[str, Any], key: str, path: str, floor: float = 0.001) -> None:
        if isinstance(section.get(key), str) and section[key]:
            seconds = max(duration_seconds(section[key]) / speedup, floor)
            after = f"{int(seconds * 1000)}ms"
            said.append(f"{path}: {section[key]} -> {after}")
            section[key] = after

    def whole_seconds(section: dict[str, Any], key: str, path: str) -> None:
        if isinstance(section.get(key), int):
            after = max(1, round(section[key] / speedup))
            said.append(f"{path}: {section[key]}s -> {after}s")
            section[key] = after

    ready = result.get("waitForPodsReady")
    if isinstance(ready, dict):
        # Not below PODS_READY_FLOOR: pods becoming ready take the control plane's own time, which no speedup
        # shortens; a shorter timeout would evict jobs that a real cluster lets start.
        duration(ready, "timeout", "waitForPodsReady.timeout", PODS_READY_FLOOR)
        duration(ready, "recoveryTimeout", "waitForPodsReady.recoveryTimeout", PODS_READY_FLOOR)
        backoff = ready.get("requeuingStrategy")
        if isinstance(backoff, dict):
            whole_seconds(backoff, "backoffBaseSeconds", "waitForPodsReady.requeuingStrategy.backoffBaseSeconds")
            whole_seconds(backoff, "backoffMaxSeconds", "waitForPodsReady.requeuingStrategy.backoffMaxSeconds")
    fair = result.get("admissionFairSharing")
    if isinstance(fair, dict):
        duration(fair, "usageHalfLifeTime", "admissionFairSharing.usageHalfLifeTime")
        duration(fair, "usageSamplingInterval", "admissionFairSharing.usageSamplingInterval")
    return result, said


def job_manifest(config: Config, job: TraceJob, name: str, speedup: float) -> dict[str, Any]:
    """The batch Job that plays a trace job: its team's first namespace and default LocalQueue, its priority
    class, its GPU type's node labels, and kwok's run time of duration / speedup. A job given a slice
    (konduktor.whatif.slices.assign) asks for one unit of its shared resource a pod instead of whole GPUs, on its
    sharing group's nodes when it is pinned to one."""
    team = config.teams[job.team]
    run_for = f"{max(1, round(job.duration / speedup * 1000))}ms"
    manifest = gpu_job(
        name,
        team.namespaces[0],
        gpus=job.gpus_per_pod,
        queue=DEFAULT_LOCAL_QUEUE,
        run_for=run_for,
        pods=job.pods,
        priority=job.priority,
    )
    manifest["metadata"]["labels"][JOB_LABEL] = "job"
    pod = manifest["spec"]["template"]["spec"]
    if job.gpu_type is not None:
        pod["nodeSelector"] = dict(config.gpu_types[job.gpu_type].selector)
    if job.resource is not None:
        for container in pod["containers"]:
            for side in ("requests", "limits"):
                amounts = container["resources"][side]
                amounts.pop(GPU_RESOURCE, None)
                amounts[job.resource] = "1"
        if job.group is not None:
            pod["nodeSelector"] = group_selector(config, job.group)
    return manifest


def kube_names(jobs: Sequence[TraceJob]) -> list[str]:
    """A DNS-safe, unique Job name for each trace job (its position, and a readable part of its name)."""
    names = []
    for index, job in enumerate(jobs):
        readable = re.sub(r"[^a-z0-9-]+", "-", job.name.lower()).strip("-")[:30].strip("-")
        names.append(f"w{index:05d}-{readable}" if readable else f"w{index:05d}")
    return names


class _Recorder:
    """Turns the Workloads a watch sees into job events (admitted, evicted, pending with its cause, finished)."""

    def __init__(self, by_kube_name: dict[str, str], clock: Callable[[], float]) -> None:
        self.by_kube_name = by_kube_name
        self.clock = clock
        self.events: list[Event] = []
        self.admitted: set[str] = set()
        self.finished: set[str] = set()
        self.cause: dict[str, str] = {}
        self.lock = threading.Lock()

    def see(self, workload: dict[str, Any]) -> None:
        owner = next(
            (o.get("name") for o in workload["metadata"].get("ownerReferences", []) if o.get("kind") == "Job"), None
        )
        job = self.by_kube_name.get(owner or "")
        if job is None or job in self.finished:
            return
        now = self.clock()
        with self.lock:
            admitted = is_true(workload, "Admitted")
            if is_true(workload, "Finished"):
                if job not in self.admitted:  # admitted and done between two updates seen
                    self.events.append(Event(now, job, "admitted"))
                self.events.append(Event(now, job, "finished"))
                self.finished.add(job)
                self.admitted.discard(job)
                return
            if admitted and job not in self.admitted:
                self.events.append(Event(now, job, "admitted"))
                self.admitted.add(job)
                self.cause.pop(job, None)
            elif not admitted and job in self.admitted:
                evicted = condition(workload, "Evicted") or {}
                self.events.append(Event(now, job, "evicted", str(evicted.get("reason", ""))))
                self.admitted.discard(job)
            reserved = condition(workload, "QuotaReserved") or {}
            if not admitted and reserved.get("status") == "False" and reserved.get("reason") == "Pending":
                cause = cause_of(str(reserved.get("message", "")))
                if self.cause.get(job) != cause:
                    self.cause[job] = cause
                    self.events.append(Event(now, job, "pending", cause))


def _watch(
    kube: Kube,
    recorder: _Recorder,
    stop: threading.Event,
    failures: queue.Queue[BaseException],
    streams: list[WatchStream],
) -> None:
    version: str | None = None
    while not stop.is_set():
        try:
            if version is None:
                listing = kube.request("GET", kube.resource(KUEUE_API, "Workload").path())
                for item in listing.get("items", []):
                    recorder.see(item)
                version = listing["metadata"]["resourceVersion"]
            stream = kube.watch(KUEUE_API, "Workload", version, timeout_seconds=60)
            streams.append(stream)
            for event in stream:
                if stop.is_set():
                    break
                obj = event.get("object", {})
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    recorder.see(obj)
        except ApiError as problem:
            if problem.status == 410:
                version = None  # expired: list again; the recorder ignores what it has seen
                continue
            if not stop.is_set():
                failures.put(problem)
            return


def replay(
    config: Config,
    jobs: Sequence[TraceJob],
    speedup: float = DEFAULT_SPEEDUP,
    horizon: float | None = None,
    progress: Callable[[Progress], None] | None = None,
    say: Callable[[str], None] | None = None,
    cluster_name: str = CLUSTER_NAME,
    keep: bool = False,
) -> Replay:
    """Replays `jobs` (checked against `config`) on a fresh simulated cluster, which is removed afterwards unless
    `keep`. Stops when every job has finished or at trace time `horizon` (default: three times the time by which
    every job would have finished had it started at once)."""
    if speedup <= 0:
        raise KonduktorError("the speedup must be > 0")
    sliced = sum(1 for job in jobs if job.resource is not None)
    if sliced:
        raise UsageError(
            f"{sliced} jobs of the trace ask for part of a GPU, which the config's sharing gives them, and the "
            "simulated cluster's nodes advertise whole GPUs only",
            hint="replay it on the virtual engine (the default), which makes the sharing groups' nodes",
        )
    tell = say or (lambda _message: None)
    horizon = horizon if horizon is not None else 3 * max(job.submit + job.duration for job in jobs)
    spec = spec_of(config, job_seconds=5.0)
    spec.kueue_settings, scaled = scaled_settings(spec.kueue_settings, speedup)
    cluster = SimCluster(cluster_name, progress=tell)
    if cluster.created():
        cluster.down()  # a fresh cluster: nothing of an earlier replay stays
    try:
        cluster.up(spec)
        with Kube(cluster.kubeconfig) as kube:
            sync_quotas(kube, config, prune=True, dry_run=False)
            wait_queues_active(kube, config)
            return _run(kube, cluster.kubeconfig, config, jobs, speedup, horizon, progress, scaled, tell)
    finally:
        if not keep:
            cluster.down()


def _run(
    kube: Kube,
    kubeconfig: Path,
    config: Config,
    jobs: Sequence[TraceJob],
    speedup: float,
    horizon: float,
    progress: Callable[[Progress], None] | None,
    scaled: list[str],
    tell: Callable[[str], None],
) -> Replay:
    names = kube_names(jobs)
    manifests = [job_manifest(config, job, name, speedup) for job, name in zip(jobs, names, strict=True)]
    started = time.monotonic()

    def clock() -> float:
        return (time.monotonic() - started) * speedup

    recorder = _Recorder({name: job.name for job, name in zip(jobs, names, strict=True)}, clock)
    stop = threading.Event()
    failures: queue.Queue[BaseException] = queue.Queue()
    streams: list[WatchStream] = []
    # A client of its own: the watch blocks on its connection while the main loop creates Jobs.
    watch_kube = Kube(kubeconfig)
    watcher = threading.Thread(target=_watch, args=(watch_kube, recorder, stop, failures, streams), daemon=True)
    tell(f"replaying {len(jobs)} jobs at {speedup:g}x")
    watcher.start()
    submitted = 0
    last_report = -1.0
    try:
        while True:
            now = clock()
            while submitted < len(jobs) and jobs[submitted].submit <= now:
                at = clock()  # before the create: Kueue may judge the Workload before create returns
                kube.create(manifests[submitted])
                with recorder.lock:
                    recorder.events.append(Event(at, jobs[submitted].name, "submitted"))
                submitted += 1
            if not failures.empty():
                raise KonduktorError(f"the watch on Workloads broke: {failures.get()}")
            done = len(recorder.finished)
            if progress and time.monotonic() - last_report >= 1:
                last_report = time.monotonic()
                left = [job for job in jobs if job.name not in recorder.finished]
                progress(Progress(now, done, len(jobs), _eta(now, horizon, left, speedup)))
            if done == len(jobs) or now >= horizon:
                break
            time.sleep(TICK)
    finally:
        stop.set()
        for stream in streams:
            with contextlib.suppress(RuntimeError, OSError):  # one the server already ended
                stream.close()
        watcher.join(timeout=10)
        watch_kube.close()
    end = min(clock(), max(horizon, 0.0)) if len(recorder.finished) < len(jobs) else clock()
    with recorder.lock:
        events = list(recorder.events)
    if progress:
        progress(Progress(end, len(recorder.finished), len(jobs), 0.0, final=True))
    return Replay(events=events, end=end, speedup=speedup, scaled=scaled, wall_seconds=time.monotonic() - started)


def _eta(now: float, horizon: float, left: Sequence[TraceJob], speedup: float) -> float:
    """Wall seconds left, at best: until the unfinished jobs could end were each to start now or at its submit
    time, capped by the horizon."""
    if not left:
        return 0.0
    end = max(max(job.submit, now) + job.duration for job in left)
    return max(0.0, min(horizon, end) - now) / speedup

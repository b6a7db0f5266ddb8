"""The virtual-time replay: a trace's jobs through Kueue's own scheduler, queue manager, cache and Workload
controller, in one process (whatif-engine, our Go module), on a clock that jumps to the next event as soon as
Kueue has nothing left to do.

Kueue reads what `up` gives it: the config's objects as `quotas.render` makes them, the config's nodes as the
simulated cluster makes them, and the Configuration the config implies. Each trace job is the batch Job the
cluster engine creates; Kueue's job framework builds its Workload. No setting is scaled: the answer's times are
trace seconds. docs/design/whatif-engine.md says which parts are Kueue's code and which are ours.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from konduktor.config.model import Config
from konduktor.errors import KonduktorError, UsageError
from konduktor.helm.values import merge_sections, umbrella_kueue_feature_gates
from konduktor.quotas.render import kueue_manager_settings, render
from konduktor.sim.kueue import FRAMEWORKS, NAMESPACE
from konduktor.sim.nodes import node_manifests
from konduktor.sim.pools import node_pools, topology_levels
from konduktor.whatif.metrics import Event, cause_of
from konduktor.whatif.replay import Progress, Replay, job_manifest, kube_names
from konduktor.whatif.slices import shared_nodes
from konduktor.whatif.trace import TraceJob

# What `up` gives Kueue besides the config's settings, less what only a running process needs (ports,
# certificates, leader election): the Configuration the engine loads with Kueue's own loader and defaults.
BASE_CONFIGURATION: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "namespace": NAMESPACE,
    "integrations": {"frameworks": FRAMEWORKS},
}
# What no virtual replay shows, said with every answer; settings it cannot honour at all the engine refuses.
LIMITS = (
    "pods start the moment Kueue admits them: no kube-scheduler placement (Kueue's topology-aware scheduling "
    "places pods when the config has a topology), no image pulls, no control-plane latency",
    "a job evicted by preemption starts over from zero when admitted again",
)
PODS_READY_LIMIT = "waitForPodsReady: pods are ready at admission, so its timeout never evicts a job"


def configuration(config: Config, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Kueue's Configuration for a replay of the config: what `up` sets, merged as the sim merges it, with the
    feature gates the umbrella gives Kueue on its command line (WorkloadPriorityClassDefaulting: a job naming no
    priority class gets the `default` class, as on the platform, not priority 0)."""
    base = {**BASE_CONFIGURATION, "featureGates": umbrella_kueue_feature_gates()}
    return merge_sections(base, kueue_manager_settings(config) if settings is None else settings)


def engine_input(
    config: Config, jobs: Sequence[TraceJob], horizon: float, kueue_crds: list[dict[str, Any]]
) -> dict[str, Any]:
    """The engine's input: the config's objects and nodes (its sharing groups' as the device plugin makes them),
    Kueue's CRDs (server-side apply reads their schemas), and each trace job as the Job the cluster engine makes
    (in trace order: by submit time, then as the trace lists them)."""
    names = kube_names(jobs)
    return {
        "crds": kueue_crds,
        "objects": render(config),
        "nodes": [
            ready(node) for node in shared_nodes(config, node_manifests(node_pools(config), topology_levels(config)))
        ],
        "jobs": [
            {
                "name": job.name,
                "submit": job.submit,
                "duration": job.duration,
                "manifest": job_manifest(config, job, name, 1.0),
            }
            for job, name in zip(jobs, names, strict=True)
        ],
        "horizon": horizon,
    }


def ready(node: dict[str, Any]) -> dict[str, Any]:
    """The node as its kubelet reports it once up (kwok's node-initialize stage does this on the sim): Ready."""
    status = node.setdefault("status", {})
    status["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
    return node


def limits(settings: dict[str, Any]) -> list[str]:
    """What the answer cannot show for these Kueue settings, besides what no virtual replay shows."""
    said = list(LIMITS)
    if isinstance(settings.get("waitForPodsReady"), dict):
        said.append(PODS_READY_LIMIT)
    return said


def events_of(lines: Sequence[dict[str, Any]]) -> tuple[list[Event], float]:
    """The engine's events as the metrics read them: a pending event carries the cause of Kueue's message, once
    per change of cause (as the cluster engine's watch records it); and the time the replay ended."""
    events: list[Event] = []
    cause: dict[str, str] = {}
    end = 0.0
    for line in lines:
        kind = str(line["kind"])
        time_ = float(line["time"])
        if kind == "end":
            end = time_
            continue
        job = str(line["job"])
        detail = str(line.get("detail", ""))
        if kind == "pending":
            detail = cause_of(detail)
            if cause.get(job) == detail:
                continue
            cause[job] = detail
        elif kind == "admitted":
            cause.pop(job, None)
        events.append(Event(time_, job, kind, detail))  # type: ignore[arg-type]
    return events, end


def replay_virtual(
    config: Config,
    jobs: Sequence[TraceJob],
    engine: Path,
    kueue_crds: list[dict[str, Any]],
    horizon: float | None = None,
    say: Callable[[str], None] | None = None,
    settings: dict[str, Any] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> Replay:
    """Replays `jobs` (checked against `config`) through the engine binary. Stops when every job has finished or
    at trace time `horizon` (default: three times the time by which every job would have finished had it
    started at once)."""
    tell = say or (lambda _message: None)
    horizon = horizon if horizon is not None else 3 * max(job.submit + job.duration for job in jobs)
    kueue_settings = kueue_manager_settings(config) if settings is None else settings
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="konduktor-whatif-") as scratch:
        folder = Path(scratch)
        (folder / "kueue.yaml").write_text(yaml.safe_dump(configuration(config, kueue_settings)))
        (folder / "input.json").write_text(json.dumps(engine_input(config, jobs, horizon, kueue_crds)))
        tell(f"replaying {len(jobs)} jobs on virtual time")
        command = [
            str(engine),
            "-test.run=^TestReplay$",
            "-configuration",
            str(folder / "kueue.yaml"),
            "-input",
            str(folder / "input.json"),
            "-output",
            str(folder / "events.jsonl"),
        ]
        code, output = _run_engine(command, len(jobs), progress)
        if code != 0 and (refused := re.search(r"the virtual engine cannot honour: \[(.*)\]", output)):
            raise UsageError(
                f"the config's Kueue settings ask for what the virtual engine cannot do: {refused.group(1)}",
                hint="replay it with --engine cluster",
            )
        if code != 0:
            raise KonduktorError(
                "the what-if engine failed",
                detail=_failure(output),
                hint="a fault of Konduktor's, not of the config or the trace: please report it with the lines above",
            )
        lines = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines() if line]
    events, end = events_of(lines)
    return Replay(
        events=events,
        end=end,
        speedup=0.0,
        scaled=[],
        wall_seconds=time.monotonic() - started,
        limits=limits(kueue_settings),
    )


def _run_engine(command: list[str], total: int, progress: Callable[[Progress], None] | None) -> tuple[int, str]:
    """Runs the engine; each `progress TRACE-SECONDS FINISHED TOTAL` line it writes becomes a Progress."""
    kept: list[str] = []
    replayed, finished = 0.0, 0
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            parts = line.split()
            if len(parts) == 4 and parts[0] == "progress":
                replayed, finished = float(parts[1]), int(parts[2])
                if progress is not None:
                    progress(Progress(replayed, finished, total, None))
                continue
            kept.append(line)
        code = process.wait()
    if progress is not None and code == 0:
        progress(Progress(replayed, finished, total, 0.0, final=True))
    return code, "".join(kept)


def _failure(output: str) -> str:
    # A test binary reports a failure as `main_test.go:NN: message`; the rest is the testing package's frame.
    lines = [line.strip() for line in output.splitlines() if ".go:" in line or "panic" in line]
    return "\n".join(lines[-10:]) or output[-2000:]

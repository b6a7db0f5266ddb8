"""What triage reads from the cluster: a Job's time window, the nodes its pods ran on, and their health signals.

The nodes come from the live pods, from the scheduler's `Scheduled` Events of the job's pods (kept after the
pods are gone, for the API server's Event TTL, 1 h by default) and from the health controller's Events on the
job. The signals: the controller's quarantine annotations, the GPUHealthy condition and its Events on the node,
the nodes' kernel log lines in Loki and their DCGM series in Prometheus, read as the health controller reads them
(its settings, from the chart's ConfigMap).
"""

from __future__ import annotations

import re
import time
from typing import Any

from konduktor.errors import UsageError
from konduktor.health.decide import CONDITION_TYPE
from konduktor.health.loki import LokiSource
from konduktor.health.node_writes import EVENT_NAMESPACE
from konduktor.health.prometheus import PrometheusSource
from konduktor.health.settings import HealthSettings, parse_settings
from konduktor.health.telemetry import HealthMetrics
from konduktor.health.triage import (
    LATE_SECONDS,
    NodeRecord,
    Sighting,
    Triage,
    dcgm_sightings,
    judge,
    kernel_sightings,
    with_sightings,
)
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.timestamps import parse_time
from konduktor.observability.answers import SourceError
from konduktor.vocabulary import (
    JOB_NAME_LABEL,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    REQUALIFIED_AT,
    SYSTEM_NAMESPACE,
)

COMPONENT = "konduktor-health"
SOURCES_HINT = (
    "hint: on a cluster with Loki and Prometheus, triage reads them as the health controller does: set loki and "
    "prometheus in its settings (the chart's controller.services write their URLs); --loki URL and --prometheus URL "
    "replace those URLs for one run (a port-forward): docs/health.md#triage-of-a-failed-job"
)
SETTINGS_KEY = "health.yaml"  # in konduktor-core's ConfigMap of the controller's settings
CORE_SELECTOR = "app.kubernetes.io/name=konduktor-core"
_ASSIGNED = re.compile(r"Successfully assigned (?P<namespace>[^/\s]+)/(?P<pod>\S+) to (?P<node>\S+)")
_TOLD = re.compile(r"GPU node (?P<node>\S+) (?:was|would have been) quarantined.*?on it: (?P<pods>[^.]*)\.")


def triage_job(kube: Kube, job_name: str, namespace: str) -> Triage:
    job = kube.get("batch/v1", "Job", job_name, namespace)
    if job is None:
        raise UsageError(f"no Job {job_name} in namespace {namespace}", hint="name a batch Job: triage JOB -n NS")
    start, end = _window(job)
    start = _first_run(kube, job, namespace, start)
    pods = _pods_by_node(kube, job, namespace, start)
    nodes = [_record(kube, node, names) for node, names in pods.items()]
    return judge(job_name, namespace, start, end, nodes)


def _window(job: dict[str, Any]) -> tuple[float, float]:
    status = job.get("status", {})
    start = parse_time(status.get("startTime")) or parse_time(job["metadata"].get("creationTimestamp")) or time.time()
    ended = [
        parse_time(c.get("lastTransitionTime"))
        for c in status.get("conditions", [])
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
    ]
    end = parse_time(status.get("completionTime")) or next((t for t in ended if t is not None), None)
    return start, end or time.time()


def _first_run(kube: Kube, job: dict[str, Any], namespace: str, start: float) -> float:
    """When the Job's first pod was scheduled, if before `start`: the Job controller resets `status.startTime` when
    a suspended Job resumes, so a Job Kueue requeued (off a quarantined node, say) would otherwise be judged from its
    last resume only, after the fault that requeued it. Events from before the Job was created are of an earlier Job
    of the same name."""
    name = job["metadata"]["name"]
    created = parse_time(job["metadata"].get("creationTimestamp")) or start
    scheduled = [
        _when(event)
        for event in kube.list("v1", "Event", namespace, field_selector="reason=Scheduled")
        if event.get("involvedObject", {}).get("kind") == "Pod"
        and (assigned := _ASSIGNED.search(event.get("message", ""))) is not None
        and assigned["pod"].startswith(f"{name}-")
        and _when(event) >= created  # whole seconds rounded down: this Job's pods are never scheduled before
    ]
    return min([start, *scheduled])


def _pods_by_node(kube: Kube, job: dict[str, Any], namespace: str, start: float) -> dict[str, set[str]]:
    name, uid = job["metadata"]["name"], job["metadata"].get("uid")
    found: dict[str, set[str]] = {}
    for pod in kube.list("v1", "Pod", namespace, label_selector=f"{JOB_NAME_LABEL}={name}"):
        if pod["spec"].get("nodeName"):
            found.setdefault(pod["spec"]["nodeName"], set()).add(pod["metadata"]["name"])
    for event in kube.list("v1", "Event", namespace):
        involved = event.get("involvedObject", {})
        message = event.get("message", "")
        if _when(event) < start:
            # An earlier Job of the same name: this Job's pods are scheduled at `start` or after (the first of them
            # defines it); only a Job deleted and created again within one second is mistaken for this one.
            continue
        if involved.get("kind") == "Pod" and event.get("reason") == "Scheduled" and involved["name"].startswith(name):
            assigned = _ASSIGNED.search(message)
            if assigned and assigned["pod"].startswith(f"{name}-"):
                found.setdefault(assigned["node"], set()).add(assigned["pod"])
        elif (
            involved.get("kind") == "Job"
            and (involved.get("uid") in (None, uid))
            and involved.get("name") == name
            and event.get("source", {}).get("component") == COMPONENT
        ):
            told = _TOLD.search(message)
            if told:
                pods = {p.strip() for p in told["pods"].split(",") if p.strip() and p.strip() != "none"}
                found.setdefault(told["node"], set()).update(pods)
    return found


def _record(kube: Kube, node_name: str, pods: set[str]) -> NodeRecord:
    """The node with the controller's records of it: quarantine, GPUHealthy condition, Events, requalification."""
    signals: list[Sighting] = []
    requalified_at = None
    node = kube.get("v1", "Node", node_name)
    if node is not None:
        annotations = node["metadata"].get("annotations", {})
        requalified_at = parse_time(annotations.get(REQUALIFIED_AT))
        if QUARANTINED_AT in annotations:
            reason = annotations.get(QUARANTINE_REASON, "")
            signals.append(
                Sighting(
                    parse_time(annotations[QUARANTINED_AT]), "quarantine", reason.split(" ", 1)[0], reason, fault=True
                )
            )
        for condition in node.get("status", {}).get("conditions", []):
            if condition.get("type") == CONDITION_TYPE and condition.get("status") == "False":
                signals.append(
                    Sighting(
                        parse_time(condition.get("lastTransitionTime")),
                        "condition",
                        condition.get("reason", ""),
                        condition.get("message", ""),
                        fault=True,
                    )
                )
    for event in kube.list("v1", "Event", EVENT_NAMESPACE, field_selector=f"involvedObject.name={node_name}"):
        if (
            event.get("source", {}).get("component") != COMPONENT
            or event.get("involvedObject", {}).get("kind") != "Node"
        ):
            continue
        message = event.get("message", "")
        # Quarantines and the faults seen on a quarantined node blame the node; other Warnings (application Xids)
        # are shown as context only.
        fault = message.startswith(("quarantined", "also:", "quarantine escalated", "circuit breaker open"))
        signals.append(Sighting(_when(event), "event", event.get("reason", ""), message, fault=fault))
    return NodeRecord(node_name, tuple(sorted(pods)), tuple(signals), requalified_at)


def _when(event: dict[str, Any]) -> float:
    """When an Event last happened (the scheduler's Events carry only eventTime)."""
    stamps = (event.get(k) for k in ("lastTimestamp", "eventTime", "firstTimestamp"))
    found = (parse_time(s) for s in (*stamps, event["metadata"].get("creationTimestamp")))
    return next((t for t in found if t is not None), 0.0)


def deployed_settings(kube: Kube, namespace: str = SYSTEM_NAMESPACE) -> HealthSettings | None:
    """The health controller's settings as konduktor-core deployed them; None where it is not installed."""
    try:
        config_maps = kube.list("v1", "ConfigMap", namespace, label_selector=CORE_SELECTOR)
    except ApiError as problem:
        if problem.status in (403, 404):  # not ours to read, or no such namespace: triage without kernel logs
            return None
        raise
    for config_map in config_maps:
        text = (config_map.get("data") or {}).get(SETTINGS_KEY)
        if text is not None:
            return parse_settings(text, f"ConfigMap {namespace}/{config_map['metadata']['name']} {SETTINGS_KEY}")
    return None


def kernel_files_note(settings: HealthSettings) -> str:
    """Where the kernel logs were read without Loki: by the controller from its files (the simulated cluster's), or
    nowhere."""
    files = settings.kernel_log_files
    if files is None:
        return "not read: kernel logs: no Loki in the health controller's settings"
    return (
        f"kernel logs: read by the health controller from its files ({files.directory}/<node>.log, its "
        "kernel_log_files), not by triage: the lines it acted on are quoted in its Events (evidence `event`)"
    )


def sources_hint(settings: HealthSettings | None) -> list[str]:
    """How to point triage at Loki and Prometheus, when the controller's settings lack either."""
    if settings is not None and settings.loki is not None and settings.prometheus is not None:
        return []
    return [SOURCES_HINT]


def with_telemetry(
    found: Triage, settings: HealthSettings | None, loki_url: str | None = None, prometheus_url: str | None = None
) -> tuple[Triage, list[str]]:
    """The triage with the job's nodes' DCGM series and kernel lines in its window (and LATE_SECONDS after), read
    as the health controller reads them (its `settings`; a URL given here instead of its own, for a port-forward),
    and lines that say what could not be read (`not read: ...`), where the kernel logs were read, and how to point
    triage at Loki and Prometheus when it read neither from them (`sources_hint`)."""
    if settings is None:
        return found, [
            "not read: no health controller settings (is konduktor-core installed?): no kernel logs, no DCGM",
            SOURCES_HINT,
        ]
    unread = []
    nodes = {n.node for n in found.nodes}
    start, end = found.start, found.end + LATE_SECONDS
    dcgm: dict[str, list[Sighting]] = {}
    if settings.prometheus is None:
        unread.append("DCGM: no Prometheus in the health controller's settings")
    else:
        prometheus = settings.prometheus
        prometheus = prometheus if prometheus_url is None else prometheus.model_copy(update={"url": prometheus_url})
        try:
            signals = PrometheusSource(prometheus, HealthMetrics()).faults_between(start, end, nodes)
            dcgm = dcgm_sightings(signals, settings)
        except SourceError as problem:
            unread.append(f"DCGM: Prometheus at {prometheus.url}: {problem}")
    notes = [f"not read: {what}" for what in unread]
    if settings.loki is None:
        notes.append(kernel_files_note(settings))
        return with_sightings(found, dcgm), [*notes, *sources_hint(settings)]
    loki = settings.loki if loki_url is None else settings.loki.model_copy(update={"url": loki_url})
    try:
        lines = LokiSource(loki, HealthMetrics()).lines_between(int(start * 1e9), int(end * 1e9))
    except SourceError as problem:
        notes.append(f"not read: kernel logs: Loki at {loki.url}: {problem}")
        return with_sightings(found, dcgm), [*notes, *sources_hint(settings)]
    kernel = kernel_sightings([line for line in lines if line.node in nodes], settings, dcgm)
    notes.append(f"kernel logs: read from Loki at {loki.url}")
    found = with_sightings(found, {n: [*dcgm.get(n, ()), *kernel.get(n, ())] for n in nodes})
    return found, [*notes, *sources_hint(settings)]

"""`trace export`: a cluster's own history of GPU jobs, as a trace, from the Workloads Kueue keeps.

What each finished Workload gives: its creation time (submit), its last admission and its Finished time (the
duration is the last run, from admission to finish), its namespace (the team), its pod sets (pods and GPUs
per pod), its WorkloadPriorityClass and the GPU flavor it was admitted to (the GPU type).

What is lost: jobs whose Workload is gone (Kueue deletes a Workload with its Job; a Job's
ttlSecondsAfterFinished or a person's delete removes both), jobs still running or pending (they have no
duration yet), runs before an eviction (only the last admission is kept in the Workload's conditions, so a
preempted job counts once, with its last run), and pods of one job that asked for different GPU counts (the
job becomes its pods x the largest GPU count).

With `--prometheus URL`, the Jobs kube-state-metrics exposed are read from Prometheus too (whatif/job_series.py),
for the jobs whose Workloads are gone: a Job's series outlive it for Prometheus's retention. They give its
creation, its last start (the Job controller sets the start time again when Kueue resumes it) and its completion,
its parallelism, its pods' GPUs and its priority class label. They lose the GPU type, failed jobs (no completion
time), and jobs that came and went between two scrapes. Kueue's own series are counts per queue, not per job, so
they add no job.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from konduktor.gpu.pod import pod_gpus
from konduktor.kube.client import Kube
from konduktor.kube.conditions import condition, is_true
from konduktor.kube.timestamps import parse_time
from konduktor.vocabulary import GPU_RESOURCE, KUEUE_API
from konduktor.whatif.trace import TraceJob

PRIORITY_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"


@dataclass(frozen=True)
class Exported:
    jobs: list[TraceJob]
    unfinished: int  # still pending or running, or failed: no duration
    without_gpus: int
    before: int  # created before `since`
    from_prometheus: int = 0  # jobs only Prometheus still knew: their Workloads are gone


JobKey = tuple[str, str]  # a Job's namespace and name


@dataclass(frozen=True)
class JobSeries:
    """What kube-state-metrics said of each Job, as Prometheus kept it (epoch seconds, counts, label values)."""

    created: Mapping[JobKey, float]
    started: Mapping[JobKey, float]
    completed: Mapping[JobKey, float]
    parallelism: Mapping[JobKey, float]
    gpus_per_pod: Mapping[JobKey, float]  # the largest GPU request of its pods
    priority: Mapping[JobKey, str]  # its kueue.x-k8s.io/priority-class label


def job_name(workload: Mapping[str, Any]) -> str:
    """A trace job's name: namespace/the Job (the Workload's owner), else namespace/the Workload."""
    metadata = workload.get("metadata", {})
    owner = next((o.get("name") for o in metadata.get("ownerReferences", []) if o.get("name")), None)
    return f"{metadata.get('namespace')}/{owner or metadata.get('name')}"


def jobs_from_workloads(workloads: Iterable[dict[str, Any]], since: float) -> Exported:
    """The finished GPU Workloads created at or after `since` (epoch seconds) as trace jobs at their own times."""
    found: list[TraceJob] = []
    unfinished = without_gpus = before = 0
    for workload in workloads:
        metadata = workload.get("metadata", {})
        created = parse_time(metadata.get("creationTimestamp"))
        if created is None or created < since:
            before += 1
            continue
        pod_sets = workload.get("spec", {}).get("podSets", [])
        shapes = [(int(p.get("count", 1)), pod_gpus(p.get("template", {}).get("spec", {}))) for p in pod_sets]
        gpu_shapes = [(count, gpus) for count, gpus in shapes if gpus > 0]
        if not gpu_shapes:
            without_gpus += 1
            continue
        admitted = parse_time((condition(workload, "QuotaReserved") or {}).get("lastTransitionTime"))
        finished = parse_time((condition(workload, "Finished") or {}).get("lastTransitionTime"))
        if not is_true(workload, "Finished") or admitted is None or finished is None or finished <= admitted:
            unfinished += 1
            continue
        spec = workload.get("spec", {})
        found.append(
            TraceJob(
                name=job_name(workload),
                submit=created,
                duration=finished - admitted,
                team=str(metadata.get("namespace")),
                pods=sum(count for count, _ in gpu_shapes),
                gpus_per_pod=max(gpus for _, gpus in gpu_shapes),
                gpu_type=_flavor(workload),
                priority=spec.get("priorityClassName") if spec.get("priorityClassSource") == PRIORITY_SOURCE else None,
            )
        )
    return Exported(found, unfinished, without_gpus, before)


def jobs_from_series(series: JobSeries, since: float, known: Collection[str]) -> Exported:
    """The finished GPU Jobs created at or after `since` that kube-state-metrics' series show, but for those named
    in `known` (the Workloads' jobs), as trace jobs at their own times; the duration is the last run."""
    found: list[TraceJob] = []
    unfinished = without_gpus = before = 0
    for key, created in sorted(series.created.items()):
        namespace, name = key
        if f"{namespace}/{name}" in known:
            continue
        if created < since:
            before += 1
            continue
        gpus = int(series.gpus_per_pod.get(key, 0))
        if gpus <= 0:
            without_gpus += 1
            continue
        started, completed = series.started.get(key), series.completed.get(key)
        if started is None or completed is None or completed <= started:
            unfinished += 1
            continue
        found.append(
            TraceJob(
                name=f"{namespace}/{name}",
                submit=created,
                duration=completed - started,
                team=namespace,
                pods=max(1, int(series.parallelism.get(key, 1))),
                gpus_per_pod=gpus,
                priority=series.priority.get(key),
            )
        )
    return Exported(found, unfinished, without_gpus, before, from_prometheus=len(found))


def merged(first: Exported, second: Exported) -> Exported:
    return Exported(
        [*first.jobs, *second.jobs],
        first.unfinished + second.unfinished,
        first.without_gpus + second.without_gpus,
        first.before + second.before,
        first.from_prometheus + second.from_prometheus,
    )


def rebased(exported: Exported) -> Exported:
    """The jobs oldest first, submitted in seconds from the first one: a trace."""
    start = min((job.submit for job in exported.jobs), default=0.0)
    jobs = sorted(
        (replace(job, submit=job.submit - start) for job in exported.jobs), key=lambda job: (job.submit, job.name)
    )
    return replace(exported, jobs=jobs)


def _flavor(workload: dict[str, Any]) -> str | None:
    for assignment in (workload.get("status", {}).get("admission") or {}).get("podSetAssignments", []):
        flavor = (assignment.get("flavors") or {}).get(GPU_RESOURCE)
        if flavor:
            return str(flavor)
    return None


def export(kube: Kube, since: float, series: Callable[[], JobSeries] | None = None) -> Exported:
    """The cluster's finished GPU jobs since `since` (every namespace) as a trace: its Workloads', and with `series`
    (Prometheus's read of kube-state-metrics) the jobs whose Workloads are gone."""
    workloads = kube.list(KUEUE_API, "Workload")
    exported = jobs_from_workloads(workloads, since)
    if series is not None:
        exported = merged(exported, jobs_from_series(series(), since, {job_name(w) for w in workloads}))
    return rebased(exported)

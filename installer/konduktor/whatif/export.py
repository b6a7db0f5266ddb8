"""`trace export`: a cluster's own history of GPU jobs, as a trace, from the Workloads Kueue keeps.

What each finished Workload gives: its creation time (submit), its last admission and its Finished time (the
duration is the last run, from admission to finish), its namespace (the team), its pod sets (pods and GPUs
per pod), its WorkloadPriorityClass and the GPU flavor it was admitted to (the GPU type).

What is lost: jobs whose Workload is gone (Kueue deletes a Workload with its Job; a Job's
ttlSecondsAfterFinished or a person's delete removes both), jobs still running or pending (they have no
duration yet), runs before an eviction (only the last admission is kept in the Workload's conditions, so a
preempted job counts once, with its last run), and pods of one job that asked for different GPU counts (the
job becomes its pods x the largest GPU count). Prometheus' Kueue and kube-state-metrics series are not read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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
    unfinished: int  # Workloads still pending or running: no duration yet
    without_gpus: int
    before: int  # created before `since`


def jobs_from_workloads(workloads: Iterable[dict[str, Any]], since: float) -> Exported:
    """The finished GPU Workloads created at or after `since` (epoch seconds) as trace jobs, oldest first."""
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
        owner = next((o.get("name") for o in metadata.get("ownerReferences", []) if o.get("name")), None)
        found.append(
            TraceJob(
                name=f"{metadata.get('namespace')}/{owner or metadata.get('name')}",
                submit=created,
                duration=finished - admitted,
                team=str(metadata.get("namespace")),
                pods=sum(count for count, _ in gpu_shapes),
                gpus_per_pod=max(gpus for _, gpus in gpu_shapes),
                gpu_type=_flavor(workload),
                priority=spec.get("priorityClassName") if spec.get("priorityClassSource") == PRIORITY_SOURCE else None,
            )
        )
    start = min((job.submit for job in found), default=0.0)
    jobs = sorted(
        (
            TraceJob(j.name, j.submit - start, j.duration, j.team, j.pods, j.gpus_per_pod, j.gpu_type, j.priority)
            for j in found
        ),
        key=lambda job: (job.submit, job.name),
    )
    return Exported(jobs, unfinished, without_gpus, before)


def _flavor(workload: dict[str, Any]) -> str | None:
    for assignment in (workload.get("status", {}).get("admission") or {}).get("podSetAssignments", []):
        flavor = (assignment.get("flavors") or {}).get(GPU_RESOURCE)
        if flavor:
            return str(flavor)
    return None


def export(kube: Kube, since: float) -> Exported:
    """The cluster's finished GPU Workloads since `since` (every namespace)."""
    return jobs_from_workloads(kube.list(KUEUE_API, "Workload"), since)

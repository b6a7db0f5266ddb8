"""What `konduktor submit` does to a job before sending it (pure): the team's queue label and a priority class
when missing, and the Workload Kueue would make of it, so a job that can never fit is refused before it waits."""

from __future__ import annotations

import copy
from typing import Any

from konduktor.errors import UsageError
from konduktor.queueing.explain import PRIORITY_LABEL, QUEUE_LABEL

PRIORITIES = ("opportunistic", "standard", "urgent")
DEFAULT_PRIORITY = "standard"


def fill_in(obj: dict[str, Any], namespace: str, queue: str, priority: str | None) -> dict[str, Any]:
    """The job in `namespace`, with its queue label and priority class set where it has none (`priority`
    overrides)."""
    if not isinstance(obj, dict) or not obj.get("kind") or not isinstance(obj.get("metadata"), dict):
        raise UsageError("the file holds no Kubernetes object (apiVersion, kind, metadata)")
    job = copy.deepcopy(obj)
    metadata = job["metadata"]
    metadata["namespace"] = namespace
    labels = metadata.setdefault("labels", {})
    # Kueue's older samples name the queue in an annotation, which Kueue still reads when the label is missing.
    labels.setdefault(QUEUE_LABEL, (metadata.get("annotations") or {}).get(QUEUE_LABEL, queue))
    if priority is not None:
        labels[PRIORITY_LABEL] = priority
    else:
        labels.setdefault(PRIORITY_LABEL, DEFAULT_PRIORITY)
    return job


def default_queue(local_queues: list[str]) -> str:
    """The LocalQueue a job without a queue label goes to: `default` (what Kueue defaults to), else the first."""
    return "default" if "default" in local_queues else sorted(local_queues)[0]


def check_queue(job: dict[str, Any], local_queues: list[str]) -> None:
    """Refuses a job whose queue label names no LocalQueue of its namespace: Kueue would hold it forever as
    inadmissible, and `why` could only say so after the fact."""
    metadata = job["metadata"]
    queue = metadata.get("labels", {}).get(QUEUE_LABEL, "")
    if queue in local_queues:
        return
    known = ", ".join(sorted(local_queues)) or "none"
    raise UsageError(
        f"{QUEUE_LABEL}: {queue!r} names no LocalQueue in namespace {metadata.get('namespace', '')} "
        f"(its queues: {known})",
        hint=f"set the label to one of: {known}, or leave it out (`konduktor submit` fills in "
        f"{default_queue(local_queues)})"
        if local_queues
        else "submit it in a team namespace (-n TEAM-NAMESPACE)",
    )


def shown_name(job: dict[str, Any]) -> str:
    """The job's name, or its generateName followed by `…` where the server names it at creation."""
    metadata = job["metadata"]
    return str(metadata.get("name") or f"{metadata.get('generateName', 'job-')}…")


def _pod_set(name: str, count: int, template: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "count": count, "template": template}


def workload_for(job: dict[str, Any]) -> dict[str, Any]:
    """The pending Workload Kueue would make of a Job, JobSet or Pod: its pod sets, queue and name."""
    kind = job["kind"]
    spec = job.get("spec", {})
    if kind == "Job":
        pod_sets = [_pod_set("main", int(spec.get("parallelism", 1)), spec.get("template", {}))]
    elif kind == "JobSet":
        pod_sets = [
            _pod_set(
                rj.get("name", "main"),
                int(rj.get("replicas", 1)) * int(rj.get("template", {}).get("spec", {}).get("parallelism", 1)),
                rj.get("template", {}).get("spec", {}).get("template", {}),
            )
            for rj in spec.get("replicatedJobs", [])
        ]
    elif kind == "Pod":
        pod_sets = [_pod_set("main", 1, {"spec": spec})]
    else:
        pod_sets = []
    metadata = job["metadata"]
    name = shown_name(job)
    return {
        "metadata": {
            "name": name,
            "namespace": metadata.get("namespace", ""),
            "ownerReferences": [{"kind": kind, "name": name}],
        },
        "spec": {"queueName": metadata.get("labels", {}).get(QUEUE_LABEL, ""), "podSets": pod_sets},
        "status": {},
    }

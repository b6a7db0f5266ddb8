"""What `konduktor submit` does to a job before sending it (pure): the team's queue label and a priority class
when missing, its whole GPUs asked for as slices on request (`--slice`), and the Workload Kueue would make of it, so
a job that can never fit is refused before it waits."""

from __future__ import annotations

import copy
from typing import Any

from konduktor.errors import UsageError
from konduktor.gpu.sharing import MIG_RESOURCE_PREFIX, SHARED_RESOURCE, compute_slices
from konduktor.queueing.admission import pod_specs
from konduktor.queueing.explain import PRIORITY_LABEL, QUEUE_LABEL
from konduktor.vocabulary import GPU_RESOURCE

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


def parse_slice(text: str) -> tuple[str, int]:
    """`--slice RESOURCE[:COUNT]`: the resource as a team's `slices` name it in config.yaml (mig-1g.10gb,
    gpu.shared) or in full (nvidia.com/mig-1g.10gb), and how many per container (1 unless given)."""
    name, colon, amount = text.strip().partition(":")
    resource = name if name.startswith("nvidia.com/") else f"nvidia.com/{name}"
    profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
    if resource != SHARED_RESOURCE and not (resource.startswith(MIG_RESOURCE_PREFIX) and _is_profile(profile)):
        raise UsageError(
            f"--slice {text}: not a slice",
            hint="a MIG profile as mig-<profile> (e.g. mig-1g.10gb) or gpu.shared (time-slicing, MPS); "
            "`konduktor queue` shows your team's",
        )
    if colon and not (amount.isdigit() and int(amount) >= 1):
        raise UsageError(f"--slice {text}: {amount!r} is not a count of slices", hint="e.g. --slice mig-1g.10gb:2")
    count = int(amount) if colon else 1
    if resource == SHARED_RESOURCE and count > 1:
        raise UsageError(
            f"--slice {text}: a container gets at most one shared GPU (the device plugin refuses more: two shares of "
            "one GPU give no more compute than one)",
            hint="run more pods of one shared GPU each, or ask for a MIG slice",
        )
    return resource, count


def _is_profile(profile: str) -> bool:
    try:
        compute_slices(profile.replace(".me", "+me"))
    except ValueError:
        return False
    return True


def with_slices(job: dict[str, Any], resource: str, count: int) -> dict[str, Any]:
    """The job with every container that asks for whole GPUs (nvidia.com/gpu) asking for `count` of the slice
    `resource` instead, in its requests and limits alike. UsageError when no container asks for a GPU: there is
    nothing to make a slice of."""
    changed = copy.deepcopy(job)
    found = False
    for _, spec in pod_specs(changed.get("spec", {})):
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            resources = container.get("resources") or {}
            if not any(GPU_RESOURCE in (resources.get(side) or {}) for side in ("requests", "limits")):
                continue
            found = True
            for side in ("requests", "limits"):
                amounts = resources.get(side)
                if amounts is not None and GPU_RESOURCE in amounts:
                    del amounts[GPU_RESOURCE]
                    amounts[resource] = str(count)
            # An extended resource needs a limit; a request alone is copied there.
            resources.setdefault("limits", {})[resource] = str(count)
    if not found:
        raise UsageError(
            f"--slice: {shown_name(job)} asks for no GPU (nvidia.com/gpu): there is nothing to make a slice of",
            hint="give the containers that need a GPU `resources.limits: {nvidia.com/gpu: 1}`",
        )
    return changed


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

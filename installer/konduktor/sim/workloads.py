"""GPU Jobs and their Kueue state on a cluster: what the demo submits and what acceptance tests observe."""

from __future__ import annotations

import copy
from typing import Any

from konduktor.gpu.pod import pod_gpus
from konduktor.kube.client import Kube
from konduktor.kube.conditions import condition, is_true
from konduktor.vocabulary import GPU_RESOURCE, HOSTNAME_LABEL, KUEUE_API

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# kwok's pod-complete stage reads this annotation: how long this pod "runs" before it succeeds.
RUN_FOR = "pod-complete.stage.kwok.x-k8s.io/delay"
# What Pod Security `restricted` (a team's security profile may be it) asks of a pod: not root (a numeric user, since
# images such as NVIDIA's run as root by default), no privilege escalation, no capabilities, the runtime's
# seccomp profile.
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def gpu_job(
    name: str,
    namespace: str,
    gpus: int,
    queue: str | None = "default",
    run_for: str | None = None,
    pods: int = 1,
    priority: str | None = None,
    node: str | None = None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    """A batch Job whose pods each ask for `gpus` GPUs (requests == limits, as extended resources require), fit
    for Pod Security `restricted`."""
    labels = {QUEUE_LABEL: queue} if queue else {}
    if priority:
        labels[PRIORITY_LABEL] = priority
    annotations = {RUN_FOR: run_for} if run_for else {}
    resources = {GPU_RESOURCE: str(gpus), "cpu": "1", "memory": "1Gi"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    **({"nodeSelector": {HOSTNAME_LABEL: node}} if node else {}),
                    "securityContext": copy.deepcopy(RESTRICTED_POD),
                    "containers": [
                        {
                            "name": "train",
                            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                            **({"command": command} if command else {}),
                            "resources": {"requests": resources, "limits": resources},
                            "securityContext": copy.deepcopy(RESTRICTED_CONTAINER),
                        }
                    ],
                },
            },
        },
    }


def workload_of(kube: Kube, namespace: str, job_name: str) -> dict[str, Any] | None:
    """Kueue's Workload for a Job (owned by it)."""
    for workload in kube.list(KUEUE_API, "Workload", namespace):
        owners = workload["metadata"].get("ownerReferences", [])
        if any(o.get("kind") == "Job" and o.get("name") == job_name for o in owners):
            return workload
    return None


def running_on(kube: Kube, namespace: str, job: str) -> dict[str, str]:
    """A Job's running pods (not being deleted) and their nodes."""
    pods = kube.list("v1", "Pod", namespace, label_selector=f"batch.kubernetes.io/job-name={job}")
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods
        if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


def job_state(kube: Kube, namespace: str, name: str) -> str:
    """One word for where a Job is: suspended, pending-admission, running, complete, failed, missing."""
    job = kube.get("batch/v1", "Job", name, namespace)
    if job is None:
        return "missing"
    if is_true(job, "Complete"):
        return "complete"
    if is_true(job, "Failed"):
        return "failed"
    if job["spec"].get("suspend"):
        return "suspended"
    return "running"


def workload_gpus(workload: dict[str, Any]) -> int:
    """GPUs a Workload asks for: pods x GPUs per pod, summed over its pod sets."""
    total = 0
    for pod_set in workload.get("spec", {}).get("podSets", []):
        total += pod_gpus(pod_set["template"]["spec"]) * int(pod_set.get("count", 1))
    return total


def admitted_gpus(kube: Kube, namespace: str) -> int:
    """GPUs held right now by the namespace's admitted, unfinished Workloads."""
    return sum(
        workload_gpus(w)
        for w in kube.list(KUEUE_API, "Workload", namespace)
        if is_true(w, "Admitted") and not is_true(w, "Finished")
    )


def was_evicted(workload: dict[str, Any]) -> bool:
    """Kueue records every eviction or preemption as a condition; it stays after the Workload is requeued."""
    return any(condition(workload, kind) is not None for kind in ("Evicted", "Preempted"))

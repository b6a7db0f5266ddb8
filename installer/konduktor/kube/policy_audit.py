"""Which existing GPU workloads Konduktor's admission policies would refuse.

Policies only judge creations, so workloads that predate them are never checked. Each is re-submitted as a
server-side dry-run copy: the real policies judge it and, in Warn mode, answer with warnings naming the
policy and the reason. Nothing is created.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from konduktor.kube.client import ApiError, Kube

GPU = "nvidia.com/gpu"
POLICY_PREFIX = "konduktor-"
# Labels the Job controller adds; a copy must not carry them or the API server refuses its selector.
JOB_CONTROLLER_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
)


@dataclass(frozen=True)
class Violation:
    kind: str
    namespace: str
    name: str
    reason: str


def requests_gpu(pod_spec: dict[str, Any]) -> bool:
    containers = [*pod_spec.get("containers", []), *pod_spec.get("initContainers", [])]
    for container in containers:
        resources = container.get("resources", {})
        if GPU in resources.get("requests", {}) or GPU in resources.get("limits", {}):
            return True
    return False


def audit_copy(obj: dict[str, Any]) -> dict[str, Any] | None:
    """A creatable copy of a Pod or Job that requests GPUs, or None when the policies would not judge it:
    no GPUs, or created by a controller (a Job's pods were judged as the Job)."""
    meta = obj["metadata"]
    if any(owner.get("controller") for owner in meta.get("ownerReferences", [])):
        return None
    spec = obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]
    if not requests_gpu(spec):
        return None
    copy_meta = {
        "generateName": "konduktor-audit-",
        "namespace": meta["namespace"],
        "labels": meta.get("labels", {}),
        "annotations": meta.get("annotations", {}),
    }
    if obj["kind"] == "Pod":
        spec = {k: v for k, v in obj["spec"].items() if k not in ("nodeName",)}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": copy_meta, "spec": spec}
    template = obj["spec"]["template"]
    labels = {k: v for k, v in template.get("metadata", {}).get("labels", {}).items() if k not in JOB_CONTROLLER_LABELS}
    job_spec = {k: v for k, v in obj["spec"].items() if k not in ("selector", "template")}
    job_spec["template"] = {"metadata": {**template.get("metadata", {}), "labels": labels}, "spec": template["spec"]}
    copy_meta["labels"] = {k: v for k, v in copy_meta["labels"].items() if k not in JOB_CONTROLLER_LABELS}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": copy_meta, "spec": job_spec}


def audit_gpu_workloads(kube: Kube) -> list[Violation]:
    """Every standalone GPU Pod and every GPU Job in the cluster that a Konduktor policy warns about."""
    violations = []
    for api_version, kind in (("v1", "Pod"), ("batch/v1", "Job")):
        for obj in kube.list(api_version, kind):
            probe = audit_copy(obj)
            if probe is None:
                continue
            meta = obj["metadata"]
            try:
                warnings = kube.dry_run_create(probe)
            except ApiError as problem:  # already enforcing (Deny): the refusal is the finding
                warnings = [problem.message]
            for warning in warnings:
                if f"ValidatingAdmissionPolicy '{POLICY_PREFIX}" in warning:
                    violations.append(Violation(kind, meta["namespace"], meta["name"], warning))
    return violations

"""Which existing workloads Konduktor's admission policies would refuse.

Policies judge creations and updates, so workloads that predate them run on unjudged. Each Pod and Job, those
that controllers created included, is re-submitted as a server-side dry-run copy, sent as the identity that
created it where the policies exempt that identity: the real policies judge it and answer with the policy and
the reason (a warning in warn-first mode, a refusal when enforcing). Nothing is created.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from konduktor.kube.client import ApiError, Identity, Kube

POLICY_PREFIX = "konduktor-"
# Creates the pods of Jobs (kube-controller-manager with --use-service-account-credentials). The policies exempt
# it (policies.workloadControllers) from the checks its Job passed, so a Job's pods are judged as it sends them.
JOB_CONTROLLER = Identity("system:serviceaccount:kube-system:job-controller")
# Labels the Job controller adds; a copy must not carry them or the API server refuses its selector.
JOB_CONTROLLER_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
)
# What the scheduler and the Job controller wrote into the spec; a person's pod could not carry them.
SCHEDULED_FIELDS = ("nodeName",)


@dataclass(frozen=True)
class Violation:
    kind: str
    namespace: str
    name: str
    reason: str


def controller_kind(obj: dict[str, Any]) -> str | None:
    """The kind of the object's controller owner (`batch/v1 Job`), or None."""
    for owner in obj["metadata"].get("ownerReferences", []):
        if owner.get("controller"):
            return f"{owner['apiVersion']} {owner['kind']}"
    return None


def created_by_the_job_controller(obj: dict[str, Any]) -> bool:
    """A Job's pod, whose copy is sent as the Job controller; every other copy as the caller, exempt from nothing."""
    return obj["kind"] == "Pod" and controller_kind(obj) == "batch/v1 Job"


def audit_copy(obj: dict[str, Any]) -> dict[str, Any]:
    """A creatable copy of a Pod or Job: what its creator sent, without what the server and controllers added."""
    meta = obj["metadata"]
    copy_meta = {
        "generateName": "konduktor-audit-",
        "namespace": meta["namespace"],
        "labels": {k: v for k, v in meta.get("labels", {}).items() if k not in JOB_CONTROLLER_LABELS},
        "annotations": meta.get("annotations", {}),
    }
    if obj["kind"] == "Pod":
        spec = {k: v for k, v in obj["spec"].items() if k not in SCHEDULED_FIELDS}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": copy_meta, "spec": spec}
    template = obj["spec"]["template"]
    labels = {k: v for k, v in template.get("metadata", {}).get("labels", {}).items() if k not in JOB_CONTROLLER_LABELS}
    job_spec = {k: v for k, v in obj["spec"].items() if k not in ("selector", "template")}
    job_spec["template"] = {"metadata": {**template.get("metadata", {}), "labels": labels}, "spec": template["spec"]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": copy_meta, "spec": job_spec}


def policy_findings(client: Kube, obj: dict[str, Any]) -> list[str]:
    """What Konduktor's policies say of a Pod or Job were it created now by `client`'s identity: the refusal
    (policies that deny) or the warnings (policies that warn). Nothing is created."""
    try:
        warnings = client.dry_run_create(audit_copy(obj))
    except ApiError as problem:  # enforcing (Deny): the refusal is the finding
        warnings = [problem.message]
    return [warning for warning in warnings if f"ValidatingAdmissionPolicy '{POLICY_PREFIX}" in warning]


def audit_workloads(kube: Kube) -> list[Violation]:
    """Every Pod and Job in the cluster, controller-owned ones included, that a Konduktor policy refuses or
    warns about."""
    violations = []
    with Kube(kube.kubeconfig, kube.context, timeout=kube.timeout, impersonate=JOB_CONTROLLER) as job_controller:
        for api_version, kind in (("v1", "Pod"), ("batch/v1", "Job")):
            for obj in kube.list(api_version, kind):
                client = job_controller if created_by_the_job_controller(obj) else kube
                meta = obj["metadata"]
                for finding in policy_findings(client, obj):
                    violations.append(Violation(kind, meta["namespace"], meta["name"], finding))
    return violations

"""The copies `up`'s policy audit re-submits: what their creator sent, sent as the identity the policies judge."""

from __future__ import annotations

from typing import Any

from konduktor.kube.policy_audit import audit_copy, created_by_the_job_controller


def job_pod(owner_kind: str = "Job") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-x1",
            "namespace": "team-a",
            "labels": {"job-name": "train", "batch.kubernetes.io/controller-uid": "u1", "app": "train"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": owner_kind, "name": "train", "controller": True}],
        },
        "spec": {"nodeName": "gpu-h100-0001", "containers": [{"name": "train", "image": "train:1"}]},
    }


def test_a_jobs_pod_is_sent_as_the_job_controller_and_other_owned_pods_as_the_caller() -> None:
    assert created_by_the_job_controller(job_pod())
    assert not created_by_the_job_controller(job_pod("ReplicaSet"))
    standalone = job_pod()
    standalone["metadata"]["ownerReferences"] = []
    assert not created_by_the_job_controller(standalone)


def test_a_copy_drops_what_the_scheduler_and_the_job_controller_wrote() -> None:
    copy = audit_copy(job_pod())
    assert copy["metadata"]["generateName"] == "konduktor-audit-"
    assert copy["metadata"]["labels"] == {"app": "train"}
    assert "nodeName" not in copy["spec"] and "ownerReferences" not in copy["metadata"]
    assert copy["spec"]["containers"] == [{"name": "train", "image": "train:1"}]

"""The security profile judges the pod templates of Kueue's other workload kinds, JobSets and Kubeflow training
jobs, with their real CRDs: those of the JobSet and training-operator modules at the versions the pinned Kueue is
built against (its go.mod), installed on the simulated cluster for this module and removed after it. Creations are
server-side dry runs in the policy cases' profiled namespaces (policies/cases/setup.yaml)."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admission import denial
from conftest import Sim

from konduktor.kube.client import Kube
from konduktor.kube.documents import load_documents
from konduktor.tools.gobuild import module_dir
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
POLICY = "konduktor-security-profile"
CRD_API = "apiextensions.k8s.io/v1"
# Module -> its CRD files, as each upstream repository lays them out.
CRD_FILES = {
    "sigs.k8s.io/jobset": ["config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"],
    "github.com/kubeflow/training-operator": ["manifests/base/crds/kubeflow.org_pytorchjobs.yaml"],
}


def dependency_dir(module: str) -> Path:
    """A module Kueue depends on, at the version its go.mod requires, from Go's module cache."""
    kueue = Toolbox().tools["kueue"]
    found = re.search(rf"^\s*{re.escape(module)} (v\S+)", (module_dir(kueue) / "go.mod").read_text(), re.MULTILINE)
    assert found is not None, f"Kueue {kueue.version} no longer requires {module}"
    return module_dir(dataclasses.replace(kueue, name=module, module=module, version=found[1]))


@pytest.fixture(scope="module")
def workload_crds(sim: Sim, enforcing: Kube) -> Iterator[Kube]:
    kube: Kube = sim.kube
    crds = [
        doc for module, files in CRD_FILES.items() for f in files for doc in load_documents(dependency_dir(module) / f)
    ]
    created = [
        crd["metadata"]["name"]
        for crd in crds
        if kube.get(CRD_API, "CustomResourceDefinition", crd["metadata"]["name"]) is None
    ]
    for crd in crds:
        kube.apply(crd)

    def established(name: str) -> bool:
        found = kube.get(CRD_API, "CustomResourceDefinition", name) or {}
        return any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (found.get("status") or {}).get("conditions") or []
        )

    for crd in crds:
        wait_until(
            f"CRD {crd['metadata']['name']} to be established", lambda n=crd["metadata"]["name"]: established(n), 60
        )
    try:
        yield enforcing
    finally:
        for name in created:
            kube.delete(CRD_API, "CustomResourceDefinition", name)


def pod_spec(**container: Any) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3", **container}],
    }


def jobset(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicatedJobs": [
                {"name": "launcher", "replicas": 1, "template": {"spec": {"template": {"spec": pod_spec()}}}},
                {"name": "workers", "replicas": 2, "template": {"spec": {"template": {"spec": spec}}}},
            ]
        },
    }


def pytorch_job(name: str, namespace: str, worker: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": pod_spec()}},
                "Worker": {"replicas": 3, "template": {"spec": worker}},
            }
        },
    }


RDMA = {"securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}
PRIVILEGED = {"securityContext": {"privileged": True}}


def refused(kube: Kube, obj: dict[str, Any]) -> str:
    problem = denial(kube, obj)
    assert problem is not None, f"{obj['kind']} admitted; {POLICY} should have refused it"
    assert problem.status == 403 and f"ValidatingAdmissionPolicy '{POLICY}'" in problem.message, problem.message
    return problem.message


def test_a_jobset_is_judged_by_every_replicated_jobs_template(workload_crds: Kube) -> None:
    assert denial(workload_crds, jobset("rdma", "team-gpu", pod_spec(**RDMA))) is None
    message = refused(workload_crds, jobset("privileged", "team-gpu", pod_spec(**PRIVILEGED)))
    assert "the pods of this JobSet break the team namespace's security profile gpu: privileged (train)" in message
    with_host = pod_spec()
    with_host["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    assert "hostPath volumes (root)" in refused(workload_crds, jobset("host", "team-gpu", with_host))
    # Under restricted, the launcher's template (root, nothing dropped) is refused too.
    message = refused(workload_crds, jobset("ngc", "team-restricted", pod_spec()))
    assert "security profile restricted: allowPrivilegeEscalation != false (train, train)" in message


def test_a_pytorchjob_is_judged_by_every_replica_types_template(workload_crds: Kube) -> None:
    assert denial(workload_crds, pytorch_job("rdma", "team-gpu", pod_spec(**RDMA))) is None
    worker = pod_spec(**copy.deepcopy(RDMA))
    worker["hostNetwork"] = True
    message = refused(workload_crds, pytorch_job("host-network", "team-gpu", worker))
    assert "the pods of this PyTorchJob break the team namespace's security profile gpu: " in message
    assert "host namespaces (hostNetwork=true)" in message
    message = refused(workload_crds, pytorch_job("rdma", "team-baseline", pod_spec(**RDMA)))
    assert "security profile baseline: capabilities beyond the profile (train adds IPC_LOCK" in message

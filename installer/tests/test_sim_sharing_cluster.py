"""Shared GPUs on the simulated cluster: a node labelled for a sharing group advertises its slices (the GPU agent
plays mig-manager, the device plugin and GFD), a pod asking for a slice is scheduled there and completes, the label
removed gives the whole GPUs back, and an Xid on one MIG instance is judged by the health controller as decided in
docs/health.md."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Sim
from health_cluster import (  # noqa: F401 (fixtures: `kube`, the controller's namespace; `clean`, nodes reset)
    clean,
    controller,
    kube_with_controller_namespace,
    our_events,
    settings,
)
from sim_fixture import health_taints, node, patch_node
from support import V1BETA2

from konduktor.cli.main import main
from konduktor.errors import KonduktorError
from konduktor.gpu.sharing import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL
from konduktor.kube.client import Kube
from konduktor.queueing.capacity import from_json, to_json
from konduktor.queueing.cluster import read_capacity
from konduktor.queueing.slices import published_slice_usage
from konduktor.sim.faults import kernel_log_dir
from konduktor.sim.sharing import SHARING_ANNOTATION, SHARING_NODES_LABEL, groups_annotation, is_gpu_resource
from konduktor.sim.workloads import gpu_job, is_true, job_state
from konduktor.vocabulary import GPU_RESOURCE, QUARANTINE_REASON, TEAM_LABEL
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim

NODE = "gpu-h100-0001"
# The groups of examples/config.yaml's h100 type, had it any; the session cluster's nodes have 10 GPUs each.
GROUPS = {"h100-mig": {"mig": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}, "h100-shared": {"timeSlicing": 4}}
NAMESPACE = "slices-a"
MIG_1G = "nvidia.com/mig-1g.10gb"


def gpu_resources(kube: Kube, section: str = "allocatable") -> dict[str, str]:
    return {k: v for k, v in node(kube, NODE)["status"][section].items() if is_gpu_resource(k)}


def label(kube: Kube, **labels: str | None) -> None:
    kube.patch("v1", "Node", NODE, {"metadata": {"labels": labels}})


@pytest.fixture
def sharing_node(kube: Kube) -> Iterator[str]:
    """NODE as `sim up --config` makes a node of a type with sharing groups; whole GPUs and no groups after."""
    patch_node(
        kube,
        NODE,
        lambda _: {
            "metadata": {
                "labels": {SHARING_NODES_LABEL: "true"},
                "annotations": {SHARING_ANNOTATION: groups_annotation(GROUPS)},
            }
        },
    )
    yield NODE
    label(kube, **{MIG_CONFIG_LABEL: None, DEVICE_PLUGIN_CONFIG_LABEL: None})
    wait_until("the whole GPUs back", lambda: gpu_resources(kube) == {GPU_RESOURCE: "10"})
    patch_node(
        kube,
        NODE,
        lambda _: {"metadata": {"labels": {SHARING_NODES_LABEL: None}, "annotations": {SHARING_ANNOTATION: None}}},
    )


def slice_queue() -> list[dict[str, Any]]:
    """A flavor of the MIG group's nodes, as quotas/render.py names it, and a team's queue of 1g.10gb slices."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {TEAM_LABEL: NAMESPACE}}},
        {
            "apiVersion": V1BETA2,
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100-mig"},
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", MIG_CONFIG_LABEL: "h100-mig"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        {
            "apiVersion": V1BETA2,
            "kind": "ClusterQueue",
            "metadata": {"name": NAMESPACE},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/mig-1g.10gb"],
                        "flavors": [
                            {
                                "name": "h100-mig",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "10"},
                                    {"name": "memory", "nominalQuota": "100Gi"},
                                    {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "4"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": V1BETA2,
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": NAMESPACE},
            "spec": {"clusterQueue": NAMESPACE},
        },
    ]


def slice_job(name: str, run_for: str = "1s") -> dict[str, Any]:
    job = gpu_job(name, NAMESPACE, gpus=1, run_for=run_for)
    resources = {MIG_1G: "1", "cpu": "1", "memory": "1Gi"}
    [container] = job["spec"]["template"]["spec"]["containers"]
    container["resources"] = {"requests": resources, "limits": copy.deepcopy(resources)}
    return job


def stuck(kube: Kube) -> KonduktorError:
    pods = [
        (p["metadata"]["name"], p["spec"].get("nodeName"), p.get("status")) for p in kube.list("v1", "Pod", NAMESPACE)
    ]
    workloads = [w.get("status") for w in kube.list(V1BETA2, "Workload", NAMESPACE)]
    events = [
        f"{e['involvedObject']['name']}: {e['reason']}: {e['message']}" for e in kube.list("v1", "Event", NAMESPACE)
    ]
    return KonduktorError(f"the slice's Job did not complete: {json.dumps([pods, workloads, events])[:6000]}")


def test_a_labelled_node_advertises_slices_a_pod_runs_on_one_and_unlabelled_it_is_whole_again(
    kube: Kube, sharing_node: str
) -> None:
    label(kube, **{MIG_CONFIG_LABEL: "h100-mig"})
    mig = {
        GPU_RESOURCE: "0",
        "nvidia.com/mig-1g.10gb": "20",
        "nvidia.com/mig-2g.20gb": "10",
        "nvidia.com/mig-3g.40gb": "10",
    }
    wait_until(
        "the MIG layout applied",
        lambda: node(kube, NODE)["metadata"]["labels"].get(MIG_CONFIG_STATE_LABEL) == "success",
    )
    assert gpu_resources(kube) == gpu_resources(kube, "capacity") == mig
    labels = node(kube, NODE)["metadata"]["labels"]
    assert (labels["nvidia.com/mig.strategy"], labels["nvidia.com/mig-1g.10gb.count"]) == ("mixed", "20")
    assert labels["nvidia.com/gpu.count"] == "10"  # GFD still counts the physical GPUs

    kube.apply_all(slice_queue())
    try:
        wait_until("the slice queue active", lambda: is_true(kube.get(V1BETA2, "ClusterQueue", NAMESPACE), "Active"))
        kube.create(slice_job("slice"))
        wait_until(
            "the slice's Job to complete",
            lambda: job_state(kube, NAMESPACE, "slice") == "complete",
            timeout=120,  # kwok plays the pod's stages; on a loaded machine that can take a minute
            on_timeout=lambda: stuck(kube),
        )
        [pod] = kube.list("v1", "Pod", NAMESPACE, label_selector="job-name=slice")
        assert pod["spec"]["nodeName"] == NODE  # kube-scheduler found the slice in the node's allocatable
    finally:
        kube.delete("v1", "Namespace", NAMESPACE)
        kube.delete(V1BETA2, "ClusterQueue", NAMESPACE)
        kube.delete(V1BETA2, "ResourceFlavor", "h100-mig")

    # Time-slicing instead: the MIG layout's labels go, the renamed replicas come.
    label(kube, **{MIG_CONFIG_LABEL: None, DEVICE_PLUGIN_CONFIG_LABEL: "h100-shared"})
    shared = {GPU_RESOURCE: "0", "nvidia.com/gpu.shared": "40"}
    wait_until("the node time-sliced", lambda: gpu_resources(kube) == shared)
    wait_until(
        "GFD's labels of a time-sliced node",
        lambda: node(kube, NODE)["metadata"]["labels"].get("nvidia.com/gpu.sharing-strategy") == "time-slicing",
    )
    labels = node(kube, NODE)["metadata"]["labels"]
    assert not [k for k in labels if k.startswith("nvidia.com/mig")]

    label(kube, **{DEVICE_PLUGIN_CONFIG_LABEL: None})
    wait_until(
        "the whole GPUs back", lambda: gpu_resources(kube) == gpu_resources(kube, "capacity") == {GPU_RESOURCE: "10"}
    )
    wait_until(
        "no sharing label left",
        lambda: "nvidia.com/gpu.sharing-strategy" not in node(kube, NODE)["metadata"]["labels"],
    )


def test_an_xid_on_a_mig_instance_names_it_contained_stays_on_it_uncontained_quarantines(
    sim: Sim, kube: Kube, sharing_node: str
) -> None:
    label(kube, **{MIG_CONFIG_LABEL: "h100-mig"})
    wait_until("the MIG layout applied", lambda: gpu_resources(kube).get("nvidia.com/mig-1g.10gb") == "20")
    files = {"directory": str(kernel_log_dir(sim.cluster.root))}
    health = controller(kube, settings(kernel_log_files=files))  # reads only what is written from now on
    name = ["--name", sim.cluster.name]
    assert main(["sim", "fault", NODE, "--kind", "xid94", "--gpu", "3", "--mig-instance", "1", *name]) == 0
    line = (kernel_log_dir(sim.cluster.root) / f"{NODE}.log").read_text().splitlines()[-1]
    assert "NVRM: Xid (PCI:0000:48:00.0 GPU-I:01): 94," in line
    health.reconcile_once()
    assert health_taints(node(kube, NODE)) == []  # the work on that instance failed, not the node
    (warning,) = our_events(kube, NODE)
    assert warning["reason"] == "Xid94" and "GPU-I:01" in warning["message"]

    assert main(["sim", "fault", NODE, "--kind", "xid95", "--gpu", "3", "--mig-instance", "1", *name]) == 0
    # The device plugin withdrew GPU 3, with every instance on it.
    assert gpu_resources(kube)["nvidia.com/mig-1g.10gb"] == "18"
    health.reconcile_once()
    quarantined = node(kube, NODE)
    assert health_taints(quarantined) != []
    uncontained = [e for e in our_events(kube, NODE) if e["reason"] == "Xid95"]
    assert uncontained and "UNCONTAINED_ERROR GPU-I:01" in uncontained[0]["message"]
    assert "on 0000:48:00.0" in uncontained[0]["message"]
    assert (
        quarantined["metadata"]["annotations"][QUARANTINE_REASON] == "Xid95 UNCONTAINED_ERROR GPU-I:01 on 0000:48:00.0"
    )
    assert main(["sim", "fault", NODE, "--clear", *name]) == 0
    assert gpu_resources(kube)["nvidia.com/mig-1g.10gb"] == "20"


def test_a_mig_node_is_burned_in_through_its_slices_and_says_what_it_skipped(
    sim: Sim, kube: Kube, sharing_node: str, capsys: pytest.CaptureFixture[str]
) -> None:
    label(kube, **{MIG_CONFIG_LABEL: "h100-mig"})
    wait_until("the MIG layout applied", lambda: gpu_resources(kube).get("nvidia.com/mig-1g.10gb") == "20")
    namespace = "slices-burnin"
    args = ["--nodes", NODE, "--level", "standard", "-o", "json", "--namespace", namespace]
    try:
        code = main(["burnin", *args, "--kubeconfig", str(sim.kubeconfig)])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        [item] = json.loads(captured.out)["nodes"]
        checks = {c["check"]: c for c in item["checks"]}
        assert item["verdict"] == "PASS" and checks["inventory"]["summary"] == "10 x H100 SXM5 80GB"
        for skipped in ("dcgm_diag", "matmul_tflops", "nccl_allreduce"):  # each with its reason
            assert checks[skipped]["verdict"] == "SKIPPED" and checks[skipped]["reasons"], skipped
        [job] = kube.list("batch/v1", "Job", namespace)
        [container] = job["spec"]["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "20"
    finally:
        kube.delete("v1", "Namespace", namespace)


def test_the_published_capacity_counts_the_groups_slices_and_the_queues_slice_quota(
    kube: Kube, sharing_node: str
) -> None:
    label(kube, **{MIG_CONFIG_LABEL: "h100-mig"})
    wait_until(
        "the MIG layout applied",
        lambda: node(kube, NODE)["metadata"]["labels"].get(MIG_CONFIG_STATE_LABEL) == "success",
    )
    kube.apply_all(slice_queue())
    try:
        wait_until("the slice queue active", lambda: is_true(kube.get(V1BETA2, "ClusterQueue", NAMESPACE), "Active"))
        kube.create(slice_job("holds", run_for="1h"))

        def mig_1g() -> tuple[int, int, int] | None:
            rows = [s for s in read_capacity(kube).slices if (s.flavor, s.resource) == ("h100-mig", MIG_1G)]
            return (rows[0].nodes, rows[0].total, rows[0].free) if rows else None

        def queue_rows() -> list[tuple[str, str, int, int]]:
            rows = published_slice_usage(read_capacity(kube), NAMESPACE)
            return [(r.flavor, r.resource, int(r.nominal), int(r.used)) for r in rows]

        # The node's 20 mig-1g.10gb (10 GPUs x 2), one of them held by the running pod; Kueue counts it in the
        # queue's usage when its status next says so.
        wait_until("the held slice published", lambda: mig_1g() == (1, 20, 19), on_timeout=lambda: stuck(kube))
        wait_until("the queue's slice usage", lambda: queue_rows() == [("h100-mig", MIG_1G, 4, 1)])
        capacity = read_capacity(kube)
        assert from_json(to_json(capacity)) == capacity  # as a team member reads it
    finally:
        kube.delete("v1", "Namespace", NAMESPACE)
        kube.delete(V1BETA2, "ClusterQueue", NAMESPACE)
        kube.delete(V1BETA2, "ResourceFlavor", "h100-mig")

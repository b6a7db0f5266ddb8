"""Acceptance of the simulated cluster: Kueue's webhooks, admission, scheduling and completion on fake GPU nodes."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Sim

from konduktor.kube.client import Kube
from konduktor.quotas.render import TEAM_LABEL
from konduktor.sim.cluster import SimCluster, SimSpec, alive
from konduktor.sim.nodes import parse_nodes_spec
from konduktor.sim.workloads import condition, gpu_job, is_true, job_state, workload_of
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
V1BETA2 = "kueue.x-k8s.io/v1beta2"


def queue_objects(namespace: str, gpus: int) -> list[dict[str, Any]]:
    """One flavor for the H100 nodes, a ClusterQueue with `gpus` of quota, a LocalQueue `default`.

    Named apart from examples/config.yaml's objects, which other tests apply to the same cluster."""
    return [
        # A team's namespace, where the admission policies let GPU Jobs through a LocalQueue.
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {TEAM_LABEL: namespace}}},
        {
            "apiVersion": V1BETA2,
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100-plain"},
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                # the GPU nodes carry the nvidia.com/gpu taint, as GPU nodes usually do
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        {
            "apiVersion": V1BETA2,
            "kind": "ClusterQueue",
            "metadata": {"name": namespace},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "h100-plain",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "100"},
                                    {"name": "memory", "nominalQuota": "1000Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
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
            "metadata": {"name": "default", "namespace": namespace},
            "spec": {"clusterQueue": namespace},
        },
    ]


def pods_of(kube: Kube, namespace: str, job: str) -> list[dict[str, Any]]:
    return kube.list("v1", "Pod", namespace, label_selector=f"job-name={job}")


def test_job_is_suspended_admitted_scheduled_and_completes(sim: Sim) -> None:
    kube = sim.kube
    kube.apply_all(queue_objects("accept-a", gpus=10))
    wait_until(
        "the ClusterQueue to be active", lambda: is_true(kube.get(V1BETA2, "ClusterQueue", "accept-a"), "Active")
    )

    created = kube.create(gpu_job("train", "accept-a", gpus=8, run_for="3s"))
    # Kueue's mutating webhook suspends the Job before any pod exists.
    assert created["spec"]["suspend"] is True

    wait_until("the Workload to be admitted", lambda: is_true(workload_of(kube, "accept-a", "train"), "Admitted"))
    wait_until(
        "a pod bound to a node", lambda: any(p["spec"].get("nodeName") for p in pods_of(kube, "accept-a", "train"))
    )
    [pod] = pods_of(kube, "accept-a", "train")
    node = kube.get("v1", "Node", pod["spec"]["nodeName"])
    assert node is not None
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    # kube-scheduler bound it, not a nodeName we set
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert any(c["type"] == "PodScheduled" and c["status"] == "True" for c in pod["status"]["conditions"])

    wait_until("the Job to complete", lambda: job_state(kube, "accept-a", "train") == "complete", timeout=60)
    wait_until(
        "Kueue to mark the Workload finished", lambda: is_true(workload_of(kube, "accept-a", "train"), "Finished")
    )


def test_a_job_over_quota_waits_then_runs(sim: Sim) -> None:
    kube = sim.kube
    kube.apply_all(queue_objects("accept-b", gpus=10))
    wait_until(
        "the ClusterQueue to be active", lambda: is_true(kube.get(V1BETA2, "ClusterQueue", "accept-b"), "Active")
    )
    kube.create(gpu_job("first", "accept-b", gpus=8, run_for="15s"))
    wait_until("the first Workload to be admitted", lambda: is_true(workload_of(kube, "accept-b", "first"), "Admitted"))

    kube.create(gpu_job("second", "accept-b", gpus=8, run_for="1s"))
    wait_until("the second Workload to exist", lambda: workload_of(kube, "accept-b", "second") is not None)

    def pending_on_quota() -> bool:
        reserved = condition(workload_of(kube, "accept-b", "second"), "QuotaReserved")
        return bool(reserved and reserved["status"] == "False" and reserved["reason"] == "Pending")

    wait_until("Kueue to report the second Workload pending", pending_on_quota)
    reserved = condition(workload_of(kube, "accept-b", "second"), "QuotaReserved")
    assert reserved is not None
    assert "insufficient unused quota for nvidia.com/gpu" in reserved["message"]
    assert job_state(kube, "accept-b", "second") == "suspended"
    assert job_state(kube, "accept-b", "first") == "running"

    wait_until("the first Job to complete", lambda: job_state(kube, "accept-b", "first") == "complete", timeout=90)
    wait_until("the second Job to be admitted", lambda: is_true(workload_of(kube, "accept-b", "second"), "Admitted"))
    wait_until("the second Job to complete", lambda: job_state(kube, "accept-b", "second") == "complete", timeout=60)


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def cluster_ports(cluster: SimCluster) -> list[int]:
    spec = cluster.spec()
    assert spec is not None
    server = Kube(cluster.kubeconfig).server
    return [int(server.rsplit(":", 1)[1]), *spec.kueue_ports.values()]


def cluster_pids(cluster: SimCluster) -> list[int]:
    pids = [int(p.read_text()) for p in (cluster.cluster_dir / "pids").glob("*.pid")]
    return [*pids, int((cluster.kueue_dir / "kueue.pid").read_text()), int(cluster.agent_pidfile.read_text())]


def konduktor_install(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("konduktor-install")), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)


def test_down_leaves_nothing_behind_and_up_works_again(sim: Sim) -> None:
    """Runs a second, small cluster beside the session's through the CLI, twice."""
    name = "konduktor-cycle"
    cluster = SimCluster(name)
    for round_ in range(2):
        result = konduktor_install("sim", "up", "--name", name, "--nodes", "1x8:A100")
        assert result.returncode == 0, result.stderr
        if round_ == 0:  # `up` twice is safe
            again = konduktor_install("sim", "up", "--name", name, "--nodes", "1x8:A100")
            assert again.returncode == 0, again.stderr
        status = konduktor_install("sim", "status", "--name", name, "-o", "json")
        assert status.returncode == 0, status.stderr
        assert '"gpus": 8' in status.stdout
        assert '"kueue": "ready"' in status.stdout
        ports, pids = cluster_ports(cluster), cluster_pids(cluster)
        # etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, kueue, the GPU agent
        assert len(pids) == 7
        assert all(listening(p) for p in ports)

        down = konduktor_install("sim", "down", "--name", name)
        assert down.returncode == 0, down.stderr
        assert not [pid for pid in pids if alive(pid)]
        assert not [port for port in ports if listening(port)]
        assert not cluster.root.exists()
    assert konduktor_install("sim", "status", "--name", name).returncode == 1


def test_sim_status_and_kubeconfig_of_the_session_cluster(sim: Sim) -> None:
    report = sim.cluster.status()
    assert report["ready_nodes"] == 5  # 4 GPU nodes and the system node
    assert report["gpus"] == 40
    assert set(report["components"]) >= {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue"}
    assert report["components"]["gpu-agent"] == "running"
    assert sim.kube.version()["gitVersion"] == "v1.36.3"


def test_sim_up_with_spec_round_trips() -> None:
    spec = SimSpec(pools=parse_nodes_spec("2x8:A100"), job_seconds=1.5, kueue_ports={"webhook": 1})
    assert SimSpec.from_json(spec.to_json()) == spec

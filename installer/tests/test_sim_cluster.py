"""Acceptance of the simulated cluster: Kueue's webhooks, admission, scheduling and completion on fake GPU nodes."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from conftest import Sim
from support import V1BETA2, queue_objects

from konduktor.cli.main import main
from konduktor.config.quantity import parse_quantity
from konduktor.kube.client import Kube
from konduktor.kube.conditions import condition
from konduktor.sim.cluster import SimCluster, SimSpec, alive
from konduktor.sim.control_plane import NODE_LEASE_SECONDS, NODE_MONITOR_GRACE_MS
from konduktor.sim.node_fleet import LIFECYCLE_TAINTS
from konduktor.sim.nodes import node_manifests, parse_nodes_spec, system_node
from konduktor.sim.workloads import gpu_job, is_true, job_state, workload_of
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim


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


def processes_of(cluster: SimCluster) -> list[int]:
    """Every process whose command line names the cluster's state directory, found without its pid files."""
    marker = f"{cluster.root}/"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_text(errors="replace") and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def amounts(resources: dict[str, str]) -> dict[str, Fraction]:
    """Resource quantities by value: the API server writes 1024Gi back as 1Ti."""
    return {name: parse_quantity(quantity) for name, quantity in resources.items()}


def assert_nodes_as_specified(kube: Kube, spec: SimSpec) -> None:
    """Every node has the capacity, allocatable and labels the spec gives it, and an InternalIP (kwok's defaults are
    1k CPU and 1Ti memory, and no address); and takes pods at once: no not-ready taint is left on it, which `up`'s
    preflight would count as GPUs that cannot be used."""
    wanted = {n["metadata"]["name"]: n for n in [system_node(), *node_manifests(spec.pools, spec.levels)]}
    nodes = {n["metadata"]["name"]: n for n in kube.list("v1", "Node")}
    assert nodes.keys() == wanted.keys()
    for name, node in nodes.items():
        status = wanted[name]["status"]
        assert amounts(node["status"]["capacity"]) == amounts(status["capacity"]), name
        assert amounts(node["status"]["allocatable"]) == amounts(status["allocatable"]), name
        assert wanted[name]["metadata"]["labels"].items() <= node["metadata"]["labels"].items(), name
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addresses == {"InternalIP": status["addresses"][0]["address"], "Hostname": "localhost"}, name
        assert not [t for t in node["spec"].get("taints", []) if t["key"].startswith("node.kubernetes.io/")], name


# Two cluster starts and stops beside the session's cluster, each CLI call bounded at 900 s.
@pytest.mark.timeout(1800)
def test_down_leaves_nothing_behind_and_up_works_again(tmp_path: Path) -> None:
    """A second, small cluster beside the session's, through the CLI, in a state directory of its own given as a
    relative path, twice; each `up` is a fresh cluster whose nodes must be right at once."""
    name = "konduktor-cycle"
    env = {**os.environ, "KONDUKTOR_STATE": "state"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(Path(sys.executable).with_name("konduktor-install")), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, env=env, cwd=tmp_path)

    os.environ["KONDUKTOR_STATE"], session_state = str(tmp_path / "state"), os.environ["KONDUKTOR_STATE"]
    try:
        cluster = SimCluster(name)
    finally:
        os.environ["KONDUKTOR_STATE"] = session_state
    try:
        up_down_twice(cli, cluster, name)
    finally:  # a failed round leaves no cluster running
        cli("sim", "down", "--name", name)
    assert cli("sim", "status", "--name", name).returncode == 1


def up_down_twice(cli: Callable[..., subprocess.CompletedProcess[str]], cluster: SimCluster, name: str) -> None:
    for round_ in range(2):
        result = cli("sim", "up", "--name", name, "--nodes", "2x8:A100")
        assert result.returncode == 0, result.stderr
        spec = cluster.spec()
        assert spec is not None
        kube = Kube(cluster.kubeconfig)
        try:
            assert_nodes_as_specified(kube, spec)
        finally:
            kube.close()
        if round_ == 0:  # `up` twice is safe
            again = cli("sim", "up", "--name", name, "--nodes", "2x8:A100")
            assert again.returncode == 0, again.stderr
            # Stopped with its data and started again: the new kwok plays the nodes at once (it would leave the
            # stopped kwok's node Leases alone until they expire, 10 minutes later, and with them every pod).
            stopped = cli("sim", "down", "--name", name, "--keep")
            assert stopped.returncode == 0, stopped.stderr
            restarted = cli("sim", "up", "--name", name, "--nodes", "2x8:A100")
            assert restarted.returncode == 0, restarted.stderr
            assert_pods_are_played(cluster, spec)
        status = cli("sim", "status", "--name", name, "-o", "json")
        assert status.returncode == 0, status.stderr
        assert '"gpus": 16' in status.stdout
        assert '"kueue": "ready"' in status.stdout
        ports, pids = cluster_ports(cluster), cluster_pids(cluster)
        # etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, kueue, the GPU agent
        assert len(pids) == 7
        assert sorted(pids) == sorted(processes_of(cluster))
        assert all(listening(p) for p in ports)

        down = cli("sim", "down", "--name", name)
        assert down.returncode == 0, down.stderr
        # Checked the moment `down` returns: nothing it started may still be alive, even exiting.
        assert not [pid for pid in pids if alive(pid)]
        assert not processes_of(cluster)
        # (So its ports are free; not asked of the ports themselves, which another cluster on this machine may
        # take the moment they are.)
        assert not cluster.root.exists()


def test_a_watch_the_server_ended_closes_quietly(sim: Sim) -> None:
    """A watch's iteration releases its connection when it ends; closing it after that (as a `finally` does, also
    while a signal's SystemExit goes through it) raises nothing, so that exception is the one that stays: the GPU
    agent and the health controller stop on SIGTERM instead of watching on."""
    listed = sim.kube.request("GET", "/api/v1/namespaces")
    stream = sim.kube.watch("v1", "Namespace", listed["metadata"]["resourceVersion"], timeout_seconds=1)
    events = list(stream)  # the server ends the watch after a second
    assert all(e["type"] in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK") for e in events)
    stream.close()
    stream.close()


def test_a_watch_closed_between_two_events_ends_quietly(sim: Sim) -> None:
    """The what-if replay and the controllers stop a watch by closing it from another thread, which may fall while the
    reader handles an event. The reader's next step then ends the iteration without an exception."""
    listed = sim.kube.request("GET", "/api/v1/namespaces")
    stream = sim.kube.watch("v1", "Namespace", None, timeout_seconds=60)  # no version: every namespace, then waits
    events = iter(stream)
    assert next(events)["type"] == "ADDED"
    stream.close()
    rest = list(events)  # those it had already read, then the end
    assert len(rest) < len(listed["items"]) and all(event["type"] == "ADDED" for event in rest)


L40S = "konduktor.ai/gpu-type=l40s"


def test_new_nodes_get_the_capacity_and_labels_they_are_created_with(sim: Sim) -> None:
    """kwok initializes a node the moment it sees it, filling in capacity it does not find. Each node is a separate
    chance for that to overtake the node's status, so 40 nodes created through the sim's own path, at once, prove
    it as well as 40 fresh clusters would, in seconds."""
    kube = sim.kube
    spec = SimSpec(pools=parse_nodes_spec("40x8:L40S"))
    names = [n["metadata"]["name"] for n in node_manifests(spec.pools)]
    try:
        sim.cluster.apply_nodes(kube, spec)
        sim.cluster.wait_nodes_ready(kube, names)
        wanted = {n["metadata"]["name"]: n for n in node_manifests(spec.pools)}
        for node in kube.list("v1", "Node", label_selector=L40S):
            expected = wanted[node["metadata"]["name"]]
            name = node["metadata"]["name"]
            assert amounts(node["status"]["capacity"]) == amounts(expected["status"]["capacity"]), name
            assert amounts(node["status"]["allocatable"]) == amounts(expected["status"]["allocatable"]), name
            assert expected["metadata"]["labels"].items() <= node["metadata"]["labels"].items()
    finally:
        for name in names:
            kube.delete("v1", "Node", name)
        session = sim.cluster.spec()
        assert session is not None
        # The session's own nodes, which the call above re-applied, are as they were.
        sim.cluster.apply_nodes(kube, session)
        wait_until(
            "the extra nodes to go", lambda: not kube.list("v1", "Node", label_selector="konduktor.ai/gpu-type=l40s")
        )


def assert_pods_are_played(cluster: SimCluster, spec: SimSpec) -> None:
    """A pod bound to a GPU node runs, and once deleted is gone: kwok plays that node."""
    node = node_manifests(spec.pools, spec.levels)[0]["metadata"]["name"]
    containers = [{"name": "main", "image": "busybox"}]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "played", "namespace": "default"},
        "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}], "containers": containers},
    }
    with Kube(cluster.kubeconfig) as kube:
        kube.create(pod)

        def phase() -> str | None:
            return (kube.get("v1", "Pod", "played", "default") or {}).get("status", {}).get("phase")

        wait_until(f"the pod to run on {node}", lambda: phase() == "Running", timeout=120)
        kube.delete("v1", "Pod", "played", "default")
        wait_until("the deleted pod to be gone", lambda: kube.get("v1", "Pod", "played", "default") is None, 120)


def test_kwok_holds_each_nodes_lease_for_the_sims_duration_and_keeps_it_renewed(sim: Sim) -> None:
    """kwok renews a Lease per node for NODE_LEASE_SECONDS (a quarter of it between renewals), and the node lifecycle
    controller waits NODE_MONITOR_GRACE_MS for one, and as long for kwok's first status of a new node: what keeps
    thousands of fake nodes from being marked Unknown on a busy machine."""
    names = [n["metadata"]["name"] for n in sim.kube.list("v1", "Node", label_selector="type=kwok")]
    assert names
    for name in names:
        lease = sim.kube.get("coordination.k8s.io/v1", "Lease", name, "kube-node-lease")
        assert lease is not None, name
        assert lease["spec"]["leaseDurationSeconds"] == NODE_LEASE_SECONDS, name
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0") for pid in cluster_pids(sim.cluster)]
    manager = next(c for c in commands if Path(c[0]).name == "kube-controller-manager")
    hours, minutes = divmod(NODE_MONITOR_GRACE_MS // 60_000, 60)  # as Go prints a duration
    assert f"--node-monitor-grace-period={f'{hours}h' if hours else ''}{minutes}m0s" in manager
    assert f"--node-startup-grace-period={NODE_MONITOR_GRACE_MS // 1000}s" in manager


def test_a_new_node_is_not_tainted_not_ready_at_its_creation(sim: Sim) -> None:
    """The API server does not taint a new Node not-ready (its TaintNodesByCondition admission is off), so no node
    of a large start waits for the node lifecycle controller to lift that taint."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fresh-node", "labels": {"type": "kwok"}}}
    created = sim.kube.create(node)
    try:
        assert not [t for t in created.get("spec", {}).get("taints") or [] if t["key"] in LIFECYCLE_TAINTS]
    finally:
        sim.kube.delete("v1", "Node", "fresh-node")


def test_a_host_network_pod_becomes_ready_on_a_gpu_node(sim: Sim) -> None:
    """As on a real node, a hostNetwork pod (node exporter, log collector) runs with its node's InternalIP."""
    kube = sim.kube
    node_name = "gpu-h100-0002"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "host-network"}})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "node-exporter", "namespace": "host-network"},
        "spec": {
            "hostNetwork": True,
            "hostPID": True,
            "nodeSelector": {"kubernetes.io/hostname": node_name},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "node-exporter", "image": "quay.io/prometheus/node-exporter:v1.10.2"}],
        },
    }
    kube.apply(pod)
    try:

        def ready() -> bool:
            current = kube.get("v1", "Pod", "node-exporter", "host-network") or {}
            conditions = current.get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        wait_until("the hostNetwork pod to be Ready", ready, timeout=60)
        running = kube.get("v1", "Pod", "node-exporter", "host-network")
        node = kube.get("v1", "Node", node_name)
        assert running is not None and node is not None
        [internal_ip] = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
        assert running["status"]["phase"] == "Running"
        assert running["status"]["podIP"] == running["status"]["hostIP"] == internal_ip
        assert ipaddress.IPv4Address(internal_ip).is_loopback
    finally:
        kube.delete("v1", "Pod", "node-exporter", "host-network")


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


def test_sim_up_takes_a_config_or_nodes_not_both(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "up", "--config", "examples/config.yaml", "--nodes", "2x8:A100"])
    assert code == 2
    assert "give --config or --nodes, not both" in capsys.readouterr().err

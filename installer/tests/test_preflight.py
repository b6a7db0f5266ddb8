"""Preflight: the cluster judges on plain data, the node checks on recorded and on this machine's real output
(testinfra's local backend; no GPU here), and `konduktor-install preflight` against the simulated cluster."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import testinfra
from conftest import EXAMPLE, Sim
from ruamel.yaml import YAML

from konduktor.cli.main import main
from konduktor.config.findings import ConfigError
from konduktor.config.load import LoadedConfig, load_config, parse_config
from konduktor.config.model import NodeCheckPods, ssh_host_problem
from konduktor.errors import UsageError
from konduktor.kube.access import Permission
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.job_state import JobPhase, JobState
from konduktor.ops.preflight import expectations_for, host_checks, pinned_versions, ssh_inventory
from konduktor.ops.preflight_pods import node_result, pod_checks
from konduktor.preflight.cluster import (
    MIN_KUBERNETES,
    ClusterFacts,
    CrdFacts,
    NodeFacts,
    judge_capacity,
    judge_cluster,
    judge_component_crds,
    judge_gpu_nodes,
    judge_kueue_crds,
    judge_rdma,
    judge_server_version,
    judge_taints,
    node_facts,
)
from konduktor.preflight.host_namespaces import UNREACHABLE_HINT, HostNamespaces
from konduktor.preflight.hosts import open_host
from konduktor.preflight.inventory import HostTarget, SshHosts, config_inventory
from konduktor.preflight.node import NodeExpectations, Ran, run_node_checks
from konduktor.preflight.pods import (
    PodTarget,
    UnreadableReport,
    no_result,
    node_check_command,
    node_check_job,
    read_node_report,
)
from konduktor.preflight.results import Check, PreflightReport, Status, render_json, render_table
from konduktor.preflight.ssh import ssh_host
from konduktor.sim.agent import cri_log, logs_object
from konduktor.vocabulary import HEALTH_TAINT_KEY, QUARANTINED_AT

RELEASE = ("konduktor-system", "konduktor")
PINNED = {"kueue": "0.19.2", "gpu-operator": "v26.7.0", "kube-prometheus-stack": "88.5.3"}
H100 = "NVIDIA-H100-80GB-HBM3"
CLOSED_PORT = 1  # tcpmux: nothing listens there, so ssh is refused at once


def example() -> LoadedConfig:
    return load_config(EXAMPLE)


def with_a100(quota: int = 8) -> str:
    """The example plus a GPU type the simulated cluster does not have, with a team quota on it."""
    data = YAML(typ="safe").load(EXAMPLE.read_text())
    data["gpuTypes"]["a100"] = {
        "product": "NVIDIA-A100-SXM4-80GB",
        "nodes": 2,
        "gpusPerNode": 8,
        "nodeAllocatable": {"cpu": "96", "memory": "900Gi"},
    }
    data["teams"]["team-a"]["gpus"]["a100"] = {"quota": quota}
    stream = io.StringIO()
    YAML().dump(data, stream)
    return stream.getvalue()


def gpu_node(
    name: str,
    gpus: int = 10,
    taints: tuple[dict[str, str], ...] = ({"key": "nvidia.com/gpu", "effect": "NoSchedule"},),
    **extra: Any,
) -> NodeFacts:
    """A node as the example config's H100 type selects it (what the simulated cluster creates)."""
    labels = {
        "nvidia.com/gpu.product": H100,
        "kubernetes.io/hostname": name,
        "konduktor.ai/topology-rack": "rack-0",
        **extra.pop("labels", {}),
    }
    allocatable = {"cpu": "192", "memory": "1900Gi", "nvidia.com/gpu": str(gpus), **extra.pop("allocatable", {})}
    return NodeFacts(
        name=name,
        labels=labels,
        annotations=extra.pop("annotations", {}),
        allocatable=allocatable,
        taints=taints,
        unschedulable=extra.pop("unschedulable", False),
    )


FLEET = tuple(gpu_node(f"gpu-h100-{i:04d}") for i in range(4))


def by_name(checks: list[Check], name: str, subject: str | None = None) -> Check:
    found = [c for c in checks if c.name == name and (subject is None or c.subject == subject)]
    assert len(found) == 1, [(c.name, c.subject) for c in checks]
    return found[0]


# --- cluster judges ---------------------------------------------------------------------------------------------


def test_unreachable_api_fails_and_skips_what_depends_on_it() -> None:
    checks = judge_cluster(
        example().config,
        ClusterFacts("https://10.0.0.1:6443", unreachable="cannot reach the API server: ConnectTimeoutError"),
        pinned=PINNED,
        release=RELEASE,
    )
    assert checks[0].name == "api-reachable" and checks[0].status is Status.FAIL
    assert "ConnectTimeoutError" in checks[0].evidence[0] and checks[0].hint
    assert {c.status for c in checks[1:]} == {Status.SKIPPED}
    assert all(c.summary for c in checks[1:])


@pytest.mark.parametrize(
    ("version", "status"),
    [
        ({"gitVersion": "v1.36.3", "major": "1", "minor": "36"}, Status.PASS),
        ({"gitVersion": "v1.30.0-eks-abc", "major": "1", "minor": "30+"}, Status.PASS),
        ({"major": "1", "minor": "31+"}, Status.PASS),  # no gitVersion: the minor with its managed-cluster suffix
        ({"gitVersion": "v1.29.9", "major": "1", "minor": "29"}, Status.FAIL),  # the policies need 1.30
        ({"gitVersion": "v1.37.0", "major": "1", "minor": "37"}, Status.WARN),  # newer than tested
        ({"gitVersion": "weird"}, Status.WARN),
    ],
)
def test_server_version_range(version: dict[str, str], status: Status) -> None:
    result = judge_server_version(version)
    assert result.status is status, result
    if status is not Status.PASS:
        assert result.hint and "1.30-1.36" in result.hint


@pytest.mark.parametrize("chart", ["konduktor", "konduktor-core"])
def test_the_charts_accept_the_kubernetes_releases_preflight_accepts(chart: str) -> None:
    """One supported range: helm refuses what preflight refuses, and installs what preflight passes."""
    metadata = YAML(typ="safe").load((Path(__file__).parents[2] / "charts" / chart / "Chart.yaml").read_text())
    assert metadata["kubeVersion"] == f">={MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]}.0-0"


def test_gpu_nodes_found_with_their_labels_and_gpus() -> None:
    loaded = example()
    checks = judge_gpu_nodes(loaded.config, FLEET, loaded.lines, "config.yaml")
    h100 = by_name(checks, "gpu-nodes", "h100")
    assert h100.status is Status.PASS
    assert h100.summary == f"4 nodes with 10 nvidia.com/gpu each (nvidia.com/gpu.product={H100})"
    assert by_name(checks, "topology-labels").status is Status.PASS


def test_missing_nodes_fewer_gpus_and_missing_labels_fail_with_the_config_line() -> None:
    loaded = example()
    unracked = gpu_node("gpu-h100-0002")
    fleet = (
        gpu_node("gpu-h100-0000"),
        gpu_node("gpu-h100-0001", gpus=8),  # two GPUs fell off the bus
        replace(unracked, labels={k: v for k, v in unracked.labels.items() if k != "konduktor.ai/topology-rack"}),
    )
    checks = judge_gpu_nodes(loaded.config, fleet, loaded.lines, "config.yaml")
    h100 = by_name(checks, "gpu-nodes", "h100")
    assert h100.status is Status.FAIL
    assert h100.summary.startswith(f"3 nodes match nvidia.com/gpu.product={H100}, the config says 4")
    nodes_line = loaded.lines[("gpuTypes", "h100", "nodes")]
    assert f"config.yaml:{nodes_line}: gpuTypes.h100.nodes: 3 nodes match" in h100.evidence[0]
    assert any("gpu-h100-0001 has 8 allocatable nvidia.com/gpu, the config says 10" in e for e in h100.evidence)
    topology = by_name(checks, "topology-labels")
    assert topology.status is Status.FAIL and "gpu-h100-0002 lacks topology label" in topology.summary


def test_a_gpu_type_without_nodes_fails() -> None:
    loaded = parse_config(with_a100())
    checks = judge_gpu_nodes(loaded.config, FLEET, loaded.lines, "config.yaml")
    assert by_name(checks, "gpu-nodes", "h100").status is Status.PASS
    a100 = by_name(checks, "gpu-nodes", "a100")
    assert a100.status is Status.FAIL and a100.summary.startswith("0 nodes match")
    assert a100.hint == "label the missing nodes, or lower `nodes` (and the quotas)"


def test_taints_on_gpu_nodes_are_named_and_warn() -> None:
    config = example().config
    assert judge_taints(config, [gpu_node("a", taints=())]).status is Status.PASS
    tolerated = judge_taints(config, FLEET)
    assert tolerated.status is Status.WARN
    assert tolerated.summary == "4 GPU node(s) carry taints: nvidia.com/gpu:NoSchedule"
    assert "(tolerated by the GPU type)" in tolerated.evidence[0]
    assert tolerated.hint and "cover them" in tolerated.hint

    ours = gpu_node(
        "b",
        taints=({"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"},),
        annotations={QUARANTINED_AT: "2026-01-01T00:00:00Z"},
    )
    foreign = gpu_node("c", taints=({"key": "ops.example.com/maintenance", "effect": "NoExecute"},))
    mixed = judge_taints(config, [ours, foreign])
    assert mixed.status is Status.WARN
    assert any(f"{HEALTH_TAINT_KEY}=unhealthy:NoSchedule on 1 node(s) (not tolerated" in e for e in mixed.evidence)
    assert f"b: {HEALTH_TAINT_KEY} quarantined by the health controller at 2026-01-01T00:00:00Z" in mixed.evidence
    assert mixed.hint and "gpuTypes.<type>.tolerations" in mixed.hint


def test_rdma_is_skipped_with_a_reason_until_some_node_advertises_it() -> None:
    config = example().config
    skipped = judge_rdma(config, FLEET)
    assert skipped.status is Status.SKIPPED and "network-operator" in skipped.summary
    rdma = {"rdma/rdma_shared_device_a": "63"}
    everywhere = [gpu_node(f"n{i}", allocatable=rdma) for i in range(2)]
    assert judge_rdma(config, everywhere).status is Status.PASS
    partial = judge_rdma(config, [everywhere[0], gpu_node("n9")])
    assert partial.status is Status.WARN and partial.summary == "1 of 2 GPU nodes advertise no rdma/ resources"
    assert "n9: no rdma/ resources" in partial.evidence


def test_quotas_against_the_usable_gpus() -> None:
    config = example().config  # two teams x 20 H100 = 40, the config counts 4 x 10
    assert judge_capacity(config, FLEET)[0].status is Status.PASS
    cordoned = (*FLEET[:3], gpu_node("gpu-h100-0003", unschedulable=True))
    short = judge_capacity(config, cordoned)[0]
    assert short.status is Status.FAIL
    assert short.summary.startswith("quotas 40 of 30 usable nvidia.com/gpu: the teams are promised 10 GPUs")
    assert short.evidence == ("gpu-h100-0003: 10 GPUs not usable (cordoned)",)

    smaller = parse_config(EXAMPLE.read_text().replace("quota: 20, borrowLimit: 10, lendLimit: 16", "quota: 10")).config
    quarantined = (
        *FLEET[:3],
        gpu_node("gpu-h100-0003", taints=({"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"},)),
    )
    warned = judge_capacity(smaller, quarantined)[0]
    assert (
        warned.status is Status.WARN and warned.summary == "quotas 20 of 30 usable nvidia.com/gpu; the config counts 40"
    )
    assert f"{HEALTH_TAINT_KEY}=unhealthy:NoSchedule" in warned.evidence[0]


def crd(
    name: str,
    served: tuple[str, ...] = ("v1beta1", "v1beta2"),
    chart: str | None = None,
    release: tuple[str, str] | None = None,
) -> CrdFacts:
    group = name.split(".", 1)[1]
    labels = {"helm.sh/chart": chart} if chart else {}
    annotations = {"controller-gen.kubebuilder.io/version": "v0.20.1"}
    if release:
        annotations |= {"meta.helm.sh/release-namespace": release[0], "meta.helm.sh/release-name": release[1]}
    return CrdFacts(name, group, labels, annotations, served, served[-1], (served[-1],))


def test_kueue_crds_at_another_version() -> None:
    assert judge_kueue_crds([], "0.19.2", RELEASE).status is Status.PASS
    ours = [crd(f"{k}.kueue.x-k8s.io", chart="kueue-0.19.2", release=RELEASE) for k in ("clusterqueues", "cohorts")]
    mine = judge_kueue_crds(ours, "0.19.2", RELEASE)
    assert mine.status is Status.PASS and mine.summary == "Kueue 0.19.2 is installed"
    assert mine.evidence == (
        "clusterqueues, cohorts: served v1beta1,v1beta2, stored v1beta2, controller-gen v0.20.1, kueue 0.19.2, "
        "Helm release konduktor-system/konduktor",
    )
    older = judge_kueue_crds([crd("clusterqueues.kueue.x-k8s.io", chart="kueue-0.17.1")], "0.19.2", RELEASE)
    assert older.status is Status.WARN and older.summary.startswith("Kueue 0.17.1 already installed")
    foreign = [crd("clusterqueues.kueue.x-k8s.io", chart="kueue-0.19.2", release=("kueue-system", "kueue"))]
    other_release = judge_kueue_crds(foreign, "0.19.2", RELEASE)
    assert other_release.status is Status.WARN and "owned by Helm release kueue-system/kueue" in other_release.summary
    unlabelled = judge_kueue_crds([crd("workloads.kueue.x-k8s.io")], "0.19.2", RELEASE)
    assert unlabelled.status is Status.WARN and "unknown version" in unlabelled.summary
    ancient = judge_kueue_crds([crd("clusterqueues.kueue.x-k8s.io", served=("v1beta1",))], "0.19.2", RELEASE)
    assert ancient.status is Status.FAIL
    assert (
        ancient.summary
        == "1 Kueue CRD(s) do not serve kueue.x-k8s.io/v1beta2: an older Kueue (before 0.15) is installed"
    )


def test_component_crds_of_another_version_or_release_warn() -> None:
    assert judge_component_crds([crd("jobsets.jobset.x-k8s.io")], PINNED, RELEASE).status is Status.PASS
    same = [crd("clusterpolicies.nvidia.com", served=("v1",), chart="gpu-operator-v26.7.0", release=RELEASE)]
    assert judge_component_crds(same, PINNED, RELEASE).status is Status.PASS
    older = [crd("clusterpolicies.nvidia.com", served=("v1",), chart="gpu-operator-v25.3.0", release=("gpu", "op"))]
    result = judge_component_crds(older, PINNED, RELEASE)
    assert result.status is Status.WARN
    assert result.summary == (
        "already installed: gpu-operator 25.3.0 (Konduktor pins 26.7.0); gpu-operator owned by Helm release gpu/op"
    )
    assert result.hint and "gpu-operator" not in result.hint and "<name>.enabled=false" in result.hint


def test_pinned_versions_come_from_the_umbrella_chart() -> None:
    pinned = pinned_versions()
    assert pinned["kueue"] == "0.19.2" and "gpu-operator" in pinned


def test_report_renders_table_and_json() -> None:
    report = PreflightReport(
        (
            Check("api-reachable", Status.PASS, "https://x answered"),
            Check("gpu-nodes", Status.FAIL, "0 nodes match", "a100", ("config.yaml:40: ...",), "label them"),
        )
    )
    table = render_table(report)
    assert table.splitlines()[0].split() == ["STATUS", "CHECK", "SUBJECT", "SUMMARY"]
    assert "FAIL gpu-nodes (a100):\n  config.yaml:40: ...\n  hint: label them" in table
    data = json.loads(render_json(report))
    assert data["status"] == "FAIL" and data["counts"] == {"PASS": 1, "WARN": 0, "FAIL": 1, "SKIPPED": 0}
    assert data["checks"][1] == {
        "name": "gpu-nodes",
        "subject": "a100",
        "status": "FAIL",
        "summary": "0 nodes match",
        "evidence": ["config.yaml:40: ..."],
        "hint": "label them",
    }


# --- node checks --------------------------------------------------------------------------------------------------

GPU_CSV = (
    "index, pci.bus_id, name, driver_version, persistence_mode, ecc.mode.current, "
    "ecc.errors.uncorrected.volatile.total, retired_pages.pending\n"
    + "".join(
        f"{i}, 00000000:{0x18 + i:02X}:00.0, NVIDIA H100 80GB HBM3, 550.54.15, Enabled, Enabled, 0, [N/A]\n"
        for i in range(8)
    )
)
REMAP_CSV = "gpu_bus_id, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, " + (
    "remapped_rows.failure\n" + "".join(f"00000000:{0x18 + i:02X}:00.0, 0, 0, No, No\n" for i in range(8))
)
IB_PORTS = "".join(
    f"/sys/class/infiniband/mlx5_{i}/ports/1|4: ACTIVE|5: LinkUp|400 Gb/sec (4X NDR)|InfiniBand\n" for i in range(8)
)
HEALTHY = {
    "true": (0, ""),
    "uname -r": (0, "6.8.0-57-generic\n"),
    "cat /proc/modules": (0, "nvidia_peermem 16384 0 - Live\nnvidia_uvm 1 0\nnvidia 2 0\nmlx5_ib 3 0\n"),
    "cat /proc/driver/nvidia/version": (
        0,
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16)\n",
    ),
    "timedatectl show": (0, "yes\n"),
    "sh -c 'for d in": (
        0,
        "Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/nvme0n1p1 1000000000 100 900000000 1% /\n",
    ),
    "nvidia-smi --query-gpu": (0, GPU_CSV),
    "nvidia-smi --query-remapped-rows": (0, REMAP_CSV),
    "sh -c 'for p in /sys/class/infiniband": (0, IB_PORTS),
}


@dataclass
class RecordedHost:
    """Answers each command with recorded output, by the command's start; unknown commands are not found."""

    outputs: Mapping[str, tuple[int, str]]

    def run(self, command: str) -> Ran:
        for start, (rc, stdout) in self.outputs.items():
            if command.startswith(start):
                return Ran(rc, stdout if rc == 0 else "", "" if rc == 0 else stdout)
        return Ran(127, "", f"/bin/sh: 1: {command.split(maxsplit=1)[0]}: not found")


def test_a_healthy_gpu_host_passes_every_check() -> None:
    checks = run_node_checks(RecordedHost(HEALTHY), "gpu-1", NodeExpectations(gpus=8, rdma=True))
    assert {c.name: c.status for c in checks} == {
        "host-reachable": Status.PASS,
        "kernel": Status.PASS,
        "nvidia-modules": Status.PASS,
        "nvidia-driver": Status.PASS,
        "time-sync": Status.PASS,
        "image-disk": Status.PASS,
        "nvidia-smi": Status.PASS,
        "gpu-count": Status.PASS,
        "ecc": Status.PASS,
        "row-remap": Status.PASS,
        "retired-pages": Status.SKIPPED,  # Hopper remaps rows instead
        "persistence-mode": Status.PASS,
        "infiniband": Status.PASS,
    }
    assert by_name(checks, "nvidia-driver").summary == "550.54.15 (open kernel module)"
    assert by_name(checks, "nvidia-smi").summary == "8 x NVIDIA H100 80GB HBM3, driver 550.54.15"
    assert by_name(checks, "infiniband").summary == "8 ports up (400 Gb/sec (4X NDR))"


def test_a_faulty_gpu_host_fails_with_the_evidence() -> None:
    faulty = dict(HEALTHY)
    rows = GPU_CSV.splitlines()
    rows[4] = rows[4].replace("Enabled, Enabled, 0", "Disabled, Disabled, 0")  # GPU 3: persistence and ECC off
    faulty["nvidia-smi --query-gpu"] = (0, "\n".join(rows[:-1]) + "\n")  # and GPU 7 is gone
    faulty["nvidia-smi --query-remapped-rows"] = (0, REMAP_CSV.replace("0, 0, No, No", "0, 2, Yes, No", 1))
    faulty["sh -c 'for p in /sys/class/infiniband"] = (
        0,
        IB_PORTS.replace("4: ACTIVE|5: LinkUp", "1: DOWN|3: Disabled", 1),
    )
    faulty["timedatectl show"] = (0, "no\n")
    faulty["cat /proc/modules"] = (0, "nvidia_uvm 1 0\nnvidia 2 0\n")
    checks = run_node_checks(RecordedHost(faulty), "gpu-2", NodeExpectations(gpus=8, rdma=True))
    status = {c.name: c.status for c in checks}
    assert status["gpu-count"] is Status.FAIL and by_name(checks, "gpu-count").summary == "7 of 8 GPUs present"
    ecc = by_name(checks, "ecc")
    assert ecc.status is Status.FAIL and "GPU3: ECC is disabled" in ecc.evidence
    remap = by_name(checks, "row-remap")
    assert remap.status is Status.FAIL and "00000000:18:00.0: row remap pending" in remap.evidence
    assert status["persistence-mode"] is Status.WARN and by_name(checks, "persistence-mode").summary == "off on GPU 3"
    ib = by_name(checks, "infiniband")
    assert ib.status is Status.FAIL and ib.summary == "1 of 8 ports not ACTIVE/LinkUp: mlx5_0/1"
    assert status["time-sync"] is Status.FAIL
    assert status["nvidia-modules"] is Status.WARN  # RDMA expected, nvidia_peermem missing


def test_an_unreachable_host_fails_once_and_skips_the_rest() -> None:
    host = RecordedHost({"true": (255, "ssh: connect to host gpu-9 port 22: Connection refused")})
    checks = run_node_checks(host, "gpu-9", NodeExpectations(gpus=8))
    assert checks[0].status is Status.FAIL and checks[0].evidence == (
        "ssh: connect to host gpu-9 port 22: Connection refused",
    )
    assert {c.status for c in checks[1:]} == {Status.SKIPPED}
    assert len(checks) == len(run_node_checks(RecordedHost(HEALTHY), "x", NodeExpectations(gpus=8)))


GPU_CHECKS = (
    *("nvidia-modules", "nvidia-driver", "nvidia-smi", "gpu-count", "ecc", "row-remap", "retired-pages"),
    *("persistence-mode", "infiniband"),
)


@pytest.mark.parametrize("rdma", [False, True])
def test_node_checks_on_this_machine_without_a_gpu_fail_or_skip_with_a_reason(rdma: bool) -> None:
    host = testinfra.get_host("local://")
    checks = run_node_checks(host, "local", NodeExpectations(gpus=8, rdma=rdma))
    names = [c.name for c in checks]
    assert set(GPU_CHECKS) <= set(names) and len(names) == len(set(names))
    for item in checks:
        assert item.summary, item
        if item.name in GPU_CHECKS:
            assert item.status in (Status.FAIL, Status.SKIPPED), item
    assert by_name(checks, "nvidia-smi").status is Status.FAIL
    assert by_name(checks, "infiniband").status is (Status.FAIL if rdma else Status.SKIPPED)
    # The host checks judge what this machine really has; the report renders whatever they found.
    assert render_table(PreflightReport(tuple(checks)))


def test_a_host_that_cannot_be_resolved_is_reported_not_raised() -> None:
    checks = run_node_checks(open_host("ssh://konduktor-preflight.invalid", None), "nowhere", NodeExpectations())
    assert checks[0].name == "host-reachable" and checks[0].status is Status.FAIL
    assert checks[0].evidence and checks[0].evidence[0]


# --- which hosts: the config's SSH inventory -------------------------------------------------------------------


def with_inventory(directory: Path, ssh: str) -> Path:
    """The example with `preflight.nodes.ssh: <ssh>` (flow style), written as config.yaml in `directory`."""
    path = directory / "config.yaml"
    path.write_text(EXAMPLE.read_text() + f"preflight:\n  nodes:\n    ssh: {ssh}\n")
    return path


SSH_LINE = len(EXAMPLE.read_text().splitlines()) + 3


def test_hosts_listed_in_the_config_are_checked_as_listed(tmp_path: Path) -> None:
    loaded = load_config(
        with_inventory(tmp_path, "{user: ubuntu, port: 2222, hosts: [gpu-h100-0001, 10.0.0.7, fd00::7]}")
    )
    inventory = config_inventory(loaded)
    assert inventory == SshHosts(("gpu-h100-0001", "10.0.0.7", "fd00::7"), "ubuntu", None, 2222)
    assert inventory.targets(loaded.config, FLEET) == [
        HostTarget("gpu-h100-0001", "ssh://ubuntu@gpu-h100-0001:2222"),
        HostTarget("10.0.0.7", "ssh://ubuntu@10.0.0.7:2222"),
        HostTarget("fd00::7", "ssh://ubuntu@[fd00::7]:2222"),
    ]
    assert config_inventory(example()) is None


def test_without_hosts_every_node_of_the_gpu_types_is_checked_at_its_internal_ip() -> None:
    loaded = example()
    cpu = NodeFacts("system-0000", {"kubernetes.io/hostname": "system-0000"}, {}, {"cpu": "16"}, (), False, "10.0.0.2")
    nodes = (
        cpu,
        replace(FLEET[1], internal_ip="fd00::11"),
        replace(FLEET[0], internal_ip="10.0.0.10"),
        FLEET[2],  # no InternalIP: its name
    )
    assert SshHosts(user="ops").targets(loaded.config, nodes) == [
        HostTarget("gpu-h100-0000", "ssh://ops@10.0.0.10"),
        HostTarget("gpu-h100-0001", "ssh://ops@[fd00::11]"),
        HostTarget("gpu-h100-0002", "ssh://ops@gpu-h100-0002"),
    ]
    listed = {"metadata": {"name": "n"}, "status": {"addresses": [{"type": "Hostname", "address": "n"}]}}
    assert node_facts(listed).internal_ip is None
    listed["status"]["addresses"].append({"type": "InternalIP", "address": "10.0.0.10"})
    assert node_facts(listed).internal_ip == "10.0.0.10"
    facts = ClusterFacts("https://x", nodes=nodes)
    # Held to the node's GPU type whether named as the node or by its address.
    assert expectations_for("gpu-h100-0000", loaded, facts).gpus == 10
    assert expectations_for("10.0.0.10", loaded, facts).gpus == 10
    assert expectations_for("10.0.0.99", loaded, facts).gpus is None


def test_ssh_user_key_and_port_become_testinfra_options(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    backend = open_host("ssh://ubuntu@10.0.0.7:2222", key).backend
    assert (backend.host.name, backend.host.user, backend.host.port) == ("10.0.0.7", "ubuntu", "2222")
    assert backend.ssh_identity_file == str(key)
    assert "-o BatchMode=yes" in backend.ssh_extra_args and "-o ConnectTimeout=10" in backend.ssh_extra_args
    ipv6 = open_host("ssh://[fd00::7]:22", None).backend
    assert (ipv6.host.name, ipv6.host.user, ipv6.host.port, ipv6.ssh_identity_file) == ("fd00::7", None, "22", None)


@pytest.mark.parametrize(
    "host",
    ["-oProxyCommand=touch /tmp/owned", "-p2222", "gpu node", "gpu%2d0", "user@gpu-0", "fe80::1%-oX", "a..b", ""],
)
def test_an_ssh_host_that_is_not_an_address_or_hostname_is_refused(tmp_path: Path, host: str) -> None:
    assert ssh_host_problem(host)
    with pytest.raises(UsageError) as raised:
        SshHosts((host,)).targets(example().config, FLEET)
    assert raised.value.exit_code == 2 and repr(host) in raised.value.message
    # From the config: exit 2 naming the file, line and field, before anything connects.
    path = with_inventory(tmp_path, json.dumps({"hosts": [host]}))
    with pytest.raises(ConfigError) as config_error:
        load_config(path)
    assert config_error.value.exit_code == 2
    assert f"{path}:{SSH_LINE}: preflight.nodes.ssh.hosts[0]:" in str(config_error.value.message)


def test_a_node_address_that_looks_like_an_ssh_option_is_refused() -> None:
    node = replace(FLEET[0], internal_ip="-oProxyCommand=touch /tmp/owned")
    with pytest.raises(UsageError, match=f"node {FLEET[0].name}'s address '-oProxyCommand"):
        SshHosts().targets(example().config, (node,))
    for fine in ("10.0.0.7", "fd00::7", "gpu-h100-0001", "gpu-1.cluster.local"):
        assert ssh_host_problem(fine) is None


def test_ssh_reads_the_host_after_the_end_of_its_options(tmp_path: Path) -> None:
    """Even a host that bypassed validation is never an option: ssh gets `--` before it."""
    marker = tmp_path / "proxy-command-ran"
    host = ssh_host(f"ssh://-oProxyCommand=touch {marker}", None, "-o BatchMode=yes -o ConnectTimeout=2")
    with pytest.raises(RuntimeError):  # ssh's exit 255: no such host
        host.run("true")
    assert not marker.exists()
    argv, values = host.backend._build_ssh_command("true")
    assert argv[-2:] == ["--", "%s %s"] and values[-2:] == [f"-oProxyCommand=touch {marker}", "true"]


def test_the_key_is_found_from_the_config_file_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id_ed25519").write_text("not checked here\n")
    relative = config_inventory(load_config(with_inventory(tmp_path, "{key: keys/id_ed25519}")))
    assert relative is not None and relative.key == tmp_path / "keys" / "id_ed25519"
    assert relative.hosts is None
    monkeypatch.setenv("HOME", str(tmp_path))
    home = config_inventory(load_config(with_inventory(tmp_path, "{key: ~/keys/id_ed25519}")))
    assert home is not None and home.key == tmp_path / "keys" / "id_ed25519"

    path = with_inventory(tmp_path, "{key: keys/id_rsa}")
    with pytest.raises(ConfigError) as raised:
        config_inventory(load_config(path))
    assert raised.value.exit_code == 2
    assert raised.value.message == (
        f"{path}:{SSH_LINE}: preflight.nodes.ssh.key: no such file: {tmp_path / 'keys' / 'id_rsa'}"
    )
    assert raised.value.hint and "config file's directory" in raised.value.hint


def test_the_ssh_example_checks_every_gpu_node_with_its_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path))
    inventory = config_inventory(load_config(EXAMPLE.with_name("ssh-preflight.yaml")))
    assert inventory == SshHosts(None, "ubuntu", tmp_path / ".ssh" / "id_ed25519", 22)


def test_the_command_line_goes_over_the_config_inventory(tmp_path: Path) -> None:
    (tmp_path / "id_ed25519").write_text("")
    loaded = load_config(with_inventory(tmp_path, "{user: ubuntu, key: id_ed25519, port: 2222}"))
    assert ssh_inventory(loaded, [], None, None) == config_inventory(loaded)
    other_key = tmp_path / "ops_key"
    assert ssh_inventory(loaded, ["gpu-9"], "ops", other_key) == SshHosts(("gpu-9",), "ops", other_key, 2222)
    assert ssh_inventory(example(), ["gpu-9"], None, None) == SshHosts(("gpu-9",))
    assert ssh_inventory(example(), [], None, None) is None
    with pytest.raises(UsageError, match="--ssh-user and --ssh-key need --ssh HOST"):
        ssh_inventory(example(), [], "ops", None)


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        (ClusterFacts("https://x", nodes=()), "the cluster has no node of the config's GPU types"),
        (ClusterFacts("https://x", problems={"nodes": "403 forbidden"}), "cannot list nodes: 403 forbidden"),
        (ClusterFacts("https://x", unreachable="timed out"), "the API server did not answer"),
    ],
)
def test_no_host_to_derive_is_skipped_with_the_reason(facts: ClusterFacts, why: str) -> None:
    [skipped] = host_checks(example(), facts, SshHosts(), False, lambda _message: None)
    assert (skipped.name, skipped.status) == ("ssh-hosts", Status.SKIPPED)
    assert skipped.summary == f"no GPU host to check over SSH: {why}" and skipped.hint


def test_unreachable_inventory_hosts_each_fail_with_ssh_s_reason() -> None:
    """Real ssh against closed ports: refused at once, never a prompt (BatchMode), in inventory order."""
    inventory = SshHosts(("127.0.0.1", "127.0.0.2"), "konduktor", None, CLOSED_PORT)
    started = time.monotonic()
    checks = host_checks(example(), ClusterFacts("https://x", nodes=FLEET), inventory, False, lambda _message: None)
    assert time.monotonic() - started < 20
    reachable = [c for c in checks if c.name == "host-reachable"]
    assert [(c.subject, c.status) for c in reachable] == [("127.0.0.1", Status.FAIL), ("127.0.0.2", Status.FAIL)]
    for item in reachable:
        assert f"port {CLOSED_PORT}" in item.evidence[0], item.evidence
    assert {c.status for c in checks if c.name != "host-reachable"} == {Status.SKIPPED}


# --- the command on the simulated cluster -----------------------------------------------------------------------


def preflight(capsys: pytest.CaptureFixture[str], sim: Sim, *args: str) -> tuple[int, str, str]:
    code = main(["preflight", *args, "--kubeconfig", str(sim.kubeconfig)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


def written_by_anyone(sim: Sim) -> list[Any]:
    """What a write to the cluster would change: Node labels, annotations and taints, and the namespaces."""
    nodes = [
        (n["metadata"].get("labels"), n["metadata"].get("annotations"), n["spec"]) for n in sim.kube.list("v1", "Node")
    ]
    return [nodes, sorted(n["metadata"]["name"] for n in sim.kube.list("v1", "Namespace"))]


def reset_nodes(sim: Sim) -> None:
    """The nodes as the config describes them: earlier tests on the shared cluster change node status."""
    spec = sim.cluster.spec()
    assert spec is not None
    sim.cluster.apply_nodes(sim.kube, spec)


@pytest.mark.sim
def test_preflight_on_the_simulated_cluster(capsys: pytest.CaptureFixture[str], sim: Sim) -> None:
    reset_nodes(sim)
    code, out, err = preflight(capsys, sim, str(EXAMPLE), "-o", "json")
    assert code == 0, err + out
    report = json.loads(out)
    status = {(c["name"], c["subject"]): c["status"] for c in report["checks"]}
    assert status[("api-reachable", "cluster")] == "PASS"
    assert status[("server-version", "cluster")] == "PASS"
    assert status[("gpu-nodes", "h100")] == "PASS"
    assert status[("topology-labels", "gpu-topology")] == "PASS"
    assert status[("quota-capacity", "h100")] == "PASS"
    assert status[("rdma", "cluster")] == "SKIPPED"
    taints = next(c for c in report["checks"] if c["name"] == "gpu-node-taints")
    assert taints["status"] == "WARN" and "nvidia.com/gpu:NoSchedule" in taints["summary"]
    assert "preflight: WARN" in err


@pytest.mark.sim
def test_preflight_fails_with_exit_3_for_nodes_that_do_not_exist(
    capsys: pytest.CaptureFixture[str], sim: Sim, tmp_path: Path
) -> None:
    reset_nodes(sim)
    config = tmp_path / "config.yaml"
    config.write_text(with_a100())
    before = written_by_anyone(sim)
    code, out, err = preflight(capsys, sim, str(config))
    assert code == 3
    rows = {tuple(line.split()[:3]) for line in out.splitlines()}
    assert ("FAIL", "gpu-nodes", "a100") in rows and ("FAIL", "quota-capacity", "a100") in rows
    assert ("PASS", "gpu-nodes", "h100") in rows
    assert "config.yaml:" in out and "gpuTypes.a100.nodes: 0 nodes match" in out
    assert "error: 2 preflight check(s) failed: gpu-nodes (a100), quota-capacity (a100); nothing was changed" in err
    assert written_by_anyone(sim) == before  # only reads


@pytest.mark.sim
def test_preflight_reports_an_unreachable_ssh_host(capsys: pytest.CaptureFixture[str], sim: Sim) -> None:
    code, out, err = preflight(capsys, sim, str(EXAMPLE), "--ssh", "gpu-h100-0000.invalid", "-o", "json")
    assert code == 3
    host = [c for c in json.loads(out)["checks"] if c["subject"] == "gpu-h100-0000.invalid"]
    assert host[0]["name"] == "host-reachable" and host[0]["status"] == "FAIL"
    assert {c["status"] for c in host[1:]} == {"SKIPPED"}
    assert "host-reachable (gpu-h100-0000.invalid)" in err


@pytest.mark.sim
def test_preflight_checks_the_config_inventory_and_fails_per_unreachable_host(
    capsys: pytest.CaptureFixture[str], sim: Sim, tmp_path: Path
) -> None:
    reset_nodes(sim)
    (tmp_path / "id_test").write_text("")
    config = with_inventory(tmp_path, f"{{user: konduktor, key: id_test, port: {CLOSED_PORT}, hosts: [127.0.0.1]}}")
    code, out, err = preflight(capsys, sim, str(config), "-o", "json")
    assert code == 3
    checks = json.loads(out)["checks"]
    assert {c["status"] for c in checks if c["subject"] in ("cluster", "h100")} <= {"PASS", "WARN", "SKIPPED"}
    host = [c for c in checks if c["subject"] == "127.0.0.1"]
    assert host[0]["name"] == "host-reachable" and host[0]["status"] == "FAIL"
    assert f"port {CLOSED_PORT}" in host[0]["evidence"][0] and host[0]["hint"]
    assert {c["status"] for c in host[1:]} == {"SKIPPED"}
    assert "1 preflight check(s) failed: host-reachable (127.0.0.1)" in err

    # --ssh replaces the inventory's hosts; its user, key and port still apply.
    code, out, err = preflight(capsys, sim, str(config), "--ssh", "127.0.0.2", "-o", "json")
    assert code == 3
    assert {c["subject"] for c in json.loads(out)["checks"] if c["name"] == "host-reachable"} == {"127.0.0.2"}


def test_a_missing_inventory_key_is_a_config_error_before_any_connection(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = with_inventory(tmp_path, "{key: id_missing}")
    assert main(["validate", str(config)]) == 0  # rendering and validating need no key
    assert main(["preflight", str(config), "--kubeconfig", str(tmp_path / "no-kubeconfig")]) == 2
    err = capsys.readouterr().err
    assert f"{config}:{SSH_LINE}: preflight.nodes.ssh.key: no such file: {tmp_path / 'id_missing'}" in err
    assert "Traceback" not in err


def test_preflight_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", str(EXAMPLE), "--ssh-user", "root"]) == 2
    assert "--ssh-user and --ssh-key need --ssh HOST" in capsys.readouterr().err
    assert main(["preflight", str(EXAMPLE), "-o", "xml"]) == 2


def test_a_refused_read_skips_the_checks_that_need_it() -> None:
    facts = ClusterFacts(
        "https://x",
        version={"gitVersion": "v1.33.1"},
        crds=(),
        problems={"nodes": "GET /api/v1/nodes: 403 'forbidden'"},
    )
    checks = judge_cluster(example().config, facts, pinned=PINNED, release=RELEASE)
    skipped = {c.name for c in checks if c.status is Status.SKIPPED}
    assert skipped == {"gpu-nodes", "gpu-node-taints", "rdma", "quota-capacity"}
    assert by_name(checks, "gpu-nodes").summary == "cannot list nodes: GET /api/v1/nodes: 403 'forbidden'"
    assert by_name(checks, "kueue-crds").status is Status.PASS


def test_a_check_without_the_rights_it_needs_fails_naming_them() -> None:
    denied = frozenset(
        {Permission("list", "nodes"), Permission("list", "customresourcedefinitions", "apiextensions.k8s.io")}
    )
    facts = ClusterFacts("https://x", version={"gitVersion": "v1.33.1"}, denied=denied)
    checks = judge_cluster(example().config, facts, pinned=PINNED, release=RELEASE)
    failed = {c.name: c for c in checks if c.status is Status.FAIL}
    assert set(failed) == {"gpu-nodes", "gpu-node-taints", "rdma", "quota-capacity", "kueue-crds", "component-crds"}
    assert failed["gpu-nodes"].summary == "no right to list nodes"
    assert failed["kueue-crds"].summary == "no right to list customresourcedefinitions.apiextensions.k8s.io"
    assert "kubectl auth can-i list nodes" in (failed["rdma"].hint or "")


# --- node checks from a pod on each GPU node (preflight.nodes.pod) -----------------------------------------------


KONDUKTOR_INSTALL = (sys.executable, "-c", "from konduktor.cli.main import run; run()")


def pod_target(**extra: Any) -> PodTarget:
    taints = (
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"},
        {"key": "vendor.example.com/repair", "value": "x", "effect": "NoExecute"},
    )
    return PodTarget(**{"node": "gpu-h100-0001", "hostname": "gpu-h100-0001.lab", "taints": taints, **extra})


def test_the_preflight_job_is_privileged_pinned_and_asks_for_no_gpu() -> None:
    target = pod_target(expect=NodeExpectations(gpus=8, rdma=True))
    job = node_check_job("20260101-000000-ab12", target, "reg.local/konduktor:9", "ops", "konduktor-preflight")
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (0, 300, 3600)
    pod = spec["template"]["spec"]
    assert pod["hostPID"] is True and pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == "konduktor-preflight" and pod["automountServiceAccountToken"] is False
    assert "nodeName" not in pod and "hostNetwork" not in pod
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-h100-0001.lab"]}]}
    ]
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"key": HEALTH_TAINT_KEY, "operator": "Exists"},
        {"key": "vendor.example.com/repair", "operator": "Exists", "effect": "NoExecute"},
    ]
    (container,) = pod["containers"]
    assert container["image"] == "reg.local/konduktor:9"
    assert container["command"] == [
        *("konduktor-install", "preflight-node", "--in-host-namespaces", "--node", "gpu-h100-0001"),
        *("-o", "json", "--gpus", "8", "--rdma"),
    ]
    security = container["securityContext"]
    assert (security["privileged"], security["runAsUser"], security["readOnlyRootFilesystem"]) == (True, 0, True)
    assert "nvidia.com/gpu" not in str(container["resources"]) and container["resources"]["requests"]["cpu"]
    host = next(m for m in container["volumeMounts"] if m["mountPath"] == "/host")
    assert host["readOnly"] is True
    assert next(v for v in pod["volumes"] if v["name"] == host["name"])["hostPath"]["path"] == "/"
    labels = spec["template"]["metadata"]["labels"]
    assert job["metadata"]["labels"] == labels
    assert labels["app.kubernetes.io/name"] == "konduktor-preflight"
    assert labels["konduktor.ai/preflight-run"] == "20260101-000000-ab12"
    assert labels["konduktor.ai/node"] == "gpu-h100-0001" and labels["app.kubernetes.io/managed-by"] == "konduktor"
    why = json.loads(spec["template"]["metadata"]["annotations"]["konduktor.ai/privileges"])["node-checks"]
    assert "nsenter" in why and "hostPID" in why and "no GPU" in why
    # Without the account (no konduktor-core yet) the pod runs as the namespace's default; unknown GPUs, no flag.
    bare = node_check_job("r1", pod_target(expect=NodeExpectations()), "i", "ops")["spec"]["template"]["spec"]
    assert "serviceAccountName" not in bare and "--gpus" not in bare["containers"][0]["command"]
    # A healthy node's preflight does not ask to tolerate the health taint, which only konduktor's accounts may.
    healthy = pod_target(taints=({"key": "nvidia.com/gpu", "effect": "NoSchedule"},), expect=NodeExpectations())
    assert node_check_job("r1", healthy, "i", "ops")["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists"}
    ]


def recorded_report(subject: str = "gpu-h100-0001") -> str:
    checks = run_node_checks(RecordedHost(HEALTHY), subject, NodeExpectations(gpus=8))
    return render_json(PreflightReport(tuple(checks)))


def test_a_pods_report_becomes_the_nodes_checks() -> None:
    expected = run_node_checks(RecordedHost(HEALTHY), "gpu-h100-0001", NodeExpectations(gpus=8))
    assert read_node_report(recorded_report(), "gpu-h100-0001") == expected
    # Kubernetes serves stderr in the same log: a warning around the report does not hide it.
    noisy = "WARNING: something on stderr {not json}\n" + recorded_report() + "more stderr\n"
    assert read_node_report(noisy, "gpu-h100-0001") == expected
    # The report is held to the node the Job was pinned to, whatever the pod called itself.
    assert {c.subject for c in read_node_report(recorded_report("localhost"), "gpu-h100-0001")} == {"gpu-h100-0001"}


@pytest.mark.parametrize(
    ("log", "why"),
    [
        (
            "exec /usr/local/bin/konduktor-install: exec format error\n",
            "no node report in the pod's log, which starts: exec /usr/local/bin/konduktor-install: exec format error",
        ),
        ('{"status": "PASS", "checks": []}\n', "the pod's report lists no checks"),
        ('{"checks": [{"name": "kernel", "status": "GREAT", "summary": "x"}]}', "a check in the pod's report cannot"),
        ('{"checks": [{"name": "kernel", "summary": "x"}]}', "a check in the pod's report cannot be read ('status')"),
        ('{"checks": [{"name": "k", "status": "PASS", "summary": "x", "evidence": [1]}]}', "must be text"),
        ('{"checks": [{"name": "kernel", "status": "PA', "no node report in the pod's log"),  # cut off
    ],
)
def test_unreadable_pod_output_says_why(log: str, why: str) -> None:
    with pytest.raises(UnreadableReport, match=re.escape(why)):
        read_node_report(log, "n1")


def test_a_node_without_a_result_fails_with_the_reasons_and_skips_the_rest() -> None:
    checks = no_result("n1", ["the API served no log (x)", "not scheduled: 0/4 nodes"], "ops", "kp-job")
    assert (checks[0].name, checks[0].status, checks[0].summary) == (
        "host-reachable",
        Status.FAIL,
        "no result from the preflight pod",
    )
    assert checks[0].evidence == ("the API served no log (x)", "not scheduled: 0/4 nodes")
    assert checks[0].hint == "kubectl -n ops describe job kp-job; kubectl -n ops logs job/kp-job"
    assert {(c.status, c.summary) for c in checks[1:]} == {(Status.SKIPPED, "no result from the preflight pod")}
    assert [c.name for c in checks] == [c.name for c in run_node_checks(RecordedHost(HEALTHY), "x", NodeExpectations())]


def test_a_job_that_ran_past_its_deadline_says_so_without_a_pod() -> None:
    failed = JobState(JobPhase.FAILED, "DeadlineExceeded: Job was active longer than specified deadline")
    unused = cast(Kube, None)  # with no pod there is no log to ask the API for
    (reachable, *_) = node_result(unused, "ops", "gpu-1", "kp-x", failed, None)
    assert reachable.evidence == (
        "the Job failed: DeadlineExceeded: Job was active longer than specified deadline",
        "the Job has no pod: none was created, or it was removed when the Job failed",
    )


def test_no_gpu_node_to_check_from_a_pod_is_skipped_with_the_reason() -> None:
    unused = cast(Kube, None)
    [skipped] = pod_checks(unused, example().config, ClusterFacts("https://x"), NodeCheckPods(), lambda _: None)
    assert (skipped.name, skipped.status) == ("preflight-pods", Status.SKIPPED)
    assert skipped.summary == "no GPU host to check from a pod: the cluster has no node of the config's GPU types"


def statuses(checks: list[Check]) -> dict[str, tuple[Status, str]]:
    return {c.name: (c.status, c.summary) for c in checks}


@pytest.mark.skipif(os.geteuid() != 0, reason="entering a process's namespaces (setns) needs root")
@pytest.mark.parametrize("rdma", [False, True])
def test_checks_through_nsenter_say_what_the_local_backend_says(rdma: bool) -> None:
    """Real nsenter on this machine, into this test's own namespaces: every command, quoted as nsenter passes it
    to the host's shell, gives what testinfra's local backend gives (no GPU here: FAIL or SKIPPED, with reasons)."""
    expect = NodeExpectations(gpus=8, rdma=rdma)
    through = run_node_checks(HostNamespaces(pid=os.getpid()), "local", expect, UNREACHABLE_HINT)
    assert statuses(through) == statuses(run_node_checks(testinfra.get_host("local://"), "local", expect))
    assert by_name(through, "host-reachable").status is Status.PASS
    assert by_name(through, "nvidia-smi").status is Status.FAIL


def test_without_privileges_the_pod_command_reports_nsenters_refusal() -> None:
    """What a preflight pod prints when it lost its privileges: run as root without capabilities (or as this
    unprivileged user), the command cannot enter PID 1's namespaces and says so in its report, exit 0."""
    drop = ["setpriv", "--bounding-set=-all"] if os.geteuid() == 0 else []
    command = [*drop, *KONDUKTOR_INSTALL, "preflight-node", "--in-host-namespaces"]
    done = subprocess.run(
        [*command, "--node", "gpu-9", "--gpus", "8", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    checks = read_node_report(done.stdout, "gpu-9")
    reachable = by_name(checks, "host-reachable")
    assert reachable.status is Status.FAIL and reachable.evidence[0].startswith("nsenter: ")
    assert reachable.hint == UNREACHABLE_HINT
    assert {c.status for c in checks[1:]} == {Status.SKIPPED}


PREFLIGHT_NAMESPACE = "konduktor-preflight-test"
SILENT = "gpu-h100-0003"  # its pod prints nothing


def pod_mode_config(directory: Path) -> Path:
    path = directory / "config.yaml"
    path.write_text(EXAMPLE.read_text() + f"preflight:\n  nodes:\n    pod: {{namespace: {PREFLIGHT_NAMESPACE}}}\n")
    return path


def node_reports(nodes: list[str]) -> dict[str, tuple[list[str], str]]:
    """Node -> (the command its preflight pod runs, what that command prints when run on this machine)."""
    commands = {node: node_check_command(node, NodeExpectations(gpus=10)) for node in nodes}
    running = {
        node: subprocess.Popen([*KONDUKTOR_INSTALL, *command[1:]], stdout=subprocess.PIPE, text=True)
        for node, command in commands.items()
    }
    return {node: (commands[node], process.communicate(timeout=60)[0]) for node, process in running.items()}


class PodLogs(threading.Thread):
    """Plays the kubelet for the preflight pods on the fake nodes: serves, as each pod's log, what its command
    printed on this machine (through a kwok Logs object, read back by `preflight` through pods/log)."""

    def __init__(self, kube: Kube, reports: dict[str, tuple[list[str], str]], directory: Path) -> None:
        super().__init__(daemon=True)
        self.kube, self.reports, self.directory = kube, reports, directory
        self.stop = threading.Event()
        self.served: set[str] = set()  # pod names
        self.problems: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.serve()
            except ApiError as problem:
                self.problems.append(problem.message)
            self.stop.wait(0.2)

    def serve(self) -> None:
        selector = "app.kubernetes.io/name=konduktor-preflight"
        for pod in self.kube.list("v1", "Pod", PREFLIGHT_NAMESPACE, label_selector=selector):
            name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
            if node is None or name in self.served or node not in self.reports:
                continue
            command, printed = self.reports[node]
            if pod["spec"]["containers"][0]["command"] != command:
                self.problems.append(f"{name} runs {pod['spec']['containers'][0]['command']}, not {command}")
            log = self.directory / f"{name}.log"
            log.write_text(cri_log(printed, datetime.now(UTC)))
            self.kube.apply(logs_object(pod, {"node-checks": log}))
            self.served.add(name)


@pytest.fixture
def pod_logs(sim: Sim, tmp_path: Path) -> Iterator[PodLogs]:
    reset_nodes(sim)
    reports = node_reports([f"gpu-h100-{i:04d}" for i in range(3)])  # not SILENT
    kube = Kube(sim.kubeconfig)  # the thread's own client
    server = PodLogs(kube, reports, tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop.set()
        server.join()
        kube.close()
        sim.kube.delete("v1", "Namespace", PREFLIGHT_NAMESPACE)


@pytest.mark.sim
def test_preflight_pods_report_each_nodes_checks_and_a_silent_node_fails(
    capsys: pytest.CaptureFixture[str], sim: Sim, pod_logs: PodLogs, tmp_path: Path
) -> None:
    """Jobs on the fake nodes, accepted by the API server and scheduled there; each pod's log is what the pod's
    own command printed on this machine (no GPU: checks FAIL), read back through the API; exit 3."""
    config = pod_mode_config(tmp_path)
    code, out, err = preflight(capsys, sim, str(config), "-o", "json")
    assert code == 3, err
    assert not pod_logs.problems
    reported = json.loads(out)["checks"]
    for node, (_, printed) in pod_logs.reports.items():
        mine = [c for c in reported if c["subject"] == node]
        assert mine == json.loads(printed)["checks"]  # what the pod printed, as that node's checks
        assert any(c["status"] == "FAIL" for c in mine)
    silent = [c for c in reported if c["subject"] == SILENT]
    assert (silent[0]["name"], silent[0]["status"], silent[0]["summary"]) == (
        "host-reachable",
        "FAIL",
        "no result from the preflight pod",
    )
    assert silent[0]["evidence"][0].startswith("the API served no log (")
    assert {c["status"] for c in silent[1:]} == {"SKIPPED"}
    assert f"host-reachable ({SILENT})" in err

    jobs = sim.kube.list("batch/v1", "Job", PREFLIGHT_NAMESPACE)
    assert sorted(j["metadata"]["annotations"]["konduktor.ai/node"] for j in jobs) == [
        f"gpu-h100-{i:04d}" for i in range(4)
    ]
    (run_id,) = {j["metadata"]["labels"]["konduktor.ai/preflight-run"] for j in jobs}
    for job in jobs:
        assert job["spec"]["template"]["spec"]["hostPID"] is True
        assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
    pods = sim.kube.list("v1", "Pod", PREFLIGHT_NAMESPACE)
    assert sorted(p["spec"]["nodeName"] for p in pods) == [f"gpu-h100-{i:04d}" for i in range(4)]

    # Again: a new run; the finished Jobs of the first are gone, and the answer is the same.
    code, again, _ = preflight(capsys, sim, str(config), "-o", "json")
    assert code == 3
    heard = [c for c in reported if c["subject"] != SILENT]
    assert [c for c in json.loads(again)["checks"] if c["subject"] != SILENT] == heard
    runs = {
        j["metadata"]["labels"]["konduktor.ai/preflight-run"]
        for j in sim.kube.list("batch/v1", "Job", PREFLIGHT_NAMESPACE)
    }
    assert len(runs) == 1 and run_id not in runs

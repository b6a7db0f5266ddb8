"""The simulated cluster's stand-in for the GPU Operator on shared nodes: what a node labelled for a sharing group
advertises and how it is labelled, in what order, and the kernel line of an Xid on one MIG instance (pure)."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from konduktor.config.load import parse_config
from konduktor.errors import UsageError
from konduktor.gpu.kernel_log import parse_line
from konduktor.gpu.sharing import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL
from konduktor.health.classify import classify_report
from konduktor.health.node_reading import expected_gpus
from konduktor.health.settings import HealthSettings
from konduktor.sim.faults import check_mig_instance, device_plugin_status, kernel_line
from konduktor.sim.gpus import FakeNode, parse_faults
from konduktor.sim.nodes import node_manifests, parse_nodes_spec
from konduktor.sim.pools import node_pools
from konduktor.sim.sharing import (
    SHARING_NODES_LABEL,
    node_sharing,
    operator_steps,
    physical_gpus,
)
from konduktor.sim.spec import SimSpec

CONFIG = textwrap.dedent("""\
    version: 1
    cluster: {name: gpu-lab}
    capacityReserve: {cpu: "8", memory: 64Gi}
    gpuTypes:
      h100:
        product: NVIDIA-H100-80GB-HBM3
        nodes: 4
        gpusPerNode: 8
        nodeAllocatable: {cpu: "200", memory: 1964Gi}
        sharing:
          h100-mig:
            nodes: 1
            mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
          h100-shared:
            nodes: 1
            timeSlicing: {replicas: 4}
          h100-mps:
            nodes: 1
            mps: {replicas: 2}
      l40s:
        product: NVIDIA-L40S
        nodes: 1
        gpusPerNode: 4
        nodeAllocatable: {cpu: "100", memory: 500Gi}
    teams:
      team-a:
        namespaces: [team-a]
        gpus: {h100: {quota: 8}}
        slices:
          h100-mig: {mig-1g.10gb: {quota: 8}}
    alerts:
      receivers: {platform: {webhook: {url: {secret: hook, key: url}}}}
      routes: {default: platform}
    """)


def nodes() -> dict[str, dict[str, Any]]:
    pools = node_pools(parse_config(CONFIG, "config.yaml"))
    return {n["metadata"]["name"]: n for n in node_manifests(pools)}


def labelled(node: dict[str, Any], **labels: str) -> dict[str, Any]:
    metadata = {**node["metadata"], "labels": {**node["metadata"]["labels"], **labels}}
    return {**node, "metadata": metadata}


def sharing_of(node: dict[str, Any]) -> Any:
    return node_sharing(node["metadata"]["labels"], node["metadata"]["annotations"])


def test_the_nodes_of_a_type_with_groups_carry_them_and_survive_sim_json() -> None:
    fleet = nodes()
    h100, l40s = fleet["gpu-h100-0000"], fleet["gpu-l40s-0000"]
    assert h100["metadata"]["labels"][SHARING_NODES_LABEL] == "true"
    assert SHARING_NODES_LABEL not in l40s["metadata"]["labels"]  # the agent never watches it
    assert SHARING_NODES_LABEL not in l40s["metadata"]["annotations"]
    spec = SimSpec(pools=node_pools(parse_config(CONFIG, "config.yaml")))
    assert SimSpec.from_json(spec.to_json()).pools == spec.pools
    # A `sim up --nodes` cluster has no groups: a label names a layout mig-manager does not have.
    plain = node_manifests(parse_nodes_spec("1x8:H100"))[0]
    assert SHARING_NODES_LABEL not in plain["metadata"]["labels"]
    assert sharing_of(labelled(plain, **{MIG_CONFIG_LABEL: "h100-mig"})).mig_state == "failed"


def test_a_mig_node_advertises_its_layout_on_every_gpu_and_no_whole_gpu() -> None:
    node = labelled(nodes()["gpu-h100-0000"], **{MIG_CONFIG_LABEL: "h100-mig"})
    status = device_plugin_status(node, {})
    assert status["capacity"] == {
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.10gb": "16",
        "nvidia.com/mig-2g.20gb": "8",
        "nvidia.com/mig-3g.40gb": "8",
    }
    assert status["allocatable"] == status["capacity"]
    # A GPU the device plugin withdraws (Xid 79) takes all its instances with it; capacity keeps them.
    faulty = device_plugin_status(node, parse_faults("3=xid"))
    assert faulty["allocatable"]["nvidia.com/mig-1g.10gb"] == "14"
    assert faulty["allocatable"]["nvidia.com/mig-3g.40gb"] == "7"
    assert faulty["capacity"] == status["capacity"]
    assert physical_gpus(node) == 8  # GFD's nvidia.com/gpu.count: the GPUs are still 8


@pytest.mark.parametrize(
    ("group", "strategy", "shared"), [("h100-shared", "time-slicing", "32"), ("h100-mps", "mps", "16")]
)
def test_a_time_sliced_or_mps_node_advertises_renamed_replicas(group: str, strategy: str, shared: str) -> None:
    node = labelled(nodes()["gpu-h100-0001"], **{DEVICE_PLUGIN_CONFIG_LABEL: group})
    status = device_plugin_status(node, {})
    assert status["allocatable"] == {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": shared}
    [(kind, resources), (_, labels)] = operator_steps(
        node["metadata"]["labels"], node["metadata"]["annotations"], node["status"], status, "NVIDIA-H100-80GB-HBM3", 8
    )
    assert kind == "status" and resources == status
    assert labels["nvidia.com/gpu.sharing-strategy"] == strategy
    assert MIG_CONFIG_STATE_LABEL not in labels  # no MIG: mig-manager has nothing to report


def test_a_mig_layout_goes_pending_then_resources_then_success_with_gfd_labels() -> None:
    node = labelled(nodes()["gpu-h100-0000"], **{MIG_CONFIG_LABEL: "h100-mig"})
    labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
    wanted = device_plugin_status(node, {})
    steps = operator_steps(labels, annotations, node["status"], wanted, "NVIDIA-H100-80GB-HBM3", 8)
    assert [kind for kind, _ in steps] == ["labels", "status", "labels"]
    assert steps[0][1] == {MIG_CONFIG_STATE_LABEL: "pending"}
    final = steps[2][1]
    assert final[MIG_CONFIG_STATE_LABEL] == "success"
    assert final["nvidia.com/mig.strategy"] == "mixed"
    assert final["nvidia.com/mig-1g.10gb.count"] == "16"
    assert final["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"
    # Once there, nothing more to do: the agent's own writes come back as events and change nothing.
    done = {**node, "metadata": {**node["metadata"], "labels": {**labels, **final}}, "status": wanted}
    assert operator_steps({**labels, **final}, annotations, done["status"], wanted, "NVIDIA-H100-80GB-HBM3", 8) == []
    # The label removed (or all-disabled): whole GPUs again, GFD's MIG labels gone.
    for back in ({MIG_CONFIG_LABEL: "all-disabled"}, {}):
        now = {k: v for k, v in {**labels, **final}.items() if k != MIG_CONFIG_LABEL} | back
        whole = {**done, "metadata": {**done["metadata"], "labels": now}}
        wanted_whole = device_plugin_status(whole, {})
        assert wanted_whole["allocatable"] == {"nvidia.com/gpu": "8"}
        steps = operator_steps(now, annotations, done["status"], wanted_whole, "NVIDIA-H100-80GB-HBM3", 8)
        last = steps[-1][1]
        assert last["nvidia.com/mig-1g.10gb.count"] is None and last["nvidia.com/mig.strategy"] is None
        assert last.get(MIG_CONFIG_STATE_LABEL) == ("success" if back else None)


def test_an_unknown_layout_fails_and_keeps_whole_gpus() -> None:
    node = labelled(nodes()["gpu-h100-0000"], **{MIG_CONFIG_LABEL: "all-7g"})
    wanted = device_plugin_status(node, {})
    assert wanted["allocatable"] == {"nvidia.com/gpu": "8"}
    steps = operator_steps(
        node["metadata"]["labels"], node["metadata"]["annotations"], node["status"], wanted, "NVIDIA-H100-80GB-HBM3", 8
    )
    assert steps == [("labels", {MIG_CONFIG_STATE_LABEL: "failed"})]


def test_an_xid_on_a_mig_instance_names_it_as_the_driver_does_and_is_judged_by_its_gpu() -> None:
    bus = FakeNode("gpu-0", "NVIDIA-H100-80GB-HBM3", 8).bus_id(3)
    line = kernel_line(94, bus, 4242.5, gpu_instance=1)
    assert "(PCI:0000:48:00.0 GPU-I:01): 94," in line
    report = parse_line(line)
    assert report is not None and (report.code, report.pci, report.gpu_instance) == (94, "0000:48:00.0", 1)
    contained = classify_report(report, "gpu-0", HealthSettings())
    assert not contained.quarantine
    assert (contained.gpu, contained.name) == ("0000:48:00.0", "CONTAINED_ERROR GPU-I:01")
    assert "MIG instance 1" in contained.meaning and "work on that instance only" in contained.meaning
    fatal = parse_line(kernel_line(95, bus, 4242.5, gpu_instance=1))
    assert fatal is not None
    finding = classify_report(fatal, "gpu-0", HealthSettings())
    assert finding.quarantine and (finding.gpu, finding.name) == ("0000:48:00.0", "UNCONTAINED_ERROR GPU-I:01")


def test_a_mig_instance_fault_needs_an_xid_a_mig_node_and_an_instance_of_its_layout() -> None:
    fleet = nodes()
    mig = labelled(fleet["gpu-h100-0000"], **{MIG_CONFIG_LABEL: "h100-mig"})
    check_mig_instance(mig, "xid94", 3)  # 2x 1g + 1x 2g + 1x 3g: instances 0 to 3
    with pytest.raises(UsageError, match="instances 0 to 3"):
        check_mig_instance(mig, "xid94", 4)
    with pytest.raises(UsageError, match="writes no kernel line"):
        check_mig_instance(mig, "slow", 0)
    with pytest.raises(UsageError, match="has no MIG layout"):
        check_mig_instance(fleet["gpu-h100-0001"], "xid94", 0)


def test_the_health_controller_expects_no_whole_gpu_of_a_sliced_node() -> None:
    fleet = nodes()
    mig = labelled(fleet["gpu-h100-0000"], **{MIG_CONFIG_LABEL: "h100-mig"})
    shared = labelled(fleet["gpu-h100-0001"], **{DEVICE_PLUGIN_CONFIG_LABEL: "h100-shared"})
    disabled = labelled(fleet["gpu-h100-0002"], **{MIG_CONFIG_LABEL: "all-disabled"})
    health = HealthSettings()
    assert [expected_gpus(n, health) for n in (mig, shared, disabled)] == [0, 0, 8]

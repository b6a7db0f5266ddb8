"""`sim fault`'s signals, judged by the same code that judges a real node's: the kernel lines parse and classify as
the driver's do, the burn-in faults as the GPU agent reads them, and the allocatable count as the device plugin's."""

from __future__ import annotations

from typing import Any, cast

import pytest

from konduktor.errors import UsageError
from konduktor.gpu.kernel_log import parse_line
from konduktor.health.classify import classify_report
from konduktor.health.settings import HealthSettings
from konduktor.kube.client import Kube
from konduktor.sim.faults import KINDS, allocatable, fault_kind, faults_text, gpu_node, kernel_line
from konduktor.sim.gpus import FAULTS, FakeNode, parse_faults
from konduktor.sim.nodes import SYSTEM_NODE, NodePool, node_manifests, system_node


@pytest.mark.parametrize(
    ("code", "quarantine", "unusable"),
    [(79, True, True), (48, True, False), (13, False, False)],
)
def test_kernel_lines_are_judged_as_the_drivers(code: int, quarantine: bool, unusable: bool) -> None:
    line = kernel_line(code, FakeNode("gpu-0", "NVIDIA-H100-80GB-HBM3", 10).bus_id(3), 4242.5)
    report = parse_line(line)
    assert report is not None and (report.kind, report.code) == ("xid", code)
    finding = classify_report(report, "gpu-0", HealthSettings())
    assert (finding.quarantine, finding.node_unusable) == (quarantine, unusable)


def test_every_kind_drives_a_signal_and_its_burn_in_fault_is_the_agents() -> None:
    for name, kind in KINDS.items():
        assert kind.xid is not None or kind.burnin is not None, name
        assert kind.burnin is None or kind.burnin in FAULTS, name


def test_a_lost_gpu_leaves_allocatable_and_the_annotation_round_trips() -> None:
    faults = parse_faults("2=xid, 5=ecc, 7=missing")
    assert allocatable(10, faults) == 7  # the device plugin withdraws each: a critical Xid, or a GPU it cannot see
    assert allocatable(10, parse_faults("1=slow, 2=sdc")) == 10  # found by a burn-in only
    assert parse_faults(faults_text(faults)) == faults
    assert faults_text({}) is None


def test_an_unknown_kind_is_a_usage_error_naming_the_kinds() -> None:
    with pytest.raises(UsageError) as raised:
        fault_kind("xid80")
    assert "xid79" in (raised.value.hint or "")


class Nodes:
    """The two reads `sim fault` makes of the sim's nodes, answered as the API server does, label selector included."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}

    def get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        return self.nodes.get(name)

    def list(self, api_version: str, kind: str, label_selector: str) -> list[dict[str, Any]]:
        key, _, value = label_selector.partition("=")
        return [n for n in self.nodes.values() if n["metadata"]["labels"].get(key) == value]


def test_the_hints_name_only_gpu_nodes_as_the_system_node_has_no_gpu_to_fault() -> None:
    gpu_nodes = node_manifests([NodePool("h100", 2, 10, "NVIDIA-H100-80GB-HBM3")])
    kube = cast(Kube, Nodes([system_node(), *gpu_nodes]))
    with pytest.raises(UsageError) as unknown:
        gpu_node(kube, "gpu-h100-9999")
    names = [n["metadata"]["name"] for n in gpu_nodes]
    assert unknown.value.hint == f"its GPU nodes: {', '.join(names)}"
    with pytest.raises(UsageError) as system:
        gpu_node(kube, SYSTEM_NODE)
    assert system.value.message == f"node {SYSTEM_NODE!r} has no GPUs"
    assert system.value.hint == "`kubectl get nodes -l nvidia.com/gpu.present=true` lists the GPU nodes"

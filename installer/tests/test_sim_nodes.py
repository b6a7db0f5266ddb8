"""Fake GPU node pools and the Node objects rendered from them."""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from konduktor.errors import UsageError
from konduktor.sim.node_fleet import as_specified
from konduktor.sim.nodes import DEFAULT_TOPOLOGY, node_address, node_manifests, parse_nodes_spec, system_node
from konduktor.vocabulary import HOSTNAME_LABEL


def test_nodes_spec() -> None:
    [pool] = parse_nodes_spec("4x10:H100")
    assert (pool.count, pool.gpus, pool.product, pool.gpu_type) == (4, 10, "NVIDIA-H100-80GB-HBM3", "h100")
    pools = parse_nodes_spec("2x8:A100,1x8:custom-gpu")
    assert [p.product for p in pools] == ["NVIDIA-A100-SXM4-80GB", "custom-gpu"]
    assert parse_nodes_spec("3x4")[0].product == "NVIDIA-H100-80GB-HBM3"


@pytest.mark.parametrize("spec", ["", "4", "4x", "x8", "0x8", "4x0", "4x8:H100,2x8:H100", "4*8"])
def test_bad_nodes_spec(spec: str) -> None:
    with pytest.raises(UsageError, match="--nodes"):
        parse_nodes_spec(spec)


def test_node_objects_carry_gpu_capacity_and_labels() -> None:
    nodes = node_manifests(parse_nodes_spec("4x10:H100"))
    assert "nvidia.com/gpu" not in system_node()["status"]["allocatable"]  # where platform pods run
    assert [n["metadata"]["name"] for n in nodes] == [f"gpu-h100-000{i}" for i in range(4)]
    first = nodes[0]
    assert first["status"]["allocatable"]["nvidia.com/gpu"] == "10"
    assert first["status"]["capacity"] == first["status"]["allocatable"]
    labels = first["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels[HOSTNAME_LABEL] == "gpu-h100-0000"
    # 2 nodes per rack, 2 racks per block
    racks = [n["metadata"]["labels"]["konduktor.ai/topology-rack"] for n in nodes]
    blocks = [n["metadata"]["labels"]["konduktor.ai/topology-block"] for n in nodes]
    assert racks == ["rack-0", "rack-0", "rack-1", "rack-1"]
    assert blocks == ["block-0"] * 4


@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 16)), min_size=1, max_size=4))
def test_every_node_has_every_topology_level(shapes: list[tuple[int, int]]) -> None:
    """TAS needs the full label set on every node; names are unique across pools."""
    spec = ",".join(f"{count}x{gpus}:T{i}" for i, (count, gpus) in enumerate(shapes))
    nodes = node_manifests(parse_nodes_spec(spec))
    assert len(nodes) == sum(count for count, _ in shapes)
    assert len({n["metadata"]["name"] for n in nodes}) == len(nodes)
    for node in nodes:
        assert set(DEFAULT_TOPOLOGY) <= set(node["metadata"]["labels"])
    # one InternalIP per node, never shared, never off this machine
    addresses = [internal_ip(node) for node in [system_node(), *nodes]]
    assert len(set(addresses)) == len(addresses)
    assert all(ipaddress.IPv4Address(a).is_loopback for a in addresses)
    # a rack never spans two blocks
    rack_block = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        rack, block = labels["konduktor.ai/topology-rack"], labels["konduktor.ai/topology-block"]
        assert rack_block.setdefault(rack, block) == block


def internal_ip(node: dict[str, Any]) -> str:
    [address] = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    return address


def test_nodes_have_a_loopback_internal_ip_and_leave_the_hostname_to_kwok() -> None:
    """hostNetwork pods take their node's InternalIP; kwok adds the Hostname address through which the API server
    reaches its controller for pod logs, so the nodes must not bring one."""
    nodes = [system_node(), *node_manifests(parse_nodes_spec("2x8:A100"))]
    assert [internal_ip(n) for n in nodes] == ["127.1.0.1", "127.1.0.2", "127.1.0.3"]
    assert all(len(n["status"]["addresses"]) == 1 for n in nodes)
    assert ipaddress.IPv4Address(node_address(16_000_000)).is_loopback
    with pytest.raises(UsageError, match="room for"):
        node_address(17_000_000)


def test_a_running_node_as_the_api_server_and_kwok_left_it_is_as_specified_and_a_changed_one_is_not() -> None:
    """`sim up` on a running cluster writes only the nodes that are missing or differ from the spec."""
    [wanted] = node_manifests(parse_nodes_spec("1x8:H100"))
    live = copy.deepcopy(wanted)
    # What the API server and kwok add or rewrite: a canonical memory quantity, kwok's address, others' marks.
    live["status"]["capacity"]["memory"] = live["status"]["allocatable"]["memory"] = "1Ti"
    live["status"]["addresses"].append({"type": "Hostname", "address": "localhost"})
    live["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    live["metadata"]["labels"]["team"] = "x"
    live["spec"]["taints"] = [{"key": "konduktor.ai/gpu-health", "effect": "NoSchedule"}]
    # kube-controller-manager's TTL controller raises this with the cluster's size (300 at 10,000 nodes).
    live["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] = "300"
    assert as_specified(live, wanted)
    system = copy.deepcopy(system_node())
    system["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] = "300"
    assert as_specified(system, system_node())
    assert not as_specified(None, wanted)
    lost_gpu = copy.deepcopy(live)
    lost_gpu["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    assert not as_specified(lost_gpu, wanted)
    relabelled = copy.deepcopy(live)
    relabelled["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    assert not as_specified(relabelled, wanted)
    tolerated = node_manifests(
        [
            replace(pool, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
            for pool in parse_nodes_spec("1x8:H100")
        ]
    )[0]
    assert not as_specified(live, tolerated)
    both = [*live["spec"]["taints"], *tolerated["spec"]["taints"]]
    assert as_specified({**live, "spec": {"taints": both}}, tolerated)

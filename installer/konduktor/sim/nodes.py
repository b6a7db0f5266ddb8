"""Fake GPU nodes for the simulated cluster: pools from a config or `--nodes 4x10:H100`, rendered to Node objects."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from konduktor.errors import UsageError
from konduktor.sim.sharing import SHARING_ANNOTATION, SHARING_NODES_LABEL, groups_annotation
from konduktor.vocabulary import GPU_COUNT_LABEL, GPU_RESOURCE, HOSTNAME_LABEL, PRODUCT_LABEL

# nvidia.com/gpu.product values as GPU Feature Discovery publishes them, keyed by the short names users type.
PRODUCTS = {
    "A100": "NVIDIA-A100-SXM4-80GB",
    "H100": "NVIDIA-H100-80GB-HBM3",
    "H200": "NVIDIA-H200",
    "B200": "NVIDIA-B200",
    "GB200": "NVIDIA-GB200",
    "L40S": "NVIDIA-L40S",
}

# Topology labels of the default simulated datacenter: 2 nodes per rack, 2 racks per block, so TAS has
# more than one domain to choose from at every level.
DEFAULT_TOPOLOGY = ("konduktor.ai/topology-block", "konduktor.ai/topology-rack", HOSTNAME_LABEL)
NODES_PER_RACK = 2
RACKS_PER_BLOCK = 2

SPEC = re.compile(r"^(?P<count>\d+)x(?P<gpus>\d+)(?::(?P<product>[A-Za-z0-9._-]+))?$")


@dataclass(frozen=True)
class NodePool:
    """`count` identical GPU nodes of one GPU type."""

    gpu_type: str
    count: int
    gpus: int
    product: str
    cpu: str = "96"
    memory: str = "1024Gi"
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    # The GPU type's sharing groups (`konduktor.sim.sharing.Groups`), which the GPU agent applies to a node labelled
    # for one; empty without groups (a `--nodes` cluster).
    sharing: dict[str, dict[str, Any]] = field(default_factory=dict)


def parse_nodes_spec(spec: str) -> list[NodePool]:
    """`4x10:H100,2x8:A100` -> pools. The product defaults to H100."""
    pools = []
    for part in spec.split(","):
        match = SPEC.match(part.strip())
        if not match:
            raise UsageError(
                f"--nodes {spec}: cannot read {part.strip()!r}",
                hint="write COUNTxGPUS[:PRODUCT], e.g. 4x10:H100 or 2x8:A100,2x8:H100",
            )
        count, gpus = int(match["count"]), int(match["gpus"])
        if count < 1 or gpus < 1:
            raise UsageError(f"--nodes {spec}: node and GPU counts must be at least 1")
        short = (match["product"] or "H100").upper()
        product = PRODUCTS.get(short, match["product"] or "")
        pools.append(NodePool(gpu_type=short.lower(), count=count, gpus=gpus, product=product))
    names = [p.gpu_type for p in pools]
    if len(set(names)) != len(names):
        raise UsageError(f"--nodes {spec}: each GPU type may appear once")
    return pools


def node_name(pool: NodePool, index: int) -> str:
    return f"gpu-{pool.gpu_type}-{index:04d}"


def topology_values(levels: tuple[str, ...], position: int) -> dict[str, str]:
    """Labels for the node at `position` in the whole fleet, for every non-hostname level.

    The widest level changes slowest; each narrower level holds NODES_PER_RACK or RACKS_PER_BLOCK children.
    """
    labels = {}
    upper = [level for level in levels if level != HOSTNAME_LABEL]
    for depth, level in enumerate(upper):
        narrower = len(upper) - depth - 1
        width = NODES_PER_RACK * (RACKS_PER_BLOCK ** max(narrower, 0))
        suffix = level.rsplit("/", 1)[-1].removeprefix("topology-").removeprefix("gce-topology-")
        labels[level] = f"{suffix}-{position // width}"
    return labels


SYSTEM_NODE = "system-0000"
# The fake nodes' InternalIPs, one per node, all in 127.0.0.0/8: kwok gives a hostNetwork pod its node's
# InternalIP as pod IP, and anything that dials a node address (preflight's SSH inventory) stays on this machine.
FIRST_ADDRESS = ipaddress.IPv4Address("127.1.0.1")
LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")


def node_address(position: int) -> str:
    """The InternalIP of the node at `position` in the fleet (the system node is 0, GPU nodes follow)."""
    address = FIRST_ADDRESS + position
    if address >= LOOPBACK.broadcast_address:
        room = int(LOOPBACK.broadcast_address) - int(FIRST_ADDRESS)
        raise UsageError(f"the simulated cluster has room for {room} nodes")
    return str(address)


def node_status(resources: dict[str, str], position: int) -> dict[str, Any]:
    """What a kubelet reports when it registers its node: capacity, allocatable and the node's address.

    kwok's node-initialize stage keeps capacity, allocatable and an InternalIP that are already there, and adds
    its Hostname address (the kwok controller, which serves the node's pod logs)."""
    return {
        "capacity": dict(resources),
        "allocatable": dict(resources),
        "addresses": [{"type": "InternalIP", "address": node_address(position)}],
    }


def system_node() -> dict[str, Any]:
    """A CPU node for platform pods (the health controller, ...): GPU nodes are tainted, as in real clusters."""
    resources = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": SYSTEM_NODE,
            "labels": {
                HOSTNAME_LABEL: SYSTEM_NODE,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "konduktor.ai/node-pool": "system",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {},
        "status": node_status(resources, 0),
    }


def node_manifests(pools: list[NodePool], levels: tuple[str, ...] = DEFAULT_TOPOLOGY) -> list[dict[str, Any]]:
    """Node objects with GPU capacity and labels; kwok's controller manages every node in the sim cluster."""
    nodes = []
    position = 0
    for pool in pools:
        for index in range(pool.count):
            name = node_name(pool, index)
            resources = {"cpu": pool.cpu, "memory": pool.memory, "pods": "110", GPU_RESOURCE: str(pool.gpus)}
            labels = {
                HOSTNAME_LABEL: name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "nvidia.com/gpu.present": "true",
                PRODUCT_LABEL: pool.product,
                GPU_COUNT_LABEL: str(pool.gpus),
                "konduktor.ai/gpu-type": pool.gpu_type,
                **topology_values(levels, position),
                **pool.labels,
            }
            # Not node.alpha.kubernetes.io/ttl: kube-controller-manager's TTL controller owns it and raises it with the
            # cluster's size (15 s past 90 nodes, 300 s past 1,800), so a value here made `up` rewrite every node.
            annotations = {"kwok.x-k8s.io/node": "fake"}
            if pool.sharing:
                labels[SHARING_NODES_LABEL] = "true"
                annotations[SHARING_ANNOTATION] = groups_annotation(pool.sharing)
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": annotations,
                    },
                    "spec": {"taints": list(pool.taints)} if pool.taints else {},
                    "status": node_status(resources, position + 1),
                }
            )
            position += 1
    return nodes

"""GPU faults injected into the simulated cluster's nodes (`konduktor-install sim fault`), as the signals a real
node gives, so that the platform's own processes see and handle them:

- a kernel line (`NVRM: Xid ...`) appended to the node's kernel log, `<sim state>/kernel-logs/<node>.log`, which
  the sim's health controller reads (`kernel_log_files`), as it reads Loki on a real cluster;
- the GPU gone from the node's allocatable `nvidia.com/gpu`, as NVIDIA's device plugin reports a GPU it marked
  unhealthy (a status update by the field manager `nvidia-device-plugin`; kwok keeps it);
- the GPU agent's burn-in fault on that GPU (`sim.konduktor.ai/gpu-faults`, konduktor.sim.gpus), so that a burn-in or
  a requalification on the node sees the GPU as a real one would after the fault.

`--clear` removes the node's faults: its GPUs back in allocatable and healthy in burn-in. The kernel log keeps its
lines, as a node's does; a quarantine stays until the controller requalifies the node (or an admin releases it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from konduktor.errors import UsageError
from konduktor.kube.client import Kube
from konduktor.kube.timestamps import parse_time
from konduktor.sim.gpus import FAULTS_ANNOTATION, FakeNode, Fault, FaultSpecError, parse_faults
from konduktor.vocabulary import GPU_RESOURCE

KERNEL_LOGS = "kernel-logs"
DEVICE_PLUGIN = "nvidia-device-plugin"  # the field manager of the allocatable GPUs `sim fault` changes
# The sim's GPU nodes; `type=kwok` would also name its system node, which has no GPU to fault.
GPU_NODES = "nvidia.com/gpu.present=true"


def kernel_log_dir(root: Path) -> Path:
    """Where the simulated nodes' kernel logs are: `<node>.log` each."""
    return root / KERNEL_LOGS


@dataclass(frozen=True)
class FaultKind:
    xid: int | None  # the kernel line's Xid code
    burnin: Fault | None  # the GPU agent's fault on the GPU
    summary: str


# The Xid messages as the driver prints them (NVIDIA's Xid catalog); the PCI address is the GPU's.
XID_MESSAGES = {
    79: "pid=0, name=python, GPU has fallen off the bus.",
    48: "pid=2001, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer.",
    13: "pid=2001, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
}
KINDS: dict[str, FaultKind] = {
    "xid79": FaultKind(
        79,
        "xid",
        "the GPU fell off the bus: an Xid 79 kernel line, the GPU gone from allocatable, an Xid 79 in burn-in's "
        "kernel log (node unusable: the controller quarantines it and requeues its jobs)",
    ),
    "lost-gpu": FaultKind(
        None,
        "missing",
        "the device plugin lost the GPU: one GPU fewer in allocatable, not listed by nvidia-smi in burn-in "
        "(degraded: quarantined once missing longer than gpu_lost_grace_seconds; its jobs drain)",
    ),
    "ecc": FaultKind(
        48,
        "ecc",
        "an uncorrectable ECC error: an Xid 48 kernel line, the GPU gone from allocatable, uncorrected ECC errors "
        "and a failing DCGM memory test in burn-in (quarantined; its jobs drain)",
    ),
    "xid13": FaultKind(
        13,
        None,
        "an application's error (graphics exception): an Xid 13 kernel line; the node stays in service",
    ),
    "slow": FaultKind(None, "slow", "the GPU reaches 40 % of its BF16 peak in burn-in (found by a burn-in only)"),
    "sdc": FaultKind(
        None, "sdc", "silent data corruption: burn-in's matmul digest differs from its peers' (a burn-in only)"
    ),
}
# Burn-in faults whose GPU the device plugin no longer offers: a GPU it cannot see, and one with a critical Xid (79,
# 48; it ignores only the applications' 13, 31, 43, 45, 68, 109), which it marks Unhealthy (docs/design/sim-faults.md).
GONE_FROM_ALLOCATABLE: tuple[Fault, ...] = ("xid", "missing", "ecc")


@dataclass(frozen=True)
class Injected:
    node: str
    kind: str
    gpu: int
    signals: list[str]


def kernel_line(code: int, bus_id: str, uptime: float) -> str:
    """A kernel log line of Xid `code` on the GPU at `bus_id` (nvidia-smi's form), as dmesg prints it."""
    return f"[{uptime:12.6f}] NVRM: Xid (PCI:{bus_id[4:]}): {code}, {XID_MESSAGES[code]}"


def faults_text(faults: Mapping[int, Fault]) -> str | None:
    """The GPU agent's annotation for `faults` (None: no fault)."""
    return ",".join(f"{gpu}={kind}" for gpu, kind in sorted(faults.items())) or None


def allocatable(capacity: int, faults: Mapping[int, Fault]) -> int:
    return capacity - sum(1 for kind in faults.values() if kind in GONE_FROM_ALLOCATABLE)


def fault_kind(name: str) -> FaultKind:
    kind = KINDS.get(name)
    if kind is None:
        raise UsageError(f"--kind {name}: no such fault", hint=f"one of: {', '.join(KINDS)}")
    return kind


def gpu_node(kube: Kube, name: str) -> tuple[dict[str, Any], int, dict[int, Fault]]:
    """The node, its GPU capacity and its injected faults; UsageError for a node that is not a fake GPU node."""
    node = kube.get("v1", "Node", name)
    if node is None:
        names = sorted(n["metadata"]["name"] for n in kube.list("v1", "Node", label_selector=GPU_NODES))
        raise UsageError(f"no node {name!r} in the simulated cluster", hint=f"its GPU nodes: {', '.join(names)}")
    capacity = int(str((node.get("status", {}).get("capacity") or {}).get(GPU_RESOURCE, "0")))
    if capacity == 0:
        raise UsageError(f"node {name!r} has no GPUs", hint=f"`kubectl get nodes -l {GPU_NODES}` lists the GPU nodes")
    annotations = node["metadata"].get("annotations") or {}
    try:
        faults = parse_faults(annotations.get(FAULTS_ANNOTATION))
    except FaultSpecError:
        faults = {}
    return node, capacity, faults


def inject(kube: Kube, root: Path, name: str, kind_name: str, gpu: int) -> Injected:
    """Drive the signals of fault `kind_name` on GPU `gpu` of node `name`; returns which ones."""
    kind = fault_kind(kind_name)
    node, capacity, faults = gpu_node(kube, name)
    if not 0 <= gpu < capacity:
        raise UsageError(f"--gpu {gpu}: node {name!r} has GPUs 0 to {capacity - 1}")
    signals = []
    if kind.xid is not None:
        created = parse_time(node["metadata"].get("creationTimestamp")) or time.time()
        bus_id = FakeNode(name, "", capacity).bus_id(gpu)
        logs = kernel_log_dir(root)
        logs.mkdir(parents=True, exist_ok=True)
        line = kernel_line(kind.xid, bus_id, max(0.0, time.time() - created))
        with (logs / f"{name}.log").open("a") as log:
            log.write(line + "\n")
        signals.append(f"kernel log {logs / (name + '.log')}: {line}")
    if kind.burnin is not None:
        wanted = {**faults, gpu: kind.burnin}
        signals += set_faults(kube, name, capacity, faults, wanted)
    return Injected(name, kind_name, gpu, signals)


def clear(kube: Kube, name: str) -> list[str]:
    """The node's GPUs healthy again: none missing from allocatable, no burn-in fault."""
    _, capacity, faults = gpu_node(kube, name)
    return set_faults(kube, name, capacity, faults, {})


def set_faults(
    kube: Kube, name: str, capacity: int, before: Mapping[int, Fault], wanted: Mapping[int, Fault]
) -> list[str]:
    signals = []
    kube.patch("v1", "Node", name, {"metadata": {"annotations": {FAULTS_ANNOTATION: faults_text(wanted)}}})
    signals.append(f"burn-in faults ({FAULTS_ANNOTATION}): {faults_text(wanted) or 'none'}")
    count = allocatable(capacity, wanted)
    if count != allocatable(capacity, before) or not wanted:
        status = {"allocatable": {GPU_RESOURCE: str(count)}}
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": status}
        kube.apply_status(node, DEVICE_PLUGIN)
        signals.append(f"allocatable {GPU_RESOURCE}: {count} of {capacity}")
    return signals

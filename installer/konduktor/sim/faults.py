"""GPU faults injected into the simulated cluster's nodes (`konduktor-install sim fault`), as the signals a real
node gives, so that the platform's own processes see and handle them:

- a kernel line (`NVRM: Xid ...`) appended to the node's kernel log, `<sim state>/kernel-logs/<node>.log`, which
  the sim's health controller reads (`kernel_log_files`), as it reads Loki on a real cluster;
- the GPU gone from the node's allocatable `nvidia.com/gpu`, as NVIDIA's device plugin reports a GPU it marked
  unhealthy (a status update by the field manager `nvidia-device-plugin`; kwok keeps it);
- the GPU agent's burn-in fault on that GPU (`sim.konduktor.ai/gpu-faults`, konduktor.sim.gpus), so that a burn-in or
  a requalification on the node sees the GPU as a real one would after the fault.

On a node whose GPUs are in MIG mode, `mig_instance` attributes the kernel line to one GPU instance of the GPU, as
the driver does (`(PCI:... GPU-I:01)`); a withdrawn GPU takes all its slices out of allocatable (`sim.sharing`).

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
from konduktor.gpu.sharing import MIG_RESOURCE_PREFIX
from konduktor.kube.client import Kube
from konduktor.kube.timestamps import parse_time
from konduktor.sim.gpus import FAULTS_ANNOTATION, FakeNode, Fault, FaultSpecError, parse_faults
from konduktor.sim.sharing import advertised, node_sharing, physical_gpus

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
    94: "pid=2001, name=python, Contained ECC error.",
    95: "pid=2001, name=python, Uncontained ECC error.",
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
    "xid94": FaultKind(
        94,
        None,
        "a contained ECC error: an Xid 94 kernel line; the driver contained it to the application that hit it (with "
        "--mig-instance, to that MIG instance), so the node stays in service",
    ),
    "xid95": FaultKind(
        95,
        "ecc",
        "an uncontained ECC error: an Xid 95 kernel line, the GPU (all its MIG instances) gone from allocatable, "
        "uncorrected ECC errors in burn-in (quarantined; the GPU needs a reset)",
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


def kernel_line(code: int, bus_id: str, uptime: float, gpu_instance: int | None = None) -> str:
    """A kernel log line of Xid `code` on the GPU at `bus_id` (nvidia-smi's form), as dmesg prints it; with
    `gpu_instance`, attributed to that MIG GPU instance as the driver writes it (`GPU-I:%02u`, kernel_rc.c)."""
    where = bus_id[4:] if gpu_instance is None else f"{bus_id[4:]} GPU-I:{gpu_instance:02d}"
    return f"[{uptime:12.6f}] NVRM: Xid (PCI:{where}): {code}, {XID_MESSAGES[code]}"


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


def device_plugin_status(node: Mapping[str, Any], faults: Mapping[int, Fault]) -> dict[str, dict[str, str]]:
    """The node's GPU resources as the device plugin advertises them: every GPU in capacity, the healthy ones in
    allocatable, each whole or as its sharing group's slices. `sim fault` and the GPU agent's stand-in for the GPU
    Operator both write exactly this, as the one field manager `nvidia-device-plugin`."""
    metadata = node.get("metadata", {})
    sharing = node_sharing(metadata.get("labels") or {}, metadata.get("annotations") or {})
    gpus = physical_gpus(node)
    return {"capacity": advertised(sharing, gpus), "allocatable": advertised(sharing, allocatable(gpus, faults))}


def gpu_node(kube: Kube, name: str) -> tuple[dict[str, Any], int, dict[int, Fault]]:
    """The node, its GPUs (sliced or not) and its injected faults; UsageError for a node that is not a fake GPU
    node."""
    node = kube.get("v1", "Node", name)
    if node is None:
        names = sorted(n["metadata"]["name"] for n in kube.list("v1", "Node", label_selector=GPU_NODES))
        raise UsageError(f"no node {name!r} in the simulated cluster", hint=f"its GPU nodes: {', '.join(names)}")
    capacity = physical_gpus(node)
    if capacity == 0:
        raise UsageError(f"node {name!r} has no GPUs", hint=f"`kubectl get nodes -l {GPU_NODES}` lists the GPU nodes")
    annotations = node["metadata"].get("annotations") or {}
    try:
        faults = parse_faults(annotations.get(FAULTS_ANNOTATION))
    except FaultSpecError:
        faults = {}
    return node, capacity, faults


def inject(kube: Kube, root: Path, name: str, kind_name: str, gpu: int, mig_instance: int | None = None) -> Injected:
    """Drive the signals of fault `kind_name` on GPU `gpu` of node `name` (its MIG GPU instance `mig_instance`);
    returns which ones."""
    kind = fault_kind(kind_name)
    node, capacity, faults = gpu_node(kube, name)
    if not 0 <= gpu < capacity:
        raise UsageError(f"--gpu {gpu}: node {name!r} has GPUs 0 to {capacity - 1}")
    if mig_instance is not None:
        check_mig_instance(node, kind_name, mig_instance)
    signals = []
    if kind.xid is not None:
        created = parse_time(node["metadata"].get("creationTimestamp")) or time.time()
        bus_id = FakeNode(name, "", capacity).bus_id(gpu)
        logs = kernel_log_dir(root)
        logs.mkdir(parents=True, exist_ok=True)
        line = kernel_line(kind.xid, bus_id, max(0.0, time.time() - created), mig_instance)
        with (logs / f"{name}.log").open("a") as log:
            log.write(line + "\n")
        signals.append(f"kernel log {logs / (name + '.log')}: {line}")
    if kind.burnin is not None:
        wanted = {**faults, gpu: kind.burnin}
        signals += set_faults(kube, node, faults, wanted)
    return Injected(name, kind_name, gpu, signals)


def check_mig_instance(node: Mapping[str, Any], kind_name: str, mig_instance: int) -> None:
    """A fault attributed to a MIG instance needs an Xid and a node whose GPUs are in MIG mode, and an instance the
    layout has (numbered from 0 here, in the layout's order)."""
    name = node.get("metadata", {}).get("name", "")
    if KINDS[kind_name].xid is None:
        xids = ", ".join(k for k, v in KINDS.items() if v.xid is not None)
        raise UsageError(f"--mig-instance: {kind_name} writes no kernel line to attribute", hint=f"Xid kinds: {xids}")
    metadata = node.get("metadata", {})
    sharing = node_sharing(metadata.get("labels") or {}, metadata.get("annotations") or {})
    instances = sum(count for resource, count in sharing.per_gpu.items() if resource.startswith(MIG_RESOURCE_PREFIX))
    if sharing.way != "mig":
        raise UsageError(
            f"--mig-instance: node {name!r} has no MIG layout",
            hint="label it with one of its type's MIG groups: nvidia.com/mig.config=<group>",
        )
    if not 0 <= mig_instance < instances:
        raise UsageError(f"--mig-instance {mig_instance}: each GPU of node {name!r} has instances 0 to {instances - 1}")


def clear(kube: Kube, name: str) -> list[str]:
    """The node's GPUs healthy again: none missing from allocatable, no burn-in fault."""
    node, _, faults = gpu_node(kube, name)
    return set_faults(kube, node, faults, {})


def set_faults(
    kube: Kube, node: Mapping[str, Any], before: Mapping[int, Fault], wanted: Mapping[int, Fault]
) -> list[str]:
    signals = []
    name = node["metadata"]["name"]
    kube.patch("v1", "Node", name, {"metadata": {"annotations": {FAULTS_ANNOTATION: faults_text(wanted)}}})
    signals.append(f"burn-in faults ({FAULTS_ANNOTATION}): {faults_text(wanted) or 'none'}")
    status = device_plugin_status(node, wanted)
    if status != device_plugin_status(node, before) or not wanted:
        kube.apply_status(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": status}, DEVICE_PLUGIN
        )
        signals += [
            f"allocatable {resource}: {count} of {status['capacity'][resource]}"
            for resource, count in status["allocatable"].items()
            if status["capacity"][resource] != "0"
        ]
    return signals

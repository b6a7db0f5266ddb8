"""Kubernetes objects for a burn-in run, rendered as plain dicts; `konduktor.kube` applies them.

Per node: one Job pinned by node affinity, holding every GPU of the node, whose steps run one
after another as init containers (then the last step as the main container). Each step wraps its
tool in `timeout` and always exits 0 after printing an end line with the tool's exit code: the
exit code is data for the verdict (never trusted alone), and a failing step must not stop the
steps after it from collecting evidence.

Per node pair: an Indexed Job with two completions, one pod on each node, and a headless Service
so rank 0 has a stable DNS name (`<job>-0.<service>`); torchrun runs allreduce.py without MPI or
sshd (docs/design/burnin.md#node-pairs-and-bisection). Read the result from the log of completion index 0.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

from konduktor.burnin.parsers.passive import SECTION_MARKER
from konduktor.burnin.parsers.step import STEP_END_MARKER
from konduktor.burnin.thresholds import NcclAlgorithm
from konduktor.burnin.tiers import PAIR_STEP, BurnInOptions, Step
from konduktor.errors import UsageError
from konduktor.vocabulary import BURNIN_TIER_ANNOTATION, GPU_RESOURCE, HEALTH_TAINT_KEY, HOSTNAME_LABEL

Manifest = dict[str, Any]

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
RUN_LABEL = "konduktor.ai/burnin-run"
NODE_LABEL = "konduktor.ai/node"
PAIR_LABEL = "konduktor.ai/burnin-pair"
NODE_ANNOTATION = "konduktor.ai/node"  # the full name, when the label had to be shortened
PRIVILEGES_ANNOTATION = "konduktor.ai/privileges"
APP_LABEL = "app.kubernetes.io/name"
BURNIN_APP = "konduktor-burnin"  # every burn-in pod carries it; the simulated cluster's agent selects on it
SCRIPTS_DIR = "/opt/konduktor"
SCRIPT_FILES = ("matmul.py", "allreduce.py")
RENDEZVOUS_PORT = 29500
_NON_ROOT_UID = 1000
_NAME_MAX = 52  # Indexed Job pods are named <job>-<index>-<suffix>, and hostnames stop at 63

_RUN_ID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$")


def make_run_id(now: datetime) -> str:
    """A run id that sorts by time and is a valid label value: `20250101-120000`."""
    return now.strftime("%Y%m%d-%H%M%S")


def check_run_id(run_id: str) -> None:
    if not _RUN_ID.match(run_id):
        raise UsageError(
            f"burn-in run id {run_id!r} is not a DNS label of at most 20 characters",
            hint="use lowercase letters, digits and '-', e.g. 20250101-120000",
        )


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def dns_name(*parts: str, unique: str) -> str:
    """A DNS-1123 label: readable parts, cut to length, made unique by a hash of `unique`."""
    readable = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return f"{readable[: _NAME_MAX - 9].rstrip('-')}-{_short_hash(unique)}"


def label_value(value: str) -> str:
    """Node names may be 253 characters; label values stop at 63."""
    return value if len(value) <= 63 else f"{value[:54].rstrip('-.')}-{_short_hash(value)}"


def node_job_name(run_id: str, node: str) -> str:
    return dns_name("kb", run_id, node, unique=f"{run_id}/{node}")


def pair_name(run_id: str, nodes: tuple[str, str]) -> str:
    """Job and Service name of a node pair; the same for (a, b) and (b, a)."""
    return dns_name("kb", run_id, "pair", unique=f"{run_id}/{'/'.join(sorted(nodes))}")


def _labels(run_id: str, **extra: str) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: "konduktor",
        APP_LABEL: BURNIN_APP,
        RUN_LABEL: run_id,
        **extra,
    }


# --------------------------------------------------------------------------------------------
# The scripts ConfigMap.


def scripts_configmap(run_id: str, namespace: str) -> Manifest:
    """matmul.py and allreduce.py as files; each run carries the scripts it was judged with."""
    check_run_id(run_id)
    package = resources.files("konduktor.burnin")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": scripts_configmap_name(run_id), "namespace": namespace, "labels": _labels(run_id)},
        "data": {name: package.joinpath(name).read_text(encoding="utf-8") for name in SCRIPT_FILES},
    }


def scripts_configmap_name(run_id: str) -> str:
    return f"konduktor-burnin-{run_id}"


# --------------------------------------------------------------------------------------------
# Steps.


@dataclass(frozen=True)
class StepPrivileges:
    """What a step needs beyond a plain GPU container, and why (shown in the pod annotation)."""

    run_as_root: bool = False
    capabilities: tuple[str, ...] = ()
    privileged: bool = False
    writable_root: bool = False
    reason: str = ""


def step_privileges(step: Step, options: BurnInOptions) -> StepPrivileges:
    match step:
        case Step.PASSIVE:
            return StepPrivileges(
                run_as_root=True,
                capabilities=("SYSLOG",),
                reason="reads the kernel ring buffer (dmesg) for Xid lines; CAP_SYSLOG is the narrowest "
                "capability that allows it",
            )
        case Step.DCGM if options.dcgm_privilege == "privileged":
            return StepPrivileges(
                run_as_root=True,
                privileged=True,
                writable_root=True,
                reason="DCGM diagnostics run a host engine that drives the GPUs directly; privileged "
                "was chosen over CAP_SYS_ADMIN (docs/design/burnin.md#jobs-on-kubernetes)",
            )
        case Step.DCGM:
            return StepPrivileges(
                run_as_root=True,
                capabilities=("SYS_ADMIN",),
                writable_root=True,
                reason="DCGM diagnostics run a host engine that drives the GPUs directly and needs "
                "CAP_SYS_ADMIN; it writes its log under /var/log (docs/design/burnin.md#jobs-on-kubernetes)",
            )
        case _:
            return StepPrivileges()


def wrap_step(step: str, timeout_s: int, body: str) -> list[str]:
    """`sh -c` that runs `body` under `timeout`, then prints the end line and exits 0."""
    end = f'{STEP_END_MARKER} {{"step": "{step}", "exit_code": %d, "seconds": %d}}\\n'
    script = "\n".join(
        [
            "start=$(date +%s)",
            f"timeout --kill-after=30 {timeout_s} /bin/sh -c {shlex.quote(body)}",
            "rc=$?",
            f'printf \'{end}\' "$rc" "$(( $(date +%s) - start ))"',
            "exit 0",
        ]
    )
    return ["/bin/sh", "-c", script]


_GPU_QUERY = ",".join(
    [
        "index",
        "pci.bus_id",
        "uuid",
        "name",
        "ecc.mode.current",
        "ecc.errors.uncorrected.volatile.total",
        "ecc.errors.uncorrected.volatile.sram",
        "ecc.errors.corrected.volatile.sram",
        "retired_pages.pending",
        "clocks_event_reasons.active",
        "temperature.gpu",
        "power.draw",
        "clocks.sm",
    ]
)
_REMAP_QUERY = (
    "gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure"
)


def _section(name: str) -> str:
    return f"echo '{SECTION_MARKER}{name}'"


def step_body(step: Step, options: BurnInOptions, gpus: int) -> str:
    """The shell the step's container runs (inside `wrap_step`)."""
    match step:
        case Step.PASSIVE:
            old_query = _GPU_QUERY.replace("clocks_event_reasons", "clocks_throttle_reasons")
            return "\n".join(
                [
                    _section("gpu"),
                    # Drivers before 535 know only the old clock-event field name.
                    f"nvidia-smi --query-gpu={_GPU_QUERY} --format=csv,nounits 2>/dev/null"
                    f" || nvidia-smi --query-gpu={old_query} --format=csv,nounits",
                    _section("remapped-rows"),
                    f"nvidia-smi --query-remapped-rows={_REMAP_QUERY} --format=csv,nounits",
                    _section("nvlink"),
                    "nvidia-smi nvlink -s",
                    _section("uptime"),
                    "cat /proc/uptime",
                    _section("kernel-log"),
                    # The exit code comes first: without it an unreadable log looks clean.
                    'kernel_log="${TMPDIR:-/tmp}/kernel.log"',
                    'dmesg > "$kernel_log" 2>&1; echo "dmesg-exit: $?"',
                    "grep -E 'NVRM: Xid|SXid|nvidia-peermem|fallen off the bus' \"$kernel_log\" || true",
                ]
            )
        case Step.DCGM:
            # Without a reachable nv-hostengine, dcgmi starts an embedded one.
            return f"dcgmi diag -r {options.dcgm_level} -j"
        case Step.MATMUL:
            return (
                f"python {SCRIPTS_DIR}/matmul.py --devices all --size {options.matmul_size} "
                f"--seconds {options.matmul_seconds}"
            )
        case Step.NCCL:
            size = shlex.quote(options.nccl_bytes)
            return f"{options.images.nccl_tests_binary} -b {size} -e {size} -f 2 -g {gpus} -w 5 -n 20 -c 1"
        case Step.GPU_BURN:
            return f"gpu_burn -tc {options.gpu_burn_seconds}"
    raise AssertionError(step)


def _step_image(step: Step, options: BurnInOptions) -> str:
    images = options.images
    match step:
        case Step.PASSIVE | Step.DCGM:
            return images.dcgm
        case Step.MATMUL:
            return images.pytorch
        case Step.NCCL:
            return images.nccl_tests
        case Step.GPU_BURN:
            if images.gpu_burn is None:
                raise UsageError("the gpu-burn step needs an image", hint="set images.gpu_burn")
            return images.gpu_burn
    raise AssertionError(step)


_BASE_ENV = (
    {"name": "HOME", "value": "/tmp"},
    # Mounts nvidia-smi and NVML next to CUDA (NVIDIA container toolkit).
    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
    # CUDA numbers GPUs by PCI bus like nvidia-smi does, so GPU n means the same device everywhere.
    {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"},
)


def _security_context(privileges: StepPrivileges) -> dict[str, Any]:
    capabilities: dict[str, list[str]] = {"drop": ["ALL"]}
    if privileges.capabilities:
        capabilities["add"] = list(privileges.capabilities)
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": privileges.privileged,
        "readOnlyRootFilesystem": not privileges.writable_root,
        "capabilities": capabilities,
    }
    if privileges.privileged:
        context["privileged"] = True
    if privileges.run_as_root:
        context["runAsUser"] = 0
    else:
        context.update(runAsNonRoot=True, runAsUser=_NON_ROOT_UID, runAsGroup=_NON_ROOT_UID)
    return context


def _resources(gpus: int, options: BurnInOptions, extra: Mapping[str, int] | None = None) -> dict[str, Any]:
    # requests == limits: the node's GPUs are all ours, and Guaranteed QoS keeps the pod from
    # being the first evicted under memory pressure.
    amounts: dict[str, Any] = {GPU_RESOURCE: gpus, "cpu": options.cpu, "memory": options.memory, **(extra or {})}
    return {"requests": dict(amounts), "limits": dict(amounts)}


_VOLUME_MOUNTS = (
    {"name": "shm", "mountPath": "/dev/shm"},  # NCCL and PyTorch use shared memory between ranks
    {"name": "tmp", "mountPath": "/tmp"},
    {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
)


def _volumes(run_id: str) -> list[dict[str, Any]]:
    return [
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "scripts", "configMap": {"name": scripts_configmap_name(run_id), "defaultMode": 0o444}},
    ]


def step_container(step: Step, options: BurnInOptions, gpus: int) -> dict[str, Any]:
    env = list(_BASE_ENV)
    if step is Step.NCCL:
        # Pinned, because the goals differ per algorithm (docs/design/burnin.md#nccl-tests).
        nvls = "1" if options.nccl_algorithm is NcclAlgorithm.NVLS else "0"
        env += [{"name": "NCCL_NVLS_ENABLE", "value": nvls}, {"name": "NCCL_DEBUG", "value": "WARN"}]
    return {
        "name": step.value,
        "image": _step_image(step, options),
        "command": wrap_step(step.value, options.timeout_s(step), step_body(step, options, gpus)),
        "env": env,
        "resources": _resources(gpus, options),
        "securityContext": _security_context(step_privileges(step, options)),
        "volumeMounts": [dict(m) for m in _VOLUME_MOUNTS],
    }


def _privileges_note(steps: Sequence[tuple[str, StepPrivileges]]) -> str:
    return json.dumps({name: p.reason for name, p in steps if p.reason}, sort_keys=True)


def gpu_node_tolerations(extra: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    # Every effect of both keys: GPU nodes are tainted nvidia.com/gpu, and a quarantined node (health taint)
    # is exactly where a re-qualifying burn-in, or a preflight of that node, must run
    # (docs/design/burnin.md#jobs-on-kubernetes).
    return [
        {"key": GPU_RESOURCE, "operator": "Exists"},
        {"key": HEALTH_TAINT_KEY, "operator": "Exists"},
        *(dict(t) for t in extra),
    ]


def taint_tolerations(taints: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """Tolerations for the node's own taints: the Job is pinned to this one node and must run whatever state it
    is in (a cordon for repair, a vendor taint). The GPU and health taints are in `gpu_node_tolerations`."""
    tolerations: list[dict[str, str]] = []
    for taint in taints:
        if taint.get("key") in (GPU_RESOURCE, HEALTH_TAINT_KEY):
            continue
        toleration = {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}
        if toleration not in tolerations:
            tolerations.append(toleration)
    return tolerations


def pin_to_hostnames(hostnames: Sequence[str]) -> dict[str, Any]:
    # Node affinity, not spec.nodeName: nodeName skips the scheduler, so a busy node makes the pod
    # fail (OutOfcpu, OutOfnvidia.com/gpu) instead of waiting (docs/design/burnin.md#jobs-on-kubernetes).
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": list(hostnames)}]}
            ]
        }
    }


def _pod_spec(run_id: str, options: BurnInOptions, extra_tolerations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,  # the tools never talk to the API server
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "tolerations": gpu_node_tolerations(extra_tolerations),
        "volumes": _volumes(run_id),
    }
    if options.priority_class:
        spec["priorityClassName"] = options.priority_class
    return spec


def _check_gpus(gpus: int) -> None:
    if gpus < 1:
        raise UsageError(f"a burn-in needs at least one GPU, the node advertises {gpus}")


# --------------------------------------------------------------------------------------------
# Per-node Job.


def node_job(
    run_id: str,
    node: str,
    gpus: int,
    options: BurnInOptions,
    namespace: str,
    *,
    hostname: str | None = None,
    extra_tolerations: Sequence[Mapping[str, Any]] = (),
    slices: Mapping[str, int] | None = None,
) -> Manifest:
    """The burn-in Job of one node.

    `gpus` is the node's allocatable nvidia.com/gpu (all of them are requested); `hostname` is its
    `kubernetes.io/hostname` label when that differs from the node name; `extra_tolerations` are
    the cluster's own GPU-node taints. On a node whose GPUs are shared, `slices` is what the containers ask for
    instead of nvidia.com/gpu, and `gpus` the GPUs they see (`konduktor.burnin.sliced`).
    """
    check_run_id(run_id)
    _check_gpus(gpus)
    containers = [step_container(step, options, gpus) for step in options.steps]
    for container in containers if slices else ():
        for amounts in container["resources"].values():
            del amounts[GPU_RESOURCE]
            amounts.update(slices or {})
    labels = _labels(run_id, **{NODE_LABEL: label_value(node), "app.kubernetes.io/component": "node-burnin"})
    pod = _pod_spec(run_id, options, extra_tolerations)
    pod["affinity"] = {"nodeAffinity": pin_to_hostnames([hostname or node])}
    pod["initContainers"] = containers[:-1]
    pod["containers"] = containers[-1:]
    privileges = [(step.value, step_privileges(step, options)) for step in options.steps]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": node_job_name(run_id, node),
            "namespace": namespace,
            "labels": labels,
            "annotations": {NODE_ANNOTATION: node, BURNIN_TIER_ANNOTATION: options.tier.value},
        },
        "spec": {
            "backoffLimit": 0,  # a burn-in that failed once has answered; a retry would hide flakiness
            "activeDeadlineSeconds": options.deadline_s,
            "ttlSecondsAfterFinished": options.ttl_after_finished_s,
            "template": {
                "metadata": {"labels": labels, "annotations": {PRIVILEGES_ANNOTATION: _privileges_note(privileges)}},
                "spec": pod,
            },
        },
    }


# --------------------------------------------------------------------------------------------
# Node pair: Indexed Job + headless Service.

# torchrun start, rendezvous and an 8 GiB all_reduce; 2-5 min typical (docs/design/burnin.md#tiers)
PAIR_TIMEOUT_S = 1200


def pair_objects(
    run_id: str,
    nodes: tuple[str, str],
    gpus: int,
    options: BurnInOptions,
    namespace: str,
    *,
    hostnames: tuple[str, str] | None = None,
    rdma_resources: Mapping[str, int] | None = None,
    extra_tolerations: Sequence[Mapping[str, Any]] = (),
) -> tuple[Manifest, Manifest]:
    """(headless Service, Indexed Job) for a two-node all_reduce; `gpus` per node.

    `rdma_resources` (e.g. {"rdma/ib": 1}) are requested per pod; RDMA then needs IPC_LOCK to pin
    memory for the NIC (docs/design/burnin.md#jobs-on-kubernetes).
    """
    check_run_id(run_id)
    _check_gpus(gpus)
    if nodes[0] == nodes[1]:
        raise UsageError(f"a node pair needs two different nodes, got {nodes[0]} twice")
    name = pair_name(run_id, nodes)
    pair_id = _short_hash("/".join(sorted(nodes)))
    labels = _labels(run_id, **{PAIR_LABEL: pair_id, "app.kubernetes.io/component": "pair-burnin"})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "clusterIP": "None",
            "selector": {RUN_LABEL: run_id, PAIR_LABEL: pair_id},
            # Rank 0 must be resolvable before any readiness; the pods have no readiness probe.
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}],
        },
    }
    master = f"{name}-0.{name}"
    body = "\n".join(
        [
            f"until getent hosts {master} >/dev/null; do sleep 2; done",
            f'exec torchrun --nnodes=2 --nproc-per-node={gpus} --node-rank="$JOB_COMPLETION_INDEX" '
            f"--master-addr={master} --master-port={RENDEZVOUS_PORT} {SCRIPTS_DIR}/allreduce.py "
            f"--bytes {options.pair_bytes}",
        ]
    )
    rdma = dict(rdma_resources or {})
    privileges = (
        StepPrivileges(
            run_as_root=True,
            capabilities=("IPC_LOCK",),
            reason="RDMA registers (pins) GPU and host memory with the NIC, which needs IPC_LOCK",
        )
        if rdma
        else StepPrivileges()
    )
    container = {
        "name": PAIR_STEP,
        "image": options.images.pytorch,
        "command": wrap_step(PAIR_STEP, PAIR_TIMEOUT_S, body),
        "env": [*_BASE_ENV, {"name": "NCCL_DEBUG", "value": "WARN"}],
        "ports": [{"name": "rendezvous", "containerPort": RENDEZVOUS_PORT}],
        "resources": _resources(gpus, options, rdma),
        "securityContext": _security_context(privileges),
        "volumeMounts": [dict(m) for m in _VOLUME_MOUNTS],
    }
    pod = _pod_spec(run_id, options, extra_tolerations)
    pod["subdomain"] = name
    pod["affinity"] = {
        "nodeAffinity": pin_to_hostnames(list(hostnames or nodes)),
        # One pod per node: without this both ranks could land on the same node and test no fabric.
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {PAIR_LABEL: pair_id, RUN_LABEL: run_id}},
                    "topologyKey": HOSTNAME_LABEL,
                }
            ]
        },
    }
    pod["containers"] = [container]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {"konduktor.ai/burnin-pair-nodes": ",".join(nodes)},
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 0,
            "activeDeadlineSeconds": PAIR_TIMEOUT_S + options.schedule_slack_s,
            "ttlSecondsAfterFinished": options.ttl_after_finished_s,
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {PRIVILEGES_ANNOTATION: _privileges_note([(PAIR_STEP, privileges)])},
                },
                "spec": pod,
            },
        },
    }
    return service, job

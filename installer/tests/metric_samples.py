"""Sample series for every metric of the inventory, as `promtool test rules` input, describing one small cluster.

Two H100 nodes; team-a runs train-0 on gpu-node-1 (2 GPUs, one busy, one idle) and borrows 2 GPUs from
team-b; team-b runs eval-0 on gpu-node-2 (1 idle GPU). gpu-node-2 lost a GPU, reported Xid 79 and a double-bit
ECC error, and is quarantined. The series are consistent with one another, so joins between exporters (DCGM's
Hostname with kube-state-metrics' node, a pod's namespace with its team) find their partners.
Every series has 1-minute samples for `MINUTES` minutes; queries are evaluated at `EVAL_TIME`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from konduktor.observability.metrics import DETECTION_LATENCY_BUCKETS, HEALTH_CONTROLLER_JOB

MINUTES = 150
EVAL_TIME = "2h"
H100 = "NVIDIA-H100-80GB-HBM3"
# Labels Prometheus itself adds from service discovery; the inventory lists only the exporters' own labels.
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "service", "endpoint", "container"})


@dataclass(frozen=True)
class Series:
    name: str
    labels: Mapping[str, str]
    values: str

    def promtool(self) -> dict[str, str]:
        selector = ", ".join(f'{key}="{value}"' for key, value in self.labels.items())
        return {"series": f"{self.name}{{{selector}}}", "values": self.values}


def constant(value: float | str) -> str:
    if isinstance(value, str):  # +Inf and NaN cannot use the expanding `ax n` notation
        return " ".join([value] * (MINUTES + 1))
    return f"{value}x{MINUTES}"


def rising(per_minute: float) -> str:
    return f"0+{per_minute}x{MINUTES}"


# -- dcgm-exporter: one series per GPU; the target is the exporter pod in gpu-operator -----------------------

GPUS = (
    # node, gpu index, UUID, the pod holding it (namespace, pod, container) or None, utilisation %
    ("gpu-node-1", "0", "GPU-1f2e3d4c-0000", ("team-a", "train-0", "trainer"), 95),
    ("gpu-node-1", "1", "GPU-1f2e3d4c-0001", ("team-a", "train-0", "trainer"), 0),
    ("gpu-node-2", "0", "GPU-2a3b4c5d-0000", ("team-b", "eval-0", "eval"), 0),
    ("gpu-node-2", "1", "GPU-2a3b4c5d-0001", None, 0),
)
FAULTY_GPU = ("gpu-node-2", "0")


def _dcgm_labels(node: str, gpu: str, uuid: str, holder: tuple[str, str, str] | None) -> dict[str, str]:
    labels = {
        "job": "nvidia-dcgm-exporter",
        "instance": f"10.0.1.{node[-1]}:9400",
        "namespace": "gpu-operator",
        "pod": f"nvidia-dcgm-exporter-{node[-1]}x7kq",
        "gpu": gpu,
        "UUID": uuid,
        "device": f"nvidia{gpu}",
        "modelName": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": f"00000000:1{gpu}:00.0",
        "Hostname": node,
        "DCGM_FI_DRIVER_VERSION": "580.95.05",
    }
    if holder:
        labels.update(exported_namespace=holder[0], exported_pod=holder[1], exported_container=holder[2])
    return labels


def _dcgm() -> list[Series]:
    found = []
    for node, gpu, uuid, holder, utilisation in GPUS:
        labels = _dcgm_labels(node, gpu, uuid, holder)
        faulty = (node, gpu) == FAULTY_GPU
        per_gpu = {
            "DCGM_FI_DEV_GPU_UTIL": constant(utilisation),
            "DCGM_FI_DEV_GPU_TEMP": constant(71 if utilisation else 38),
            "DCGM_FI_DEV_MEMORY_TEMP": constant(64 if utilisation else 35),
            "DCGM_FI_DEV_XID_ERRORS": constant(79 if faulty else 0),
            # Throttled 30 ms a minute for temperature, 12 ms for power (the counters count microseconds).
            "DCGM_FI_DEV_THERMAL_VIOLATION": rising(30000),
            "DCGM_FI_DEV_POWER_VIOLATION": rising(12000),
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": rising(1),
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": rising(1) if faulty else constant(0),
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": constant(2 if faulty else 0),
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": constant(1),
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": constant(1 if faulty else 0),
            "DCGM_FI_DEV_ROW_REMAP_PENDING": constant(1 if faulty else 0),
        }
        found += [Series(name, labels, values) for name, values in per_gpu.items()]
    return found


# -- kube-state-metrics -------------------------------------------------------------------------------------

KSM = {"job": "kube-state-metrics", "instance": "10.0.0.6:8080"}
PODS = (
    # namespace, pod, node, GPUs requested, phase
    ("team-a", "train-0", "gpu-node-1", 2, "Running"),
    ("team-b", "eval-0", "gpu-node-2", 1, "Running"),
    ("team-a", "train-old-0", "gpu-node-1", 4, "Succeeded"),
)
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def _kube_state_metrics() -> list[Series]:
    found = []
    for node, allocatable in (("gpu-node-1", 8), ("gpu-node-2", 7)):
        gpu = {**KSM, "node": node, "resource": "nvidia_com_gpu", "unit": "integer"}
        found += [
            Series("kube_node_status_capacity", gpu, constant(8)),
            Series("kube_node_status_allocatable", gpu, constant(allocatable)),
            Series("kube_node_labels", {**KSM, "node": node, "label_nvidia_com_gpu_product": H100}, constant(1)),
        ]
        healthy = node != "gpu-node-2"
        for status, value in (("true", healthy), ("false", not healthy), ("unknown", False)):
            labels = {**KSM, "node": node, "condition": "GPUHealthy", "status": status}
            found.append(Series("kube_node_status_condition", labels, constant(int(value))))
    cpu = {**KSM, "node": "cpu-node-1", "resource": "cpu", "unit": "core"}
    found += [
        Series("kube_node_status_capacity", cpu, constant(64)),
        Series("kube_node_status_allocatable", cpu, constant(62)),
        Series("kube_node_labels", {**KSM, "node": "cpu-node-1"}, constant(1)),
        Series(
            "kube_node_spec_taint",
            {
                **KSM,
                "node": "gpu-node-2",
                "key": "konduktor.ai/gpu-health",
                "value": "unhealthy",
                "effect": "NoSchedule",
            },
            constant(1),
        ),
    ]
    for namespace in ("team-a", "team-b"):
        labels = {**KSM, "namespace": namespace, "label_konduktor_ai_team": namespace}
        found.append(Series("kube_namespace_labels", labels, constant(1)))
    found.append(Series("kube_namespace_labels", {**KSM, "namespace": "kube-system"}, constant(1)))
    for index, (namespace, pod, node, gpus, phase) in enumerate(PODS):
        uid = f"0c5e{index:04d}-7d2a-4b6e-9f10-3a4b5c6d7e8f"
        requests = {
            **KSM,
            "namespace": namespace,
            "pod": pod,
            "uid": uid,
            "container": pod.split("-")[0],
            "node": node,
            "resource": "nvidia_com_gpu",
            "unit": "integer",
        }
        found.append(Series("kube_pod_container_resource_requests", requests, constant(gpus)))
        for each in PHASES:
            labels = {**KSM, "namespace": namespace, "pod": pod, "uid": uid, "phase": each}
            found.append(Series("kube_pod_status_phase", labels, constant(int(each == phase))))
        job = pod.rsplit("-", 1)[0]
        owner = {"owner_kind": "Job", "owner_name": job, "owner_is_controller": "true"}
        found.append(
            Series("kube_pod_owner", {**KSM, "namespace": namespace, "pod": pod, "uid": uid, **owner}, constant(1))
        )
        of_job = {**KSM, "namespace": namespace, "job_name": job}
        created = 1_780_000_000 + 600 * index
        found += [
            Series("kube_job_created", of_job, constant(created)),
            Series("kube_job_status_start_time", of_job, constant(created + 30)),
            Series("kube_job_spec_parallelism", of_job, constant(1)),
            Series("kube_job_labels", {**of_job, "label_kueue_x_k8s_io_priority_class": "standard"}, constant(1)),
        ]
        if phase == "Succeeded":
            found.append(Series("kube_job_status_completion_time", of_job, constant(created + 3630)))
    return found


# -- Kueue ----------------------------------------------------------------------------------------------------

KUEUE = {"job": "kueue-controller-manager-metrics-service", "instance": "10.0.0.7:8443", "replica_role": "leader"}


class Quota(NamedTuple):
    nominal: int
    usage: int
    borrowing_limit: float | str  # Kueue reports +Inf for no limit
    lending_limit: float | str


# team-a: nominal 8, uses 10 (borrows 2); team-b: nominal 8, uses 2, lends at most 6.
QUOTAS = {"team-a": Quota(8, 10, 4, "+Inf"), "team-b": Quota(8, 2, "+Inf", 6)}
# GPU slices (sharing groups' flavors): team-a uses all 8 of its MIG 1g.10gb instances, team-b 4 of its 16
# time-sliced shares.
SLICES = {
    "team-a": ("h100-mig", "nvidia.com/mig-1g.10gb", Quota(8, 8, "+Inf", "+Inf")),
    "team-b": ("h100-shared", "nvidia.com/gpu.shared", Quota(16, 4, "+Inf", 8)),
}
WAIT_BUCKETS = (("1", 0), ("10", 1), ("60", 2), ("300", 3), ("+Inf", 3))


def _histogram(
    name: str, labels: Mapping[str, str], buckets: tuple[tuple[str, float], ...], total: float
) -> list[Series]:
    """Observations each minute: `buckets` holds the cumulative count per bucket per minute."""
    found = [Series(f"{name}_bucket", {**labels, "le": le}, rising(count)) for le, count in buckets]
    count = buckets[-1][1]
    return [*found, Series(f"{name}_sum", labels, rising(total)), Series(f"{name}_count", labels, rising(count))]


def _kueue() -> list[Series]:
    found = []
    for team, quota in QUOTAS.items():
        for resource in ("nvidia.com/gpu", "cpu"):
            labels = {**KUEUE, "cohort": "gpu-lab", "cluster_queue": team, "flavor": "h100", "resource": resource}
            scale = 1 if resource == "nvidia.com/gpu" else 24
            found += [
                Series("kueue_cluster_queue_nominal_quota", labels, constant(quota.nominal * scale)),
                Series("kueue_cluster_queue_resource_usage", labels, constant(quota.usage * scale)),
                Series("kueue_cluster_queue_borrowing_limit", labels, constant(quota.borrowing_limit)),
                Series("kueue_cluster_queue_lending_limit", labels, constant(quota.lending_limit)),
            ]
        flavor, resource, sliced = SLICES[team]
        labels = {**KUEUE, "cohort": "gpu-lab", "cluster_queue": team, "flavor": flavor, "resource": resource}
        found += [
            Series("kueue_cluster_queue_nominal_quota", labels, constant(sliced.nominal)),
            Series("kueue_cluster_queue_resource_usage", labels, constant(sliced.usage)),
            Series("kueue_cluster_queue_borrowing_limit", labels, constant(sliced.borrowing_limit)),
            Series("kueue_cluster_queue_lending_limit", labels, constant(sliced.lending_limit)),
        ]
        queue = {**KUEUE, "cluster_queue": team}
        pending = 3 if team == "team-a" else 0
        found += [
            Series(
                "kueue_cluster_queue_weighted_share", {**queue, "cohort": "gpu-lab"}, constant(0.25 if pending else 0)
            ),
            Series("kueue_pending_workloads", {**queue, "status": "active"}, constant(pending)),
            Series("kueue_pending_workloads", {**queue, "status": "inadmissible"}, constant(0)),
            Series("kueue_admitted_active_workloads", queue, constant(3 if pending else 1)),
            Series("kueue_admitted_workloads_total", {**queue, "priority_class": "standard"}, rising(1)),
            Series(
                "kueue_evicted_workloads_total",
                {**queue, "reason": "Preempted", "priority_class": "opportunistic"},
                rising(0.5),
            ),
            *_histogram(
                "kueue_admission_wait_time_seconds", {**queue, "priority_class": "standard"}, WAIT_BUCKETS, 200
            ),
        ]
        local_queue = {**KUEUE, "name": "default", "namespace": team}
        found += [
            Series("kueue_local_queue_pending_workloads", {**local_queue, "status": "active"}, constant(pending)),
            Series("kueue_local_queue_admitted_active_workloads", local_queue, constant(3 if pending else 1)),
            Series(
                "kueue_local_queue_admitted_workloads_total", {**local_queue, "priority_class": "standard"}, rising(1)
            ),
            Series(
                "kueue_local_queue_evicted_workloads_total",
                {**local_queue, "reason": "Preempted", "priority_class": "opportunistic"},
                rising(0.5),
            ),
            Series(
                "kueue_local_queue_resource_usage",
                {**local_queue, "flavor": "h100", "resource": "nvidia.com/gpu"},
                constant(quota.usage),
            ),
            Series("kueue_local_queue_status", {**local_queue, "active": "True"}, constant(1)),
            Series("kueue_local_queue_status", {**local_queue, "active": "False"}, constant(0)),
            *_histogram(
                "kueue_local_queue_admission_wait_time_seconds",
                {**local_queue, "priority_class": "standard"},
                WAIT_BUCKETS,
                200,
            ),
        ]
    # A follower replica repeats the leader's gauges; queries must not count it.
    follower = {**KUEUE, "replica_role": "follower", "cohort": "gpu-lab", "cluster_queue": "team-a"}
    found.append(
        Series(
            "kueue_cluster_queue_nominal_quota",
            {**follower, "flavor": "h100", "resource": "nvidia.com/gpu"},
            constant(8),
        )
    )
    found.append(
        Series(
            "kueue_preempted_workloads_total",
            {**KUEUE, "preempting_cluster_queue": "team-b", "reason": "InCohortReclamation"},
            rising(0.5),
        )
    )
    return found


# -- the health controller (the contract in konduktor.observability.metrics) and Prometheus's `up` ------------

CONTROLLER = {"job": HEALTH_CONTROLLER_JOB, "instance": "10.0.0.5:8080"}


def _controller() -> list[Series]:
    latency = tuple((str(bound), index + 1.0) for index, bound in enumerate(DETECTION_LATENCY_BUCKETS))
    return [
        Series("up", CONTROLLER, constant(1)),
        Series(
            "konduktor_gpu_faults_total",
            {**CONTROLLER, "node": "gpu-node-2", "kind": "xid", "code": "79", "reason": "Xid79"},
            rising(1),
        ),
        Series(
            "konduktor_gpu_faults_total",
            {**CONTROLLER, "node": "gpu-node-2", "kind": "dcgm", "reason": "EccDoubleBitError"},
            rising(0.2),
        ),
        Series("konduktor_quarantined_nodes", CONTROLLER, constant(1)),
        Series("konduktor_node_quarantined", {**CONTROLLER, "node": "gpu-node-2", "reason": "Xid79"}, constant(1)),
        Series("konduktor_gpu_nodes", CONTROLLER, constant(2)),
        Series("konduktor_quarantine_breaker_tripped", CONTROLLER, constant(0)),
        Series("konduktor_quarantine_breaker_window_quarantines", CONTROLLER, constant(1)),
        Series("konduktor_quarantine_breaker_limit", CONTROLLER, constant(1)),
        Series("konduktor_quarantines_total", {**CONTROLLER, "reason": "Xid79"}, rising(0.1)),
        Series("konduktor_quarantines_blocked_total", CONTROLLER, rising(0.1)),
        Series("konduktor_releases_total", CONTROLLER, rising(0.1)),
        Series("konduktor_requalifications_total", {**CONTROLLER, "verdict": "PASS"}, rising(0.1)),
        *_histogram(
            "konduktor_detection_latency_seconds",
            {**CONTROLLER, "source": "kernel_log"},
            (*latency, ("+Inf", latency[-1][1])),
            30,
        ),
        Series(
            "konduktor_api_errors_total", {**CONTROLLER, "verb": "PATCH", "resource": "nodes", "code": "409"}, rising(1)
        ),
        Series("konduktor_signal_source_up", {**CONTROLLER, "source": "loki"}, constant(1)),
        Series("konduktor_signal_source_up", {**CONTROLLER, "source": "prometheus"}, constant(1)),
        Series("konduktor_dry_run", CONTROLLER, constant(0)),
        Series("konduktor_withheld_actions_total", {**CONTROLLER, "action": "taint"}, rising(0.1)),
    ]


def cluster() -> list[Series]:
    """Every sample series of the cluster described above."""
    return [*_dcgm(), *_kube_state_metrics(), *_kueue(), *_controller()]

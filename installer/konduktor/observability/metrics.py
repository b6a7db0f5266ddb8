"""Every metric the dashboards and alert rules may query, who exports it, and where its name was taken from.

The inventory is data, so tests can hold each query to it: a panel or rule naming a metric that is not listed
here fails, and every entry must be used by a dashboard or a rule. Upstream names come from the exporters'
own sources at the versions the platform pins; the health controller's metrics are defined here, and
`HEALTH_CONTROLLER_METRICS` is the contract its implementation follows.

Labels are those the exporter itself sets. Prometheus adds `job` and `instance` to every series (and
`namespace`, `pod`, `service`, `endpoint` when a ServiceMonitor discovers the target); where an exporter's
label collides with a target label, Prometheus renames the exporter's to `exported_<label>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import get_args

from konduktor.burnin.results import Verdict
from konduktor.gpu.catalog import FindingKind
from konduktor.tools.catalog import load_tools


class Exporter(StrEnum):
    DCGM = "dcgm-exporter"
    KUEUE = "kueue"
    KUBE_STATE_METRICS = "kube-state-metrics"
    HEALTH_CONTROLLER = "konduktor-health-controller"
    # `up` is written by Prometheus itself for every scrape target.
    PROMETHEUS = "prometheus"


class MetricType(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Metric:
    """One metric family. `source` names the upstream file or document the name and labels were read from;
    `requires` says what must be switched on for it to exist at all."""

    name: str
    type: MetricType
    exporter: Exporter
    labels: tuple[str, ...]
    help: str
    source: str
    requires: str = ""

    def series_names(self) -> tuple[str, ...]:
        """The names its samples carry: a histogram is stored as three series families."""
        if self.type is MetricType.HISTOGRAM:
            return tuple(self.name + suffix for suffix in HISTOGRAM_SUFFIXES)
        return (self.name,)


# --- dcgm-exporter (NVIDIA/dcgm-exporter, the image the GPU Operator v26.7.0 runs) -----------------------

DCGM_COUNTERS = "NVIDIA/dcgm-exporter etc/default-counters.csv"
DCGM_OPT_IN = (
    "the field in the exporter's counters CSV (commented out in default-counters.csv; the health controller "
    "reads it too)"
)
# `Hostname` is the Kubernetes node name: the exporter takes it from NODE_NAME, which its DaemonSet sets from
# spec.nodeName (internal/pkg/hostname/hostname.go). The exported_* labels name the pod using the GPU
# (pod-resources mapping, DCGM_EXPORTER_KUBERNETES); they are renamed from namespace/pod/container because the
# ServiceMonitor keeps honorLabels false, and they are absent while no pod holds the GPU.
DCGM_LABELS = (
    "gpu",
    "UUID",
    "device",
    "modelName",
    "pci_bus_id",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "exported_namespace",
    "exported_pod",
    "exported_container",
)


def _dcgm(name: str, metric_type: MetricType, help_text: str, *, requires: str = "", source: str = "") -> Metric:
    return Metric(name, metric_type, Exporter.DCGM, DCGM_LABELS, help_text, source or DCGM_COUNTERS, requires)


DCGM_METRICS = (
    _dcgm("DCGM_FI_DEV_GPU_UTIL", MetricType.GAUGE, "GPU utilization (in %)."),
    _dcgm("DCGM_FI_DEV_GPU_TEMP", MetricType.GAUGE, "GPU temperature (in C)."),
    _dcgm("DCGM_FI_DEV_MEMORY_TEMP", MetricType.GAUGE, "Memory temperature (in C)."),
    _dcgm("DCGM_FI_DEV_XID_ERRORS", MetricType.GAUGE, "Value of the last XID error encountered."),
    _dcgm(
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        MetricType.COUNTER,
        "Throttling duration due to thermal constraints (in us).",
        requires=DCGM_OPT_IN,
    ),
    _dcgm(
        "DCGM_FI_DEV_POWER_VIOLATION",
        MetricType.COUNTER,
        "Throttling duration due to power constraints (in us).",
        requires=DCGM_OPT_IN,
    ),
    _dcgm(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        MetricType.COUNTER,
        "Total number of single-bit volatile ECC errors.",
        requires=DCGM_OPT_IN,
    ),
    _dcgm(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        MetricType.COUNTER,
        "Total number of double-bit volatile ECC errors.",
        requires=DCGM_OPT_IN,
    ),
    _dcgm(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        MetricType.COUNTER,
        "Number of remapped rows for uncorrectable errors.",
    ),
    _dcgm(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        MetricType.COUNTER,
        "Number of remapped rows for correctable errors.",
    ),
    _dcgm("DCGM_FI_DEV_ROW_REMAP_FAILURE", MetricType.GAUGE, "Whether remapping of rows has failed."),
    _dcgm(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        MetricType.GAUGE,
        "Whether row remapping is pending a GPU reset.",
        source="DCGM field 396 DCGM_FI_DEV_ROW_REMAP_PENDING (dcgm_fields.h); not listed in default-counters.csv",
        requires="the field added to the exporter's counters CSV",
    ),
)


# --- Kueue (sigs.k8s.io/kueue, at the version the platform pins: konduktor/tools/versions.toml) -------------

KUEUE_PINNED = load_tools()["kueue"].version
KUEUE_METRICS_SOURCE = (
    f"kubernetes-sigs/kueue@{KUEUE_PINNED} pkg/metrics/metrics.go (docs: site/content/en/docs/reference/metrics.md)"
)
KUEUE_CQ_RESOURCES = "metrics.enableClusterQueueResources: true in the Kueue Configuration"
KUEUE_LQ_METRICS = "feature gate LocalQueueMetrics (beta, on by default since Kueue 0.17)"
# Every Kueue series carries replica_role (leader, follower or standalone); queries keep replica_role!="follower"
# so that an HA install is not counted twice.
CQ_QUOTA_LABELS = ("cohort", "cluster_queue", "flavor", "resource", "replica_role")
LQ_LABELS = ("name", "namespace", "replica_role")


def _kueue(
    name: str, metric_type: MetricType, labels: tuple[str, ...], help_text: str, *, requires: str = ""
) -> Metric:
    return Metric(name, metric_type, Exporter.KUEUE, labels, help_text, KUEUE_METRICS_SOURCE, requires)


KUEUE_METRICS = (
    _kueue(
        "kueue_pending_workloads",
        MetricType.GAUGE,
        ("cluster_queue", "status", "replica_role"),
        "Pending workloads per cluster_queue and status (active or inadmissible).",
    ),
    _kueue(
        "kueue_admitted_workloads_total",
        MetricType.COUNTER,
        ("cluster_queue", "priority_class", "replica_role"),
        "Admitted workloads per cluster_queue.",
    ),
    _kueue(
        "kueue_admitted_active_workloads",
        MetricType.GAUGE,
        ("cluster_queue", "replica_role"),
        "Admitted workloads that are active (unsuspended, not finished) per cluster_queue.",
    ),
    _kueue(
        "kueue_admission_wait_time_seconds",
        MetricType.HISTOGRAM,
        ("cluster_queue", "priority_class", "replica_role"),
        "Time from creation or requeue until admission, per cluster_queue.",
    ),
    _kueue(
        "kueue_evicted_workloads_total",
        MetricType.COUNTER,
        ("cluster_queue", "reason", "underlying_cause", "priority_class", "replica_role"),
        "Evicted workloads per cluster_queue and reason (Preempted, PodsReadyTimeout, NodeFailures, ...).",
    ),
    _kueue(
        "kueue_preempted_workloads_total",
        MetricType.COUNTER,
        ("preempting_cluster_queue", "reason", "replica_role"),
        "Workloads preempted, per preempting_cluster_queue and reason (InClusterQueue, InCohortReclamation, ...).",
    ),
    _kueue(
        "kueue_cluster_queue_nominal_quota",
        MetricType.GAUGE,
        CQ_QUOTA_LABELS,
        "The ClusterQueue's nominal quota per flavor and resource.",
        requires=KUEUE_CQ_RESOURCES,
    ),
    _kueue(
        "kueue_cluster_queue_resource_usage",
        MetricType.GAUGE,
        CQ_QUOTA_LABELS,
        "The ClusterQueue's admitted usage per flavor and resource.",
        requires=KUEUE_CQ_RESOURCES,
    ),
    _kueue(
        "kueue_cluster_queue_borrowing_limit",
        MetricType.GAUGE,
        CQ_QUOTA_LABELS,
        "The ClusterQueue's borrowing limit per flavor and resource (+Inf when unlimited).",
        requires=KUEUE_CQ_RESOURCES,
    ),
    _kueue(
        "kueue_cluster_queue_lending_limit",
        MetricType.GAUGE,
        CQ_QUOTA_LABELS,
        "The ClusterQueue's lending limit per flavor and resource (+Inf when it lends all idle quota).",
        requires=KUEUE_CQ_RESOURCES,
    ),
    _kueue(
        "kueue_cluster_queue_weighted_share",
        MetricType.GAUGE,
        ("cluster_queue", "cohort", "replica_role"),
        "Fair sharing: the largest ratio of usage above nominal to the cohort's lendable resources.",
        requires="fair sharing enabled (kueue.sharing: fair)",
    ),
    _kueue(
        "kueue_local_queue_pending_workloads",
        MetricType.GAUGE,
        ("name", "namespace", "status", "replica_role"),
        "Pending workloads per LocalQueue and status (active or inadmissible).",
        requires=KUEUE_LQ_METRICS,
    ),
    _kueue(
        "kueue_local_queue_admitted_active_workloads",
        MetricType.GAUGE,
        LQ_LABELS,
        "Admitted workloads that are active, per LocalQueue.",
        requires=KUEUE_LQ_METRICS,
    ),
    _kueue(
        "kueue_local_queue_admitted_workloads_total",
        MetricType.COUNTER,
        ("name", "namespace", "priority_class", "replica_role"),
        "Admitted workloads per LocalQueue.",
        requires=KUEUE_LQ_METRICS,
    ),
    _kueue(
        "kueue_local_queue_evicted_workloads_total",
        MetricType.COUNTER,
        ("name", "namespace", "reason", "underlying_cause", "priority_class", "replica_role"),
        "Evicted workloads per LocalQueue and reason.",
        requires=KUEUE_LQ_METRICS,
    ),
    _kueue(
        "kueue_local_queue_admission_wait_time_seconds",
        MetricType.HISTOGRAM,
        ("name", "namespace", "priority_class", "replica_role"),
        "Time from creation or requeue until admission, per LocalQueue.",
        requires=KUEUE_LQ_METRICS,
    ),
    _kueue(
        "kueue_local_queue_resource_usage",
        MetricType.GAUGE,
        ("name", "namespace", "flavor", "resource", "replica_role"),
        "The LocalQueue's admitted usage per flavor and resource.",
        requires=KUEUE_LQ_METRICS,
    ),
    _kueue(
        "kueue_local_queue_status",
        MetricType.GAUGE,
        ("name", "namespace", "active", "replica_role"),
        "Whether the LocalQueue can admit workloads: 1 for exactly one of active=True, False, Unknown.",
        requires=KUEUE_LQ_METRICS,
    ),
)


# --- kube-state-metrics v2.20.0 (the kube-prometheus-stack 88.5.3 dependency) ------------------------------

KSM_DOCS = "kubernetes/kube-state-metrics docs/metrics"
KSM_LABELS_ALLOWLIST = "--metric-labels-allowlist={}"


def _ksm(name: str, labels: tuple[str, ...], help_text: str, page: str, *, requires: str = "") -> Metric:
    return Metric(
        name, MetricType.GAUGE, Exporter.KUBE_STATE_METRICS, labels, help_text, f"{KSM_DOCS}/{page}", requires
    )


KUBE_STATE_METRICS = (
    _ksm(
        "kube_node_status_capacity",
        ("node", "resource", "unit"),
        "The total amount of resources of a node.",
        "cluster/node-metrics.md",
    ),
    _ksm(
        "kube_node_status_allocatable",
        ("node", "resource", "unit"),
        "The resources of a node allocatable to pods; a GPU the device plugin marks unhealthy leaves it.",
        "cluster/node-metrics.md",
    ),
    _ksm(
        "kube_node_labels",
        ("node", "label_nvidia_com_gpu_product"),
        "Node labels as Prometheus labels; the GPU product label identifies the GPU type.",
        "cluster/node-metrics.md",
        requires=KSM_LABELS_ALLOWLIST.format("nodes=[nvidia.com/gpu.product]"),
    ),
    _ksm(
        "kube_node_spec_taint",
        ("node", "key", "value", "effect"),
        "The taints of a node.",
        "cluster/node-metrics.md",
    ),
    _ksm(
        "kube_node_status_condition",
        ("node", "condition", "status"),
        "The conditions of a node (including the health controller's GPUHealthy).",
        "cluster/node-metrics.md",
    ),
    _ksm(
        "kube_namespace_labels",
        ("namespace", "label_konduktor_ai_team"),
        "Namespace labels as Prometheus labels; konduktor.ai/team names the namespace's team.",
        "cluster/namespace-metrics.md",
        requires=KSM_LABELS_ALLOWLIST.format("namespaces=[konduktor.ai/team]"),
    ),
    _ksm(
        "kube_pod_container_resource_requests",
        ("namespace", "pod", "uid", "container", "node", "resource", "unit"),
        "The resources a container requests; nvidia_com_gpu is the GPUs it holds once bound to a node.",
        "workload/pod-metrics.md",
    ),
    _ksm(
        "kube_pod_status_phase",
        ("namespace", "pod", "uid", "phase"),
        "The pod's current phase: 1 for exactly one of Pending, Running, Succeeded, Failed, Unknown.",
        "workload/pod-metrics.md",
    ),
    _ksm(
        "kube_pod_owner",
        ("namespace", "pod", "uid", "owner_kind", "owner_name", "owner_is_controller"),
        "The pod's owner; a Job's pods name it (trace export counts a Job's GPUs through them).",
        "workload/pod-metrics.md",
    ),
    _ksm("kube_job_created", ("namespace", "job_name"), "When the Job was created.", "workload/job-metrics.md"),
    _ksm(
        "kube_job_status_start_time",
        ("namespace", "job_name"),
        "When the Job was started: set again when a suspended Job (Kueue's) is resumed.",
        "workload/job-metrics.md",
    ),
    _ksm(
        "kube_job_status_completion_time",
        ("namespace", "job_name"),
        "When the Job completed; only a Job that succeeded has it.",
        "workload/job-metrics.md",
    ),
    _ksm(
        "kube_job_spec_parallelism",
        ("namespace", "job_name"),
        "How many pods of the Job run at once.",
        "workload/job-metrics.md",
    ),
    _ksm(
        "kube_job_labels",
        ("namespace", "job_name", "label_kueue_x_k8s_io_priority_class"),
        "Job labels as Prometheus labels; kueue.x-k8s.io/priority-class names the Job's WorkloadPriorityClass.",
        "workload/job-metrics.md",
        requires=KSM_LABELS_ALLOWLIST.format("jobs=[kueue.x-k8s.io/priority-class]"),
    ),
)


PROMETHEUS_METRICS = (
    Metric(
        "up",
        MetricType.GAUGE,
        Exporter.PROMETHEUS,
        ("job", "instance"),
        "1 if the last scrape of the target succeeded, 0 if it failed.",
        "prometheus/docs/concepts/jobs_instances.md (automatically generated series)",
    ),
)


# --- The health controller: the contract its implementation follows --------------------------------------

# The Service that exposes the controller's /metrics is named so, which makes it the `job` label.
HEALTH_CONTROLLER_JOB = "konduktor-health-controller"
CONTRACT = "defined by Konduktor (installer/konduktor/observability/metrics.py): the health controller contract"

# Label values the controller must use, so that dashboards and rules can select them.
FAULT_KINDS: tuple[str, ...] = get_args(FindingKind)
REQUALIFICATION_VERDICTS: tuple[str, ...] = tuple(verdict.value for verdict in Verdict)
DETECTION_SOURCES = ("kernel_log", "dcgm", "allocatable", "node_condition", "burnin")
SIGNAL_SOURCES = ("loki", "prometheus")
WITHHELD_ACTIONS = ("taint", "untaint", "condition", "event", "requalification", "requeue", "reactivate")
# Kernel-log faults should reach a taint in <= 5 s and DCGM-only faults in <= 20 s at p99
# (docs/design/gpu-faults.md#detection-latency-targets); the buckets bracket both targets.
DETECTION_LATENCY_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


def _ours(name: str, metric_type: MetricType, labels: tuple[str, ...], help_text: str) -> Metric:
    return Metric(name, metric_type, Exporter.HEALTH_CONTROLLER, labels, help_text, CONTRACT)


HEALTH_CONTROLLER_METRICS = (
    _ours(
        "konduktor_gpu_faults_total",
        MetricType.COUNTER,
        ("node", "kind", "code", "reason"),
        "Faults judged, after duplicate suppression. kind is one of FAULT_KINDS; code is the Xid or SXid "
        "number as text and empty for other kinds; reason is the Node condition / Event reason (Xid79, "
        "EccDoubleBitError, GPULost).",
    ),
    _ours(
        "konduktor_quarantined_nodes",
        MetricType.GAUGE,
        (),
        "GPU nodes carrying the controller's konduktor.ai/gpu-health taint and quarantined-at annotation.",
    ),
    _ours(
        "konduktor_node_quarantined",
        MetricType.GAUGE,
        ("node", "reason"),
        "1 for each quarantined node, reason from its konduktor.ai/quarantine-reason annotation; the series "
        "is deleted when the node is released.",
    ),
    _ours(
        "konduktor_gpu_nodes",
        MetricType.GAUGE,
        (),
        "GPU nodes the controller watches: the denominator of the circuit breaker's fraction.",
    ),
    _ours(
        "konduktor_quarantine_breaker_tripped",
        MetricType.GAUGE,
        (),
        "1 while the fleet circuit breaker is open (new quarantines refused until an operator resets it), else 0.",
    ),
    _ours(
        "konduktor_quarantine_breaker_window_quarantines",
        MetricType.GAUGE,
        (),
        "New quarantines inside the breaker's current window.",
    ),
    _ours(
        "konduktor_quarantine_breaker_limit",
        MetricType.GAUGE,
        (),
        "New quarantines the breaker allows per window: min(max_nodes, max(2, ceil(max_fraction x GPU nodes))).",
    ),
    _ours(
        "konduktor_quarantines_total",
        MetricType.COUNTER,
        ("reason",),
        "Quarantines written (taint and annotations applied), by reason.",
    ),
    _ours(
        "konduktor_quarantines_blocked_total",
        MetricType.COUNTER,
        (),
        "Quarantines the open breaker refused.",
    ),
    _ours(
        "konduktor_releases_total",
        MetricType.COUNTER,
        (),
        "Quarantines lifted after a passing requalification burn-in.",
    ),
    _ours(
        "konduktor_requalifications_total",
        MetricType.COUNTER,
        ("verdict",),
        "Requalification burn-in results, by verdict (one of REQUALIFICATION_VERDICTS).",
    ),
    _ours(
        "konduktor_detection_latency_seconds",
        MetricType.HISTOGRAM,
        ("source",),
        "From the signal's own timestamp (kernel log line, DCGM sample, first sight of missing GPUs, burn-in "
        "result) to the end of the cluster write it caused (taint, condition or Event; in dry-run, the moment "
        "the write was withheld). source is one of DETECTION_SOURCES; buckets DETECTION_LATENCY_BUCKETS.",
    ),
    _ours(
        "konduktor_api_errors_total",
        MetricType.COUNTER,
        ("verb", "resource", "code"),
        "Failed Kubernetes API calls, by verb, resource and HTTP status (code 'unreachable' when no answer came).",
    ),
    _ours(
        "konduktor_signal_source_up",
        MetricType.GAUGE,
        ("source",),
        "1 when the last query of a signal source (one of SIGNAL_SOURCES) succeeded, else 0.",
    ),
    _ours(
        "konduktor_dry_run",
        MetricType.GAUGE,
        (),
        "1 when the controller runs in dry-run (plans writes but makes none), else 0.",
    ),
    _ours(
        "konduktor_withheld_actions_total",
        MetricType.COUNTER,
        ("action",),
        "Dry-run: writes planned but not made, by action (one of WITHHELD_ACTIONS).",
    ),
)


INVENTORY: Mapping[str, Metric] = {
    metric.name: metric
    for metric in (
        *DCGM_METRICS,
        *KUEUE_METRICS,
        *KUBE_STATE_METRICS,
        *PROMETHEUS_METRICS,
        *HEALTH_CONTROLLER_METRICS,
    )
}

_BY_SERIES_NAME: Mapping[str, Metric] = {
    series: metric for metric in INVENTORY.values() for series in metric.series_names()
}


def lookup(series_name: str) -> Metric | None:
    """The inventory entry a queried series name belongs to (`foo_bucket` belongs to histogram `foo`)."""
    return _BY_SERIES_NAME.get(series_name)

"""The health controller's own config file: model, defaults, and a loader whose errors name file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool

from konduktor.burnin.tiers import BurnInImages
from konduktor.config.load import read_text, read_yaml, validate_model
from konduktor.vocabulary import BURNIN_NAMESPACE, BURNIN_SERVICE_ACCOUNT


class _Section(BaseModel):
    # Strict: `poll_seconds: true` or `max_nodes: "5"` is a mistake to report, not a value to coerce (ints still
    # fill float fields). Finite: YAML's `.inf` and `.nan` are numbers that no setting means.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")) or len(value.split("://", 1)[1]) == 0:
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")


HttpUrlText = Annotated[str, AfterValidator(_http_url)]


class BreakerSettings(_Section):
    """The fleet circuit breaker: at most min(max_nodes, max(2, ceil(max_fraction x GPU nodes))) new quarantines
    per window; one more trips it, and nothing is quarantined until an operator resets it."""

    # 10 % / 10 min / 20 nodes: docs/design/gpu-faults.md#fleet-breaker (NVSentinel's 50 % / 5 min is too loose).
    max_fraction: float = Field(default=0.1, gt=0, le=1)
    max_nodes: int = Field(default=20, ge=1)
    window_seconds: float = Field(default=600, gt=0)


class LokiSettings(_Section):
    """Where kernel logs are. No defaults for the query and label: they depend on the log collector, and
    a guess that matched nothing would silently detect nothing."""

    url: HttpUrlText
    # A LogQL selector of the nodes' kernel lines, e.g. '{job="kernel"} |~ "NVRM: Xid|SXid|nvidia-peermem"'.
    query: str = Field(min_length=1)
    # The stream label that holds the Kubernetes node name.
    node_label: str = Field(min_length=1)
    # How far back the very first query reads, when no cursor has been saved yet.
    lookback_seconds: float = Field(default=300, gt=0)
    # Log shippers batch lines (Promtail waits up to 1 s), so a line can reach Loki after later lines of other
    # nodes were read. Each query re-reads this much before its cursor and skips what it already saw.
    late_seconds: float = Field(default=10, ge=0)
    # Lines per query_range request; Loki refuses more than its max_entries_limit_per_query (5000 by default).
    limit: int = Field(default=1000, ge=1, le=5000)
    # Sent as X-Scope-OrgID when Loki runs with multi-tenancy (auth_enabled).
    tenant: str | None = None


class KernelLogFileSettings(_Section):
    """Kernel logs as files on the controller's machine, `<directory>/<node name>.log` (a central syslog server's
    file per host, or the simulated cluster's nodes). Lines written after the controller started are read."""

    directory: str = Field(min_length=1)


class PrometheusSettings(_Section):
    url: HttpUrlText
    # dcgm-exporter sets Hostname to the Kubernetes node name (from NODE_NAME) and gpu to the GPU index.
    node_label: str = Field(default="Hostname", min_length=1)
    gpu_label: str = Field(default="gpu", min_length=1)
    # With its Kubernetes pod mapping on, dcgm-exporter labels a GPU's series with the pod holding it and its
    # namespace (pod_name / pod_namespace with --use-old-namespace): which workload held a lost GPU.
    pod_label: str = Field(default="pod", min_length=1)
    namespace_label: str = Field(default="namespace", min_length=1)
    # Raw samples read per query: a counter's rise is seen when two samples of it fall inside, so this must
    # exceed twice the exporter's scrape interval (30 s by default).
    window_seconds: float = Field(default=120, gt=0)


class GpuTypeSettings(_Section):
    """What a GPU node of one type must have. A GPU that fell off the bus also lowers the count that GPU
    Feature Discovery publishes in the nvidia.com/gpu.count label; a count stated here cannot drift."""

    # The node's nvidia.com/gpu.product label value, e.g. NVIDIA-H100-80GB-HBM3.
    product: str = Field(min_length=1)
    gpus_per_node: int = Field(ge=1)


_BURNIN_IMAGES = BurnInImages()


class BurnInImageSettings(_Section):
    """The images of the controller's burn-in Jobs. konduktor-core fills them from its burnin.images, the only
    images its admission policy lets the controller's Jobs run."""

    dcgm: str = Field(default=_BURNIN_IMAGES.dcgm, min_length=1)
    pytorch: str = Field(default=_BURNIN_IMAGES.pytorch, min_length=1)
    nccl_tests: str = Field(default=_BURNIN_IMAGES.nccl_tests, min_length=1)


class RequalificationSettings(_Section):
    # standard: DCGM diag level 2, a matmul soak and one-node NCCL (konduktor.burnin.tiers).
    tier: Literal["quick", "standard", "full"] = "standard"
    # A low PriorityClass lets a requalification wait behind real work instead of preempting it.
    priority_class: str | None = None
    # Where the burn-in Jobs run, and under which account: the admission policy lets only this account's pods
    # tolerate the quarantine taint (policies/gpu-health-toleration.yaml).
    namespace: str = Field(default=BURNIN_NAMESPACE, min_length=1)
    service_account: str = Field(default=BURNIN_SERVICE_ACCOUNT, min_length=1)
    images: BurnInImageSettings = Field(default_factory=BurnInImageSettings)


class NodeConditionRule(_Section):
    """A Node condition another tool sets (node-problem-detector rules, the EKS node monitoring agent,
    NVSentinel) whose `status` means the node's GPUs are unhealthy."""

    type: str = Field(min_length=1)
    status: Literal["True", "False", "Unknown"] = "True"
    quarantine: StrictBool = True


# Condition types of other GPU health tools (docs/design/gpu-faults.md#other-tools-node-conditions): the EKS node
# monitoring agent reports AcceleratedHardwareReady=False; NVSentinel sets its fatal conditions True (syslog Xids,
# DCGM health watches).
DEFAULT_NODE_CONDITIONS = (
    NodeConditionRule(type="AcceleratedHardwareReady", status="False"),
    NodeConditionRule(type="SysLogsXIDError"),
    NodeConditionRule(type="GpuMemWatch"),
    NodeConditionRule(type="GpuNvlinkWatch"),
    NodeConditionRule(type="GpuPcieWatch"),
)


WorkPolicy = Literal["requeue", "drain", "none"]


class AffectedWorkSettings(_Section):
    """What happens to the Kueue workloads with pods on a node when it is quarantined, per fault class.

    requeue: Kueue evicts the workload (its Workload is deactivated, then reactivated once the eviction is done) and
    readmits it on healthy nodes; it keeps its place in the queue. drain: running pods finish, no new pod lands
    on the node (the quarantine taint). none: only the owner's Event. An owner is told in every case."""

    # Faults the catalog marks node-unusable (Xid 79, a reboot-required recovery action): the job cannot succeed.
    unusable: WorkPolicy = "requeue"
    # Every other quarantining fault (pending row remaps, DCGM faults), and the work on a node that lost a GPU that
    # did not hold it: the job may still finish. The workload that held a lost GPU gets `unusable`'s policy.
    degraded: WorkPolicy = "drain"
    # A GPU lost from a node where several workloads hold GPUs and DCGM cannot say which held it (no Prometheus, the
    # exporter's pod mapping off): each of them. Requeue costs a healthy job its progress since its last checkpoint;
    # drain would leave a hung job holding its GPUs and quota until someone notices (docs/health.md).
    lost_gpu_unattributed: WorkPolicy = "requeue"


class HealthSettings(_Section):
    """Everything the health controller reads from its config file; every field has a safe default."""

    # Strict: YAML has booleans, so a string here ("maybe", "yes") is a mistake, not a value to interpret.
    dry_run: StrictBool = False
    # NoExecute evicts running pods; only faults the catalog marks node-unusable may use it, and only here.
    allow_noexecute: StrictBool = False
    quarantine_unknown: StrictBool = False
    # 3 minutes: NVSentinel's suppression window for identical events (ADR-039).
    dedup_window_seconds: float = Field(default=180, ge=0)
    # How long a quarantined node rests before a requalification burn-in, and between two attempts.
    cooldown_seconds: float = Field(default=900, ge=0)
    # How long allocatable GPUs must stay below the expected count before it counts as a lost GPU.
    gpu_lost_grace_seconds: float = Field(default=60, ge=0)
    max_concurrent_requalifications: int = Field(default=2, ge=0)
    # Nodes handled at once: their pods read (for the affected work) and their writes made. A rack-level failure
    # quarantines many nodes in one pass; one after another they would wait on each other's round trips. Each
    # node's own writes stay in order.
    node_concurrency: int = Field(default=32, ge=1, le=64)
    opt_out_label: str = Field(default="konduktor.ai/gpu-health-opt-out", min_length=1)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    # The opt-out label also works on a workload's owner (a Job, JobSet, ...) and on its namespace: such work is
    # only told, never requeued.
    affected_work: AffectedWorkSettings = Field(default_factory=AffectedWorkSettings)
    loki: LokiSettings | None = None
    kernel_log_files: KernelLogFileSettings | None = None
    prometheus: PrometheusSettings | None = None
    # Expected GPUs per node by GPU type; nodes of other types fall back to their nvidia.com/gpu.count label.
    gpu_types: dict[str, GpuTypeSettings] = Field(default_factory=dict)
    requalification: RequalificationSettings = Field(default_factory=RequalificationSettings)
    # With Prometheus set, a kernel-log Xid that would quarantine must be confirmed by the DCGM exporter's
    # DCGM_FI_DEV_XID_ERRORS for the same node and code within `xid_confirmation_seconds`; a log line alone (which
    # anyone able to push to Loki could forge) is only reported. Off only where DCGM does not see the GPUs' Xids.
    kernel_xids_need_dcgm: StrictBool = True
    xid_confirmation_seconds: float = Field(default=600, gt=0)
    # GPU conditions set by other tools; an empty list ignores them all.
    node_conditions: list[NodeConditionRule] = Field(default_factory=lambda: list(DEFAULT_NODE_CONDITIONS))
    # How often Loki and Prometheus are queried; Node changes are watched and act at once.
    poll_seconds: float = Field(default=5, gt=0)
    # A pass judges only the nodes whose inputs changed; every this often one judges every GPU node again, the
    # safety net for a change the controller did not note (docs/design/health-passes.md).
    full_pass_seconds: float = Field(default=300, gt=0)
    # A leader that has not renewed its Lease for this long is replaced by a standby replica.
    lease_seconds: float = Field(default=15, ge=1)


def load_settings(path: Path) -> HealthSettings:
    """Read and validate the config file through the installer's config loader (same bounds on hostile YAML);
    raises ConfigError (exit 2) listing every error with its line.

    A file without settings (empty, or only comments) is valid: every setting has a safe default.
    """
    return parse_settings(read_text(path), str(path))


def parse_settings(text: str, source: str) -> HealthSettings:
    """The settings in `text` (a file's, or the chart's ConfigMap's `health.yaml`), errors named after `source`."""
    if all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()):
        return HealthSettings()
    data, lines = read_yaml(text, source)
    return validate_model(HealthSettings, data, lines, source)

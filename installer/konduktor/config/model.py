"""The installer's `config.yaml` (version 1): cluster, Kueue settings, GPU types, priorities and teams.

The models check shapes and types only. Rules that need the whole config (names, capacity, limits vs
cohort, namespaces) live in `konduktor.config.lint`, so every problem can be reported with its line.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

from konduktor.config.quantity import parse_quantity
from konduktor.gpu import sharing
from konduktor.vocabulary import BURNIN_NAMESPACE, PRODUCT_LABEL

# What charts/konduktor-core runs (controller.image, tagged with the chart's appVersion); it holds
# konduktor-install too, so the per-node preflight pods run it.
KONDUKTOR_REPOSITORY = "ghcr.io/konduktor/konduktor"
KONDUKTOR_VERSION = "0.1.0"
KONDUKTOR_IMAGE = f"{KONDUKTOR_REPOSITORY}:{KONDUKTOR_VERSION}"

Sharing = Literal["fair", "classic", "none"]
# A team's security profile: the Pod Security Standards levels, strictest first, and `gpu` (baseline plus the
# IPC_LOCK capability RDMA needs, enforced by the platform's admission policy; docs/security.md).
SecurityProfile = Literal["gpu", "restricted", "baseline", "privileged"]
PreemptionStrategy = Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]

_GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
_MAX_DURATION_SECONDS = (2**63 - 1) / 1e9  # Go durations are int64 nanoseconds
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _scalar_text(value: Any) -> Any:
    # YAML reads `cpu: 192` as an int; Kubernetes treats it as the quantity "192". `true` is no quantity.
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, bool):
        got = str(value).lower()
    elif value is None:
        got = "nothing"
    else:
        got = "a mapping" if isinstance(value, dict) else "a list"
    raise ValueError(f"must be a Kubernetes quantity, e.g. 192, 500m, 1900Gi (got {got})")


def _valid_quantity(text: str) -> str:
    if parse_quantity(text) < 0:
        raise ValueError("must be >= 0")
    return text


def _valid_duration(text: str | None) -> str | None:
    if text is None or text == "":
        return None
    if not _GO_DURATION.match(text):
        raise ValueError(f"{text!r} is not a duration (e.g. 10m, 90s, 1h30m)")
    seconds = duration_seconds(text)
    if seconds <= 0:
        raise ValueError('must be > 0 (write "" to turn the gang timeout off)')
    if seconds > _MAX_DURATION_SECONDS:
        raise ValueError(f"{text[:24]!r} is longer than a Go duration can be (292 years)")
    return text


def duration_seconds(text: str) -> float:
    return sum(
        float(amount) * _DURATION_UNITS[unit]
        for amount, _, unit in re.findall(r"(\d+(\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    )


Quantity = Annotated[
    str,
    BeforeValidator(_scalar_text),
    AfterValidator(_valid_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "string"}, {"type": "number", "minimum": 0}],
            "description": "Kubernetes quantity, e.g. 192, 500m, 1900Gi",
        }
    ),
]
Duration = Annotated[
    str | None,
    AfterValidator(_valid_duration),
    WithJsonSchema(
        {
            "anyOf": [{"type": "string"}, {"type": "null"}],
            "description": 'Go duration, e.g. 10m; "" or null turns it off',
        }
    ),
]
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]


class Model(BaseModel):
    # strict: a quoted "16" where a count belongs is a typo worth reporting, not coercing, and so is `true`
    # (ints still fill float fields). Finite: YAML's `.inf` and `.nan` are numbers that no setting means.
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        frozen=True,
        alias_generator=to_camel,
        field_title_generator=lambda name, _: to_camel(name),
    )


class Cluster(Model):
    name: str = Field(description="Cluster name: labels every rendered object and names the root cohort")


class BorrowWithinCohort(Model):
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: Int32 | None = None


def _default_strategies() -> list[PreemptionStrategy]:
    # One strategy: both together have an open preemption-loop bug (kubernetes-sigs/kueue#14543).
    return ["LessThanInitialShare"]


class KueueSettings(Model):
    sharing: Sharing = Field(
        default="fair",
        description="fair: weighted fair sharing; classic: borrow/reclaim by priority; none: no cohort",
    )
    fair_sharing_strategies: list[PreemptionStrategy] = Field(default_factory=_default_strategies)
    gang_timeout: Duration = Field(default="10m", description="waitForPodsReady.timeout")
    exclude_resource_prefixes: list[str] = Field(default_factory=lambda: ["ephemeral-storage", "smarter-devices/"])
    borrow_within_cohort: BorrowWithinCohort | None = Field(
        default=None, description="Classic sharing only: may a borrowing team preempt to borrow?"
    )


class ResourceReserve(Model):
    cpu: Quantity = "0"
    memory: Quantity = "0"


class NodeAllocatable(Model):
    cpu: Quantity
    memory: Quantity


class Topology(Model):
    name: str = "gpu-topology"
    levels: list[str] = Field(description="Node labels, widest first; kubernetes.io/hostname last")


class Toleration(Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class Replicas(Model):
    replicas: int = Field(ge=2, le=64, description="Shared GPUs each physical GPU is advertised as")


class SharingGroup(Model):
    """Some nodes of a GPU type whose GPUs are shared below one GPU, all alike: by MIG, time-slicing or MPS."""

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["mig"]}, {"required": ["timeSlicing"]}, {"required": ["mps"]}]}
    )

    nodes: int = Field(ge=1, description="How many of the type's nodes are in the group")
    mig: dict[str, Annotated[int, Field(ge=1)]] | None = Field(
        default=None,
        description='MIG layout of every GPU of the group: profile -> instances, e.g. {"1g.10gb": 7} or '
        '{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}; advertised as nvidia.com/mig-<profile>',
    )
    time_slicing: Replicas | None = Field(
        default=None, description="Time-slicing: each GPU advertised as `replicas` nvidia.com/gpu.shared"
    )
    mps: Replicas | None = Field(
        default=None, description="MPS: as time-slicing, each replica with 1/replicas of the memory and compute"
    )

    @model_validator(mode="after")
    def _one_way(self) -> SharingGroup:
        ways = [name for name in ("mig", "time_slicing", "mps") if getattr(self, name) is not None]
        if len(ways) != 1:
            raise ValueError("set exactly one of mig, timeSlicing or mps: the way this group's GPUs are shared")
        return self

    @property
    def replicas(self) -> int | None:
        way = self.time_slicing or self.mps
        return way.replicas if way is not None else None

    @property
    def way(self) -> Literal["mig", "timeSlicing", "mps"]:
        return "mig" if self.mig is not None else "timeSlicing" if self.time_slicing is not None else "mps"

    def units(self, gpus_per_node: int) -> dict[str, int]:
        """The shared resources one node of the group advertises, as the device plugin does."""
        if self.mig is not None:
            return sharing.mig_units(self.mig, gpus_per_node)
        return sharing.shared_units(self.replicas or 0, gpus_per_node)

    def fraction(self, resource: str) -> Fraction:
        """The part of one GPU a unit of `resource` is on this group's nodes."""
        return sharing.gpu_fraction(resource, self.replicas)

    def node_label(self, name: str) -> tuple[str, str]:
        """The GPU Operator's label that gives a node this group's sharing (and selects the group's nodes): the MIG
        layout or the device plugin's config, each named after the group."""
        key = sharing.MIG_CONFIG_LABEL if self.mig is not None else sharing.DEVICE_PLUGIN_CONFIG_LABEL
        return key, name


class GpuType(Model):
    product: str = Field(description="nvidia.com/gpu.product value, e.g. NVIDIA-H100-80GB-HBM3")
    node_labels: dict[str, str] | None = Field(
        default=None, description="Labels selecting these nodes; default: the nvidia.com/gpu.product label"
    )
    tolerations: list[Toleration] = Field(default_factory=list)
    nodes: int = Field(ge=1)
    gpus_per_node: int = Field(ge=1)
    node_allocatable: NodeAllocatable
    sharing: dict[str, SharingGroup] = Field(
        default_factory=dict,
        description="Groups of these nodes whose GPUs are shared (MIG, time-slicing, MPS), by the name of the group's "
        "ResourceFlavor; the other nodes keep whole GPUs",
    )

    @property
    def whole_nodes(self) -> int:
        """The nodes whose GPUs are handed out whole (not in a sharing group)."""
        return self.nodes - sum(group.nodes for group in self.sharing.values())

    @property
    def capacity(self) -> int:
        """Whole GPUs: those of the nodes in no sharing group."""
        return self.whole_nodes * self.gpus_per_node

    @property
    def selector(self) -> dict[str, str]:
        """The labels that select this type's nodes (the ResourceFlavor's nodeLabels)."""
        return dict(self.node_labels) if self.node_labels is not None else {PRODUCT_LABEL: self.product}


def selects(selector: Mapping[str, str], labels: Mapping[str, Any]) -> bool:
    """Whether a node with `labels` matches `selector`, as a ResourceFlavor's nodeLabels (and a Kubernetes
    matchLabels) match: every key present with exactly its value; the empty selector matches every node."""
    return all(labels.get(key) == value for key, value in selector.items())


class GpuQuota(Model):
    quota: int = Field(ge=0, description="Guaranteed GPUs (Kueue nominalQuota)")
    borrow_limit: int | None = Field(default=None, ge=0, description="Extra GPUs it may borrow; unset = no limit")
    lend_limit: int | None = Field(default=None, ge=0, description="GPUs it may lend; unset = all idle ones")


NodeCount = Annotated[int, Field(ge=1)]
GpuCount = Annotated[int, Field(ge=0)]


class Team(Model):
    namespaces: list[str] = Field(min_length=1)
    groups: list[str] = Field(default_factory=list, description="IdP groups bound to the team namespaces")
    pod_security: SecurityProfile = Field(
        default="gpu",
        description="Security profile of the team namespaces: gpu (baseline plus IPC_LOCK for RDMA; root images "
        "run), restricted, baseline, or privileged, which lets any member become root on a node (an exception "
        "that validate warns about)",
    )
    fair_share_weight: float = Field(default=1.0, ge=0)
    department: str | None = Field(default=None, description="Parent cohort shared with other teams")
    gpus: dict[str, GpuQuota] = Field(default_factory=dict, description="GPU type -> the team's whole GPUs")
    slices: dict[str, dict[str, GpuQuota]] = Field(
        default_factory=dict,
        description="Sharing group -> resource as a pod asks for it without nvidia.com/ (mig-1g.10gb, gpu.shared) -> "
        "the team's quota of it",
    )
    clusters: dict[str, dict[str, GpuCount]] | None = Field(
        default=None,
        description="With `clusters:`: worker -> GPU type -> the team's GPUs there, adding up to each type's quota; "
        "default: each quota split across the workers in proportion to their GPUs of the type (docs/multicluster.md)",
    )


def _not_empty(text: str | None) -> str | None:
    if text is not None and not text.strip():
        raise ValueError("must not be empty")
    return text


def _distinct(hosts: list[str] | None) -> list[str] | None:
    repeated = sorted(host for host, count in Counter(hosts or ()).items() if count > 1)
    if repeated:
        raise ValueError(f"listed more than once: {', '.join(repeated)}")
    return hosts


Text = Annotated[str, AfterValidator(_not_empty)]


def _api_server_address(text: str) -> str:
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme != "https" or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise ValueError(f"{text!r} is not an API server address: expected https://host or https://host:port")
    return text


ApiServerAddress = Annotated[str, AfterValidator(_api_server_address)]

_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)


def ssh_host_problem(host: str) -> str | None:
    """Why `host` cannot be handed to ssh as a host, or None for an IP address or a DNS hostname.

    Anything else is refused rather than quoted: a name starting with `-` would be read by ssh as an option
    (`-oProxyCommand=...` runs a command on this machine), and `%` or `@` would be decoded or split on the way.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        # A zone ("fe80::1%eth0") may hold any text, and testinfra decodes `%` escapes in the host.
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
            return f"{host!r} has an IPv6 zone; give the address without '%zone'"
        return None
    if _HOSTNAME.match(host):
        return None
    if host.startswith("-"):
        return f"{host!r} starts with '-', which ssh would read as an option; expected an IP address or a hostname"
    return f"{host!r} is not an IP address or a hostname (letters, digits, '-' and '.')"


def _ssh_host(host: str) -> str:
    problem = ssh_host_problem(host)
    if problem is not None:
        raise ValueError(problem)
    return host


SshHost = Annotated[str, AfterValidator(_ssh_host)]


def _namespace_name(name: str) -> str:
    if not re.match(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", name):
        raise ValueError(f"{name!r} is not a namespace name (lowercase letters, digits and '-', at most 63)")
    return name


NamespaceName = Annotated[str, AfterValidator(_namespace_name)]


def _secret_key(key: str) -> str:
    if not re.match(r"^[-._a-zA-Z0-9]{1,253}$", key):
        raise ValueError(f"{key!r} is not a Secret key (letters, digits, '-', '_' and '.')")
    return key


class SshInventory(Model):
    """How preflight reaches the GPU hosts over SSH (BatchMode: never a password or host-key prompt)."""

    user: Text | None = Field(default=None, description="SSH user; default: ssh's own")
    key: Text | None = Field(
        default=None,
        description="Private key file; ~ expands, a relative path is taken from the config file's directory",
    )
    port: int | None = Field(default=None, ge=1, le=65535, description="SSH port; default: ssh's own (22)")
    hosts: Annotated[list[SshHost] | None, AfterValidator(_distinct)] = Field(
        default=None,
        min_length=1,
        description="Hosts to check, named as their Kubernetes nodes (or by address); default: every node of "
        "the GPU types, at its InternalIP",
    )


def _repository(text: str | None) -> str | None:
    if text is None:
        return None
    if "@" in text or ":" in text.rpartition("/")[2]:
        raise ValueError(
            f"{text!r} names a tag or a digest: give the repository alone, the tag in tag, the digest in digest"
        )
    return text


def _digest(text: str | None) -> str | None:
    if text is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", text):
        raise ValueError(
            f"{text[:80]!r} is not an image digest: sha256: and 64 hex digits, as `konduktor-install image build` "
            "prints it"
        )
    return text


class KonduktorImage(Model):
    """The konduktor image (`konduktor-install image build`) that the chart's health controller and capacity
    publisher run, and the preflight pods unless preflight.nodes.pod.image names another."""

    repository: Annotated[Text | None, AfterValidator(_repository)] = Field(
        default=None, description=f"Repository, e.g. registry.example/konduktor; default: {KONDUKTOR_REPOSITORY}"
    )
    tag: Text | None = Field(default=None, description="Tag; default: the chart's appVersion")
    digest: Annotated[str | None, AfterValidator(_digest)] = Field(
        default=None, description="Digest (sha256:...): pulled by digest, the tag unused; default: none"
    )

    @property
    def reference(self) -> str:
        """The image as a pod names it: repository@digest, else repository:tag."""
        repository = self.repository or KONDUKTOR_REPOSITORY
        if self.digest:
            return f"{repository}@{self.digest}"
        return f"{repository}:{self.tag or KONDUKTOR_VERSION}"

    def chart_values(self) -> dict[str, str]:
        """konduktor-core's `controller.image` values for what is set (the rest keeps the chart's)."""
        given = {"repository": self.repository, "tag": self.tag, "digest": self.digest}
        return {key: value for key, value in given.items() if value is not None}


class NodeCheckPods(Model):
    """Node checks from a privileged pod on each GPU node, which runs them in the host's namespaces (no SSH)."""

    image: Text = Field(
        default=KONDUKTOR_IMAGE,
        description="Image with konduktor-install and nsenter; default: the konduktor image the chart runs (image:)",
    )
    namespace: NamespaceName = Field(
        default=BURNIN_NAMESPACE,
        description="Where the preflight Jobs run (created when missing; it must admit privileged pods); "
        "konduktor-core creates their service account in its burnin.namespace",
    )


class NodeChecks(Model):
    # Exactly one way to reach the hosts: a model validator says so with the line of `nodes`, and the schema's
    # oneOf says it to editors.
    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["ssh"]}, {"required": ["pod"]}]})

    ssh: SshInventory | None = Field(default=None, description="Run the checks over SSH")
    pod: NodeCheckPods | None = Field(
        default=None, description="Run the checks in a privileged pod per GPU node (hostPID, nsenter)"
    )

    @model_validator(mode="after")
    def _one_way(self) -> NodeChecks:
        if self.ssh is not None and self.pod is not None:
            raise ValueError("set either ssh or pod, not both: they are two ways to run the same checks")
        if self.ssh is None and self.pod is None:
            raise ValueError("set ssh (check the hosts over SSH) or pod (check them from a pod on each node)")
        return self


class Preflight(Model):
    nodes: NodeChecks | None = Field(
        default=None, description="Check the GPU hosts too (driver, nvidia-smi, ECC, ...); `up` runs them first"
    )


# Fields that hold credentials: a config file is committed and shared, so these only name a Kubernetes Secret.
def _secret_reference(value: Any) -> Any:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        raise ValueError(
            "must reference a Kubernetes Secret ({secret: NAME, key: KEY}), never the secret itself inline"
        )
    return value


class SecretKey(Model):
    """A key of a Secret in the monitoring namespace; Alertmanager reads it from its mounted file."""

    secret: Annotated[str, AfterValidator(_namespace_name)] = Field(description="Secret name")
    key: Annotated[str, AfterValidator(_secret_key)] = Field(description="Key in the Secret")


SecretRef = Annotated[SecretKey, BeforeValidator(_secret_reference)]


class SlackReceiver(Model):
    url: SecretRef = Field(description="Incoming-webhook URL (api_url_file)")
    channel: Text | None = Field(default=None, description="Channel, e.g. #gpu-platform; default: the webhook's")


class PagerDutyReceiver(Model):
    routing_key: SecretRef = Field(description="Events API v2 integration key (routing_key_file)")


class WebhookReceiver(Model):
    url: SecretRef = Field(description="URL Alertmanager POSTs its JSON to (url_file); URLs often carry tokens")
    bearer_token: SecretRef | None = Field(default=None, description="Sent as `Authorization: Bearer`")


class EmailReceiver(Model):
    to: Text = Field(description="Recipient address(es), comma-separated")
    sender: Text = Field(alias="from", description="From address")
    smarthost: Text = Field(description="SMTP server host:port")
    username: Text | None = Field(default=None, description="SMTP user")
    password: SecretRef | None = Field(default=None, description="SMTP password (auth_password_file)")
    require_tls: bool = Field(default=True, description="STARTTLS required")


class Receiver(Model):
    """Exactly one way to reach people."""

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": [kind]} for kind in ("slack", "pagerduty", "webhook", "email")]}
    )

    slack: SlackReceiver | None = None
    pagerduty: PagerDutyReceiver | None = None
    webhook: WebhookReceiver | None = None
    email: EmailReceiver | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Receiver:
        kinds = [kind for kind in ("slack", "pagerduty", "webhook", "email") if getattr(self, kind) is not None]
        if len(kinds) != 1:
            got = f"got {', '.join(kinds)}" if kinds else "got none"
            raise ValueError(f"set exactly one of slack, pagerduty, webhook, email ({got})")
        return self


AlertSeverity = Literal["critical", "warning", "info"]


class AlertRoutes(Model):
    """Who hears about what. Team routes come first and let the alert go on to the severity routes."""

    default: str | None = Field(
        default=None, description="Receiver of every alert no other route takes; default: the first receiver"
    )
    severity: dict[AlertSeverity, str] = Field(
        default_factory=dict, description="severity label -> receiver, e.g. critical: oncall"
    )
    teams: dict[str, str] = Field(
        default_factory=dict,
        description="team -> receiver: alerts labelled with the team (team, or its queue as cluster_queue)",
    )


class Alerts(Model):
    """Where Alertmanager sends the platform's alerts; secrets stay in Kubernetes Secrets."""

    receivers: dict[str, Receiver] = Field(default_factory=dict, description="name -> how to reach people")
    routes: AlertRoutes = Field(default_factory=AlertRoutes)
    group_wait: Duration = Field(default="30s", description="Wait to batch the first alerts of a group")
    group_interval: Duration = Field(default="5m", description="Wait before notifying a group of new alerts")
    repeat_interval: Duration = Field(default="4h", description="Resend a still-firing alert after this long")


UNSCHEDULABLE_SECONDS = 60  # how long a burn-in pod may stay unplaceable before it is reported


class BurnIn(Model):
    """The burn-in `up` runs once the platform is installed (`konduktor-install burnin` runs any level)."""

    level: Literal["quick", "standard", "full", "none"] = Field(
        default="quick",
        description="quick: GPU state, seconds and safe on a live cluster; standard: + DCGM diag, matmul soak, "
        "one-node NCCL; full: + node pairs; none: no burn-in in `up`",
    )
    quarantine: bool = Field(default=True, description="Taint nodes that FAIL, as the health controller does")
    unschedulable_seconds: int = Field(
        default=UNSCHEDULABLE_SECONDS,
        ge=1,
        description="A burn-in pod the scheduler cannot place for this long is reported as ERROR with the "
        "scheduler's reason, instead of waiting for its Job's deadline",
    )


WorkPolicy = Literal["requeue", "drain", "none"]
RequalificationTier = Literal["quick", "standard", "full"]


class HealthAffectedWork(Model):
    """What happens to the Kueue workloads with pods on a node the health controller quarantines."""

    unusable: WorkPolicy | None = Field(
        default=None,
        description="Faults that make the node unusable (Xid 79, a reboot required): requeue (Kueue readmits the "
        "workload on healthy nodes), drain (its pods finish) or none; default: requeue",
    )
    degraded: WorkPolicy | None = Field(
        default=None,
        description="Every other quarantining fault (pending row remaps, DCGM faults), and the work on a node that "
        "lost a GPU that did not hold it: requeue, drain or none; default: drain. The workload that held a lost GPU "
        "gets `unusable`'s policy",
    )
    lost_gpu_unattributed: WorkPolicy | None = Field(
        default=None,
        description="A GPU lost from a node where several workloads hold GPUs and DCGM cannot say which held it: "
        "each of them is requeued, drained or left; default: requeue",
    )


class HealthBreaker(Model):
    """At most min(maxNodes, max(2, ceil(maxFraction x GPU nodes))) new quarantines per window; one more trips the
    breaker, and nothing is quarantined until an operator resets it."""

    max_fraction: float | None = Field(default=None, gt=0, le=1, description="Share of the GPU nodes; default: 0.1")
    max_nodes: int | None = Field(default=None, ge=1, description="Cap in nodes; default: 20")
    window_seconds: float | None = Field(default=None, gt=0, description="Window length; default: 600")


class HealthRequalification(Model):
    """The burn-in the controller runs on a quarantined node after a rest; PASS puts the node back."""

    enabled: bool | None = Field(
        default=None, description="false: quarantined nodes stay out until released by hand; default: true"
    )
    tier: RequalificationTier | None = Field(
        default=None, description="Burn-in level (as `konduktor-install burnin --level`); default: standard"
    )
    max_concurrent: int | None = Field(default=None, ge=1, description="Burn-in Jobs at once; default: 2")
    cooldown_seconds: float | None = Field(
        default=None, ge=0, description="Rest after a quarantine, and between two attempts; default: 900"
    )
    priority_class: Text | None = Field(
        default=None, description="PriorityClass of the burn-in Jobs (a low one waits behind real work)"
    )


class Health(Model):
    """The GPU health controller's day-1 settings; each one left out keeps the chart's value (docs/health.md)."""

    dry_run: bool | None = Field(
        default=None,
        description="Decide and report only: no taint, no requeue; the owners of affected jobs get Events saying "
        "what would have happened; default: false",
    )
    affected_work: HealthAffectedWork = Field(default_factory=HealthAffectedWork)
    breaker: HealthBreaker = Field(default_factory=HealthBreaker)
    requalification: HealthRequalification = Field(default_factory=HealthRequalification)
    allow_no_execute: bool | None = Field(
        default=None,
        description="Taint unusable nodes NoExecute, which evicts their pods at once; default: false",
    )
    quarantine_unknown_xids: bool | None = Field(
        default=None, description="Quarantine on Xid codes the catalog does not know; default: false"
    )
    kernel_xids_need_dcgm: bool | None = Field(
        default=None,
        description="A kernel-log Xid quarantines only once DCGM confirms it (a forged log line quarantines "
        "nothing); false only where DCGM does not see the GPUs' Xids; default: true",
    )


Dispatch = Literal["incremental", "allAtOnce"]


class ClusterAccess(Model):
    """How the installer reaches a cluster: a kubeconfig file and a context in it."""

    kubeconfig: Text | None = Field(
        default=None,
        description="Kubeconfig file; ~ expands, a relative path is taken from the config file's directory; "
        "default: $KUBECONFIG or ~/.kube/config",
    )
    context: Text | None = Field(default=None, description="Context in that kubeconfig; default: its current one")


class WorkerCluster(ClusterAccess):
    name: str = Field(description="Worker name: its MultiKueueCluster, and its root cohort there")
    gpu_types: dict[str, NodeCount] = Field(
        min_length=1, description="GPU type (defined under gpuTypes) -> its nodes in this cluster"
    )
    server: ApiServerAddress | None = Field(
        default=None,
        description="The API server address the manager's Kueue reaches this worker at (https://host:port), when "
        "it is not the one this machine's kubeconfig names (a private endpoint); its certificate must name that "
        "host; default: the kubeconfig's",
    )


class Clusters(Model):
    """Several clusters behind each team's queue (Kueue's MultiKueue): the manager admits each job against the
    team's quota and Kueue dispatches it to a worker; `cluster.name` is the manager's name."""

    dispatch: Dispatch = Field(
        default="incremental",
        description="incremental: workers in the listed order, the next one when the earlier cannot admit; "
        "allAtOnce: every worker at once, the first to admit wins",
    )
    manager: ClusterAccess = Field(default_factory=ClusterAccess, description="The cluster teams submit to")
    workers: list[WorkerCluster] = Field(min_length=1, description="The clusters jobs run on, in dispatch order")
    worker_lost_timeout: Duration = Field(
        default="15m",
        description="How long a job admitted on a worker the manager lost stays there before the manager requeues "
        "it for another worker (Kueue's multiKueue.workerLostTimeout); null: Kueue's default",
    )


def _default_priorities() -> dict[str, int]:
    # Work on borrowed capacity should be `opportunistic`: Kueue preempts the lowest priority first. Kueue gives
    # the class named `default` to a job that names none (WorkloadPriorityClassDefaulting); without it such a job
    # gets 0, below `opportunistic`, and would be preempted first.
    return {"opportunistic": 100, "standard": 1000, "default": 1000, "urgent": 10000}


class Config(Model):
    version: Literal[1]
    cluster: Cluster
    kueue: KueueSettings = Field(default_factory=KueueSettings)
    capacity_reserve: ResourceReserve = Field(
        default_factory=ResourceReserve, description="Per node, kept out of every quota (system pods)"
    )
    topology: Topology | None = None
    gpu_types: dict[str, GpuType] = Field(min_length=1)
    priorities: dict[str, Int32] = Field(default_factory=_default_priorities)
    teams: dict[str, Team] = Field(min_length=1)
    image: KonduktorImage = Field(default_factory=KonduktorImage)
    preflight: Preflight = Field(default_factory=Preflight)
    burnin: BurnIn = Field(default_factory=BurnIn)
    alerts: Alerts = Field(default_factory=Alerts)
    health: Health = Field(default_factory=Health)
    clusters: Clusters | None = Field(
        default=None, description="A manager and worker clusters (MultiKueue); default: one cluster"
    )

    def teams_using(self, gpu_type: str) -> list[str]:
        return [name for name, team in self.teams.items() if gpu_type in team.gpus]

    def sharing_groups(self) -> Iterator[tuple[str, str, GpuType, SharingGroup]]:
        """Every sharing group: its name, its GPU type's name and definition, and the group."""
        for type_name, gpu_type in self.gpu_types.items():
            for name, group in gpu_type.sharing.items():
                yield name, type_name, gpu_type, group

    def shared_resources(self) -> list[str]:
        """The shared resources some group's nodes advertise, sorted: what the ClusterQueues cover besides GPUs."""
        return sorted(
            {
                resource
                for _, _, gpu_type, group in self.sharing_groups()
                for resource in group.units(gpu_type.gpus_per_node)
            }
        )

    @property
    def preflight_pod_image(self) -> str:
        """The image of the preflight pods: preflight.nodes.pod.image when given, else the config's image."""
        pod = self.preflight.nodes.pod if self.preflight.nodes else None
        if pod is not None and "image" in pod.model_fields_set:
            return pod.image
        return self.image.reference

    @property
    def shares(self) -> bool:
        """Whether teams are put in a cohort to borrow each other's idle quota."""
        return self.kueue.sharing != "none"

"""A checked config -> the Kubernetes objects that implement its team quotas.

Only `kueue.x-k8s.io/v1beta2` (the storage version; v1beta1 is deprecated and v1alpha1 Cohorts are no
longer served). Objects come in apply order (namespaces and cluster-scoped kinds before what refers to
them) and within a kind sorted by namespace and name, so the same config always gives the same bytes.
The config must have passed lint (`konduktor.config.load_config` does that).
"""

from __future__ import annotations

import copy
from decimal import Decimal
from fractions import Fraction
from typing import Any

from konduktor.config.capacity import share_for
from konduktor.config.model import Config, GpuQuota, GpuType, SharingGroup, Team
from konduktor.vocabulary import (
    CAPACITY_CONFIGMAP,
    CAPACITY_PUBLISHER,
    GPU_RESOURCE,
    KUEUE_API,
    SECURITY_PROFILE_LABEL,
    SYSTEM_NAMESPACE,
    TEAM_LABEL,
)

KUEUE_CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
RBAC_API = "rbac.authorization.k8s.io/v1"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "konduktor"
CONFIG_LABEL = "konduktor.ai/config"
DEFAULT_LOCAL_QUEUE = "default"  # Kueue puts unlabelled Jobs and Pods of the namespace in a LocalQueue so named
BATCH_USER_ROLE = "kueue-batch-user-role"
EDIT_ROLE = "edit"  # users create Jobs and Pods; they get no write access to queues
COVERED_RESOURCES = ["cpu", "memory", GPU_RESOURCE]
POD_SECURITY_LABEL = "pod-security.kubernetes.io/{mode}"
# The kinds of quota objects, in apply order (what others refer to comes first); pruning goes in reverse.
QUOTA_KINDS = (
    ("v1", "Namespace"),
    (KUEUE_API, "WorkloadPriorityClass"),
    (KUEUE_API, "Topology"),
    (KUEUE_API, "ResourceFlavor"),
    (KUEUE_API, "Cohort"),
    (KUEUE_API, "ClusterQueue"),
    (KUEUE_API, "LocalQueue"),
    (RBAC_API, "Role"),
    (RBAC_API, "RoleBinding"),
)
KIND_ORDER = tuple(kind for _, kind in QUOTA_KINDS)

KubeObject = dict[str, Any]


def render(config: Config) -> list[KubeObject]:
    """All objects for the config's teams, in apply order."""
    objects = [
        *namespaces(config),
        *workload_priority_classes(config),
        *topologies(config),
        *resource_flavors(config),
        *cohorts(config),
        *cluster_queues(config),
        *local_queues(config),
        *role_bindings(config),
        *capacity_publisher_rights(config),
    ]
    return sorted(objects, key=_apply_order)


def _apply_order(obj: KubeObject) -> tuple[int, str, str]:
    metadata = obj["metadata"]
    return KIND_ORDER.index(obj["kind"]), metadata.get("namespace", ""), metadata["name"]


def owner_labels(config: Config) -> dict[str, str]:
    """The labels that make a quota object this config's: they let apply prune exactly what this config made, and
    nothing else."""
    return {MANAGED_BY_LABEL: MANAGED_BY, CONFIG_LABEL: config.cluster.name}


def _metadata(config: Config, name: str, *, namespace: str | None = None, team: str | None = None) -> KubeObject:
    labels = owner_labels(config)
    if team is not None:
        labels[TEAM_LABEL] = team
    metadata: KubeObject = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = labels
    return metadata


def namespaces(config: Config) -> list[KubeObject]:
    """Team namespaces, labelled with the team its ClusterQueue selects and with the team's security profile."""
    objects = []
    for team_name, team in config.teams.items():
        for namespace in team.namespaces:
            metadata = _metadata(config, namespace, team=team_name)
            metadata["labels"].update(pod_security_labels(team))
            # A team dropped from config.yaml loses its queues and RoleBindings, never its namespace with its
            # workloads and data: Argo CD's prune passes over it, and the namespace left behind does not keep the
            # application OutOfSync (`up` never deletes namespaces either).
            metadata["annotations"] = {
                "argocd.argoproj.io/sync-options": "Prune=false",
                "argocd.argoproj.io/compare-options": "IgnoreExtraneous",
            }
            objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
    return objects


def pod_security_labels(team: Team) -> dict[str, str]:
    """The labels that make the team's security profile hold (team members hold `edit`, so without them any of
    them could run a privileged pod). `restricted` and `baseline` are Pod Security levels, which the API server's
    Pod Security admission enforces on pods; `gpu` is none, so Pod Security lets everything through there and the
    platform's policy konduktor-security-profile, which reads the profile label, refuses what baseline refuses but
    IPC_LOCK. The policy also judges the pod templates of Jobs, JobSets and training jobs in every profile. Audit
    and warn stay at `restricted` whatever the profile, so a looser team still sees what the strict one refuses."""
    enforce = "privileged" if team.pod_security == "gpu" else team.pod_security
    return {
        SECURITY_PROFILE_LABEL: team.pod_security,
        POD_SECURITY_LABEL.format(mode="enforce"): enforce,
        POD_SECURITY_LABEL.format(mode="audit"): "restricted",
        POD_SECURITY_LABEL.format(mode="warn"): "restricted",
    }


def workload_priority_classes(config: Config) -> list[KubeObject]:
    return [
        {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": _metadata(config, name), "value": value}
        for name, value in config.priorities.items()
    ]


def topologies(config: Config) -> list[KubeObject]:
    if config.topology is None:
        return []
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "Topology",
            "metadata": _metadata(config, config.topology.name),
            "spec": {"levels": [{"nodeLabel": level} for level in config.topology.levels]},
        }
    ]


def resource_flavors(config: Config) -> list[KubeObject]:
    """One flavor per GPU type and one per sharing group (its nodes: the type's, with the group's node label); with a
    topology each is topology-aware, so a pod is admitted only where it fits."""
    flavors = [
        _flavor(config, type_name, gpu_type, gpu_type.selector) for type_name, gpu_type in config.gpu_types.items()
    ]
    for name, _, gpu_type, group in config.sharing_groups():
        key, value = group.node_label(name)
        flavors.append(_flavor(config, name, gpu_type, {**gpu_type.selector, key: value}))
    return flavors


def _flavor(config: Config, name: str, gpu_type: GpuType, node_labels: dict[str, str]) -> KubeObject:
    spec: KubeObject = {"nodeLabels": node_labels}
    if gpu_type.tolerations:
        spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in gpu_type.tolerations]
    if config.topology is not None:
        spec["topologyName"] = config.topology.name
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": _metadata(config, name), "spec": spec}


def root_cohort(config: Config) -> str | None:
    """The cohort every sharing team (or its department) belongs to; None when teams do not share."""
    return config.cluster.name if config.shares else None


def cohort_of(config: Config, team: Team) -> str | None:
    root = root_cohort(config)
    if root is None:
        return None
    return team.department or root


def cohorts(config: Config) -> list[KubeObject]:
    """The root cohort, and one child per department (no quota of their own: Kueue would add it on top)."""
    root = root_cohort(config)
    if root is None:
        return []
    objects: list[KubeObject] = [
        {"apiVersion": KUEUE_API, "kind": "Cohort", "metadata": _metadata(config, root), "spec": {}}
    ]
    departments = sorted({team.department for team in config.teams.values() if team.department})
    objects.extend(
        {
            "apiVersion": KUEUE_API,
            "kind": "Cohort",
            "metadata": _metadata(config, department),
            "spec": {"parentName": root},
        }
        for department in departments
    )
    return objects


def cluster_queues(config: Config) -> list[KubeObject]:
    return [cluster_queue(config, team_name, team) for team_name, team in config.teams.items()]


def cluster_queue(config: Config, team_name: str, team: Team) -> KubeObject:
    spec: KubeObject = {}
    cohort = cohort_of(config, team)
    if cohort is not None:
        spec["cohortName"] = cohort
    # An explicit selector: a nil one admits from no namespace at all.
    spec["namespaceSelector"] = {"matchLabels": {TEAM_LABEL: team_name}}
    spec["queueingStrategy"] = "BestEffortFIFO"
    if config.kueue.sharing == "fair":
        spec["fairSharing"] = {"weight": _decimal_text(team.fair_share_weight)}
    # Kueue's defaults are Never: a team's nominal quota would not be guaranteed once others borrow it.
    preemption: KubeObject = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    borrow = config.kueue.borrow_within_cohort
    if config.kueue.sharing == "classic" and borrow is not None:
        preemption["borrowWithinCohort"] = borrow.model_dump(by_alias=True, exclude_none=True)
    spec["preemption"] = preemption
    # Flavors keep the team's listing order: Kueue tries them in order for jobs that fit several types. Shared
    # resources go in the same resource group, so a slice's cpu and memory come from its sharing group's flavor and
    # its pod lands on that group's nodes; every flavor lists every covered resource (Kueue requires it), 0 where
    # its nodes have none, so a whole GPU is never admitted on a shared flavor nor a slice on a whole one.
    shared = config.shared_resources()
    flavors = [
        {
            "name": type_name,
            "resources": _flavor_resources(config, config.gpu_types[type_name], limits) + _zero(shared),
        }
        for type_name, limits in team.gpus.items()
    ]
    groups = {name: (gpu_type, group) for name, _, gpu_type, group in config.sharing_groups()}
    for name, quotas in team.slices.items():
        gpu_type, group = groups[name]
        flavors.append({"name": name, "resources": _slice_resources(config, gpu_type, group, quotas, shared)})
    spec["resourceGroups"] = [{"coveredResources": [*COVERED_RESOURCES, *shared], "flavors": flavors}]
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": _metadata(config, team_name, team=team_name),
        "spec": spec,
    }


def _flavor_resources(config: Config, gpu_type: GpuType, limits: GpuQuota) -> list[KubeObject]:
    """cpu, memory and GPUs of one flavor; cpu/memory limits follow the GPU limits in proportion."""
    reserve = config.capacity_reserve
    nominal = share_for(limits.quota, gpu_type, reserve)
    resources: list[KubeObject] = [
        {"name": "cpu", "nominalQuota": nominal.cpu},
        {"name": "memory", "nominalQuota": nominal.memory},
        {"name": GPU_RESOURCE, "nominalQuota": str(limits.quota)},
    ]
    # Kueue rejects limits on a ClusterQueue without a cohort.
    if not config.shares:
        return resources
    for key, gpus in (("borrowingLimit", limits.borrow_limit), ("lendingLimit", limits.lend_limit)):
        if gpus is None:
            continue
        share = share_for(gpus, gpu_type, reserve)
        resources[0][key] = share.cpu
        resources[1][key] = share.memory
        resources[2][key] = str(gpus)
    return resources


def _zero(resources: list[str]) -> list[KubeObject]:
    return [{"name": resource, "nominalQuota": "0"} for resource in resources]


def _slice_resources(
    config: Config, gpu_type: GpuType, group: SharingGroup, quotas: dict[str, GpuQuota], shared: list[str]
) -> list[KubeObject]:
    """cpu, memory, no whole GPU and the team's shared resources of one sharing group. cpu and memory follow each
    slice's part of a GPU (a MIG instance its compute slices of 7, a replica 1/replicas), limits included: a borrow
    limit on cpu only when every slice has one (no limit is unlimited), a lend limit when some slice has one (no
    limit lends the whole quota). A slice the team lists no quota of may not be borrowed either (borrowing limit 0):
    Kueue would otherwise lend it another team's idle slices of a profile this team was never given."""
    limits = {f"nvidia.com/{key}": quota for key, quota in quotas.items()}

    def in_gpus(amounts: dict[str, int]) -> Fraction:
        return sum((group.fraction(resource) * amount for resource, amount in amounts.items()), Fraction(0))

    nominal = share_for(in_gpus({r: q.quota for r, q in limits.items()}), gpu_type, config.capacity_reserve)
    cpu: KubeObject = {"name": "cpu", "nominalQuota": nominal.cpu}
    memory: KubeObject = {"name": "memory", "nominalQuota": nominal.memory}
    resources = [cpu, memory, {"name": GPU_RESOURCE, "nominalQuota": "0"}]
    for resource in shared:
        quota = limits.get(resource)
        entry: KubeObject = {"name": resource, "nominalQuota": str(quota.quota if quota else 0)}
        if config.shares and quota is not None:
            if quota.borrow_limit is not None:
                entry["borrowingLimit"] = str(quota.borrow_limit)
            if quota.lend_limit is not None:
                entry["lendingLimit"] = str(quota.lend_limit)
        elif config.shares:
            entry["borrowingLimit"] = "0"
        resources.append(entry)
    if not config.shares:
        return resources
    borrow = {r: q.borrow_limit for r, q in limits.items() if q.borrow_limit is not None}
    lend = {r: q.lend_limit if q.lend_limit is not None else q.quota for r, q in limits.items()}
    for key, amounts in (
        ("borrowingLimit", borrow if len(borrow) == len(limits) else None),
        ("lendingLimit", lend if any(q.lend_limit is not None for q in limits.values()) else None),
    ):
        if amounts is not None:
            share = share_for(in_gpus(amounts), gpu_type, config.capacity_reserve)
            cpu[key], memory[key] = share.cpu, share.memory
    return resources


def local_queues(config: Config) -> list[KubeObject]:
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": _metadata(config, DEFAULT_LOCAL_QUEUE, namespace=namespace, team=team_name),
            "spec": {"clusterQueue": team_name},
        }
        for team_name, team in config.teams.items()
        for namespace in team.namespaces
    ]


def role_bindings(config: Config) -> list[KubeObject]:
    """Team groups may submit to their queues (batch user) and create Jobs and Pods (edit), per namespace."""
    bindings = []
    for team_name, team in config.teams.items():
        if not team.groups:
            continue
        subjects = [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"} for group in team.groups]
        for namespace in team.namespaces:
            for suffix, role in (("kueue-batch-user", BATCH_USER_ROLE), ("edit", EDIT_ROLE)):
                bindings.append(
                    {
                        "apiVersion": RBAC_API,
                        "kind": "RoleBinding",
                        "metadata": _metadata(config, f"{team_name}-{suffix}", namespace=namespace, team=team_name),
                        "subjects": [dict(subject) for subject in subjects],
                        "roleRef": {"kind": "ClusterRole", "name": role, "apiGroup": "rbac.authorization.k8s.io"},
                    }
                )
    return bindings


def capacity_publisher_rights(config: Config) -> list[KubeObject]:
    """In each team namespace, konduktor-core's capacity publisher may write its one ConfigMap and nothing else
    (RBAC cannot limit a create by name: it may create ConfigMaps there, and read or change only its own)."""
    rules = [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [CAPACITY_CONFIGMAP],
            "verbs": ["get", "patch", "update"],
        },
    ]
    subject = {"kind": "ServiceAccount", "name": CAPACITY_PUBLISHER, "namespace": SYSTEM_NAMESPACE}
    role_ref = {"kind": "Role", "name": CAPACITY_PUBLISHER, "apiGroup": "rbac.authorization.k8s.io"}
    objects: list[KubeObject] = []
    for team_name, team in config.teams.items():
        for namespace in team.namespaces:
            role: KubeObject = {"apiVersion": RBAC_API, "kind": "Role", "rules": copy.deepcopy(rules)}
            binding: KubeObject = {
                "apiVersion": RBAC_API,
                "kind": "RoleBinding",
                "subjects": [dict(subject)],
                "roleRef": dict(role_ref),
            }
            for obj in (role, binding):
                obj["metadata"] = _metadata(config, CAPACITY_PUBLISHER, namespace=namespace, team=team_name)
                objects.append(obj)
    return objects


def kueue_manager_settings(config: Config) -> KubeObject:
    """The parts of Kueue's `Configuration` (config.kueue.x-k8s.io/v1beta2) that the config implies.

    To be merged into the chart's controllerManagerConfigYaml, which the chart replaces as a whole.
    """
    settings: KubeObject = {"metrics": {"enableClusterQueueResources": True}}
    timeout = config.kueue.gang_timeout
    if timeout:
        # blockAdmission stays off: it admits one workload at a time cluster-wide.
        settings["waitForPodsReady"] = {
            "timeout": timeout,
            "blockAdmission": False,
            "recoveryTimeout": "3m",
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
        }
    if config.kueue.sharing == "fair":
        settings["fairSharing"] = {"preemptionStrategies": list(config.kueue.fair_sharing_strategies)}
    if config.kueue.exclude_resource_prefixes:
        settings["resources"] = {"excludeResourcePrefixes": list(config.kueue.exclude_resource_prefixes)}
    return settings


def _decimal_text(value: float) -> str:
    """A float as a Kubernetes quantity without exponent or trailing zeros: 1.0 -> "1", 0.25 -> "0.25"."""
    return format(Decimal(repr(value)).normalize(), "f")

"""A multi-cluster config (`clusters:`) -> the objects of each cluster, for Kueue's MultiKueue to dispatch jobs.

Kueue does the dispatching (docs/design/multikueue.md); this module only writes what it reads:

- the manager: the single-cluster objects of the whole config (namespaces, LocalQueues, ClusterQueues with each
  team's full quota, RoleBindings of the team groups), each team's ClusterQueue with the admission check of its own
  MultiKueueConfig, which lists the workers the team holds GPUs on, in dispatch order; one MultiKueueCluster per
  worker, reading the worker's kubeconfig from a Secret in Kueue's namespace (written by `up`, never rendered: it
  is a credential);
- each worker: the single-cluster objects of a config cut down to that worker (its nodes, the teams' GPUs there),
  without the team groups' RoleBindings (team members read everything on the manager), and the identity the
  manager's Kueue uses there: a ServiceAccount, its token Secret, read rights across the cluster (MultiKueue
  watches cluster-wide) and write rights only in the team namespaces.

Pure: the same config gives the same objects; nothing here reads a cluster.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from konduktor.config.clusters import WorkerQuotas, dispatch_workers, worker_quotas
from konduktor.config.model import Cluster, Config, WorkerCluster
from konduktor.quotas.render import (
    QUOTA_KINDS,
    RBAC_API,
    KubeObject,
    kueue_manager_settings,
    owner_labels,
    render,
)
from konduktor.vocabulary import (
    FLEET_EVENTS_SERVICE_ACCOUNT,
    KUBECONFIG_KEY,
    KUEUE_API,
    KUEUE_NAMESPACE,
    MULTIKUEUE_SERVICE_ACCOUNT,
    SYSTEM_NAMESPACE,
    TEAM_LABEL,
    fleet_events_secret,
)

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
DISPATCHERS = {
    "incremental": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
    "allAtOnce": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
}
READ_ROLE = f"{MULTIKUEUE_SERVICE_ACCOUNT}-read"
WRITE_ROLE = f"{MULTIKUEUE_SERVICE_ACCOUNT}-write"
TOKEN_SECRET = f"{MULTIKUEUE_SERVICE_ACCOUNT}-token"
EVENTS_ROLE = f"{FLEET_EVENTS_SERVICE_ACCOUNT}-read"
EVENTS_TOKEN_SECRET = f"{FLEET_EVENTS_SERVICE_ACCOUNT}-token"

# Kueue integration (its Configuration's integrations.frameworks) -> the kinds MultiKueue creates on a worker for
# it: (API group, resource, write verbs beyond create and delete). From the pinned Kueue's MultiKueue adapters and its
# create-multikueue-kubeconfig.sh; `deployment` has no adapter (its pods go by the `pod` integration).
FRAMEWORK_KINDS: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {
    "batch/job": [("batch", "jobs", ())],
    "pod": [("", "pods", ())],
    "statefulset": [("apps", "statefulsets", ())],
    "deployment": [],
    "jobset.x-k8s.io/jobset": [("jobset.x-k8s.io", "jobsets", ())],
    "leaderworkerset.x-k8s.io/leaderworkerset": [("leaderworkerset.x-k8s.io", "leaderworkersets", ())],
    "kubeflow.org/mpijob": [("kubeflow.org", "mpijobs", ())],
    "kubeflow.org/pytorchjob": [("kubeflow.org", "pytorchjobs", ())],
    "kubeflow.org/tfjob": [("kubeflow.org", "tfjobs", ())],
    "kubeflow.org/paddlejob": [("kubeflow.org", "paddlejobs", ())],
    "kubeflow.org/xgboostjob": [("kubeflow.org", "xgboostjobs", ())],
    "kubeflow.org/jaxjob": [("kubeflow.org", "jaxjobs", ())],
    "trainer.kubeflow.org/trainjob": [("trainer.kubeflow.org", "trainjobs", ())],
    "ray.io/rayjob": [("ray.io", "rayjobs", ())],
    "ray.io/rayservice": [("ray.io", "rayservices", ())],
    "ray.io/raycluster": [("ray.io", "rayclusters", ("update", "patch"))],
    "workload.codeflare.dev/appwrapper": [("workload.codeflare.dev", "appwrappers", ())],
}

Role = Literal["manager", "worker"]

# What `up` syncs (and prunes) on each cluster of a fleet beyond a single cluster's quota kinds. Not the manager's
# Secrets: the workers' kubeconfigs there are written from live tokens, not rendered.
_QUEUES_AT = QUOTA_KINDS.index((KUEUE_API, "ClusterQueue"))
MANAGER_KINDS = (
    *QUOTA_KINDS[:_QUEUES_AT],
    (KUEUE_API, "MultiKueueCluster"),
    (KUEUE_API, "MultiKueueConfig"),
    (KUEUE_API, "AdmissionCheck"),
    *QUOTA_KINDS[_QUEUES_AT:],
)
WORKER_KINDS = (
    *QUOTA_KINDS,
    ("v1", "ServiceAccount"),
    ("v1", "Secret"),
    (RBAC_API, "ClusterRole"),
    (RBAC_API, "ClusterRoleBinding"),
)
# Every kind Konduktor creates quota objects of, on any cluster: what `down` removes.
FLEET_KINDS = (*MANAGER_KINDS, *(kind for kind in WORKER_KINDS if kind not in MANAGER_KINDS))


@dataclass(frozen=True)
class ClusterObjects:
    """One cluster's name, its role, how to reach it (from config.yaml) and its objects in apply order."""

    name: str
    role: Role
    kubeconfig: str | None
    context: str | None
    objects: list[KubeObject]


def render_clusters(config: Config, frameworks: Sequence[str]) -> list[ClusterObjects]:
    """The manager's objects, then each worker's in dispatch order. `frameworks` are the Kueue integrations the
    platform's Kueue runs: the worker identity gets rights on their kinds and nothing more."""
    clusters = config.clusters
    if clusters is None:
        raise ValueError("render_clusters needs a config with `clusters:`")
    quotas = worker_quotas(config)
    result = [
        ClusterObjects(
            config.cluster.name,
            "manager",
            clusters.manager.kubeconfig,
            clusters.manager.context,
            manager_objects(config, quotas),
        )
    ]
    for worker in clusters.workers:
        result.append(
            ClusterObjects(
                worker.name,
                "worker",
                worker.kubeconfig,
                worker.context,
                worker_objects(config, worker, frameworks, quotas),
            )
        )
    return result


def check_name(team_name: str) -> str:
    """The AdmissionCheck and MultiKueueConfig of a team on the manager."""
    return f"{_CHECK_PREFIX}{team_name}"


def is_dispatch_check(name: str) -> bool:
    """A team's MultiKueue AdmissionCheck (`check_name`), as a Workload's status names it."""
    return name.startswith(_CHECK_PREFIX)


_CHECK_PREFIX = "multikueue-"


def kubeconfig_secret_name(worker_name: str) -> str:
    """The Secret (in Kueue's namespace on the manager) holding a worker's kubeconfig."""
    return f"multikueue-{worker_name}"


def manager_objects(config: Config, quotas: WorkerQuotas | None = None) -> list[KubeObject]:
    """The whole config's objects, each team's ClusterQueue behind its MultiKueue admission check, and the
    AdmissionChecks, MultiKueueConfigs and MultiKueueClusters.

    No Topology on the manager: it has no nodes, and a topology-aware flavor there would admit nothing.
    """
    assert config.clusters is not None
    quotas = worker_quotas(config) if quotas is None else quotas
    manager_config = config.model_copy(update={"topology": None})
    objects = render(manager_config)
    labels = owner_labels(config)
    for obj in objects:
        if obj["kind"] == "ClusterQueue":
            team_name = obj["metadata"]["name"]
            obj["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": check_name(team_name)}]}
    extra: list[KubeObject] = []
    for worker in config.clusters.workers:
        extra.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "MultiKueueCluster",
                "metadata": {"name": worker.name, "labels": dict(labels)},
                "spec": {
                    "clusterSource": {
                        "kubeConfig": {"locationType": "Secret", "location": kubeconfig_secret_name(worker.name)}
                    }
                },
            }
        )
    for team_name in config.teams:
        team_labels = {**labels, TEAM_LABEL: team_name}
        workers = [worker.name for worker in dispatch_workers(config, team_name, quotas)]
        extra.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "MultiKueueConfig",
                "metadata": {"name": check_name(team_name), "labels": dict(team_labels)},
                "spec": {"clusters": workers},
            }
        )
        extra.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "AdmissionCheck",
                "metadata": {"name": check_name(team_name), "labels": dict(team_labels)},
                "spec": {
                    "controllerName": MULTIKUEUE_CONTROLLER,
                    "parameters": {
                        "apiGroup": KUEUE_API.split("/")[0],
                        "kind": "MultiKueueConfig",
                        "name": check_name(team_name),
                    },
                },
            }
        )
    order = [kind for _, kind in MANAGER_KINDS]
    # As render orders objects; the MultiKueue kinds go before the ClusterQueues that name their checks (Kueue marks
    # a ClusterQueue inactive while a check it names is missing; it recovers, but in order there is no dip).
    return sorted(
        [*objects, *extra],
        key=lambda obj: (order.index(obj["kind"]), obj["metadata"].get("namespace", ""), obj["metadata"]["name"]),
    )


def worker_config(config: Config, worker: WorkerCluster, quotas: WorkerQuotas | None = None) -> Config:
    """The config as one worker sees it: its nodes, the teams dispatched to it with their GPUs there (lend limits
    no larger than that), no team groups (members read their jobs on the manager) and no `clusters:`."""
    quotas = worker_quotas(config) if quotas is None else quotas
    teams = {}
    for team_name, team in config.teams.items():
        if worker.name not in {one.name for one in dispatch_workers(config, team_name, quotas)}:
            continue
        here = quotas[worker.name][team_name]
        gpus = {}
        for type_name, limits in team.gpus.items():
            if type_name not in here:
                continue
            lend = None if limits.lend_limit is None else min(limits.lend_limit, here[type_name])
            gpus[type_name] = limits.model_copy(update={"quota": here[type_name], "lend_limit": lend})
        teams[team_name] = team.model_copy(update={"gpus": gpus, "groups": [], "clusters": None})
    gpu_types = {
        type_name: config.gpu_types[type_name].model_copy(update={"nodes": nodes})
        for type_name, nodes in worker.gpu_types.items()
    }
    return config.model_copy(
        update={"cluster": Cluster(name=worker.name), "gpu_types": gpu_types, "teams": teams, "clusters": None}
    )


def manager_view(config: Config) -> Config:
    """The config as `up` checks, verifies and simulates the manager: the teams with their whole quotas, but no GPU
    nodes (jobs run on the workers), so no node checks, no burn-in and no topology there."""
    return config.model_copy(
        update={
            "gpu_types": {},
            "topology": None,
            "preflight": config.preflight.model_copy(update={"nodes": None}),
            "burnin": config.burnin.model_copy(update={"level": "none"}),
        }
    )


def worker_objects(
    config: Config, worker: WorkerCluster, frameworks: Sequence[str], quotas: WorkerQuotas | None = None
) -> list[KubeObject]:
    """A worker's queues (as a single cluster with its share of the config) and the manager's identity there."""
    local = worker_config(config, worker, quotas)
    namespaces = [namespace for team in local.teams.values() for namespace in team.namespaces]
    return [*render(local), *worker_identity(local, namespaces, frameworks)]


def worker_rules(frameworks: Iterable[str]) -> tuple[list[KubeObject], list[KubeObject]]:
    """(read rules, granted cluster-wide; write rules, granted in the team namespaces) for MultiKueue on a worker:
    Workloads and the kinds of the given integrations, and nothing else
    (docs/design/multikueue.md#what-the-managers-identity-needs-on-a-worker)."""
    kinds: list[tuple[str, str, tuple[str, ...]]] = [("kueue.x-k8s.io", "workloads", ("update", "patch"))]
    for framework in frameworks:
        if framework not in FRAMEWORK_KINDS:
            raise ValueError(f"Kueue integration {framework!r}: its MultiKueue kinds are not known here")
        kinds.extend(kind for kind in FRAMEWORK_KINDS[framework] if kind not in kinds)
    read: list[KubeObject] = []
    write: list[KubeObject] = []
    for group, resource, extra in kinds:
        read.append({"apiGroups": [group], "resources": [resource], "verbs": ["get", "list", "watch"]})
        read.append({"apiGroups": [group], "resources": [f"{resource}/status"], "verbs": ["get"]})
        write.append({"apiGroups": [group], "resources": [resource], "verbs": ["create", "delete", *extra]})
    # Kueue's MultiKueue writes the remote Workload's status (its admission checks and the manager's decisions).
    write.append({"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["patch", "update"]})
    return read, write


def worker_identity(local: Config, namespaces: Sequence[str], frameworks: Sequence[str]) -> list[KubeObject]:
    """The ServiceAccount the manager's Kueue acts as on this worker, its long-lived token, and its rights; and the
    one the manager's fleet-events relay reads the health controller's Events as: Events in the team namespaces,
    read only."""
    labels = owner_labels(local)
    read, write = worker_rules(frameworks)
    return [
        *service_account(labels, MULTIKUEUE_SERVICE_ACCOUNT, TOKEN_SECRET),
        _cluster_role(labels, READ_ROLE, read),
        _cluster_role(labels, WRITE_ROLE, write),
        {
            "apiVersion": RBAC_API,
            "kind": "ClusterRoleBinding",
            "metadata": _metadata(labels, READ_ROLE),
            "subjects": [_subject(MULTIKUEUE_SERVICE_ACCOUNT)],
            "roleRef": _cluster_role_ref(READ_ROLE),
        },
        *_bindings_in(labels, WRITE_ROLE, MULTIKUEUE_SERVICE_ACCOUNT, namespaces),
        *service_account(labels, FLEET_EVENTS_SERVICE_ACCOUNT, EVENTS_TOKEN_SECRET),
        _cluster_role(labels, EVENTS_ROLE, [{"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list"]}]),
        *_bindings_in(labels, EVENTS_ROLE, FLEET_EVENTS_SERVICE_ACCOUNT, namespaces),
    ]


def service_account(labels: dict[str, str], name: str, token_secret: str) -> list[KubeObject]:
    """A ServiceAccount in Kueue's namespace with a long-lived token Secret, which the token controller fills with
    the account's token, its CA and namespace (`up` copies them into a kubeconfig on the manager)."""
    token_metadata = _metadata(labels, token_secret, KUEUE_NAMESPACE)
    token_metadata["annotations"] = {"kubernetes.io/service-account.name": name}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _metadata(labels, name, KUEUE_NAMESPACE),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": token_metadata,
        },
    ]


def _metadata(labels: dict[str, str], name: str, namespace: str | None = None) -> KubeObject:
    meta: KubeObject = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    return meta


def _subject(account: str) -> KubeObject:
    return {"kind": "ServiceAccount", "name": account, "namespace": KUEUE_NAMESPACE}


def _cluster_role_ref(role: str) -> KubeObject:
    return {"kind": "ClusterRole", "name": role, "apiGroup": "rbac.authorization.k8s.io"}


def _cluster_role(labels: dict[str, str], name: str, rules: list[KubeObject]) -> KubeObject:
    return {"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": _metadata(labels, name), "rules": rules}


def _bindings_in(labels: dict[str, str], role: str, account: str, namespaces: Sequence[str]) -> list[KubeObject]:
    """`role` (a ClusterRole) for `account`, granted in each of `namespaces` only."""
    return [
        {
            "apiVersion": RBAC_API,
            "kind": "RoleBinding",
            "metadata": _metadata(labels, role, namespace),
            "subjects": [_subject(account)],
            "roleRef": _cluster_role_ref(role),
        }
        for namespace in sorted(namespaces)
    ]


def manager_kueue_settings(config: Config) -> KubeObject:
    """Kueue's Configuration on the manager: the single-cluster settings, the MultiKueue dispatcher and how long a
    lost worker keeps its jobs. The incremental dispatcher nominates one worker at a time (stepSize 1), so the first
    worker in order gets the jobs while it admits them."""
    assert config.clusters is not None
    settings = kueue_manager_settings(config)
    multikueue: KubeObject = {"dispatcherName": DISPATCHERS[config.clusters.dispatch]}
    if config.clusters.worker_lost_timeout:
        multikueue["workerLostTimeout"] = config.clusters.worker_lost_timeout
    if config.clusters.dispatch == "incremental":
        multikueue["incrementalDispatcherConfig"] = {"stepSize": 1}
    settings["multiKueue"] = multikueue
    return settings


def worker_kubeconfig(
    server: str, ca_data: str, token: str, name: str, account: str = MULTIKUEUE_SERVICE_ACCOUNT
) -> str:
    """A self-contained kubeconfig for the manager's Kueue (or the fleet-events relay, `account`): the worker's API
    server, its CA (base64, as a token Secret's `ca.crt` holds it) and the service account token (plain text). JSON,
    which is YAML."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": account}}],
        "current-context": name,
    }
    return json.dumps(document, indent=2) + "\n"


def kubeconfig_secret(config: Config, worker_name: str, kubeconfig: str) -> KubeObject:
    """The Secret on the manager that a worker's MultiKueueCluster names, in Kueue's namespace (read by Kueue's
    service account; no team member holds rights there)."""
    return _kubeconfig_in(config, kubeconfig_secret_name(worker_name), KUEUE_NAMESPACE, kubeconfig)


def fleet_events_kubeconfig_secret(config: Config, worker_name: str, kubeconfig: str) -> KubeObject:
    """The Secret on the manager with the fleet-events relay's kubeconfig for a worker, in the platform's namespace
    (read only by the relay's service account, which may get these Secrets by name and no other)."""
    return _kubeconfig_in(config, fleet_events_secret(worker_name), SYSTEM_NAMESPACE, kubeconfig)


def _kubeconfig_in(config: Config, name: str, namespace: str, kubeconfig: str) -> KubeObject:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace, "labels": owner_labels(config)},
        "data": {KUBECONFIG_KEY: base64.b64encode(kubeconfig.encode()).decode()},
    }

"""Kueue as a local process beside the simulated control plane.

The CRDs, webhook configurations and user-facing ClusterRoles come from the Kueue module at the pinned tag. The
webhooks are pointed at https://127.0.0.1:<port> with our own CA, and get the namespace exemptions Kueue's release
manifests add.
"""

from __future__ import annotations

import base64
import copy
import functools
from pathlib import Path
from typing import Any

from konduktor.helm.values import merge_sections, umbrella_kueue_configuration
from konduktor.kube.documents import load_documents, load_generated
from konduktor.vocabulary import KUEUE_NAMESPACE

NAMESPACE = KUEUE_NAMESPACE
WEBHOOK_PREFIX = "kueue-"
# Kueue's release manifests exempt these namespaces from the job and pod webhooks; pods there must never
# depend on Kueue being up.
EXEMPT_NAMESPACES = ["kube-system", NAMESPACE]
# Integrations the simulated cluster serves: Jobs, and plain Pods (SkyPilot submits pods with queue labels).
FRAMEWORKS = ["batch/job", "pod"]
# The sections of the umbrella's Kueue Configuration the sim's Kueue runs with as they are: Kueue's pace at scale.
TUNING = ("controller", "clientConnection")
# A real install names its objects `<fullname>-<name>`; the umbrella chart sets Kueue's fullnameOverride to
# "kueue", and Kueue's own release manifests use the same prefix (namePrefix in config/default).
NAME_PREFIX = "kueue-"
# Labels that mark a ClusterRole as one of Kueue's roles for people (batch-user, batch-admin, the editors and
# viewers they aggregate), as opposed to the controller's own roles in the same folder.
_USER_ROLE_LABEL = "rbac.kueue.x-k8s.io/"


# Kueue calls the API as its own service account, as its chart runs it, so that the admission policies see
# Kueue (system:serviceaccount:kueue-system:kueue-controller-manager), not the admin, admit a workload.
SERVICE_ACCOUNT = "kueue-controller-manager"
TOKEN_SECRET = f"{SERVICE_ACCOUNT}-token"


def identity_objects() -> list[dict[str, Any]]:
    """Kueue's service account, bound to cluster-admin (the chart's finer roles are no concern of the sim), and
    a long-lived token for it that kube-controller-manager fills in."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "konduktor-sim-kueue"},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                "name": TOKEN_SECRET,
                "namespace": NAMESPACE,
                "annotations": {"kubernetes.io/service-account.name": SERVICE_ACCOUNT},
            },
        },
    ]


def token_kubeconfig(admin_kubeconfig: dict[str, Any], token: str, user: str = SERVICE_ACCOUNT) -> dict[str, Any]:
    """The admin's kubeconfig (its cluster and CA) with the service account's token as the only user."""
    context = next(c for c in admin_kubeconfig["contexts"] if c["name"] == admin_kubeconfig["current-context"])
    cluster = next(c for c in admin_kubeconfig["clusters"] if c["name"] == context["context"]["cluster"])
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
        "current-context": user,
    }


def read(path: Path) -> list[dict[str, Any]]:
    """The documents of a file of the pinned Kueue module, as a copy of what was read once per process: every `sim
    up` applies its CRDs, its user roles and its webhooks."""
    return copy.deepcopy(_read_once(path))


@functools.cache
def _read_once(path: Path) -> list[dict[str, Any]]:
    return load_generated(path)  # every `sim up` reads Kueue's 1.6 MB of CRDs


def crds(module_dir: Path) -> list[dict[str, Any]]:
    bases = module_dir / "config" / "components" / "crd" / "bases"
    return [doc for path in sorted(bases.glob("*.yaml")) for doc in read(path)]


def user_roles(module_dir: Path) -> list[dict[str, Any]]:
    """Kueue's ClusterRoles for people, named as a real install names them (`kueue-batch-user-role`, ...).

    Taken from the files config/components/rbac/kustomization.yaml lists: the aggregated batch-user and
    batch-admin roles and every role that aggregates into them. The controller's own roles stay out: the sim
    runs Kueue with the admin's kubeconfig.
    """
    rbac = module_dir / "config" / "components" / "rbac"
    kustomization = read(rbac / "kustomization.yaml")[0]
    roles = []
    for name in kustomization.get("resources") or []:
        for document in read(rbac / name):
            if document.get("kind") == "ClusterRole" and _is_user_role(document):
                role = copy.deepcopy(document)
                role["metadata"]["name"] = NAME_PREFIX + document["metadata"]["name"]
                labels = role["metadata"].setdefault("labels", {})
                labels.update({"app.kubernetes.io/name": "kueue", "konduktor.ai/sim": "kueue"})
                roles.append(role)
    return roles


def _is_user_role(role: dict[str, Any]) -> bool:
    labels = role.get("metadata", {}).get("labels") or {}
    selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []
    aggregated = [key for selector in selectors for key in (selector.get("matchLabels") or {})]
    return any(key.startswith(_USER_ROLE_LABEL) for key in [*labels, *aggregated])


def webhook_configurations(module_dir: Path, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, reached on 127.0.0.1:`port` and trusted through `ca_pem`."""
    manifests = module_dir / "config" / "components" / "webhook" / "manifests.yaml"
    ca_bundle = base64.b64encode(ca_pem).decode()
    result = []
    for source in read(manifests):
        config = copy.deepcopy(source)
        config["metadata"] = {
            "name": WEBHOOK_PREFIX + source["metadata"]["name"],
            "labels": {"app.kubernetes.io/managed-by": "konduktor", "konduktor.ai/sim": "kueue"},
        }
        for hook in config.get("webhooks", []):
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            groups = {group for rule in hook.get("rules", []) for group in rule.get("apiGroups", [])}
            if "kueue.x-k8s.io" not in groups:
                hook["namespaceSelector"] = {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": EXEMPT_NAMESPACES}
                    ]
                }
        result.append(config)
    return result


def manager_configuration(
    webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path, settings: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Kueue's Configuration for a single local process: no leader election, our certificates, loopback only.

    `settings` are what a config implies (fair sharing, waitForPodsReady, ...); sections merge one level deep.
    """
    umbrella = umbrella_kueue_configuration()
    configuration: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}", "enableClusterQueueResources": True},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        # The certificates are ours; Kueue's internal cert manager would rotate in a CA the
        # API server does not know for a Service that does not exist.
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": FRAMEWORKS},
        # How hard Kueue works, as the umbrella runs it: its controllers' concurrency and its client's rate limit.
        **{key: copy.deepcopy(umbrella[key]) for key in TUNING if key in umbrella},
    }
    return merge_sections(configuration, settings or {})


def stages(kwok_module_dir: Path, job_seconds: float) -> list[dict[str, Any]]:
    """kwok Stages: nodes become Ready and keep a lease; pods start at once and Job pods finish after `job_seconds`.

    Supplying any Stage replaces kwok's whole default set, so node and pod stages are all listed here. The
    per-pod annotations `pod-complete.stage.kwok.x-k8s.io/delay` etc. still override the defaults.
    """
    base = kwok_module_dir / "kustomize" / "stage"
    files = [
        base / "node" / "fast" / "node-initialize.yaml",
        base / "node" / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml",
        *[
            base / "pod" / "general" / f"{name}.yaml"
            for name in (
                "pod-create",
                "pod-init-container-running",
                "pod-init-container-completed",
                "pod-ready",
                "pod-complete",
                "pod-delete",
            )
        ],
    ]
    result = []
    for path in files:
        for stage in load_documents(path):
            name = stage["metadata"]["name"]
            delay = stage["spec"].get("delay")
            if delay is not None and name.startswith("pod-"):
                delay["durationMilliseconds"] = int(job_seconds * 1000) if name == "pod-complete" else 100
                delay.pop("jitterDurationMilliseconds", None)  # jitter is an upper bound; none means exact
                if name == "pod-delete":
                    # kwok's pod-delete jitters up to the deletionTimestamp (the grace period, 30 s by default):
                    # a deleted pod lingered a random 0-30 s. Gone after the delay, as a container that exits on
                    # SIGTERM at once.
                    delay.pop("jitterDurationFrom", None)
            result.append(stage)
    return result

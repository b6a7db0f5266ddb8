"""The names Konduktor shares with Kubernetes, NVIDIA's components and itself, spelt once.

Resource names, label, taint and annotation keys, and namespaces that more than one package reads or writes.
A name only one module uses stays in that module.
"""

# NVIDIA's device plugin advertises GPUs under this extended resource; GPU Feature Discovery labels the model.
GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
# Set by the kubelet on every node; the lowest level of every topology Konduktor renders.
HOSTNAME_LABEL = "kubernetes.io/hostname"
# The label the Job controller puts on a Job's pods: the Job's name.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# Kueue's API, the only version Konduktor reads and writes: v1beta2, its storage version (v1beta1 is deprecated;
# a Kueue before 0.15 does not serve v1beta2, which preflight reports).
KUEUE_API = "kueue.x-k8s.io/v1beta2"

# Where Kueue runs, on every cluster; on a MultiKueue manager it holds the Secrets with the workers' kubeconfigs.
KUEUE_NAMESPACE = "kueue-system"
# On each MultiKueue worker, the service account (in KUEUE_NAMESPACE) the manager's Kueue acts as.
MULTIKUEUE_SERVICE_ACCOUNT = "konduktor-multikueue"
# On each worker too, the service account the manager's fleet-events relay reads the health controller's Events as;
# on the manager, the relay's own service account, and the prefix of the Secrets (in SYSTEM_NAMESPACE) holding its
# kubeconfig for each worker (`fleet_events_secret`).
FLEET_EVENTS_SERVICE_ACCOUNT = "konduktor-fleet-events"
# The key of a worker's kubeconfig in those Secrets on the manager: where Kueue reads it in the Secret a
# MultiKueueCluster names (MultiKueueConfigSecretKey), and the relay in its own.
KUBECONFIG_KEY = "kubeconfig"

# Where the platform runs: the Helm release, the operators and the health controller.
SYSTEM_NAMESPACE = "konduktor-system"
# Where burn-in, requalification and preflight pods run (charts/konduktor-core burnin.namespace): a namespace of
# their own, with privileged Pod Security, holding only their service accounts, so that the right to run
# privileged pods there gives nothing in konduktor-system, home of the operators' service accounts.
BURNIN_NAMESPACE = "konduktor-burnin"
# The service account burn-in and requalification pods run as, installed there by konduktor-core.
BURNIN_SERVICE_ACCOUNT = "konduktor-burnin"

# The team a namespace or a Kueue object belongs to.
TEAM_LABEL = "konduktor.ai/team"
# A team namespace's security profile (gpu, restricted, baseline, privileged): policies/security-profile.yaml
# judges its pods and pod templates by it.
SECURITY_PROFILE_LABEL = "konduktor.ai/security-profile"

# The health controller's quarantine: the taint it puts on a node, and the annotations that say when and why,
# and how the node's requalification ended. Burn-in tolerates the taint; preflight and the CLI read them.
HEALTH_TAINT_KEY = "konduktor.ai/gpu-health"
QUARANTINED_AT = "konduktor.ai/quarantined-at"
QUARANTINE_REASON = "konduktor.ai/quarantine-reason"
REQUALIFIED_AT = "konduktor.ai/requalified-at"
REQUALIFICATION_RESULT = "konduktor.ai/requalification-result"
# On a Kueue Workload the health controller deactivated to requeue it off a quarantined node (label, so that it
# finds them again with a selector), and which node and fault that was (annotation). Both go on reactivation.
REQUEUE_LABEL = "konduktor.ai/requeued-for-node-health"
REQUEUE_REASON = "konduktor.ai/requeue-reason"
# The reason of the Warning Event the health controller puts on such a workload's owner (Job, JobSet, ...) and on
# its Workload, which says which node, when and why; `konduktor why` reads it back (Kueue emits no such reason).
REQUEUED_FOR_NODE_HEALTH = "RequeuedForNodeHealth"
# On a Kueue Workload the health controller deactivated because admission refused its pods (label), and the
# refusal (annotation): `konduktor why` shows it. It stays deactivated; the job is fixed and submitted again.
PODS_REFUSED_LABEL = "konduktor.ai/pods-refused"
PODS_REFUSED_REASON = "konduktor.ai/pods-refused-reason"
# The Node condition in which the health controller states whether a node's GPUs are healthy.
GPU_HEALTHY_CONDITION = "GPUHealthy"

# What the platform publishes to team members about GPU capacity (free GPUs per node, quarantines, every team's
# quota and usage; no job, pod or namespace names): one ConfigMap of this name in each team namespace.
CAPACITY_CONFIGMAP = "konduktor-capacity"
# The service account (in SYSTEM_NAMESPACE) of konduktor-core's capacity publisher, which writes that ConfigMap.
CAPACITY_PUBLISHER = "konduktor-capacity-publisher"

# What Helm writes on every object a release made from its templates: which release owns it.
HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"

# The burn-in tier a Job runs, on the Job.
BURNIN_TIER_ANNOTATION = "konduktor.ai/burnin-tier"
# On a GPU node: the last burn-in verdict `up` or `konduktor-install burnin` recorded for it, as JSON (verdict,
# level, run, time, and the fingerprint of what the verdict was about: GPU product and count, driver labels).
# `up` burns in again only nodes without one, or changed since (`burnin.record`); `nodes` shows it.
BURNIN_RESULT = "konduktor.ai/burnin-result"


def fleet_events_secret(worker: str) -> str:
    """The Secret on a MultiKueue manager (in SYSTEM_NAMESPACE) with the relay's kubeconfig for a worker."""
    return f"{FLEET_EVENTS_SERVICE_ACCOUNT}-{worker}"

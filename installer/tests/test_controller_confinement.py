"""The health controller holds no more power than it uses, enforced by the simulated cluster's real API server.

konduktor-core is installed on the sim with its RBAC and admission policies; every request below is made as the
controller's service account (with a token the API server issued for it), through the controller's own code where
it has one. What the controller does must pass; anything else a compromised controller might try must be refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import Sim
from identities import service_account_kubeconfig
from ruamel.yaml import YAML
from sim_fixture import release_nodes
from support import render

from konduktor.burnin.tiers import BurnInImages
from konduktor.errors import KonduktorError
from konduktor.health.decide import (
    CONDITION_TYPE,
    TAINT_VALUE,
    DeactivateWorkload,
    NodeState,
    ReactivateWorkload,
    SetCondition,
    Taint,
    UpdateNode,
)
from konduktor.health.leader import LEASE_NAME, LeaderLease
from konduktor.health.node_writes import FIELD_MANAGER, condition_status, update_node
from konduktor.health.refused import GiveBack
from konduktor.health.refused_writes import give_back
from konduktor.health.requalification import PodLogs, Requalifier
from konduktor.health.settings import HealthSettings, RequalificationSettings
from konduktor.health.telemetry import HealthMetrics
from konduktor.health.workloads import deactivate, reactivate
from konduktor.helm.release import CHARTS, install_or_upgrade, uninstall
from konduktor.kube.client import MERGE_PATCH, ApiError, Kube
from konduktor.kube.documents import load_documents
from konduktor.vocabulary import (
    BURNIN_NAMESPACE,
    HEALTH_TAINT_KEY,
    KUEUE_API,
    PODS_REFUSED_LABEL,
    PODS_REFUSED_REASON,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    REQUALIFICATION_RESULT,
    REQUALIFIED_AT,
    REQUEUE_LABEL,
    REQUEUE_REASON,
)
from konduktor.waiting import wait_until

CORE = CHARTS / "konduktor-core"
RELEASE_NAMESPACE = "konduktor-system"
SERVICE_ACCOUNT = "konduktor-konduktor-core-health"  # the chart's name for it with release "konduktor"
NODE = "gpu-h100-0002"
HEALTH_TAINT = Taint(HEALTH_TAINT_KEY, "NoSchedule", TAINT_VALUE)
POLICY_PREFIX = "konduktor-konduktor-core-"  # the chart's policy names with release "konduktor"


def refusal(attempt: Callable[[], object]) -> ApiError:
    with pytest.raises(ApiError) as raised:
        attempt()
    assert raised.value.status == 403, raised.value.message
    return raised.value


def by_policy(attempt: Callable[[], object], policy: str, says: str) -> None:
    """Refused by the named admission policy (RBAC allowed the request), with its message."""
    problem = refusal(attempt)
    assert f"ValidatingAdmissionPolicy '{POLICY_PREFIX}{policy}'" in problem.message, problem.message
    assert says in problem.message, problem.message


# A Workload of no team's, in the release's namespace, that the workload policy's probe tries to change.
PROBE_WORKLOAD = {
    "apiVersion": KUEUE_API,
    "kind": "Workload",
    "metadata": {"name": "confinement-probe", "namespace": RELEASE_NAMESPACE},
    "spec": {
        "queueName": "none",
        "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "x", "image": "x"}]}}}],
    },
}


def policy_probes(controller: Kube) -> dict[str, Callable[[], object]]:
    """For each confinement policy, a dry-run request of the controller's that RBAC allows and only it refuses."""
    dry_run = {"dryRun": "All"}

    def send(method: str, api_version: str, kind: str, namespace: str | None, name: str | None, body: object) -> bytes:
        path = controller.resource(api_version, kind).path(namespace, name)
        content_type = MERGE_PATCH if method == "PATCH" else "application/json"
        return controller.send(method, path, query=dry_run, body=body, content_type=content_type)

    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "probe"}}
    pod = {"restartPolicy": "Never", "containers": [{"name": "x", "image": "docker.io/library/busybox:1.37"}]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe"}, "spec": {"template": {"spec": pod}}}
    probe = PROBE_WORKLOAD["metadata"]["name"]
    return {
        "health-node-writes": lambda: send("PATCH", "v1", "Node", None, NODE, {"metadata": {"labels": {"x": "y"}}}),
        "health-objects": lambda: send("POST", "coordination.k8s.io/v1", "Lease", RELEASE_NAMESPACE, None, lease),
        "health-jobs": lambda: send("POST", "batch/v1", "Job", BURNIN_NAMESPACE, None, job),
        "health-workloads": lambda: send(
            "PATCH", KUEUE_API, "Workload", RELEASE_NAMESPACE, probe, {"spec": {"queueName": "other"}}
        ),
    }


def await_enforced(sim: Sim, policy: str, probe: Callable[[], object]) -> None:
    name = POLICY_PREFIX + policy
    outcome: list[str] = []

    def refused() -> bool:
        try:
            probe()
        except ApiError as problem:
            outcome[:] = [problem.message]
            return problem.status == 403 and f"ValidatingAdmissionPolicy '{name}'" in problem.message
        outcome[:] = ["admitted"]
        return False

    def not_enforced() -> KonduktorError:
        found = sim.kube.get("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", name) or {}
        return KonduktorError(f"{name} not enforced: last try {outcome}; policy status {found.get('status')}")

    wait_until(f"{name} to be enforced", refused, timeout=60, on_timeout=not_enforced)


@pytest.fixture(scope="module")
def controller(sim: Sim, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """A client that authenticates as the controller's service account, with a token from the API server."""
    values = YAML(typ="safe").load((CORE / "values-sim.yaml").read_text())
    # Only the confinement policies (always in force): the teams' policies are tried in test_policies.py, and
    # leaving them enforcing here would judge the later modules' pods.
    values["policies"] = {"enabled": False}
    install_or_upgrade(sim.kubeconfig, CORE, "konduktor", RELEASE_NAMESPACE, values)
    # The Lease as a new controller finds it: an earlier module's platform (`up` runs the chart's controller on the
    # sim) may have left it held for another few seconds.
    sim.cluster.platform.stop()
    sim.kube.delete("coordination.k8s.io/v1", "Lease", LEASE_NAME, RELEASE_NAMESPACE)
    path = tmp_path_factory.mktemp("controller") / "kubeconfig.yaml"
    kube = Kube(service_account_kubeconfig(sim.kube, sim.kubeconfig, RELEASE_NAMESPACE, SERVICE_ACCOUNT, path))
    # The API server's policy informers pick new bindings up asynchronously, each on its own: every policy the tests
    # try is awaited, through a dry run the policy must refuse.
    sim.kube.apply(PROBE_WORKLOAD)
    try:
        for policy, probe in policy_probes(kube).items():
            await_enforced(sim, policy, probe)
    finally:
        sim.kube.delete(KUEUE_API, "Workload", PROBE_WORKLOAD["metadata"]["name"], RELEASE_NAMESPACE)
    try:
        yield kube
    finally:
        kube.close()
        release_nodes(sim.kube, [NODE])
        sim.kube.delete("coordination.k8s.io/v1", "Lease", LEASE_NAME, RELEASE_NAMESPACE)
        uninstall(sim.kubeconfig, "konduktor", RELEASE_NAMESPACE)


def fresh(sim: Sim) -> dict[str, Any]:
    node = sim.kube.get("v1", "Node", NODE)
    assert node is not None
    return node


def conditional(sim: Sim, change: dict[str, Any]) -> dict[str, Any]:
    """A merge patch made conditional on the Node as it is now, as the controller's own writes are."""
    return {
        **change,
        "metadata": {**change.get("metadata", {}), "resourceVersion": fresh(sim)["metadata"]["resourceVersion"]},
    }


@pytest.mark.sim
def test_the_controller_writes_its_taint_annotations_and_condition(sim: Sim, controller: Kube) -> None:
    quarantine = UpdateNode(
        NODE,
        add_taints=(HEALTH_TAINT,),
        annotations={QUARANTINED_AT: "2026-01-01T00:00:00Z", QUARANTINE_REASON: "Xid79 test"},
    )
    written = update_node(controller, quarantine)
    assert written is not None and any(t["key"] == HEALTH_TAINT_KEY for t in written["spec"]["taints"])
    controller.apply_status(
        condition_status(SetCondition(NODE, False, "Xid79", "test"), 0), field_manager=FIELD_MANAGER
    )
    conditions = {c["type"]: c["status"] for c in fresh(sim)["status"]["conditions"]}
    assert conditions[CONDITION_TYPE] == "False"
    release = UpdateNode(
        NODE,
        remove_taints=(HEALTH_TAINT,),
        annotations={QUARANTINED_AT: None, QUARANTINE_REASON: None, REQUALIFIED_AT: "2026-01-01T01:00:00Z"},
    )
    assert update_node(controller, release) is not None
    assert not any(t["key"] == HEALTH_TAINT_KEY for t in fresh(sim)["spec"].get("taints", []))


@pytest.mark.sim
def test_the_controller_cannot_change_anything_else_on_a_node(sim: Sim, controller: Kube) -> None:
    # Someone else's taint on the node, which the controller must leave alone.
    before = fresh(sim)["spec"].get("taints", [])
    maintenance = {"key": "ops/maintenance", "effect": "NoSchedule"}
    sim.kube.patch("v1", "Node", NODE, conditional(sim, {"spec": {"taints": [*before, maintenance]}}))
    try:
        policy, node = (
            "health-node-writes",
            lambda change: controller.patch("v1", "Node", NODE, conditional(sim, change)),
        )
        by_policy(lambda: node({"metadata": {"labels": {"nvidia.com/gpu.product": "fake"}}}), policy, "labels")
        by_policy(lambda: node({"metadata": {"annotations": {"team.example/owner": "x"}}}), policy, "annotations")
        by_policy(lambda: node({"spec": {"unschedulable": True}}), policy, "no cordon")
        by_policy(lambda: node({"spec": {"taints": []}}), policy, "only its own taint")
        other = [*before, maintenance, {"key": "evil", "effect": "NoExecute"}]
        by_policy(lambda: node({"spec": {"taints": other}}), policy, "only its own taint")
        ready = {"type": "Ready", "status": "False", "reason": "Forged", "message": "forged"}
        forged = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}, "status": {"conditions": [ready]}}
        by_policy(lambda: controller.apply_status(forged, field_manager="forger"), policy, "only the GPUHealthy")
        capacity = {"status": {"capacity": {"nvidia.com/gpu": "0"}}}
        by_policy(lambda: controller.patch("v1", "Node", NODE, capacity, subresource="status"), policy, "capacity")
        # Its own keys through the status subresource are still its own; another's label is not.
        by_policy(
            lambda: controller.patch("v1", "Node", NODE, {"metadata": {"labels": {"x": "y"}}}, subresource="status"),
            policy,
            "labels",
        )
        # RBAC: no other verb on Nodes.
        refusal(lambda: controller.delete("v1", "Node", NODE))
    finally:
        sim.kube.patch("v1", "Node", NODE, conditional(sim, {"spec": {"taints": before or None}}))


@pytest.mark.sim
def test_in_its_namespace_the_controller_writes_only_its_own_lease(sim: Sim, controller: Kube) -> None:
    lease = LeaderLease(controller, RELEASE_NAMESPACE, "confinement-test", 15, HealthMetrics())
    assert lease.acquire_or_renew({"konduktor.ai/loki-cursor": "test"})
    lease.release()
    other = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "c1f6bfd2.kueue.x-k8s.io", "namespace": RELEASE_NAMESPACE},
        "spec": {"holderIdentity": "forged"},
    }
    by_policy(lambda: controller.create(other), "health-objects", "only its own Lease")
    sim.kube.apply(other)
    try:
        patch = {"spec": {"holderIdentity": "forged-again"}}
        refusal(
            lambda: controller.patch(
                "coordination.k8s.io/v1", "Lease", other["metadata"]["name"], patch, RELEASE_NAMESPACE
            )
        )
    finally:
        sim.kube.delete("coordination.k8s.io/v1", "Lease", other["metadata"]["name"], RELEASE_NAMESPACE)
    # The admission policies' parameters, and ConfigMaps in general: neither read nor written.
    refusal(lambda: controller.get("v1", "ConfigMap", "konduktor-admission", RELEASE_NAMESPACE))
    change = {"data": {"priorityClasses": "system-cluster-critical"}}
    refusal(lambda: controller.patch("v1", "ConfigMap", "konduktor-admission", change, RELEASE_NAMESPACE))
    planted = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "planted", "namespace": RELEASE_NAMESPACE}}
    refusal(lambda: controller.create(planted))
    by_policy(
        lambda: controller.create({**planted, "metadata": {"name": "planted", "namespace": BURNIN_NAMESPACE}}),
        "health-objects",
        "only burn-in scripts ConfigMaps",
    )


WORKLOADS_NAMESPACE = "confinement-work"


@pytest.fixture()
def workload(sim: Sim) -> Iterator[str]:
    """A Workload as Kueue makes them for a Job, created directly (an admin's prebuilt Workload)."""
    sim.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WORKLOADS_NAMESPACE}})
    container = {"name": "train", "image": "registry.example/train:1", "resources": {"requests": {"cpu": "1"}}}
    sim.kube.create(
        {
            "apiVersion": KUEUE_API,
            "kind": "Workload",
            "metadata": {"name": "train", "namespace": WORKLOADS_NAMESPACE, "labels": {"team": "a"}},
            "spec": {
                "queueName": "default",
                "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}],
            },
        }
    )
    try:
        yield "train"
    finally:
        sim.kube.delete("v1", "Namespace", WORKLOADS_NAMESPACE)


@pytest.mark.sim
def test_the_controller_requeues_a_workload_through_spec_active_and_changes_nothing_else(
    sim: Sim, controller: Kube, workload: str
) -> None:
    # What the controller reads to find the work on a node and its owners' opt-out.
    assert controller.list("v1", "Pod", field_selector=f"spec.nodeName={NODE}") is not None
    assert controller.get("v1", "Namespace", WORKLOADS_NAMESPACE) is not None
    assert controller.list(KUEUE_API, "Workload", WORKLOADS_NAMESPACE)

    def patch(change: dict[str, Any]) -> object:
        return controller.patch(KUEUE_API, "Workload", workload, change, WORKLOADS_NAMESPACE)

    # Someone else's deactivation is theirs: the controller may not undo it.
    sim.kube.patch(KUEUE_API, "Workload", workload, {"spec": {"active": False}}, WORKLOADS_NAMESPACE)
    by_policy(lambda: patch({"spec": {"active": True}}), "health-workloads", "only a Workload it deactivated")
    sim.kube.patch(KUEUE_API, "Workload", workload, {"spec": {"active": True}}, WORKLOADS_NAMESPACE)

    by_policy(lambda: patch({"spec": {"active": False}}), "health-workloads", "only with its requeue label")
    by_policy(lambda: patch({"spec": {"queueName": "other"}}), "health-workloads", "only spec.active")
    by_policy(lambda: patch({"spec": {"priority": 1000}}), "health-workloads", "only spec.active")
    by_policy(lambda: patch({"metadata": {"labels": {"team": None}}}), "health-workloads", "own labels and annotations")
    by_policy(
        lambda: patch({"metadata": {"annotations": {"kueue.x-k8s.io/x": "y"}}}),
        "health-workloads",
        "own labels and annotations",
    )

    # Its own two writes pass, through its own code.
    deactivate(controller, DeactivateWorkload(NODE, WORKLOADS_NAMESPACE, workload, f"Xid79 on {NODE} at now"))
    marked = sim.kube.get(KUEUE_API, "Workload", workload, WORKLOADS_NAMESPACE)
    assert marked is not None and marked["spec"]["active"] is False
    assert marked["metadata"]["labels"][REQUEUE_LABEL] == "true"
    reactivate(controller, ReactivateWorkload(NODE, WORKLOADS_NAMESPACE, workload))
    back = sim.kube.get(KUEUE_API, "Workload", workload, WORKLOADS_NAMESPACE)
    assert back is not None and back["spec"]["active"] is True
    assert REQUEUE_LABEL not in back["metadata"]["labels"] and back["metadata"]["labels"]["team"] == "a"
    # Giving back the quota of a workload whose pods are refused: it reads the FailedCreate Events, deactivates
    # with its pods-refused label, and may not reactivate what it so stopped.
    assert controller.list("v1", "Event", field_selector="reason=FailedCreate") is not None
    give_back(controller, GiveBack(WORKLOADS_NAMESPACE, workload, None, "violates PodSecurity", 3), "test", "test")
    stopped = sim.kube.get(KUEUE_API, "Workload", workload, WORKLOADS_NAMESPACE)
    assert stopped is not None and stopped["spec"]["active"] is False
    assert stopped["metadata"]["labels"][PODS_REFUSED_LABEL] == "true"
    assert stopped["metadata"]["annotations"][PODS_REFUSED_REASON] == "violates PodSecurity"
    by_policy(lambda: patch({"spec": {"active": True}}), "health-workloads", "only a Workload it deactivated")

    # RBAC: no creating or deleting work, no changing pods.
    copy = {"apiVersion": KUEUE_API, "kind": "Workload", "metadata": {"name": "x", "namespace": WORKLOADS_NAMESPACE}}
    refusal(lambda: controller.create(copy))
    refusal(lambda: controller.delete(KUEUE_API, "Workload", workload, WORKLOADS_NAMESPACE))
    refusal(lambda: controller.patch("v1", "Namespace", WORKLOADS_NAMESPACE, {"metadata": {"labels": {"a": "b"}}}))


def requalification_job(controller: Kube, node: str) -> tuple[Requalifier, dict[str, Any]]:
    """The Job the controller's requalifier builds, created through its own code."""
    settings = RequalificationSettings(tier="quick")
    requalifier = Requalifier(controller, settings, HealthMetrics(), PodLogs(controller, HealthMetrics()))
    requalifier.start(NodeState(node, gpu_expected=10, labels={"kubernetes.io/hostname": node}), 1.8e9)
    [run] = requalifier.runs
    job = controller.get("batch/v1", "Job", run.job, BURNIN_NAMESPACE)
    assert job is not None
    return requalifier, job


@pytest.mark.sim
def test_the_controller_creates_only_pinned_burnin_jobs_in_the_burnin_namespace(sim: Sim, controller: Kube) -> None:
    _, job = requalification_job(controller, NODE)
    try:
        template = job["spec"]["template"]["spec"]
        assert template["serviceAccountName"] == "konduktor-burnin"
        name = job["metadata"]["name"]

        def variant(change: Callable[[dict[str, Any]], None], namespace: str = BURNIN_NAMESPACE) -> dict[str, Any]:
            spec = {k: v for k, v in job["spec"].items() if k not in ("selector",)}
            template = {"metadata": {"labels": {}}, "spec": {**job["spec"]["template"]["spec"]}}
            copy = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": f"{name[:40]}-x", "namespace": namespace},
                "spec": {**spec, "template": template},
            }
            change(copy["spec"]["template"]["spec"])
            return copy

        def other_image(pod: dict[str, Any]) -> None:
            pod["containers"] = [{**pod["containers"][0], "image": "docker.io/library/busybox:1.37"}]

        def other_init_image(pod: dict[str, Any]) -> None:
            pod["initContainers"] = [{"name": "x", "image": "docker.io/library/busybox:1.37", "command": ["true"]}]

        def other_account(pod: dict[str, Any]) -> None:
            pod["serviceAccountName"] = "default"

        policy = "health-jobs"
        by_policy(lambda: controller.create(variant(other_image)), policy, "only the pinned burn-in images")
        by_policy(lambda: controller.create(variant(other_init_image)), policy, "only the pinned burn-in images")
        # Another account is refused by the controller's confinement, or first by the team policy that lets only the
        # burn-in accounts tolerate the health taint: either way by an admission policy, RBAC having allowed it.
        problem = refusal(lambda: controller.create(variant(other_account)))
        assert (
            "konduktor-konduktor-core-health-jobs" in problem.message
            or "konduktor-gpu-health-toleration" in problem.message
        ), problem.message
        refusal(lambda: controller.create(variant(lambda pod: None, namespace=RELEASE_NAMESPACE)))
        refusal(lambda: controller.create(variant(lambda pod: None, namespace="default")))
        refusal(lambda: controller.delete("batch/v1", "Job", name, BURNIN_NAMESPACE))
    finally:
        sim.kube.delete("batch/v1", "Job", job["metadata"]["name"], BURNIN_NAMESPACE)


def test_the_policies_name_what_the_controller_writes() -> None:
    """The chart's lists are the code's: the node annotations, the Lease, the burn-in images."""
    confinement = (CORE / "templates" / "health-confinement.yaml").read_text()
    for key in (
        QUARANTINED_AT,
        QUARANTINE_REASON,
        REQUALIFIED_AT,
        REQUALIFICATION_RESULT,
        HEALTH_TAINT_KEY,
        CONDITION_TYPE,
        REQUEUE_LABEL,
        REQUEUE_REASON,
        PODS_REFUSED_LABEL,
        PODS_REFUSED_REASON,
    ):
        assert f'"{key}"' in confinement or f"'{key}'" in confinement, key
    assert "\nkonduktor-health\n" in (CORE / "templates" / "_helpers.tpl").read_text()
    assert LEASE_NAME == "konduktor-health"
    values = load_documents(CORE / "values.yaml")[0]
    assert values["burnin"]["namespace"] == BURNIN_NAMESPACE == RequalificationSettings().namespace
    defaults = BurnInImages()
    chosen = values["burnin"]["images"]
    assert (chosen["dcgm"], chosen["pytorch"], chosen["ncclTests"]) == (
        defaults.dcgm,
        defaults.pytorch,
        defaults.nccl_tests,
    )


def test_the_controller_runs_its_jobs_where_the_chart_gives_it_rights() -> None:
    """burnin.namespace and burnin.images move the controller's settings, its Role and its policies together."""
    mirrored = "registry.local/nvidia/dcgm:4.6.0-1-ubuntu24.04"
    objects = render(None, "--set", "burnin.namespace=gpu-burnin", "--set", f"burnin.images.dcgm={mirrored}")
    settings = next(o for o in objects if o["kind"] == "ConfigMap" and "health.yaml" in o.get("data", {}))
    health = HealthSettings.model_validate(YAML(typ="safe").load(settings["data"]["health.yaml"]))
    assert health.requalification.namespace == "gpu-burnin"
    assert health.requalification.images.dcgm == mirrored
    assert health.requalification.images.pytorch == BurnInImages().pytorch
    role = next(o for o in objects if o["kind"] == "Role" and o["metadata"]["name"].endswith("-requalify"))
    assert role["metadata"]["namespace"] == "gpu-burnin"
    jobs = next(
        o for o in objects if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"].endswith("-jobs")
    )
    assert 'request.namespace == "gpu-burnin"' in jobs["spec"]["validations"][0]["expression"]
    [allowed] = [v["expression"] for v in jobs["spec"]["variables"] if v["name"] == "images"]
    assert mirrored in allowed and BurnInImages().dcgm not in allowed
    [namespace] = [o for o in objects if o["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == "gpu-burnin"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"

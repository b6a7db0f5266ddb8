"""A team member stays inside their team: each promise of docs/security.md ("A team member") tried the way a
member of team-a would break it, as that member (impersonation of the team's group, bound as the installer binds
it), against the simulated cluster's real kube-apiserver with examples/config.yaml's team namespaces and
Konduktor's admission policies as they ship. Attempts are server-side dry runs unless they need a real object."""

from __future__ import annotations

import copy
import json
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from admission import create_refusal, patch_refusal, refusal
from conftest import EXAMPLE, Sim
from health_cluster import controller, controller_namespace, leave_cluster
from health_cluster import settings as health_settings

from konduktor.cli.team import main as team_main
from konduktor.config.load import load_config, parse_config
from konduktor.config.model import SecurityProfile, Team
from konduktor.errors import ExitCode, KonduktorError
from konduktor.gpu.sharing import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL, SHARED_RESOURCE
from konduktor.kube.client import MERGE_PATCH, ApiError, Identity, Kube
from konduktor.kube.conditions import condition
from konduktor.paths import product_dir
from konduktor.quotas.render import pod_security_labels, render
from konduktor.quotas.sync import sync_quotas
from konduktor.sim.workloads import RESTRICTED_CONTAINER, RESTRICTED_POD, gpu_job, is_true, workload_of
from konduktor.vocabulary import GPU_RESOURCE, KUEUE_API, PRODUCT_LABEL, TEAM_LABEL
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
TEAM = "team-a"  # its namespace is team-a, its group team-a (examples/config.yaml)
MEMBER = Identity("alice", TEAM)
# May create and label namespaces without being a cluster admin (policies/cases/setup.yaml).
NAMESPACE_ADMIN = Identity("carol", "namespace-admins")
HEALTH_TAINT = {"key": "konduktor.ai/gpu-health", "operator": "Exists", "effect": "NoSchedule"}
TOO_MANY = 64  # GPUs: more than team-a's quota and borrowing limit together


def pod(name: str, *, gpus: int = 0, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A pod fit for Pod Security `restricted`, so that what refuses a variant of it is the policy under test."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.example/train:1",
        "securityContext": copy.deepcopy(RESTRICTED_CONTAINER),
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": TEAM, "labels": labels or {}},
        "spec": {"securityContext": copy.deepcopy(RESTRICTED_POD), "containers": [container], **spec},
    }


def refused_by_policy(problem: ApiError | None, policy: str) -> str:
    assert problem is not None, f"admitted; {policy} should have refused it"
    assert problem.status == 403, problem.message
    assert f"ValidatingAdmissionPolicy '{policy}'" in problem.message, problem.message
    return problem.message


@pytest.fixture(scope="module")
def member(sim: Sim, enforcing: Kube) -> Iterator[Kube]:
    """A client sent as a member of team-a, once the example's team namespaces, queues and bindings exist."""
    sync_quotas(sim.kube, load_config(EXAMPLE).config, prune=False, dry_run=False)
    wait_until(
        "team-a's ClusterQueue to be active", lambda: is_true(sim.kube.get(KUEUE_API, "ClusterQueue", TEAM), "Active")
    )
    client = Kube(sim.kubeconfig, impersonate=MEMBER)
    try:
        yield client
    finally:
        client.close()
        for job in ("tenancy-cpu", "tenancy-gpu", "tenancy-queued", "tenancy-ngc"):
            sim.kube.delete("batch/v1", "Job", job, TEAM)
        for name in ("tenancy-pending", "tenancy-gated", "tenancy-mig"):
            sim.kube.delete("v1", "Pod", name, TEAM)


@pytest.fixture(scope="module")
def pending_pod(member: Kube, sim: Sim) -> str:
    """A pod of the member's that waits for a node that does not exist: what a team member can update."""
    member.create(pod("tenancy-pending", nodeSelector={"konduktor.ai/no-such-node": "true"}))
    return "tenancy-pending"


def test_the_member_runs_gpu_work_through_the_queue_under_restricted(member: Kube, sim: Sim) -> None:
    """The way in stays open: a restricted GPU Job through the queue runs; its pod is the Job controller's."""
    member.create(gpu_job("tenancy-gpu", TEAM, gpus=1, run_for="1s"))

    def pod_ran() -> bool:
        pods = sim.kube.list("v1", "Pod", TEAM, label_selector="job-name=tenancy-gpu")
        return any(p.get("status", {}).get("phase") in ("Running", "Succeeded") for p in pods)

    wait_until("the member's GPU Job's pod to run", pod_ran, timeout=60)


ESCAPES = [
    ("privileged", {}, {"securityContext": {"privileged": True}}),
    ("hostPath", {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, {}),
    ("hostPID", {"hostPID": True}, {}),
    ("hostNetwork", {"hostNetwork": True}, {}),
    ("hostIPC", {"hostIPC": True}, {}),
    ("hostPort", {}, {"ports": [{"containerPort": 22, "hostPort": 22}]}),
    ("SYS_ADMIN", {}, {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}),
]
SECURITY_PROFILE = "konduktor-security-profile"


@pytest.mark.parametrize(("escape", "spec", "container"), ESCAPES)
def test_the_member_cannot_run_a_pod_that_escapes_to_the_node(
    member: Kube, escape: str, spec: dict[str, Any], container: dict[str, Any]
) -> None:
    """team-a has the default profile, `gpu`: Pod Security lets pods through, the platform's policy refuses what
    baseline refuses."""
    assert create_refusal(member, pod("tenancy-control")) is None  # the same pod without the escape is admitted
    attempt = pod(f"tenancy-{escape.lower().replace('_', '-')}", **spec)
    attempt["spec"]["containers"][0].update(container)
    message = refused_by_policy(create_refusal(member, attempt), SECURITY_PROFILE)
    assert "security profile gpu" in message and escape in message, message


@pytest.mark.parametrize(("escape", "spec", "container"), ESCAPES)
def test_the_member_cannot_make_a_job_whose_pods_escape_to_the_node(
    member: Kube, sim: Sim, escape: str, spec: dict[str, Any], container: dict[str, Any]
) -> None:
    """The pod template is judged at creation: the Job is refused with the reason its pods would get, so Kueue never
    admits a Job whose pods would all be refused, and its GPUs never count in the team's quota."""
    before = gpus_used(sim.kube, TEAM)
    attempt = gpu_job(f"tenancy-{escape.lower().replace('_', '-')}", TEAM, gpus=8)
    attempt["spec"]["template"]["spec"].update(copy.deepcopy(spec))
    attempt["spec"]["template"]["spec"]["containers"][0].update(copy.deepcopy(container))
    with pytest.raises(ApiError) as refused:
        member.create(attempt)
    message = refused_by_policy(refused.value, SECURITY_PROFILE)
    assert message.count("the pods of this Job break the team namespace's security profile gpu") == 1, message
    assert escape in message
    assert sim.kube.get("batch/v1", "Job", attempt["metadata"]["name"], TEAM) is None
    # Its 8 GPUs never count; an earlier test's 1-GPU job may finish meanwhile, so the usage may only go down.
    assert gpus_used(sim.kube, TEAM) <= before


def gpus_used(kube: Kube, cluster_queue: str) -> int:
    """The GPUs the ClusterQueue's admitted workloads hold, as Kueue counts them (status.flavorsUsage)."""
    found = kube.get(KUEUE_API, "ClusterQueue", cluster_queue) or {}
    return sum(
        int(resource.get("total", 0))
        for flavor in found.get("status", {}).get("flavorsUsage", [])
        for resource in flavor.get("resources", [])
        if resource["name"] == "nvidia.com/gpu"
    )


def ngc_job(name: str, namespace: str, gpus: int = 8, **container: Any) -> dict[str, Any]:
    """A PyTorch Job as people write it: the NGC image as it is (it runs as root), no securityContext."""
    job = gpu_job(name, namespace, gpus=gpus, run_for="1s")
    spec = job["spec"]["template"]["spec"]
    del spec["securityContext"]
    del spec["containers"][0]["securityContext"]
    spec["containers"][0].update(container)
    return job


def test_the_member_runs_an_ngc_job_as_root_under_gpu(member: Kube, sim: Sim) -> None:
    member.create(ngc_job("tenancy-ngc", TEAM))

    def pod_ran() -> bool:
        pods = sim.kube.list("v1", "Pod", TEAM, label_selector="job-name=tenancy-ngc")
        return any(p.get("status", {}).get("phase") in ("Running", "Succeeded") for p in pods)

    wait_until("the NGC job's pod to run as root", pod_ran, timeout=60)


RDMA = {"securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}


def test_an_rdma_pod_may_lock_memory_under_gpu_but_not_under_restricted(member: Kube, sim: Sim) -> None:
    """IPC_LOCK (RDMA memory registration) is what `gpu` adds to baseline; `restricted`, enforced by Pod Security
    on pods and by the platform's policy on templates, refuses it."""
    rdma = pod("tenancy-rdma", gpus=8, labels={"kueue.x-k8s.io/queue-name": "default"})
    rdma["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = ["IPC_LOCK"]
    assert create_refusal(member, rdma) is None
    assert create_refusal(member, ngc_job("tenancy-rdma", TEAM, **RDMA)) is None
    with restricted_namespace(sim.kube) as namespace:
        strict = copy.deepcopy(rdma)
        strict["metadata"]["namespace"] = namespace
        problem = create_refusal(sim.kube, strict)
        assert problem is not None and 'violates PodSecurity "restricted:latest"' in problem.message
        assert "IPC_LOCK" in problem.message
        job = gpu_job("tenancy-rdma", namespace, gpus=8)
        job["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = ["IPC_LOCK"]
        message = refused_by_policy(create_refusal(sim.kube, job), SECURITY_PROFILE)
        assert "security profile restricted: capabilities beyond the profile (train adds IPC_LOCK" in message


@contextmanager
def restricted_namespace(kube: Kube) -> Iterator[str]:
    """A namespace of team-a labelled as the installer labels a `restricted` team's."""
    labels = {"konduktor.ai/team": TEAM, **profile_labels("restricted")}
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": STRICT, "labels": labels}})
    try:
        yield STRICT
    finally:
        kube.delete("v1", "Namespace", STRICT)
        wait_until(f"namespace {STRICT} to be deleted", lambda: kube.get("v1", "Namespace", STRICT) is None, 120)


STRICT = "tenancy-strict"


def profile_labels(profile: SecurityProfile) -> dict[str, str]:
    """A team namespace's labels for the security profile, as the installer writes them."""
    team = Team.model_validate({"namespaces": [TEAM], "gpus": {"h100": {"quota": 0}}, "podSecurity": profile})
    return pod_security_labels(team)


def test_the_member_cannot_tolerate_the_health_taint_by_create_or_by_update(member: Kube, pending_pod: str) -> None:
    policy = "konduktor-gpu-health-toleration"
    refused_by_policy(create_refusal(member, pod("tenancy-tolerating", tolerations=[HEALTH_TAINT])), policy)
    every_taint = pod("tenancy-tolerating-all", tolerations=[{"operator": "Exists"}])
    refused_by_policy(create_refusal(member, every_taint), policy)
    update = {"spec": {"tolerations": [HEALTH_TAINT]}}
    refused_by_policy(patch_refusal(member, "Pod", pending_pod, update, TEAM), policy)


def test_the_member_cannot_skip_the_scheduler_to_a_node(member: Kube) -> None:
    # A pod Kueue gates (team-a has a default LocalQueue) cannot name a node anyway; a Job's template can.
    problem = create_refusal(member, pod("tenancy-pinned", nodeName="gpu-h100-0001"))
    assert problem is not None and problem.status in (403, 422), problem
    pinned = gpu_job("tenancy-pinned", TEAM, gpus=1)
    pinned["spec"]["template"]["spec"]["nodeName"] = "gpu-h100-0001"
    message = refused_by_policy(create_refusal(member, pinned), "konduktor-gpu-health-toleration")
    assert "may not set spec.nodeName" in message


def test_the_member_cannot_run_gpus_outside_the_queue_by_an_owner_trick(member: Kube, sim: Sim) -> None:
    """A GPU pod that names the team's own CPU Job as its owner: Kueue would leave it to that Job's queue."""
    cpu_job = gpu_job("tenancy-cpu", TEAM, gpus=1, run_for="1s")
    cpu = {"cpu": "1", "memory": "1Gi"}
    cpu_job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": cpu, "limits": cpu}
    owner = member.create(cpu_job)["metadata"]
    # Kueue's pod webhook looks the owner up in its cache: once it made the Job's Workload, it has the Job.
    wait_until("Kueue to see the CPU Job", lambda: workload_of(sim.kube, TEAM, "tenancy-cpu") is not None, timeout=30)
    reference = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": owner["name"],
        "uid": owner["uid"],
        "controller": True,
    }
    policy = "konduktor-gpu-through-localqueue"
    queued = pod("tenancy-owned-queued", gpus=8, labels={"kueue.x-k8s.io/queue-name": "default"})
    queued["metadata"]["ownerReferences"] = [reference]
    assert "may name a Job, JobSet or training job as its owner only when" in refused_by_policy(
        create_refusal(member, queued), policy
    )
    unqueued = pod("tenancy-owned", gpus=8)
    unqueued["metadata"]["ownerReferences"] = [reference]
    refused_by_policy(create_refusal(member, unqueued), policy)


def test_the_member_cannot_start_queued_work_before_kueue_admits_it(member: Kube, sim: Sim) -> None:
    """More GPUs than team-a may ever use: Kueue never admits them, so the pod stays gated, the Job suspended."""
    policy = "konduktor-gpu-through-localqueue"
    member.create(pod("tenancy-gated", gpus=TOO_MANY, labels={"kueue.x-k8s.io/queue-name": "default"}))

    def gated() -> bool:
        found = sim.kube.get("v1", "Pod", "tenancy-gated", TEAM) or {}
        return any(g["name"].startswith("kueue.x-k8s.io/") for g in found.get("spec", {}).get("schedulingGates", []))

    wait_until("Kueue to gate the pod", gated, timeout=30)
    ungate = {"spec": {"schedulingGates": []}}
    assert "only Kueue may remove its scheduling gates" in refused_by_policy(
        patch_refusal(member, "Pod", "tenancy-gated", ungate, TEAM), policy
    )
    member.create(gpu_job("tenancy-queued", TEAM, gpus=TOO_MANY))
    wait_until(
        "Kueue to suspend the Job",
        lambda: (sim.kube.get("batch/v1", "Job", "tenancy-queued", TEAM) or {}).get("spec", {}).get("suspend") is True,
        timeout=30,
    )
    path = member.resource("batch/v1", "Job").path(TEAM, "tenancy-queued")
    resume = refusal(member, "PATCH", path, {"spec": {"suspend": False}}, MERGE_PATCH)
    assert "only Kueue may resume a queued Job" in refused_by_policy(resume, policy)


def test_the_member_cannot_use_a_priority_class_outside_the_platforms(member: Kube) -> None:
    critical = pod("tenancy-critical", priorityClassName="system-cluster-critical")
    refused_by_policy(create_refusal(member, critical), "konduktor-pod-priority")
    own_class = pod("tenancy-vip", labels={"kueue.x-k8s.io/priority-class": "vip"})
    refused_by_policy(create_refusal(member, own_class), "konduktor-priority-classes")


def test_the_member_cannot_get_gpus_through_mig_names_or_resource_claims(member: Kube, sim: Sim) -> None:
    # team-a's default LocalQueue takes an unlabelled MIG pod in (Kueue labels it), and no quota covers MIG
    # slices: Kueue never admits it and its gate stays. Namespaces without that queue refuse it (policy cases).
    mig = pod("tenancy-mig")
    mig["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    member.create(mig)

    def unadmitted_for_want_of_quota() -> bool:
        for workload in sim.kube.list(KUEUE_API, "Workload", TEAM):
            owners = workload["metadata"].get("ownerReferences", [])
            if any(o["name"] == "tenancy-mig" for o in owners):
                reserved = condition(workload, "QuotaReserved") or {}
                return reserved.get("status") == "False" and "nvidia.com/mig-1g.10gb" in reserved.get("message", "")
        return False

    wait_until("Kueue to find no quota for the MIG slice", unadmitted_for_want_of_quota, timeout=30)
    gates = (sim.kube.get("v1", "Pod", "tenancy-mig", TEAM) or {})["spec"].get("schedulingGates", [])
    assert any(g["name"].startswith("kueue.x-k8s.io/") for g in gates)
    claim = pod("tenancy-dra", resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "any-gpu"}])
    claim["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    message = refused_by_policy(create_refusal(member, claim), "konduktor-gpu-through-localqueue")
    assert "resource claims (Dynamic Resource Allocation)" in message


def test_the_member_cannot_see_gpus_through_nvidia_visible_devices(member: Kube, sim: Sim, pending_pod: str) -> None:
    policy = "konduktor-gpu-visible-devices"
    every_gpu = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    in_container = pod("tenancy-env")
    in_container["spec"]["containers"][0]["env"] = every_gpu
    refused_by_policy(create_refusal(member, in_container), policy)
    in_init = pod("tenancy-env-init")
    in_init["spec"]["initContainers"] = [{**in_container["spec"]["containers"][0], "name": "init"}]
    refused_by_policy(create_refusal(member, in_init), policy)
    # An ephemeral container is added to a running pod by an update of its ephemeralcontainers subresource.
    debugger = {**in_container["spec"]["containers"][0], "name": "debugger"}
    update = {"spec": {"ephemeralContainers": [debugger]}}
    problem = patch_refusal(member, "Pod", pending_pod, update, TEAM, "ephemeralcontainers")
    assert problem is not None and problem.status == 403  # `edit` may not add one, or the policy refuses it
    refused_by_policy(patch_refusal(sim.kube, "Pod", pending_pod, update, TEAM, "ephemeralcontainers"), policy)


def test_nobody_but_the_platform_puts_a_namespace_in_a_team(member: Kube, sim: Sim) -> None:
    # The member cannot touch namespaces at all, their own team's included (edit grants no Namespace write).
    for labels in ({"konduktor.ai/team": "team-b"}, {"pod-security.kubernetes.io/enforce": "privileged"}):
        problem = patch_refusal(member, "Namespace", TEAM, {"metadata": {"labels": labels}}, None)
        assert problem is not None and problem.status == 403 and "cannot patch resource" in problem.message
    # Someone who may create and label namespaces still cannot make one a team's, or move or leave a team.
    admin = Kube(sim.kubeconfig, impersonate=NAMESPACE_ADMIN)
    try:
        joining = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenancy-joiner", "labels": {}}}
        assert create_refusal(admin, joining) is None
        joining["metadata"]["labels"]["konduktor.ai/team"] = TEAM
        policy = "konduktor-team-namespaces"
        refused_by_policy(create_refusal(admin, joining), policy)
        for change in ({"konduktor.ai/team": "team-b"}, {"konduktor.ai/team": None}):
            refused_by_policy(patch_refusal(admin, "Namespace", TEAM, {"metadata": {"labels": change}}, None), policy)
    finally:
        admin.close()


def test_why_names_the_policy_a_job_breaks(member: Kube, sim: Sim, capsys: pytest.CaptureFixture[str]) -> None:
    """A job made while the priority-class policy only warned (a warn-first adoption): Kueue makes no Workload for
    its unknown class, and the member's `konduktor why` names the policy and its reason."""
    binding = ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", "konduktor-priority-classes")
    actions = (sim.kube.get(*binding) or {})["spec"]["validationActions"]
    job = gpu_job("tenancy-vip", TEAM, gpus=1, priority="vip")
    sim.kube.patch(*binding, patch={"spec": {"validationActions": ["Warn", "Audit"]}})
    try:

        def created() -> bool:
            try:
                member.create(copy.deepcopy(job))
            except ApiError as problem:
                assert problem.status == 403, problem.message  # the binding is still enforcing
                return False
            return True

        wait_until("the policy to only warn, and the job to be made", created, timeout=60)
    finally:
        sim.kube.patch(*binding, patch={"spec": {"validationActions": actions}})
    try:
        code = team_main(["why", "tenancy-vip", "-n", TEAM, "-o", "json", "--kubeconfig", str(sim.kubeconfig),
                          "--as", MEMBER.user, "--as-group", TEAM])  # fmt: skip
        verdict = json.loads(capsys.readouterr().out)
        assert code == ExitCode.NEGATIVE and verdict["state"] == "not-queued", verdict
        [policy] = [r["message"] for r in verdict["reasons"] if r["kind"] == "policy"]
        assert policy.startswith('policy konduktor-priority-classes: kueue.x-k8s.io/priority-class "vip"'), policy
    finally:
        sim.kube.delete("batch/v1", "Job", "tenancy-vip", TEAM)


def skypilot_pod(task_file: Path, **labels: str) -> dict[str, Any]:
    """A pod of a SkyPilot task as SkyPilot's own parser reads the file: its `resources.labels` on the pod, one
    node's accelerators as the GPU request, its `pod_config` merged into the spec."""
    import sky

    task = sky.Task.from_yaml(str(task_file))
    [resources] = list(task.resources)
    [(_, gpus)] = resources.accelerators.items()
    spec = copy.deepcopy(resources.cluster_config_overrides["kubernetes"]["pod_config"]["spec"])
    [container] = spec["containers"]
    container.update(name="ray-node", image="python:3.12-slim", command=["sleep", "1"])
    container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}}
    metadata = {"name": "skypilot-train-head", "namespace": TEAM, "labels": {**resources.labels, **labels}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def test_the_seeds_skypilot_task_is_admitted_as_written_and_a_foreign_priority_is_not(
    member: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/skypilot/train.yaml, read by SkyPilot: its pods pass Pod Security, Kueue's webhooks and every
    platform policy as a team member creates them; the seeds' `high-priority` class is refused by name."""
    monkeypatch.setenv("HOME", str(tmp_path))  # SkyPilot keeps its state under ~/.sky
    task_file = product_dir("examples") / "skypilot" / "train.yaml"
    assert create_refusal(member, skypilot_pod(task_file)) is None
    seeds = skypilot_pod(task_file, **{"kueue.x-k8s.io/priority-class": "high-priority"})
    refused_by_policy(create_refusal(member, seeds), "konduktor-priority-classes")


REFUSED = "tenancy-refused"  # a namespace of team-a whose profile is tightened under an admitted job


def test_a_job_whose_pods_are_refused_after_admission_gives_its_quota_back(
    sim: Sim, member: Kube, capsys: pytest.CaptureFixture[str]
) -> None:
    """An NGC job made under `gpu`; the namespace is then made `restricted` (the profile changed under it) before
    Kueue admits it: its pods are all refused, the health controller deactivates its Workload after the refused
    creates, Kueue gives the 8 GPUs back, and `konduktor why` says why with the fix."""
    labels = {"konduktor.ai/team": TEAM, **profile_labels("gpu")}
    sim.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": REFUSED, "labels": labels}})
    queue = {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": REFUSED},
        "spec": {"clusterQueue": TEAM, "stopPolicy": "Hold"},  # holds the job until the profile has changed
    }
    health = controller(sim.kube, health_settings())
    controller_namespace(sim.kube)
    try:
        sim.kube.apply(queue)
        # The earlier tests' jobs run for a second or two: once they are done, the team's usage is this job's alone.
        wait_until("team-a's earlier jobs to finish", lambda: gpus_used(sim.kube, TEAM) == 0, timeout=60)
        sim.kube.create(ngc_job("tenancy-root", REFUSED))
        wait_until("Kueue's Workload for the job", lambda: workload_of(sim.kube, REFUSED, "tenancy-root") is not None)
        sim.kube.patch("v1", "Namespace", REFUSED, {"metadata": {"labels": profile_labels("restricted")}})
        sim.kube.patch(KUEUE_API, "LocalQueue", "default", {"spec": {"stopPolicy": "None"}}, REFUSED)
        wait_until(
            "Kueue to admit the job against team-a's quota",
            lambda: is_true(workload_of(sim.kube, REFUSED, "tenancy-root"), "QuotaReserved"),
            timeout=60,
        )
        # Held, while no pod of it can exist (the ClusterQueue's status follows the admission).
        wait_until("team-a's usage to count the job", lambda: gpus_used(sim.kube, TEAM) == 8, timeout=60)

        def given_back() -> bool:
            health.reconcile_once()
            found = workload_of(sim.kube, REFUSED, "tenancy-root") or {}
            return found.get("spec", {}).get("active") is False

        wait_until("the health controller to deactivate the refused job's Workload", given_back, timeout=120)
        wait_until("Kueue to give the GPUs back", lambda: gpus_used(sim.kube, TEAM) == 0, timeout=60)
        workload = workload_of(sim.kube, REFUSED, "tenancy-root") or {}
        assert not is_true(workload, "QuotaReserved")
        assert workload["metadata"]["labels"]["konduktor.ai/pods-refused"] == "true"
        assert sim.kube.list("v1", "Pod", REFUSED) == []  # no pod of it ever existed
        told = [e for e in sim.kube.list("v1", "Event", REFUSED) if e.get("reason") == "PodsRefused"]
        assert {e["involvedObject"]["kind"] for e in told} == {"Job", "Workload"}

        code = team_main(["why", "tenancy-root", "-n", REFUSED, "-o", "json", "--kubeconfig", str(sim.kubeconfig)])
        verdict = json.loads(capsys.readouterr().out)
        [reason] = [r["message"] for r in verdict["reasons"] if r["kind"] == "pods-refused"]
        assert reason.startswith('admitted, but its pods are refused: violates PodSecurity "restricted:latest"')
        assert "runAsNonRoot" in reason, reason
        assert any("fix what the refusal names" in remedy for remedy in verdict["remedies"]), verdict
        assert code == ExitCode.NEGATIVE  # not running, nor will it as written
    finally:
        sim.kube.delete("batch/v1", "Job", "tenancy-root", REFUSED)
        sim.kube.delete("v1", "Namespace", REFUSED)
        leave_cluster(sim.kube)
        wait_until(f"namespace {REFUSED} to be deleted", lambda: sim.kube.get("v1", "Namespace", REFUSED) is None, 120)


# -- GPUs shared below one GPU: slices only through the team's queue and quota ---------------------------------------

# A config of its own (its own flavors, cohort, teams and priority classes), so that the example's teams are left as
# they are. No topology: Kueue admits from the quotas alone, whatever the nodes advertise.
SLICED = textwrap.dedent("""\
    version: 1
    cluster: {name: slice-lab}
    kueue: {sharing: fair}
    capacityReserve: {cpu: "8", memory: 64Gi}
    gpuTypes:
      slice-h100:
        product: NVIDIA-H100-80GB-HBM3
        tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
        nodes: 4
        gpusPerNode: 8
        nodeAllocatable: {cpu: "192", memory: 1900Gi}
        sharing:
          slice-mig: {nodes: 1, mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}}
          slice-shared: {nodes: 1, timeSlicing: {replicas: 4}}
          slice-mps: {nodes: 1, mps: {replicas: 2}}
    priorities: {slice-low: 100, slice-standard: 1000}
    teams:
      slice-a:
        namespaces: [slice-a]
        groups: [slice-a]
        gpus: {slice-h100: {quota: 4, borrowLimit: 0}}
        slices:
          slice-mig: {mig-1g.10gb: {quota: 2, borrowLimit: 1}}
          slice-shared: {gpu.shared: {quota: 4, borrowLimit: 0}}
      slice-b:
        namespaces: [slice-b]
        groups: [slice-b]
        gpus: {slice-h100: {quota: 4}}
        slices:
          slice-mig: {mig-1g.10gb: {quota: 14}, mig-2g.20gb: {quota: 8}, mig-3g.40gb: {quota: 8}}
          slice-shared: {gpu.shared: {quota: 28}}
          slice-mps: {gpu.shared: {quota: 16}}
    alerts:
      receivers: {platform: {webhook: {url: {secret: platform-webhook, key: url}}}}
    """)
SLICE_TEAM, OTHER_TEAM = "slice-a", "slice-b"
SLICE_MEMBER = Identity("alice", SLICE_TEAM)
NO_QUEUE = "slice-a-unqueued"  # a namespace of slice-a without a LocalQueue (one the team's set-up missed)
MIG_1G, MIG_3G = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"


@pytest.fixture(scope="module")
def slice_member(sim: Sim, member: Kube) -> Iterator[Kube]:
    """A member of slice-a, once the sharing config's quotas are applied: slice-a holds 2 (+1 borrowable)
    mig-1g.10gb and 4 shared GPUs; slice-b holds every other slice, and the whole MPS group. The platform's
    priority classes, which `konduktor submit` names, are the example config's (`member` applies them)."""
    config = parse_config(SLICED, "sliced.yaml").config
    objects = render(config)
    sync_quotas(sim.kube, config, prune=False, dry_run=False)
    for team in (SLICE_TEAM, OTHER_TEAM):
        wait_until(
            f"{team}'s ClusterQueue to be active",
            lambda t=team: is_true(sim.kube.get(KUEUE_API, "ClusterQueue", t), "Active"),
        )
    # The team's namespace without a queue, with the team's rights in it (the RoleBindings the quotas render).
    sim.kube.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NO_QUEUE, "labels": {TEAM_LABEL: SLICE_TEAM}}}
    )
    for binding in objects:
        if binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] == SLICE_TEAM:
            sim.kube.apply({**binding, "metadata": {**binding["metadata"], "namespace": NO_QUEUE}})
    client = Kube(sim.kubeconfig, impersonate=SLICE_MEMBER)
    try:
        yield client
    finally:
        client.close()
        for namespace in (SLICE_TEAM, OTHER_TEAM, NO_QUEUE):
            for job in sim.kube.list("batch/v1", "Job", namespace):
                sim.kube.delete("batch/v1", "Job", job["metadata"]["name"], namespace)
        sim.kube.delete(KUEUE_API, "LocalQueue", "borrowed", SLICE_TEAM)
        wait_until(
            "the slice teams' workloads to be gone",
            lambda: not any(sim.kube.list(KUEUE_API, "Workload", ns) for ns in (SLICE_TEAM, OTHER_TEAM)),
            timeout=60,
        )
        for obj in [*reversed(objects), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NO_QUEUE}}]:
            meta = obj["metadata"]
            sim.kube.delete(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))


def slice_job(
    name: str,
    resource: str,
    count: int = 1,
    *,
    namespace: str = SLICE_TEAM,
    queue: str | None = "default",
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A restricted Job whose one pod asks for `count` of `resource` (a slice, or nvidia.com/gpu)."""
    job = gpu_job(name, namespace, gpus=1, queue=queue)
    spec = job["spec"]["template"]["spec"]
    wanted = {resource: str(count), "cpu": "1", "memory": "1Gi"}
    spec["containers"][0]["resources"] = {"requests": wanted, "limits": dict(wanted)}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return job


def flavors_given(kube: Kube, namespace: str, job: str) -> dict[str, str] | None:
    """The flavor Kueue admitted each resource of the job's pods on; None while it is not admitted."""
    workload = workload_of(kube, namespace, job)
    if not is_true(workload, "QuotaReserved"):
        return None
    assert workload is not None
    [assignment] = workload["status"]["admission"]["podSetAssignments"]
    return dict(assignment["flavors"])


def refused_by_kueue(kube: Kube, namespace: str, job: str) -> str:
    """Kueue's reason for not admitting the job, once it has tried (QuotaReserved False)."""

    def said() -> str | None:
        reserved = condition(workload_of(kube, namespace, job), "QuotaReserved") or {}
        return reserved.get("message") if reserved.get("status") == "False" and reserved.get("message") else None

    def unexpected() -> KonduktorError:
        found = workload_of(kube, namespace, job) or {}
        return KonduktorError(f"Kueue said nothing of {job}: {json.dumps(found.get('status', {}))}")

    wait_until(f"Kueue to say why it does not admit {job}", lambda: said() is not None, 30, on_timeout=unexpected)
    assert flavors_given(kube, namespace, job) is None
    return said() or ""


def slices_used(kube: Kube, cluster_queue: str) -> dict[tuple[str, str], int]:
    """What the ClusterQueue's admitted workloads hold of each GPU resource, per flavor (status.flavorsUsage)."""
    found = kube.get(KUEUE_API, "ClusterQueue", cluster_queue) or {}
    return {
        (flavor["name"], resource["name"]): int(resource.get("total", 0))
        for flavor in found.get("status", {}).get("flavorsUsage", [])
        for resource in flavor.get("resources", [])
        if resource["name"].startswith("nvidia.com/") and int(resource.get("total", 0))
    }


def test_the_member_gets_slices_through_the_teams_queue_and_quota(slice_member: Kube, sim: Sim) -> None:
    """A slice is asked for as a whole GPU is: through the LocalQueue (Kueue's default one when the job names
    none), admitted on the sharing group's flavor and counted in the team's quota."""
    slice_member.create(slice_job("slice-mig", MIG_1G, queue=None))
    slice_member.create(slice_job("slice-shared", SHARED_RESOURCE))
    wait_until("Kueue to admit both slices", lambda: flavors_given(sim.kube, SLICE_TEAM, "slice-shared") is not None)
    wait_until("Kueue to admit the MIG slice", lambda: flavors_given(sim.kube, SLICE_TEAM, "slice-mig") is not None)
    assert flavors_given(sim.kube, SLICE_TEAM, "slice-mig") == {
        "cpu": "slice-mig",
        "memory": "slice-mig",
        MIG_1G: "slice-mig",
    }
    assert (flavors_given(sim.kube, SLICE_TEAM, "slice-shared") or {})[SHARED_RESOURCE] == "slice-shared"
    assert (workload_of(sim.kube, SLICE_TEAM, "slice-mig") or {})["spec"]["queueName"] == "default"
    wait_until(
        "slice-a's quota to count both",
        lambda: slices_used(sim.kube, SLICE_TEAM) == {("slice-mig", MIG_1G): 1, ("slice-shared", SHARED_RESOURCE): 1},
        timeout=30,
    )
    assert slices_used(sim.kube, OTHER_TEAM) == {}


@pytest.mark.parametrize("resource", [MIG_1G, SHARED_RESOURCE])
def test_the_member_gets_no_slice_without_a_queue(slice_member: Kube, resource: str) -> None:
    """Where the team has no LocalQueue Kueue cannot queue it: the policy refuses it, as it refuses a whole GPU."""
    policy = "konduktor-gpu-through-localqueue"
    job = slice_job("slice-unqueued", resource, namespace=NO_QUEUE, queue=None)
    assert "must go through a Kueue LocalQueue" in refused_by_policy(create_refusal(slice_member, job), policy)
    notebook = pod("slice-notebook")
    notebook["metadata"]["namespace"] = NO_QUEUE
    notebook["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
    refused_by_policy(create_refusal(slice_member, notebook), policy)
    # Another name for a shared GPU is no way around it, queued or not.
    renamed = slice_job("slice-renamed", "nvidia.com/gpu.mps")
    assert "no team quota covers this renamed GPU resource" in refused_by_policy(
        create_refusal(slice_member, renamed), policy
    )


def test_the_member_gets_no_slice_on_another_teams_quota(
    slice_member: Kube, sim: Sim, capsys: pytest.CaptureFixture[str]
) -> None:
    """slice-b's MPS group is none of slice-a's: selecting its nodes finds no flavor of slice-a's queue there. The
    member may not make a LocalQueue, nor work in slice-b's namespace; and a LocalQueue an administrator pointed at
    slice-b's ClusterQueue from slice-a's namespace admits nothing (the ClusterQueue selects slice-b's namespaces)."""
    before = slices_used(sim.kube, OTHER_TEAM)
    mps_nodes = {DEVICE_PLUGIN_CONFIG_LABEL: "slice-mps"}
    slice_member.create(slice_job("slice-foreign", SHARED_RESOURCE, node_selector=mps_nodes))
    said = refused_by_kueue(sim.kube, SLICE_TEAM, "slice-foreign")
    assert "flavor slice-shared doesn't match node affinity" in said, said
    why = ["why", "slice-foreign", "-n", SLICE_TEAM, "-o", "json", "--kubeconfig", str(sim.kubeconfig)]
    assert team_main([*why, "--as", SLICE_MEMBER.user, "--as-group", SLICE_TEAM]) == ExitCode.NEVER_FITS
    [reason] = [r for r in json.loads(capsys.readouterr().out)["reasons"] if r["kind"].startswith("slice-")]
    assert reason["kind"] == "slice-selector" and "rules out slice-shared" in reason["message"], reason
    queue = {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": "borrowed", "namespace": SLICE_TEAM},
        "spec": {"clusterQueue": OTHER_TEAM},
    }
    problem = create_refusal(slice_member, queue)
    assert problem is not None and problem.status == 403 and "cannot create resource" in problem.message
    problem = create_refusal(slice_member, slice_job("slice-there", SHARED_RESOURCE, namespace=OTHER_TEAM))
    assert problem is not None and problem.status == 403 and "cannot create resource" in problem.message
    sim.kube.apply(queue)
    slice_member.create(slice_job("slice-borrowed", SHARED_RESOURCE, queue="borrowed"))
    wait_until(
        "Kueue to find slice-b's ClusterQueue closed to slice-a's namespace",
        lambda: (
            "doesn't match ClusterQueue selector"
            in (condition(workload_of(sim.kube, SLICE_TEAM, "slice-borrowed"), "QuotaReserved") or {}).get(
                "message", ""
            )
        ),
        timeout=30,
    )
    assert flavors_given(sim.kube, SLICE_TEAM, "slice-borrowed") is None
    assert slices_used(sim.kube, OTHER_TEAM) == before


def test_a_slice_beyond_the_teams_quota_stays_pending(
    slice_member: Kube, sim: Sim, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bigger profile than slice-a holds (slice-b's 3g.40gb lie idle, but slice-a was given none, so it may not
    borrow them), and more 1g.10gb than its quota and borrowing limit: Kueue admits neither, and the member's
    `konduktor why` says so (an administrator's, who may read the ClusterQueue, also names a slice that fits now)."""
    slice_member.create(slice_job("slice-bigger", MIG_3G))
    said = refused_by_kueue(sim.kube, SLICE_TEAM, "slice-bigger")
    assert f"insufficient quota for {MIG_3G} in flavor slice-mig" in said, said
    slice_member.create(slice_job("slice-more", MIG_1G, count=4))  # quota 2 + borrowing limit 1
    said = refused_by_kueue(sim.kube, SLICE_TEAM, "slice-more")
    assert f"insufficient quota for {MIG_1G} in flavor slice-mig" in said and "maximum capacity (3)" in said, said
    assert slices_used(sim.kube, OTHER_TEAM) == {}

    def why_slice(job: str, *identity: str) -> tuple[int, dict[str, Any]]:
        code = team_main(["why", job, "-n", SLICE_TEAM, "-o", "json", "--kubeconfig", str(sim.kubeconfig), *identity])
        return code, json.loads(capsys.readouterr().out)

    as_member = ("--as", SLICE_MEMBER.user, "--as-group", SLICE_TEAM)
    code, verdict = why_slice("slice-bigger", *as_member)
    assert code == ExitCode.NEVER_FITS and verdict["state"] == "never-fit", verdict
    assert [r["message"] for r in verdict["reasons"]] == ["your team's queue has no quota of mig-3g.40gb"]
    code, verdict = why_slice("slice-more", *as_member)
    assert code == ExitCode.NEVER_FITS, verdict
    assert [r["kind"] for r in verdict["reasons"]] == ["slice-over-quota"], verdict
    assert "asks 4 mig-1g.10gb, more than your team may ever hold in slice-mig (3" in verdict["reasons"][0]["message"]
    code, verdict = why_slice("slice-bigger")
    assert any(" would fit now: " in remedy for remedy in verdict["remedies"]), verdict


def test_a_shared_gpu_is_never_admitted_as_a_whole_one(slice_member: Kube, sim: Sim) -> None:
    """nvidia.com/gpu on a sharing group's nodes: no flavor of those nodes holds whole GPUs, so Kueue never admits it
    there. Kueue matches a pod's node selector against each flavor's own label keys only (K:pkg/scheduler/
    flavorassigner/flavorassigner.go, checkFlavorForPodSets), so the type's whole flavor takes it, out of the team's
    whole-GPU quota; the group's nodes advertise no nvidia.com/gpu (MIG's mixed strategy, renamed shares), so it
    gets no slice there either."""
    before = slices_used(sim.kube, SLICE_TEAM)
    whole = ("slice-h100", GPU_RESOURCE)
    for group, label in (("slice-shared", DEVICE_PLUGIN_CONFIG_LABEL), ("slice-mig", MIG_CONFIG_LABEL)):
        name = f"whole-on-{group}"
        slice_member.create(slice_job(name, GPU_RESOURCE, node_selector={label: group}))
        wait_until(f"Kueue to place {name}", lambda n=name: flavors_given(sim.kube, SLICE_TEAM, n) is not None)
        assert set((flavors_given(sim.kube, SLICE_TEAM, name) or {}).values()) == {"slice-h100"}
    wait_until(
        "slice-a's whole-GPU quota to count both",
        lambda: slices_used(sim.kube, SLICE_TEAM).get(whole, 0) == before.get(whole, 0) + 2,
        timeout=30,
    )
    assert {k: v for k, v in slices_used(sim.kube, SLICE_TEAM).items() if k != whole} == {
        k: v for k, v in before.items() if k != whole
    }
    # Nor the other way round: a slice on the type's nodes is admitted on its group's flavor, never the whole one.
    slice_member.create(slice_job("slice-on-type", MIG_1G, node_selector={PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}))
    wait_until("Kueue to place the slice", lambda: flavors_given(sim.kube, SLICE_TEAM, "slice-on-type") is not None)
    assert set((flavors_given(sim.kube, SLICE_TEAM, "slice-on-type") or {}).values()) == {"slice-mig"}


def test_the_member_submits_a_slice_with_konduktor_submit(
    slice_member: Kube, sim: Sim, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/jobs/slice.yaml as written, and a whole-GPU example turned into a shared GPU by --slice: created
    as the member, admitted on their groups' flavors."""
    member = [
        "-n",
        SLICE_TEAM,
        "--kubeconfig",
        str(sim.kubeconfig),
        "--as",
        SLICE_MEMBER.user,
        "--as-group",
        SLICE_TEAM,
    ]
    jobs = product_dir("examples") / "jobs"
    assert team_main(["submit", str(jobs / "slice.yaml"), *member]) == 0
    assert team_main(["submit", str(jobs / "single-node.yaml"), "--slice", "gpu.shared", *member]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"konduktor why eval-slice -n {SLICE_TEAM}",
        f"konduktor why train-single-node -n {SLICE_TEAM}",
    ]
    for job, group in (("eval-slice", "slice-mig"), ("train-single-node", "slice-shared")):
        wait_until(f"Kueue to admit {job}", lambda j=job: flavors_given(sim.kube, SLICE_TEAM, j) is not None)
        assert set((flavors_given(sim.kube, SLICE_TEAM, job) or {}).values()) == {group}
    # One shared GPU more than the team's quota (4, no borrowing) has left: it waits for the team's own to finish.
    wait_until(
        "slice-a's usage to count its shared GPUs",
        lambda: slices_used(sim.kube, SLICE_TEAM).get(("slice-shared", SHARED_RESOURCE), 0) >= 2,
        timeout=30,
    )
    left = 4 - slices_used(sim.kube, SLICE_TEAM)[("slice-shared", SHARED_RESOURCE)]
    wide = slice_job("slice-wide", SHARED_RESOURCE)
    wide["spec"]["parallelism"] = wide["spec"]["completions"] = left + 1
    slice_member.create(wide)
    said = refused_by_kueue(sim.kube, SLICE_TEAM, "slice-wide")
    assert f"insufficient unused quota for {SHARED_RESOURCE} in flavor slice-shared, 1 more needed" in said, said
    assert team_main(["why", "slice-wide", "-o", "json", *member]) == ExitCode.NEGATIVE
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["state"] == "pending", verdict
    assert [r["message"] for r in verdict["reasons"] if r["kind"].startswith("slice-")] == [
        "every gpu.shared your team may use in slice-shared is taken: 1 more needed"
    ]


def test_the_skypilot_slice_task_is_admitted_as_written(
    slice_member: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/skypilot/slice.yaml, read by SkyPilot: no accelerators, the slice in pod_config, which SkyPilot
    merges into its pod's container; every platform policy admits the pod as the member creates it."""
    import sky

    monkeypatch.setenv("HOME", str(tmp_path))  # SkyPilot keeps its state under ~/.sky
    task = sky.Task.from_yaml(str(product_dir("examples") / "skypilot" / "slice.yaml"))
    [resources] = list(task.resources)
    assert resources.accelerators is None  # SkyPilot would ask for whole nvidia.com/gpu
    spec = copy.deepcopy(resources.cluster_config_overrides["kubernetes"]["pod_config"]["spec"])
    [container] = spec["containers"]
    container.update(name="ray-node", image="python:3.12-slim", command=["sleep", "1"])
    assert container["resources"]["limits"] == {MIG_1G: "1"}
    metadata = {"name": "skypilot-eval-slice-head", "namespace": SLICE_TEAM, "labels": dict(resources.labels)}
    assert create_refusal(slice_member, {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}) is None

"""Shared GPUs on the simulated cluster: a node labelled for a sharing group advertises its slices (the GPU agent
plays mig-manager, the device plugin and GFD), a pod asking for a slice is scheduled there and completes, the label
removed gives the whole GPUs back, an Xid on one MIG instance is judged by the health controller as decided in
docs/health.md, and one team's idle slices are lent to another and reclaimed through the teams' quotas."""

from __future__ import annotations

import copy
import json
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from conftest import Sim
from health_cluster import (  # noqa: F401 (fixtures: `kube`, the controller's namespace; `clean`, nodes reset)
    clean,
    controller,
    kube_with_controller_namespace,
    our_events,
    settings,
)
from sim_fixture import health_taints, node, patch_node
from support import V1BETA2

from konduktor.cli.main import main
from konduktor.config.load import parse_config
from konduktor.errors import KonduktorError
from konduktor.gpu.sharing import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL, is_gpu_resource
from konduktor.kube.client import Identity, Kube
from konduktor.kube.conditions import condition, is_true
from konduktor.queueing.capacity import from_json, to_json
from konduktor.queueing.cluster import read_capacity
from konduktor.queueing.slices import published_slice_usage
from konduktor.quotas.render import render
from konduktor.quotas.sync import sync_quotas
from konduktor.sim.faults import kernel_log_dir
from konduktor.sim.sharing import (
    SHARING_ANNOTATION,
    SHARING_NODES_LABEL,
    Groups,
    groups_annotation,
    pool_groups,
)
from konduktor.sim.workloads import gpu_job, job_state, running_on, was_evicted, workload_of
from konduktor.vocabulary import GPU_RESOURCE, KUEUE_API, QUARANTINE_REASON, TEAM_LABEL
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim

NODE = "gpu-h100-0001"
# The groups of examples/config.yaml's h100 type, had it any; the session cluster's nodes have 10 GPUs each.
GROUPS: Groups = {"h100-mig": {"mig": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}, "h100-shared": {"timeSlicing": 4}}
NAMESPACE = "slices-a"
MIG_1G = "nvidia.com/mig-1g.10gb"


def gpu_resources(kube: Kube, section: str = "allocatable") -> dict[str, str]:
    return {k: v for k, v in node(kube, NODE)["status"][section].items() if is_gpu_resource(k)}


def label(kube: Kube, **labels: str | None) -> None:
    kube.patch("v1", "Node", NODE, {"metadata": {"labels": labels}})


@contextmanager
def node_with_groups(kube: Kube, groups: Groups) -> Iterator[str]:
    """NODE as `sim up --config` makes a node of a type with these sharing groups; whole GPUs and no groups after."""
    patch_node(
        kube,
        NODE,
        lambda _: {
            "metadata": {
                "labels": {SHARING_NODES_LABEL: "true"},
                "annotations": {SHARING_ANNOTATION: groups_annotation(groups)},
            }
        },
    )
    try:
        yield NODE
    finally:
        label(kube, **{MIG_CONFIG_LABEL: None, DEVICE_PLUGIN_CONFIG_LABEL: None})
        wait_until("the whole GPUs back", lambda: gpu_resources(kube) == {GPU_RESOURCE: "10"})
        patch_node(
            kube,
            NODE,
            lambda _: {"metadata": {"labels": {SHARING_NODES_LABEL: None}, "annotations": {SHARING_ANNOTATION: None}}},
        )


@pytest.fixture
def sharing_node(kube: Kube) -> Iterator[str]:
    with node_with_groups(kube, GROUPS) as name:
        yield name


def slice_queue() -> list[dict[str, Any]]:
    """A flavor of the MIG group's nodes, as quotas/render.py names it, and a team's queue of 1g.10gb slices."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {TEAM_LABEL: NAMESPACE}}},
        {
            "apiVersion": V1BETA2,
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100-mig"},
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", MIG_CONFIG_LABEL: "h100-mig"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        {
            "apiVersion": V1BETA2,
            "kind": "ClusterQueue",
            "metadata": {"name": NAMESPACE},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/mig-1g.10gb"],
                        "flavors": [
                            {
                                "name": "h100-mig",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "10"},
                                    {"name": "memory", "nominalQuota": "100Gi"},
                                    {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "4"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": V1BETA2,
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": NAMESPACE},
            "spec": {"clusterQueue": NAMESPACE},
        },
    ]


def slice_job(name: str, run_for: str = "1s") -> dict[str, Any]:
    job = gpu_job(name, NAMESPACE, gpus=1, run_for=run_for)
    resources = {MIG_1G: "1", "cpu": "1", "memory": "1Gi"}
    [container] = job["spec"]["template"]["spec"]["containers"]
    container["resources"] = {"requests": resources, "limits": copy.deepcopy(resources)}
    return job


def stuck(kube: Kube, namespace: str = NAMESPACE) -> KonduktorError:
    pods = [
        (p["metadata"]["name"], p["spec"].get("nodeName"), p.get("status")) for p in kube.list("v1", "Pod", namespace)
    ]
    workloads = [w.get("status") for w in kube.list(V1BETA2, "Workload", namespace)]
    events = [
        f"{e['involvedObject']['name']}: {e['reason']}: {e['message']}" for e in kube.list("v1", "Event", namespace)
    ]
    return KonduktorError(f"the slices' Jobs are stuck: {json.dumps([pods, workloads, events])[:6000]}")


def test_a_labelled_node_advertises_slices_a_pod_runs_on_one_and_unlabelled_it_is_whole_again(
    kube: Kube, sharing_node: str
) -> None:
    label(kube, **{MIG_CONFIG_LABEL: "h100-mig"})
    mig = {
        GPU_RESOURCE: "0",
        "nvidia.com/mig-1g.10gb": "20",
        "nvidia.com/mig-2g.20gb": "10",
        "nvidia.com/mig-3g.40gb": "10",
    }
    wait_until(
        "the MIG layout applied",
        lambda: node(kube, NODE)["metadata"]["labels"].get(MIG_CONFIG_STATE_LABEL) == "success",
    )
    assert gpu_resources(kube) == gpu_resources(kube, "capacity") == mig
    labels = node(kube, NODE)["metadata"]["labels"]
    assert (labels["nvidia.com/mig.strategy"], labels["nvidia.com/mig-1g.10gb.count"]) == ("mixed", "20")
    assert labels["nvidia.com/gpu.count"] == "10"  # GFD still counts the physical GPUs

    kube.apply_all(slice_queue())
    try:
        wait_until("the slice queue active", lambda: is_true(kube.get(V1BETA2, "ClusterQueue", NAMESPACE), "Active"))
        kube.create(slice_job("slice"))
        wait_until(
            "the slice's Job to complete",
            lambda: job_state(kube, NAMESPACE, "slice") == "complete",
            timeout=120,  # kwok plays the pod's stages; on a loaded machine that can take a minute
            on_timeout=lambda: stuck(kube),
        )
        [pod] = kube.list("v1", "Pod", NAMESPACE, label_selector="job-name=slice")
        assert pod["spec"]["nodeName"] == NODE  # kube-scheduler found the slice in the node's allocatable
    finally:
        kube.delete("v1", "Namespace", NAMESPACE)
        kube.delete(V1BETA2, "ClusterQueue", NAMESPACE)
        kube.delete(V1BETA2, "ResourceFlavor", "h100-mig")

    # Time-slicing instead: the MIG layout's labels go, the renamed replicas come.
    label(kube, **{MIG_CONFIG_LABEL: None, DEVICE_PLUGIN_CONFIG_LABEL: "h100-shared"})
    shared = {GPU_RESOURCE: "0", "nvidia.com/gpu.shared": "40"}
    wait_until("the node time-sliced", lambda: gpu_resources(kube) == shared)
    wait_until(
        "GFD's labels of a time-sliced node",
        lambda: node(kube, NODE)["metadata"]["labels"].get("nvidia.com/gpu.sharing-strategy") == "time-slicing",
    )
    labels = node(kube, NODE)["metadata"]["labels"]
    assert not [k for k in labels if k.startswith("nvidia.com/mig")]

    label(kube, **{DEVICE_PLUGIN_CONFIG_LABEL: None})
    wait_until(
        "the whole GPUs back", lambda: gpu_resources(kube) == gpu_resources(kube, "capacity") == {GPU_RESOURCE: "10"}
    )
    wait_until(
        "no sharing label left",
        lambda: "nvidia.com/gpu.sharing-strategy" not in node(kube, NODE)["metadata"]["labels"],
    )


def test_an_xid_on_a_mig_instance_names_it_contained_stays_on_it_uncontained_quarantines(
    sim: Sim, kube: Kube, sharing_node: str
) -> None:
    label(kube, **{MIG_CONFIG_LABEL: "h100-mig"})
    wait_until("the MIG layout applied", lambda: gpu_resources(kube).get("nvidia.com/mig-1g.10gb") == "20")
    files = {"directory": str(kernel_log_dir(sim.cluster.root))}
    health = controller(kube, settings(kernel_log_files=files))  # reads only what is written from now on
    name = ["--name", sim.cluster.name]
    assert main(["sim", "fault", NODE, "--kind", "xid94", "--gpu", "3", "--mig-instance", "1", *name]) == 0
    line = (kernel_log_dir(sim.cluster.root) / f"{NODE}.log").read_text().splitlines()[-1]
    assert "NVRM: Xid (PCI:0000:48:00.0 GPU-I:01): 94," in line
    health.reconcile_once()
    assert health_taints(node(kube, NODE)) == []  # the work on that instance failed, not the node
    (warning,) = our_events(kube, NODE)
    assert warning["reason"] == "Xid94" and "GPU-I:01" in warning["message"]

    assert main(["sim", "fault", NODE, "--kind", "xid95", "--gpu", "3", "--mig-instance", "1", *name]) == 0
    # The device plugin withdrew GPU 3, with every instance on it.
    assert gpu_resources(kube)["nvidia.com/mig-1g.10gb"] == "18"
    health.reconcile_once()
    quarantined = node(kube, NODE)
    assert health_taints(quarantined) != []
    uncontained = [e for e in our_events(kube, NODE) if e["reason"] == "Xid95"]
    assert uncontained and "UNCONTAINED_ERROR GPU-I:01" in uncontained[0]["message"]
    assert "on 0000:48:00.0" in uncontained[0]["message"]
    assert (
        quarantined["metadata"]["annotations"][QUARANTINE_REASON] == "Xid95 UNCONTAINED_ERROR GPU-I:01 on 0000:48:00.0"
    )
    assert main(["sim", "fault", NODE, "--clear", *name]) == 0
    assert gpu_resources(kube)["nvidia.com/mig-1g.10gb"] == "20"


def test_a_mig_node_is_burned_in_through_its_slices_and_says_what_it_skipped(
    sim: Sim, kube: Kube, sharing_node: str, capsys: pytest.CaptureFixture[str]
) -> None:
    label(kube, **{MIG_CONFIG_LABEL: "h100-mig"})
    wait_until("the MIG layout applied", lambda: gpu_resources(kube).get("nvidia.com/mig-1g.10gb") == "20")
    namespace = "slices-burnin"
    args = ["--nodes", NODE, "--level", "standard", "-o", "json", "--namespace", namespace]
    try:
        code = main(["burnin", *args, "--kubeconfig", str(sim.kubeconfig)])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        [item] = json.loads(captured.out)["nodes"]
        checks = {c["check"]: c for c in item["checks"]}
        assert item["verdict"] == "PASS" and checks["inventory"]["summary"] == "10 x H100 SXM5 80GB"
        for skipped in ("dcgm_diag", "matmul_tflops", "nccl_allreduce"):  # each with its reason
            assert checks[skipped]["verdict"] == "SKIPPED" and checks[skipped]["reasons"], skipped
        [job] = kube.list("batch/v1", "Job", namespace)
        [container] = job["spec"]["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "20"
    finally:
        kube.delete("v1", "Namespace", namespace)


def test_the_published_capacity_counts_the_groups_slices_and_the_queues_slice_quota(
    kube: Kube, sharing_node: str
) -> None:
    label(kube, **{MIG_CONFIG_LABEL: "h100-mig"})
    wait_until(
        "the MIG layout applied",
        lambda: node(kube, NODE)["metadata"]["labels"].get(MIG_CONFIG_STATE_LABEL) == "success",
    )
    kube.apply_all(slice_queue())
    try:
        wait_until("the slice queue active", lambda: is_true(kube.get(V1BETA2, "ClusterQueue", NAMESPACE), "Active"))
        kube.create(slice_job("holds", run_for="1h"))

        def mig_1g() -> tuple[int, int, int] | None:
            rows = [s for s in read_capacity(kube).slices if (s.flavor, s.resource) == ("h100-mig", MIG_1G)]
            return (rows[0].nodes, rows[0].total, rows[0].free) if rows else None

        def queue_rows() -> list[tuple[str, str, int, int]]:
            rows = published_slice_usage(read_capacity(kube), NAMESPACE)
            return [(r.flavor, r.resource, int(r.nominal), int(r.used)) for r in rows]

        # The node's 20 mig-1g.10gb (10 GPUs x 2), one of them held by the running pod; Kueue counts it in the
        # queue's usage when its status next says so.
        wait_until("the held slice published", lambda: mig_1g() == (1, 20, 19), on_timeout=lambda: stuck(kube))
        wait_until("the queue's slice usage", lambda: queue_rows() == [("h100-mig", MIG_1G, 4, 1)])
        capacity = read_capacity(kube)
        assert from_json(to_json(capacity)) == capacity  # as a team member reads it
    finally:
        kube.delete("v1", "Namespace", NAMESPACE)
        kube.delete(V1BETA2, "ClusterQueue", NAMESPACE)
        kube.delete(V1BETA2, "ResourceFlavor", "h100-mig")


# -- slices lent and reclaimed: two teams' quotas of one MIG group --------------------------------------------------

# A config of its own (flavors, cohort and teams named apart from the example's): NODE is the MIG group's one node,
# the session cluster's other nodes keep whole GPUs. Both teams hold 4 mig-1g.10gb; reclaim-a may borrow 4 more.
RECLAIM = textwrap.dedent("""\
    version: 1
    cluster: {name: reclaim-lab}
    kueue: {sharing: fair}
    capacityReserve: {cpu: "8", memory: 64Gi}
    gpuTypes:
      reclaim-h100:
        product: NVIDIA-H100-80GB-HBM3
        tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
        nodes: 4
        gpusPerNode: 10
        nodeAllocatable: {cpu: "192", memory: 1900Gi}
        sharing:
          reclaim-mig: {nodes: 1, mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}}
    teams:
      reclaim-a:
        namespaces: [reclaim-a]
        groups: [reclaim-a]
        gpus: {reclaim-h100: {quota: 4}}
        slices:
          reclaim-mig: {mig-1g.10gb: {quota: 4, borrowLimit: 4}}
      reclaim-b:
        namespaces: [reclaim-b]
        groups: [reclaim-b]
        gpus: {reclaim-h100: {quota: 4}}
        slices:
          reclaim-mig: {mig-1g.10gb: {quota: 4}}
    priorities: {reclaim-low: 100, reclaim-standard: 1000}   # the session cluster's classes are another config's
    alerts:
      receivers: {platform: {webhook: {url: {secret: platform-webhook, key: url}}}}
    """)
TEAM_A, TEAM_B = "reclaim-a", "reclaim-b"
MIG_GROUP = "reclaim-mig"


def remove_team_jobs(kube: Kube) -> None:
    for namespace in (TEAM_A, TEAM_B):
        for job in kube.list("batch/v1", "Job", namespace):
            kube.delete("batch/v1", "Job", job["metadata"]["name"], namespace)
    wait_until(
        "the teams' workloads to be gone",
        lambda: not any(kube.list(KUEUE_API, "Workload", ns) for ns in (TEAM_A, TEAM_B)),
        timeout=60,
    )


@pytest.fixture
def reclaim_teams(sim: Sim, kube: Kube) -> Iterator[tuple[Kube, Kube]]:
    """NODE in RECLAIM's MIG group and labelled as `up` labels it, the config's quotas applied; a member of each
    team (impersonated, bound as the quotas bind the team's group)."""
    config = parse_config(RECLAIM, "reclaim.yaml").config
    gpu_type = config.gpu_types["reclaim-h100"]
    objects = render(config)
    members = [
        Kube(sim.kubeconfig, impersonate=Identity(user, team)) for user, team in (("ana", TEAM_A), ("bo", TEAM_B))
    ]
    with node_with_groups(kube, pool_groups(gpu_type.sharing)):
        key, value = gpu_type.sharing[MIG_GROUP].node_label(MIG_GROUP)
        label(kube, **{key: value})
        wait_until("the MIG layout applied", lambda: gpu_resources(kube).get(MIG_1G) == "20")
        try:
            sync_quotas(kube, config, prune=False, dry_run=False)
            wait_until(
                "both ClusterQueues to be active",
                lambda: all(is_true(kube.get(KUEUE_API, "ClusterQueue", t), "Active") for t in (TEAM_A, TEAM_B)),
            )
            yield members[0], members[1]
        finally:
            for member in members:
                member.close()
            remove_team_jobs(kube)
            for obj in reversed(objects):
                meta = obj["metadata"]
                kube.delete(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))


def mig_job(name: str, namespace: str) -> dict[str, Any]:
    """A Job as a team member writes it: the team's LocalQueue named, one mig-1g.10gb as a limit, running 1 h."""
    job = gpu_job(name, namespace, gpus=1, run_for="1h")
    [container] = job["spec"]["template"]["spec"]["containers"]
    container["resources"] = {"limits": {MIG_1G: "1", "cpu": "1", "memory": "1Gi"}}
    return job


def admitted_on(kube: Kube, namespace: str) -> dict[str, str]:
    """The namespace's admitted (not finished) Workloads: job name -> the flavor of its mig-1g.10gb."""
    found = {}
    for workload in kube.list(KUEUE_API, "Workload", namespace):
        if is_true(workload, "Admitted") and not is_true(workload, "Finished"):
            [assignment] = workload["status"]["admission"]["podSetAssignments"]
            [owner] = workload["metadata"]["ownerReferences"]
            found[owner["name"]] = assignment["flavors"].get(MIG_1G, "")
    return found


def borrowed(kube: Kube, cluster_queue: str) -> int:
    """The mig-1g.10gb the ClusterQueue holds beyond its nominal quota (status.flavorsUsage)."""
    found = kube.get(KUEUE_API, "ClusterQueue", cluster_queue) or {}
    return sum(
        int(resource.get("borrowed", 0))
        for flavor in found.get("status", {}).get("flavorsUsage", [])
        for resource in flavor.get("resources", [])
        if resource["name"] == MIG_1G
    )


def test_idle_slices_are_lent_and_reclaimed_and_a_whole_gpu_never_lands_on_the_sliced_node(
    kube: Kube, reclaim_teams: tuple[Kube, Kube]
) -> None:
    member_a, member_b = reclaim_teams
    # 1. Admitted: reclaim-b idle, reclaim-a fills its 4 slices and borrows reclaim-b's 4, all on the MIG node.
    a_jobs = [f"a-{i}" for i in range(8)]
    for name in a_jobs:
        member_a.create(mig_job(name, TEAM_A))
    wait_until(
        "reclaim-a's 8 slices admitted",
        lambda: len(admitted_on(kube, TEAM_A)) == 8,
        timeout=60,
        on_timeout=lambda: stuck(kube, TEAM_A),
    )
    assert set(admitted_on(kube, TEAM_A).values()) == {MIG_GROUP}
    wait_until("reclaim-a's borrowing counted", lambda: borrowed(kube, TEAM_A) == 4)
    wait_until(
        "reclaim-a's pods running",
        lambda: all(running_on(kube, TEAM_A, name) for name in a_jobs),
        timeout=120,
    )
    assert {node for name in a_jobs for node in running_on(kube, TEAM_A, name).values()} == {NODE}

    # 2. Evicted, then 3. admitted: reclaim-b submits its 4; Kueue takes back what reclaim-a borrowed, only that.
    b_jobs = [f"b-{i}" for i in range(4)]
    for name in b_jobs:
        member_b.create(mig_job(name, TEAM_B))
    wait_until(
        "reclaim-b's 4 slices admitted",
        lambda: len(admitted_on(kube, TEAM_B)) == 4,
        timeout=120,
        on_timeout=lambda: stuck(kube, TEAM_B),
    )
    assert set(admitted_on(kube, TEAM_B).values()) == {MIG_GROUP}
    evicted = [w for w in kube.list(KUEUE_API, "Workload", TEAM_A) if was_evicted(w)]
    assert len(evicted) == 4
    wait_until("reclaim-a back to its own 4 slices", lambda: len(admitted_on(kube, TEAM_A)) == 4)
    wait_until("reclaim-a's borrowing gone", lambda: borrowed(kube, TEAM_A) == 0)  # the queue's status follows
    # Each eviction was a reclaim for one of reclaim-b's workloads, and came before that workload's admission.
    b_workloads = {w["metadata"]["uid"]: w for w in kube.list(KUEUE_API, "Workload", TEAM_B)}
    for workload in evicted:
        preempted = condition(workload, "Preempted") or {}
        assert preempted.get("reason") == "InCohortReclamation", preempted
        [preemptor] = [uid for uid in b_workloads if uid in preempted["message"]]
        admitted = condition(b_workloads[preemptor], "Admitted") or {}
        assert preempted["lastTransitionTime"] <= admitted["lastTransitionTime"]
    wait_until(
        "reclaim-b's pods running on the MIG node",
        lambda: all(running_on(kube, TEAM_B, name) for name in b_jobs),
        timeout=120,
    )
    assert {node for name in b_jobs for node in running_on(kube, TEAM_B, name).values()} == {NODE}

    # A whole GPU is never placed on the sliced node: asked for anywhere it runs on a whole node; asked for on NODE
    # itself, Kueue admits it on the whole-GPU quota and the scheduler finds no whole GPU there.
    member_a.create(gpu_job("whole", TEAM_A, gpus=1, run_for="1h"))
    member_a.create(gpu_job("whole-there", TEAM_A, gpus=1, run_for="1h", node=NODE))
    wait_until("the whole-GPU job running", lambda: bool(running_on(kube, TEAM_A, "whole")), timeout=120)
    assert set(running_on(kube, TEAM_A, "whole").values()) != {NODE}
    wait_until(
        "the job asking for the sliced node admitted on whole-GPU quota",
        lambda: is_true(workload_of(kube, TEAM_A, "whole-there"), "Admitted"),
    )

    def unschedulable() -> str | None:
        pods = kube.list("v1", "Pod", TEAM_A, label_selector="batch.kubernetes.io/job-name=whole-there")
        scheduled = condition(pods[0], "PodScheduled") if pods else None
        return scheduled.get("message") if scheduled and scheduled.get("reason") == "Unschedulable" else None

    wait_until("the scheduler to find no whole GPU on the sliced node", lambda: unschedulable() is not None, 60)
    assert "Insufficient nvidia.com/gpu" in (unschedulable() or "")
    [pod] = kube.list("v1", "Pod", TEAM_A, label_selector="batch.kubernetes.io/job-name=whole-there")
    assert not pod["spec"].get("nodeName")

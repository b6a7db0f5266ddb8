"""Which nodes form each sharing group and the labels `up` changes on them (pure), and on the simulated cluster:
the labelling, the refusal to change a layout under running GPU work, and the drain that makes way for it."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Sim

from konduktor.cli.main import main
from konduktor.config.lint import check_nodes
from konduktor.config.load import parse_config
from konduktor.config.model import Config
from konduktor.errors import ChangeRefused, ExitCode, PartialApply
from konduktor.gpu.sharing import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
)
from konduktor.helm.release import Release
from konduktor.helm.values import MIG_CONFIG_MAP, mig_parted_config
from konduktor.ops.plan import UpPlan
from konduktor.ops.sharing import (
    CORDONED_FOR_SHARING,
    SHARING_GROUP_LABEL,
    GpuWork,
    SharingNode,
    SharingPlan,
    apply_sharing,
    choose_nodes,
    gpu_work,
    plan_sharing,
    read_sharing,
    refusal,
    relaid_groups,
)
from konduktor.vocabulary import PRODUCT_LABEL, SYSTEM_NAMESPACE
from konduktor.waiting import wait_until

PRODUCT = "NVIDIA-H100-80GB-HBM3"


def config_text(mig_nodes: int = 1, shared_nodes: int = 1, nodes: int = 4) -> str:
    groups = ""
    if mig_nodes:
        groups += f"      h100-mig: {{nodes: {mig_nodes}, mig: {{3g.40gb: 2}}}}\n"
    if shared_nodes:
        groups += f"      h100-shared: {{nodes: {shared_nodes}, timeSlicing: {{replicas: 4}}}}\n"
    slices = ""
    if mig_nodes:
        slices += "      h100-mig: {mig-3g.40gb: {quota: 1}}\n"
    if shared_nodes:
        slices += "      h100-shared: {gpu.shared: {quota: 1}}\n"
    text = textwrap.dedent(f"""\
        version: 1
        cluster: {{name: lab}}
        gpuTypes:
          lab-h100:
            product: {PRODUCT}
            nodes: {nodes}
            gpusPerNode: 10
            nodeAllocatable: {{cpu: "192", memory: 1900Gi}}
        """)
    if groups:
        text += "    sharing:\n" + textwrap.indent(groups, "  ")
    whole = min(1, nodes - mig_nodes - shared_nodes)
    # Its own GPU type, team, namespace and priority classes: the session cluster holds another config's (`plan`
    # would refuse to take them over).
    text += "priorities: {lab-standard: 1000}\n"
    text += f"teams:\n  lab-a:\n    namespaces: [lab-a]\n    gpus: {{lab-h100: {{quota: {whole}}}}}\n"
    if slices:
        text += "    slices:\n" + slices
    return text


def config_of(mig_nodes: int = 1, shared_nodes: int = 1, nodes: int = 4) -> Config:
    return parse_config(config_text(mig_nodes, shared_nodes, nodes)).config


# Two groups of two nodes each: every node of the session cluster's type is in one.
CONFIG_TEXT = config_text(2, 2)


def node(name: str, busy: bool = False, **labels: str) -> SharingNode:
    work = (GpuWork("team-a", f"{name}-job", "team-a"),) if busy else ()
    return SharingNode(name, {PRODUCT_LABEL: PRODUCT, **labels}, work=work)


def gpu_type(config: Config) -> Any:
    return config.gpu_types["lab-h100"]


# --- the choice -------------------------------------------------------------------------------------------------


def test_a_first_run_takes_idle_nodes_then_by_name() -> None:
    nodes = [node("n1", busy=True), node("n2"), node("n3"), node("n4", busy=True)]
    assert choose_nodes(gpu_type(config_of()), nodes) == {"h100-mig": ["n2"], "h100-shared": ["n3"]}


def test_nodes_already_in_a_group_stay_in_it_busy_or_not() -> None:
    nodes = [
        node("n1"),
        node("n2"),
        node("n3", busy=True, **{MIG_CONFIG_LABEL: "h100-mig"}),  # labelled by hand, or by an earlier run
        node("n4", **{SHARING_GROUP_LABEL: "h100-shared", DEVICE_PLUGIN_CONFIG_LABEL: "h100-shared"}),
    ]
    assert choose_nodes(gpu_type(config_of()), nodes) == {"h100-mig": ["n3"], "h100-shared": ["n4"]}


def test_a_shrinking_group_keeps_its_idle_nodes_and_a_growing_one_takes_free_idle_ones() -> None:
    mig = {MIG_CONFIG_LABEL: "h100-mig", SHARING_GROUP_LABEL: "h100-mig"}
    nodes = [node("n1", busy=True, **mig), node("n2", **mig), node("n3", busy=True), node("n4")]
    assert choose_nodes(gpu_type(config_of(1, 2)), nodes) == {"h100-mig": ["n2"], "h100-shared": ["n4", "n1"]}


def test_a_group_gets_what_the_cluster_has_and_the_plan_says_so() -> None:
    plan = plan_sharing(config_of(2, 1), [node("n1"), node("n2")])
    assert plan.short == ["h100-shared (lab-h100): 0 of 1 nodes"]


# --- the labels -------------------------------------------------------------------------------------------------


def test_the_plan_labels_each_group_and_gives_the_others_back_whole_gpus() -> None:
    nodes = [
        node("n1", **{MIG_CONFIG_LABEL: "all-disabled"}),  # what the GPU Operator puts on a MIG-capable node
        node("n2", busy=True, **{MIG_CONFIG_LABEL: "all-disabled"}),
        node(
            "n3", **{MIG_CONFIG_LABEL: "h100-mig", MIG_CONFIG_STATE_LABEL: "success", SHARING_GROUP_LABEL: "h100-mig"}
        ),
        node("n4", **{DEVICE_PLUGIN_CONFIG_LABEL: "old-group", SHARING_GROUP_LABEL: "old-group"}),
        node("other", **{PRODUCT_LABEL: "NVIDIA-L40S", MIG_CONFIG_LABEL: "x"}),  # not the type's: untouched
    ]
    plan = plan_sharing(config_of(1, 1), nodes)
    by_node = {change.node: change for change in plan.changes}
    assert set(by_node) == {"n1", "n4"}  # n3 is in place; n2 keeps whole GPUs as it has them
    assert by_node["n1"].labels == {
        DEVICE_PLUGIN_CONFIG_LABEL: "h100-shared",
        SHARING_GROUP_LABEL: "h100-shared",
    }
    assert by_node["n1"].layout and not by_node["n1"].mig
    # n4 was in a group the config no longer has: its device plugin config goes, its mark too.
    assert by_node["n4"].labels == {DEVICE_PLUGIN_CONFIG_LABEL: None, SHARING_GROUP_LABEL: None}
    assert (by_node["n4"].before, by_node["n4"].after) == ("old-group", None)
    assert plan.blocked == []


def test_a_node_leaving_a_mig_group_gets_all_disabled_and_its_old_state_goes() -> None:
    mig = {MIG_CONFIG_LABEL: "h100-mig", MIG_CONFIG_STATE_LABEL: "success", SHARING_GROUP_LABEL: "h100-mig"}
    plan = plan_sharing(config_of(0, 0), [node("n1", busy=True, **mig)])
    [change] = plan.changes
    assert change.labels == {MIG_CONFIG_LABEL: "all-disabled", MIG_CONFIG_STATE_LABEL: None, SHARING_GROUP_LABEL: None}
    assert (change.before, change.after, change.layout, change.mig) == ("h100-mig", None, True, True)
    assert plan.blocked == [change]
    assert "team-a/n1-job (team team-a)" in change.describe()


def test_a_config_without_sharing_leaves_nodes_it_never_labelled_alone() -> None:
    nodes = [
        node("n1", **{DEVICE_PLUGIN_CONFIG_LABEL: "someone-elses"}),
        node("n2", **{MIG_CONFIG_LABEL: "all-1g.10gb"}),
    ]
    assert plan_sharing(config_of(0, 0), nodes).changes == []


def test_only_a_label_mark_is_no_layout_change() -> None:
    plan = plan_sharing(config_of(1, 0), [node("n1", busy=True, **{MIG_CONFIG_LABEL: "h100-mig"})])
    [change] = plan.changes
    assert change.labels == {SHARING_GROUP_LABEL: "h100-mig"}
    assert not change.layout and plan.blocked == []


def test_plan_exits_3_when_up_would_refuse_a_layout_change_and_1_when_labels_change() -> None:
    deployed = Release("konduktor", "konduktor-system", 3, "deployed", "konduktor-core-0.1.0")

    def code(nodes: list[SharingNode]) -> int:
        return UpPlan(deployed, "konduktor-core", "0.1.0", [], [], plan_sharing(config_of(1, 0), nodes)).code

    assert code([node("n1", **{MIG_CONFIG_LABEL: "h100-mig", SHARING_GROUP_LABEL: "h100-mig"})]) == ExitCode.OK
    assert code([node("n1")]) == ExitCode.NEGATIVE  # an idle node to label
    assert code([node("n1", busy=True)]) == ExitCode.CHECK_FAILED  # the only node has GPU work
    assert UpPlan(deployed, "konduktor-core", "0.1.0", [], []).code == ExitCode.OK  # the cluster was not read


def test_a_mig_layout_changed_under_the_same_group_name_is_named() -> None:
    installed = mig_parted_config({"h100-mig": {"3g.40gb": 2}})
    assert relaid_groups(config_of(1, 1), installed) == []
    assert relaid_groups(config_of(1, 1), None) == []  # nothing installed yet
    changed = mig_parted_config({"h100-mig": {"1g.10gb": 7}})
    assert relaid_groups(config_of(1, 1), changed) == ["h100-mig"]
    error = refusal(SharingPlan([], relaid=["h100-mig"]), "--drain-for-sharing")
    assert error.exit_code == ExitCode.CHECK_FAILED
    assert "MIG layout of sharing group(s) h100-mig changed under the same name" in error.message
    assert "new group name" in (error.hint or "")


def test_preflight_counts_a_shared_nodes_slices_not_its_whole_gpus() -> None:
    """A second `up` must pass preflight: a group's nodes advertise nvidia.com/gpu 0 by design (L14)."""

    def live(name: str, allocatable: dict[str, str], **labels: str) -> dict[str, Any]:
        return {
            "name": name,
            "labels": {PRODUCT_LABEL: PRODUCT, **labels},
            "allocatable": {"cpu": "192", "memory": "1900Gi", **allocatable},
        }

    whole = {"nvidia.com/gpu": "10"}
    mig = {MIG_CONFIG_LABEL: "h100-mig", MIG_CONFIG_STATE_LABEL: "success"}
    shared = {DEVICE_PLUGIN_CONFIG_LABEL: "h100-shared"}
    nodes = [
        live("n0", {"nvidia.com/gpu": "0", "nvidia.com/mig-3g.40gb": "20"}, **mig),
        live("n1", {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "40"}, **shared),
        live("n2", whole, **{MIG_CONFIG_LABEL: "all-disabled"}),
        live("n3", {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "20"}, **{DEVICE_PLUGIN_CONFIG_LABEL: "old-group"}),
    ]
    assert check_nodes(config_of(1, 1), nodes) == []  # n3 leaves its old group: up gives it back
    pending = [live("n0", {"nvidia.com/gpu": "0"}, **{MIG_CONFIG_LABEL: "h100-mig", MIG_CONFIG_STATE_LABEL: "pending"})]
    [finding] = check_nodes(config_of(1, 0, nodes=1), pending)
    assert finding.severity == "warning"
    assert finding.message == (
        f"node n0 of sharing group h100-mig has 0 allocatable nvidia.com/mig-3g.40gb, its layout gives 20 "
        f"({MIG_CONFIG_STATE_LABEL}=pending)"
    )
    [lost] = check_nodes(config_of(0, 0, nodes=1), [live("n0", {"nvidia.com/gpu": "9"})])
    assert lost.severity == "error"  # a whole-GPU node short of GPUs is still an error


def test_gpu_work_is_every_unfinished_bound_pod_holding_gpus_or_slices_with_its_team() -> None:
    def pod(name: str, resources: dict[str, str], phase: str = "Running", node: str | None = "n1") -> dict[str, Any]:
        container = {"name": "c", "resources": {"limits": resources}}
        return {
            "metadata": {"namespace": "lab-a" if name != "sys" else "kube-system", "name": name},
            "spec": {"nodeName": node, "containers": [container]},
            "status": {"phase": phase},
        }

    pods = [
        pod("whole", {"nvidia.com/gpu": "1"}),
        pod("mig", {"nvidia.com/mig-3g.40gb": "1"}),
        pod("shared", {"nvidia.com/gpu.shared": "1"}),
        pod("sys", {"nvidia.com/gpu": "2"}),
        pod("cpu", {"cpu": "1"}),
        pod("done", {"nvidia.com/gpu": "1"}, phase="Succeeded"),
        pod("pending", {"nvidia.com/gpu": "1"}, node=None),
    ]
    work = gpu_work(pods, config_of())
    assert work == {
        "n1": [
            GpuWork("kube-system", "sys", None),
            GpuWork("lab-a", "mig", "lab-a"),
            GpuWork("lab-a", "shared", "lab-a"),
            GpuWork("lab-a", "whole", "lab-a"),
        ]
    }


# --- on the simulated cluster -----------------------------------------------------------------------------------

# A namespace where GPU pods outside the teams are allowed (konduktor-core's policies.gpuSystemNamespaces).
BUSY_NAMESPACE = "kube-system"
OURS = (MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL, DEVICE_PLUGIN_CONFIG_LABEL, SHARING_GROUP_LABEL)


def labels_of(sim: Sim, name: str) -> dict[str, str]:
    found = sim.kube.get("v1", "Node", name)
    assert found is not None
    return {k: v for k, v in (found["metadata"].get("labels") or {}).items() if k in OURS}


def cordoned(sim: Sim, name: str) -> bool:
    found = sim.kube.get("v1", "Node", name)
    assert found is not None
    return bool(found["spec"].get("unschedulable")) and CORDONED_FOR_SHARING in found["metadata"].get("annotations", {})


def gpu_pod(sim: Sim, name: str, node: str, labels: dict[str, str] | None = None) -> None:
    sim.kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": BUSY_NAMESPACE, "labels": labels or {}},
            "spec": {
                "nodeName": node,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
        }
    )

    def status() -> dict[str, Any]:
        return dict((sim.kube.get("v1", "Pod", name, BUSY_NAMESPACE) or {}).get("status", {}))

    wait_until("the GPU pod to run", lambda: status().get("phase") == "Running", timeout=120)


@pytest.fixture
def nodes(sim: Sim) -> Iterator[list[str]]:
    """The session cluster's H100 nodes, put back as they were found: no sharing labels, schedulable, no test pods."""
    names = sorted(
        n["metadata"]["name"] for n in sim.kube.list("v1", "Node", label_selector=f"{PRODUCT_LABEL}={PRODUCT}")
    )
    yield names
    for pod in ("sharing-busy", "sharing-guarded"):
        sim.kube.delete("v1", "Pod", pod, BUSY_NAMESPACE)
    sim.kube.delete("policy/v1", "PodDisruptionBudget", "sharing-guard", BUSY_NAMESPACE)
    for name in names:
        sim.kube.patch(
            "v1",
            "Node",
            name,
            {
                "metadata": {"labels": dict.fromkeys(OURS), "annotations": {CORDONED_FOR_SHARING: None}},
                "spec": {"unschedulable": None},
            },
        )
    for pod in ("sharing-busy", "sharing-guarded"):
        wait_until("the test pod to be gone", lambda p=pod: sim.kube.get("v1", "Pod", p, BUSY_NAMESPACE) is None)


@pytest.mark.sim
def test_up_labels_each_groups_nodes_keeps_them_and_gives_them_back(sim: Sim, nodes: list[str]) -> None:
    kube = sim.kube
    first = apply_sharing(kube, config_of(1, 1), drain=False)
    assert [(c.node, c.after) for c in first.changes] == [(nodes[0], "h100-mig"), (nodes[1], "h100-shared")]
    assert labels_of(sim, nodes[0]) == {MIG_CONFIG_LABEL: "h100-mig", SHARING_GROUP_LABEL: "h100-mig"}
    assert labels_of(sim, nodes[1]) == {DEVICE_PLUGIN_CONFIG_LABEL: "h100-shared", SHARING_GROUP_LABEL: "h100-shared"}
    assert not any(cordoned(sim, n) for n in nodes)  # idle nodes: nothing to drain
    assert read_sharing(kube, config_of(1, 1)).changes == []  # safe to re-run: nothing left to change

    # The groups swap sizes: the nodes in them stay, the growing group takes the next free node.
    grown = apply_sharing(kube, config_of(1, 2), drain=False)
    assert [(c.node, c.after) for c in grown.changes] == [(nodes[2], "h100-shared")]

    # Sharing removed from the config: every node Konduktor labelled gets whole GPUs back.
    apply_sharing(kube, config_of(0, 0), drain=False)
    assert labels_of(sim, nodes[0]) == {MIG_CONFIG_LABEL: "all-disabled"}
    assert labels_of(sim, nodes[1]) == labels_of(sim, nodes[2]) == {}
    assert labels_of(sim, nodes[3]) == {}


@pytest.mark.sim
def test_a_layout_change_under_gpu_work_is_refused_then_drained_and_uncordoned_once_in_place(
    sim: Sim, nodes: list[str]
) -> None:
    kube = sim.kube
    apply_sharing(kube, config_of(1, 0), drain=False)
    mig_node = nodes[0]
    kube.patch("v1", "Node", mig_node, {"metadata": {"labels": {MIG_CONFIG_STATE_LABEL: "success"}}})
    gpu_pod(sim, "sharing-busy", mig_node)

    plan = read_sharing(kube, config_of(0, 1))
    [blocked] = plan.blocked
    assert (blocked.node, blocked.before, blocked.mig) == (mig_node, "h100-mig", True)
    with pytest.raises(ChangeRefused) as refused:
        apply_sharing(kube, config_of(0, 1), drain=False)
    assert refused.value.exit_code == ExitCode.CHECK_FAILED
    assert f"node {mig_node} (lab-h100): layout change h100-mig -> whole GPUs" in (refused.value.detail or "")
    assert f"{BUSY_NAMESPACE}/sharing-busy (no team)" in (refused.value.detail or "")
    assert "--drain-for-sharing" in (refused.value.hint or "")
    assert labels_of(sim, mig_node)[MIG_CONFIG_LABEL] == "h100-mig" and not cordoned(sim, mig_node)

    # Drained: cordoned, the pod evicted, relabelled; mig-manager has not reported the new layout yet, so the node
    # stays cordoned and up says so.
    said: list[str] = []
    with pytest.raises(PartialApply) as partial:
        apply_sharing(kube, config_of(0, 1), drain=True, timeout=3, say=said.append)
    assert f"{mig_node} ({MIG_CONFIG_STATE_LABEL}=(none))" in partial.value.message
    assert kube.get("v1", "Pod", "sharing-busy", BUSY_NAMESPACE) is None
    assert f"sharing: evicted {BUSY_NAMESPACE}/sharing-busy (no team) from {mig_node}" in said
    assert labels_of(sim, mig_node) == {MIG_CONFIG_LABEL: "all-disabled"}
    assert cordoned(sim, mig_node)

    # mig-manager reports the layout applied: the next run uncordons the node.
    kube.patch("v1", "Node", mig_node, {"metadata": {"labels": {MIG_CONFIG_STATE_LABEL: "success"}}})
    assert [n.name for n in read_sharing(kube, config_of(0, 1)).cordoned] == [mig_node]
    apply_sharing(kube, config_of(0, 1), drain=False, timeout=30)
    assert not cordoned(sim, mig_node)
    assert read_sharing(kube, config_of(0, 1)).cordoned == []


@pytest.mark.sim
def test_a_pod_disruption_budget_holds_the_drain_and_the_next_run_finishes_it(sim: Sim, nodes: list[str]) -> None:
    kube = sim.kube
    target = nodes[0]
    gpu_pod(sim, "sharing-guarded", target, {"app": "sharing-guarded"})
    kube.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "sharing-guard", "namespace": BUSY_NAMESPACE},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "sharing-guarded"}}},
        }
    )
    # The API server refuses the eviction (429) whether the disruption controller has counted the pod (no
    # disruption allowed) or not yet (the budget is still being processed).
    # A group of all 4 nodes: the busy one too.
    with pytest.raises(PartialApply) as partial:
        apply_sharing(kube, config_of(0, 4), drain=True, timeout=3)
    assert f"node {target} is cordoned, but its GPU pods are still there" in partial.value.message
    assert kube.get("v1", "Pod", "sharing-guarded", BUSY_NAMESPACE) is not None
    assert cordoned(sim, target) and DEVICE_PLUGIN_CONFIG_LABEL not in labels_of(sim, target)

    kube.delete("policy/v1", "PodDisruptionBudget", "sharing-guard", BUSY_NAMESPACE)
    apply_sharing(kube, config_of(0, 4), drain=True, timeout=60)
    assert kube.get("v1", "Pod", "sharing-guarded", BUSY_NAMESPACE) is None
    assert labels_of(sim, target)[DEVICE_PLUGIN_CONFIG_LABEL] == "h100-shared"
    assert not cordoned(sim, target)  # no MIG layout to wait for


@pytest.mark.sim
def test_plan_names_the_nodes_that_change_layout_and_the_work_on_them(
    sim: Sim, nodes: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan` reads only: it says which node would change layout and which pods hold GPUs there, and exits 3 as `up`
    would refuse; nothing is labelled."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    gpu_pod(sim, "sharing-busy", nodes[0])
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG_TEXT)
    code = main(["plan", str(config), "--sim", sim.cluster.name, "-o", "json"])
    planned = json.loads(capsys.readouterr().out)["sharing"]
    assert code == ExitCode.CHECK_FAILED
    by_node = {change["node"]: change for change in planned["changes"]}
    # The busy node is passed over for the first free idle one; every node of the type is needed, so it changes too.
    assert by_node[nodes[0]]["layout_change"] is True
    assert by_node[nodes[0]]["work"] == [{"namespace": BUSY_NAMESPACE, "name": "sharing-busy", "team": None}]
    assert {change["to"] for change in planned["changes"]} == {"h100-mig", "h100-shared"}
    assert all(labels_of(sim, name) == {} for name in nodes)

    code = main(["plan", str(config), "--sim", sim.cluster.name])
    out = capsys.readouterr().out
    assert (
        f"node {nodes[0]} (lab-h100): layout change whole GPUs -> h100-shared; GPU work: {BUSY_NAMESPACE}/sharing-busy"
        in out
    )


@pytest.mark.sim
def test_a_drain_leaves_a_cordon_someone_else_set(sim: Sim, nodes: list[str]) -> None:
    kube = sim.kube
    target = nodes[0]
    kube.patch("v1", "Node", target, {"spec": {"unschedulable": True}})  # an admin's cordon
    gpu_pod(sim, "sharing-busy", target)
    [change] = [c for c in read_sharing(kube, config_of(0, 4)).changes if c.node == target]
    assert change.cordoned_by_others and change.work
    apply_sharing(kube, config_of(0, 4), drain=True, timeout=60)
    assert kube.get("v1", "Pod", "sharing-busy", BUSY_NAMESPACE) is None
    assert labels_of(sim, target)[DEVICE_PLUGIN_CONFIG_LABEL] == "h100-shared"
    found = kube.get("v1", "Node", target)
    assert found is not None and found["spec"].get("unschedulable") is True  # still the admin's
    assert CORDONED_FOR_SHARING not in found["metadata"].get("annotations", {})


@pytest.mark.sim
def test_up_refuses_a_mig_layout_changed_under_the_installed_groups_name(sim: Sim, nodes: list[str]) -> None:
    """The layouts ConfigMap the GPU Operator's chart created from an earlier config: its h100-mig differs."""
    kube = sim.kube
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
    layouts = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": MIG_CONFIG_MAP, "namespace": SYSTEM_NAMESPACE},
        "data": {"config.yaml": mig_parted_config({"h100-mig": {"1g.10gb": 7}})},
    }
    kube.apply(layouts)
    try:
        assert read_sharing(kube, config_of(1, 0)).relaid == ["h100-mig"]
        with pytest.raises(ChangeRefused):
            apply_sharing(kube, config_of(1, 0), drain=True)
        assert all(labels_of(sim, name) == {} for name in nodes)  # nothing changed
        kube.apply({**layouts, "data": {"config.yaml": mig_parted_config({"h100-mig": {"3g.40gb": 2}})}})
        assert read_sharing(kube, config_of(1, 0)).relaid == []
    finally:
        kube.delete("v1", "ConfigMap", MIG_CONFIG_MAP, SYSTEM_NAMESPACE)

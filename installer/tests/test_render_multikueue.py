"""Rendering a multi-cluster config: the manager's MultiKueue objects, each worker's queues and the identity the
manager's Kueue uses there, checked against the pinned Kueue's CRD schemas and Kueue's rules."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kueue_crds import schema_problems
from kueue_rules import violations
from quota_samples import EXAMPLES, edited, fleet, write_config
from support import run

from konduktor.config import load_config
from konduktor.config.model import Config
from konduktor.kube.sync import Ref, plan
from konduktor.quotas.multikueue import (
    ClusterObjects,
    fleet_events_kubeconfig_secret,
    kubeconfig_secret,
    manager_kueue_settings,
    render_clusters,
    worker_config,
    worker_kubeconfig,
    worker_objects,
    worker_rules,
)
from konduktor.quotas.render import owner_labels, render

SIM_FRAMEWORKS = ["batch/job", "pod"]


def clusters_of(data: dict[str, Any], frameworks: list[str] | None = None) -> dict[str, ClusterObjects]:
    config = Config.model_validate(data)
    return {one.name: one for one in render_clusters(config, frameworks or SIM_FRAMEWORKS)}


def named(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {
        "/".join(filter(None, (o["metadata"].get("namespace"), o["metadata"]["name"]))): o
        for o in objects
        if o["kind"] == kind
    }


def gpu_quota(queue: dict[str, Any], flavor: str) -> dict[str, str]:
    [group] = queue["spec"]["resourceGroups"]
    [entry] = [f for f in group["flavors"] if f["name"] == flavor]
    [gpus] = [r for r in entry["resources"] if r["name"] == "nvidia.com/gpu"]
    return {key: value for key, value in gpus.items() if key != "name"}


def test_every_cluster_of_the_example_is_what_the_pinned_kueue_accepts() -> None:
    config = load_config(EXAMPLES / "multicluster.yaml").config
    sets = render_clusters(config, SIM_FRAMEWORKS)
    assert [(one.name, one.role, one.context) for one in sets] == [
        ("gpu-hub", "manager", "gpu-hub"),
        ("west", "worker", "west"),
        ("east", "worker", "east"),
    ]
    for one in sets:
        assert schema_problems(one.objects) == [], one.name
        assert violations(one.objects) == [], one.name


def test_the_schema_check_catches_what_the_api_server_would_refuse_or_drop() -> None:
    # The check itself can fail: an enum out of range, and a field v1beta2 does not have (v1beta1's admissionChecks).
    manager = clusters_of(fleet())["gpu-lab"].objects
    for obj in manager:
        if obj["kind"] == "MultiKueueCluster":
            obj["spec"]["clusterSource"]["kubeConfig"]["locationType"] = "File"
        if obj["kind"] == "ClusterQueue":
            obj["spec"]["admissionChecks"] = ["multikueue"]
    problems = schema_problems(manager)
    assert "MultiKueueCluster east: spec/clusterSource/kubeConfig/locationType: 'File' is not one of " in problems[0]
    assert any("'admissionChecks' was unexpected" in problem for problem in problems)


def test_the_manager_puts_each_team_queue_behind_its_multikueue_check() -> None:
    manager = clusters_of(fleet())["gpu-lab"].objects
    queue = named(manager, "ClusterQueue")["team-a"]
    # The manager holds the whole quota: it admits against it, the workers against their shares.
    assert gpu_quota(queue, "h100") == {"nominalQuota": "20", "borrowingLimit": "10", "lendingLimit": "16"}
    assert queue["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "multikueue-team-a"}]}
    check = named(manager, "AdmissionCheck")["multikueue-team-a"]
    assert check["spec"] == {
        "controllerName": "kueue.x-k8s.io/multikueue",
        "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "multikueue-team-a"},
    }
    assert named(manager, "MultiKueueConfig")["multikueue-team-a"]["spec"] == {"clusters": ["west", "east"]}
    assert named(manager, "MultiKueueCluster")["east"]["spec"] == {
        "clusterSource": {"kubeConfig": {"locationType": "Secret", "location": "multikueue-east"}}
    }
    # The team members submit on the manager: their groups are bound there.
    assert "team-a/team-a-kueue-batch-user" in named(manager, "RoleBinding")


def test_the_manager_has_no_topology_as_it_has_no_nodes() -> None:
    data = fleet()
    assert data["topology"]["levels"]  # the seed is topology-aware
    sets = clusters_of(data)
    assert named(sets["gpu-lab"].objects, "Topology") == {}
    assert "topologyName" not in named(sets["gpu-lab"].objects, "ResourceFlavor")["h100"]["spec"]
    # The workers keep it: they place the pods.
    assert named(sets["west"].objects, "ResourceFlavor")["h100"]["spec"]["topologyName"] == "gpu-topology"
    assert "gpu-topology" in named(sets["west"].objects, "Topology")


def test_the_multikueue_objects_come_before_the_queues_that_name_them() -> None:
    kinds = [obj["kind"] for obj in clusters_of(fleet())["gpu-lab"].objects]
    assert kinds.index("Namespace") < kinds.index("MultiKueueCluster") < kinds.index("MultiKueueConfig")
    assert kinds.index("MultiKueueConfig") < kinds.index("AdmissionCheck") < kinds.index("ClusterQueue")


def test_each_worker_gets_the_teams_share_of_its_gpus() -> None:
    data = fleet({"teams": {"team-a": {"clusters": {"west": {"h100": 14}, "east": {"h100": 6}}}}})
    sets = clusters_of(data)
    west, east = named(sets["west"].objects, "ClusterQueue"), named(sets["east"].objects, "ClusterQueue")
    # team-a as written; team-b's 20 split by the workers' GPUs (20 and 20): 10 and 10. A lend limit no larger than
    # the share there (Kueue refuses more); the borrow limit as on the manager, which caps the total anyway.
    assert gpu_quota(west["team-a"], "h100") == {"nominalQuota": "14", "borrowingLimit": "10", "lendingLimit": "14"}
    assert gpu_quota(east["team-a"], "h100") == {"nominalQuota": "6", "borrowingLimit": "10", "lendingLimit": "6"}
    assert gpu_quota(west["team-b"], "h100") == {"nominalQuota": "10", "borrowingLimit": "10", "lendingLimit": "10"}
    # The worker's cohort is its own, named after it; its objects carry its name as their config.
    assert west["team-a"]["spec"]["cohortName"] == "west"
    assert {o["metadata"]["labels"]["konduktor.ai/config"] for o in sets["west"].objects} == {"west"}
    # Each worker's CPU and memory follow its own nodes: 14 of 20 GPUs of 2 nodes with 192 CPUs less 8 reserved.
    [group] = west["team-a"]["spec"]["resourceGroups"]
    assert group["flavors"][0]["resources"][0] == {
        "name": "cpu",
        "nominalQuota": "257600m",
        "borrowingLimit": "184",
        "lendingLimit": "257600m",
    }


def test_a_team_is_only_on_the_workers_it_may_be_dispatched_to() -> None:
    data = fleet(
        {"teams": {"team-a": {"clusters": {"west": {"h100": 20}}}, "team-b": {"clusters": {"east": {"h100": 20}}}}}
    )
    sets = clusters_of(data)
    assert named(sets["gpu-lab"].objects, "MultiKueueConfig")["multikueue-team-a"]["spec"]["clusters"] == ["west"]
    assert named(sets["gpu-lab"].objects, "MultiKueueConfig")["multikueue-team-b"]["spec"]["clusters"] == ["east"]
    west = sets["west"].objects
    assert set(named(west, "Namespace")) == {"team-a"}
    assert set(named(west, "LocalQueue")) == {"team-a/default"}
    assert set(named(west, "ClusterQueue")) == {"team-a"}
    assert violations(west) == []


def test_team_members_get_no_rights_on_the_workers() -> None:
    # They read their jobs on the manager; on a worker only the platform's identities are bound.
    for name in ("west", "east"):
        bindings = named(clusters_of(fleet())[name].objects, "RoleBinding").values()
        subjects = [subject for binding in bindings for subject in binding["subjects"]]
        assert {subject["kind"] for subject in subjects} == {"ServiceAccount"}


def test_the_manager_identity_on_a_worker_reads_cluster_wide_and_writes_in_team_namespaces_only() -> None:
    west = clusters_of(fleet())["west"].objects
    account = named(west, "ServiceAccount")["kueue-system/konduktor-multikueue"]
    assert account["automountServiceAccountToken"] is False
    token = named(west, "Secret")["kueue-system/konduktor-multikueue-token"]
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "konduktor-multikueue"}
    [read_binding] = named(west, "ClusterRoleBinding").values()
    assert read_binding["roleRef"]["name"] == "konduktor-multikueue-read"
    writes = {key: b for key, b in named(west, "RoleBinding").items() if b["roleRef"]["name"].endswith("-write")}
    assert set(writes) == {"team-a/konduktor-multikueue-write", "team-b/konduktor-multikueue-write"}
    roles = named(west, "ClusterRole")
    read_verbs = {verb for rule in roles["konduktor-multikueue-read"]["rules"] for verb in rule["verbs"]}
    assert read_verbs == {"get", "list", "watch"}
    every_rule = roles["konduktor-multikueue-read"]["rules"] + roles["konduktor-multikueue-write"]["rules"]
    resources = {resource for rule in every_rule for resource in rule["resources"]}
    assert resources == {"workloads", "workloads/status", "jobs", "jobs/status", "pods", "pods/status"}
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in every_rule)


def test_a_cluster_grown_into_a_fleet_keeps_its_objects_and_up_changes_them_in_place() -> None:
    # The single cluster `west` becomes the fleet's first worker of that name (docs/multicluster.md, "Adding a
    # worker"): its objects carry the same owner labels, so `up`'s sync there changes them, refusing none.
    live = render(Config.model_validate(edited({"cluster": {"name": "west"}})))
    grown = Config.model_validate(fleet())
    assert grown.clusters is not None
    west = grown.clusters.workers[0]
    desired = worker_objects(grown, west, SIM_FRAMEWORKS)
    by_ref = {Ref.of(obj): obj for obj in live}
    owner = owner_labels(worker_config(grown, west))
    changes = plan([(obj, by_ref.get(Ref.of(obj)), None) for obj in desired], live, prune=True, owner=owner)
    actions: dict[str, set[str]] = {}
    for change in changes:
        actions.setdefault(change.action, set()).add(str(change.ref))
    assert "refuse" not in actions
    # The teams' queues shrink to their share of the worker in place; their namespaces and LocalQueues stay as they
    # are; the team groups' RoleBindings go (members submit to the manager); the manager's identities arrive.
    assert actions["update"] == {"ClusterQueue team-a", "ClusterQueue team-b"}
    assert {"Namespace team-a", "LocalQueue team-a/default"} <= actions["unchanged"]
    assert actions["prune"] == {
        f"RoleBinding {t}/{t}-{role}" for t in ("team-a", "team-b") for role in ("edit", "kueue-batch-user")
    }
    assert {"ServiceAccount kueue-system/konduktor-multikueue", "ClusterRole konduktor-fleet-events-read"} <= actions[
        "create"
    ]


def test_the_fleet_events_identity_on_a_worker_only_reads_events_in_team_namespaces() -> None:
    west = clusters_of(fleet())["west"].objects
    assert set(named(west, "ServiceAccount")) == {
        "kueue-system/konduktor-multikueue",
        "kueue-system/konduktor-fleet-events",
    }
    token = named(west, "Secret")["kueue-system/konduktor-fleet-events-token"]
    assert token["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "konduktor-fleet-events"}
    assert named(west, "ClusterRole")["konduktor-fleet-events-read"]["rules"] == [
        {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list"]}
    ]
    bindings = {
        key: b for key, b in named(west, "RoleBinding").items() if b["roleRef"]["name"].startswith("konduktor-fleet")
    }
    assert set(bindings) == {"team-a/konduktor-fleet-events-read", "team-b/konduktor-fleet-events-read"}
    assert all(
        b["subjects"] == [{"kind": "ServiceAccount", "name": "konduktor-fleet-events", "namespace": "kueue-system"}]
        for b in bindings.values()
    )
    # Granted nowhere cluster-wide.
    assert all(b["subjects"][0]["name"] != "konduktor-fleet-events" for b in named(west, "ClusterRoleBinding").values())


def test_worker_rights_follow_the_kueue_integrations() -> None:
    read, write = worker_rules(["batch/job", "jobset.x-k8s.io/jobset", "ray.io/raycluster", "deployment"])
    assert {(rule["apiGroups"][0], rule["resources"][0]) for rule in write} == {
        ("kueue.x-k8s.io", "workloads"),
        ("kueue.x-k8s.io", "workloads/status"),
        ("batch", "jobs"),
        ("jobset.x-k8s.io", "jobsets"),
        ("ray.io", "rayclusters"),
    }
    [ray] = [rule for rule in write if rule["resources"] == ["rayclusters"]]
    assert ray["verbs"] == ["create", "delete", "update", "patch"]  # MultiKueue updates RayClusters (Kueue's script)
    assert len(read) == 2 * 4
    with pytest.raises(ValueError, match=r"kubeflow\.org/unknownjob"):
        worker_rules(["kubeflow.org/unknownjob"])


def test_the_charts_integrations_all_have_known_rights() -> None:
    from konduktor.helm.values import kueue_frameworks

    frameworks = kueue_frameworks()
    assert "batch/job" in frameworks
    _, write = worker_rules(frameworks)  # raises on one this module does not know
    assert len(write) > 5


def test_the_manager_kueue_dispatches_in_order_one_worker_at_a_time() -> None:
    incremental = manager_kueue_settings(Config.model_validate(fleet()))
    assert incremental["multiKueue"] == {
        "dispatcherName": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
        "workerLostTimeout": "15m",
        "incrementalDispatcherConfig": {"stepSize": 1},
    }
    assert incremental["fairSharing"]  # the single-cluster settings stay
    changed = {"clusters": {"dispatch": "allAtOnce", "workerLostTimeout": "2m"}}
    all_at_once = manager_kueue_settings(Config.model_validate(fleet(changed)))
    assert all_at_once["multiKueue"] == {
        "dispatcherName": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
        "workerLostTimeout": "2m",
    }
    kueues_default = manager_kueue_settings(Config.model_validate(fleet({"clusters": {"workerLostTimeout": None}})))
    assert "workerLostTimeout" not in kueues_default["multiKueue"]


def test_the_worker_kubeconfig_secret_is_what_multikueue_reads() -> None:
    config = Config.model_validate(fleet())
    text = worker_kubeconfig("https://10.0.0.7:6443", "Q0EK", "the-token", "west")
    secret = kubeconfig_secret(config, "west", text)
    assert (secret["metadata"]["namespace"], secret["metadata"]["name"]) == ("kueue-system", "multikueue-west")
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    assert kubeconfig["current-context"] == "west"
    assert kubeconfig["clusters"][0]["cluster"] == {
        "server": "https://10.0.0.7:6443",
        "certificate-authority-data": "Q0EK",
    }
    assert kubeconfig["users"][0]["user"] == {"token": "the-token"}
    assert json.loads(text) == kubeconfig
    relay = fleet_events_kubeconfig_secret(config, "west", text)
    assert (relay["metadata"]["namespace"], relay["metadata"]["name"]) == (
        "konduktor-system",
        "konduktor-fleet-events-west",
    )
    assert relay["data"] == secret["data"]


def test_a_config_without_clusters_renders_as_before() -> None:
    plain = Config.model_validate(edited({}))
    objects = render(plain)
    assert not {"AdmissionCheck", "MultiKueueConfig", "MultiKueueCluster"} & {o["kind"] for o in objects}
    with pytest.raises(ValueError, match="clusters"):
        render_clusters(plain, SIM_FRAMEWORKS)


def test_render_output_dir_writes_a_directory_per_cluster(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_config(tmp_path, fleet())
    code, _, err = run(capsys, "render", str(path), "--output-dir", str(tmp_path / "out"))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["east", "gpu-lab", "west"]
    manager_files = sorted(p.name for p in (tmp_path / "out" / "gpu-lab").iterdir())
    assert "009-multikueuecluster-east.yaml" in manager_files
    assert any(name.endswith("-admissioncheck-multikueue-team-a.yaml") for name in manager_files)
    assert "gpu-lab (manager): wrote" in err and "west (worker): wrote" in err
    # Re-running writes the same files and removes none.
    code, _, err = run(capsys, "render", str(path), "--output-dir", str(tmp_path / "out"))
    assert code == 0 and "stale" not in err


def test_render_of_several_clusters_to_stdout_names_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_config(tmp_path, fleet())
    code, _, err = run(capsys, "render", str(path))
    assert code == 2 and "say which one to print" in err and "--cluster NAME (one of gpu-lab, west, east)" in err
    code, out, _ = run(capsys, "render", str(path), "--cluster", "east", "-o", "json")
    assert code == 0
    assert {item["metadata"]["labels"]["konduktor.ai/config"] for item in json.loads(out)["items"]} == {"east"}
    code, _, err = run(capsys, "render", str(path), "--cluster", "north")
    assert code == 2 and "--cluster north: no such cluster" in err


def test_single_cluster_commands_refuse_a_multi_cluster_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_config(tmp_path, fleet())
    code, _, err = run(capsys, "preflight", str(path))
    assert code == 2
    assert "clusters: this command works on one cluster, and the config names several" in err
    code, _, err = run(capsys, "validate", str(path))
    assert code == 0 and "valid" in err

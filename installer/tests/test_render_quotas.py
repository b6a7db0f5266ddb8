"""Rendering a config to Kueue objects: what each team gets, what Kueue accepts, and stable output."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from kueue_rules import violations
from quota_samples import DELETE, EXAMPLES, config, edited, two_types
from ruamel.yaml import YAML

from konduktor.config import load_config
from konduktor.config.model import Config
from konduktor.quotas.manifests import FILE_NAME, file_set, to_json, to_yaml
from konduktor.quotas.render import kueue_manager_settings, render


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]
        if "namespace" not in o["metadata"]
        else f"{o['metadata']['namespace']}/{o['metadata']['name']}": o
        for o in objects
        if o["kind"] == kind
    }


def resources(queue: dict[str, Any], flavor: str) -> dict[str, dict[str, str]]:
    [group] = queue["spec"]["resourceGroups"]
    [entry] = [f for f in group["flavors"] if f["name"] == flavor]
    return {r["name"]: {k: v for k, v in r.items() if k != "name"} for r in entry["resources"]}


def test_render_reference_example_matches_the_reviewed_cluster_queues() -> None:
    # The 2-team, 4 x 8 H100 example of docs/design/kueue.md#worked-example, checked against the CRDs.
    reference = config(
        {
            "kueue": {"sharing": "fair"},
            "topology": {"levels": ["example.com/rack", "kubernetes.io/hostname"]},
            "gpuTypes": {"h100": {"gpusPerNode": 8}},
            "teams": {
                "team-a": {"gpus": {"h100": {"quota": 16, "borrowLimit": 8, "lendLimit": DELETE}}},
                "team-b": {"gpus": {"h100": {"quota": 16, "lendLimit": 12, "borrowLimit": DELETE}}},
            },
        }
    )
    queues = of_kind(render(reference), "ClusterQueue")
    assert resources(queues["team-a"], "h100") == {
        "cpu": {"nominalQuota": "368", "borrowingLimit": "184"},
        "memory": {"nominalQuota": "3672Gi", "borrowingLimit": "1836Gi"},
        "nvidia.com/gpu": {"nominalQuota": "16", "borrowingLimit": "8"},
    }
    assert resources(queues["team-b"], "h100") == {
        "cpu": {"nominalQuota": "368", "lendingLimit": "276"},
        "memory": {"nominalQuota": "3672Gi", "lendingLimit": "2754Gi"},
        "nvidia.com/gpu": {"nominalQuota": "16", "lendingLimit": "12"},
    }
    spec = queues["team-a"]["spec"]
    assert spec["cohortName"] == "gpu-lab"
    assert spec["namespaceSelector"] == {"matchLabels": {"konduktor.ai/team": "team-a"}}
    assert spec["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    assert spec["fairSharing"] == {"weight": "1"}
    assert spec["queueingStrategy"] == "BestEffortFIFO"


def test_render_seed_objects() -> None:
    objects = render(config())
    assert [o["kind"] for o in objects] == [
        "Namespace",
        "Namespace",
        "WorkloadPriorityClass",
        "WorkloadPriorityClass",
        "WorkloadPriorityClass",
        "WorkloadPriorityClass",
        "Topology",
        "ResourceFlavor",
        "Cohort",
        "ClusterQueue",
        "ClusterQueue",
        "LocalQueue",
        "LocalQueue",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
    ]
    flavor = of_kind(objects, "ResourceFlavor")["h100"]["spec"]
    assert flavor == {
        "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "topologyName": "gpu-topology",
    }
    assert of_kind(objects, "Topology")["gpu-topology"]["spec"]["levels"] == [
        {"nodeLabel": "konduktor.ai/topology-rack"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ]
    assert {name: o["value"] for name, o in of_kind(objects, "WorkloadPriorityClass").items()} == {
        "opportunistic": 100,
        "standard": 1000,
        "default": 1000,  # Kueue's for a job that names no class
        "urgent": 10000,
    }
    assert violations(objects) == []


@pytest.mark.parametrize("name", ["config.yaml", "multi-department.yaml", "gke-topology.yaml"])
def test_render_examples_pass_kueue_rules(name: str) -> None:
    assert violations(render(load_config(EXAMPLES / name).config)) == []


def test_render_every_object_carries_the_ownership_labels() -> None:
    for obj in render(load_config(EXAMPLES / "multi-department.yaml").config):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "konduktor"
        assert labels["konduktor.ai/config"] == "ml-platform"


def test_render_each_namespace_reaches_its_team_queue() -> None:
    # A job in a team namespace goes to the `default` LocalQueue, whose ClusterQueue selects that namespace.
    objects = render(load_config(EXAMPLES / "multi-department.yaml").config)
    namespaces = of_kind(objects, "Namespace")
    queues = of_kind(objects, "ClusterQueue")
    local_queues = of_kind(objects, "LocalQueue")
    assert len(local_queues) == len(namespaces) == 7
    for key, local_queue in local_queues.items():
        namespace, name = key.split("/")
        assert name == "default"
        selector = queues[local_queue["spec"]["clusterQueue"]]["spec"]["namespaceSelector"]["matchLabels"]
        assert selector.items() <= namespaces[namespace]["metadata"]["labels"].items()
        others = [
            q
            for q in queues.values()
            if q["spec"]["namespaceSelector"]["matchLabels"].items()
            <= namespaces[namespace]["metadata"]["labels"].items()
        ]
        assert len(others) == 1  # no namespace is admitted by two teams' queues


def test_render_departments_are_child_cohorts() -> None:
    objects = render(load_config(EXAMPLES / "multi-department.yaml").config)
    cohorts = {name: o["spec"] for name, o in of_kind(objects, "Cohort").items()}
    assert cohorts == {
        "ml-platform": {},
        "platform": {"parentName": "ml-platform"},
        "product": {"parentName": "ml-platform"},
        "research": {"parentName": "ml-platform"},
    }
    queues = of_kind(objects, "ClusterQueue")
    assert queues["vision"]["spec"]["cohortName"] == "research"
    assert queues["evaluation"]["spec"]["fairSharing"] == {"weight": "0.5"}
    assert queues["llm-pretraining"]["spec"]["fairSharing"] == {"weight": "2"}


def test_render_borrow_only_entry_is_kept() -> None:
    objects = render(load_config(EXAMPLES / "multi-department.yaml").config)
    llm = of_kind(objects, "ClusterQueue")["llm-pretraining"]
    assert [f["name"] for f in llm["spec"]["resourceGroups"][0]["flavors"]] == ["h100", "a100"]
    assert resources(llm, "a100") == {
        "cpu": {"nominalQuota": "0", "borrowingLimit": "232"},  # half of 4 x (124 - 8)
        "memory": {"nominalQuota": "0", "borrowingLimit": "1872Gi"},  # half of 4 x (1000Gi - 64Gi)
        "nvidia.com/gpu": {"nominalQuota": "0", "borrowingLimit": "16"},
    }


def test_render_without_sharing_has_no_cohort_and_no_limits() -> None:
    unshared = Config.model_validate(
        edited(
            {
                "kueue": {"sharing": "none"},
                "teams": {
                    "team-a": {"gpus": {"h100": {"borrowLimit": DELETE, "lendLimit": DELETE}}},
                    "team-b": {"gpus": {"h100": {"borrowLimit": DELETE, "lendLimit": DELETE}}},
                },
            }
        )
    )
    objects = render(unshared)
    assert of_kind(objects, "Cohort") == {}
    for queue in of_kind(objects, "ClusterQueue").values():
        assert "cohortName" not in queue["spec"] and "fairSharing" not in queue["spec"]
        assert all(set(r) == {"nominalQuota"} for r in resources(queue, "h100").values())
    assert violations(objects) == []
    assert "fairSharing" not in kueue_manager_settings(unshared)


def test_render_classic_sharing_with_borrow_within_cohort() -> None:
    classic = config(
        {
            "kueue": {
                "sharing": "classic",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
            }
        }
    )
    queue = of_kind(render(classic), "ClusterQueue")["team-a"]["spec"]
    assert "fairSharing" not in queue
    assert queue["preemption"]["borrowWithinCohort"] == {"policy": "LowerPriority", "maxPriorityThreshold": 100}
    assert "fairSharing" not in kueue_manager_settings(classic)


def test_render_without_topology_has_no_tas() -> None:
    objects = render(config({"topology": DELETE}))
    assert of_kind(objects, "Topology") == {}
    assert "topologyName" not in of_kind(objects, "ResourceFlavor")["h100"]["spec"]


def test_render_flavors_follow_the_teams_listing_order() -> None:
    base = two_types()
    base["teams"]["team-a"]["gpus"] = {"a100": {"quota": 16}, "h100": base["teams"]["team-a"]["gpus"]["h100"]}
    queue = of_kind(render(Config.model_validate(base)), "ClusterQueue")["team-a"]
    assert [f["name"] for f in queue["spec"]["resourceGroups"][0]["flavors"]] == ["a100", "h100"]


def test_render_role_bindings_per_namespace() -> None:
    objects = render(
        config(
            {
                "teams": {
                    "team-a": {"namespaces": ["team-a", "team-a-dev"], "groups": ["oidc:ml", "team-a"]},
                    "team-b": {"groups": []},
                }
            }
        )
    )
    bindings = of_kind(objects, "RoleBinding")
    assert sorted(bindings) == [
        "team-a-dev/konduktor-capacity-publisher",
        "team-a-dev/team-a-edit",
        "team-a-dev/team-a-kueue-batch-user",
        "team-a/konduktor-capacity-publisher",
        "team-a/team-a-edit",
        "team-a/team-a-kueue-batch-user",
        "team-b/konduktor-capacity-publisher",  # a team without groups still gets the capacity published
    ]
    binding = bindings["team-a-dev/team-a-kueue-batch-user"]
    assert binding["roleRef"] == {
        "kind": "ClusterRole",
        "name": "kueue-batch-user-role",
        "apiGroup": "rbac.authorization.k8s.io",
    }
    assert [s["name"] for s in binding["subjects"]] == ["oidc:ml", "team-a"]
    assert bindings["team-a/team-a-edit"]["roleRef"]["name"] == "edit"


def test_render_kueue_manager_settings() -> None:
    settings = kueue_manager_settings(config())
    assert settings["fairSharing"] == {"preemptionStrategies": ["LessThanInitialShare"]}
    assert settings["waitForPodsReady"]["timeout"] == "10m"
    assert settings["waitForPodsReady"]["blockAdmission"] is False
    assert settings["resources"] == {"excludeResourcePrefixes": ["ephemeral-storage", "smarter-devices/"]}
    assert settings["metrics"] == {"enableClusterQueueResources": True}
    quiet = kueue_manager_settings(config({"kueue": {"gangTimeout": "", "excludeResourcePrefixes": []}}))
    assert "waitForPodsReady" not in quiet and "resources" not in quiet


def test_render_is_deterministic_to_the_byte() -> None:
    loaded = load_config(EXAMPLES / "multi-department.yaml").config
    assert to_yaml(render(loaded)) == to_yaml(render(load_config(EXAMPLES / "multi-department.yaml").config))
    assert to_json(render(loaded)) == to_json(render(loaded))
    assert file_set(render(loaded), "yaml") == file_set(render(loaded), "yaml")


def test_render_yaml_and_json_read_back_to_the_objects() -> None:
    objects = render(config())
    assert list(YAML(typ="safe").load_all(StringIO(to_yaml(objects)))) == objects
    listing = json.loads(to_json(objects))
    assert (listing["apiVersion"], listing["kind"], listing["items"]) == ("v1", "List", objects)


def test_render_file_names_are_unique_and_keep_apply_order() -> None:
    objects = render(load_config(EXAMPLES / "multi-department.yaml").config)
    files = file_set(objects, "yaml")
    assert len(files) == len(objects)
    assert list(files) == sorted(files)
    assert all(FILE_NAME.match(name) for name in files)
    assert "001-namespace-evaluation.yaml" in files
    assert any(name.endswith("-localqueue-vision-experiments-default.yaml") for name in files)


def test_render_rule_checker_catches_what_kueue_rejects() -> None:
    # The checker above must be able to fail: break one rule at a time in a rendered ClusterQueue.
    objects = render(config())
    queue = next(o for o in objects if o["kind"] == "ClusterQueue")
    gpu = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]
    gpu["lendingLimit"] = "21"
    assert violations(objects) == ["ClusterQueue /team-a: h100/nvidia.com/gpu: lendingLimit more than nominalQuota"]
    gpu["lendingLimit"] = "16"
    del queue["spec"]["cohortName"]
    assert any("borrowingLimit without a cohort" in v for v in violations(objects))
    queue["metadata"]["labels"]["konduktor.ai/team"] = "t" * 64
    assert any("is not a valid label value" in v for v in violations(objects))


def test_render_team_namespaces_enforce_the_teams_security_profile() -> None:
    """`gpu` (the default) is no Pod Security level: Pod Security lets pods through and the platform's policy, which
    reads the profile label, judges them; the Pod Security levels are enforced by Pod Security itself."""
    teams = {
        "team-b": {"podSecurity": "baseline"},
        "team-c": {"podSecurity": "restricted", "namespaces": ["team-c"], "gpus": {"h100": {"quota": 0}}},
    }
    objects = render(config({"teams": teams}))
    labels = {name: ns["metadata"]["labels"] for name, ns in of_kind(objects, "Namespace").items()}
    profile, enforce = "konduktor.ai/security-profile", "pod-security.kubernetes.io/enforce"
    enforced = {team: (found[profile], found[enforce]) for team, found in labels.items()}
    assert enforced == {
        "team-a": ("gpu", "privileged"),  # the default
        "team-b": ("baseline", "baseline"),
        "team-c": ("restricted", "restricted"),
    }
    for team in labels:
        assert labels[team]["pod-security.kubernetes.io/audit"] == "restricted"
        assert labels[team]["pod-security.kubernetes.io/warn"] == "restricted"

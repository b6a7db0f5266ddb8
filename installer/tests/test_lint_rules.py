"""Each lint rule: a config that breaks it (with the severity and path a user sees) and one that keeps it."""

from __future__ import annotations

from typing import Any

import pytest
from quota_samples import DELETE, EXAMPLES, config, edited, two_types

from konduktor.config import load_config
from konduktor.config.findings import ConfigError, Finding
from konduktor.config.lint import check_nodes, check_pod_request, lint
from konduktor.config.load import parse_config
from konduktor.config.model import Config
from konduktor.sim.nodes import node_manifests
from konduktor.sim.pools import node_pools, topology_levels


def findings(rule: str, changes: dict[str, Any] | None = None, base: dict[str, Any] | None = None) -> list[Finding]:
    checked = Config.model_validate(edited(changes or {}, base))
    return [f for f in lint(checked) if f.rule == rule]


def summary(found: list[Finding]) -> list[tuple[str, tuple[str | int, ...]]]:
    return [(f.severity, f.path) for f in found]


def test_lint_seed_is_clean() -> None:
    assert lint(config()) == []


# L1 names


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"cluster": {"name": "GPU_Lab"}}, ("cluster", "name")),
        ({"teams": {"team-a": {"namespaces": ["Team-A"]}}}, ("teams", "team-a", "namespaces", 0)),
        ({"teams": {"team-a": {"namespaces": ["a" * 64]}}}, ("teams", "team-a", "namespaces", 0)),
        ({"priorities": {"Urgent": 10}}, ("priorities", "Urgent")),
        ({"topology": {"name": "GPU topology"}}, ("topology", "name")),
        ({"teams": {"team-a": {"department": "gpu-lab"}}}, ("teams", "team-a", "department")),
        ({"teams": {"team-a": {"groups": [" "]}}}, ("teams", "team-a", "groups", 0)),
        (
            {"gpuTypes": {"h100": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA H100"}}}},
            ("gpuTypes", "h100", "nodeLabels", "nvidia.com/gpu.product"),
        ),
    ],
)
def test_lint_l1_invalid_names(changes: dict[str, Any], path: tuple[str | int, ...]) -> None:
    assert ("error", path) in summary(findings("L1", changes))


def test_lint_l1_invalid_team_name_suggests_one() -> None:
    base = edited({"teams": {"team-a": DELETE, "Team A": edited({})["teams"]["team-a"]}})
    [finding] = findings("L1", base=base)
    assert finding.path == ("teams", "Team A") and finding.hint == "for example 'team-a'"


def test_lint_l1_valid_names() -> None:
    assert (
        findings(
            "L1",
            {
                "cluster": {"name": "lab-2"},
                "priorities": {"low-1": 1},
                "gpuTypes": {
                    "h100": {
                        "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "example.com/pool": "a.b_c"}
                    }
                },
                "teams": {"team-a": {"department": "research.org", "groups": ["oidc:Team A"]}},
            },
        )
        == []
    )


# L2 unknown GPU type


def test_lint_l2_unknown_gpu_type() -> None:
    [finding] = findings("L2", {"teams": {"team-b": {"gpus": {"h100": DELETE, "H100": {"quota": 20}}}}})
    assert (finding.severity, finding.path) == ("error", ("teams", "team-b", "gpus", "H100"))
    assert finding.hint == "did you mean 'h100'?"


def test_lint_l2_known_gpu_types() -> None:
    assert findings("L2", base=two_types()) == []


# L3 GPU quotas vs capacity


def test_lint_l3_over_capacity_is_an_error() -> None:
    [finding] = findings("L3", {"teams": {"team-a": {"gpus": {"h100": {"quota": 21, "lendLimit": 16}}}}})
    assert (finding.severity, finding.path) == ("error", ("gpuTypes", "h100"))
    assert "41 h100 GPUs but there are 40" in finding.message


def test_lint_l3_unowned_capacity_is_a_warning() -> None:
    [finding] = findings("L3", {"teams": {"team-a": {"gpus": {"h100": {"quota": 19}}}}})
    assert finding.severity == "warning" and finding.message.startswith("1 of 40 h100 GPUs")


def test_lint_l3_exact_capacity() -> None:
    assert findings("L3") == []


# L4 derived cpu/memory vs allocatable


def test_lint_l4_reserve_larger_than_the_node() -> None:
    found = findings("L4", {"capacityReserve": {"cpu": "200"}})
    assert summary(found) == [("error", ("capacityReserve", "cpu"))]


def test_lint_l4_no_reserve_warns() -> None:
    found = findings("L4", {"capacityReserve": DELETE})
    assert summary(found) == [("warning", ("capacityReserve", "cpu")), ("warning", ("capacityReserve", "memory"))]


def test_lint_l4_reserve_that_fits() -> None:
    assert findings("L4", {"capacityReserve": {"cpu": "191500m", "memory": "1899Gi"}}) == []


# L5 limits need a cohort and a partner


def test_lint_l5_limits_without_sharing() -> None:
    found = findings("L5", {"kueue": {"sharing": "none"}})
    assert summary(found) == [
        ("error", ("teams", team, "gpus", "h100", key))
        for team in ("team-a", "team-b")
        for key in ("borrowLimit", "lendLimit")
    ]


def test_lint_l5_limit_on_a_type_no_one_else_uses() -> None:
    base = two_types()
    base["teams"]["team-a"]["gpus"]["a100"]["borrowLimit"] = 4
    assert summary(findings("L5", base=base)) == [("error", ("teams", "team-a", "gpus", "a100", "borrowLimit"))]


def test_lint_l5_department_without_sharing_warns() -> None:
    no_limits = {"h100": {"borrowLimit": DELETE, "lendLimit": DELETE}}
    found = findings(
        "L5",
        {
            "kueue": {"sharing": "none"},
            "teams": {"team-a": {"department": "research", "gpus": no_limits}, "team-b": {"gpus": no_limits}},
        },
    )
    assert summary(found) == [("warning", ("teams", "team-a", "department"))]


def test_lint_l5_limits_with_a_partner_in_a_cohort() -> None:
    assert findings("L5", {"kueue": {"sharing": "classic"}}) == []


# L6 lendLimit <= quota


def test_lint_l6_lend_more_than_quota() -> None:
    found = findings("L6", {"teams": {"team-b": {"gpus": {"h100": {"lendLimit": 21}}}}})
    assert summary(found) == [("error", ("teams", "team-b", "gpus", "h100", "lendLimit"))]


def test_lint_l6_lend_all_of_it() -> None:
    assert findings("L6", {"teams": {"team-b": {"gpus": {"h100": {"lendLimit": 20}}}}}) == []


# L7 borrow limits within reach (warnings)


def test_lint_l7_borrow_beyond_the_cluster() -> None:
    found = findings(
        "L7",
        {
            "teams": {
                "team-a": {"gpus": {"h100": {"borrowLimit": 21}}},
                "team-b": {"gpus": {"h100": {"lendLimit": DELETE}}},
            }
        },
    )
    assert summary(found) == [("warning", ("teams", "team-a", "gpus", "h100", "borrowLimit"))]
    assert "41 is more than the 40" in found[0].message


def test_lint_l7_borrow_beyond_what_others_lend() -> None:
    [finding] = findings("L7", {"teams": {"team-a": {"gpus": {"h100": {"borrowLimit": 17}}}}})
    assert finding.severity == "warning" and "16 h100 GPUs the other teams may lend" in finding.message


def test_lint_l7_borrow_within_reach() -> None:
    assert findings("L7", {"teams": {"team-a": {"gpus": {"h100": {"borrowLimit": 16}}}}}) == []


# L8 Kueue settings


def test_lint_l8_borrow_within_cohort_under_fair_sharing() -> None:
    found = findings("L8", {"kueue": {"borrowWithinCohort": {"policy": "LowerPriority"}}})
    assert summary(found) == [("error", ("kueue", "borrowWithinCohort"))]


def test_lint_l8_strategy_lists() -> None:
    wrong_order = ["LessThanInitialShare", "LessThanOrEqualToFinalShare"]
    assert summary(findings("L8", {"kueue": {"fairSharingStrategies": wrong_order}})) == [
        ("error", ("kueue", "fairSharingStrategies"))
    ]
    assert summary(findings("L8", {"kueue": {"fairSharingStrategies": []}})) == [
        ("error", ("kueue", "fairSharingStrategies"))
    ]
    both = ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    assert summary(findings("L8", {"kueue": {"fairSharingStrategies": both}})) == [
        ("warning", ("kueue", "fairSharingStrategies"))
    ]


def test_lint_l8_exclusions_must_not_cover_quota_resources() -> None:
    found = findings("L8", {"kueue": {"excludeResourcePrefixes": ["ephemeral-storage", "nvidia.com/"]}})
    assert summary(found) == [("error", ("kueue", "excludeResourcePrefixes", 1))]


def test_lint_l8_settings_ignored_outside_fair_sharing() -> None:
    found = findings("L8", {"kueue": {"sharing": "classic", "fairSharingStrategies": ["LessThanInitialShare"]}})
    assert summary(found) == [("warning", ("kueue", "fairSharingStrategies"))]


def test_lint_l8_valid_settings() -> None:
    assert findings("L8", {"kueue": {"fairSharingStrategies": ["LessThanOrEqualToFinalShare"]}}) == []
    classic = {"sharing": "classic", "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100}}
    assert findings("L8", {"kueue": classic}) == []


# L9 fair-share weights


def test_lint_l9_tiny_weight() -> None:
    found = findings("L9", {"teams": {"team-a": {"fairShareWeight": 1e-10}}})
    assert summary(found) == [("error", ("teams", "team-a", "fairShareWeight"))]


def test_lint_l9_weight_without_fair_sharing_warns() -> None:
    found = findings("L9", {"kueue": {"sharing": "classic"}, "teams": {"team-a": {"fairShareWeight": 2}}})
    assert summary(found) == [("warning", ("teams", "team-a", "fairShareWeight"))]


@pytest.mark.parametrize("weight", [0, 0.5, 2, 1e-8])
def test_lint_l9_valid_weights(weight: float) -> None:
    assert findings("L9", {"teams": {"team-a": {"fairShareWeight": weight}}}) == []


# L10 flavor limits


def test_lint_l10_too_many_labels_and_tolerations() -> None:
    labels = {f"example.com/l{i}": "x" for i in range(9)}
    tolerations = [{"key": f"example.com/t{i}", "operator": "Exists"} for i in range(9)]
    found = findings("L10", {"gpuTypes": {"h100": {"nodeLabels": labels, "tolerations": tolerations}}})
    assert summary(found) == [
        ("error", ("gpuTypes", "h100", "nodeLabels")),
        ("error", ("gpuTypes", "h100", "tolerations")),
    ]


def test_lint_l10_empty_labels_select_every_node() -> None:
    assert summary(findings("L10", {"gpuTypes": {"h100": {"nodeLabels": {}}}})) == [
        ("error", ("gpuTypes", "h100", "nodeLabels"))
    ]


def test_lint_l10_product_label_contradicts_product() -> None:
    found = findings("L10", {"gpuTypes": {"h100": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-A100"}}}})
    assert summary(found) == [("error", ("gpuTypes", "h100", "nodeLabels", "nvidia.com/gpu.product"))]


def test_lint_l10_too_many_gpu_types_in_a_team() -> None:
    types = {
        f"gpu{i}": {
            "product": f"P{i}",
            "nodes": 1,
            "gpusPerNode": 1,
            "nodeAllocatable": {"cpu": "16", "memory": "64Gi"},
        }
        for i in range(65)
    }
    base = edited({"gpuTypes": types, "teams": {"team-a": {"gpus": {name: {"quota": 1} for name in types}}}})
    assert ("error", ("teams", "team-a", "gpus")) in summary(findings("L10", base=base))


def test_lint_l10_within_limits() -> None:
    assert findings("L10", {"gpuTypes": {"h100": {"nodeLabels": {"example.com/pool": "h100"}}}}) == []


# L11 topology


@pytest.mark.parametrize(
    ("levels", "path"),
    [
        (["kubernetes.io/hostname", "example.com/rack"], ("topology", "levels", 0)),
        (["example.com/rack", "example.com/rack", "kubernetes.io/hostname"], ("topology", "levels", 1)),
        ([], ("topology", "levels")),
        ([f"example.com/l{i}" for i in range(16)] + ["kubernetes.io/hostname"], ("topology", "levels")),
        (["not a label", "kubernetes.io/hostname"], ("topology", "levels", 0)),
    ],
)
def test_lint_l11_bad_levels(levels: list[str], path: tuple[str | int, ...]) -> None:
    assert ("error", path) in summary(findings("L11", {"topology": {"levels": levels}}))


def test_lint_l11_missing_hostname_or_topology_warns() -> None:
    assert summary(findings("L11", {"topology": {"levels": ["example.com/rack"]}})) == [
        ("warning", ("topology", "levels"))
    ]
    assert summary(findings("L11", {"topology": DELETE})) == [("warning", ("topology",))]


def test_lint_l11_valid_levels() -> None:
    levels = ["cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock", "kubernetes.io/hostname"]
    assert findings("L11", {"topology": {"levels": levels}}) == []


# L12 namespaces


def test_lint_l12_shared_namespace() -> None:
    found = findings("L12", {"teams": {"team-b": {"namespaces": ["team-b", "team-a"]}}})
    assert summary(found) == [("error", ("teams", "team-b", "namespaces", 1))]
    assert "already belongs to team team-a" in found[0].message


@pytest.mark.parametrize("namespace", ["kube-system", "kueue-system"])
def test_lint_l12_system_namespace(namespace: str) -> None:
    found = findings("L12", {"teams": {"team-a": {"namespaces": ["team-a", namespace]}}})
    assert summary(found) == [("error", ("teams", "team-a", "namespaces", 1))]


def test_lint_l12_distinct_namespaces() -> None:
    assert findings("L12", {"teams": {"team-a": {"namespaces": ["team-a", "team-a-dev"]}}}) == []


# L13 borrow-only entries


def test_lint_l13_quota_zero_that_can_never_run() -> None:
    base = two_types()
    base["teams"]["team-b"]["gpus"]["a100"] = {"quota": 0, "borrowLimit": 0}
    assert summary(findings("L13", base=base)) == [("warning", ("teams", "team-b", "gpus", "a100", "quota"))]
    no_sharing = edited({"kueue": {"sharing": "none"}}, two_types())
    for team in no_sharing["teams"].values():
        team["gpus"]["h100"] = {"quota": 20}
    no_sharing["teams"]["team-b"]["gpus"]["a100"] = {"quota": 0}
    assert summary(findings("L13", base=no_sharing)) == [("warning", ("teams", "team-b", "gpus", "a100", "quota"))]


def test_lint_l13_borrow_only_entry_is_fine() -> None:
    base = two_types()
    base["teams"]["team-b"]["gpus"]["a100"] = {"quota": 0, "borrowLimit": 8}
    assert lint(Config.model_validate(base)) == []


# L14 live nodes (pure over node dicts)


def node(name: str, gpus: int = 10, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "kubernetes.io/hostname": name,
            "konduktor.ai/topology-rack": "rack-0",
            **(extra_labels or {}),
        },
        "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "192", "memory": "1900Gi"},
    }


def test_lint_l14_matching_nodes() -> None:
    assert check_nodes(config(), [node(f"n{i}") for i in range(4)]) == []


def test_lint_l14_missing_nodes_and_gpus() -> None:
    found = check_nodes(config(), [node("n0"), node("n1"), node("n2", gpus=8)])
    assert summary(found) == [("error", ("gpuTypes", "h100", "nodes")), ("error", ("gpuTypes", "h100", "gpusPerNode"))]
    assert "3 nodes match nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3, the config says 4" in found[0].message


def test_lint_l14_topology_labels_and_small_nodes() -> None:
    nodes = [node(f"n{i}") for i in range(4)]
    del nodes[1]["labels"]["konduktor.ai/topology-rack"]
    nodes[2]["allocatable"]["memory"] = "1000Gi"
    found = check_nodes(config(), nodes)
    assert sorted(summary(found)) == [
        ("error", ("gpuTypes", "h100", "nodeAllocatable", "memory")),
        ("error", ("topology", "levels")),
    ]


def test_lint_l14_node_in_two_gpu_types() -> None:
    both = edited(
        {
            "gpuTypes": {
                "h100": {"nodeLabels": {"example.com/gpu": "yes"}},
                "h100-b": {
                    "product": "NVIDIA-H100-80GB-HBM3",
                    "nodes": 1,
                    "gpusPerNode": 10,
                    "nodeAllocatable": {"cpu": "192", "memory": "1900Gi"},
                },
            }
        }
    )
    nodes = [node(f"n{i}", extra_labels={"example.com/gpu": "yes"}) for i in range(4)]
    found = check_nodes(Config.model_validate(both), nodes)
    assert ("error", ("gpuTypes",)) in summary(found)
    assert any("matches 2 GPU types (h100, h100-b)" in f.message for f in found)


# L15 pods larger than a node


def test_lint_l15_pod_larger_than_a_node() -> None:
    found = check_pod_request(config(), "team-a", 12)
    assert summary(found) == [("warning", ("teams", "team-a", "gpus", "h100"))]
    assert "never fits a h100 node (10 GPUs each)" in found[0].message


def test_lint_l15_pod_larger_than_the_team_can_reach() -> None:
    no_sharing = edited(
        {
            "kueue": {"sharing": "none"},
            "teams": {
                "team-a": {"gpus": {"h100": {"quota": 4, "borrowLimit": DELETE, "lendLimit": DELETE}}},
                "team-b": {"gpus": {"h100": {"quota": 36, "borrowLimit": DELETE, "lendLimit": DELETE}}},
            },
        }
    )
    found = check_pod_request(Config.model_validate(no_sharing), "team-a", 8)
    assert [f.message for f in found] == ["team-a can use at most 4 h100 GPUs; a 8-GPU pod is never admitted"]


def test_lint_l15_pod_that_fits() -> None:
    assert check_pod_request(config(), "team-a", 8) == []
    assert check_pod_request(config(), "team-a", 10, gpu_type="h100") == []


def test_lint_l15_unknown_team_or_type() -> None:
    assert check_pod_request(config(), "team-c", 1)[0].severity == "error"
    assert check_pod_request(config(), "team-a", 1, gpu_type="a100")[0].severity == "warning"


@pytest.mark.parametrize("name", ["config.yaml", "multi-department.yaml", "gke-topology.yaml"])
def test_lint_l14_simulated_nodes_of_each_example_match(name: str) -> None:
    # The simulated cluster built from a config must pass the same node checks as a real one.
    loaded = load_config(EXAMPLES / name)
    nodes = node_manifests(node_pools(loaded), topology_levels(loaded))
    as_seen = [
        {"name": n["metadata"]["name"], "labels": n["metadata"]["labels"], "allocatable": n["status"]["allocatable"]}
        for n in nodes
    ]
    assert check_nodes(loaded.config, as_seen) == []


# L16 Pod Security exceptions


@pytest.mark.parametrize("level", ["gpu", "restricted", "baseline"])
def test_lint_l16_restricted_and_baseline_teams_need_no_exception(level: str) -> None:
    assert findings("L16", {"teams": {"team-a": {"podSecurity": level}}}) == []


def test_lint_l16_a_privileged_team_is_warned_about_by_name() -> None:
    found = findings("L16", {"teams": {"team-b": {"podSecurity": "privileged"}}})
    assert summary(found) == [("warning", ("teams", "team-b", "podSecurity"))]
    assert "team team-b's namespaces admit privileged pods" in found[0].message


def test_lint_l16_validate_names_the_line_of_the_exception_and_refuses_an_unknown_level() -> None:
    text = (EXAMPLES / "config.yaml").read_text()
    privileged = parse_config(text.replace("    groups: [team-b]", "    groups: [team-b]\n    podSecurity: privileged"))
    [exception] = [f for f in privileged.warnings if f.rule == "L16"]
    assert exception.located("config.yaml").startswith("config.yaml:58: teams.team-b.podSecurity: team team-b's")
    with pytest.raises(ConfigError) as problem:
        parse_config(text.replace("    groups: [team-b]", "    groups: [team-b]\n    podSecurity: root"))
    assert str(problem.value).startswith("config.yaml:58: teams.team-b.podSecurity:")
    for profile in ("gpu", "restricted", "baseline", "privileged"):  # the message names the profiles to choose
        assert f"'{profile}'" in str(problem.value), str(problem.value)

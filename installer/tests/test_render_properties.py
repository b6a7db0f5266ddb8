"""Properties of rendering over generated valid configs: never more quota than nodes, Kueue-valid, stable."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kueue_rules import violations

from konduktor.config import parse_config
from konduktor.config.capacity import pool_share
from konduktor.config.lint import lint
from konduktor.config.model import Config
from konduktor.config.quantity import cpu_millicores, parse_quantity
from konduktor.quotas.manifests import to_yaml
from konduktor.quotas.render import render

WEIGHTS = [0, 0.5, 1, 2, 3.25]


@st.composite
def valid_configs(draw: st.DrawFn) -> dict[str, Any]:
    sharing = draw(st.sampled_from(["fair", "classic", "none"]))
    gpu_types: dict[str, dict[str, Any]] = {}
    for index in range(draw(st.integers(1, 3))):
        gpu_types[f"gpu{index}"] = {
            "product": f"NVIDIA-MODEL-{index}",
            "nodes": draw(st.integers(1, 8)),
            "gpusPerNode": draw(st.integers(1, 10)),
            "nodeAllocatable": {
                "cpu": draw(st.sampled_from(["16", "96", "192", "207500m"])),
                "memory": draw(st.sampled_from(["64Gi", "1000Gi", "1900Gi", "2000G"])),
            },
        }
    team_names = [f"team-{i}" for i in range(draw(st.integers(1, 5)))]
    departments = draw(st.sampled_from([[], ["research"], ["research", "product"]]))
    teams: dict[str, dict[str, Any]] = {}
    for name in team_names:
        teams[name] = {"namespaces": [name], "gpus": {}}
        if sharing == "fair":
            teams[name]["fairShareWeight"] = draw(st.sampled_from(WEIGHTS))
        if departments:
            teams[name]["department"] = draw(st.sampled_from(departments))
        if draw(st.booleans()):
            teams[name]["groups"] = [f"{name}-users"]
    for type_name, gpu_type in gpu_types.items():
        capacity = gpu_type["nodes"] * gpu_type["gpusPerNode"]
        users = draw(st.lists(st.sampled_from(team_names), min_size=1, unique=True))
        remaining = capacity
        for name in users:
            quota = draw(st.integers(0, remaining))
            remaining -= quota
            entry: dict[str, Any] = {"quota": quota}
            if sharing != "none" and len(users) > 1:
                if draw(st.booleans()):
                    entry["lendLimit"] = draw(st.integers(0, quota))
                if draw(st.booleans()):
                    entry["borrowLimit"] = draw(st.integers(0, capacity - quota))
            teams[name]["gpus"][type_name] = entry
    for name in team_names:
        if not teams[name]["gpus"]:
            teams[name]["gpus"]["gpu0"] = {"quota": 0}  # a team needs one entry; borrow-only is valid
    data: dict[str, Any] = {
        "version": 1,
        "cluster": {"name": "prop"},
        "kueue": {"sharing": sharing},
        "capacityReserve": {
            "cpu": draw(st.sampled_from(["0", "2", "8"])),
            "memory": draw(st.sampled_from(["0", "16Gi", "32Gi"])),
        },
        "gpuTypes": gpu_types,
        "teams": teams,
    }
    if draw(st.booleans()):
        data["topology"] = {
            "levels": draw(
                st.sampled_from([["kubernetes.io/hostname"], ["example.com/rack", "kubernetes.io/hostname"]])
            )
        }
    return data


def rendered_quota(objects: list[dict[str, Any]], flavor: str, resource: str) -> list[str]:
    return [
        r["nominalQuota"]
        for o in objects
        if o["kind"] == "ClusterQueue"
        for group in o["spec"]["resourceGroups"]
        for f in group["flavors"]
        if f["name"] == flavor
        for r in f["resources"]
        if r["name"] == resource
    ]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_configs())
def test_render_generated_configs_never_promise_more_than_the_nodes(data: dict[str, Any]) -> None:
    config = Config.model_validate(data)
    assert [f for f in lint(config) if f.is_error] == []
    objects = render(config)
    assert violations(objects) == []
    for type_name, gpu_type in config.gpu_types.items():
        pool = pool_share(gpu_type, config.capacity_reserve)
        assert sum(int(q) for q in rendered_quota(objects, type_name, "nvidia.com/gpu")) <= gpu_type.capacity
        assert sum(cpu_millicores(q) for q in rendered_quota(objects, type_name, "cpu")) <= pool.cpu_millicores
        assert sum(parse_quantity(q) for q in rendered_quota(objects, type_name, "memory")) <= (
            parse_quantity(pool.memory)
        )
        # Every listed entry is rendered, borrow-only (quota 0) ones included.
        assert len(rendered_quota(objects, type_name, "nvidia.com/gpu")) == len(config.teams_using(type_name))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_configs())
def test_render_generated_configs_render_the_same_bytes_and_load_back(data: dict[str, Any]) -> None:
    first = to_yaml(render(Config.model_validate(data)))
    assert to_yaml(render(Config.model_validate(copy.deepcopy(data)))) == first
    # The same config written as a file loads to the same model and renders the same objects.
    loaded = parse_config(to_yaml([data]).removeprefix("---\n"), "generated.yaml")
    assert to_yaml(render(loaded.config)) == first

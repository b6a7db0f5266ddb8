"""GPUs shared below one GPU: the MIG profile table, the config's sharing groups and slices (L20), and the quota
objects they render."""

from __future__ import annotations

import textwrap
from fractions import Fraction

import pytest

from konduktor.config.findings import ConfigError
from konduktor.config.load import parse_config
from konduktor.gpu.sharing import (
    SHARED_RESOURCE,
    gpu_fraction,
    layout_problems,
    mig_product,
    mig_resource,
    mig_units,
    smallest_covering,
)
from konduktor.quotas.render import render

SHARED = textwrap.dedent("""\
    version: 1
    cluster: {name: gpu-lab}
    capacityReserve: {cpu: "8", memory: 64Gi}
    gpuTypes:
      h100:
        product: NVIDIA-H100-80GB-HBM3
        nodes: 4
        gpusPerNode: 8
        nodeAllocatable: {cpu: "200", memory: 1964Gi}
        sharing:
          h100-mig:
            nodes: 1
            mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}
          h100-shared:
            nodes: 1
            timeSlicing: {replicas: 4}
    teams:
      team-a:
        namespaces: [team-a]
        gpus: {h100: {quota: 8, borrowLimit: 8}}
        slices:
          h100-mig: {mig-1g.10gb: {quota: 8}, mig-3g.40gb: {quota: 8}}
          h100-shared: {gpu.shared: {quota: 16, lendLimit: 8}}
      team-b:
        namespaces: [team-b]
        gpus: {h100: {quota: 8}}
        slices:
          h100-mig: {mig-1g.10gb: {quota: 8}, mig-2g.20gb: {quota: 8}}
          h100-shared: {gpu.shared: {quota: 16}}
    alerts:
      receivers: {platform: {webhook: {url: {secret: hook, key: url}}}}
      routes: {default: platform}
    topology: {levels: [kubernetes.io/hostname]}
    """)


def errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "config.yaml")
    return [f.located("config.yaml") for f in raised.value.findings if f.severity == "error"]


def test_products_find_their_mig_table() -> None:
    assert mig_product("NVIDIA-H100-80GB-HBM3").family == "A100/H100 80GB"  # type: ignore[union-attr]
    assert mig_product("NVIDIA-A100-SXM4-80GB").family == "A100/H100 80GB"  # type: ignore[union-attr]
    assert mig_product("NVIDIA-A100-SXM4-40GB").family == "A100 40GB"  # type: ignore[union-attr]
    assert mig_product("NVIDIA-H100-NVL").family == "H100 NVL"  # type: ignore[union-attr]
    assert mig_product("NVIDIA-H200").family == "H200 141GB"  # type: ignore[union-attr]
    assert mig_product("NVIDIA-L40S") is None


@pytest.mark.parametrize(
    "layout",
    [
        {"1g.10gb": 7},
        {"3g.40gb": 2},
        {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},  # the operator's all-balanced
        {"4g.40gb": 1, "3g.40gb": 1},
        {"1g.20gb": 4},
        {"7g.80gb": 1},
    ],
)
def test_layouts_the_gpu_can_make(layout: dict[str, int]) -> None:
    assert layout_problems("NVIDIA-H100-80GB-HBM3", layout) == []


def test_layouts_the_gpu_cannot_make() -> None:
    assert layout_problems("NVIDIA-H100-80GB-HBM3", {"1g.10gb": 8}) == [
        "1g.10gb fits at most 7 times on one A100/H100 80GB GPU, not 8"
    ]
    assert layout_problems("NVIDIA-H100-80GB-HBM3", {"3g.40gb": 2, "1g.10gb": 1}) == [
        "the instances take 7 of 7 compute slices and 9 of 8 memory slices of one A100/H100 80GB GPU"
    ]
    [unknown] = layout_problems("NVIDIA-A100-SXM4-40GB", {"1g.10gb": 2, "2g.20gb": 1})
    assert unknown.startswith("'2g.20gb' is not a MIG profile of A100 40GB GPUs")
    [no_table] = layout_problems("NVIDIA-L40S", {"1g.10gb": 1})
    assert no_table.startswith("no MIG profile table for product 'NVIDIA-L40S'")


def test_what_a_shared_node_advertises() -> None:
    assert mig_resource("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert mig_units({"3g.40gb": 1, "1g.10gb": 2}, 8) == {"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-3g.40gb": 8}
    assert gpu_fraction("nvidia.com/mig-3g.40gb") == Fraction(3, 7)
    assert gpu_fraction(SHARED_RESOURCE, 4) == Fraction(1, 4)
    offered = {"nvidia.com/mig-1g.10gb": Fraction(1, 7), "nvidia.com/mig-3g.40gb": Fraction(3, 7)}
    assert smallest_covering(0.1, offered) == "nvidia.com/mig-1g.10gb"
    assert smallest_covering(0.3, offered) == "nvidia.com/mig-3g.40gb"
    assert smallest_covering(0.5, offered) is None


def test_a_shared_config_renders_flavors_per_group_and_slices_in_the_team_queue() -> None:
    loaded = parse_config(SHARED, "config.yaml")
    assert [w for w in loaded.warnings if w.rule == "L20"] == []
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(loaded.config)}
    assert objects["ResourceFlavor", "h100-mig"]["spec"]["nodeLabels"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/mig.config": "h100-mig",
    }
    assert objects["ResourceFlavor", "h100-shared"]["spec"]["nodeLabels"]["nvidia.com/device-plugin.config"] == (
        "h100-shared"
    )
    [group] = objects["ClusterQueue", "team-a"]["spec"]["resourceGroups"]
    assert group["coveredResources"] == [
        "cpu",
        "memory",
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
    ]
    flavors = {f["name"]: {r["name"]: r for r in f["resources"]} for f in group["flavors"]}
    assert list(flavors) == ["h100", "h100-mig", "h100-shared"]
    # Every flavor lists every covered resource; a whole GPU has no quota on a shared flavor, nor a slice on h100.
    assert all(list(resources) == group["coveredResources"] for resources in flavors.values())
    assert flavors["h100"]["nvidia.com/mig-1g.10gb"]["nominalQuota"] == "0"
    assert flavors["h100-mig"]["nvidia.com/gpu"]["nominalQuota"] == "0"
    assert flavors["h100-mig"]["nvidia.com/mig-3g.40gb"]["nominalQuota"] == "8"
    # cpu follows each slice's part of a GPU: 8 x 1/7 + 8 x 3/7 of 8 GPUs' 192 usable cores.
    assert flavors["h100-mig"]["cpu"]["nominalQuota"] == "109714m"
    assert flavors["h100-shared"]["cpu"] == {"name": "cpu", "nominalQuota": "96", "lendingLimit": "48"}
    assert flavors["h100-shared"]["nvidia.com/gpu.shared"]["lendingLimit"] == "8"


def test_a_team_borrows_no_slice_of_a_profile_it_has_no_quota_of() -> None:
    """team-b holds 2g.20gb slices, team-a none: Kueue would let team-a borrow team-b's idle ones without a limit of
    0. The profiles team-a lists keep their own limits (none: it may borrow)."""
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(parse_config(SHARED, "config.yaml").config)}
    [group] = objects["ClusterQueue", "team-a"]["spec"]["resourceGroups"]
    mig = {r["name"]: r for f in group["flavors"] if f["name"] == "h100-mig" for r in f["resources"]}
    assert mig["nvidia.com/mig-2g.20gb"] == {
        "name": "nvidia.com/mig-2g.20gb",
        "nominalQuota": "0",
        "borrowingLimit": "0",
    }
    assert mig["nvidia.com/gpu.shared"]["borrowingLimit"] == "0"
    assert "borrowingLimit" not in mig["nvidia.com/mig-1g.10gb"]
    # Without a cohort Kueue refuses limits, and nothing can be borrowed anyway.
    text = SHARED.replace("version: 1", "version: 1\nkueue: {sharing: none}").replace(", borrowLimit: 8", "")
    alone = parse_config(text.replace(", lendLimit: 8", ""), "config.yaml").config
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(alone)}
    [group] = objects["ClusterQueue", "team-a"]["spec"]["resourceGroups"]
    assert not any("borrowingLimit" in r for f in group["flavors"] for r in f["resources"])


def test_shared_nodes_are_not_whole_gpus() -> None:
    config = parse_config(SHARED, "config.yaml").config
    assert config.gpu_types["h100"].capacity == 16  # 2 of the 4 nodes keep whole GPUs
    text = SHARED.replace("gpus: {h100: {quota: 8, borrowLimit: 8}}", "gpus: {h100: {quota: 16}}")
    assert errors(text) == [
        "config.yaml:5: gpuTypes.h100: team quotas add up to 24 h100 GPUs but there are 16 "
        "(2 nodes x 8 GPUs not in a sharing group)"
    ]


def test_sharing_mistakes_are_named_with_their_line() -> None:
    text = (
        SHARED.replace("mig: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}", "mig: {1g.10gb: 2, 4g.40gb: 1, 3g.40gb: 1}")
        .replace("h100-shared: {gpu.shared: {quota: 16}}", "h100-shard: {gpu.shared: {quota: 16}}")
        .replace("mig-2g.20gb: {quota: 8}}", "mig-2g.20gb: {quota: 8}, gpu.shared: {quota: 1}}")
    )
    assert errors(text) == [
        "config.yaml:13: gpuTypes.h100.sharing.h100-mig.mig: the instances take 9 of 7 compute slices and 10 of 8 "
        "memory slices of one A100/H100 80GB GPU",
        "config.yaml:28: teams.team-b.slices.h100-mig[mig-2g.20gb]: the nodes of h100-mig do not advertise mig-2g.20gb",
        "config.yaml:28: teams.team-b.slices.h100-mig[gpu.shared]: the nodes of h100-mig do not advertise gpu.shared",
        "config.yaml:29: teams.team-b.slices.h100-shard: unknown sharing group 'h100-shard'",
    ]
    text = SHARED.replace("h100-mig: {mig-1g.10gb: {quota: 8}, mig-3g", "h100-mig: {mig-1g.10gb: {quota: 9}, mig-3g")
    assert errors(text) == [
        "config.yaml:11: gpuTypes.h100.sharing.h100-mig: team quotas add up to 17 mig-1g.10gb but the group's 1 "
        "nodes have 16"
    ]


def test_a_group_needs_one_way_and_no_more_nodes_than_the_type() -> None:
    text = SHARED.replace("timeSlicing: {replicas: 4}", "timeSlicing: {replicas: 4}\n        mps: {replicas: 2}")
    assert errors(text) == [
        "config.yaml:14: gpuTypes.h100.sharing.h100-shared: set exactly one of mig, timeSlicing or mps: the way "
        "this group's GPUs are shared"
    ]
    text = SHARED.replace("      h100-shared:\n        nodes: 1", "      h100-shared:\n        nodes: 4")
    assert "config.yaml:10: gpuTypes.h100.sharing: the sharing groups hold 5 nodes but the type has 4" in errors(text)

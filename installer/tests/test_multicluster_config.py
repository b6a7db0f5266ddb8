"""`clusters:` in config.yaml (MultiKueue): the split rule, and each L19 rule with the file:line a user sees."""

from __future__ import annotations

from typing import Any

import pytest
from quota_samples import DELETE, EXAMPLES, edited, fleet, line_of, seed

from konduktor.cli.main import main
from konduktor.config import ConfigError, load_config, parse_config
from konduktor.config.clusters import dispatch_workers, split, worker_quotas
from konduktor.config.lint import lint
from konduktor.config.model import Config
from konduktor.quotas.manifests import to_yaml

EXAMPLE = EXAMPLES / "multicluster.yaml"


def errors_of(data: dict[str, Any]) -> list[str]:
    """The located errors of a config, as `validate` prints them (file:line: path: message)."""
    text = to_yaml([data]).removeprefix("---\n")
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "config.yaml")
    return [f.located("config.yaml") for f in raised.value.findings if f.is_error]


def test_a_config_without_clusters_is_unchanged() -> None:
    # No `clusters:`: the same findings and no per-worker quotas, as before the section existed.
    plain = Config.model_validate(seed())
    assert plain.clusters is None
    assert lint(plain) == []
    assert worker_quotas(plain) == {}
    assert dispatch_workers(plain, "team-a") == []


def test_the_example_is_valid_and_splits_team_a_by_the_workers_gpus() -> None:
    config = load_config(EXAMPLE).config
    quotas = worker_quotas(config)
    assert quotas == {
        "west": {"team-a": {"h100": 6}, "team-b": {"h100": 10}},
        "east": {"team-a": {"h100": 6}, "team-b": {"h100": 10}},
    }
    assert [w.name for w in dispatch_workers(config, "team-a", quotas)] == ["west", "east"]


@pytest.mark.parametrize(
    ("total", "weights", "parts"),
    [
        (20, [20, 20], [10, 10]),
        (21, [20, 20], [11, 10]),  # a tie goes to the worker first in dispatch order
        (10, [10, 30], [3, 7]),  # 2.5 and 7.5: the tie again goes to the first
        (7, [8, 16, 8], [2, 3, 2]),  # 1.75, 3.5, 1.75: largest remainders
        (5, [0, 16], [0, 5]),
        (0, [8, 8], [0, 0]),
    ],
)
def test_split_is_proportional_and_adds_up(total: int, weights: list[int], parts: list[int]) -> None:
    assert split(total, weights) == parts
    assert sum(split(total, weights)) == total


def test_split_follows_the_gpus_of_each_worker_not_its_nodes_alone() -> None:
    # 3 nodes on west, 1 on east: team-a's 20 split 15 / 5, team-b's the same.
    data = fleet({"clusters": {"workers": [{"name": "west", "gpuTypes": {"h100": 3}}, {"name": "east"}]}})
    data["clusters"]["workers"][1] = {"name": "east", "gpuTypes": {"h100": 1}}
    quotas = worker_quotas(Config.model_validate(data))
    assert quotas["west"]["team-a"] == {"h100": 15}
    assert quotas["east"]["team-a"] == {"h100": 5}


def test_quotas_per_cluster_are_taken_as_written() -> None:
    data = fleet(
        {"teams": {"team-a": {"clusters": {"west": {"h100": 20}}}, "team-b": {"clusters": {"east": {"h100": 20}}}}}
    )
    config = Config.model_validate(data)
    assert [f for f in lint(config) if f.is_error] == []
    quotas = worker_quotas(config)
    assert quotas["west"] == {"team-a": {"h100": 20}, "team-b": {"h100": 0}}
    # team-b holds nothing on west: its jobs are dispatched to east only.
    assert [w.name for w in dispatch_workers(config, "team-b", quotas)] == ["east"]
    assert [w.name for w in dispatch_workers(config, "team-a", quotas)] == ["west"]


def test_a_borrow_only_team_may_go_wherever_its_gpu_type_is() -> None:
    data = fleet({"teams": {"team-b": {"gpus": {"h100": {"quota": 0, "lendLimit": DELETE}}}}})
    config = Config.model_validate(data)
    assert [w.name for w in dispatch_workers(config, "team-b")] == ["west", "east"]


def test_a_cluster_named_twice_is_an_error_at_its_second_name() -> None:
    data = fleet()
    data["clusters"]["workers"][1]["name"] = "west"
    assert errors_of(data) == [
        f"config.yaml:{line_of(data, 'name: west', after='context: west')}: clusters.workers[1].name: cluster "
        "'west' is named twice: an earlier worker has this name too"
    ]


def test_a_worker_named_as_the_manager_is_an_error() -> None:
    data = fleet()
    data["clusters"]["workers"][0]["name"] = "gpu-lab"
    [found] = errors_of(data)
    assert found.endswith(
        "clusters.workers[0].name: cluster 'gpu-lab' is named twice: the manager (cluster.name) has this name too"
    )
    assert found.startswith(f"config.yaml:{line_of(data, 'name: gpu-lab', after='workers:')}:")


def test_a_worker_name_must_be_a_dns_label() -> None:
    data = fleet()
    data["clusters"]["workers"][0]["name"] = "West_1"
    [found] = errors_of(data)
    assert "clusters.workers[0].name: worker 'West_1' is not a valid name" in found


def test_a_worker_gpu_type_must_be_defined() -> None:
    data = fleet()
    data["clusters"]["workers"][1]["gpuTypes"] = {"h100": 2, "h10": 1}
    found = errors_of(data)
    assert f"config.yaml:{line_of(data, 'h10:')}: clusters.workers[1].gpuTypes.h10: unknown GPU type 'h10'" in found


def test_the_workers_nodes_must_add_up_to_the_fleet() -> None:
    data = fleet()
    data["clusters"]["workers"][1]["gpuTypes"] = {"h100": 1}
    [found] = errors_of(data)
    assert found == (
        f"config.yaml:{line_of(data, 'nodes: 4')}: gpuTypes.h100.nodes: 4 h100 nodes, but the workers have 3 "
        "(west 2, east 1)"
    )


def test_quotas_per_cluster_need_the_clusters_section() -> None:
    data = edited({"teams": {"team-a": {"clusters": {"west": {"h100": 20}}}}})
    [found] = errors_of(data)
    assert found == (
        f"config.yaml:{line_of(data, 'clusters:')}: teams.team-a.clusters: quotas per cluster need a `clusters:` "
        "section naming the workers"
    )


def test_a_team_quota_on_a_cluster_without_that_gpu_type_is_an_error() -> None:
    # The example: east has A100s only, and team-a puts H100 quota there.
    data = fleet(
        {
            "gpuTypes": {
                "a100": {
                    "product": "NVIDIA-A100-SXM4-80GB",
                    "nodes": 1,
                    "gpusPerNode": 8,
                    "nodeAllocatable": {"cpu": "124", "memory": "1000Gi"},
                },
                "h100": {"nodes": 2},
            },
            "teams": {
                "team-a": {
                    "gpus": {"h100": {"quota": 10}, "a100": {"quota": 8}},
                    "clusters": {"west": {"h100": 5}, "east": {"h100": 5, "a100": 8}},
                },
                "team-b": {"gpus": {"h100": {"quota": 10}}},
            },
        }
    )
    data["clusters"]["workers"][1]["gpuTypes"] = {"a100": 1}
    found = errors_of(data)
    line = line_of(data, "h100: 5", after="east:")
    assert (
        f"config.yaml:{line}: teams.team-a.clusters.east.h100: cluster 'east' has no h100 GPUs (it has a100)" in found
    )


def test_quotas_per_cluster_name_workers_and_the_teams_own_types() -> None:
    data = fleet(
        {
            "teams": {
                "team-a": {"clusters": {"wset": {"h100": 10}, "east": {"h100": 10, "a100": 1}}},
                "team-b": {"clusters": {"gpu-lab": {"h100": 20}}},
            }
        }
    )
    found = errors_of(data)
    assert any("teams.team-a.clusters.wset: unknown cluster 'wset'" in f for f in found)
    assert any("teams.team-a.clusters.east.a100: the team has no 'a100' quota" in f for f in found)
    assert any("teams.team-b.clusters.gpu-lab: 'gpu-lab' is the manager, which runs no jobs" in f for f in found)


def test_quotas_per_cluster_must_add_up_to_the_quota() -> None:
    data = fleet({"teams": {"team-a": {"clusters": {"west": {"h100": 12}, "east": {"h100": 4}}}}})
    [found] = errors_of(data)
    line = line_of(data, "quota: 20", after="team-a:")
    assert found == (
        f"config.yaml:{line}: teams.team-a.gpus.h100.quota: quota 20 h100, but the team's clusters add up to 16 "
        "(west 12, east 4)"
    )


def test_the_teams_must_fit_each_worker() -> None:
    # Together the teams fit the fleet (40 of 40), but west gets 25 of its 20.
    data = fleet({"teams": {"team-a": {"clusters": {"west": {"h100": 15}, "east": {"h100": 5}}}}})
    [found] = errors_of(data)
    assert found == (
        f"config.yaml:{line_of(data, 'h100: 2')}: clusters.workers[0].gpuTypes.h100: the teams hold 25 h100 GPUs "
        "on 'west', which has 20"
    )


def test_the_dispatch_mode_is_one_of_kueues() -> None:
    data = fleet({"clusters": {"dispatch": "roundRobin"}})
    [found] = errors_of(data)
    assert "clusters.dispatch: must be 'incremental' or 'allAtOnce'" in found


@pytest.mark.parametrize("server", ["west.internal:6443", "http://west.internal", "https://west.internal/api", ""])
def test_a_workers_server_is_an_https_address(server: str) -> None:
    data = fleet()
    data["clusters"]["workers"][0]["server"] = server
    [found] = errors_of(data)
    assert found.startswith(f"config.yaml:{line_of(data, 'server:')}: clusters.workers[0].server: ")


def test_a_workers_server_is_taken_as_written() -> None:
    data = fleet()
    data["clusters"]["workers"][1]["server"] = "https://10.0.8.1:6443"
    workers = parse_config(to_yaml([data]).removeprefix("---\n"), "config.yaml").config.clusters.workers
    assert [worker.server for worker in workers] == [None, "https://10.0.8.1:6443"]


@pytest.mark.parametrize(
    ("config", "more", "said"),
    [
        (EXAMPLES / "config.yaml", [], "no clusters: section"),
        (EXAMPLE, ["--sim", "konduktor"], "the config names every cluster itself"),
    ],
)
def test_status_config_takes_a_fleet_and_nothing_else(
    config: Any, more: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--config", str(config), *more]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("command", ["up", "plan"])
def test_up_and_plan_of_a_fleet_take_no_cluster_option(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The config names every cluster; an option naming one more is refused before anything is read or started.
    assert main([command, str(EXAMPLE), "--context", "somewhere"]) == 2
    assert "the config names every cluster itself" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("more", "said"),
    [
        (["--cluster", "west"], "give the config with --config"),
        (["--config", str(EXAMPLE), "--cluster", "north"], "--cluster north: no such cluster"),
        (["--config", str(EXAMPLE), "--sim", "konduktor"], "the config names every cluster itself"),
    ],
)
def test_down_of_a_fleet_names_its_clusters_by_the_config(
    more: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["down", "--dry-run", *more]) == 2
    assert said in capsys.readouterr().err

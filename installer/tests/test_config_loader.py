"""Loading config.yaml: every error at once, each with its line, words a user understands, and hints."""

from __future__ import annotations

import textwrap
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from model_numbers import ANY_KEY, concrete, numeric_paths, replaced
from quota_samples import EXAMPLES, config, seed
from ruamel.yaml import YAML

from konduktor.config import ConfigError, load_config, parse_config
from konduktor.config.capacity import pool_share, share_for
from konduktor.config.load import read_yaml
from konduktor.config.model import KONDUKTOR_IMAGE, Config
from konduktor.config.quantity import format_cpu, format_memory, parse_quantity
from konduktor.config.schema import SCHEMA_FILE, config_schema, config_schema_text
from konduktor.errors import UsageError
from konduktor.helm.release import CHARTS
from konduktor.helm.values import core_values
from konduktor.quotas.manifests import to_yaml
from konduktor.sim.nodes import node_manifests
from konduktor.sim.pools import node_pools, topology_levels

VALID = textwrap.dedent("""\
    version: 1
    cluster:
      name: gpu-lab
    capacityReserve: {cpu: "8", memory: 64Gi}
    topology:
      levels: [kubernetes.io/hostname]
    gpuTypes:
      h100:
        product: NVIDIA-H100-80GB-HBM3
        nodes: 4
        gpusPerNode: 10
        nodeAllocatable: {cpu: "192", memory: 1900Gi}
    teams:
      team-a:
        namespaces: [team-a]
        gpus:
          h100: {quota: 20}
      team-b:
        namespaces: [team-b]
        gpus:
          h100:
            quota: 20
    """)


def errors_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "config.yaml")
    return [f.located("config.yaml") for f in raised.value.findings if f.is_error]


@pytest.mark.parametrize("name", ["config.yaml", "multi-department.yaml", "gke-topology.yaml", "ssh-preflight.yaml"])
def test_config_examples_validate_cleanly(name: str) -> None:
    loaded = load_config(EXAMPLES / name)
    assert loaded.warnings == []


def test_config_seed_example_is_the_problem_statement() -> None:
    example = load_config(EXAMPLES / "config.yaml").config
    [h100] = example.gpu_types.values()
    assert (h100.nodes, h100.gpus_per_node) == (4, 10)
    assert {name: team.gpus["h100"].quota for name, team in example.teams.items()} == {"team-a": 20, "team-b": 20}
    assert example.kueue.sharing != "none"
    assert all(t.gpus["h100"].borrow_limit and t.gpus["h100"].lend_limit for t in example.teams.values())


def test_config_valid_text_loads_with_lines() -> None:
    loaded = parse_config(VALID)
    assert loaded.config.teams["team-b"].gpus["h100"].quota == 20
    assert loaded.lines[("teams", "team-b", "gpus", "h100", "quota")] == 22
    assert loaded.lines[("topology", "levels", 0)] == 6


def test_config_schema_errors_carry_their_lines_and_all_come_at_once() -> None:
    text = (
        VALID.replace("gpusPerNode: 10", "gpusPerNode: 0")
        .replace("h100: {quota: 20}", "h100: {quota: -1}")
        .replace("  name: gpu-lab", "  name: gpu-lab\n  zone: eu")
    )
    assert errors_of(text) == [
        "config.yaml:4: cluster.zone: unknown key",
        "config.yaml:12: gpuTypes.h100.gpusPerNode: must be >= 1",
        "config.yaml:18: teams.team-a.gpus.h100.quota: must be >= 0",
    ]


def test_config_error_message_lists_every_error_with_hints() -> None:
    text = VALID.replace("gpusPerNode", "gpus_per_node").replace("quota: 20}", "quota: -1}")
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "config.yaml")
    problem = raised.value
    assert isinstance(problem, UsageError) and problem.exit_code == 2
    assert problem.message == "config.yaml: 3 errors"
    assert problem.detail is not None
    assert problem.detail.splitlines() == [
        "config.yaml:8: gpuTypes.h100.gpusPerNode: required but missing",
        "config.yaml:11: gpuTypes.h100.gpus_per_node: unknown key",
        "  hint: did you mean 'gpusPerNode'?",
        "config.yaml:17: teams.team-a.gpus.h100.quota: must be >= 0",
    ]


def test_config_single_error_is_the_message_and_its_hint_the_hint() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(VALID.replace("gpuTypes:", "gpuType:"), "config.yaml")
    # gpuType is unknown and gpuTypes then missing: two errors; take the unknown key alone.
    unknown = [f for f in raised.value.findings if f.message == "unknown key"]
    assert [f.hint for f in unknown] == ["did you mean 'gpuTypes'?"]
    with pytest.raises(ConfigError) as raised:
        parse_config(VALID.replace("h100: {quota: 20}", "h100: {quota: 20, borowLimit: 4}"), "config.yaml")
    assert raised.value.message == "config.yaml:17: teams.team-a.gpus.h100.borowLimit: unknown key"
    assert raised.value.hint == "did you mean 'borrowLimit'?"


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("capacityReserv", "did you mean 'capacityReserve'?"),
        ("Teams", "did you mean 'teams'?"),
        ("gpu_types", "did you mean 'gpuTypes'?"),
        (
            "components",
            "valid keys here: version, cluster, kueue, capacityReserve, topology, gpuTypes, priorities, teams, "
            "image, preflight, burnin, alerts, health, clusters",
        ),
    ],
)
def test_config_unknown_top_level_keys_suggest_the_right_one(key: str, hint: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(VALID + f"{key}: {{}}\n", "config.yaml")
    [finding] = [f for f in raised.value.findings if f.path == (key,)]
    assert (finding.message, finding.hint, finding.line) == ("unknown key", hint, 23)


def test_config_bad_choice_suggests_the_close_one() -> None:
    [message] = errors_of(VALID + "kueue: {sharing: fiar}\n")
    assert message == "config.yaml:23: kueue.sharing: must be 'fair', 'classic' or 'none' (got the string 'fiar')"


def test_config_types_are_strict_and_say_what_they_got() -> None:
    assert errors_of(VALID.replace("h100: {quota: 20}", 'h100: {quota: "20"}')) == [
        "config.yaml:17: teams.team-a.gpus.h100.quota: must be a whole number (got the string '20')"
    ]
    assert errors_of(VALID.replace("nodes: 4", "nodes: 4.5")) == [
        "config.yaml:10: gpuTypes.h100.nodes: must be a whole number (got 4.5)"
    ]
    assert errors_of(VALID.replace("    namespaces: [team-b]", "    namespaces: team-b")) == [
        "config.yaml:19: teams.team-b.namespaces: must be a list (got the string 'team-b')"
    ]


def test_config_quantities_accept_numbers_and_reject_nonsense() -> None:
    loaded = parse_config(VALID.replace('{cpu: "192", memory: 1900Gi}', "{cpu: 192, memory: 1900Gi}"))
    assert loaded.config.gpu_types["h100"].node_allocatable.cpu == "192"
    assert errors_of(VALID.replace("memory: 1900Gi", "memory: 1900GB")) == [
        "config.yaml:12: gpuTypes.h100.nodeAllocatable.memory: "
        "'1900GB' is not a Kubernetes quantity (e.g. 192, 500m, 1900Gi)"
    ]


@pytest.mark.parametrize(("value", "expected"), [("10m", "10m"), ('""', None), ("null", None), ("1h30m", "1h30m")])
def test_config_gang_timeout(value: str, expected: str | None) -> None:
    assert parse_config(VALID + f"kueue: {{gangTimeout: {value}}}\n").config.kueue.gang_timeout == expected


@pytest.mark.parametrize("value", ["0s", "ten", "10"])
def test_config_bad_gang_timeout(value: str) -> None:
    [message] = errors_of(VALID + f"kueue: {{gangTimeout: '{value}'}}\n")
    assert message.startswith("config.yaml:23: kueue.gangTimeout: ")


def test_config_preflight_inventory_is_optional_down_to_its_fields() -> None:
    assert parse_config(VALID).config.preflight.nodes is None
    nodes = parse_config(VALID + "preflight: {nodes: {ssh: {}}}\n").config.preflight.nodes
    assert nodes is not None and nodes.ssh is not None and nodes.pod is None
    assert (nodes.ssh.user, nodes.ssh.key, nodes.ssh.port, nodes.ssh.hosts) == (None,) * 4


def test_config_preflight_pods_default_to_the_charts_image_in_the_burnin_namespace() -> None:
    nodes = parse_config(VALID + "preflight: {nodes: {pod: {}}}\n").config.preflight.nodes
    assert nodes is not None and nodes.ssh is None and nodes.pod is not None
    values = YAML(typ="safe").load((CHARTS / "konduktor-core" / "values.yaml").read_text())
    chart = YAML(typ="safe").load((CHARTS / "konduktor-core" / "Chart.yaml").read_text())
    # What the chart runs for the health controller: that image holds konduktor-install too.
    assert nodes.pod.image == f"{values['controller']['image']['repository']}:{chart['appVersion']}"
    # Where konduktor-core creates the preflight service account, apart from konduktor-system.
    assert nodes.pod.namespace == values["burnin"]["namespace"] == "konduktor-burnin"
    custom = parse_config(VALID + "preflight: {nodes: {pod: {image: reg.local/k:1, namespace: ops}}}\n")
    assert custom.config.preflight.nodes is not None
    pod = custom.config.preflight.nodes.pod
    assert pod is not None and (pod.image, pod.namespace) == ("reg.local/k:1", "ops")


def test_config_image_goes_to_the_chart_and_to_the_preflight_pods() -> None:
    digest = "sha256:" + "ab" * 32
    config = parse_config(VALID + f"image: {{repository: reg.local/konduktor, digest: '{digest}'}}\n").config
    assert config.image.reference == f"reg.local/konduktor@{digest}"
    assert core_values(config)["controller"]["image"] == {"repository": "reg.local/konduktor", "digest": digest}
    with_pods = parse_config(VALID + "image: {repository: reg.local/k, tag: '9'}\npreflight: {nodes: {pod: {}}}\n")
    assert with_pods.config.preflight_pod_image == "reg.local/k:9"  # the pods run the image the chart runs
    named = parse_config(VALID + "image: {tag: '9'}\npreflight: {nodes: {pod: {image: other/k:1}}}\n").config
    assert (named.image.reference, named.preflight_pod_image) == ("ghcr.io/konduktor/konduktor:9", "other/k:1")
    # Nothing set: the chart's own image, and no image values passed to it.
    plain = parse_config(VALID).config
    assert plain.image.reference == plain.preflight_pod_image == KONDUKTOR_IMAGE
    assert "image" not in core_values(plain)["controller"]


def test_config_image_errors_name_the_line_and_field() -> None:
    assert errors_of(VALID + "image:\n  repository: reg.local/k:1\n  digest: sha256:abc\n") == [
        "config.yaml:24: image.repository: 'reg.local/k:1' names a tag or a digest: give the repository alone, the "
        "tag in tag, the digest in digest",
        "config.yaml:25: image.digest: 'sha256:abc' is not an image digest: sha256: and 64 hex digits, as "
        "`konduktor-install image build` prints it",
    ]


def test_config_preflight_nodes_take_exactly_one_of_ssh_and_pod() -> None:
    assert errors_of(VALID + "preflight:\n  nodes:\n    ssh: {}\n    pod: {}\n") == [
        "config.yaml:24: preflight.nodes: set either ssh or pod, not both: they are two ways to run the same checks"
    ]
    assert errors_of(VALID + "preflight:\n  nodes: {}\n") == [
        "config.yaml:24: preflight.nodes: set ssh (check the hosts over SSH) or pod (check them from a pod on each "
        "node)"
    ]
    assert errors_of(VALID + "preflight:\n  nodes:\n    pod: {namespace: Ops_NS, image: ''}\n") == [
        "config.yaml:25: preflight.nodes.pod.image: must not be empty",
        "config.yaml:25: preflight.nodes.pod.namespace: 'Ops_NS' is not a namespace name (lowercase letters, "
        "digits and '-', at most 63)",
    ]


def test_config_preflight_inventory_errors_carry_their_lines() -> None:
    text = VALID + textwrap.dedent("""\
        preflight:
          nodes:
            ssh:
              users: ubuntu
              port: "22"
              hosts: [gpu-01, gpu-02, gpu-01]
              key: ""
        """)
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "config.yaml")
    assert [(f.located("config.yaml"), f.hint) for f in raised.value.findings] == [
        ("config.yaml:26: preflight.nodes.ssh.users: unknown key", "did you mean 'user'?"),
        ("config.yaml:27: preflight.nodes.ssh.port: must be a whole number (got the string '22')", None),
        ("config.yaml:28: preflight.nodes.ssh.hosts: listed more than once: gpu-01", None),
        ("config.yaml:29: preflight.nodes.ssh.key: must not be empty", None),
    ]
    assert errors_of(VALID + "preflight:\n  nodes:\n    ssh: {port: 0, hosts: []}\n") == [
        "config.yaml:25: preflight.nodes.ssh.port: must be >= 1",
        "config.yaml:25: preflight.nodes.ssh.hosts: must have at least 1 entry",
    ]
    with pytest.raises(ConfigError) as raised:
        parse_config(VALID + "preflight:\n  nodes: {sssh: {}}\n", "config.yaml")
    assert [(f.located("config.yaml"), f.hint) for f in raised.value.findings] == [
        ("config.yaml:24: preflight.nodes.sssh: unknown key", "did you mean 'ssh'?")
    ]


def test_config_yaml_syntax_error_has_a_line() -> None:
    [message] = errors_of(VALID.replace("  team-b:\n", "  team-b: [\n"))
    assert message.startswith("config.yaml:") and "invalid YAML" in message


def test_config_duplicate_keys_are_errors() -> None:
    [message] = errors_of(
        VALID.replace("    gpus:\n      h100: {quota: 20}", "    gpus:\n      h100: {quota: 20}\n    gpus: {}")
    )
    assert message == "config.yaml:18: teams.team-a.gpus: duplicate key"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "config.yaml: the file is empty"),
        ("- a\n- b\n", "config.yaml:1: the top level must be a mapping of settings"),
        ("cluster: {name: x}\n", "config.yaml:1: version: required but missing"),
        ("version: 2\n", "config.yaml:1: version: must be 1 (got 2)"),
    ],
)
def test_config_whole_file_problems(text: str, expected: str) -> None:
    assert errors_of(text)[0] == expected


def test_config_lint_errors_carry_lines_and_warnings_are_returned() -> None:
    assert errors_of(VALID.replace("h100: {quota: 20}", "h10: {quota: 20}")) == [
        "config.yaml:17: teams.team-a.gpus.h10: unknown GPU type 'h10'"
    ]
    loaded = parse_config(VALID.replace("quota: 20\n", "quota: 10\n"))
    # VALID names no alert receiver (L17, tested with the alerts); this test is about the quotas.
    assert [w.located("x.yaml") for w in loaded.warnings if w.rule != "L17"] == [
        "x.yaml:8: gpuTypes.h100: 10 of 40 h100 GPUs are in no team's quota; "
        "Kueue admits nothing onto them, not even borrowed work"
    ]


def test_config_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_config(tmp_path / "config.yaml")


def test_config_schema_file_is_current() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == config_schema_text(), (
        "regenerate: konduktor-install schema > installer/konduktor/config/config.schema.json"
    )


def test_config_schema_forbids_unknown_keys() -> None:
    schema = config_schema()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"version", "cluster", "gpuTypes", "teams"}
    assert schema["$defs"]["GpuQuota"]["properties"]["quota"]["minimum"] == 0


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("192", 192),
        ("500m", "1/2"),
        ("1900Gi", 1900 * 2**30),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1E", 10**18),
        ("2k", 2000),
        ("1.5", "3/2"),
        ("64Mi", 64 * 2**20),
    ],
)
def test_config_quantities_are_exact(text: str, value: int | str) -> None:
    assert parse_quantity(text) == Fraction(value)


@pytest.mark.parametrize("text", ["", "12x", "Gi", "1.2.3", "1 Gi"])
def test_config_bad_quantities(text: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_config_quantity_formatting() -> None:
    assert [format_cpu(m) for m in (368000, 367500, 0)] == ["368", "367500m", "0"]
    assert [format_memory(m) for m in (3672 * 1024, 1500, 2 * 2**20, 0)] == ["3672Gi", "1500Mi", "2Ti", "0"]


def test_config_derived_cpu_memory_follow_the_gpu_share() -> None:
    # docs/design/kueue.md#worked-example: 4 nodes x 8 GPUs, 192 CPU / 1900Gi, reserve 8 / 64Gi;
    # 16 GPUs -> 368 CPU, 3672Gi.
    h100 = config({"gpuTypes": {"h100": {"gpusPerNode": 8}}})
    gpu_type, reserve = h100.gpu_types["h100"], h100.capacity_reserve
    assert (share_for(16, gpu_type, reserve).cpu, share_for(16, gpu_type, reserve).memory) == ("368", "3672Gi")
    assert (pool_share(gpu_type, reserve).cpu, pool_share(gpu_type, reserve).memory) == ("736", "7344Gi")
    # 1 of 40 GPUs: 736/40 CPU is not whole; rounded down to the millicore, never up.
    seed_type = config().gpu_types["h100"]
    assert share_for(1, seed_type, reserve).cpu == "18400m"
    assert share_for(3, seed_type, reserve).memory == "564019Mi"  # 550.8Gi, rounded down to the MiB


def test_config_node_pools_match_what_the_flavors_select() -> None:
    loaded = config()
    [pool] = node_pools(loaded)
    assert (pool.gpu_type, pool.count, pool.gpus, pool.product) == ("h100", 4, 10, "NVIDIA-H100-80GB-HBM3")
    assert (pool.cpu, pool.memory) == ("192", "1900Gi")
    assert pool.labels == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pool.taints == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert topology_levels(loaded) == ("konduktor.ai/topology-rack", "kubernetes.io/hostname")
    nodes = node_manifests(node_pools(loaded), topology_levels(loaded))
    assert len(nodes) == 4
    assert all(set(topology_levels(loaded)) <= set(n["metadata"]["labels"]) for n in nodes)


def test_config_node_pools_for_gke_labels_and_valued_taints() -> None:
    gke = load_config(EXAMPLES / "gke-topology.yaml").config
    [pool] = node_pools(gke)
    assert pool.labels == {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}
    assert pool.taints == [{"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "present"}]
    assert topology_levels(gke)[-1] == "kubernetes.io/hostname"
    assert topology_levels(config({"topology": None})) == ()


def test_config_seed_sample_round_trips_through_yaml() -> None:
    # The sample used by the other tests is itself a valid file.
    assert parse_config(to_yaml([seed()]).removeprefix("---\n")).warnings == []


# Every optional section set, so that every numeric field of the model has a place in the file.
FULL: dict[str, Any] = {
    "version": 1,
    "cluster": {"name": "gpu-lab"},
    "kueue": {"sharing": "classic", "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100}},
    "capacityReserve": {"cpu": "8", "memory": "64Gi"},
    "gpuTypes": {
        "h100": {
            "product": "NVIDIA-H100-80GB-HBM3",
            "tolerations": [{"key": "gpu", "operator": "Exists", "tolerationSeconds": 30}],
            "nodes": 4,
            "gpusPerNode": 8,
            "nodeAllocatable": {"cpu": 192, "memory": "1900Gi"},
        }
    },
    "priorities": {"standard": 1000},
    "teams": {
        "team-a": {
            "namespaces": ["team-a"],
            "fairShareWeight": 1.5,
            "gpus": {"h100": {"quota": 16, "borrowLimit": 8, "lendLimit": 8}},
            "clusters": {"west": {"h100": 8}, "east": {"h100": 8}},
        },
        "team-b": {"namespaces": ["team-b"], "gpus": {"h100": {"quota": 16}}},
    },
    "clusters": {
        "workers": [{"name": "west", "gpuTypes": {"h100": 2}}, {"name": "east", "gpuTypes": {"h100": 2}}],
    },
    "preflight": {"nodes": {"ssh": {"port": 22}}},
    "burnin": {"level": "quick", "unschedulableSeconds": 60},
    "health": {
        "breaker": {"maxFraction": 0.2, "maxNodes": 4, "windowSeconds": 300},
        "requalification": {"maxConcurrent": 1, "cooldownSeconds": 600},
    },
}
# GPU sharing, which `clusters:` does not take yet (L20): FULL without the workers, with a group of each way.
FULL_SHARED: dict[str, Any] = {
    **{key: value for key, value in FULL.items() if key != "clusters"},
    "gpuTypes": {
        "h100": {
            **FULL["gpuTypes"]["h100"],
            "nodes": 7,
            "sharing": {
                "h100-mig": {"nodes": 1, "mig": {"1g.10gb": 7}},
                "h100-ts": {"nodes": 1, "timeSlicing": {"replicas": 4}},
                "h100-mps": {"nodes": 1, "mps": {"replicas": 2}},
            },
        }
    },
    "teams": {
        "team-a": {
            "namespaces": ["team-a"],
            "gpus": {"h100": {"quota": 32}},
            "slices": {"h100-mig": {"mig-1g.10gb": {"quota": 56, "borrowLimit": 0, "lendLimit": 8}}},
        },
    },
}
# Quantities are strings to the model but take numbers in the file.
QUANTITIES = {
    ("capacityReserve", "cpu"),
    ("capacityReserve", "memory"),
    ("gpuTypes", ANY_KEY, "nodeAllocatable", "cpu"),
    ("gpuTypes", ANY_KEY, "nodeAllocatable", "memory"),
}
NUMBERS = sorted(numeric_paths(Config) | QUANTITIES, key=str)


def _full_for(pattern: tuple[str | int, ...]) -> dict[str, Any]:
    """The document that holds `pattern`; for a sharing setting, with the group of that way first (`concrete`
    takes the first key)."""
    if "sharing" not in pattern and "slices" not in pattern:
        return FULL
    h100 = FULL_SHARED["gpuTypes"]["h100"]
    groups = sorted(h100["sharing"].items(), key=lambda item: not set(item[1]) & set(pattern))
    return {**FULL_SHARED, "gpuTypes": {"h100": {**h100, "sharing": dict(groups)}}}


def test_config_every_section_set_is_valid() -> None:
    assert parse_config(yaml.safe_dump(FULL, sort_keys=False)).config.preflight.nodes is not None
    assert parse_config(yaml.safe_dump(FULL_SHARED, sort_keys=False)).config.shared_resources() == [
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
    ]
    assert len(NUMBERS) >= 14 and ("teams", ANY_KEY, "gpus", ANY_KEY, "quota") in NUMBERS


@pytest.mark.parametrize("pattern", NUMBERS, ids=lambda p: ".".join(map(str, p)))
@pytest.mark.parametrize("value", [True, False])
def test_config_numbers_refuse_booleans(pattern: tuple[str | int, ...], value: bool) -> None:
    full = _full_for(pattern)
    path = concrete(pattern, full)
    text = yaml.safe_dump(replaced(full, path, value), sort_keys=False)
    _, lines = read_yaml(text, "config.yaml")
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "config.yaml")
    [finding] = raised.value.findings
    assert (finding.path, finding.line) == (path, lines[path])
    assert finding.message.endswith(f"(got {str(value).lower()})"), finding.message


def test_config_whole_numbers_fill_number_fields() -> None:
    text = VALID.replace("  team-a:\n", "  team-a:\n    fairShareWeight: 2\n")
    assert parse_config(text).config.teams["team-a"].fair_share_weight == 2.0


def test_config_a_key_typo_does_not_hide_lint_errors() -> None:
    text = VALID.replace("h100: {quota: 20}", "h100: {quota: 30}").replace(
        "cluster:\n", "kueue: {sharng: fair}\ncluster:\n"
    )
    assert errors_of(text) == [
        "config.yaml:2: kueue.sharng: unknown key",
        "config.yaml:9: gpuTypes.h100: team quotas add up to 50 h100 GPUs but there are 40 (4 nodes x 10 GPUs)",
    ]
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "config.yaml")
    assert [f.severity for f in raised.value.findings] == ["error", "error"]  # no warning from the dropped key


def test_config_other_schema_errors_stop_before_lint() -> None:
    """A wrong value cannot be left out the way a typo can: lint would judge a config the user did not write."""
    text = VALID.replace("h100: {quota: 20}", "h100: {quota: 30}").replace("nodes: 4", "nodes: four")
    assert errors_of(text) == ["config.yaml:10: gpuTypes.h100.nodes: must be a whole number (got the string 'four')"]


def test_config_quantities_refuse_booleans_in_their_own_words() -> None:
    assert errors_of(VALID.replace('cpu: "192"', "cpu: true")) == [
        "config.yaml:12: gpuTypes.h100.nodeAllocatable.cpu: must be a Kubernetes quantity, e.g. 192, 500m, 1900Gi "
        "(got true)"
    ]

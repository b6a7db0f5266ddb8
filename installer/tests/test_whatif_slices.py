"""What-if with parts of a GPU: the trace's gpu_fraction (and Alibaba's gpu_milli) mapped at replay time to the
smallest slice of a config's sharing that covers it, the sharing groups' nodes made for the virtual engine, and
one trace replayed against a whole-GPU config and a sliced one."""

from __future__ import annotations

import io
import json
from fractions import Fraction
from pathlib import Path

import pytest

from konduktor.cli.main import main
from konduktor.config.findings import ConfigError
from konduktor.config.load import load_config, parse_config
from konduktor.config.model import Config
from konduktor.errors import UsageError
from konduktor.sim.nodes import node_manifests
from konduktor.sim.pools import node_pools, topology_levels
from konduktor.whatif.replay import job_manifest, replay
from konduktor.whatif.run import load, quotas_of, run_one
from konduktor.whatif.slices import assign, choice, offers, shared_nodes
from konduktor.whatif.trace import TraceJob, load_trace, write_csv

DATA = Path(__file__).parent / "data" / "whatif"
WHOLE, SLICED, TRACE = DATA / "whole.yaml", DATA / "sliced.yaml", DATA / "fractions.csv"

# Two groups offering a shared GPU as different parts of one (4 and 2 replicas), and a MIG group; team-b has no
# slice of its own.
MIXED = """\
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
      h100-four:
        nodes: 1
        timeSlicing: {replicas: 4}
      h100-two:
        nodes: 1
        mps: {replicas: 2}
teams:
  team-a:
    namespaces: [team-a]
    gpus: {h100: {quota: 4}}
    slices:
      h100-mig: {mig-1g.10gb: {quota: 8}, mig-3g.40gb: {quota: 8}}
      h100-four: {gpu.shared: {quota: 16}}
      h100-two: {gpu.shared: {quota: 8}}
  team-b:
    namespaces: [team-b]
    gpus: {h100: {quota: 4}}
alerts:
  receivers: {platform: {webhook: {url: {secret: hook, key: url}}}}
  routes: {default: platform}
"""


def mixed() -> Config:
    return parse_config(MIXED, "config.yaml").config


def test_trace_reads_gpu_fraction_and_keeps_old_traces_valid(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(
        "submit,duration,team,gpus_per_pod,name,gpu_fraction\n0,60,team-a,1,small,0.25\n0,60,team-a,2,big,\n"
    )
    big, small = load_trace(path)  # by submit time, then name
    assert (small.gpu_fraction, big.gpu_fraction) == (0.25, None)
    # Until a config maps it, a fractional job holds one whole GPU, as before.
    assert (small.gpus, big.gpus) == (1, 2)
    out = io.StringIO()
    write_csv([small, big], out)
    assert out.getvalue().splitlines()[0].endswith(",gpu_fraction")
    again = tmp_path / "again.csv"
    again.write_text(out.getvalue())
    assert load_trace(again) == [big, small]
    # A trace without fractions is written without the column, as before.
    out = io.StringIO()
    write_csv([big], out)
    assert "gpu_fraction" not in out.getvalue()


def test_bad_gpu_fractions_name_their_line(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("submit,duration,team,gpus_per_pod,gpu_fraction\n0,60,team-a,1,1.5\n0,60,team-a,2,0.5\n0,6,t,1,x\n")
    with pytest.raises(ConfigError) as raised:
        load_trace(path)
    assert [(f.line, f.path) for f in raised.value.findings] == [
        (2, ("gpu_fraction",)),
        (3, ("gpu_fraction",)),
        (4, ("gpu_fraction",)),
    ]
    assert "gpus_per_pod must be 1" in raised.value.findings[1].message


def test_the_smallest_covering_slice_of_the_team_first_then_of_anyone() -> None:
    config = mixed()
    assert offers(config, "h100", "team-b") == {}
    assert offers(config, None, "team-a")["h100-mig"] == {
        "nvidia.com/mig-1g.10gb": Fraction(1, 7),
        "nvidia.com/mig-3g.40gb": Fraction(3, 7),
    }
    # 0.1 of a GPU: a 1g instance (1/7); 0.2: a quarter of a time-sliced GPU; 0.3: 3g (3/7); 0.45: half an MPS GPU.
    picks = {f: choice(config, f, None, "team-a") for f in (0.1, 0.2, 0.3, 0.45)}
    assert picks == {
        0.1: ("h100-mig", "nvidia.com/mig-1g.10gb", Fraction(1, 7)),
        0.2: ("h100-four", "nvidia.com/gpu.shared", Fraction(1, 4)),
        0.3: ("h100-mig", "nvidia.com/mig-3g.40gb", Fraction(3, 7)),
        0.45: ("h100-two", "nvidia.com/gpu.shared", Fraction(1, 2)),
    }
    # team-b has no slice of its own: it asks for what team-a's quota offers (borrowed); beyond every slice a whole GPU.
    assert choice(config, 0.1, "h100", "team-b") == ("h100-mig", "nvidia.com/mig-1g.10gb", Fraction(1, 7))
    assert choice(config, 0.7, None, "team-a") is None


def test_assigned_jobs_ask_for_their_slice_on_the_right_nodes() -> None:
    config = mixed()
    jobs = [
        TraceJob("mig", 0, 60, "team-a", 1, 1, gpu_fraction=0.1),
        TraceJob("shared", 0, 60, "team-a", 1, 1, gpu_fraction=0.2),
        TraceJob("whole", 0, 60, "team-a", 2, 1, gpu_fraction=0.9),
        TraceJob("plain", 0, 60, "team-a", 1, 4),
    ]
    mig, shared, whole, plain = assign(config, jobs)
    # gpu.shared is a quarter of a GPU on one group and half on another: the job is pinned to its group.
    assert (mig.resource, mig.group, mig.gpus) == ("nvidia.com/mig-1g.10gb", None, pytest.approx(1 / 7))
    assert (shared.resource, shared.group, shared.gpus) == ("nvidia.com/gpu.shared", "h100-four", 0.25)
    assert (whole.resource, whole.gpus, plain.resource, plain.gpus) == (None, 2, None, 4)
    pod = job_manifest(config, shared, "w1", 1.0)["spec"]["template"]["spec"]
    asked = pod["containers"][0]["resources"]
    assert asked["requests"]["nvidia.com/gpu.shared"] == asked["limits"]["nvidia.com/gpu.shared"] == "1"
    assert "nvidia.com/gpu" not in asked["requests"] and "nvidia.com/gpu" not in asked["limits"]
    assert pod["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/device-plugin.config": "h100-four",
    }
    whole_pod = job_manifest(config, whole, "w2", 1.0)["spec"]["template"]["spec"]
    assert whole_pod["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"


def test_sharing_groups_nodes_advertise_their_slices_and_no_whole_gpu() -> None:
    config = mixed()
    nodes = shared_nodes(config, node_manifests(node_pools(config), topology_levels(config)))
    made = [(n["metadata"]["labels"], n["status"]["allocatable"]) for n in nodes]
    assert made[0][0]["nvidia.com/mig.config"] == "h100-mig"
    assert {k: v for k, v in made[0][1].items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.10gb": "16",
        "nvidia.com/mig-2g.20gb": "8",
        "nvidia.com/mig-3g.40gb": "8",
    }
    assert made[1][0]["nvidia.com/device-plugin.config"] == "h100-four" and made[1][1]["nvidia.com/gpu.shared"] == "32"
    assert made[2][0]["nvidia.com/device-plugin.config"] == "h100-two" and made[2][1]["nvidia.com/gpu.shared"] == "16"
    assert made[3][1]["nvidia.com/gpu"] == "8" and "nvidia.com/gpu.shared" not in made[3][1]
    assert nodes[3]["status"]["capacity"] == made[3][1]


def test_slice_quotas_count_as_their_part_of_a_gpu() -> None:
    quotas, lendable, gpus = quotas_of(load_config(SLICED).config)
    assert quotas == {"team-a": 8, "team-b": 8} and lendable == quotas  # 4 whole + 28 sevenths
    assert gpus == 16  # every GPU of the cluster, the shared node's too
    assert quotas_of(load_config(WHOLE).config) == ({"team-a": 8, "team-b": 8}, {"team-a": 8, "team-b": 8}, 16)


def test_the_cluster_engine_refuses_slices_before_starting_a_cluster() -> None:
    config, jobs = load(SLICED, TRACE)
    with pytest.raises(UsageError, match="16 jobs of the trace ask for part of a GPU"):
        replay(config, jobs)


def test_slices_wait_less_where_they_are_plentiful_and_count_by_their_part() -> None:
    """One trace against whole.yaml and sliced.yaml (the same 16 GPUs, one node cut into 1g instances): team-a's
    tenth-of-a-GPU notebooks each hold a whole GPU of its 8 in the first and wait; in the second each takes a
    seventh and none waits. team-b's half-GPU tasks fit no 1g instance: whole GPUs both times, and with 4 whole
    GPUs left to team-b in the sliced config, they wait there."""
    whole = run_one(WHOLE, TRACE, "virtual", horizon=20000).result
    sliced = run_one(SLICED, TRACE, "virtual", horizon=20000).result
    for result in (whole, sliced):
        assert result.cluster.finished == result.cluster.jobs == 22
        assert result.cluster.useful_gpu_hours == pytest.approx(result.cluster.trace_gpu_hours)
        assert result.cluster.gpu_hours == pytest.approx(result.cluster.trace_gpu_hours)
    a_whole, a_sliced = whole.teams["team-a"], sliced.teams["team-a"]
    assert a_sliced.wait_p95 is not None and a_whole.wait_p95 is not None
    assert a_sliced.wait_p95 < a_whole.wait_p95 and a_whole.wait_hours["quota"] > 0
    assert a_sliced.wait_hours["quota"] == 0
    # GPUs used, a slice counted as its part: 16 notebooks hold 16 GPUs whole, 16/7 as 1g instances.
    assert max(gpus for _, gpus in whole.usage["team-a"]) == 8
    assert max(gpus for _, gpus in sliced.usage["team-a"]) == pytest.approx(16 / 7)
    assert a_sliced.gpu_hours == pytest.approx(a_whole.gpu_hours / 7)
    b_whole, b_sliced = whole.teams["team-b"], sliced.teams["team-b"]
    assert b_whole.wait_hours["quota"] == 0 and b_sliced.wait_hours["quota"] > 0
    assert b_sliced.wait_p95 is not None and b_whole.wait_p95 is not None and b_sliced.wait_p95 > b_whole.wait_p95
    assert b_sliced.gpu_hours == pytest.approx(b_whole.gpu_hours)


def test_whatif_against_the_sliced_config(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["whatif", str(WHOLE), "--trace", str(TRACE), "--against", str(SLICED), "-o", "json"])
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    verdicts = {(v["team"], v["aspect"]): v["verdict"] for v in document["verdicts"]}
    assert verdicts[("team-a", "waits")] == "better"
    assert verdicts[("team-b", "waits")] == "worse"


def test_trace_alibaba_keeps_gpu_milli_as_gpu_fraction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace.csv"
    sample = DATA / "openb_pod_list_sample.csv"
    assert main(["trace", "alibaba", str(sample), "--teams", "team-a,team-b", "-o", str(out)]) == 0
    assert "4 GPU tasks, 1 of them asking for part of a GPU" in capsys.readouterr().err
    by_name = {job.name: job for job in load_trace(out)}
    assert by_name["sample-pod-0001"].gpu_fraction == 0.25
    assert [name for name, job in by_name.items() if job.gpu_fraction is not None] == ["sample-pod-0001"]

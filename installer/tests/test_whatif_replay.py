"""What-if replays on the virtual engine (Kueue's own scheduler, queues and Workload controller on virtual time):
the seed's three situations, as small traces, give the outcomes the live scenarios of test_quotas_cluster.py give,
the GPU-hours a replay counts add up exactly, and the same inputs give the same bytes. The cluster engine, the
reference: test_whatif_compare.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EXAMPLE

from konduktor.cli.main import main
from konduktor.errors import ExitCode, UsageError
from konduktor.quotas.render import kueue_manager_settings
from konduktor.whatif.metrics import Event, Result
from konduktor.whatif.run import Run, load, run_one, virtual_engine
from konduktor.whatif.virtual import replay_virtual

DATA = Path(__file__).parent / "data" / "whatif"


def replayed(trace: str, horizon: float) -> Run:
    return run_one(EXAMPLE, DATA / trace, "virtual", horizon=horizon)


def events_of(run: Run, job: str) -> list[Event]:
    return [e for e in run.replay.events if e.job == job]


def peak(result: Result, team: str) -> int:
    return max(gpus for _, gpus in result.usage[team])


def held_hours_add_up(result: Result) -> None:
    """Every GPU-hour held is of a finished run, of a run lost to preemption, or of a run still going at the end."""
    for answer in [*result.teams.values(), result.cluster]:
        assert answer.useful_gpu_hours + answer.lost_gpu_hours <= answer.gpu_hours + 1e-9


def test_whatif_greedy_team_is_capped_and_gpu_hours_are_conserved() -> None:
    run = replayed("greedy.csv", horizon=2400)
    result = run.result
    # team-b runs its 20 GPUs; team-a gets its quota, never more while team-b uses its own.
    assert peak(result, "team-b") == 20
    b_first_done = min(e.time for e in run.replay.events if e.kind == "finished" and e.job.startswith("b-"))
    assert all(gpus <= 20 for time, gpus in result.usage["team-a"] if time < b_first_done)
    # The two jobs beyond the quota waited, Kueue's verdict for the first of them being quota (it parks the one
    # behind without a word), and were admitted only once team-b's work ended.
    late = ["a-greedy-4", "a-greedy-5"]
    verdicts = {(e.kind, e.detail) for job in late for e in events_of(run, job) if e.kind == "pending"}
    assert verdicts == {("pending", "quota")}
    for job in late:
        admitted = next(e.time for e in events_of(run, job) if e.kind == "admitted")
        assert admitted >= min(e.time for e in run.replay.events if e.kind == "finished")
    # Both waited the ~10 minutes until team-b's jobs ended, counted as waiting for quota.
    assert result.teams["team-a"].wait_hours["quota"] > 2 * 400 / 3600
    assert result.teams["team-a"].wait_hours["fragmentation"] == 0
    assert result.cluster.preemptions == 0
    # Conservation: every job finished, each holding its GPUs exactly for its duration (no control plane here).
    assert result.cluster.finished == 10
    assert result.cluster.useful_gpu_hours == pytest.approx(result.cluster.gpu_hours)
    assert result.cluster.trace_gpu_hours == 10 * 5 * 600 / 3600
    assert result.cluster.gpu_hours == pytest.approx(result.cluster.trace_gpu_hours)
    held_hours_add_up(result)


def test_whatif_idle_quota_is_borrowed_then_reclaimed() -> None:
    run = replayed("reclaim.csv", horizon=1500)
    result = run.result
    # team-b idle: team-a holds its 20 plus its borrowing limit of 10.
    assert peak(result, "team-a") == 30
    assert result.teams["team-a"].borrowed_gpu_hours > 0
    assert result.teams["team-b"].lent_gpu_hours == pytest.approx(result.teams["team-a"].borrowed_gpu_hours)
    # team-b reclaims: exactly the borrowed 10 GPUs (2 jobs of 5) are preempted, and its 4 jobs run.
    assert result.teams["team-a"].preemptions == 2
    assert result.teams["team-a"].lost_gpu_hours > 0
    reclaim = [e for e in run.replay.events if e.job.startswith("b-reclaim") and e.kind == "admitted"]
    assert len(reclaim) == 4
    evictions = [e for e in run.replay.events if e.kind == "evicted"]
    assert all(e.job.startswith("a-borrow") for e in evictions), evictions
    assert max(e.time for e in evictions) <= max(e.time for e in reclaim)
    held_hours_add_up(result)


def test_whatif_eight_gpu_pod_waits_for_a_node_not_for_quota() -> None:
    run = replayed("fragmented.csv", horizon=2400)
    result = run.result
    big = events_of(run, "big")
    assert ("pending", "fragmentation") in [(e.kind, e.detail) for e in big]
    assert "quota" not in [e.detail for e in big if e.kind == "pending"]
    admitted = next(e.time for e in big if e.kind == "admitted")
    first_done = min(e.time for e in run.replay.events if e.kind == "finished")
    assert admitted >= first_done  # only once holders ended did a node have 8 free GPUs
    assert result.teams["team-b"].wait_hours["fragmentation"] > 0
    held_hours_add_up(result)


def test_every_job_is_accounted_for_and_gpu_hours_are_conserved() -> None:
    """queue.csv's jobs all finish: the finished runs add up to the trace's GPUs x duration, each job once."""
    run = replayed("queue.csv", horizon=20000)
    jobs = {e.job for e in run.replay.events if e.kind == "submitted"}
    finished = [e.job for e in run.replay.events if e.kind == "finished"]
    assert sorted(finished) == sorted(jobs) and len(jobs) == run.result.cluster.jobs
    assert run.result.cluster.useful_gpu_hours == pytest.approx(run.result.cluster.trace_gpu_hours)
    held_hours_add_up(run.result)


def test_the_same_inputs_give_the_same_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    """Two replays of a trace with preemptions and requeues: byte-identical `-o json`."""
    outputs = []
    for _ in range(2):
        assert main(["whatif", str(EXAMPLE), "--trace", str(DATA / "reclaim.csv"), "-o", "json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    document = json.loads(outputs[0])["configs"][0]
    assert document["engine"] == "virtual" and document["teams"]["team-a"]["preemptions"] == 2
    assert any("kube-scheduler" in limit for limit in document["limits"])


def test_a_kueue_setting_the_engine_cannot_honour_is_refused_by_name() -> None:
    """Admission fair sharing samples LocalQueue usage in a controller the engine does not run: exit 2, named."""
    config, jobs = load(EXAMPLE, DATA / "greedy.csv")
    binary, crds = virtual_engine()
    settings = {**kueue_manager_settings(config), "admissionFairSharing": {"usageHalfLifeTime": "168h"}}
    with pytest.raises(UsageError) as refused:
        replay_virtual(config, jobs, binary, crds, settings=settings)
    assert "admissionFairSharing" in refused.value.message and refused.value.exit_code == ExitCode.BAD_INPUT

"""What-if replays on a fresh simulated cluster (real Kueue, scheduler and Job controller): the seed's three
situations, as small traces, give the outcomes the live scenarios of test_quotas_cluster.py give, and the
GPU-hours a replay counts add up. Two replays each (two speedups, `--against`): test_whatif_compare.py."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLE

from konduktor.whatif.metrics import Event, Result
from konduktor.whatif.run import Run, run_one

pytestmark = pytest.mark.sim
DATA = Path(__file__).parent / "data" / "whatif"
SPEEDUP = 60.0


@pytest.fixture(autouse=True)
def own_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The replay's cluster lives in a state directory of the test's, apart from the user's."""
    with tempfile.TemporaryDirectory(prefix="konduktor-whatif-state-") as state:
        monkeypatch.setenv("KONDUKTOR_STATE", state)
        yield


def replayed(trace: str, horizon: float) -> Run:
    return run_one(EXAMPLE, DATA / trace, SPEEDUP, horizon)


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
    # Conservation: every job finished, each holding its GPUs for its duration (plus the control plane's
    # latency: admission -> pods running -> Job complete -> Workload finished, a few wall seconds, and more while
    # the machine starts clusters beside the replay: 4.2 s a job was seen at the start of a CI run).
    assert result.cluster.finished == 10
    assert result.cluster.useful_gpu_hours == pytest.approx(result.cluster.gpu_hours)
    assert result.cluster.trace_gpu_hours == 10 * 5 * 600 / 3600
    latency = 10 * SPEEDUP / 3600 * 5  # 10 wall seconds a job, in GPU-hours of a 5-GPU job
    assert result.cluster.trace_gpu_hours <= result.cluster.gpu_hours <= result.cluster.trace_gpu_hours + 10 * latency
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

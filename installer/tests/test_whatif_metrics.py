"""The what-if measures, from job events alone: GPU-hours held, finished and lost, waits and their causes,
borrowing and lending, utilisation."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import EXAMPLE

from konduktor.config.load import load_config
from konduktor.whatif.metrics import Event, _wait_hours, cause_of, measure, percentile
from konduktor.whatif.replay import Replay
from konduktor.whatif.run import Run, columns, document, rows
from konduktor.whatif.trace import TraceJob

HOUR = 3600.0


def job(name: str, team: str, gpus: int, duration: float = HOUR, submit: float = 0.0) -> TraceJob:
    return TraceJob(name, submit, duration, team, 1, gpus)


def test_a_job_that_waits_then_runs_to_the_end() -> None:
    jobs = [job("a1", "a", 4)]
    events = [
        Event(0, "a1", "submitted"),
        Event(10, "a1", "pending", "quota"),
        Event(600, "a1", "admitted"),
        Event(600 + HOUR, "a1", "finished"),
    ]
    result = measure(jobs, events, end=2 * HOUR, quotas={"a": 8})
    team = result.teams["a"]
    assert (team.finished, team.unfinished, team.never_admitted) == (1, 0, 0)
    assert team.wait_p50 == team.wait_max == 600
    # The first verdict covers the wait since submission.
    assert team.wait_hours == {"quota": 600 / HOUR, "fragmentation": 0.0, "other": 0.0}
    assert team.gpu_hours == team.useful_gpu_hours == pytest.approx(4.0)
    assert team.utilisation == pytest.approx(4.0 / (8 * 2))
    assert result.usage["a"] == [(0.0, 0), (600, 4), (600 + HOUR, 0)]


def test_preempted_work_is_lost_and_counted_once() -> None:
    jobs = [job("a1", "a", 5), job("b1", "b", 5, submit=1800)]
    events = [
        Event(0, "a1", "submitted"),
        Event(0, "a1", "admitted"),
        Event(1800, "b1", "submitted"),
        Event(1800, "a1", "evicted", "Preempted"),
        Event(1800, "b1", "admitted"),
        Event(1800, "a1", "pending", "quota"),
        Event(1800 + HOUR, "b1", "finished"),
        Event(1800 + HOUR, "a1", "admitted"),
        Event(1800 + 2 * HOUR, "a1", "finished"),
    ]
    result = measure(jobs, events, end=3 * HOUR, quotas={"a": 0, "b": 5})
    a, b = result.teams["a"], result.teams["b"]
    assert a.preemptions == 1 and a.lost_gpu_hours == pytest.approx(2.5)
    assert a.useful_gpu_hours == pytest.approx(5.0) and a.gpu_hours == pytest.approx(7.5)
    assert a.wait_p50 == 0  # the wait is to the first admission
    assert a.wait_hours["quota"] == pytest.approx(1.0)
    # a, without quota, borrowed b's idle 5 GPUs for the first half hour and for the hour after b's job.
    assert a.borrowed_gpu_hours == pytest.approx(7.5)
    assert b.lent_gpu_hours == pytest.approx(7.5)
    cluster = result.cluster
    assert cluster.preemptions == 1 and cluster.finished == 2
    assert cluster.gpu_hours == pytest.approx(cluster.useful_gpu_hours + cluster.lost_gpu_hours)


def test_unfinished_and_never_admitted_jobs_at_the_horizon() -> None:
    jobs = [job("a1", "a", 8), job("a2", "a", 8, submit=60)]
    events = [
        Event(0, "a1", "submitted"),
        Event(0, "a1", "admitted"),
        Event(60, "a2", "submitted"),
        Event(61, "a2", "pending", "fragmentation"),
    ]
    result = measure(jobs, events, end=HOUR / 2, quotas={"a": 16}, cluster_gpus=16)
    team = result.teams["a"]
    assert (team.finished, team.unfinished, team.never_admitted) == (0, 2, 1)
    assert team.gpu_hours == pytest.approx(4.0) and team.useful_gpu_hours == 0
    assert team.wait_hours["fragmentation"] == pytest.approx((HOUR / 2 - 60) / HOUR)
    assert team.trace_gpu_hours == 16
    # The job never admitted counts with its wait so far: a config that admits nothing shows no short waits.
    assert team.wait_max == HOUR / 2 - 60 and team.wait_p50 == pytest.approx((HOUR / 2 - 60) / 2)
    assert result.cluster.utilisation == pytest.approx(4.0 / 8)


def test_lending_is_shared_by_what_each_team_may_lend() -> None:
    jobs = [job("a1", "a", 30)]
    events = [Event(0, "a1", "submitted"), Event(0, "a1", "admitted"), Event(HOUR, "a1", "finished")]
    result = measure(jobs, events, end=HOUR, quotas={"a": 20, "b": 20, "c": 20}, lendable={"a": 16, "b": 16, "c": 4})
    assert result.teams["a"].borrowed_gpu_hours == pytest.approx(10)
    assert result.teams["b"].lent_gpu_hours == pytest.approx(8)
    assert result.teams["c"].lent_gpu_hours == pytest.approx(2)


def test_kueue_messages_give_the_cause_of_a_wait() -> None:
    assert cause_of("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu") == "quota"
    assert (
        cause_of(
            "couldn't assign flavors to pod set main: topology \"gpu-topology\" doesn't allow to fit any of 1 pod(s)"
        )
        == "fragmentation"
    )
    assert cause_of("Workload no longer fits after processing another workload") == "other"


def test_percentiles_interpolate() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile(list(range(101)), 0.95) == pytest.approx(95)


def test_a_job_parked_behind_the_teams_head_shares_its_cause() -> None:
    """Kueue gives its verdict for the head of a team's queue only; the job behind it waits for the same reason."""
    jobs = [job("a1", "a", 5), job("a2", "a", 5), job("b1", "b", 5)]
    events = [
        Event(0, "a1", "submitted"),
        Event(0, "a2", "submitted"),
        Event(0, "b1", "submitted"),
        Event(1, "a1", "pending", "quota"),
        Event(1, "b1", "pending", "fragmentation"),
        Event(1800, "a1", "admitted"),
        Event(HOUR, "a2", "admitted"),
        Event(HOUR, "b1", "admitted"),
    ]
    result = measure(jobs, events, end=2 * HOUR, quotas={"a": 5, "b": 5})
    # a2 waited 1 h: the first half hour beside a1's quota verdict, then no verdict at all; b's cause is its own.
    assert result.teams["a"].wait_hours == pytest.approx({"quota": 1.0, "fragmentation": 0.0, "other": 0.5})
    assert result.teams["b"].wait_hours == pytest.approx({"quota": 0.0, "fragmentation": 1.0, "other": 0.0})


def test_two_configs_side_by_side_with_the_difference() -> None:
    jobs = [job("a1", "a", 4)]

    def run(name: str, admitted: float) -> Run:
        events = [
            Event(0, "a1", "submitted"),
            Event(admitted, "a1", "admitted"),
            Event(admitted + HOUR, "a1", "finished"),
        ]
        replay = Replay(events, 2 * HOUR, 60, ["waitForPodsReady.timeout: 10m -> 30000ms"])
        config = load_config(EXAMPLE).config
        return Run(Path(name), config, replay, measure(jobs, events, 2 * HOUR, {"a": 8}))

    runs = [run("now.yaml", 600), run("proposed.yaml", 60)]
    assert columns(runs) == ["scope", "figure", "now.yaml", "proposed.yaml", "difference"]
    wait = next(r for r in rows(runs) if r["scope"] == "a" and r["figure"] == "wait p50")
    assert wait == {
        "scope": "a",
        "figure": "wait p50",
        "now.yaml": "10.0 min",
        "proposed.yaml": "1.0 min",
        "difference": "-9.0 min",
    }
    cluster = [r for r in rows(runs) if r["scope"] == "cluster"]
    assert {r["figure"] for r in cluster} >= {"preemptions", "borrowed GPU-hours", "utilisation (of quota)"}
    data = document(runs)
    assert [c["config"] for c in data["configs"]] == ["now.yaml", "proposed.yaml"]
    assert data["configs"][1]["teams"]["a"]["wait_p50"] == 60
    assert data["configs"][0]["jobs"] == [
        {
            "job": "a1",
            "evictions": 0,
            "events": [[0, "submitted"], [600, "admitted"], [4200, "finished"]],
            "submitted": 0,
            "admitted": 600,
            "finished": 4200,
        }
    ]


def _by_definition(segments: list[tuple[str, float, float, str]]) -> dict[str, dict[str, float]]:
    """The attribution of waits without a verdict as the docs define it, one small piece of time at a time."""
    hours: dict[str, dict[str, float]] = {}
    for team, start, stop, cause in segments:
        totals = hours.setdefault(team, {"quota": 0.0, "fragmentation": 0.0, "other": 0.0})
        if cause != "other":
            totals[cause] += (stop - start) / HOUR
            continue
        for second in range(int(start), int(stop)):  # the traces below change only on whole seconds
            causes = {c for t, a, b, c in segments if t == team and c != "other" and a <= second < b}
            piece = "quota" if "quota" in causes else "fragmentation" if causes else "other"
            totals[piece] += 1 / HOUR
    return hours


def test_waits_without_a_verdict_take_the_cause_of_their_teams_waits_then() -> None:
    # Overlapping waits of two teams, some with a verdict (quota, a node), most without: each second of a wait
    # without one is counted as quota if a job of its team waited for quota then, else as fragmentation if one
    # waited for a node, else as other.
    rng = random.Random(7)
    segments = []
    for _ in range(400):
        start = rng.randrange(0, 5000)
        stop = start + rng.randrange(0, 600)
        segments.append(
            (rng.choice("ab"), float(start), float(stop), rng.choice(["quota", "fragmentation", "other", "other"]))
        )
    expected = _by_definition(segments)
    got = _wait_hours(segments)
    assert got.keys() == expected.keys()
    for team in got:
        assert got[team] == pytest.approx(expected[team], abs=1e-9), team

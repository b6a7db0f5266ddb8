"""What-if against its reference and with two configs: the virtual engine gives the admissions, the preemption
victims and the waits the cluster engine (a simulated cluster in wall-clock time) gives; `whatif --against` leads
with a verdict per team and draws the report; `--sweep` names the smallest value meeting a target."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLE
from support import WHATIF_DATA as DATA

from konduktor.cli.main import main
from konduktor.errors import ExitCode
from konduktor.whatif.metrics import Event
from konduktor.whatif.run import run_one
from konduktor.whatif.trace import read_trace

# The faithfulness the virtual engine is held to: per team, p50 and p95 waits within 10%, or within the cluster
# engine's own latency: its control plane takes a few wall seconds to evict and start pods (2.5 s measured for
# team-b's reclaim on a busy machine: 74 trace seconds at 30x), which the virtual engine does not add.
SPEEDUP = 30
WAIT_SHARE, WAIT_FLOOR = 0.10, 5 * SPEEDUP


@pytest.fixture
def own_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The cluster engine's cluster lives in a state directory of the test's, apart from the user's."""
    with tempfile.TemporaryDirectory(prefix="konduktor-whatif-state-") as state:
        monkeypatch.setenv("KONDUKTOR_STATE", state)
        yield


def kinds(events: list[Event], kind: str) -> list[str]:
    return sorted(e.job for e in events if e.kind == kind)


@pytest.mark.sim
@pytest.mark.usefixtures("own_state")
def test_virtual_engine_decides_as_the_cluster_engine() -> None:
    """reclaim.csv: team-a borrows team-b's idle quota, team-b reclaims it. The same jobs are admitted on both
    engines (the cluster at 30x), as many preempted, all of them the borrower's, and the waits agree within the
    tolerance. Which of the borrower's jobs admitted in the same second are the victims, Kueue decides by UID:
    random on a cluster, in trace order here (docs/design/whatif-engine.md)."""
    virtual = run_one(EXAMPLE, DATA / "reclaim.csv", "virtual", horizon=1500)
    cluster = run_one(EXAMPLE, DATA / "reclaim.csv", "cluster", speedup=SPEEDUP, horizon=1500)
    assert set(kinds(virtual.replay.events, "admitted")) == set(kinds(cluster.replay.events, "admitted"))
    victims = [kinds(run.replay.events, "evicted") for run in (virtual, cluster)]
    assert len(victims[0]) == len(victims[1]) == 2
    assert all(job.startswith("a-borrow") for run in victims for job in run)
    for team, answer in virtual.result.teams.items():
        reference = cluster.result.teams[team]
        for figure in ("wait_p50", "wait_p95"):
            ours, theirs = getattr(answer, figure), getattr(reference, figure)
            assert ours is not None and theirs is not None
            assert abs(ours - theirs) <= max(WAIT_FLOOR, WAIT_SHARE * max(ours, theirs)), (team, figure, ours, theirs)


def test_whatif_against_a_proposal_compares_both_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The proposal gives team-a 30 of the 40 GPUs: its greedy burst no longer waits for team-b's jobs; team-b,
    # borrowing to run its 20 GPUs, is preempted when team-a reclaims its quota.
    config = yaml.safe_load(EXAMPLE.read_text())
    config["teams"]["team-a"]["gpus"]["h100"] = {"quota": 30, "borrowLimit": 10, "lendLimit": 16}
    config["teams"]["team-b"]["gpus"]["h100"] = {"quota": 10, "borrowLimit": 10, "lendLimit": 10}
    proposal, page = tmp_path / "proposal.yaml", tmp_path / "compare.html"
    proposal.write_text(yaml.safe_dump(config))
    trace = str(DATA / "greedy.csv")
    arguments = ["--against", str(proposal), "--horizon", "2400", "-o", "json", "--report", str(page)]
    assert main(["whatif", str(EXAMPLE), "--trace", trace, *arguments]) == 0
    answer = json.loads(capsys.readouterr().out)
    now, proposed = answer["configs"]
    verdicts = {(v["team"], v["aspect"]): v["verdict"] for v in answer["verdicts"]}
    assert verdicts[("team-a", "waits")] == "better" and verdicts[("team-b", "preemption loss")] == "worse"
    assert (now["config"], proposed["config"]) == (str(EXAMPLE), str(proposal))
    assert proposed["teams"]["team-a"]["wait_max"] < now["teams"]["team-a"]["wait_max"]
    assert now["teams"]["team-b"]["preemptions"] == 0 and proposed["teams"]["team-b"]["preemptions"] >= 1
    drawn = page.read_text()
    assert drawn.count("Plotly.newPlot") == 3  # each config's use, and the waits of both
    assert "GPUs in use per team: config.yaml" in drawn and "GPUs in use per team: proposal.yaml" in drawn
    assert "team-a quota" in drawn and "cluster GPUs" in drawn and "How to read this page" in drawn
    assert main(["whatif", str(EXAMPLE), "--trace", trace, "--against", str(proposal), "--horizon", "2400"]) == 0
    shown = capsys.readouterr()
    assert shown.out.index("team-a: waits better") < shown.out.index("SCOPE")  # the verdict leads
    # Both replays ran at once, their progress one bar: it ends once, with both configs' jobs.
    jobs = len(read_trace(DATA / "greedy.csv")[0])
    finals = [line for line in shown.err.splitlines() if "ETA 0s" in line]
    assert len(finals) == 1 and f"/{2 * jobs} jobs done" in finals[0], shown.err


def test_sweep_names_the_smallest_value_meeting_the_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """queue.csv: team-a's 13 jobs of 5 GPUs at once, with team-b idle. The more it may borrow, the more of them
    start at once and the shorter the wait of the last; the sweep of its borrowing limit finds the smallest limit
    that keeps its p95 wait within 25 minutes: all 10 GPUs, 6 jobs at once."""
    trace = str(DATA / "queue.csv")
    sweep = ["--sweep", "team-a.h100.borrowLimit=0:10:5", "--target", "team-a.p95=25m", "-o", "json"]
    assert main(["whatif", str(EXAMPLE), "--trace", trace, *sweep]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [point["value"] for point in answer["points"]] == [0, 5, 10]
    p95 = [point["teams"]["team-a"]["wait_p95"] for point in answer["points"]]
    assert p95[0] > p95[1] > p95[2]
    assert p95[1] > 25 * 60 >= p95[2] and answer["target"]["smallest"] == 10
    bad = ["--sweep", "team-a.h100.quota=30:40:10"]  # more than the cluster's 40 GPUs with team-b's 20
    assert main(["whatif", str(EXAMPLE), "--trace", trace, *bad]) == ExitCode.BAD_INPUT
    assert "team-a.h100.quota=30" in capsys.readouterr().err

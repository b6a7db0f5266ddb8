"""What-if with two replays each: the same trace at two speedups gives the same waits within a tolerance, and
`whatif --against` compares the example with a proposal and draws the report. Apart from test_whatif_replay.py so
that the two files run side by side on the suite's processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLE
from test_whatif_replay import DATA, SPEEDUP, own_state  # noqa: F401 (own_state: an autouse fixture)

from konduktor.cli.main import main
from konduktor.whatif.run import run_one

pytestmark = pytest.mark.sim


# Two speedups give the same per-team p50 wait within this fraction. What differs between them is the control
# plane's own latency (a few wall seconds a job), which is worth more trace time at the higher speedup.
SPEEDUP_TOLERANCE = 0.2


def test_whatif_two_speedups_give_the_same_p50_wait_within_tolerance() -> None:
    slow = run_one(EXAMPLE, DATA / "queue.csv", SPEEDUP / 2, horizon=2000).result.teams["team-a"]
    fast = run_one(EXAMPLE, DATA / "queue.csv", SPEEDUP, horizon=2000).result.teams["team-a"]
    assert slow.wait_p50 is not None and fast.wait_p50 is not None
    # The 7th job waits for the first six to end: about the jobs' 900 s, at either speed.
    assert slow.wait_p50 >= 900 and fast.wait_p50 >= 900
    assert abs(fast.wait_p50 - slow.wait_p50) <= SPEEDUP_TOLERANCE * max(fast.wait_p50, slow.wait_p50)


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
    now, proposed = json.loads(capsys.readouterr().out)["configs"]
    assert (now["config"], proposed["config"]) == (str(EXAMPLE), str(proposal))
    assert proposed["teams"]["team-a"]["wait_max"] < now["teams"]["team-a"]["wait_max"]
    assert now["teams"]["team-b"]["preemptions"] == 0 and proposed["teams"]["team-b"]["preemptions"] >= 1
    drawn = page.read_text()
    assert drawn.count("Plotly.newPlot") == 3  # each config's use, and the waits of both
    assert "GPUs in use per team: config.yaml" in drawn and "GPUs in use per team: proposal.yaml" in drawn

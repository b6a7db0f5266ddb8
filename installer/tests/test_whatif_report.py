"""`whatif --report`: the page, opened in a real browser (Debian's Chromium, headless, installed by
`scripts/bootstrap dev`), draws each config's GPUs in use per team and the waits per team for every config, with
no network; and a --report path that cannot be written is refused before any replay."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import EXAMPLE

from konduktor.cli.main import main
from konduktor.whatif.metrics import Event, Result, measure
from konduktor.whatif.report import Replayed, common_steps, render
from konduktor.whatif.trace import TraceJob

HOUR = 3600.0
TEAMS = {"team-a": 8, "team-b": 8}


def replayed(label: str, second_wait: float) -> Replayed:
    """team-a runs one job; team-b two, the second waiting `second_wait` for the first's GPUs."""
    jobs = [TraceJob("a1", 0, HOUR, "team-a", 1, 8), TraceJob("b1", 0, HOUR, "team-b", 1, 8)]
    jobs.append(TraceJob("b2", 0, HOUR, "team-b", 1, 8))
    events = [Event(0, name, "submitted") for name in ("a1", "b1", "b2")]
    events += [Event(0, "a1", "admitted"), Event(HOUR, "a1", "finished")]
    events += [Event(0, "b1", "admitted"), Event(HOUR, "b1", "finished")]
    events += [Event(second_wait, "b2", "admitted"), Event(second_wait + HOUR, "b2", "finished")]
    result: Result = measure(jobs, events, end=3 * HOUR, quotas=TEAMS)
    return Replayed(label, result)


def open_in_browser(page: Path, profile: Path) -> str:
    """The page's DOM after its scripts ran in headless Chromium, its background network use turned off."""
    chromium = shutil.which("chromium")
    assert chromium, "no chromium on PATH: run scripts/bootstrap dev (it installs Debian's chromium)"
    flags = [
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=15000",
        "--dump-dom",
    ]
    done = subprocess.run([chromium, *flags, page.as_uri()], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


@pytest.mark.slow  # a headless browser
def test_the_report_draws_use_per_team_and_waits_per_config_in_a_browser(tmp_path: Path) -> None:
    runs = [replayed("now.yaml", second_wait=HOUR), replayed("proposed.yaml", second_wait=0)]
    table = [{"scope": "team-b", "figure": "wait p50", "now.yaml": "0s", "proposed.yaml": "0s"}]
    page = tmp_path / "report.html"
    page.write_text(render(runs, "jobs.csv", table, ["scope", "figure", "now.yaml", "proposed.yaml"]))
    source = page.read_text()
    # Offline: Plotly's JavaScript is in the page, once, and nothing is loaded from elsewhere.
    assert "<script src=" not in source and source.count("Plotly.newPlot") == 3

    dom = open_in_browser(page, tmp_path / "profile")
    # Drawn by the page's script: one plot per config's use and one of the waits, each an SVG with its legend.
    plots = re.findall(r'<div id="figure-(\d)"[^>]*class="[^"]*js-plotly-plot', dom)
    assert plots == ["0", "1", "2"]
    legends = re.findall(r'class="legendtext"[^>]*>([^<]*)<', dom)
    # Each team with its quota, then the cluster's GPUs, in each config's chart; the configs in the waits' chart.
    per_config = ["team-a", "team-a quota", "team-b", "team-b quota", "cluster GPUs"]
    assert legends == [*per_config, *per_config, "now.yaml", "proposed.yaml"]
    assert len(re.findall(r'class="trace boxes"', dom)) == 2  # a box plot per config
    assert "GPUs in use per team: now.yaml" in dom and "Wait before admission per team" in dom
    assert '<table id="answer">' in dom and "<td>wait p50</td>" in dom


def test_teams_are_stacked_on_common_times_each_holding_its_last_value() -> None:
    usage = {"team-a": [(0.0, 8), (HOUR, 0)], "team-b": [(0.0, 8), (HOUR, 0), (HOUR, 8), (2 * HOUR, 0)]}
    times, held = common_steps(usage, 3 * HOUR)
    assert times == [0.0, HOUR, 2 * HOUR, 3 * HOUR]
    # At one hour team-b's first job ended and its second started: it holds 8 from then on, not 0.
    assert held == {"team-a": [8, 0, 0, 0], "team-b": [8, 8, 0, 0]}
    assert common_steps(replayed("x", HOUR).result.usage, 3 * HOUR)[1]["team-b"] == [8, 8, 0, 0]


def test_a_report_path_that_cannot_be_written_is_refused_before_the_replay(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text("submit,duration,team,pods,gpus_per_pod\n0,60,team-a,1,1\n")
    code = main(["whatif", str(EXAMPLE), "--trace", str(trace), "--report", str(tmp_path / "no" / "report.html")])
    assert code == 2

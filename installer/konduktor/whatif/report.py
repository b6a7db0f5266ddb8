"""`whatif --report`: one HTML page to look at rather than read: the GPUs each team held over the replayed time
(one chart per config) and each team's waits before admission (all configs side by side), above the answer's table.

Pure: results in, a page out. Drawn with Plotly; its JavaScript is inlined once, so the page opens without a
network, as on an admin's machine beside an air-gapped cluster.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
import plotly.io as pio

from konduktor.whatif.metrics import Result
from konduktor.whatif.sweep import Sweep, Target, sweep_columns, sweep_rows

HOUR = 3600.0
MINUTE = 60.0
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
GUIDE = (
    "<h2>How to read this page</h2><ul>"
    "<li><b>GPUs in use</b>: a team's solid line above its dotted quota line is borrowing from the others; below it, "
    "the team leaves quota idle for others to borrow. The dashed line is every GPU of the cluster.</li>"
    "<li><b>Wait before admission</b>: minutes from a job's submission to its first admission, a box per config "
    "(the line in a box is the median, the box the middle half); lower is better.</li>"
    "<li><b>The answer</b>: the same figures as the table `whatif` prints; waits in minutes, GPU-hours held by "
    "admitted runs, utilisation of each team's own quota.</li></ul>"
)


@dataclass(frozen=True)
class Replayed:
    """One config's replay, as the page names it."""

    label: str
    result: Result


def usage_figure(run: Replayed) -> go.Figure:
    """GPUs held per team over trace hours, each with its quota as a dotted line of its colour (above it: borrowed,
    below it: lent or idle), and the cluster's GPUs as a dashed line."""
    figure = go.Figure()
    times, held = common_steps(run.result.usage, run.result.span)
    hours = [t / HOUR for t in times]
    span = [0.0, run.result.span / HOUR]
    for index, (team, gpus) in enumerate(held.items()):
        colour = COLOURS[index % len(COLOURS)]
        figure.add_trace(
            go.Scatter(
                x=hours, y=gpus, name=team, mode="lines", line_shape="hv", line={"color": colour}, legendgroup=team
            )
        )
        quota = run.result.teams[team].quota_gpus if team in run.result.teams else 0
        figure.add_trace(
            go.Scatter(
                x=span,
                y=[quota, quota],
                name=f"{team} quota",
                mode="lines",
                line={"color": colour, "dash": "dot"},
                legendgroup=team,
            )
        )
    capacity = run.result.cluster.quota_gpus
    figure.add_trace(
        go.Scatter(
            x=span, y=[capacity, capacity], name="cluster GPUs", mode="lines", line={"color": "#444", "dash": "dash"}
        )
    )
    figure.update_layout(
        title=f"GPUs in use per team: {run.label}",
        xaxis_title="trace time (hours)",
        yaxis_title="GPUs held",
        legend_title="team",
    )
    return figure


def common_steps(
    usage: dict[str, list[tuple[float, float]]], span: float
) -> tuple[list[float], dict[str, list[float]]]:
    """Each team's GPUs held at every time any team's changed (and at the end): stacked traces add up point by
    point, so they must share their times; between its own changes a team holds what it held at the last."""
    times = sorted({t for steps in usage.values() for t, _ in steps if t <= span} | {0.0, span})
    held: dict[str, list[float]] = {}
    for team, steps in sorted(usage.items()):
        ordered, index = sorted(steps, key=lambda step: step[0]), 0
        values: list[float] = []
        current: float = 0
        for t in times:
            while index < len(ordered) and ordered[index][0] <= t:
                current = ordered[index][1]
                index += 1
            values.append(current)
        held[team] = values
    return times, held


def waits_figure(runs: Sequence[Replayed]) -> go.Figure:
    """Each team's waits from submission to first admission, a box per config, side by side."""
    figure = go.Figure()
    for run in runs:
        teams = [team for team, waits in sorted(run.result.waits.items()) for _ in waits]
        minutes = [wait / MINUTE for _, waits in sorted(run.result.waits.items()) for wait in waits]
        figure.add_trace(go.Box(x=teams, y=minutes, name=run.label, boxpoints="outliers"))
    figure.update_layout(
        title="Wait before admission per team",
        xaxis_title="team",
        yaxis_title="wait (minutes)",
        boxmode="group",
        legend_title="config",
    )
    return figure


def render(runs: Sequence[Replayed], trace: str, table: Sequence[dict[str, str]], columns: Sequence[str]) -> str:
    """The whole page: the figures, then the table `whatif` prints."""
    figures = [*(usage_figure(run) for run in runs), waits_figure(runs)]
    charts = [
        pio.to_html(figure, full_html=False, include_plotlyjs=index == 0, div_id=f"figure-{index}")
        for index, figure in enumerate(figures)
    ]
    head = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(row.get(column, ''))}</td>" for column in columns) + "</tr>"
        for row in table
    )
    configs = ", ".join(html.escape(run.label) for run in runs)
    return _page(trace, f"<p>replayed against {configs}</p>" + "".join(charts) + GUIDE, head, body)


def _page(trace: str, content: str, head: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>whatif: {html.escape(trace)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}</style></head><body>"
        f"<h1>whatif: {html.escape(trace)}</h1>"
        + content
        + f"<h2>The answer</h2><table id='answer'><tr>{head}</tr>{body}</table></body></html>\n"
    )


def sweep_figure(sweep: Sweep, points: Sequence[tuple[int, Result]], target: Target | None) -> go.Figure:
    """Each team's p50 and p95 wait (minutes) against the swept value, and the target as a line."""
    figure = go.Figure()
    values = [value for value, _ in points]
    teams = sorted({team for _, result in points for team in result.teams})
    for index, team in enumerate(teams):
        colour = COLOURS[index % len(COLOURS)]
        for figure_name, dash in (("wait_p95", "solid"), ("wait_p50", "dot")):
            minutes = [_minutes_of(result, team, figure_name) for _, result in points]
            figure.add_trace(
                go.Scatter(
                    x=values,
                    y=minutes,
                    name=f"{team} {figure_name.removeprefix('wait_')}",
                    mode="lines+markers",
                    line={"color": colour, "dash": dash},
                )
            )
    if target is not None:
        figure.add_trace(
            go.Scatter(
                x=[min(values), max(values)],
                y=[target.seconds / MINUTE] * 2,
                name=f"target: {target.name}",
                mode="lines",
                line={"color": "#444", "dash": "dash"},
            )
        )
    figure.update_layout(
        title=f"Waits against {sweep.name}", xaxis_title=sweep.field, yaxis_title="wait (minutes)", legend_title="team"
    )
    return figure


def _minutes_of(result: Result, team: str, figure_name: str) -> float | None:
    answer = result.teams.get(team)
    value = None if answer is None else getattr(answer, figure_name)
    return None if value is None else value / MINUTE


def sweep_report(sweep: Sweep, points: Sequence[tuple[int, Result]], target: Target | None, trace: str) -> str:
    """`whatif --sweep --report`: the waits against the swept value, above the sweep's table."""
    chart = pio.to_html(sweep_figure(sweep, points, target), full_html=False, include_plotlyjs=True, div_id="sweep")
    columns = sweep_columns(sweep)
    table = sweep_rows(sweep, list(points), target)
    head = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(row.get(column, ''))}</td>" for column in columns) + "</tr>"
        for row in table
    )
    guide = (
        "<p>Each point is one replay of the trace with the value on the x axis; solid lines are p95 waits, dotted "
        "lines p50 waits, in minutes. The dashed line is the target; the table marks the smallest value meeting "
        "it.</p>"
    )
    return _page(trace, guide + chart, head, body)

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

HOUR = 3600.0


@dataclass(frozen=True)
class Replayed:
    """One config's replay, as the page names it."""

    label: str
    result: Result


def usage_figure(run: Replayed) -> go.Figure:
    """GPUs held per team over trace hours, stacked: the top line is the cluster's GPUs in use."""
    figure = go.Figure()
    times, held = common_steps(run.result.usage, run.result.span)
    for team, gpus in held.items():
        hours = [t / HOUR for t in times]
        figure.add_trace(go.Scatter(x=hours, y=gpus, name=team, mode="lines", line_shape="hv", stackgroup="teams"))
    figure.update_layout(
        title=f"GPUs in use per team: {run.label}",
        xaxis_title="trace time (hours)",
        yaxis_title="GPUs held",
        legend_title="team",
    )
    return figure


def common_steps(usage: dict[str, list[tuple[float, int]]], span: float) -> tuple[list[float], dict[str, list[int]]]:
    """Each team's GPUs held at every time any team's changed (and at the end): stacked traces add up point by
    point, so they must share their times; between its own changes a team holds what it held at the last."""
    times = sorted({t for steps in usage.values() for t, _ in steps if t <= span} | {0.0, span})
    held: dict[str, list[int]] = {}
    for team, steps in sorted(usage.items()):
        ordered, values, current, index = sorted(steps, key=lambda step: step[0]), [], 0, 0
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
        hours = [wait / HOUR for _, waits in sorted(run.result.waits.items()) for wait in waits]
        figure.add_trace(go.Box(x=teams, y=hours, name=run.label, boxpoints="outliers"))
    figure.update_layout(
        title="Wait before admission per team",
        xaxis_title="team",
        yaxis_title="wait (hours)",
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
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>whatif: {html.escape(trace)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}</style></head><body>"
        f"<h1>whatif: {html.escape(trace)}</h1><p>replayed against {configs}</p>"
        + "".join(charts)
        + f"<h2>The answer</h2><table id='answer'><tr>{head}</tr>{body}</table></body></html>\n"
    )

"""Lint rules for the Grafana dashboards, and the PromQL they run.

A dashboard must work in any Grafana it is loaded into: it picks its Prometheus through a `datasource`
template variable, never through an instance-specific datasource id, and keeps a stable `uid` so links and
bookmarks survive re-imports. The rules are pure functions over the parsed JSON.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from konduktor.observability.promql import substitute, variables

DATASOURCE_VARIABLE = "datasource"
DATASOURCE_REFERENCES = frozenset({"${datasource}", "$datasource"})
UID_PATTERN = re.compile(r"konduktor-[a-z0-9]+(?:-[a-z0-9]+)*")
UID_MAX_LENGTH = 40  # Grafana refuses longer uids
PANELS_WITHOUT_QUERIES = frozenset({"row", "text"})
# Grafana's own interval variables, with the values the evaluation tests substitute for them.
GRAFANA_BUILTINS: Mapping[str, str] = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
}
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<expr>.+),\s*)?(?P<label>[A-Za-z_]\w*)\s*\)\s*$", re.S)

Dashboard = Mapping[str, Any]


@dataclass(frozen=True)
class Query:
    """One PromQL expression of a dashboard: a panel target, or the series behind a variable's values."""

    dashboard: str
    panel: str
    ref: str
    expr: str
    instant: bool

    @property
    def where(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref}"


def panels(dashboard: Dashboard) -> Iterator[Mapping[str, Any]]:
    """Every panel, including those folded inside collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def template_variables(dashboard: Dashboard) -> list[Mapping[str, Any]]:
    listed: list[Mapping[str, Any]] = dashboard.get("templating", {}).get("list", [])
    return listed


def variable_values(dashboard: Dashboard) -> dict[str, str]:
    """A concrete value for every variable, as the dashboard opens: the current choice, or the "All" value."""
    values = dict(GRAFANA_BUILTINS)
    for variable in template_variables(dashboard):
        current = variable.get("current", {}).get("value")
        if isinstance(current, list):
            current = current[0] if current else None
        if current in (None, "", "$__all") and variable.get("includeAll"):
            current = variable.get("allValue") or ".*"
        values[variable["name"]] = str(current if current is not None else "")
    return values


def queries(dashboard: Dashboard) -> list[Query]:
    """Panel targets and variable queries, with variables replaced by their opening values."""
    uid = str(dashboard.get("uid"))
    values = variable_values(dashboard)
    found = []
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if isinstance(expr, str) and expr.strip():
                instant = bool(target.get("instant")) and not target.get("range", False)
                found.append(
                    Query(uid, str(panel.get("title")), str(target.get("refId")), substitute(expr, values), instant)
                )
    for variable in template_variables(dashboard):
        if variable.get("type") != "query":
            continue
        selector = _variable_selector(variable)
        if selector:
            found.append(Query(uid, f"variable {variable['name']}", "query", substitute(selector, values), True))
    return found


def lint_dashboard(dashboard: Dashboard) -> list[str]:
    """Problems that would make the dashboard break or depend on one Grafana instance; empty when clean."""
    problems: list[str] = []
    uid = dashboard.get("uid")
    if not isinstance(uid, str) or not UID_PATTERN.fullmatch(uid) or len(uid) > UID_MAX_LENGTH:
        problems.append(f"uid {uid!r}: must be a fixed 'konduktor-...' slug of at most {UID_MAX_LENGTH} characters")
    if dashboard.get("id") is not None:
        problems.append("id: must be null; Grafana assigns numeric ids per instance")
    if not str(dashboard.get("title", "")).strip():
        problems.append("title: missing")
    if not any(
        v.get("name") == DATASOURCE_VARIABLE and v.get("type") == "datasource" and v.get("query") == "prometheus"
        for v in template_variables(dashboard)
    ):
        problems.append("templating: no 'datasource' variable of type datasource selecting Prometheus")
    problems += [f"{path}: {problem}" for path, problem in _datasource_references(dashboard, "$")]
    problems += _panel_problems(dashboard)
    problems += _variable_problems(dashboard)
    return problems


def _panel_problems(dashboard: Dashboard) -> list[str]:
    problems = []
    seen_ids: set[int] = set()
    for panel in panels(dashboard):
        title = panel.get("title") or f"#{panel.get('id')}"
        where = f"panel {title!r}"
        panel_id = panel.get("id")
        if not isinstance(panel_id, int) or panel_id in seen_ids:
            problems.append(f"{where}: id {panel_id!r} missing or not unique")
        else:
            seen_ids.add(panel_id)
        if "gridPos" not in panel:
            problems.append(f"{where}: no gridPos")
        if panel.get("type") in PANELS_WITHOUT_QUERIES:
            continue
        if panel.get("datasource") is None:
            problems.append(f"{where}: no datasource; set it to the ${DATASOURCE_VARIABLE} variable")
        targets = panel.get("targets", [])
        if not targets:
            problems.append(f"{where}: no target")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or None in refs:
            problems.append(f"{where}: target refIds missing or repeated: {refs}")
        for target in targets:
            if not str(target.get("expr", "")).strip():
                problems.append(f"{where}: target {target.get('refId')!r} has no PromQL expression")
    return problems


def _variable_problems(dashboard: Dashboard) -> list[str]:
    defined = {v.get("name") for v in template_variables(dashboard)} | set(GRAFANA_BUILTINS)
    problems = []
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            unknown = variables(str(target.get("expr", ""))) - defined
            if unknown:
                problems.append(f"panel {panel.get('title')!r}: undefined variables {sorted(unknown)}")
    for variable in template_variables(dashboard):
        if variable.get("type") == "query" and _variable_selector(variable) is None:
            problems.append(f"variable {variable.get('name')!r}: query must be label_values(<selector>, <label>)")
    return problems


def _variable_selector(variable: Mapping[str, Any]) -> str | None:
    query = variable.get("query")
    text = query.get("query") if isinstance(query, Mapping) else query
    match = _LABEL_VALUES.match(str(text or ""))
    if match is None or not match.group("expr"):
        return None
    return match.group("expr").strip()


def _datasource_references(node: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every datasource reference that is not the variable: numeric ids, fixed uids, import placeholders."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            here = f"{path}.{key}"
            if key in ("datasourceId", "datasourceUid"):
                yield here, "instance-specific datasource reference"
            elif key == "datasource":
                reference = value.get("uid") if isinstance(value, Mapping) else value
                if reference not in DATASOURCE_REFERENCES:
                    yield here, f"{reference!r} is not the ${DATASOURCE_VARIABLE} variable"
                if isinstance(value, Mapping) and value.get("type", "prometheus") != "prometheus":
                    yield here, f"type {value.get('type')!r}: the dashboards query Prometheus"
            else:
                yield from _datasource_references(value, here)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _datasource_references(item, f"{path}[{index}]")
    elif isinstance(node, str) and "${DS_" in node:
        yield path, "import placeholder ${DS_...}; use the $datasource variable"

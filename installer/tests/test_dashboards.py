"""The Grafana dashboards: lint rules, metric names against the inventory, and every query parsed and evaluated
by the real Prometheus engine (promtool) over sample series of a small cluster."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from metric_samples import EVAL_TIME, TARGET_LABELS, cluster
from promtool import REPO, promtool, report

from konduktor.observability.dashboards import lint_dashboard, queries, variable_values
from konduktor.observability.metrics import (
    HEALTH_CONTROLLER_METRICS,
    INVENTORY,
    Exporter,
    MetricType,
    lookup,
)
from konduktor.observability.promql import metric_names, substitute
from konduktor.whatif.job_series import queries as job_series_queries

DASHBOARD_DIR = REPO / "dashboards"
ALERT_RULES = REPO / "charts" / "konduktor-core" / "files" / "alerts" / "konduktor.rules.yaml"
# Links, bookmarks and the Grafana sidecar's imports key on these; changing one breaks them.
EXPECTED_UIDS = {
    "gpu-overview.json": "konduktor-gpu-overview",
    "team-quotas.json": "konduktor-team-quotas",
    "node-health.json": "konduktor-node-health",
    "jobs-queues.json": "konduktor-jobs-queues",
}


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


DASHBOARDS = {path.name: load(path) for path in sorted(DASHBOARD_DIR.glob("*.json"))}


def alert_expressions() -> list[str]:
    groups = yaml.safe_load(ALERT_RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


# -- lint --------------------------------------------------------------------------------------------------------


def test_the_dashboards_keep_their_uids() -> None:
    assert {name: doc["uid"] for name, doc in DASHBOARDS.items()} == EXPECTED_UIDS


def test_uids_and_titles_are_unique() -> None:
    uids = [doc["uid"] for doc in DASHBOARDS.values()]
    titles = [doc["title"] for doc in DASHBOARDS.values()]
    assert len(set(uids)) == len(uids)
    assert len(set(titles)) == len(titles)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_passes_lint(name: str) -> None:
    assert lint_dashboard(DASHBOARDS[name]) == []


def minimal_dashboard() -> dict[str, Any]:
    return {
        "uid": "konduktor-example",
        "title": "Example",
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
        "panels": [
            {
                "id": 1,
                "type": "timeseries",
                "title": "GPUs",
                "gridPos": {"h": 8, "w": 12, "x": 0, "y": 0},
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "targets": [{"refId": "A", "expr": "sum(kube_node_status_allocatable)"}],
            }
        ],
    }


def test_the_minimal_dashboard_is_clean() -> None:
    assert lint_dashboard(minimal_dashboard()) == []


def edited(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    dashboard = minimal_dashboard()
    node: Any = dashboard
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return dashboard


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ((("panels", 0, "datasource"), 1), "1 is not the $datasource variable"),
        ((("panels", 0, "datasource"), {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}), "is not the $datasource"),
        ((("panels", 0, "targets", 0, "datasource"), "${DS_PROMETHEUS}"), "is not the $datasource variable"),
        ((("panels", 0, "targets"), []), "no target"),
        ((("panels", 0, "targets", 0, "expr"), " "), "has no PromQL expression"),
        ((("panels", 0, "targets", 0, "expr"), "up{job=~'$job'}"), "undefined variables ['job']"),
        ((("templating", "list"), []), "no 'datasource' variable"),
        ((("uid",), "My Dashboard"), "uid 'My Dashboard'"),
        ((("uid",), None), "uid None"),
        ((("id",), 42), "id: must be null"),
    ],
)
def test_lint_reports(edit: tuple[tuple[Any, ...], Any], problem: str) -> None:
    problems = lint_dashboard(edited(*edit))
    assert any(problem in p for p in problems), problems


def test_lint_finds_a_datasource_id_deep_inside() -> None:
    dashboard = minimal_dashboard()
    dashboard["annotations"] = {"list": [{"name": "deploys", "datasourceId": 3}]}
    assert lint_dashboard(dashboard) == ["$.annotations.list[0].datasourceId: instance-specific datasource reference"]


def test_queries_replace_variables_with_their_opening_values() -> None:
    dashboard = minimal_dashboard()
    dashboard["templating"]["list"] += [
        {
            "name": "team",
            "type": "query",
            "query": "label_values(kube_namespace_labels, team)",
            "includeAll": True,
            "allValue": ".+",
            "current": {"value": ["$__all"]},
        },
        {"name": "idle_util", "type": "custom", "query": "1,5", "current": {"value": "5"}},
    ]
    dashboard["panels"][0]["targets"][0]["expr"] = 'x{team=~"$team"} > ${idle_util} and rate(y[$__rate_interval])'
    assert variable_values(dashboard)["team"] == ".+"
    exprs = [q.expr for q in queries(dashboard)]
    assert exprs == ['x{team=~".+"} > 5 and rate(y[5m])', "kube_namespace_labels"]


# -- metric names ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (node) (rate(foo_total{a="b"}[5m]))', {"foo_total"}),
        ('label_replace(DCGM_FI_DEV_GPU_UTIL, "node", "$1", "Hostname", "(.+)") > 5', {"DCGM_FI_DEV_GPU_UTIL"}),
        ("a * on (node) group_left (label_x) max by (node, label_x) (b) / 1e6", {"a", "b"}),
        ("a * on (pod) group_left sum by (pod) (b) + c * ignoring (x) group_right d", {"a", "b", "c", "d"}),
        ("histogram_quantile(0.9, sum by (le) (rate(h_bucket[5m]))) and c offset 1h", {"h_bucket", "c"}),
        ('{__name__="x_total", job="j"} or absent(up{job="k"} == 1)', {"x_total", "up"}),
        ("count(m1 > bool 0) unless ignoring(x) m2 atan2 m3", {"m1", "m2", "m3"}),
    ],
)
def test_metric_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_substitute_leaves_label_replace_references_alone() -> None:
    assert (
        substitute('label_replace(x, "a", "$1", "b", "$team")', {"team": "t"})
        == 'label_replace(x, "a", "$1", "b", "t")'
    )


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_queries_name_only_inventory_metrics(name: str) -> None:
    unknown = {
        query.where: sorted(n for n in metric_names(query.expr) if lookup(n) is None)
        for query in queries(DASHBOARDS[name])
    }
    assert {where: names for where, names in unknown.items() if names} == {}


def test_every_inventory_metric_is_used_by_a_dashboard_an_alert_or_the_trace_export() -> None:
    exprs = [q.expr for doc in DASHBOARDS.values() for q in queries(doc)] + alert_expressions()
    exprs += list(job_series_queries(3600).values())
    used = {metric.name for expr in exprs for name in metric_names(expr) if (metric := lookup(name))}
    assert sorted(set(INVENTORY) - used) == []


def test_every_inventory_entry_says_where_it_comes_from() -> None:
    for metric in INVENTORY.values():
        assert metric.source.strip(), metric.name
        assert metric.help.strip(), metric.name
        assert isinstance(metric.exporter, Exporter)
    exporters = {metric.exporter for metric in INVENTORY.values()}
    assert exporters == set(Exporter)


def test_the_health_controller_contract() -> None:
    contract = {metric.name: metric for metric in HEALTH_CONTROLLER_METRICS}
    assert all(name.startswith("konduktor_") for name in contract)
    assert all(metric.exporter is Exporter.HEALTH_CONTROLLER for metric in contract.values())
    assert contract["konduktor_gpu_faults_total"].labels == ("node", "kind", "code", "reason")
    assert contract["konduktor_detection_latency_seconds"].type is MetricType.HISTOGRAM
    for name in ("konduktor_quarantined_nodes", "konduktor_quarantine_breaker_tripped", "konduktor_api_errors_total"):
        assert name in contract
    counters = [m.name for m in contract.values() if m.type is MetricType.COUNTER]
    assert all(name.endswith("_total") for name in counters)


def test_samples_cover_the_inventory_with_its_labels() -> None:
    seen: set[str] = set()
    for series in cluster():
        metric = lookup(series.name)
        assert metric is not None, f"sample {series.name} is not in the inventory"
        seen.add(metric.name)
        extra = set(series.labels) - set(metric.labels) - TARGET_LABELS - {"le"}
        assert not extra, f"{series.name} has labels {sorted(extra)} its exporter does not set"
    assert sorted(set(INVENTORY) - seen) == []


# -- the real Prometheus engine ----------------------------------------------------------------------------------


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """`promtool check rules` parses each query as the expression of a recording rule."""
    rules = [
        {"record": f"konduktor:dashboard_query:{index}", "expr": query.expr}
        for index, query in enumerate(q for doc in DASHBOARDS.values() for q in queries(doc))
    ]
    rule_file = tmp_path / "dashboard-queries.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    result = promtool("check", "rules", str(rule_file))
    assert result.returncode == 0, report(result)
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout + result.stderr, report(result)


def evaluation_tests(dashboard: dict[str, Any]) -> dict[str, Any]:
    """A promtool test file asking, for each query, that it returns at least one finite sample."""
    input_series = [series.promtool() for series in cluster()]
    cases = [
        {
            "name": query.where,
            "interval": "1m",
            "input_series": input_series,
            "promql_expr_test": [
                {
                    # NaN and infinities are dropped by the comparison, so a query that only yields them fails.
                    "expr": f"count(abs(({query.expr})) < +Inf) > bool 0",
                    "eval_time": EVAL_TIME,
                    "exp_samples": [{"labels": "{}", "value": 1}],
                }
            ],
        }
        for query in queries(dashboard)
    ]
    return {"rule_files": [], "evaluation_interval": "1m", "tests": cases}


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_queries_return_data(name: str, tmp_path: Path) -> None:
    test_file = tmp_path / f"{Path(name).stem}-queries.test.yaml"
    test_file.write_text(yaml.safe_dump(evaluation_tests(DASHBOARDS[name]), sort_keys=False))
    result = promtool("test", "rules", str(test_file))
    assert result.returncode == 0, report(result)


def test_a_query_for_a_metric_without_samples_fails_the_evaluation(tmp_path: Path) -> None:
    """The evaluation check is not vacuous: a misspelt metric returns nothing and promtool says so."""
    dashboard = copy.deepcopy(DASHBOARDS["node-health.json"])
    dashboard["panels"] = [minimal_dashboard()["panels"][0]]
    dashboard["panels"][0]["targets"][0]["expr"] = "max(konduktor_quarantined_node)"
    dashboard["templating"]["list"] = [dashboard["templating"]["list"][0]]
    test_file = tmp_path / "misspelt.test.yaml"
    test_file.write_text(yaml.safe_dump(evaluation_tests(dashboard), sort_keys=False))
    result = promtool("test", "rules", str(test_file))
    assert result.returncode != 0
    assert "konduktor_quarantined_node" in result.stdout + result.stderr

"""The alert rules: promtool's own checks and unit tests (real binary), runbooks, and the metric inventory."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from promtool import REPO, promtool, report

from konduktor.observability.metrics import lookup
from konduktor.observability.promql import metric_names

ALERTS_DIR = REPO / "charts" / "konduktor-core" / "files" / "alerts"
RULE_FILE = ALERTS_DIR / "konduktor.rules.yaml"
TEST_FILES = sorted((ALERTS_DIR / "tests").glob("*.yaml"))
RUNBOOKS = REPO / "docs" / "runbooks.md"
# What issue 7 asks the platform to alert on, one rule each.
REQUIRED_ALERTS = {
    "KonduktorGPUXidBurst",
    "KonduktorNodeQuarantined",
    "KonduktorGPUEccDoubleBit",
    "KonduktorGPURowRemapFailure",
    "KonduktorGPULost",
    "KonduktorQuarantineBreakerTripped",
    "KonduktorHealthControllerDown",
    "KonduktorWorkloadsPendingTooLong",
    "KonduktorTeamBorrowingHigh",
    "KonduktorDCGMExporterAbsent",
    # Issue 40: GPU slices.
    "KonduktorTeamSliceQuotaExhausted",
}
SEVERITIES = {"critical", "warning", "info"}


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULE_FILE.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def alert_test_cases() -> list[dict[str, Any]]:
    return [
        case
        for path in TEST_FILES
        for group in yaml.safe_load(path.read_text())["tests"]
        for case in group.get("alert_rule_test", [])
    ]


def runbook_anchors() -> set[str]:
    """GitHub's anchors for the level-2 headings: lower case, spaces to hyphens, punctuation dropped."""
    headings = re.findall(r"^## (.+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_the_rule_file_passes_promtool_check() -> None:
    result = promtool("check", "rules", str(RULE_FILE))
    assert result.returncode == 0, report(result)
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout + result.stderr, report(result)


def test_the_rule_unit_tests_pass() -> None:
    result = promtool("test", "rules", *[str(path.relative_to(ALERTS_DIR)) for path in TEST_FILES], cwd=ALERTS_DIR)
    assert result.returncode == 0, report(result)


def test_the_issue_alerts_are_all_there() -> None:
    assert {rule["alert"] for rule in alert_rules()} == REQUIRED_ALERTS


def test_each_alert_is_tested_both_firing_and_silent() -> None:
    cases = alert_test_cases()
    for name in REQUIRED_ALERTS:
        outcomes = [bool(case["exp_alerts"]) for case in cases if case["alertname"] == name]
        assert True in outcomes, f"{name}: no case where it fires"
        assert False in outcomes, f"{name}: no case where it stays silent"


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: rule["alert"])
def test_alert_has_severity_summary_description_and_runbook(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert annotations["summary"].strip()
    assert annotations["description"].strip()
    anchor = rule["alert"].lower()
    assert annotations["runbook_url"] == f"docs/runbooks.md#{anchor}"
    assert anchor in runbook_anchors(), f"docs/runbooks.md has no section '## {rule['alert']}'"


def test_every_runbook_section_belongs_to_an_alert() -> None:
    assert runbook_anchors() == {name.lower() for name in REQUIRED_ALERTS}


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: rule["alert"])
def test_alert_names_only_inventory_metrics(rule: dict[str, Any]) -> None:
    assert sorted(n for n in metric_names(rule["expr"]) if lookup(n) is None) == []


def test_each_runbook_says_what_it_means_how_to_check_and_what_to_do() -> None:
    sections = re.split(r"^## ", RUNBOOKS.read_text(), flags=re.MULTILINE)[1:]
    for section in sections:
        title = section.splitlines()[0]
        for part in ("**What it means.**", "**How to check.**", "**What to do.**"):
            assert part in section, f"runbook {title}: no {part}"

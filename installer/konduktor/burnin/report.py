"""Burn-in reports from one model: a terminal table, JSON for machines, JUnit XML for CI."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from konduktor.burnin.results import BurnInReport, CheckResult, Evidence, NodeVerdict, PairVerdict, Verdict, worst
from konduktor.burnin.tiers import PAIR_STEP, Step

# Table columns in run order; the pair column appears once pairs were tested.
_STEP_COLUMNS = (
    (Step.PASSIVE.value, "PASSIVE"),
    (Step.DCGM.value, "DCGM"),
    (Step.MATMUL.value, "MATMUL"),
    (Step.GPU_BURN.value, "GPU-BURN"),
    (Step.NCCL.value, "NCCL-1N"),
    (PAIR_STEP, "NCCL-PAIR"),
)


def _cell(checks: list[CheckResult]) -> str:
    if not checks:
        return "-"
    verdict = worst(c.verdict for c in checks)
    # The summary of the check that decided the cell says why; PASS shows the headline metric.
    deciding = next((c for c in checks if c.verdict is verdict and c.summary), checks[0])
    return f"{verdict.value} {deciding.summary}".strip()


def render_table(report: BurnInReport) -> str:
    """One row per node, one column per step, then the reasons for every non-PASS check."""
    present = {c.step for n in report.nodes for c in n.checks}
    columns = [(step, title) for step, title in _STEP_COLUMNS if step in present]
    header = ["NODE", "MODEL", *(title for _, title in columns), "VERDICT"]
    rows = [
        [
            node.node,
            node.gpu_model or (node.gpu_product or "?"),
            *(_cell([c for c in node.checks if c.step == step]) for step, _ in columns),
            node.verdict.value + (" (quarantine)" if node.quarantine else ""),
        ]
        for node in report.nodes
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    findings = [
        f"{node.node} {check.check} {check.verdict.value}: {reason}"
        for node in report.nodes
        for check in node.checks
        if check.verdict is not Verdict.PASS
        for reason in check.reasons or ("(no reason given)",)
    ]
    findings += [
        f"{'+'.join(pair.nodes)} {pair.result.check} {pair.result.verdict.value}: {reason}"
        for pair in report.pairs
        if pair.result.verdict is not Verdict.PASS
        for reason in pair.result.reasons or ("(no reason given)",)
    ]
    if findings:
        lines += ["", "Findings:", *(f"  {line}" for line in findings)]
    return "\n".join(lines) + "\n"


def report_to_dict(report: BurnInReport) -> dict[str, Any]:
    """Plain data: enums as their values, tuples as lists."""

    def plain(value: Any) -> Any:
        if isinstance(value, Verdict):
            return value.value
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    data: dict[str, Any] = plain(asdict(report))
    for node, original in zip(data["nodes"], report.nodes, strict=True):
        node["quarantine"] = original.quarantine
    data["verdict"] = worst(n.verdict for n in report.nodes).value
    return data


def report_from_dict(data: Mapping[str, Any]) -> BurnInReport:
    """The report `report_to_dict` made, back (as a run records it in the cluster, for `burnin show`)."""

    def check(item: Mapping[str, Any]) -> CheckResult:
        return CheckResult(
            item["check"],
            Verdict(item["verdict"]),
            item["step"],
            item.get("summary", ""),
            tuple(item.get("reasons") or ()),
            tuple(Evidence(**e) for e in item.get("evidence") or ()),
        )

    nodes = tuple(
        NodeVerdict(
            n["node"], n.get("gpu_product"), n.get("gpu_model"), Verdict(n["verdict"]), tuple(map(check, n["checks"]))
        )
        for n in data["nodes"]
    )
    pairs = tuple(PairVerdict((p["nodes"][0], p["nodes"][1]), check(p["result"])) for p in data.get("pairs") or ())
    return BurnInReport(data["run_id"], data["tier"], data["thresholds_version"], nodes, pairs)


def render_json(report: BurnInReport) -> str:
    return json.dumps(report_to_dict(report), indent=2) + "\n"


# Characters XML 1.0 forbids even escaped; tool output carries them (ANSI colours, NULs).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _testcase(parent: ET.Element, classname: str, check: CheckResult) -> tuple[int, int, int]:
    """One testcase; returns (failures, errors, skipped) it adds."""
    case = ET.SubElement(parent, "testcase", classname=_xml_text(classname), name=_xml_text(check.check))
    # Metrics as properties, as pytest's record_property does (docs/design/burnin.md#reports).
    if check.evidence:
        properties = ET.SubElement(case, "properties")
        for item in check.evidence:
            name = item.metric if item.gpu is None else f"{item.metric}[gpu{item.gpu}]"
            value = "" if item.measured is None else str(item.measured)
            if item.threshold is not None:
                value += f" (goal {item.threshold:g}{' ' + item.unit if item.unit else ''})"
            ET.SubElement(properties, "property", name=_xml_text(name), value=_xml_text(value))
    message = _xml_text("; ".join(check.reasons) or check.summary or check.verdict.value)
    body = _xml_text("\n".join(check.reasons))
    match check.verdict:
        case Verdict.FAIL:
            ET.SubElement(case, "failure", message=message, type="FAIL").text = body
            return 1, 0, 0
        case Verdict.ERROR:
            ET.SubElement(case, "error", message=message, type="ERROR").text = body
            return 0, 1, 0
        case Verdict.SKIPPED:
            ET.SubElement(case, "skipped", message=message)
            return 0, 0, 1
        case Verdict.WARN:
            # JUnit has no warning: the test passes and the warning goes to system-out.
            ET.SubElement(case, "system-out").text = f"WARN: {message}"
    return 0, 0, 0


def _suite(root: ET.Element, name: str, checks: list[tuple[str, CheckResult]]) -> tuple[int, int, int, int]:
    suite = ET.SubElement(root, "testsuite", name=_xml_text(name))
    failures = errors = skipped = 0
    for classname, check in checks:
        f, e, s = _testcase(suite, classname, check)
        failures, errors, skipped = failures + f, errors + e, skipped + s
    suite.set("tests", str(len(checks)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    return len(checks), failures, errors, skipped


def render_junit(report: BurnInReport) -> str:
    """`<testsuite name=node>` with one `<testcase>` per check; node pairs in a `fabric` suite."""
    root = ET.Element("testsuites", name=f"konduktor-burnin {report.run_id}")
    totals = [0, 0, 0, 0]

    def add(counts: tuple[int, int, int, int]) -> None:
        for i, count in enumerate(counts):
            totals[i] += count

    for node in report.nodes:
        add(_suite(root, node.node, [(_classname(node), check) for check in node.checks]))
    if report.pairs:
        add(_suite(root, "fabric", [(_pair_classname(pair), pair.result) for pair in report.pairs]))
    for key, value in zip(("tests", "failures", "errors", "skipped"), totals, strict=True):
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _classname(node: NodeVerdict) -> str:
    return f"burnin.{node.node}"


def _pair_classname(pair: PairVerdict) -> str:
    return f"burnin.pair.{'+'.join(pair.nodes)}"

"""Reports: the table, JSON that round-trips, and JUnit XML that CI systems can read."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from konduktor.burnin.isolation import plan_pair_tests
from konduktor.burnin.report import render_json, render_junit, render_table, report_from_dict, report_to_dict
from konduktor.burnin.results import BurnInReport, CheckResult, NodeVerdict, Verdict
from konduktor.burnin.tiers import Step, Tier, options_for_tier
from konduktor.burnin.verdict import NodeEvidence, apply_isolation, judge_pair, judge_run, pair_outcomes

DATA = Path(__file__).parent / "data" / "burnin"
STANDARD = options_for_tier(Tier.STANDARD)


def raw(name: str) -> str:
    return (DATA / name).read_text()


def logs(
    passive: str = "passive_h100_healthy.txt",
    matmul: str = "matmul_h100_pass.txt",
    nccl: str | None = "nccl_h100_nvls_pass.txt",
) -> dict[str, str | None]:
    return {
        Step.PASSIVE.value: raw(passive),
        Step.DCGM.value: raw("dcgm_l2_pass.txt"),
        Step.MATMUL.value: raw(matmul),
        Step.NCCL.value: raw(nccl) if nccl else None,
    }


@pytest.fixture(scope="module")
def report() -> BurnInReport:
    evidence = [
        NodeEvidence("gpu-node-01", "NVIDIA-H100-80GB-HBM3", 8, logs()),
        NodeEvidence("gpu-node-02", "NVIDIA-H100-80GB-HBM3", 8, logs(matmul="matmul_h100_slow_gpu.txt")),
        NodeEvidence("gpu-node-03", "NVIDIA-H100-80GB-HBM3", 8, logs(nccl=None)),
        NodeEvidence("gpu-node-04", "NVIDIA-RTX-PRO-6000", 8, logs()),
    ]
    nodes = judge_run(evidence, STANDARD)
    pairs = [
        judge_pair(("gpu-node-01", "gpu-node-04"), raw("allreduce_pair_pass.txt"), expected_ranks=16),
        judge_pair(("gpu-node-02", "gpu-node-03"), raw("allreduce_pair_slow.txt"), expected_ranks=16),
    ]
    plan = plan_pair_tests([n.node for n in nodes], pair_outcomes(pairs))
    return BurnInReport(
        "20251103-140000", Tier.STANDARD.value, "konduktor-burnin@1", apply_isolation(nodes, plan, pairs), tuple(pairs)
    )


def test_table_has_a_row_per_node_and_the_reasons(report: BurnInReport) -> None:
    table = render_table(report)
    lines = table.splitlines()
    assert lines[0].split() == ["NODE", "MODEL", "PASSIVE", "DCGM", "MATMUL", "NCCL-1N", "NCCL-PAIR", "VERDICT"]
    rows = {line.split()[0]: line for line in lines[1:5]}
    assert rows["gpu-node-01"].rstrip().endswith("PASS")
    assert "PASS min 773 / med 780 TFLOPS (78%)" in rows["gpu-node-01"]
    assert rows["gpu-node-02"].endswith("FAIL (quarantine)")
    assert "ERROR no log" in rows["gpu-node-03"]
    assert rows["gpu-node-04"].split()[1] == "NVIDIA-RTX-PRO-6000"
    assert "Findings:" in lines
    assert "  gpu-node-02 matmul_tflops FAIL: GPU3: 612 TFLOPS is 62% of the 989 TFLOPS peak" in table
    assert "gpu-node-04 matmul_tflops SKIPPED: GPU model not in the thresholds table" in table
    assert "gpu-node-02+gpu-node-03 nccl_pair FAIL: busbw 122 GB/s" in table


def test_json_round_trips_with_verdicts_as_words(report: BurnInReport) -> None:
    data = json.loads(render_json(report))
    assert data == report_to_dict(report)
    assert data["run_id"] == "20251103-140000" and data["verdict"] == "FAIL"
    node = data["nodes"][1]
    assert (node["node"], node["verdict"], node["quarantine"]) == ("gpu-node-02", "FAIL", True)
    tflops = next(c for c in node["checks"] if c["check"] == "matmul_tflops")
    gpu3 = next(e for e in tflops["evidence"] if e["gpu"] == 3)
    assert gpu3 == {
        "metric": "tflops_min",
        "measured": 612.4,
        "threshold": pytest.approx(692.3),
        "unit": "TFLOPS",
        "fraction_of_peak": 0.6192,
        "gpu": 3,
    }
    assert data["pairs"][1]["nodes"] == ["gpu-node-02", "gpu-node-03"]
    # What a run records in the cluster reads back as the same report (`burnin show`).
    assert report_from_dict(data) == report


def test_junit_is_well_formed_with_one_testcase_per_node_and_check(report: BurnInReport) -> None:
    root = ET.fromstring(render_junit(report))
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04", "fabric"]
    for node in report.nodes:
        cases = suites[node.node].findall("testcase")
        assert [c.get("name") for c in cases] == [c.check for c in node.checks]
        assert {c.get("classname") for c in cases} == {f"burnin.{node.node}"}
    slow = suites["gpu-node-02"].find("testcase[@name='matmul_tflops']")
    assert slow is not None
    failure = slow.find("failure")
    assert failure is not None and failure.get("message", "").startswith("GPU3: 612 TFLOPS")
    properties = {p.get("name"): p.get("value") for p in slow.iter("property")}
    assert properties["tflops_min[gpu3]"] == "612.4 (goal 692.3 TFLOPS)"
    missing = suites["gpu-node-03"].find("testcase[@name='nccl_allreduce']")
    assert missing is not None and missing.find("error") is not None
    skipped = suites["gpu-node-04"].find("testcase[@name='matmul_tflops']")
    assert skipped is not None and skipped.find("skipped") is not None
    warned = suites["gpu-node-01"].find("testcase[@name='retired_pages']")
    assert warned is not None and warned.find("skipped") is not None


def test_junit_counts_add_up(report: BurnInReport) -> None:
    root = ET.fromstring(render_junit(report))
    cases = list(root.iter("testcase"))
    assert int(root.get("tests", "-1")) == len(cases)
    for kind, attribute in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        assert int(root.get(attribute, "-1")) == sum(c.find(kind) is not None for c in cases)
        for suite in root.findall("testsuite"):
            assert int(suite.get(attribute, "-1")) == sum(c.find(kind) is not None for c in suite.findall("testcase"))


def test_junit_escapes_what_tools_print() -> None:
    nasty = 'cuMemAlloc <0x7f> & "quoted" \x1b[0m'
    node = NodeVerdict(
        "gpu-node-09",
        None,
        None,
        Verdict.FAIL,
        (CheckResult("dcgm_diag", Verdict.FAIL, "dcgm-diag", "failed", (nasty,)),),
    )
    xml = render_junit(BurnInReport("r", "quick", "t", (node,)))
    failure = ET.fromstring(xml).find(".//failure")
    assert failure is not None and failure.get("message") == 'cuMemAlloc <0x7f> & "quoted" \\x1b[0m'


def test_warn_is_a_passing_testcase_with_its_reason_in_system_out() -> None:
    node = NodeVerdict(
        "gpu-node-09",
        None,
        None,
        Verdict.WARN,
        (CheckResult("clock_events", Verdict.WARN, "passive", "throttling", ("GPU2: hw_slowdown",)),),
    )
    case = ET.fromstring(render_junit(BurnInReport("r", "quick", "t", (node,)))).find(".//testcase")
    assert case is not None
    assert [child.tag for child in case] == ["system-out"]
    assert case.findtext("system-out") == "WARN: GPU2: hw_slowdown"

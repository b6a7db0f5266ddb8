"""Triage's judgement: the job's nodes with a node fault in its time window are the culprits."""

from __future__ import annotations

import pytest

from konduktor.burnin.results import BurnInReport, CheckResult, NodeVerdict, PairVerdict, Verdict
from konduktor.health.classify import DcgmSample
from konduktor.health.settings import HealthSettings, PrometheusSettings
from konduktor.health.signals import DcgmSignal, LogLine
from konduktor.health.triage import (
    LATE_SECONDS,
    TABLE_WIDTH,
    NodeRecord,
    Sighting,
    burnin_sightings,
    culprit_findings,
    dcgm_sightings,
    judge,
    kernel_sightings,
    pair_culprits,
    render_table,
    with_sightings,
    wrap_note,
)
from konduktor.health.triage_sources import SOURCES_HINT, kernel_files_note, sources_hint

START, END = 1_750_000_000.0, 1_750_003_600.0


def node(name: str, *signals: Sighting) -> NodeRecord:
    return NodeRecord(name, (f"{name}-pod",), signals)


def fault(at: float | None, reason: str = "Xid79") -> Sighting:
    return Sighting(at, "quarantine", reason, f"{reason} GPU_HAS_FALLEN_OFF_THE_BUS", fault=True)


@pytest.mark.parametrize(
    ("at", "blamed"),
    [
        (START + 60, True),  # during the job
        (END + LATE_SECONDS - 1, True),  # reported after the job died of it
        (END + LATE_SECONDS + 1, False),  # much later: another story
        (START - 60, False),  # before the job: it cannot have run there through a quarantine
        (START - 1, False),  # the second before it started
        (None, True),  # an undated condition counts
    ],
)
def test_a_node_fault_in_the_window_names_the_culprit(at: float | None, blamed: bool) -> None:
    found = judge("train", "team-a", START, END, [node("gpu-1", fault(at)), node("gpu-0")])
    assert found.culprits == (("gpu-1",) if blamed else ())
    assert [n.node for n in found.nodes] == ["gpu-0", "gpu-1"]


def test_a_fault_stamped_in_the_jobs_first_second_is_in_its_window() -> None:
    # The job's start read to the microsecond (the scheduler's Event), the quarantine in whole seconds, rounded down.
    scheduled = START + 0.479
    found = judge("train", "team-a", scheduled, END, [node("gpu-1", fault(START))])
    assert found.culprits == ("gpu-1",) and found.evidence(found.nodes[0])


def test_an_application_fault_is_shown_but_never_blamed() -> None:
    application = Sighting(START + 5, "event", "Xid13", "Graphics SM Warp Exception", fault=False)
    found = judge("train", "team-a", START, END, [node("gpu-0", application)])
    assert found.culprits == ()
    (row,) = found.rows()
    assert row["verdict"] == "clean" and "Xid13" in row["evidence"]
    assert found.as_json()["nodes"][0]["evidence"][0]["fault"] is False


def test_the_report_carries_the_evidence_and_the_window() -> None:
    found = judge("train", "team-a", START, END, [node("gpu-1", fault(START + 60))])
    report = found.as_json()
    assert report["culprits"] == ["gpu-1"]
    assert report["window"] == {"start": "2025-06-15T15:06:40Z", "end": "2025-06-15T16:06:40Z"}
    (row,) = found.rows()
    assert row["verdict"] == "CULPRIT" and "2025-06-15T15:07:40Z quarantine Xid79" in row["evidence"]


def test_the_controllers_three_records_of_one_quarantine_are_shown_once() -> None:
    """Its Event, the GPUHealthy condition and the quarantine annotation say one fact: the Event is shown (it
    carries the evidence); without it (Events expire) the condition; other facts on the node stay."""
    at = START + 60
    records = (
        fault(at),
        Sighting(at, "condition", "Xid79", "GPU_HAS_FALLEN_OFF_THE_BUS: ...; recommended action: reset", fault=True),
        Sighting(at, "event", "Xid79", "quarantined (NoSchedule): GPU_HAS_FALLEN_OFF_THE_BUS; evidence: NVRM", True),
        Sighting(at + 5, "event", "Xid13", "Graphics SM Warp Exception", fault=False),
    )
    found = judge("train", "team-a", START, END, [node("gpu-1", *records)])
    (row,) = found.rows()
    assert row["evidence"].count("Xid79") == 1 and "quarantined (NoSchedule)" in row["evidence"]
    assert [(e["source"], e["reason"]) for e in found.as_json()["nodes"][0]["evidence"]] == [
        ("event", "Xid79"),
        ("event", "Xid13"),
    ]
    expired = judge("train", "team-a", START, END, [node("gpu-1", *records[:2])])
    assert [e["source"] for e in expired.as_json()["nodes"][0]["evidence"]] == ["condition"]
    assert expired.culprits == ("gpu-1",)


def node_verdict(name: str, verdict: Verdict) -> NodeVerdict:
    check = CheckResult("matmul_sdc", verdict, "matmul", reasons=("GPU7: product differs from the fleet",))
    return NodeVerdict(name, "NVIDIA-H100-80GB-HBM3", "H100-SXM", verdict, (check,))


def pair(a: str, b: str, verdict: Verdict) -> PairVerdict:
    return PairVerdict((a, b), CheckResult("nccl_pair", verdict, "nccl-pair"))


def test_a_burnin_fail_is_blamed_whenever_it_ran_and_a_pass_is_shown() -> None:
    """A burn-in run after the job (long after its window) still blames the node it FAILs; the others are shown."""
    report = BurnInReport(
        "kb-1", "standard", "v1", (node_verdict("gpu-0", Verdict.PASS), node_verdict("gpu-1", Verdict.FAIL))
    )
    before = judge("train", "team-a", START, END, [node("gpu-0"), node("gpu-1")])
    found = with_sightings(before, burnin_sightings(report))
    assert before.culprits == () and found.culprits == ("gpu-1",)
    evidence = {n["node"]: n["evidence"] for n in found.as_json()["nodes"]}
    assert [(e["source"], e["reason"], e["fault"]) for e in evidence["gpu-0"]] == [("burnin", "BurnInPass", False)]
    [failed] = evidence["gpu-1"]
    assert failed["reason"] == "BurnInFail" and "standard burn-in kb-1: FAIL: matmul_sdc" in failed["message"]


@pytest.mark.parametrize(
    ("pairs", "culprits"),
    [
        # A ring of four: gpu-1 fails with both neighbours, which pass with their other neighbours.
        (
            [("gpu-0", "gpu-1", "F"), ("gpu-1", "gpu-2", "F"), ("gpu-2", "gpu-3", "P"), ("gpu-3", "gpu-0", "P")],
            {"gpu-1": ["gpu-0", "gpu-2"]},
        ),
        # One failed pair alone cannot say which of its two nodes is bad.
        ([("gpu-0", "gpu-1", "F")], {}),
        # Every pair failed: the fabric, not a node.
        ([("gpu-0", "gpu-1", "F"), ("gpu-1", "gpu-2", "F"), ("gpu-2", "gpu-0", "F")], {}),
        # An ERROR clears nobody.
        ([("gpu-0", "gpu-1", "F"), ("gpu-1", "gpu-2", "F"), ("gpu-2", "gpu-3", "E"), ("gpu-3", "gpu-0", "P")], {}),
    ],
)
def test_node_pair_bisection_blames_the_node_in_every_failed_pair(
    pairs: list[tuple[str, str, str]], culprits: dict[str, list[str]]
) -> None:
    verdicts = {"F": Verdict.FAIL, "P": Verdict.PASS, "E": Verdict.ERROR}
    assert pair_culprits([pair(a, b, verdicts[v]) for a, b, v in pairs]) == culprits


def test_kernel_lines_blame_a_node_fault_and_show_an_application_fault() -> None:
    lines = [
        LogLine(
            "gpu-0",
            1_750_000_100_000_000_000,
            "[1.2] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
        ),
        LogLine("gpu-1", 1_750_000_200_000_000_000, "[1.3] NVRM: Xid (PCI:0000:3b:00): 13, pid=7, Graphics Exception"),
        LogLine("gpu-1", 1_750_000_300_000_000_000, "[1.4] eth0: link up"),
    ]
    found = kernel_sightings(lines, HealthSettings())
    assert [(s.reason, s.fault, s.at) for s in found["gpu-0"]] == [("Xid79", True, 1_750_000_100.0)]
    assert [(s.source, s.reason, s.fault) for s in found["gpu-1"]] == [("kernel-log", "Xid13", False)]
    assert "GPU_HAS_FALLEN_OFF_THE_BUS" in found["gpu-0"][0].message
    judged = judge("train", "team-a", START, END, [node("gpu-0", *found["gpu-0"]), node("gpu-1", *found["gpu-1"])])
    assert judged.culprits == ("gpu-0",)


XID_79_LINE = "[1.2] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."


def dcgm(node: str, metric: str, value: float, since: float) -> DcgmSignal:
    return DcgmSignal(DcgmSample(node, "3", metric, value), since, "counter")


def test_dcgm_faults_blame_by_the_controllers_rules() -> None:
    """A double-bit ECC error blames its node; thermal throttling is shown only; DCGM's Xid gauge is judged by the
    Xid catalog."""
    found = dcgm_sightings(
        [
            dcgm("gpu-0", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2, START + 30),
            dcgm("gpu-1", "DCGM_FI_DEV_THERMAL_VIOLATION", 1500, START + 40),
            dcgm("gpu-2", "DCGM_FI_DEV_XID_ERRORS", 79, START + 50),
        ],
        HealthSettings(),
    )
    assert [(s.source, s.reason, s.fault, s.at) for s in found["gpu-0"]] == [
        ("dcgm", "EccDoubleBitError", True, START + 30)
    ]
    assert 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="3"} = 2' in found["gpu-0"][0].message
    assert [(s.reason, s.fault) for s in found["gpu-1"]] == [("ThermalViolation", False)]
    assert [(s.reason, s.fault) for s in found["gpu-2"]] == [("Xid79", True)]
    judged = judge("train", "team-a", START, END, [node(n, *found[n]) for n in found])
    assert judged.culprits == ("gpu-0", "gpu-2")


def test_a_kernel_xid_needs_dcgm_where_the_controller_reads_it() -> None:
    """With Prometheus in the settings a log line alone (forgeable) blames nothing, as the controller does not act
    on it; DCGM's gauge showing the same code on the node confirms it."""
    settings = HealthSettings(prometheus=PrometheusSettings(url="http://prometheus:9090"))
    lines = [LogLine(n, 1_750_000_100_000_000_000, XID_79_LINE) for n in ("gpu-0", "gpu-1")]
    confirming = dcgm_sightings([dcgm("gpu-1", "DCGM_FI_DEV_XID_ERRORS", 79, START + 90)], settings)
    found = kernel_sightings(lines, settings, confirming)
    assert [(s.reason, s.fault) for s in found["gpu-0"]] == [("Xid79", False)]
    assert "not confirmed by DCGM_FI_DEV_XID_ERRORS" in (found["gpu-0"][0].finding or pytest.fail()).meaning
    assert [(s.reason, s.fault) for s in found["gpu-1"]] == [("Xid79", True)]
    assert [s.fault for s in kernel_sightings(lines, HealthSettings())["gpu-0"]] == [True]  # no DCGM read


def test_the_quarantine_acts_on_each_culprits_first_fault_and_leaves_the_rest() -> None:
    """One finding per culprit, its earliest in the window (a burn-in's last); nothing for a clean node, a node
    in quarantine already, or evidence from before the node last passed a requalification burn-in."""
    lines = [LogLine(n, int((START + 100) * 1e9), XID_79_LINE) for n in ("gpu-0", "gpu-2", "gpu-3")]
    kernel = kernel_sightings(lines, HealthSettings())
    report = BurnInReport("kb-1", "standard", "v1", (node_verdict("gpu-0", Verdict.FAIL),))
    burnin = burnin_sightings(report)
    nodes = [
        node("gpu-0", *burnin["gpu-0"], *kernel["gpu-0"]),
        node("gpu-1"),
        node("gpu-2", fault(START + 200), *kernel["gpu-2"]),
        NodeRecord("gpu-3", ("gpu-3-pod",), tuple(kernel["gpu-3"]), requalified_at=START + 150),
    ]
    found = judge("train", "team-a", START, END, nodes)
    assert found.culprits == ("gpu-0", "gpu-2", "gpu-3")
    assert [(f.node, f.reason) for f in culprit_findings(found)] == [("gpu-0", "Xid79")]
    burnt = judge("train", "team-a", START, END, [node("gpu-0", *burnin["gpu-0"])])
    assert [(f.node, f.reason) for f in culprit_findings(burnt)] == [("gpu-0", "BurnInFailed")]


# --- what triage prints ---------------------------------------------------------------------------------------------

EVENT = (
    "quarantined (NoSchedule): GPU_HAS_FALLEN_OFF_THE_BUS (GPU has fallen off the bus) on 0000:48:00.0; "
    "recommended action: reboot; evidence: [   93.436159] NVRM: Xid (PCI:0000:48:00.0): 79, pid=0, name=python, "
    "GPU has fallen off the bus."
)


def test_the_table_fits_100_columns_each_signal_on_its_own_lines_never_cut() -> None:
    lost = "also: GPU_LOST (GPUs missing from allocatable); recommended action: reboot; evidence: allocatable 9 < 10"
    culprit = NodeRecord(
        "gpu-h100-0000",
        tuple(f"train-multi-node-worker-{i}-abcde" for i in range(3)),
        (Sighting(START + 60, "event", "Xid79", EVENT, True), Sighting(START + 120, "event", "GPULost", lost, True)),
    )
    found = judge("train", "team-a", START, END, [culprit, NodeRecord("gpu-h100-0001", ("train-0-b",), ())])
    table = render_table(found)
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= TABLE_WIDTH
    assert lines[0].split() == ["NODE", "VERDICT", "PODS", "EVIDENCE"]
    evidence_at = lines[0].index("EVIDENCE")
    # Every signal starts a line of its own in the evidence column; its continued lines are indented under it.
    starts = [line[evidence_at:] for line in lines[1:] if line[evidence_at : evidence_at + 1].isdigit()]
    assert [s.split()[1:3] for s in starts] == [["event", "Xid79:"], ["event", "GPULost:"]]
    # Nothing is cut: the words of the evidence and of the pods are all there, in order.
    shown = " ".join(line[evidence_at:].strip() for line in lines[1:])
    assert " ".join(EVENT.split()) in " ".join(shown.split())
    pods_at = lines[0].index("PODS")
    pods = " ".join(line[pods_at:evidence_at].strip() for line in lines[1:])
    assert all(f"train-multi-node-worker-{i}-abcde" in pods for i in range(3))
    assert lines[1].startswith("gpu-h100-0000  CULPRIT  ")
    clean = next(line for line in lines if line.startswith("gpu-h100-0001"))
    assert clean.split() == ["gpu-h100-0001", "clean", "train-0-b", "-"]


def test_the_notes_say_where_kernel_logs_were_read_and_how_to_point_triage_at_loki() -> None:
    files = HealthSettings.model_validate({"kernel_log_files": {"directory": "/state/kernel-logs"}})
    note = kernel_files_note(files)
    assert note.startswith("kernel logs: read by the health controller from its files (/state/kernel-logs/<node>.log")
    assert "not read" not in note
    assert kernel_files_note(HealthSettings()) == "not read: kernel logs: no Loki in the health controller's settings"
    assert sources_hint(files) == [SOURCES_HINT] and "--loki URL and --prometheus URL" in SOURCES_HINT
    wired = HealthSettings.model_validate(
        {
            "loki": {"url": "http://loki:3100", "query": '{job="kernel"}', "node_label": "node"},
            "prometheus": {"url": "http://prometheus:9090"},
        }
    )
    assert sources_hint(wired) == []
    wrapped = wrap_note(SOURCES_HINT).splitlines()
    assert len(wrapped) > 1 and max(map(len, wrapped)) <= TABLE_WIDTH
    assert all(line.startswith("    ") for line in wrapped[1:])
    assert " ".join(w.strip() for w in wrapped) == SOURCES_HINT

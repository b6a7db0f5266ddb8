"""Triage's judgement: the job's nodes with a node fault in its time window are the culprits."""

from __future__ import annotations

import pytest

from konduktor.controller.triage import LATE_SECONDS, NodeRecord, Sighting, judge

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
        (None, True),  # an undated condition counts
    ],
)
def test_a_node_fault_in_the_window_names_the_culprit(at: float | None, blamed: bool) -> None:
    found = judge("train", "team-a", START, END, [node("gpu-1", fault(at)), node("gpu-0")])
    assert found.culprits == (("gpu-1",) if blamed else ())
    assert [n.node for n in found.nodes] == ["gpu-0", "gpu-1"]


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

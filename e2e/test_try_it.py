"""docs/try-it.md, step by step, on a fresh simulated cluster: `up`, a job in team-a's queue, an Xid 79 on its node;
the sim's own health controller (konduktor-core's, run by the sim with the chart's settings and its service
account) quarantines the node, Kueue requeues the job onto a healthy node and its owner gets an Event; `nodes`,
`konduktor why` (as a team member, with the publisher's fresh capacity) and `triage` say so; a burn-in by hand fails
with the fault there and names the failing checks; once the fault is cleared the controller's requalification
burn-in passes and puts the node back, `nodes` showing one state after another.

Each step's output is checked against what the page says it prints, not only its exit code. The machine may be
loaded: every wait is on a condition, and what is checked of times is their order, never their values.

The one departure from the walk-through: shorter intervals through values (a 2 s publication cycle and a 5 s rest
before requalification), so that the test waits seconds where a person waits a minute.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim_fixture import EXAMPLE, health_taints, node

from konduktor.cli.main import main
from konduktor.cli.team import main as team_main
from konduktor.kube.client import Kube
from konduktor.paths import product_dir
from konduktor.queueing.cluster import published_capacity
from konduktor.sim.cluster import SimCluster
from konduktor.sim.workloads import RUN_FOR, is_true, workload_of
from konduktor.vocabulary import QUARANTINE_REASON, REQUALIFICATION_RESULT
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
NAME = "konduktor-try-it"  # a fresh cluster of its own, as after `scripts/up` on a new machine
TEAM = "team-a"
JOB = "train-single-node"  # examples/jobs/single-node.yaml
MEMBER = ["--as", "alice", "--as-group", TEAM]  # `why` as a member of team-a reads it
Entry = Callable[[list[str]], int]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    os.environ.pop("KUBECONFIG", None)
    fast = tmp_path_factory.mktemp("values") / "fast.yaml"
    fast.write_text(
        yaml.safe_dump(
            {
                "capacityPublisher": {"heartbeatSeconds": 2, "settleSeconds": 1},
                "controller": {"settings": {"cooldown_seconds": 5}},
            }
        )
    )
    try:
        assert main(["up", str(EXAMPLE), "--sim", NAME, "-f", str(fast)]) == 0
        yield SimCluster(NAME).kubeconfig
    finally:
        main(["sim", "down", "--name", NAME])


def job_pods(kube: Kube) -> list[dict[str, Any]]:
    return [
        p
        for p in kube.list("v1", "Pod", TEAM, label_selector=f"batch.kubernetes.io/job-name={JOB}")
        if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def owner_events(kube: Kube) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.list("v1", "Event", TEAM)
        if e.get("source", {}).get("component") == "konduktor-health" and e["involvedObject"]["name"] == JOB
    ]


def quarantined_in_capacity(kube: Kube, name: str) -> bool:
    capacity = published_capacity(kube, TEAM)
    return capacity is not None and capacity.quarantine_of(name) is not None


def run(capsys: pytest.CaptureFixture[str], entry: Entry, *args: str) -> tuple[int, str, str]:
    """One command as typed: its exit code, stdout and stderr."""
    capsys.readouterr()
    code = entry(list(args))
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def table_row(table: str, name: str) -> str:
    """The row of `name` in a table whose last column wraps onto indented lines, as one line."""
    lines = table.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(f"{name} "))
    rest = lines[first + 1 :]
    more = next((i for i, line in enumerate(rest) if not line.startswith(" ")), len(rest))
    return " ".join(" ".join(lines[first : first + 1 + more]).split())


def flat(text: str) -> str:
    return " ".join(text.split())


def nodes_json(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    code, out, err = run(capsys, main, "nodes", "-o", "json")
    assert code == 0, err
    return {row["node"]: row for row in json.loads(out)["nodes"]}


@dataclass(frozen=True)
class Requeued:
    """The job after its requeue: the node it was taken off, its pod there, and where it runs now."""

    faulty: str
    first_pod: str
    elsewhere: str
    new_pod: str


@pytest.mark.timeout(1500)
def test_a_fault_on_a_jobs_node_is_healed_by_the_platforms_own_controller(
    cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster))
    kube = Kube(cluster)
    # konduktor-core's processes run: `sim status` shows them.
    code, status, _ = run(capsys, main, "sim", "status", "--name", NAME)
    assert code == 0 and "health-controller" in status and "capacity-publisher" in status and "stopped" not in status
    first = a_job_in_team_as_queue(kube, tmp_path, capsys)  # 1.
    faulty = first["spec"]["nodeName"]
    code, out, _ = run(capsys, main, "sim", "fault", faulty, "--kind", "xid79", "--gpu", "3", "--name", NAME)  # 2.
    assert code == 0 and "allocatable nvidia.com/gpu: 9 of 10" in out, out
    requeued = healed_by_the_controller(kube, first)  # 3.
    nodes_say_it_waits_for_its_gpu(capsys, faulty)
    why_says_when_where_and_why(kube, capsys, requeued)
    triage_names_the_node_and_its_sources(capsys, requeued)
    a_burnin_by_hand_fails_and_names_the_checks(kube, capsys, faulty)  # 4.
    the_requalification_is_one_state_until_its_verdict(kube, capsys, faulty)
    kube.close()


def a_job_in_team_as_queue(kube: Kube, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """1. A job in team-a's queue, its pod asking kwok to run 30 minutes: admitted, and its pod runs."""
    job = yaml.safe_load((product_dir("examples") / "jobs" / "single-node.yaml").read_text())
    job["spec"]["template"].setdefault("metadata", {})["annotations"] = {RUN_FOR: "30m"}
    manifest = tmp_path / "train.yaml"
    manifest.write_text(yaml.safe_dump(job))
    code, out, err = run(capsys, team_main, "submit", str(manifest), "-n", TEAM)
    assert code == 0 and out == f"konduktor why {JOB} -n {TEAM}\n", (out, err)
    wait_until("the job's pod to run", lambda: len(job_pods(kube)) == 1, timeout=120)
    code, out, _ = run(capsys, team_main, "why", JOB, "-n", TEAM)
    assert code == 0 and out.startswith(f"{JOB} ({TEAM}): admitted\n"), out
    assert "requeued" not in out  # nothing has happened to it yet
    (first,) = job_pods(kube)
    return first


def healed_by_the_controller(kube: Kube, first: dict[str, Any]) -> Requeued:
    """3. The sim's controller quarantines the node, the job is requeued and runs again elsewhere, its owner is told."""
    faulty = first["spec"]["nodeName"]
    wait_until("the node to be quarantined", lambda: bool(health_taints(node(kube, faulty))), timeout=120)
    assert node(kube, faulty)["metadata"]["annotations"][QUARANTINE_REASON].startswith("Xid79")

    def moved() -> bool:
        pods = job_pods(kube)
        return len(pods) == 1 and pods[0]["metadata"]["uid"] != first["metadata"]["uid"]

    wait_until("the job to run again on another node", moved, timeout=180)
    (second,) = job_pods(kube)
    assert second["spec"]["nodeName"] != faulty
    workload = workload_of(kube, TEAM, JOB)
    assert workload is not None and is_true(workload, "Requeued") and is_true(workload, "Admitted")
    wait_until("the owner's Event", lambda: bool(owner_events(kube)), timeout=60)
    (event,) = owner_events(kube)
    assert event["reason"] == "RequeuedForNodeHealth" and f"GPU node {faulty} was quarantined" in event["message"]
    return Requeued(faulty, first["metadata"]["name"], second["spec"]["nodeName"], second["metadata"]["name"])


def nodes_say_it_waits_for_its_gpu(capsys: pytest.CaptureFixture[str], faulty: str) -> None:
    """`nodes`: the node quarantined by the controller for the Xid, waiting for its GPU to be back."""
    code, table, _ = run(capsys, main, "nodes")
    assert code == 0
    row = table_row(table, faulty)
    assert row.split()[1] == "quarantined" and "konduktor-health" in row and "Xid79" in row, table
    waiting = "waiting: 1 of 10 GPUs missing from allocatable; requalifies when the device plugin reports 10"
    assert f"next: {faulty}: {waiting}" in flat(table), table
    assert nodes_json(capsys)[faulty]["next_step"] == waiting


def why_says_when_where_and_why(kube: Kube, capsys: pytest.CaptureFixture[str], job: Requeued) -> None:
    """`konduktor why`, as a team member: requeued at T off the node for the Xid, where it runs now, the capacity."""
    wait_until("the publisher to publish the quarantine", lambda: quarantined_in_capacity(kube, job.faulty), timeout=60)
    code, out, err = run(capsys, team_main, "why", JOB, "-n", TEAM, *MEMBER, "-o", "json")
    assert code == 0, err
    told = json.loads(out)
    assert told["state"] == "admitted"
    (requeue,) = told["requeues"]
    assert requeue["node"] == job.faulty and requeue["fault"].startswith("Xid 79, GPU has fallen off the bus")
    assert requeue["pods"] == [job.first_pod]
    workload = workload_of(kube, TEAM, JOB)
    assert workload is not None
    readmitted = next(c for c in workload["status"]["conditions"] if c["type"] == "Admitted")
    assert requeue["quarantinedAt"] <= requeue["at"] <= readmitted["lastTransitionTime"]  # the order of events
    assert told["runsOn"] == [{"pod": job.new_pod, "node": job.elsewhere}]
    (h100,) = told["capacity"]
    assert job.faulty in [q["node"] for q in h100["quarantined"]] and h100["inService"] < h100["gpus"]
    kinds = [r["kind"] for r in told["reasons"]]
    assert kinds[:5] == ["admitted", "requeued", "runs-on", "node-out", "capacity-now"], kinds
    code, out, _ = run(capsys, team_main, "why", JOB, "-n", TEAM, *MEMBER)
    assert code == 0
    lines = out.splitlines()

    def said(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    assert (
        said(f"from node {job.faulty}: the health controller quarantined the node")
        < said(f"runs now on node {job.elsewhere} (pod {job.new_pod})")
        < said(f"node {job.faulty} stays quarantined")
        < said("capacity now")
    ), out
    assert "Xid 79, GPU has fallen off the bus" in lines[said("requeued at")]


def triage_names_the_node_and_its_sources(capsys: pytest.CaptureFixture[str], job: Requeued) -> None:
    """`triage`: the node the job ran on before its requeue is the culprit, within 100 columns; where the kernel
    logs were read is said, and how to point triage at Loki and Prometheus."""
    code, out, err = run(capsys, main, "triage", JOB, "-n", TEAM)
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 100, out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:] if line[:1].strip()}
    assert rows == {job.faulty: "CULPRIT", job.elsewhere: "clean"}, out
    assert "event Xid79: quarantined" in table_row(out, job.faulty), out
    assert "kernel logs: read by the health controller from its files" in flat(err), err
    assert "not read: kernel logs" not in err and "hint: " in err


def a_burnin_by_hand_fails_and_names_the_checks(kube: Kube, capsys: pytest.CaptureFixture[str], faulty: str) -> None:
    """4. With the GPU still missing the controller starts no burn-in; one by hand fails and says which checks did."""
    code, out, err = run(capsys, main, "nodes", "requalify", faulty)
    assert code == 1 and out == f"{faulty}\tFAIL\n", (out, err)
    verdict = next(line for line in err.splitlines() if line.startswith(f"requalify {faulty}: FAIL ("))
    assert "kernel_log" in verdict and verdict.endswith("; stays quarantined"), err
    assert health_taints(node(kube, faulty))


def the_requalification_is_one_state_until_its_verdict(
    kube: Kube, capsys: pytest.CaptureFixture[str], faulty: str
) -> None:
    """The fault cleared, the controller's requalification burn-in passes and puts the node back; `nodes` shows it
    quarantined while it rests, then requalifying until the verdict, then healthy: never back to quarantined."""
    code, out, _ = run(capsys, main, "sim", "fault", faulty, "--clear", "--name", NAME)
    assert code == 0 and "allocatable nvidia.com/gpu: 10 of 10" in out, out
    seen: list[tuple[str, str]] = []

    def healthy_again() -> bool:
        now = nodes_json(capsys)[faulty]
        seen.append((now["state"], now["next_step"] or ""))
        return bool(now["state"] == "healthy")

    wait_until("the requalification to release the node", healthy_again, timeout=600, interval=0.5)
    states = [state for i, (state, _) in enumerate(seen) if i == 0 or seen[i - 1][0] != state]
    assert states in (["quarantined", "requalifying", "healthy"], ["requalifying", "healthy"]), seen
    resting = [step for state, step in seen if state == "quarantined"]
    assert all(step.startswith("requalification burn-in ") for step in resting), seen
    started = ("requalification burn-in running", "requalification burn-in finished")
    assert all(step.startswith(started) for state, step in seen if state == "requalifying"), seen
    assert node(kube, faulty)["metadata"]["annotations"][REQUALIFICATION_RESULT].startswith("PASS")
    code, table, _ = run(capsys, main, "nodes")
    row = table_row(table, faulty)
    assert code == 0 and row.split()[1] == "healthy" and "RequalificationPassed" in row and " PASS " in row, table

"""docs/try-it.md, step by step, on a fresh simulated cluster: `up`, a job in team-a's queue, an Xid 79 on its node;
the sim's own health controller (konduktor-core's, run by the sim with the chart's settings and its service
account) quarantines the node, Kueue requeues the job onto a healthy node and its owner gets an Event; `nodes`,
`konduktor why` (with the publisher's fresh capacity) and `triage` show it; once the fault is cleared the
controller's requalification burn-in passes and puts the node back.

The one departure from the walk-through: shorter intervals through values (a 2 s publication cycle and a 5 s rest
before requalification), so that the test waits seconds where a person waits a minute.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
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
from konduktor.vocabulary import QUARANTINE_REASON, REQUALIFICATION_RESULT, REQUALIFIED_AT
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
NAME = "konduktor-try-it"  # a fresh cluster of its own, as after `scripts/up` on a new machine
TEAM = "team-a"
JOB = "train-single-node"  # examples/jobs/single-node.yaml


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    os.environ.pop("KUBECONFIG", None)
    fast = tmp_path_factory.mktemp("values") / "fast.yaml"
    fast.write_text(
        yaml.safe_dump({"capacityPublisher": {"everySeconds": 2}, "controller": {"settings": {"cooldown_seconds": 5}}})
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
    return capacity is not None and any(n.name == name and n.quarantine is not None for n in capacity.nodes)


@pytest.mark.timeout(1500)
def test_a_fault_on_a_jobs_node_is_healed_by_the_platforms_own_controller(
    cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster))
    kube = Kube(cluster)
    sim = ["--name", NAME]
    # konduktor-core's processes run: `sim status` shows them.
    capsys.readouterr()
    assert main(["sim", "status", *sim]) == 0
    status = capsys.readouterr().out
    assert "health-controller" in status and "capacity-publisher" in status and "stopped" not in status

    # 1. A job in team-a's queue, its pod asking kwok to run 30 minutes.
    job = yaml.safe_load((product_dir("examples") / "jobs" / "single-node.yaml").read_text())
    job["spec"]["template"].setdefault("metadata", {})["annotations"] = {RUN_FOR: "30m"}
    manifest = tmp_path / "train.yaml"
    manifest.write_text(yaml.safe_dump(job))
    assert team_main(["submit", str(manifest), "-n", TEAM]) == 0
    wait_until("the job's pod to run", lambda: len(job_pods(kube)) == 1, timeout=120)
    (first,) = job_pods(kube)
    faulty = first["spec"]["nodeName"]

    # 2. An Xid 79 on its node.
    assert main(["sim", "fault", faulty, "--kind", "xid79", "--gpu", "3", *sim]) == 0

    # 3. The sim's controller quarantines the node, the job is requeued and runs again elsewhere, its owner is told.
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

    # 4. What the admin and the team member see.
    capsys.readouterr()
    assert main(["nodes"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(faulty))
    assert "quarantined" in row and "Xid79" in row
    wait_until("the publisher to publish the quarantine", lambda: quarantined_in_capacity(kube, faulty), timeout=60)
    assert team_main(["why", JOB, "-n", TEAM]) == 0  # admitted again
    capsys.readouterr()
    assert main(["triage", JOB, "-n", TEAM]) == 0  # a culprit: the node the job ran on before its requeue
    rows = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}
    assert rows[faulty] != "clean" and rows[second["spec"]["nodeName"]] == "clean"

    # 5. The fault cleared, the controller's requalification burn-in passes and puts the node back.
    assert main(["sim", "fault", faulty, "--clear", *sim]) == 0

    def released() -> bool:
        annotations = node(kube, faulty)["metadata"].get("annotations") or {}
        return not health_taints(node(kube, faulty)) and REQUALIFIED_AT in annotations

    wait_until("the requalification to release the node", released, timeout=600, interval=2)
    assert "PASS" in node(kube, faulty)["metadata"]["annotations"][REQUALIFICATION_RESULT]
    capsys.readouterr()
    assert main(["nodes"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(faulty))
    assert "healthy" in row
    kube.close()

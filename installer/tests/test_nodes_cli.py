"""`konduktor-install nodes`, `nodes release` and `nodes requalify` on the simulated cluster.

A node is quarantined the way an operator does it (`burnin --quarantine`'s writes, from a recorded FAIL); the
requalification burn-in runs real Jobs on the fake nodes, whose GPU agent prints a healthy H100, or one with
uncorrected ECC errors when the node carries the sim's fault annotation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Sim
from ruamel.yaml import YAML
from sim_fixture import health_settings_deployed, health_taints, installer_events, node, patch_node, release_nodes

from konduktor.burnin.manifests import NODE_ANNOTATION
from konduktor.burnin.results import Verdict
from konduktor.burnin.tiers import options_for_tier
from konduktor.burnin.verdict import NodeEvidence, judge_node
from konduktor.cli.main import main
from konduktor.errors import ExitCode
from konduktor.health.breaker import BREAKER_ANNOTATION
from konduktor.health.decide import CONDITION_TYPE
from konduktor.health.health_view import TABLE_WIDTH
from konduktor.health.leader import LEASE_API, LEASE_NAME
from konduktor.health.quarantine import quarantine_failed
from konduktor.health.settings import HealthSettings
from konduktor.kube.client import Kube
from konduktor.sim.gpus import FAULTS_ANNOTATION
from konduktor.vocabulary import HEALTH_TAINT_KEY, QUARANTINED_AT, SYSTEM_NAMESPACE
from konduktor.waiting import wait_until

DATA = Path(__file__).parent / "data" / "burnin"
H100 = "NVIDIA-H100-80GB-HBM3"
NODES = [f"gpu-h100-{i:04d}" for i in range(4)]
NAMESPACE = "konduktor-nodes-test"
ROW_KEYS = {
    "node",
    "state",
    "reason",
    "evidence",
    "since",
    "quarantine_owner",
    "last_verdict",
    "last_verdict_at",
    "last_verdict_detail",
    "product",
    "gpus",
    "gpus_allocatable",
    "cordoned",
    "opted_out",
    "next_step",
}


@pytest.fixture
def cluster(sim: Sim) -> Iterator[Sim]:
    """The nodes released, and the health controller's default settings deployed (acting, not dry run), whether
    or not an earlier test installed konduktor-core."""
    release_nodes(sim.kube, NODES)
    with health_settings_deployed(sim.kube) as deploy:
        deploy(HealthSettings())
        yield sim
    release_nodes(sim.kube, NODES)
    for event in sim.kube.list("v1", "Event", "default"):
        if event.get("reason") == "ReleasedManually":
            sim.kube.delete("v1", "Event", event["metadata"]["name"], "default")


def run(capsys: pytest.CaptureFixture[str], sim: Sim, *args: str) -> tuple[int, str, str]:
    code = main([*args, "--kubeconfig", str(sim.kubeconfig)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


def quarantine(kube: Kube, name: str) -> None:
    log = (DATA / "passive_h100_faulty.txt").read_text()
    verdict = judge_node(NodeEvidence(name, H100, 8, {"passive": log}), options_for_tier("quick"))
    assert verdict.verdict is Verdict.FAIL
    quarantine_failed(kube, [verdict], lambda _: None)


def condition(found: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in found["status"].get("conditions", []) if c["type"] == CONDITION_TYPE)


def events(kube: Kube, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in installer_events(kube) if e["involvedObject"]["name"] == name and e["reason"] == reason]


@pytest.mark.sim
def test_list_shows_a_quarantined_node_with_reason_since_and_owner(
    capsys: pytest.CaptureFixture[str], cluster: Sim
) -> None:
    quarantine(cluster.kube, NODES[1])
    code, out, _ = run(capsys, cluster, "nodes", "-o", "json")
    assert code == 0
    document = json.loads(out)
    assert set(document) == {"nodes", "breaker", "controller"}
    rows = {row["node"]: row for row in document["nodes"]}
    assert YAML(typ="safe").load(run(capsys, cluster, "nodes", "-o", "yaml")[1]) == json.loads(out)
    assert set(NODES) <= set(rows) and all(set(row) == ROW_KEYS for row in rows.values())
    bad = rows[NODES[1]]
    assert (bad["state"], bad["quarantine_owner"], bad["gpus"]) == ("quarantined", "konduktor-install", 10)
    assert bad["reason"].startswith("BurnInFailed") and bad["evidence"]
    assert bad["since"] == node(cluster.kube, NODES[1])["metadata"]["annotations"][QUARANTINED_AT]
    assert bad["next_step"].startswith("requalification burn-in scheduled in ")  # the cooldown, 15 minutes
    assert rows[NODES[0]]["state"] == "healthy" and rows[NODES[0]]["quarantine_owner"] is None
    assert rows[NODES[0]]["next_step"] is None
    # The breaker counts this quarantine against its limit; nothing tripped it.
    breaker = document["breaker"]
    assert NODES[1] in breaker["counted"] and breaker["quarantines"] >= 1 and breaker["tripped"] is False
    assert breaker["limit"] >= 2 and breaker["window_seconds"] > 0

    code, out, _ = run(capsys, cluster, "nodes")
    assert code == 0 and all(len(line) <= TABLE_WIDTH for line in out.splitlines())
    [line] = [line for line in out.splitlines() if line.startswith(NODES[1])]
    assert line.split()[1:3] == ["quarantined", "10/10"] and "BurnInFailed" in line
    assert f"capacity: 40 {H100} GPUs, 10 quarantined" in out
    assert f"next: {NODES[1]}: requalification burn-in scheduled in " in out
    assert "breaker: closed: " in out and "\ncontroller: " in out

    for command in (["status"], ["quotas", "explain"]):
        code, out, _ = run(capsys, cluster, *command)
        assert f"40 {H100} GPUs, 10 quarantined" in out, command

    # `quotas explain` fits the same width; its limits are in -o wide.
    code, out, _ = run(capsys, cluster, "quotas", "explain")
    assert code == 0 and all(len(line) <= TABLE_WIDTH for line in out.splitlines())
    assert "BORROWING_LIMIT" not in out and "PENDING_WORKLOADS" in out
    code, out, _ = run(capsys, cluster, "quotas", "explain", "-o", "wide")
    assert code == 0 and "BORROWING_LIMIT" in out and "LENDING_LIMIT" in out


@pytest.mark.sim
def test_state_type_and_limit_choose_the_nodes_listed_in_the_table_and_in_json(
    capsys: pytest.CaptureFixture[str], cluster: Sim
) -> None:
    quarantine(cluster.kube, NODES[2])
    code, out, _ = run(capsys, cluster, "nodes", "--state", "quarantined", "-o", "json")
    assert code == 0 and [row["node"] for row in json.loads(out)["nodes"]] == [NODES[2]]
    code, out, _ = run(capsys, cluster, "nodes", "--state", "quarantined")
    rows = [line.split()[0] for line in out.splitlines() if line.startswith("gpu-")]
    assert code == 0 and rows == [NODES[2]]
    assert f"capacity: 40 {H100} GPUs, 10 quarantined" in out  # the fleet's capacity, whatever is listed

    code, out, _ = run(capsys, cluster, "nodes", "--state", "healthy", "--type", "h100", "-o", "json")
    listed = [row["node"] for row in json.loads(out)["nodes"]]
    assert code == 0 and set(NODES) - {NODES[2]} <= set(listed) and NODES[2] not in listed

    code, out, _ = run(capsys, cluster, "nodes", "--type", "a100")
    assert code == 0 and "no node matches" in out and not [ln for ln in out.splitlines() if ln.startswith("gpu-")]

    code, out, _ = run(capsys, cluster, "nodes", "--limit", "1")
    assert code == 0 and len([line for line in out.splitlines() if line.startswith("gpu-")]) == 1
    assert "--limit 0 lists all" in out

    code, _, err = run(capsys, cluster, "nodes", "--state", "broken")
    assert code == ExitCode.BAD_INPUT and "broken" in err


@pytest.mark.sim
def test_release_clears_taint_and_condition_records_an_event_and_is_safe_to_rerun(
    capsys: pytest.CaptureFixture[str], cluster: Sim
) -> None:
    kube, name = cluster.kube, NODES[1]
    quarantine(kube, name)
    code, _, err = run(capsys, cluster, "nodes", "release", name, "--reason", "GPU 3 reseated, ticket 42")
    assert code == 0, err
    found = node(kube, name)
    assert health_taints(found) == [] and QUARANTINED_AT not in found["metadata"]["annotations"]
    assert (condition(found)["status"], condition(found)["reason"]) == ("True", "ReleasedManually")
    [recorded] = events(kube, name, "ReleasedManually")
    assert recorded["type"] == "Normal" and recorded["message"].endswith(": GPU 3 reseated, ticket 42")
    assert recorded["message"].startswith("released by ")

    code, _, err = run(capsys, cluster, "nodes", "release", name, "--reason", "again")
    assert code == 0 and "nothing to release" in err
    assert len(events(kube, name, "ReleasedManually")) == 1
    code, out, _ = run(capsys, cluster, "nodes", "-o", "json")
    released = next(row for row in json.loads(out)["nodes"] if row["node"] == name)
    assert (released["state"], released["last_verdict"]) == ("healthy", "RELEASED")
    # A node released by hand no longer counts against the breaker's window.
    assert name not in json.loads(out)["breaker"]["counted"]


@pytest.mark.sim
def test_release_refuses_a_taint_someone_else_placed_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], cluster: Sim
) -> None:
    kube, name = cluster.kube, NODES[2]
    taint = {"key": HEALTH_TAINT_KEY, "value": "rma", "effect": "NoSchedule"}
    patch_node(kube, name, lambda found: {"spec": {"taints": [*found["spec"].get("taints", []), taint]}})
    before = node(kube, name)
    code, _, err = run(capsys, cluster, "nodes", "release", name, "--reason", "not mine")
    assert code == ExitCode.CHECK_FAILED and "not placed by Konduktor" in err and "kubectl taint node" in err
    assert node(kube, name)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert events(kube, name, "ReleasedManually") == []
    code, out, _ = run(capsys, cluster, "nodes", "-o", "json")
    row = next(row for row in json.loads(out)["nodes"] if row["node"] == name)
    assert (row["state"], row["quarantine_owner"]) == ("quarantined", "other")
    code, _, _ = run(capsys, cluster, "nodes", "requalify", name, "--level", "quick", "--namespace", NAMESPACE)
    assert code == ExitCode.CHECK_FAILED


@pytest.mark.sim
def test_requalify_releases_on_pass_keeps_the_node_out_on_fail_and_is_safe_to_rerun(
    capsys: pytest.CaptureFixture[str], cluster: Sim
) -> None:
    kube, good, bad = cluster.kube, NODES[1], NODES[3]
    args = ("--level", "quick", "--namespace", NAMESPACE)
    try:
        quarantine(kube, good)
        # A manual burn-in PASS changes nothing and says how to release the node.
        code, _, err = run(capsys, cluster, "burnin", "--nodes", good, *args)
        assert code == 0 and f"konduktor-install nodes release {good} --reason" in err
        assert len(health_taints(node(kube, good))) == 1
        code, out, err = run(capsys, cluster, "nodes", "requalify", good, *args)
        assert code == 0, err
        assert out == f"{good}\tPASS\n" and "released" in err
        found = node(kube, good)
        assert health_taints(found) == [] and condition(found)["status"] == "True"
        assert len(events(kube, good, "RequalificationPassed")) == 1
        code, _, err = run(capsys, cluster, "nodes", "requalify", good, *args)
        assert code == ExitCode.CHECK_FAILED and "not quarantined by Konduktor" in err

        patch_node(kube, bad, lambda _: {"metadata": {"annotations": {FAULTS_ANNOTATION: "3=ecc"}}})
        quarantine(kube, bad)
        code, out, err = run(capsys, cluster, "nodes", "requalify", bad, *args)
        assert code == ExitCode.NEGATIVE and out == f"{bad}\tFAIL\n" and "stays quarantined" in err
        found = node(kube, bad)
        assert len(health_taints(found)) == 1 and condition(found)["status"] == "False"
        assert len(events(kube, bad, "RequalificationFailed")) == 1
    finally:
        kube.delete("v1", "Namespace", NAMESPACE)


def gpu_pod(name: str, node_name: str) -> dict[str, Any]:
    """A pod holding one GPU, bound to the node (as the scheduler would have, before the quarantine)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": BUSY_NAMESPACE},
        "spec": {
            "nodeName": node_name,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "train",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


# A namespace where GPU pods outside the teams are allowed (konduktor-core's policies.gpuSystemNamespaces).
BUSY_NAMESPACE = "kube-system"


def phase(kube: Kube, name: str) -> str | None:
    found = kube.get("v1", "Pod", name, BUSY_NAMESPACE)
    return None if found is None else found.get("status", {}).get("phase")


@pytest.mark.sim
def test_requalify_refuses_a_node_that_still_runs_gpu_pods_at_once_and_says_why(
    capsys: pytest.CaptureFixture[str], cluster: Sim
) -> None:
    """A burn-in needs every GPU of the node: beside a running job it could never be scheduled (it used to end in
    ERROR after its deadline). `nodes requalify` refuses with exit 3 before creating anything; `nodes` says why."""
    kube, name = cluster.kube, NODES[2]
    pod = "busy-gpu-pod"
    kube.create(gpu_pod(pod, name))
    try:
        wait_until("the GPU pod to run", lambda: phase(kube, pod) == "Running", timeout=60)
        quarantine(kube, name)
        code, out, err = run(capsys, cluster, "nodes", "requalify", name, "--level", "quick", "--namespace", NAMESPACE)
        assert code == ExitCode.CHECK_FAILED and out == ""
        assert f"node {name} still runs 1 GPU pod ({BUSY_NAMESPACE}/{pod})" in err
        assert "cannot run beside them" in err and f"spec.nodeName={name}" in err
        jobs = kube.list("batch/v1", "Job", NAMESPACE) if kube.get("v1", "Namespace", NAMESPACE) else []
        assert [j for j in jobs if j["metadata"].get("annotations", {}).get(NODE_ANNOTATION) == name] == []
        assert len(health_taints(node(kube, name))) == 1  # nothing changed

        code, out, _ = run(capsys, cluster, "nodes", "-o", "json")
        row = next(row for row in json.loads(out)["nodes"] if row["node"] == name)
        assert f"cannot start before the 1 GPU pod still running ({BUSY_NAMESPACE}/{pod}) finish" in row["next_step"]
    finally:
        kube.delete("v1", "Pod", pod, BUSY_NAMESPACE)
        wait_until("the GPU pod to be gone", lambda: kube.get("v1", "Pod", pod, BUSY_NAMESPACE) is None, timeout=60)


@pytest.mark.sim
def test_breaker_reset_needs_a_reason_and_is_a_no_op_while_closed(
    capsys: pytest.CaptureFixture[str], cluster: Sim
) -> None:
    code, _, err = run(capsys, cluster, "nodes", "breaker", "reset", "--reason", " ")
    assert code == ExitCode.BAD_INPUT and "--reason must say why" in err
    lease = cluster.kube.get(LEASE_API, "Lease", LEASE_NAME, SYSTEM_NAMESPACE)
    if lease is None or BREAKER_ANNOTATION not in lease["metadata"].get("annotations", {}):
        code, _, err = run(capsys, cluster, "nodes", "breaker", "reset", "--reason", "nothing tripped")
        assert code == 0 and "not tripped" in err and "nothing to reset" in err
        code, out, _ = run(capsys, cluster, "nodes", "breaker", "-o", "json")
        assert code == 0 and json.loads(out)["tripped"] is False

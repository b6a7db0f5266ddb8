"""MultiKueue on simulated clusters: a manager and two workers, each its own control plane, Kueue and kwok nodes, set
up from one config's rendered objects. A job submitted on the manager runs on the first worker in dispatch order and
its status comes back; once that worker is full the next job goes to the second; the team's quota holds on the
manager; with a worker stopped, new jobs go to the other.

Three clusters of their own (not the session's), started once for this module and removed after it. The tests run in
file order on the same clusters, each one's jobs still running for the next.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from konduktor.cli.main import main
from konduktor.cli.team import main as team_main
from konduktor.config.model import Config
from konduktor.kube.client import ApiError, Identity, Kube
from konduktor.kube.conditions import is_true
from konduktor.quotas.multikueue import manager_kueue_settings
from konduktor.sim.cluster import SimCluster, SimSpec
from konduktor.sim.workloads import gpu_job, running_on, workload_of
from konduktor.vocabulary import KUEUE_API
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim

MANAGER, WORKER, SECOND = "mk-hub", "mk-west", "mk-east"
ROUND = 5 * 60  # Kueue's incremental dispatcher offers a job to the next worker after this (docs/design/multikueue.md)
TEAM = "mk-team"


# Two workers of 1 node x 8 H100 each behind a manager, in that order; one team holding all 16 GPUs (8 on each, by
# the split rule).
FLEET: dict[str, Any] = {
    "version": 1,
    "cluster": {"name": MANAGER},
    "kueue": {"sharing": "none"},
    "clusters": {
        "dispatch": "incremental",
        "workers": [{"name": WORKER, "gpuTypes": {"h100": 1}}, {"name": SECOND, "gpuTypes": {"h100": 1}}],
    },
    "topology": {"levels": ["kubernetes.io/hostname"]},
    "gpuTypes": {
        "h100": {
            "product": "NVIDIA-H100-80GB-HBM3",
            "nodes": 2,
            "gpusPerNode": 8,
            "nodeAllocatable": {"cpu": "96", "memory": "1000Gi"},
        }
    },
    "teams": {TEAM: {"namespaces": [TEAM], "groups": [TEAM], "gpus": {"h100": {"quota": 16}}}},
}


@dataclass
class Fleet:
    config: Config
    manager: Kube
    worker: Kube
    second: Kube
    sims: dict[str, SimCluster]
    path: Path  # its config file


@pytest.fixture(scope="module")
def fleet_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Started as an admin tries it: `sim up --config` with the fleet's config."""
    path = tmp_path_factory.mktemp("fleet") / "config.yaml"
    path.write_text(yaml.safe_dump(FLEET))
    sims = {name: SimCluster(name) for name in (MANAGER, WORKER, SECOND)}
    try:
        assert main(["sim", "up", "--config", str(path), "--job-seconds", "600"]) == 0
        kubes = {name: Kube(sim.kubeconfig) for name, sim in sims.items()}
        yield Fleet(Config.model_validate(FLEET), kubes[MANAGER], kubes[WORKER], kubes[SECOND], sims, path)
        for kube in kubes.values():
            kube.close()
    finally:
        for sim in sims.values():
            sim.down()


def copy_on(kube: Kube, manager: Kube, job: str) -> dict[str, Any] | None:
    """A worker's copy of the manager's Workload of a job: same name; owned by no Job until the job is created there."""
    local = workload_of(manager, TEAM, job)
    return None if local is None else kube.get(KUEUE_API, "Workload", local["metadata"]["name"], TEAM)


def member_why(fleet_up: Fleet, job: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """`konduktor why JOB -o json` as a member of the team, with the manager's kubeconfig only."""
    capsys.readouterr()
    kubeconfig = str(fleet_up.sims[MANAGER].kubeconfig)
    team_main(["why", job, "-n", TEAM, "--kubeconfig", kubeconfig, "--as", "alice", "--as-group", TEAM, "-o", "json"])
    answer: dict[str, Any] = json.loads(capsys.readouterr().out)
    return answer


def fleet_read(
    fleet_up: Fleet, command: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, dict[str, Any]]]:
    """`status` or `nodes` with `--config FLEET -o json`: the exit code and each cluster's document by name."""
    capsys.readouterr()
    code = main([command, "--config", str(fleet_up.path), "-o", "json"])
    return code, {d["cluster"]: d for d in json.loads(capsys.readouterr().out)["clusters"]}


def workload(kube: Kube, job: str) -> dict[str, Any]:
    found = workload_of(kube, TEAM, job)
    assert found is not None
    return found


def test_the_manager_connects_to_the_worker_and_a_job_runs_there(
    fleet_up: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    manager, worker = fleet_up.manager, fleet_up.worker
    for name in (WORKER, SECOND):
        wait_until(
            f"the MultiKueueCluster {name} to be connected",
            lambda name=name: is_true(manager.get(KUEUE_API, "MultiKueueCluster", name), "Active"),
            timeout=120,
        )
    wait_until(
        "the team's queue on the manager to be active",
        lambda: is_true(manager.get(KUEUE_API, "ClusterQueue", TEAM), "Active"),
        timeout=120,
    )
    manager.create(gpu_job("dispatched", TEAM, gpus=8, pods=1, run_for="3600s"))

    # Kueue's webhook hands the manager's Job to MultiKueue: the manager's Job controller leaves it alone.
    job = manager.get("batch/v1", "Job", "dispatched", TEAM)
    assert job is not None and job["spec"].get("managedBy") == "kueue.x-k8s.io/multikueue"

    def dispatched() -> bool:
        found = workload_of(manager, TEAM, "dispatched")
        return found is not None and found.get("status", {}).get("clusterName") == WORKER

    wait_until("the manager's workload to be admitted on the worker", dispatched, timeout=180)
    # The job runs on the worker's nodes, admitted there against the worker's own queue.
    wait_until("its pod to run on the worker", lambda: len(running_on(worker, TEAM, "dispatched")) == 1, timeout=120)
    assert is_true(workload(worker, "dispatched"), "Admitted")
    assert workload(worker, "dispatched")["status"]["admission"]["clusterQueue"] == TEAM
    # Nothing runs on the manager, which has no GPU nodes.
    assert running_on(manager, TEAM, "dispatched") == {}

    # The worker Job's status is mirrored to the manager's Job.
    def mirrored() -> bool:
        local = manager.get("batch/v1", "Job", "dispatched", TEAM) or {}
        return local.get("status", {}).get("active") == 1

    wait_until("the worker Job's status on the manager's Job", mirrored, timeout=120)
    checks = workload(manager, "dispatched")["status"]["admissionChecks"]
    assert [(check["name"], check["state"]) for check in checks] == [(f"multikueue-{TEAM}", "Ready")]

    # A team member reads on the manager where the job runs, and can read nothing on the workers.
    answer = member_why(fleet_up, "dispatched", capsys)
    assert answer["state"] == "admitted" and answer["workerCluster"] == WORKER
    for name in (WORKER, SECOND):
        member = Kube(fleet_up.sims[name].kubeconfig, impersonate=Identity("alice", TEAM))
        with pytest.raises(ApiError) as refused:
            member.list(KUEUE_API, "Workload", TEAM)
        assert refused.value.status == 403
        member.close()


def test_status_reads_every_cluster_of_the_config(fleet_up: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    code, clusters = fleet_read(fleet_up, "status", capsys)
    assert code == 1  # the queues are set up, but Konduktor's chart is installed on none of them
    assert [(name, d["role"]) for name, d in clusters.items()] == [
        (MANAGER, "manager"), (WORKER, "worker"), (SECOND, "worker")
    ]  # fmt: skip
    assert [(w["name"], w["active"]) for w in clusters[MANAGER]["workers"]] == [(SECOND, True), (WORKER, True)]
    # The manager holds the team's whole quota, each worker its share, and the job running on the first.
    queues = {name: {q["team"]: q for q in d["queues"]} for name, d in clusters.items()}
    assert (queues[MANAGER][TEAM]["nominal"], queues[MANAGER][TEAM]["used"]) == (16, 8)
    assert (queues[WORKER][TEAM]["nominal"], queues[WORKER][TEAM]["used"]) == (8, 8)
    assert (queues[SECOND][TEAM]["nominal"], queues[SECOND][TEAM]["used"]) == (8, 0)
    assert [c["gpus"] for c in clusters[WORKER]["gpus"]] == [8] and clusters[MANAGER]["gpus"] == []
    # `nodes` too: each worker's GPU node and its health; the manager has none.
    code, found = fleet_read(fleet_up, "nodes", capsys)
    assert code == 0
    nodes = {name: [(n["state"], n["gpus"]) for n in d["nodes"]] for name, d in found.items()}
    assert nodes == {MANAGER: [], WORKER: [("healthy", 8)], SECOND: [("healthy", 8)]}


def test_the_next_job_goes_to_the_second_worker_once_the_first_is_full(
    fleet_up: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    manager, worker, second = fleet_up.manager, fleet_up.worker, fleet_up.second
    assert len(running_on(worker, TEAM, "dispatched")) == 1  # the first worker's 8 GPUs are taken
    manager.create(gpu_job("spill", TEAM, gpus=8, pods=1, run_for="3600s"))

    # First offered to the first worker alone, where it waits for room.
    def nominated() -> list[str]:
        found = workload_of(manager, TEAM, "spill")
        return list((found or {}).get("status", {}).get("nominatedClusterNames", []))

    wait_until("the job to be offered to the first worker", lambda: nominated() == [WORKER], timeout=120)
    wait_until("its copy on the first worker", lambda: copy_on(worker, manager, "spill") is not None, timeout=60)
    assert not is_true(copy_on(worker, manager, "spill"), "QuotaReserved")  # no room there
    assert copy_on(second, manager, "spill") is None
    # Its owner is told it holds the team's quota and waits for the worker it was offered to.
    answer = member_why(fleet_up, "spill", capsys)
    assert answer["state"] == "pending" and answer["reasons"][0]["kind"] == "dispatching"
    assert f"offered to {WORKER}" in answer["reasons"][0]["message"]

    # After the dispatcher's round, the second worker too, which admits and runs it.
    def on_second() -> bool:
        found = workload_of(manager, TEAM, "spill")
        return found is not None and found.get("status", {}).get("clusterName") == SECOND

    wait_until("the job to be admitted on the second worker", on_second, timeout=ROUND + 180)
    wait_until("its pod to run on the second worker", lambda: len(running_on(second, TEAM, "spill")) == 1, timeout=120)
    # The first worker's copy is gone, and the first job still runs there.
    wait_until("the first worker's copy to be removed", lambda: copy_on(worker, manager, "spill") is None, timeout=60)
    assert len(running_on(worker, TEAM, "dispatched")) == 1


def test_the_team_quota_holds_on_the_manager(fleet_up: Fleet) -> None:
    manager, worker, second = fleet_up.manager, fleet_up.worker, fleet_up.second
    manager.create(gpu_job("over", TEAM, gpus=8, pods=1, run_for="3600s"))

    # The team's 16 GPUs are in use: the manager does not reserve quota, so the job goes to no worker.
    def pending() -> bool:
        found = workload_of(manager, TEAM, "over")
        reserved = next(
            (c for c in (found or {}).get("status", {}).get("conditions", []) if c["type"] == "QuotaReserved"), None
        )
        return reserved is not None and reserved["status"] == "False"

    wait_until("the manager to refuse the job quota", pending, timeout=120)
    found = workload_of(manager, TEAM, "over")
    assert found is not None
    assert "clusterName" not in found["status"] and not found["status"].get("nominatedClusterNames")
    assert copy_on(worker, manager, "over") is None and copy_on(second, manager, "over") is None


def test_a_stopped_worker_turns_inactive_and_new_jobs_go_to_the_other(
    fleet_up: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    manager, second = fleet_up.manager, fleet_up.second
    # Room for one more job: the second worker's job and the waiting one go.
    for job in ("over", "spill"):
        manager.delete("batch/v1", "Job", job, TEAM, propagation="Background")
    wait_until("the second worker to be free", lambda: not running_on(second, TEAM, "spill"), timeout=120)

    # The admin turns to the all-at-once dispatcher (`dispatch: allAtOnce`): the manager's Kueue restarts with it.
    # The incremental one would nominate the first worker in order even while it is away and reach the second after
    # a 5-minute round (docs/design/multikueue.md#a-worker-that-goes-away).
    clusters = fleet_up.config.clusters
    assert clusters is not None
    all_at_once = fleet_up.config.model_copy(update={"clusters": clusters.model_copy(update={"dispatch": "allAtOnce"})})
    fleet_up.sims[MANAGER].up(SimSpec(pools=[], kueue_settings=manager_kueue_settings(all_at_once)))
    fleet_up.sims[WORKER].down(keep=True)  # its API server, and everything else of it, stops
    wait_until(
        "the first worker's MultiKueueCluster to be inactive",
        lambda: not is_true(manager.get(KUEUE_API, "MultiKueueCluster", WORKER), "Active"),
        timeout=180,
    )
    manager.create(gpu_job("after-loss", TEAM, gpus=8, pods=1, run_for="3600s"))

    def on_second() -> bool:
        found = workload_of(manager, TEAM, "after-loss")
        return found is not None and found.get("status", {}).get("clusterName") == SECOND

    # Copied at once to every worker still connected: the second.
    wait_until("the new job to be admitted on the second worker", on_second, timeout=180)
    wait_until("its pod to run there", lambda: len(running_on(second, TEAM, "after-loss")) == 1, timeout=120)

    # `status` says the worker is away: the manager no longer reaches it, nor does `status`; the others still read.
    code, clusters = fleet_read(fleet_up, "status", capsys)
    assert code == 1
    assert "error" in clusters[WORKER] and "error" not in clusters[SECOND]
    connections = {w["name"]: w for w in clusters[MANAGER]["workers"]}
    assert connections[WORKER]["active"] is False and connections[SECOND]["active"] is True
    code, found = fleet_read(fleet_up, "nodes", capsys)
    assert code == 5  # could not reach a cluster
    assert "error" in found[WORKER] and [n["state"] for n in found[SECOND]["nodes"]] == ["healthy"]

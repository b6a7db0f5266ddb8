"""MultiKueue on simulated clusters: a manager and two workers, each its own control plane, Kueue and kwok nodes, set
up from one config (`sim up --config`, then `up`). A job submitted on the manager runs on the first worker in
dispatch order and its status comes back; once that worker is full the next job goes to the second; the team's quota
holds on the manager; with a worker stopped, new jobs go to the other.

Three clusters of their own (not the session's), started once for this module and removed after it. The tests run in
file order on the same clusters, each one's jobs still running for the next.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from konduktor.cli.main import main
from konduktor.cli.team import main as team_main
from konduktor.config.model import Config
from konduktor.kube.client import ApiError, Identity, Kube
from konduktor.kube.conditions import is_true
from konduktor.quotas.by_hand import BY_HAND_DIR, KUEUE_CONFIGURATION_FILE
from konduktor.quotas.multikueue import kubeconfig_secret_name, manager_kueue_settings
from konduktor.sim.cluster import SimCluster
from konduktor.sim.workloads import gpu_job, running_on, workload_of
from konduktor.tools.toolbox import Toolbox
from konduktor.vocabulary import HEALTH_TAINT_KEY, KUBECONFIG_KEY, KUEUE_API, KUEUE_NAMESPACE
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
        "workerLostTimeout": "90s",  # a job on a lost worker is requeued after this (the default is 15 minutes)
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
        # The manager reaches the second worker at another address than this machine's kubeconfig names (as at a
        # private endpoint): `server:`, here the same API server by its name, which its certificate holds.
        fleet = copy.deepcopy(FLEET)
        fleet["clusters"]["workers"][1]["server"] = kubes[SECOND].server.replace("127.0.0.1", "localhost")
        path.write_text(yaml.safe_dump(fleet))
        yield Fleet(Config.model_validate(fleet), kubes[MANAGER], kubes[WORKER], kubes[SECOND], sims, path)
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


def worker_server(manager: Kube, name: str) -> str:
    """The API server address in the kubeconfig Secret a worker's MultiKueueCluster reads on the manager."""
    secret = manager.get("v1", "Secret", kubeconfig_secret_name(name), KUEUE_NAMESPACE)
    assert secret is not None
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"][KUBECONFIG_KEY]))
    [cluster] = kubeconfig["clusters"]
    server: str = cluster["cluster"]["server"]
    return server


def workload(kube: Kube, job: str) -> dict[str, Any]:
    found = workload_of(kube, TEAM, job)
    assert found is not None
    return found


def test_up_installs_every_cluster_in_order_and_plan_then_finds_nothing_to_do(
    fleet_up: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["up", str(fleet_up.path), "--burnin", "none", "-o", "json"]) == 0
    clusters = json.loads(capsys.readouterr().out)["clusters"]
    # The workers first, in dispatch order (the manager's MultiKueueClusters need their identities), then the manager.
    assert [(c["name"], c["role"]) for c in clusters] == [(WORKER, "worker"), (SECOND, "worker"), (MANAGER, "manager")]
    assert all(c["release"]["status"] == "deployed" for c in clusters)
    # `sim up --config` applied the same objects from the same render: `up` finds them all in place.
    assert [c["quotas"] for c in clusters] == [[], [], []]
    # Kueue on the manager runs the config's dispatcher and lost-worker timeout; the workers' Kueue neither.
    specs = {name: sim.spec() for name, sim in fleet_up.sims.items()}
    assert [None if spec is None else spec.kueue_settings.get("multiKueue") for spec in specs.values()] == [
        {
            "dispatcherName": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
            "workerLostTimeout": "90s",
            "incrementalDispatcherConfig": {"stepSize": 1},
        },
        None,
        None,
    ]

    capsys.readouterr()
    assert main(["plan", str(fleet_up.path), "-o", "json"]) == 0
    planned = json.loads(capsys.readouterr().out)["clusters"]
    assert [(c["name"], c["release"]["changes"], c["quotas"]) for c in planned] == [
        (WORKER, [], []), (SECOND, [], []), (MANAGER, [], [])
    ]  # fmt: skip

    # `down` on one cluster removes what Konduktor made there, the fleet's objects too: a worker's identity, the
    # manager's MultiKueue objects and the kubeconfig Secrets (a dry run: the tests below use them).
    planned = {}
    for name in (SECOND, MANAGER):
        capsys.readouterr()
        assert main(["down", "--config", str(fleet_up.path), "--cluster", name, "--dry-run"]) == 0
        planned[name] = set(capsys.readouterr().out.splitlines())
    assert {
        "delete ServiceAccount kueue-system/konduktor-multikueue",
        "delete Secret kueue-system/konduktor-multikueue-token",
        "delete ClusterRole konduktor-multikueue-read",
        f"delete RoleBinding {TEAM}/konduktor-multikueue-write",
        "delete ServiceAccount kueue-system/konduktor-fleet-events",
        f"delete RoleBinding {TEAM}/konduktor-fleet-events-read",
        # A worker taken down alone leaves the manager's dispatch first.
        f"change MultiKueueConfig multikueue-{TEAM}: its workers {WORKER} (on the manager {MANAGER})",
        f"delete MultiKueueCluster {SECOND} (on the manager {MANAGER})",
        f"delete Secret kueue-system/multikueue-{SECOND} (on the manager {MANAGER})",
    } <= planned[SECOND]
    dispatch = fleet_up.manager.get(KUEUE_API, "MultiKueueConfig", f"multikueue-{TEAM}")
    assert dispatch is not None and dispatch["spec"]["clusters"] == [WORKER, SECOND]  # a dry run changes nothing
    assert {
        f"delete MultiKueueCluster {WORKER}",
        f"delete AdmissionCheck multikueue-{TEAM}",
        f"delete Secret kueue-system/multikueue-{SECOND}",
        f"delete Secret konduktor-system/konduktor-fleet-events-{SECOND}",
    } <= planned[MANAGER]


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
    # Each worker's kubeconfig on the manager names the address the config gives, or else this machine's.
    assert fleet_up.config.clusters is not None
    servers = {name: worker_server(manager, name) for name in (WORKER, SECOND)}
    assert servers == {WORKER: worker.server, SECOND: fleet_up.config.clusters.workers[1].server}
    assert servers[SECOND].startswith("https://localhost:")
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

    # The identity the manager's fleet-events relay reads a worker as may read Events in team namespaces, and no
    # more: not their Secrets or Workloads, nor Events elsewhere.
    relay = Kube(
        fleet_up.sims[WORKER].kubeconfig,
        impersonate=Identity("system:serviceaccount:kueue-system:konduktor-fleet-events", "system:serviceaccounts"),
    )
    relay.list("v1", "Event", TEAM)
    for api_version, kind, namespace in (
        ("v1", "Secret", TEAM),
        (KUEUE_API, "Workload", TEAM),
        ("v1", "Event", "kube-system"),
        ("v1", "Secret", "kueue-system"),
    ):
        with pytest.raises(ApiError) as refused:
            relay.list(api_version, kind, namespace)
        assert refused.value.status == 403, (kind, namespace)
    relay.close()
    # On the manager the relay gets its own kubeconfig Secrets, not Kueue's.
    relay = Kube(
        fleet_up.sims[MANAGER].kubeconfig,
        impersonate=Identity("system:serviceaccount:konduktor-system:konduktor-fleet-events", "system:serviceaccounts"),
    )
    assert relay.get("v1", "Secret", f"konduktor-fleet-events-{WORKER}", "konduktor-system") is not None
    with pytest.raises(ApiError) as refused:
        relay.get("v1", "Secret", kubeconfig_secret_name(WORKER), KUEUE_NAMESPACE)
    assert refused.value.status == 403
    relay.close()


def test_status_reads_every_cluster_of_the_config(fleet_up: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    code, clusters = fleet_read(fleet_up, "status", capsys)
    assert code == 0  # Konduktor is installed on every cluster (`up`, above)
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
    running = fleet_up.sims[MANAGER].spec()
    assert running is not None
    fleet_up.sims[MANAGER].up(replace(running, kueue_settings=manager_kueue_settings(all_at_once)))
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

    # The job that was running on the lost worker: after workerLostTimeout the manager gives up on it there
    # (its admission check turns Retry, "Admitting remote lost"), requeues it and dispatches it again; it waits for
    # room on the second worker, taking nothing from the job there, and runs once that one is gone.
    def given_up() -> bool:
        return workload(manager, "dispatched")["status"].get("clusterName") != WORKER

    wait_until("the lost worker's job to be given up there", given_up, timeout=300)
    assert len(running_on(second, TEAM, "after-loss")) == 1
    manager.delete("batch/v1", "Job", "after-loss", TEAM, propagation="Background")

    def moved() -> bool:
        found = workload_of(manager, TEAM, "dispatched")
        return found is not None and found.get("status", {}).get("clusterName") == SECOND

    wait_until("the lost worker's job to be admitted on the second worker", moved, timeout=300)
    wait_until("its pod to run there", lambda: len(running_on(second, TEAM, "dispatched")) == 1, timeout=120)


def test_a_gpu_fault_on_a_worker_sends_its_job_to_another_worker(
    fleet_up: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    manager = fleet_up.manager
    workers = {WORKER: fleet_up.worker, SECOND: fleet_up.second}
    # The lost job is deleted, and the lost worker comes back: MultiKueue's garbage collector removes the copy it
    # still had there, whose job the manager no longer has.
    manager.delete("batch/v1", "Job", "dispatched", TEAM, propagation="Background")
    running = fleet_up.sims[WORKER].spec()
    assert running is not None
    fleet_up.sims[WORKER].up(running)
    wait_until(
        "the first worker's MultiKueueCluster to be active again",
        lambda: is_true(manager.get(KUEUE_API, "MultiKueueCluster", WORKER), "Active"),
        timeout=180,
    )
    for name, kube in workers.items():
        wait_until(f"no copy left on {name}", lambda kube=kube: not kube.list(KUEUE_API, "Workload", TEAM), 240)

    # A new job runs on whichever worker admits it first; an Xid 79 on its node there. That worker's health
    # controller (installed by `up`) quarantines the node and requeues the job there; the manager, seeing it admitted
    # nowhere, requeues it and dispatches it again, and the other worker runs it.
    manager.create(gpu_job("healed", TEAM, gpus=8, pods=1, run_for="3600s"))

    def admitted_on() -> str | None:
        found = workload_of(manager, TEAM, "healed")
        cluster = (found or {}).get("status", {}).get("clusterName")
        return cluster if cluster and running_on(workers[cluster], TEAM, "healed") else None

    wait_until("the job to run on a worker", lambda: admitted_on() is not None, timeout=180)
    first = admitted_on()
    assert first is not None
    other = SECOND if first == WORKER else WORKER
    (faulty,) = running_on(workers[first], TEAM, "healed").values()
    assert main(["sim", "fault", faulty, "--kind", "xid79", "--gpu", "3", "--name", first]) == 0

    def quarantined() -> bool:
        taints = (workers[first].get("v1", "Node", faulty) or {}).get("spec", {}).get("taints", [])
        return any(taint["key"] == HEALTH_TAINT_KEY for taint in taints)

    wait_until(f"{first}'s health controller to quarantine the node", quarantined, timeout=180)
    wait_until(f"the job to be admitted on {other}", lambda: admitted_on() == other, timeout=300)
    assert running_on(workers[first], TEAM, "healed") == {}

    # Its owner, who reads only the manager, is told on the manager's Job what happened on the worker: the relay
    # copies the worker's health controller Event there.
    owner = Kube(fleet_up.sims[MANAGER].kubeconfig, impersonate=Identity("alice", TEAM))
    job_uid = (manager.get("batch/v1", "Job", "healed", TEAM) or {})["metadata"]["uid"]

    def told() -> list[dict[str, Any]]:
        return [
            e
            for e in owner.list("v1", "Event", TEAM, field_selector="involvedObject.name=healed")
            if e["reason"] == "RequeuedForNodeHealth" and e["involvedObject"].get("uid") == job_uid
        ]

    wait_until("the owner to be told on the manager's job", lambda: bool(told()), timeout=120)
    [event] = told()
    assert event["message"].startswith(f"On worker cluster {first}: GPU node {faulty} was quarantined")
    assert "Xid 79" in event["message"]
    owner.close()

    # The admin sees across the fleet which node is out of service, on which worker, and why.
    code, found = fleet_read(fleet_up, "nodes", capsys)
    assert code == 0
    (bad,) = found[first]["nodes"]
    assert bad["state"] == "quarantined" and bad["reason"].startswith("Xid79")
    assert [n["state"] for n in found[other]["nodes"]] == ["healthy"]

    # `down` of the worker with the bad node alone: Konduktor and the manager's identity leave it, and the job on
    # the other worker runs on.
    assert main(["down", "--config", str(fleet_up.path), "--cluster", first, "--yes"]) == 0
    assert workers[first].get("v1", "ServiceAccount", "konduktor-multikueue", "kueue-system") is None
    assert admitted_on() == other
    # The manager no longer dispatches to it: a new job is offered to the other worker at once, not after a round.
    dispatch = manager.get(KUEUE_API, "MultiKueueConfig", f"multikueue-{TEAM}")
    assert dispatch is not None and dispatch["spec"]["clusters"] == [other]
    assert manager.get(KUEUE_API, "MultiKueueCluster", first) is None
    manager.create(gpu_job("after-down", TEAM, gpus=8, pods=1, run_for="3600s"))

    def offered() -> list[str]:
        found = workload_of(manager, TEAM, "after-down")
        return list((found or {}).get("status", {}).get("nominatedClusterNames", []))

    wait_until(f"the new job to be offered to {other}", lambda: offered() == [other], timeout=120)
    manager.delete("batch/v1", "Job", "after-down", TEAM, propagation="Background")
    code, clusters = fleet_read(fleet_up, "status", capsys)
    assert code == 1
    assert (clusters[first]["release"]["installed"], clusters[other]["release"]["installed"]) == (False, True)


def test_the_by_hand_artefacts_connect_the_fleet(fleet_up: Fleet, tmp_path: Path) -> None:
    """docs/multicluster.md#applying-by-hand, on the fleet as the tests above left it (one worker taken down) or as
    `sim up --config` started it: `render --output-dir`; each worker's directory applied with kubectl; the manager's
    Kueue restarted with the Configuration render wrote; the manager's kubeconfig Secrets deleted and made again from
    render's templates, filled in as their comments say; then the manager's directory: every worker connects, and
    the relay's kubeconfig made by hand reads a worker's Events."""
    assert main(["render", str(fleet_up.path), "--output-dir", str(tmp_path)]) == 0
    by_hand = tmp_path / MANAGER / BY_HAND_DIR
    kubectl = str(Toolbox().path("kubectl"))
    manager = fleet_up.manager
    workers = {WORKER: fleet_up.worker, SECOND: fleet_up.second}

    def on(cluster: str, *args: str, stdin: str | None = None) -> str:
        kubeconfig = str(fleet_up.sims[cluster].kubeconfig)
        done = subprocess.run(
            [kubectl, "--kubeconfig", kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    # Each worker: its queues and the identities the manager uses there (made again on a worker taken down above).
    for name in workers:
        on(name, "apply", "-f", str(tmp_path / name))
    # The manager's Kueue with the sections render wrote (the sim's Kueue Configuration is its spec): what `up` gives
    # it, the incremental dispatcher again after the all-at-once one above.
    written = yaml.safe_load((by_hand / KUEUE_CONFIGURATION_FILE).read_text())
    sections = {key: value for key, value in written.items() if key not in ("apiVersion", "kind")}
    assert sections == manager_kueue_settings(fleet_up.config)
    running = fleet_up.sims[MANAGER].spec()
    assert running is not None
    fleet_up.sims[MANAGER].up(replace(running, kueue_settings=sections))

    # Without its Secret, a worker's MultiKueueCluster is not connected.
    for name in workers:
        manager.delete("v1", "Secret", kubeconfig_secret_name(name), KUEUE_NAMESPACE)
        if manager.get(KUEUE_API, "MultiKueueCluster", name) is not None:
            wait_until(
                f"the MultiKueueCluster {name} to lose its Secret",
                lambda name=name: not is_true(manager.get(KUEUE_API, "MultiKueueCluster", name), "Active"),
                timeout=120,
            )
    # The manager's Secrets from the templates: SERVER (unless the config gives it), CA_DATA as the worker's token
    # Secret holds it (base64), TOKEN decoded; the relay's once `up` installed its chart (and namespace).
    relays = manager.get("v1", "Namespace", "konduktor-system") is not None
    for name, kube in workers.items():
        templates = [("konduktor-multikueue-token", f"secret-{kubeconfig_secret_name(name)}.yaml")]
        if relays:
            templates.append(("konduktor-fleet-events-token", f"secret-konduktor-fleet-events-{name}.yaml"))
        for token_secret, file in templates:
            wait_until(
                f"the token of {token_secret} on {name}",
                lambda kube=kube, token_secret=token_secret: bool(
                    (kube.get("v1", "Secret", token_secret, KUEUE_NAMESPACE) or {}).get("data", {}).get("token")
                ),
                timeout=60,
            )
            get = ["-n", KUEUE_NAMESPACE, "get", "secret", token_secret, "-o"]
            values = {
                "${SERVER}": kube.server,
                "${CA_DATA}": on(name, *get, "jsonpath={.data.ca\\.crt}"),
                "${TOKEN}": base64.b64decode(on(name, *get, "jsonpath={.data.token}")).decode(),
            }
            text = (by_hand / file).read_text()
            assert ("${SERVER}" in text) == (name == WORKER)  # the second worker's `server:` is in the config
            for placeholder, value in values.items():
                text = text.replace(placeholder, value)  # as envsubst does
            on(MANAGER, "apply", "--server-side", "-f", "-", stdin=text)
    on(MANAGER, "apply", "-f", str(tmp_path / MANAGER))

    for name in workers:
        wait_until(
            f"the MultiKueueCluster {name} to be connected",
            lambda name=name: is_true(manager.get(KUEUE_API, "MultiKueueCluster", name), "Active"),
            timeout=180,
        )
    dispatch = manager.get(KUEUE_API, "MultiKueueConfig", f"multikueue-{TEAM}")
    assert dispatch is not None and dispatch["spec"]["clusters"] == [WORKER, SECOND]
    if relays:
        secret = manager.get("v1", "Secret", f"konduktor-fleet-events-{WORKER}", "konduktor-system")
        assert secret is not None
        kubeconfig = tmp_path / "relay.kubeconfig"
        kubeconfig.write_bytes(base64.b64decode(secret["data"][KUBECONFIG_KEY]))
        with Kube(kubeconfig) as relay:
            relay.list("v1", "Event", TEAM)

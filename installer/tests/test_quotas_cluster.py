"""Team quotas on the simulated cluster: the three sharing scenarios, re-apply, prune, and the real apiserver
accepting every example. The session cluster is examples/config.yaml's: 4 nodes x 10 H100, two teams of 20."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, Sim
from ruamel.yaml import YAML

from konduktor.cli.main import main
from konduktor.config.load import load_config, parse_config
from konduktor.errors import ExitCode, PartialApply
from konduktor.kube.client import Kube
from konduktor.kube.conditions import condition
from konduktor.quotas.render import render
from konduktor.quotas.sync import DRAIN_MANAGER, confirm_removed, stop_policy, sync_quotas
from konduktor.sim.workloads import admitted_gpus, gpu_job, is_true, was_evicted, workload_of
from konduktor.vocabulary import KUEUE_API
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
TEAMS = ("team-a", "team-b")
LONG = "300s"  # jobs that must hold their GPUs for the whole scenario


def remove_jobs(kube: Kube) -> None:
    for namespace in TEAMS:
        for job in kube.list("batch/v1", "Job", namespace):
            kube.delete("batch/v1", "Job", job["metadata"]["name"], namespace)
    wait_until(
        "the teams' workloads to be gone",
        lambda: not any(kube.list(KUEUE_API, "Workload", ns) for ns in TEAMS),
        timeout=60,
    )


@pytest.fixture()
def teams(sim: Sim) -> Iterator[Kube]:
    config = load_config(EXAMPLE).config
    sync_quotas(sim.kube, config, prune=True, dry_run=False)
    wait_until(
        "both ClusterQueues to be active",
        lambda: all(is_true(sim.kube.get(KUEUE_API, "ClusterQueue", t), "Active") for t in TEAMS),
    )
    remove_jobs(sim.kube)
    yield sim.kube
    remove_jobs(sim.kube)


def submit(kube: Kube, namespace: str, count: int, gpus: int, prefix: str, **options: Any) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        kube.create(gpu_job(name, namespace, gpus=gpus, run_for=LONG, **options))
    return names


def admitted(kube: Kube, namespace: str, names: list[str]) -> int:
    return sum(is_true(workload_of(kube, namespace, n), "Admitted") for n in names)


def refusal(workload: dict[str, Any] | None) -> str | None:
    """Why Kueue's scheduler did not admit a Workload it tried (QuotaReserved False, reason Pending); None until it
    has said so."""
    reserved = condition(workload, "QuotaReserved") or {}
    return (
        reserved.get("message", "")
        if (reserved.get("status"), reserved.get("reason")) == ("False", "Pending")
        else None
    )


def test_greedy_team_cannot_take_what_the_other_team_uses(teams: Kube) -> None:
    kube = teams
    b_jobs = submit(kube, "team-b", 4, 5, "b-run")
    wait_until("team-b's 20 GPUs to be admitted", lambda: admitted(kube, "team-b", b_jobs) == 4)
    a_jobs = submit(kube, "team-a", 6, 5, "a-greedy")  # asks for 30 GPUs
    wait_until("team-a to reach its quota", lambda: admitted_gpus(kube, "team-a") == 20)
    # Kueue makes each Job's Workload on its own time: on a loaded machine the last may come after the quota is full.
    wait_until("a Workload for each of team-a's jobs", lambda: all(workload_of(kube, "team-a", n) for n in a_jobs))

    def refused() -> list[str]:
        workloads = kube.list(KUEUE_API, "Workload", "team-a")
        return [m for m in map(refusal, workloads) if m is not None]

    # Kueue's verdict when it tries A's next job (it parks the other one behind it without a word): no quota left
    # (B lends nothing: it uses all 20), and no preemption of B's work to make room.
    wait_until("Kueue to refuse team-a's next job", refused)
    for message in refused():
        assert "insufficient unused quota for nvidia.com/gpu" in message and "preemption" not in message
    pending = [w for w in kube.list(KUEUE_API, "Workload", "team-a") if not is_true(w, "QuotaReserved")]
    assert len(pending) == 2
    assert admitted_gpus(kube, "team-a") == 20
    assert admitted_gpus(kube, "team-b") == 20
    assert not [w for w in kube.list(KUEUE_API, "Workload", "team-b") if was_evicted(w)]


def test_idle_gpus_are_borrowed_and_reclaimed(teams: Kube) -> None:
    kube = teams
    a_jobs = submit(kube, "team-a", 6, 5, "a-borrow", priority="opportunistic")
    # team-b is idle: team-a gets its 20 plus its borrowing limit of 10.
    wait_until("team-a to borrow 10 GPUs", lambda: admitted_gpus(kube, "team-a") == 30)
    assert admitted(kube, "team-a", a_jobs) == 6

    started = time.monotonic()
    b_jobs = submit(kube, "team-b", 4, 5, "b-reclaim", priority="standard")
    wait_until("team-b to get its 20 GPUs back", lambda: admitted(kube, "team-b", b_jobs) == 4, timeout=120)
    reclaim_seconds = time.monotonic() - started
    assert admitted_gpus(kube, "team-a") <= 20
    evicted = [w for w in kube.list(KUEUE_API, "Workload", "team-a") if was_evicted(w)]
    assert len(evicted) == 2  # exactly the borrowed 10 GPUs (2 jobs of 5) were reclaimed
    print(f"reclaim took {reclaim_seconds:.1f} s")


def test_an_eight_gpu_pod_waits_for_a_whole_node(teams: Kube) -> None:
    """28 GPUs are free, but no node has 8: the job must wait, not be admitted onto scattered GPUs."""
    kube = teams
    nodes = sorted(n["metadata"]["name"] for n in kube.list("v1", "Node", label_selector="nvidia.com/gpu.present=true"))
    assert len(nodes) == 4
    holders = [f"hold-{i}" for i in range(4)]
    for name, node in zip(holders, nodes, strict=True):
        kube.create(gpu_job(name, "team-a", gpus=3, run_for=LONG, node=node))
    wait_until("3 GPUs held on every node", lambda: admitted(kube, "team-a", holders) == 4)

    kube.create(gpu_job("big", "team-b", gpus=8, run_for=LONG))
    wait_until("Kueue to refuse the 8-GPU job", lambda: refusal(workload_of(kube, "team-b", "big")) is not None)
    workload = workload_of(kube, "team-b", "big")
    # Not for want of quota: no node has 8 free GPUs ("excluded: resource nvidia.com/gpu: 4").
    assert "doesn't allow to fit any of 1 pod(s)" in (refusal(workload) or "")
    assert not is_true(workload, "Admitted")

    kube.delete("batch/v1", "Job", holders[2], "team-a")
    wait_until("the 8-GPU job to be admitted", lambda: is_true(workload_of(kube, "team-b", "big"), "Admitted"), 90)

    def bound_node() -> str | None:
        pods = kube.list("v1", "Pod", "team-b", label_selector="job-name=big")
        return pods[0]["spec"].get("nodeName") if pods else None

    wait_until("the 8-GPU pod to be bound", lambda: bound_node() is not None)
    assert bound_node() == nodes[2]


def edited_example(tmp_path: Path, edit: Any) -> Path:
    """The example config with another cluster name and team names, so tests own separate objects."""
    yaml = YAML()
    data = yaml.load(EXAMPLE.read_text())
    data["cluster"]["name"] = "sync-lab"
    data["gpuTypes"] = {"h100-sync": data["gpuTypes"]["h100"]}
    data["priorities"] = {f"sync-{k}": v for k, v in data["priorities"].items()}
    data["topology"]["name"] = "sync-topology"
    data["teams"] = {
        f"sync-{name}": {
            **copy.deepcopy(team),
            "namespaces": [f"sync-{name}"],
            "gpus": {"h100-sync": team["gpus"]["h100"]},
        }
        for name, team in data["teams"].items()
    }
    data["alerts"]["routes"]["teams"] = {f"sync-{name}": r for name, r in data["alerts"]["routes"]["teams"].items()}
    edit(data)
    path = tmp_path / "config.yaml"
    with path.open("w") as handle:
        yaml.dump(data, handle)
    return path


def test_apply_diff_update_and_prune(sim: Sim, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = str(sim.kubeconfig)
    config = edited_example(tmp_path, lambda data: None)
    assert main(["quotas", "diff", str(config), "--kubeconfig", kubeconfig]) == 1
    assert main(["quotas", "apply", str(config), "--kubeconfig", kubeconfig]) == 0
    capsys.readouterr()

    # Re-applying an unchanged config changes nothing.
    assert main(["quotas", "diff", str(config), "--kubeconfig", kubeconfig]) == 0
    assert main(["quotas", "apply", str(config), "--kubeconfig", kubeconfig]) == 0
    assert "unchanged" in capsys.readouterr().err

    # Lowering one team's quota updates only that team's ClusterQueue.
    def lower(data: Any) -> None:
        data["teams"]["sync-team-a"]["gpus"]["h100-sync"]["quota"] = 12
        data["teams"]["sync-team-a"]["gpus"]["h100-sync"]["lendLimit"] = 8

    lowered = edited_example(tmp_path, lower)
    assert main(["quotas", "diff", str(lowered), "--kubeconfig", kubeconfig, "-o", "json"]) == 1
    [changed] = json.loads(capsys.readouterr().out)
    assert main(["quotas", "diff", str(lowered), "--kubeconfig", kubeconfig, "-o", "yaml"]) == 1
    assert YAML(typ="safe").load(capsys.readouterr().out) == [changed]
    assert (changed["action"], changed["kind"], changed["name"]) == ("update", "ClusterQueue", "sync-team-a")
    assert changed["fields"] and all(field.startswith("spec.") for field in changed["fields"])
    assert main(["quotas", "apply", str(lowered), "--kubeconfig", kubeconfig]) == 0
    queue = sim.kube.get(KUEUE_API, "ClusterQueue", "sync-team-a")
    assert queue is not None
    gpu = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][-1]
    assert (gpu["name"], str(gpu["nominalQuota"])) == ("nvidia.com/gpu", "12")

    # Removing a team prunes its objects and nothing else (its namespace stays: it holds the team's work).
    def remove_team_b(data: Any) -> None:
        data["teams"].pop("sync-team-b")
        # alone, team a has nobody to borrow from or lend to
        data["teams"]["sync-team-a"]["gpus"]["h100-sync"] = {"quota": 12}

    removed = edited_example(tmp_path, remove_team_b)
    bystander = {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {
            "name": "bystander",
            "labels": {"app.kubernetes.io/managed-by": "konduktor", "konduktor.ai/config": "another-lab"},
        },
        "spec": {"namespaceSelector": {}, "resourceGroups": []},
    }
    sim.kube.apply(bystander)
    assert main(["quotas", "apply", str(removed), "--kubeconfig", kubeconfig]) == 0
    err = capsys.readouterr().err
    assert "prune" in err and "namespace sync-team-b left the config" in err
    # Kueue's finalizers let the queues go once nothing uses them.
    wait_until("team b's queues to be deleted", lambda: sim.kube.get(KUEUE_API, "ClusterQueue", "sync-team-b") is None)
    wait_until(
        "team b's LocalQueue to go", lambda: sim.kube.get(KUEUE_API, "LocalQueue", "default", "sync-team-b") is None
    )
    assert sim.kube.get("v1", "Namespace", "sync-team-b") is not None
    assert sim.kube.get(KUEUE_API, "ClusterQueue", "sync-team-a") is not None
    assert sim.kube.get(KUEUE_API, "ClusterQueue", "bystander") is not None  # another config's: not ours to prune
    sim.kube.delete(KUEUE_API, "ClusterQueue", "bystander")
    assert main(["quotas", "diff", str(removed), "--kubeconfig", kubeconfig]) == 0


def test_invalid_config_touches_nothing(sim: Sim, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        EXAMPLE.read_text()
        .replace("quota: 20", "quota: -3", 1)
        .replace("cluster:\n  name: gpu-lab", "cluster:\n  name: bad-lab")
    )
    assert main(["quotas", "apply", str(bad), "--kubeconfig", str(sim.kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml:" in err and "quota" in err and "Traceback" not in err
    assert not sim.kube.list(KUEUE_API, "ClusterQueue", label_selector="konduktor.ai/config=bad-lab")


@pytest.mark.parametrize("example", sorted((EXAMPLE.parent).glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_is_accepted_by_the_apiserver(sim: Sim, example: Path) -> None:
    """Strict field validation: a field Kueue's CRDs do not know would be an error, not silently dropped."""
    for obj in render(parse_config(example.read_text(), example.name).config):
        probe = copy.deepcopy(obj)
        if "namespace" in probe["metadata"]:
            probe["metadata"]["namespace"] = "default"  # the team namespaces only exist in a dry run
        else:
            # cluster-scoped names are shared with the applied example; some fields (topologyName) are immutable
            probe["metadata"]["name"] = f"probe-{example.stem}-{probe['metadata']['name']}"[:63].rstrip("-.")
        sim.kube.apply(probe, dry_run=True)


def without_team_b(data: Any) -> None:
    data["teams"].pop("sync-team-b")
    data["teams"]["sync-team-a"]["gpus"]["h100-sync"] = {"quota": 12}


def start_team_b(sim: Sim, tmp_path: Path, run_for: str) -> tuple[str, str]:
    """Both sync teams applied, and a job of team b admitted on 10 GPUs; returns (its workload, the config)."""
    config = edited_example(tmp_path, lambda data: None)
    assert main(["quotas", "apply", str(config), "--kubeconfig", str(sim.kubeconfig)]) == 0
    wait_until(
        "team b's queue to be active", lambda: is_true(sim.kube.get(KUEUE_API, "ClusterQueue", "sync-team-b"), "Active")
    )
    sim.kube.create(gpu_job("held", "sync-team-b", gpus=10, run_for=run_for))
    wait_until("team b's job to be admitted", lambda: is_true(workload_of(sim.kube, "sync-team-b", "held"), "Admitted"))
    workload = workload_of(sim.kube, "sync-team-b", "held")
    assert workload is not None
    return f"sync-team-b/{workload['metadata']['name']}", str(config)


@pytest.fixture()
def team_b_jobs(sim: Sim) -> Iterator[None]:
    yield
    for job in sim.kube.list("batch/v1", "Job", "sync-team-b"):
        sim.kube.delete("batch/v1", "Job", job["metadata"]["name"], "sync-team-b")


def test_removing_a_team_with_work_is_refused_names_it_and_stops_it_when_told(
    sim: Sim, tmp_path: Path, capsys: pytest.CaptureFixture[str], team_b_jobs: None
) -> None:
    given = ["--kubeconfig", str(sim.kubeconfig)]
    held, _ = start_team_b(sim, tmp_path, "300s")
    sim.kube.create(gpu_job("waiting", "sync-team-b", gpus=10, pods=4, run_for="300s"))  # 40 GPUs: never fits
    wait_until("the big job's workload", lambda: workload_of(sim.kube, "sync-team-b", "waiting") is not None)
    waiting = f"sync-team-b/{(workload_of(sim.kube, 'sync-team-b', 'waiting') or {})['metadata']['name']}"
    removed = edited_example(tmp_path, without_team_b)
    capsys.readouterr()

    assert main(["quotas", "diff", str(removed), *given]) == ExitCode.CHECK_FAILED
    shown = capsys.readouterr().out
    line = next(x for x in shown.splitlines() if "ClusterQueue sync-team-b" in x)
    assert line.startswith("refuse")
    assert f"1 admitted holding 10 GPUs ({held})" in line and f"1 pending ({waiting})" in line
    assert main(["quotas", "apply", str(removed), *given]) == ExitCode.CHECK_FAILED
    assert f"1 admitted holding 10 GPUs ({held})" in capsys.readouterr().err
    queue = sim.kube.get(KUEUE_API, "ClusterQueue", "sync-team-b")
    assert queue is not None and "deletionTimestamp" not in queue["metadata"]  # nothing was changed
    assert sim.kube.get(KUEUE_API, "LocalQueue", "default", "sync-team-b") is not None

    assert (
        main(["quotas", "apply", str(removed), *given, "--drain-removed-teams", "stop", "--drain-timeout", "60"]) == 0
    )
    said = capsys.readouterr().err
    assert "stopped ClusterQueue sync-team-b" in said
    # Evicted by the stop, the admitted job waits too now; both are named with the pruned queue.
    pruned = next(x for x in said.splitlines() if x.startswith("prune") and "ClusterQueue sync-team-b" in x)
    assert f"2 pending ({', '.join(sorted([held, waiting]))})" in pruned
    assert sim.kube.get(KUEUE_API, "ClusterQueue", "sync-team-b") is None  # confirmed gone, not Terminating
    assert not is_true(workload_of(sim.kube, "sync-team-b", "held"), "Admitted")  # evicted: its GPUs are free


def test_removing_a_team_can_wait_for_its_work_to_finish(
    sim: Sim, tmp_path: Path, capsys: pytest.CaptureFixture[str], team_b_jobs: None
) -> None:
    start_team_b(sim, tmp_path, "6s")
    removed = edited_example(tmp_path, without_team_b)
    argv = ["quotas", "apply", str(removed), "--kubeconfig", str(sim.kubeconfig), "--drain-removed-teams", "wait"]
    assert main([*argv, "--drain-timeout", "120"]) == 0
    assert "waiting up to 120s for the work of sync-team-b to drain" in capsys.readouterr().err
    assert is_true(workload_of(sim.kube, "sync-team-b", "held"), "Finished")  # it ran to its end
    assert sim.kube.get(KUEUE_API, "ClusterQueue", "sync-team-b") is None


def test_a_queue_whose_stop_did_not_finish_runs_again_once_it_is_back_in_the_config(
    sim: Sim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = edited_example(tmp_path, lambda data: None)
    given = ["--kubeconfig", str(sim.kubeconfig)]
    assert main(["quotas", "apply", str(config), *given]) == 0

    def active() -> bool:
        return is_true(sim.kube.get(KUEUE_API, "ClusterQueue", "sync-team-a"), "Active")

    wait_until("team a's queue to be active", active)
    # What `--drain-removed-teams stop` leaves when the queue's deletion did not finish.
    sim.kube.apply(stop_policy("sync-team-a", "HoldAndDrain"), field_manager=DRAIN_MANAGER)
    wait_until("team a's queue to be stopped", lambda: not active())
    capsys.readouterr()
    assert main(["quotas", "apply", str(config), *given]) == 0
    assert "restarted ClusterQueue sync-team-a" in capsys.readouterr().err
    queue = sim.kube.get(KUEUE_API, "ClusterQueue", "sync-team-a") or {}
    assert queue["spec"].get("stopPolicy", "None") == "None"
    wait_until("team a's queue to be active again", active)


def test_a_cluster_queue_that_stays_terminating_is_reported_not_left_silently(sim: Sim) -> None:
    held = {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": "stuck-queue", "finalizers": ["example.com/hold"]},
        "spec": {"namespaceSelector": {}, "resourceGroups": []},
    }
    sim.kube.apply(held)
    sim.kube.delete(KUEUE_API, "ClusterQueue", "stuck-queue")
    try:
        with pytest.raises(PartialApply, match=r"stuck Terminating.*stuck-queue: no workloads") as stuck:
            confirm_removed(sim.kube, ["stuck-queue"], timeout=2)
        assert stuck.value.exit_code == ExitCode.PARTIAL
    finally:
        sim.kube.patch(KUEUE_API, "ClusterQueue", "stuck-queue", {"metadata": {"finalizers": None}})
        wait_until("the queue to go", lambda: sim.kube.get(KUEUE_API, "ClusterQueue", "stuck-queue") is None)

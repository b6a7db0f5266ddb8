"""`konduktor queue`, `why` and `submit` on the simulated cluster with examples/config.yaml (4 nodes x 10 H100,
team-a and team-b with 20 GPUs each), run as a member of team-a (impersonation of the team's group, bound as
the quotas render binds it). Every verdict is read from `-o json`. The capacity the platform publishes is
written by `publish_capacity` with an administrator's rights, as the platform does."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EXAMPLE, Sim
from sim_fixture import patch_node, release_nodes

from konduktor.cli.main import main as installer_main
from konduktor.cli.team import main
from konduktor.config.load import load_config
from konduktor.errors import ExitCode
from konduktor.kube.client import ApiError, Identity, Kube
from konduktor.paths import product_dir
from konduktor.queueing.cluster import publish_capacity
from konduktor.quotas.sync import sync_quotas
from konduktor.sim.workloads import gpu_job, is_true, job_state, workload_of
from konduktor.vocabulary import (
    CAPACITY_CONFIGMAP,
    HEALTH_TAINT_KEY,
    KUEUE_API,
    QUARANTINE_REASON,
    QUARANTINED_AT,
)
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
TEAM = "team-a"
MEMBER = ["--as", "alice", "--as-group", TEAM]
RESTRICTED_TEAM = "team-b"
RESTRICTED_MEMBER = ["--as", "bob", "--as-group", RESTRICTED_TEAM]
XID = "Xid 79: GPU fell off the bus"
QUARANTINE_TAINT = {"key": HEALTH_TAINT_KEY, "effect": "NoSchedule"}
LONG = "1h"  # kwok holds such a pod Running for the test's length


@pytest.fixture(scope="module")
def teams(sim: Sim) -> Iterator[Sim]:
    """examples/config.yaml's teams, team-a with the default security profile (gpu) and team-b with `restricted`,
    as an administrator may choose it for a team; the example's profiles are back after the module."""
    config = load_config(EXAMPLE).config
    restricted = config.teams[RESTRICTED_TEAM].model_copy(update={"pod_security": "restricted"})
    config = config.model_copy(update={"teams": {**config.teams, RESTRICTED_TEAM: restricted}})
    sync_quotas(sim.kube, config, prune=False, dry_run=False)
    wait_until(
        "team-a's ClusterQueue to be active", lambda: is_true(sim.kube.get(KUEUE_API, "ClusterQueue", TEAM), "Active")
    )
    yield sim
    sync_quotas(sim.kube, load_config(EXAMPLE).config, prune=False, dry_run=False)


@pytest.fixture
def clean(teams: Sim) -> Iterator[Sim]:
    """Each test starts and ends with no jobs in the team namespaces and every node healthy."""
    yield teams
    for namespace in ("team-a", "team-b"):
        for job in teams.kube.list("batch/v1", "Job", namespace):
            teams.kube.delete("batch/v1", "Job", job["metadata"]["name"], namespace)
    release_nodes(teams.kube, gpu_nodes(teams.kube))
    wait_until(
        "the team namespaces to hold no pods",
        lambda: not any(teams.kube.list("v1", "Pod", ns) for ns in ("team-a", "team-b")),
        timeout=60,
    )


def gpu_nodes(kube: Kube) -> list[str]:
    return sorted(n["metadata"]["name"] for n in kube.list("v1", "Node", label_selector="nvidia.com/gpu.product"))


def konduktor(
    sim: Sim, capsys: pytest.CaptureFixture[str], *args: str, member: Sequence[str] = MEMBER
) -> tuple[int, str, str]:
    code = main([*args, "--kubeconfig", str(sim.kubeconfig), *member])
    out, err = capsys.readouterr()
    return code, out, err


def why(sim: Sim, capsys: pytest.CaptureFixture[str], job: str, namespace: str = TEAM) -> tuple[int, dict[str, Any]]:
    publish_capacity(sim.kube)
    code, out, err = konduktor(sim, capsys, "why", job, "-n", namespace, "-o", "json")
    assert out, err
    return code, json.loads(out)


def kinds(verdict: dict[str, Any]) -> list[str]:
    return [r["kind"] for r in verdict["reasons"]]


def limits_only(job: dict[str, Any]) -> dict[str, Any]:
    """The job with its GPUs given as limits only, as NVIDIA's and PyTorch's examples give them."""
    for container in job["spec"]["template"]["spec"]["containers"]:
        resources = container["resources"]
        requests = {k: v for k, v in resources["requests"].items() if k != "nvidia.com/gpu"}
        container["resources"] = {"requests": requests, "limits": dict(resources["limits"])}
    return job


def running(
    sim: Sim, namespace: str, name: str, gpus: int, node: str | None = None, pods: int = 1, limits: bool = False
) -> None:
    """A job of the team's that holds its GPUs for the test's length (submitted as an administrator)."""
    job = gpu_job(name, namespace, gpus=gpus, run_for=LONG, node=node, pods=pods)
    sim.kube.create(limits_only(job) if limits else job)
    wait_until(
        f"{name} to be admitted", lambda: is_true(workload_of(sim.kube, namespace, name), "Admitted"), timeout=60
    )

    def on_nodes() -> bool:  # the published capacity counts GPUs of pods bound to nodes
        found = sim.kube.list("v1", "Pod", namespace, label_selector=f"job-name={name}")
        return len(found) == pods and all(p.get("status", {}).get("phase") == "Running" for p in found)

    wait_until(f"{name}'s pods to run", on_nodes, timeout=60)


def create_as_member(sim: Sim, job: dict[str, Any]) -> None:
    member = Kube(sim.kubeconfig, impersonate=Identity("alice", TEAM))
    try:
        member.create(job)
    finally:
        member.close()


def counted(sim: Sim, team: str, gpus: int) -> None:
    """Kueue updates a ClusterQueue's usage after admitting: wait for it before publishing the capacity."""

    def used() -> int:
        status = (sim.kube.get(KUEUE_API, "ClusterQueue", team) or {}).get("status", {})
        rows = [r for f in status.get("flavorsUsage", []) for r in f["resources"] if r["name"] == "nvidia.com/gpu"]
        return sum(int(r["total"]) for r in rows)

    wait_until(f"{team}'s ClusterQueue to count {gpus} GPUs", lambda: used() == gpus, timeout=30)


def queued(sim: Sim, name: str) -> None:
    wait_until(f"Kueue to make {name}'s Workload", lambda: workload_of(sim.kube, TEAM, name) is not None, timeout=30)


def test_greedy_team_over_its_quota_while_the_other_uses_its_own(
    clean: Sim, capsys: pytest.CaptureFixture[str]
) -> None:
    running(clean, "team-b", "b-own", 10, pods=2)
    running(clean, TEAM, "a-first", 10)
    running(clean, TEAM, "a-second", 10)
    create_as_member(clean, gpu_job("a-greedy", TEAM, gpus=8))
    queued(clean, "a-greedy")
    counted(clean, TEAM, 20)
    counted(clean, "team-b", 20)
    code, verdict = why(clean, capsys, "a-greedy")
    assert code == ExitCode.NEGATIVE and verdict["state"] == "pending" and verdict["position"] == 0
    quota = next(r["message"] for r in verdict["reasons"] if r["kind"] == "quota")
    assert "uses 20 of its 20 h100 GPUs" in quota and "a-first (10 GPUs)" in quota and "a-second (10 GPUs)" in quota
    assert "cohort-busy" in kinds(verdict) and verdict["source"] == "derived"
    code, out, _ = konduktor(clean, capsys, "queue", "-n", TEAM, "-o", "json")
    view = json.loads(out)
    assert code == 0 and view["source"] == "derived"
    assert [p["job"] for p in view["pending"]] == ["a-greedy"]
    assert view["queues"][0]["quota"][0]["used"] == 20
    # Admitted jobs answer 0.
    code, verdict = why(clean, capsys, "a-first")
    assert code == ExitCode.OK and verdict["state"] == "admitted"


def test_an_eight_gpu_pod_waits_while_gpus_are_fragmented_then_runs(
    clean: Sim, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = gpu_nodes(clean.kube)
    for index, node in enumerate(nodes):  # 3 GPUs held on each node: 28 free, 7 per node
        running(clean, "team-b", f"b-small-{index}", 3, node=node)
    create_as_member(clean, gpu_job("a-eight", TEAM, gpus=8, run_for=LONG))
    queued(clean, "a-eight")
    wait_until(
        "Kueue to try a-eight",
        lambda: (workload_of(clean.kube, TEAM, "a-eight") or {}).get("status", {}).get("conditions"),
    )
    code, verdict = why(clean, capsys, "a-eight")
    assert code == ExitCode.NEGATIVE and verdict["state"] == "pending", verdict
    message = next(r["message"] for r in verdict["reasons"] if r["kind"] == "fragmentation")
    assert "28 GPUs of h100 are free, but at most 7 on one node" in message
    clean.kube.delete("batch/v1", "Job", "b-small-0", "team-b")
    wait_until(
        "a-eight to be admitted", lambda: is_true(workload_of(clean.kube, TEAM, "a-eight"), "Admitted"), timeout=60
    )
    code, verdict = why(clean, capsys, "a-eight")
    assert code == ExitCode.OK and verdict["state"] == "admitted"


def test_a_twelve_gpu_pod_on_ten_gpu_nodes_never_fits(
    clean: Sim, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "twelve.yaml"
    manifest.write_text(yaml.safe_dump(gpu_job("a-twelve", TEAM, gpus=12, queue=None)))
    publish_capacity(clean.kube)
    code, _, err = konduktor(clean, capsys, "submit", str(manifest), "-n", TEAM)
    assert code == ExitCode.NEVER_FITS and "asks 12 GPUs, but no h100 node has more than 10" in err
    assert clean.kube.get("batch/v1", "Job", "a-twelve", TEAM) is None
    # Submitted some other way, `why` says the same.
    create_as_member(clean, gpu_job("a-twelve", TEAM, gpus=12))
    queued(clean, "a-twelve")
    code, verdict = why(clean, capsys, "a-twelve")
    assert code == ExitCode.NEVER_FITS and verdict["state"] == "never-fit"
    assert "at most 10 GPUs per pod" in verdict["remedies"][0]


def test_a_job_without_queue_label_in_a_team_namespace(clean: Sim, capsys: pytest.CaptureFixture[str]) -> None:
    create_as_member(clean, gpu_job("a-unlabelled", TEAM, gpus=1, queue=None, run_for=LONG))
    queued(clean, "a-unlabelled")
    # Kueue gives a job without a queue label the namespace's LocalQueue `default` (LocalQueueDefaulting).
    labels = clean.kube.get("batch/v1", "Job", "a-unlabelled", TEAM)["metadata"]["labels"]  # type: ignore[index]
    assert labels["kueue.x-k8s.io/queue-name"] == "default"
    wait_until(
        "a-unlabelled to be admitted", lambda: is_true(workload_of(clean.kube, TEAM, "a-unlabelled"), "Admitted")
    )
    code, verdict = why(clean, capsys, "a-unlabelled")
    assert code == ExitCode.OK and verdict["state"] == "admitted" and verdict["clusterQueue"] == TEAM
    # A queue label naming no LocalQueue: Kueue never admits it, and `why` says which queues there are.
    create_as_member(clean, gpu_job("a-lost", TEAM, gpus=1, queue="research"))
    queued(clean, "a-lost")
    code, verdict = why(clean, capsys, "a-lost")
    assert code == ExitCode.NEGATIVE and kinds(verdict) == ["wrong-queue"]
    assert "kueue.x-k8s.io/queue-name: default" in verdict["remedies"][0]


def test_quarantined_nodes_shown_as_shrinking_the_capacity(clean: Sim, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = gpu_nodes(clean.kube)
    for node in nodes[1:]:
        patch_node(
            clean.kube,
            node,
            lambda current: {
                "metadata": {
                    "annotations": {
                        QUARANTINE_REASON: "Xid 79: GPU fell off the bus",
                        QUARANTINED_AT: "2026-11-23T19:00:00Z",
                    }
                },
                "spec": {
                    "taints": [*current["spec"].get("taints", []), {"key": HEALTH_TAINT_KEY, "effect": "NoSchedule"}]
                },
            },
        )
    create_as_member(clean, gpu_job("a-two-nodes", TEAM, gpus=8, pods=2))
    queued(clean, "a-two-nodes")
    code, verdict = why(clean, capsys, "a-two-nodes")
    assert code == ExitCode.NEGATIVE and verdict["state"] == "pending"
    quarantines = [r["message"] for r in verdict["reasons"] if r["kind"] == "quarantine"]
    assert len(quarantines) == 3 and all("Xid 79" in m and "2026-11-23T19:00:00Z" in m for m in quarantines)
    assert nodes[1] in quarantines[0]
    assert "capacity" in kinds(verdict)


def test_without_published_capacity_why_still_answers_and_publish_capacity_publishes_it(
    clean: Sim, capsys: pytest.CaptureFixture[str]
) -> None:
    clean.kube.delete("v1", "ConfigMap", CAPACITY_CONFIGMAP, TEAM)
    code, out, _ = konduktor(clean, capsys, "queue", "-n", TEAM, "-o", "json")
    assert code == 0 and json.loads(out)["capacityPublished"] is False
    assert installer_main(["publish-capacity", "--kubeconfig", str(clean.kubeconfig)]) == 0
    # Every team namespace on the shared cluster gets it (other tests' teams too): the count is not this test's.
    said = capsys.readouterr().err
    assert re.search(
        r"published ConfigMap konduktor-capacity in \d+ team namespaces \(\d+ written, \d+ unchanged\): 4 GPU nodes",
        said,
    ), said
    assert clean.kube.get("v1", "ConfigMap", CAPACITY_CONFIGMAP, TEAM) is not None
    code, out, _ = konduktor(clean, capsys, "queue", "-n", TEAM, "-o", "json")
    view = json.loads(out)
    assert view["capacityPublished"] is True and view["queues"][0]["quota"][0]["nominal"] == 20


def test_the_member_cannot_read_another_teams_jobs(clean: Sim, capsys: pytest.CaptureFixture[str]) -> None:
    running(clean, "team-b", "b-secret", 1)
    code, out, err = konduktor(clean, capsys, "why", "b-secret", "-n", "team-b", "-o", "json")
    assert code == ExitCode.BAD_INPUT and out == "" and "may not read the queues of namespace team-b" in err
    code, _, err = konduktor(clean, capsys, "queue", "-n", "team-b")
    assert code == ExitCode.BAD_INPUT
    # The member reads the capacity published in the team's namespace, not another team's copy, nor any Node,
    # ClusterQueue or other team's pod.
    publish_capacity(clean.kube)
    member = Kube(clean.kubeconfig, impersonate=Identity("alice", TEAM))
    try:
        assert member.get("v1", "ConfigMap", CAPACITY_CONFIGMAP, TEAM) is not None
        for attempt in (
            lambda: member.get("v1", "ConfigMap", CAPACITY_CONFIGMAP, "team-b"),
            lambda: member.list("v1", "Node"),
            lambda: member.list(KUEUE_API, "ClusterQueue"),
            lambda: member.list("v1", "Pod", "team-b"),
        ):
            with pytest.raises(ApiError) as refused:
                attempt()
            assert refused.value.status == 403
    finally:
        member.close()


def test_submit_fills_in_queue_and_priority_and_prints_the_next_step(
    clean: Sim, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "job.yaml"
    job = gpu_job("a-submitted", TEAM, gpus=1, queue=None)
    del job["metadata"]["namespace"]
    manifest.write_text(yaml.safe_dump(job))
    publish_capacity(clean.kube)
    code, out, err = konduktor(clean, capsys, "submit", str(manifest), "-n", TEAM, "--priority", "urgent", "--dry-run")
    assert code == 0 and "created nothing" in err and clean.kube.get("batch/v1", "Job", "a-submitted", TEAM) is None
    code, out, err = konduktor(clean, capsys, "submit", str(manifest), "-n", TEAM, "--priority", "urgent")
    assert code == 0 and out == f"konduktor why a-submitted -n {TEAM}\n", err
    labels = clean.kube.get("batch/v1", "Job", "a-submitted", TEAM)["metadata"]["labels"]  # type: ignore[index]
    assert labels["kueue.x-k8s.io/queue-name"] == "default" and labels["kueue.x-k8s.io/priority-class"] == "urgent"


@pytest.mark.parametrize("example", ["single-node", "multi-node", "opportunistic"])
def test_each_example_job_is_submitted_admitted_and_completes(
    clean: Sim, capsys: pytest.CaptureFixture[str], example: str
) -> None:
    manifest = product_dir("examples") / "jobs" / f"{example}.yaml"
    name = yaml.safe_load(manifest.read_text())["metadata"]["name"]
    publish_capacity(clean.kube)
    code, out, err = konduktor(clean, capsys, "submit", str(manifest), "-n", TEAM)
    assert code == 0 and out == f"konduktor why {name} -n {TEAM}\n", err
    wait_until(f"{name} to complete", lambda: job_state(clean.kube, TEAM, name) == "complete", timeout=90)
    code, verdict = why(clean, capsys, name)
    assert code == ExitCode.FINISHED and verdict["state"] == "finished"


def test_a_job_on_borrowed_gpus_is_told_it_is_preempted_first_and_then_that_it_was(
    clean: Sim, capsys: pytest.CaptureFixture[str]
) -> None:
    running(clean, TEAM, "a-own-1", 10)
    running(clean, TEAM, "a-own-2", 10)
    # They name no priority class: Kueue gives them `default` (as standard), above the borrower's opportunistic.
    own = workload_of(clean.kube, TEAM, "a-own-1") or {}
    assert own["spec"].get("priority") == 1000, own["spec"]
    opportunistic = gpu_job("a-borrowing", TEAM, gpus=10, run_for=LONG, priority="opportunistic")
    create_as_member(clean, opportunistic)
    wait_until(
        "a-borrowing to be admitted", lambda: is_true(workload_of(clean.kube, TEAM, "a-borrowing"), "Admitted"), 60
    )
    counted(clean, TEAM, 30)
    code, verdict = why(clean, capsys, "a-borrowing")
    assert code == ExitCode.OK and verdict["state"] == "admitted", verdict
    borrowing = next(r["message"] for r in verdict["reasons"] if r["kind"] == "borrowing")
    assert "borrows 10 GPUs of h100 beyond its quota" in borrowing
    # The lending team takes its quota back: Kueue preempts the borrower, and its owner is told when and why.
    running(clean, "team-b", "b-own-1", 10)
    clean.kube.create(gpu_job("b-own-2", "team-b", gpus=10, run_for=LONG))

    def preempted_and_requeued() -> bool:
        borrower = workload_of(clean.kube, TEAM, "a-borrowing")
        return is_true(borrower, "Preempted") and not is_true(borrower, "QuotaReserved")

    wait_until("Kueue to preempt and requeue a-borrowing", preempted_and_requeued, timeout=60)
    code, verdict = why(clean, capsys, "a-borrowing")
    assert code == ExitCode.NEGATIVE and verdict["state"] == "pending", verdict
    preempted = next(r["message"] for r in verdict["reasons"] if r["kind"] == "preempted")
    assert preempted.endswith("to give the GPUs it borrowed back to the team that lent them (InCohortReclamation)")
    wait_until("b-own-2 to be admitted", lambda: is_true(workload_of(clean.kube, "team-b", "b-own-2"), "Admitted"), 60)


# Kueue's sample Job as Kueue ships it (site/static/examples/jobs/sample-job.yaml), its queue label set to the
# team's queue: a generateName and no name, namespace default, no securityContext.
KUEUE_SAMPLE_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  generateName: sample-job-
  namespace: default
  labels:
    kueue.x-k8s.io/queue-name: default
spec:
  parallelism: 3
  completions: 3
  suspend: true
  template:
    spec:
      containers:
      - name: dummy-job
        image: registry.k8s.io/e2e-test-images/agnhost:2.53
        args: ["entrypoint-tester", "hello", "world"]
        resources:
          requests:
            cpu: 1
            memory: "200Mi"
      restartPolicy: Never
"""


def test_kueues_sample_job_runs_as_written_in_a_gpu_team_and_is_fixed_for_a_restricted_one(
    clean: Sim, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "sample-job.yaml"
    manifest.write_text(KUEUE_SAMPLE_JOB)

    def admitted_by_its_generated_name(out: str, namespace: str) -> None:
        found = re.fullmatch(rf"konduktor why (sample-job-[a-z0-9]{{5}}) -n {namespace}\n", out)
        assert found, out
        created = clean.kube.get("batch/v1", "Job", found[1], namespace)
        assert created is not None and created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
        wait_until(
            f"{found[1]} to be admitted",
            lambda: is_true(workload_of(clean.kube, namespace, found[1]), "Admitted"),
            timeout=60,
        )

    # team-a's profile (gpu) lets it run as Kueue ships it: no securityContext, the image's user.
    code, out, err = konduktor(clean, capsys, "submit", str(manifest), "-n", TEAM)
    assert code == 0, err
    assert "metadata.namespace default: submitting in team-a (-n)" in err
    admitted_by_its_generated_name(out, TEAM)
    code, verdict = why(clean, capsys, out.split()[2])
    assert verdict["state"] in ("admitted", "finished"), verdict

    # team-b enforces Pod Security restricted: the Job would be created and every one of its pods refused.
    member_b = {"member": RESTRICTED_MEMBER}
    code, out, err = konduktor(clean, capsys, "submit", str(manifest), "-n", RESTRICTED_TEAM, **member_b)
    assert code == ExitCode.CHECK_FAILED and out == "", err
    assert "Pod Security restricted:latest: runAsNonRoot != true" in err and f"submit --fix {manifest}" in err
    assert clean.kube.list("batch/v1", "Job", RESTRICTED_TEAM) == []
    code, out, err = konduktor(clean, capsys, "submit", str(manifest), "-n", RESTRICTED_TEAM, "--fix", **member_b)
    assert code == 0, err
    assert "fix: spec.template.spec.securityContext.runAsNonRoot: true" in err
    admitted_by_its_generated_name(out, RESTRICTED_TEAM)


def test_a_queue_label_naming_no_local_queue_is_refused_with_the_teams_queues(
    clean: Sim, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "lost.yaml"
    manifest.write_text(yaml.safe_dump(gpu_job("a-lost-queue", TEAM, gpus=1, queue="research")))
    line = manifest.read_text().splitlines().index("    kueue.x-k8s.io/queue-name: research") + 1
    code, out, err = konduktor(clean, capsys, "submit", str(manifest), "-n", TEAM, "--dry-run")
    assert code == ExitCode.BAD_INPUT and out == ""
    assert f"{manifest}:{line}: kueue.x-k8s.io/queue-name: 'research' names no LocalQueue in namespace team-a" in err
    assert "(its queues: default)" in err
    assert clean.kube.get("batch/v1", "Job", "a-lost-queue", TEAM) is None


def test_a_twelve_gpu_pod_given_as_limits_is_refused_by_a_dry_run(
    clean: Sim, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "twelve-limits.yaml"
    manifest.write_text(yaml.safe_dump(limits_only(gpu_job("a-twelve-limits", TEAM, gpus=12, queue=None))))
    publish_capacity(clean.kube)
    code, _, err = konduktor(clean, capsys, "submit", str(manifest), "-n", TEAM, "--dry-run")
    assert code == ExitCode.NEVER_FITS and "asks 12 GPUs, but no h100 node has more than 10" in err
    assert clean.kube.get("batch/v1", "Job", "a-twelve-limits", TEAM) is None


def test_gpus_given_as_limits_count_in_why_and_queue_lists_the_running_jobs(
    clean: Sim, capsys: pytest.CaptureFixture[str]
) -> None:
    running(clean, "team-b", "b-own", 10, pods=2)
    running(clean, TEAM, "a-ddp-1", 10, limits=True)
    running(clean, TEAM, "a-ddp-2", 10, limits=True)
    create_as_member(clean, limits_only(gpu_job("a-ddp-next", TEAM, gpus=8)))
    queued(clean, "a-ddp-next")
    counted(clean, TEAM, 20)
    counted(clean, "team-b", 20)
    code, verdict = why(clean, capsys, "a-ddp-next")
    assert code == ExitCode.NEGATIVE and verdict["state"] == "pending" and verdict["gpus"] == 8, verdict
    quota = next(r["message"] for r in verdict["reasons"] if r["kind"] == "quota")
    assert "a-ddp-1 (10 GPUs)" in quota and "a-ddp-2 (10 GPUs)" in quota and "this job needs 8 GPUs" in quota
    code, out, _ = konduktor(clean, capsys, "queue", "-n", TEAM, "-o", "json")
    view = json.loads(out)
    assert code == 0 and [(p["job"], p["gpus"]) for p in view["pending"]] == [("a-ddp-next", 8)]
    # (A Workload of an earlier test's job may linger until the garbage collector removes it.)
    mine = sorted((r["job"], r["gpus"]) for r in view["running"] if r["job"].startswith("a-ddp"))
    assert mine == [("a-ddp-1", 10), ("a-ddp-2", 10)]
    code, _, err = konduktor(clean, capsys, "queue", "-n", TEAM)
    assert code == 0 and "running (admitted by Kueue, earliest first):" in err


def test_a_root_ngc_job_is_refused_in_a_restricted_namespace_and_fixed(
    clean: Sim, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job = limits_only(gpu_job("a-ngc", RESTRICTED_TEAM, gpus=1, queue=None, run_for=LONG))
    spec = job["spec"]["template"]["spec"]
    del spec["securityContext"], spec["containers"][0]["securityContext"]  # the image's user: root
    manifest = tmp_path / "ngc.yaml"
    manifest.write_text(yaml.safe_dump(job))
    # The default profile (gpu, team-a) accepts it as written.
    code, _, err = konduktor(clean, capsys, "submit", str(manifest), "-n", TEAM, "--dry-run")
    assert code == 0, err
    member_b = {"member": RESTRICTED_MEMBER}
    code, _, err = konduktor(clean, capsys, "submit", str(manifest), "-n", RESTRICTED_TEAM, **member_b)
    assert code == ExitCode.CHECK_FAILED, err
    for check in ("allowPrivilegeEscalation != false", "unrestricted capabilities", "runAsNonRoot != true"):
        assert check in err
    assert clean.kube.get("batch/v1", "Job", "a-ngc", RESTRICTED_TEAM) is None
    code, out, err = konduktor(clean, capsys, "submit", str(manifest), "-n", RESTRICTED_TEAM, "--fix", **member_b)
    assert code == 0 and out == f"konduktor why a-ngc -n {RESTRICTED_TEAM}\n", err
    assert "fix: spec.template.spec.containers[0].env: + HOME=/home/konduktor" in err
    # Its pods pass the enforced level: they are created and run.
    wait_until(
        "a-ngc to be admitted", lambda: is_true(workload_of(clean.kube, RESTRICTED_TEAM, "a-ngc"), "Admitted"), 60
    )

    def pods() -> list[dict[str, Any]]:
        found = clean.kube.list("v1", "Pod", RESTRICTED_TEAM, label_selector="batch.kubernetes.io/job-name=a-ngc")
        return [p for p in found if p.get("status", {}).get("phase") == "Running"]

    wait_until("a-ngc's pod to run", lambda: bool(pods()), timeout=60)
    pod = pods()[0]
    assert pod["spec"]["securityContext"]["runAsUser"] == 1000
    assert {"name": "HOME", "value": "/home/konduktor"} in pod["spec"]["containers"][0]["env"]
    # Submitted again: refused as existing, nothing changed.
    code, _, err = konduktor(clean, capsys, "submit", str(manifest), "-n", RESTRICTED_TEAM, "--fix", **member_b)
    assert code == ExitCode.CHECK_FAILED and "Job a-ngc already exists in team-b" in err


def test_why_of_a_running_job_on_a_quarantined_node_says_so(clean: Sim, capsys: pytest.CaptureFixture[str]) -> None:
    node = gpu_nodes(clean.kube)[0]
    running(clean, TEAM, "a-on-bad-node", 2, node=node)
    patch_node(
        clean.kube,
        node,
        lambda current: {
            "metadata": {"annotations": {QUARANTINE_REASON: XID, QUARANTINED_AT: "2026-11-23T19:00:00Z"}},
            "spec": {"taints": [*current["spec"].get("taints", []), QUARANTINE_TAINT]},
        },
    )
    code, verdict = why(clean, capsys, "a-on-bad-node")
    assert code == ExitCode.OK and verdict["state"] == "admitted", verdict
    told = next(r["message"] for r in verdict["reasons"] if r["kind"] == "quarantined-node")
    assert f"runs on node {node}, quarantined since 2026-11-23T19:00:00Z: {XID}" in told

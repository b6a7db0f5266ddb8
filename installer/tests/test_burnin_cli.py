"""`konduktor-install burnin`: the run's decisions on plain data, then the command on the simulated cluster.

Pods on the simulated cluster run no containers (kwok marks them Running, then Succeeded) and the API serves no
log for them, so the sim tests assert what is truthfully observable: the Jobs as the API server stored them,
that the scheduler placed them, that they complete, that silent steps are ERROR "no output", the outputs'
shape, the exit codes, and that quarantine taints FAIL nodes only. A FAIL comes from a recorded nvidia-smi
output fed through the pure path, never from faked logs on the cluster.
"""

from __future__ import annotations

import json
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, Sim
from ruamel.yaml import YAML
from sim_fixture import installer_events, release_nodes

from konduktor.burnin.manifests import RUN_LABEL, node_job_name, scripts_configmap_name, taint_tolerations
from konduktor.burnin.plan import (
    JOB_CHECK,
    NodeRun,
    Target,
    complete_verdict,
    exit_code,
    no_gpu_verdict,
    pod_problem,
    select_targets,
)
from konduktor.burnin.record import record_of
from konduktor.burnin.results import BurnInReport, CheckResult, NodeVerdict, Verdict
from konduktor.burnin.runner import BurnInRunner
from konduktor.burnin.tiers import options_for_tier
from konduktor.burnin.verdict import NodeEvidence, judge_node
from konduktor.cli.arguments import parse_timeout
from konduktor.cli.main import main
from konduktor.config.load import load_config
from konduktor.errors import UsageError
from konduktor.health.decide import CONDITION_TYPE, RecordEvent, SetCondition, Taint, UpdateNode
from konduktor.health.node_writes import node_patch
from konduktor.health.quarantine import quarantine_failed, quarantine_plan
from konduktor.kube.client import Kube
from konduktor.kube.job_state import JobPhase, JobState, job_state, unschedulable_for
from konduktor.ops.burnin import report_name
from konduktor.sim.gpus import FAULTS_ANNOTATION, LOGS_ANNOTATION
from konduktor.vocabulary import (
    BURNIN_TIER_ANNOTATION,
    HEALTH_TAINT_KEY,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    REQUALIFICATION_RESULT,
)
from konduktor.waiting import wait_until

DATA = Path(__file__).parent / "data" / "burnin"
H100 = "NVIDIA-H100-80GB-HBM3"
NAMESPACE = "konduktor-burnin-test"
NODES = [f"gpu-h100-{i:04d}" for i in range(4)]
QUICK = options_for_tier("quick")
HOLD = "pod-complete.stage.kwok.x-k8s.io/delay"  # kwok keeps such a pod Running this long


def node(
    name: str,
    gpus: int = 10,
    taints: tuple[dict[str, str], ...] = (),
    labels: dict[str, str] | None = None,
    product: str | None = H100,
) -> dict[str, Any]:
    gpu_labels = {"nvidia.com/gpu.product": product} if product else {}
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "7",
            "uid": f"uid-{name}",
            "labels": {"kubernetes.io/hostname": name, **gpu_labels, **(labels or {})},
            "annotations": {},
        },
        "spec": {"taints": list(taints)},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "192"}},
    }


def failing_verdict(name: str) -> NodeVerdict:
    """A real FAIL: the recorded nvidia-smi and kernel log of a node with an Xid 79 and uncorrected ECC errors."""
    log = (DATA / "passive_h100_faulty.txt").read_text()
    verdict = judge_node(NodeEvidence(name, H100, 8, {"passive": log}), QUICK)
    assert verdict.verdict is Verdict.FAIL
    return verdict


def passing_verdict(name: str) -> NodeVerdict:
    return NodeVerdict(name, H100, "h100-sxm5", Verdict.PASS, (CheckResult("inventory", Verdict.PASS, "passive"),))


# --- which nodes, and how their Jobs tolerate them ---------------------------------------------------------------


def test_targets_are_the_named_nodes_else_the_configs_else_every_gpu_node() -> None:
    cluster = [
        node("gpu-a"),
        node("gpu-b", gpus=8),  # two GPUs lost: tested, and nvidia-smi must still show the type's 10
        node("gpu-c", gpus=0),  # every GPU lost: no Job can hold them, so it is reported without one
        node("cpu-1", gpus=0, product=None),
        node("other", product="NVIDIA-A100-SXM4-80GB"),
    ]
    named = select_targets(cluster, None, ["gpu-b", "gpu-b"])
    assert [(t.node, t.gpus, t.expected_gpus) for t in named] == [("gpu-b", 8, 8)]
    config = load_config(EXAMPLE).config  # H100 nodes with 10 GPUs each
    by_config = select_targets(cluster, config, [])
    assert [(t.node, t.gpus, t.expected_gpus) for t in by_config] == [
        ("gpu-a", 10, 10),
        ("gpu-b", 8, 10),
        ("gpu-c", 0, 10),
    ]
    assert no_gpu_verdict(by_config[2]).verdict is Verdict.ERROR
    assert [t.node for t in select_targets(cluster, None, [])] == ["gpu-a", "gpu-b", "other"]


def test_unknown_or_missing_nodes_are_usage_errors() -> None:
    with pytest.raises(UsageError) as unknown:
        select_targets([node("gpu-h100-0001")], None, ["gpu-h100-001"])
    assert unknown.value.message == "no node named gpu-h100-001 in this cluster"
    assert unknown.value.hint == "did you mean 'gpu-h100-0001'?"
    with pytest.raises(UsageError, match=r"no node advertises nvidia\.com/gpu"):
        select_targets([node("cpu-1", gpus=0)], None, [])


def test_jobs_tolerate_the_nodes_own_taints_once() -> None:
    taints = [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "vendor.example.com/repair", "value": "x", "effect": "NoExecute"},
        {"key": "vendor.example.com/repair", "value": "y", "effect": "NoExecute"},
    ]
    assert taint_tolerations(taints) == [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "vendor.example.com/repair", "operator": "Exists", "effect": "NoExecute"},
    ]


# --- what the Job and its pod say ---------------------------------------------------------------------------------


def test_job_states() -> None:
    def job(kind: str, status: str = "True", **extra: str) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": kind, "status": status, **extra}]}}

    assert job_state(None) == JobState(JobPhase.GONE)
    assert job_state({"status": {}}) == JobState(JobPhase.RUNNING)
    assert job_state(job("SuccessCriteriaMet")) == JobState(JobPhase.RUNNING)
    assert job_state(job("Complete")) == JobState(JobPhase.COMPLETE)
    assert job_state(job("Complete", "False")) == JobState(JobPhase.RUNNING)
    failed = job_state(job("Failed", reason="DeadlineExceeded", message="Job was active longer than specified"))
    assert failed == JobState(JobPhase.FAILED, "DeadlineExceeded: Job was active longer than specified")


def test_pod_problems_say_why_a_step_is_silent() -> None:
    assert pod_problem(None) == "no pod was created for the Job"
    pending = {
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "message": "0/4 nodes are available"}],
        }
    }
    assert pod_problem(pending) == "not scheduled: 0/4 nodes are available"
    pulling = {
        "status": {
            "initContainerStatuses": [
                {"name": "passive", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}
            ]
        }
    }
    assert pod_problem(pulling) == "passive: ImagePullBackOff: not found"
    killed = {"status": {"containerStatuses": [{"name": "matmul", "state": {"terminated": {"exitCode": 137}}}]}}
    assert pod_problem(killed) == "matmul: exited 137 (killed)"
    done = {"status": {"containerStatuses": [{"name": "passive", "state": {"terminated": {"exitCode": 0}}}]}}
    assert pod_problem(done) is None


def silent(name: str) -> NodeVerdict:
    return judge_node(NodeEvidence(name, H100, 10, {"passive": None}), QUICK)


def test_silent_steps_are_errors_that_say_no_output_and_why() -> None:
    why = "the API served no log (400 'no logs found for container \"passive\"')"
    verdict = complete_verdict(silent("n1"), NodeRun(JobState(JobPhase.COMPLETE), {"passive": why}), "r1")
    assert verdict.verdict is Verdict.ERROR and not verdict.quarantine
    (check,) = verdict.checks
    assert (check.summary, check.reasons) == ("no output", (f"no output from the passive step: {why}",))


def test_a_job_that_failed_vanished_or_outlived_the_wait_is_an_error() -> None:
    def job_check(state: JobState, problem: str | None = None) -> CheckResult:
        verdict = complete_verdict(silent("n1"), NodeRun(state, {"passive": "x"}, problem), "r7")
        assert verdict.verdict is Verdict.ERROR
        return verdict.checks[-1]

    failed = job_check(JobState(JobPhase.FAILED, "DeadlineExceeded: too long"), "not scheduled: 0/4 nodes")
    assert (failed.check, failed.summary) == (JOB_CHECK, "Job failed")
    assert failed.reasons == ("the Job failed: DeadlineExceeded: too long", "not scheduled: 0/4 nodes")
    gone = job_check(JobState(JobPhase.GONE))
    assert gone.reasons == ("the Job was deleted before the run read its result",)
    running = job_check(JobState(JobPhase.RUNNING))
    assert running.reasons == ("still running when the wait ended; read it later: konduktor-install burnin show r7",)
    # A FAIL stays a FAIL whatever happened to the Job afterwards.
    fail = complete_verdict(failing_verdict("n2"), NodeRun(JobState(JobPhase.GONE), {}), "r7")
    assert fail.verdict is Verdict.FAIL and fail.checks[-1].check == JOB_CHECK


def test_an_unschedulable_pod_says_since_when_and_why() -> None:
    def pod(reason: str, at: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
        condition = {"type": "PodScheduled", "status": "False", "reason": reason, "lastTransitionTime": at}
        return {"status": {"conditions": [{**condition, "message": "0/5 nodes are available: Insufficient gpu."}]}}

    at = 1767225600.0  # 2026-01-01T00:00:00Z
    assert unschedulable_for(pod("Unschedulable"), at + 75) == (75.0, "0/5 nodes are available: Insufficient gpu.")
    assert unschedulable_for(pod("SchedulingGated"), at + 75) is None  # gated: not the scheduler's verdict
    assert unschedulable_for({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}, at) is None
    assert unschedulable_for(None, at) is None
    error = complete_verdict(
        silent("n1"), NodeRun(JobState(JobPhase.UNSCHEDULABLE, "0/5 nodes: Insufficient gpu. (for 61s)"), {}, "x"), "r"
    )
    assert error.verdict is Verdict.ERROR
    assert (error.checks[-1].summary, error.checks[-1].reasons) == (
        "unschedulable",
        ("the pod could not be scheduled: 0/5 nodes: Insufficient gpu. (for 61s)",),
    )
    assert JobState(JobPhase.UNSCHEDULABLE).finished  # no longer waited for: not a wait that ran out (exit 4)


def test_exit_codes() -> None:
    def report(*verdicts: Verdict) -> BurnInReport:
        nodes = tuple(NodeVerdict(f"n{i}", None, None, v, ()) for i, v in enumerate(verdicts))
        return BurnInReport("r", "quick", "t", nodes)

    assert exit_code(report(Verdict.PASS, Verdict.WARN, Verdict.SKIPPED), waited_out=False) == 0
    assert exit_code(report(Verdict.PASS, Verdict.ERROR), waited_out=False) == 1
    assert exit_code(report(Verdict.PASS, Verdict.FAIL), waited_out=False) == 1
    assert exit_code(report(Verdict.ERROR, Verdict.PASS), waited_out=True) == 4
    assert exit_code(report(Verdict.FAIL, Verdict.ERROR), waited_out=True) == 1  # hardware evidence wins


def test_timeouts() -> None:
    assert parse_timeout("90") == 90 and parse_timeout("45m") == 2700 and parse_timeout("1h30m") == 5400
    for bad in ("soon", "0", "-5m", "10d"):
        with pytest.raises(UsageError):
            parse_timeout(bad)


# --- quarantine planning ------------------------------------------------------------------------------------------


def test_quarantine_plans_the_health_controllers_writes_for_fail_nodes_only() -> None:
    cluster = [node(n, taints=({"key": "nvidia.com/gpu", "effect": "NoSchedule"},)) for n in ("a", "b", "c")]
    plan = quarantine_plan([failing_verdict("a"), failing_verdict("b"), passing_verdict("c")], cluster, 1.7e9)
    updates = [a for a in plan.actions if isinstance(a, UpdateNode)]
    # Both FAIL nodes: the operator asked, so the fleet breaker's one-in-ten limit does not hold them back.
    assert [u.node for u in updates] == ["a", "b"]
    assert updates[0].add_taints == (Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy"),)
    assert updates[0].annotations[QUARANTINED_AT] == "2023-11-14T22:13:20Z"
    assert (updates[0].annotations[QUARANTINE_REASON] or "").startswith("BurnInFailed")
    assert {a.node for a in plan.actions if isinstance(a, SetCondition) and not a.healthy} == {"a", "b"}
    assert {a.node for a in plan.actions if isinstance(a, RecordEvent)} == {"a", "b"}
    assert "c" not in {a.node for a in plan.actions}


def test_quarantine_taints_once_and_respects_opt_out_and_foreign_taints() -> None:
    taint = {"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}
    ours = node("ours", taints=(taint,))
    ours["metadata"]["annotations"] = {QUARANTINED_AT: "2026-01-01T00:00:00Z", QUARANTINE_REASON: "BurnInFailed x"}
    foreign = node("foreign", taints=(taint,))  # our key, but not our annotation: someone else's
    opted_out = node("opted", labels={"konduktor.ai/gpu-health-opt-out": "true"})
    verdicts = [failing_verdict(n) for n in ("ours", "foreign", "opted")]
    plan = quarantine_plan(verdicts, [ours, foreign, opted_out], 1.7e9)
    assert not [a for a in plan.actions if isinstance(a, UpdateNode) and a.add_taints]
    # Already quarantined by the controller: this FAIL is a failed re-test, recorded as one.
    (attempt,) = [a for a in plan.actions if isinstance(a, UpdateNode)]
    assert attempt.node == "ours" and (attempt.annotations[REQUALIFICATION_RESULT] or "").startswith("FAIL")
    assert "opted" not in {a.node for a in plan.actions}
    assert any(n.node == "foreign" and "not claiming it" in n.message for n in plan.notices)


def test_node_patch_is_conditional_and_empty_when_nothing_changes() -> None:
    target = node("a", taints=({"key": "nvidia.com/gpu", "effect": "NoSchedule"},))
    update = UpdateNode("a", add_taints=(Taint(HEALTH_TAINT_KEY, "NoSchedule", "unhealthy"),), annotations={"k": "v"})
    assert node_patch(target, update) == {
        "metadata": {"resourceVersion": "7", "annotations": {"k": "v"}},
        "spec": {
            "taints": [
                {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                {"key": HEALTH_TAINT_KEY, "effect": "NoSchedule", "value": "unhealthy"},
            ]
        },
    }
    done = node("a", taints=({"key": HEALTH_TAINT_KEY, "effect": "NoSchedule", "value": "unhealthy"},))
    done["metadata"]["annotations"] = {"k": "v"}
    assert node_patch(done, update) is None


# --- the command on the simulated cluster -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(sim: Sim) -> Iterator[Sim]:
    yield sim
    release_nodes(sim.kube, NODES)
    sim.kube.delete("v1", "Namespace", NAMESPACE)


def burnin(capsys: pytest.CaptureFixture[str], sim: Sim, *args: str) -> tuple[int, str, str]:
    code = main(["burnin", *args, "--namespace", NAMESPACE, "--kubeconfig", str(sim.kubeconfig)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


def run_jobs(kube: Kube, run_id: str) -> dict[str, dict[str, Any]]:
    jobs = kube.list("batch/v1", "Job", NAMESPACE, label_selector=f"{RUN_LABEL}={run_id}")
    return {j["metadata"]["annotations"]["konduktor.ai/node"]: j for j in jobs}


@pytest.mark.sim
def test_quick_burnin_on_two_nodes(capsys: pytest.CaptureFixture[str], cluster: Sim) -> None:
    kube, run_id, chosen = cluster.kube, "test-quick", NODES[:2]
    code, out, err = burnin(
        capsys, cluster, "--nodes", ",".join(chosen), "--level", "quick", "--run-id", run_id, "-o", "json"
    )
    assert code == 0, err  # the sim's GPU agent prints what healthy H100s print
    report = json.loads(out)
    assert (report["run_id"], report["tier"], report["verdict"]) == (run_id, "quick", "PASS")
    assert [n["node"] for n in report["nodes"]] == chosen
    for item in report["nodes"]:
        assert item["verdict"] == "PASS" and item["quarantine"] is False and item["gpu_model"] == "h100-sxm5"
        checks = {c["check"]: c for c in item["checks"]}
        assert checks["inventory"]["summary"] == "10 x H100 SXM5 80GB"
        assert (checks["ecc"]["verdict"], checks["kernel_log"]["verdict"]) == ("PASS", "PASS")
    assert "burn-in test-quick: 2 PASS, 0 WARN, 0 FAIL, 0 ERROR, 0 SKIPPED" in err
    # The same run collected again, as YAML: the same document.
    again = burnin(capsys, cluster, "--nodes", ",".join(chosen), "--level", "quick", "--run-id", run_id, "-o", "yaml")
    assert again[0] == 0 and YAML(typ="safe").load(again[1]) == report

    # The Jobs as the API server stored them, and where the scheduler put their pods.
    jobs = run_jobs(kube, run_id)
    assert sorted(jobs) == chosen
    for name, job in jobs.items():
        spec, pod_spec = job["spec"], job["spec"]["template"]["spec"]
        assert (spec["backoffLimit"], spec["ttlSecondsAfterFinished"]) == (0, 3600)
        assert spec["activeDeadlineSeconds"] == QUICK.deadline_s
        assert "nodeName" not in pod_spec
        terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [name]}]}
        ]
        for container in pod_spec.get("initContainers", []) + pod_spec["containers"]:
            assert container["resources"]["requests"]["nvidia.com/gpu"] == "10"
            assert container["resources"]["limits"]["nvidia.com/gpu"] == "10"
        assert {t["key"] for t in pod_spec["tolerations"]} >= {"nvidia.com/gpu", HEALTH_TAINT_KEY}
        assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
        (pod,) = kube.list(
            "v1", "Pod", NAMESPACE, label_selector=f"batch.kubernetes.io/job-name={job['metadata']['name']}"
        )
        assert (pod["spec"]["nodeName"], pod["status"]["phase"]) == (name, "Succeeded")
    scripts = kube.get("v1", "ConfigMap", scripts_configmap_name(run_id), NAMESPACE)
    assert scripts is not None and {"matmul.py", "allreduce.py"} <= set(scripts["data"])
    # Owned by the run's Jobs, so it goes with the last of them.
    assert {o["uid"] for o in scripts["metadata"]["ownerReferences"]} == {j["metadata"]["uid"] for j in jobs.values()}


@pytest.mark.sim
def test_show_reads_a_past_run_and_starts_nothing(capsys: pytest.CaptureFixture[str], cluster: Sim) -> None:
    """`burnin show RUN` (the hint a burn-in prints) reads the run's recorded report, else its Jobs, pods and logs;
    it creates, changes and deletes nothing. Each node the run judged carries its verdict."""
    kube, run_id, chosen = cluster.kube, "test-quick", NODES[:2]
    for name in chosen:
        record = record_of(kube.get("v1", "Node", name) or {})
        assert record is not None and (record.verdict, record.level, record.run) == ("PASS", "quick", run_id)
    jobs = {name: job["metadata"]["uid"] for name, job in run_jobs(kube, run_id).items()}
    code, out, err = burnin(capsys, cluster, "show", run_id, "-o", "json")
    assert code == 0, err
    recorded = json.loads(out)
    assert (recorded["run_id"], recorded["verdict"], [n["node"] for n in recorded["nodes"]]) == (run_id, "PASS", chosen)
    kube.delete("v1", "ConfigMap", report_name(run_id), NAMESPACE)  # a run that recorded no report
    code, out, err = burnin(capsys, cluster, "show", run_id, "-o", "json")
    assert code == 0, err
    from_jobs = json.loads(out)
    assert [(n["node"], n["verdict"]) for n in from_jobs["nodes"]] == [(n, "PASS") for n in chosen]
    assert kube.get("v1", "ConfigMap", report_name(run_id), NAMESPACE) is None  # show writes nothing
    assert {name: job["metadata"]["uid"] for name, job in run_jobs(kube, run_id).items()} == jobs  # nor starts
    code, _, err = burnin(capsys, cluster, "show", "no-such-run")
    assert code == 2 and "no burn-in run 'no-such-run'" in err


@pytest.mark.sim
def test_rerun_reuses_the_runs_jobs_and_renders_table_and_junit(
    capsys: pytest.CaptureFixture[str], cluster: Sim
) -> None:
    kube, run_id, chosen = cluster.kube, "test-rerun", NODES[2:]
    for name in chosen:  # pods on these nodes print nothing: what a run says when a step leaves no output
        kube.patch("v1", "Node", name, {"metadata": {"annotations": {LOGS_ANNOTATION: "none"}}})
    args = ("--nodes", ",".join(chosen), "--level", "quick", "--run-id", run_id)
    code, out, _ = burnin(capsys, cluster, *args)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].split() == ["NODE", "MODEL", "PASSIVE", "VERDICT"]
    assert lines[1].split() == [chosen[0], "h100-sxm5", "ERROR", "no", "output", "ERROR"]
    assert f"  {chosen[1]} inventory ERROR: no output from the passive step" in out
    first = {n: j["metadata"]["uid"] for n, j in run_jobs(kube, run_id).items()}

    code, out, err = burnin(capsys, cluster, *args, "-o", "junit")
    assert code == 1
    assert {n: j["metadata"]["uid"] for n, j in run_jobs(kube, run_id).items()} == first
    assert f"reusing Job {node_job_name(run_id, chosen[0])}" in err
    root = ET.fromstring(out)
    assert (root.tag, root.get("tests"), root.get("errors"), root.get("failures")) == ("testsuites", "2", "2", "0")
    assert [s.get("name") for s in root.iter("testsuite")] == chosen
    error = next(root.iter("error"))
    assert error.get("type") == "ERROR" and "no output" in (error.get("message") or "")

    # Another level for the same run id: that Job is replaced, not reused.
    code, out, err = burnin(
        capsys, cluster, "--nodes", chosen[0], "--level", "standard", "--run-id", run_id, "-o", "json"
    )
    assert code == 1 and "replacing Job" in err
    replaced = run_jobs(kube, run_id)[chosen[0]]
    assert replaced["metadata"]["uid"] != first[chosen[0]]
    assert [c["name"] for c in replaced["spec"]["template"]["spec"]["initContainers"]] == [
        "passive",
        "dcgm-diag",
        "matmul",
    ]
    checks = json.loads(out)["nodes"][0]["checks"]
    assert [c["check"] for c in checks] == ["inventory", "dcgm_diag", "matmul_tflops", "nccl_allreduce"]
    assert {c["summary"] for c in checks} == {"no output"}
    for name in chosen:
        kube.patch("v1", "Node", name, {"metadata": {"annotations": {LOGS_ANNOTATION: None}}})


def held_runner(kube: Kube, run_id: str, name: str) -> tuple[BurnInRunner, list[Target]]:
    """A quick run on one node whose pod kwok keeps Running for five minutes."""
    runner = BurnInRunner(kube, NAMESPACE, run_id, QUICK)
    targets = select_targets(kube.list("v1", "Node"), None, [name])
    runner.prepare()
    job = runner.job(targets[0])
    job["spec"]["template"]["metadata"]["annotations"][HOLD] = "300s"
    runner.submit([job], lambda _: None)
    return runner, targets


@pytest.mark.sim
def test_a_job_deleted_midway_reports_error_for_its_node(cluster: Sim) -> None:
    kube, run_id = cluster.kube, "test-deleted"
    runner, targets = held_runner(kube, run_id, NODES[3])
    name = node_job_name(run_id, NODES[3])

    def delete_once_running() -> None:
        wait_until(
            "the burn-in pod to run",
            lambda: any(
                p["status"].get("phase") == "Running"
                for p in kube.list("v1", "Pod", NAMESPACE, label_selector=f"batch.kubernetes.io/job-name={name}")
            ),
            timeout=60,
        )
        kube.delete("batch/v1", "Job", name, NAMESPACE)

    deleter = threading.Thread(target=delete_once_running)
    deleter.start()
    started = time.monotonic()
    verdicts, waited_out = runner.collect(targets, 120, lambda _: None)
    deleter.join()
    assert not waited_out and time.monotonic() - started < 60
    (verdict,) = verdicts
    assert verdict.verdict is Verdict.ERROR
    assert verdict.checks[-1].reasons[0] == "the Job was deleted before the run read its result"


@pytest.mark.sim
def test_a_wait_that_ends_first_asks_to_collect_later(cluster: Sim) -> None:
    kube, run_id = cluster.kube, "test-waited"
    runner, targets = held_runner(kube, run_id, NODES[2])
    verdicts, waited_out = runner.collect(targets, 3, lambda _: None)
    assert waited_out
    assert verdicts[0].checks[-1].reasons == (
        "still running when the wait ended; read it later: konduktor-install burnin show test-waited",
    )
    assert exit_code(BurnInReport(run_id, "quick", "t", verdicts), waited_out) == 4
    kube.delete("batch/v1", "Job", node_job_name(run_id, NODES[2]), NAMESPACE)


@pytest.mark.sim
def test_quarantine_flag_taints_no_node_that_did_not_fail(capsys: pytest.CaptureFixture[str], cluster: Sim) -> None:
    code, _, err = burnin(
        capsys, cluster, "--nodes", NODES[0], "--level", "quick", "--run-id", "test-noquar", "--quarantine"
    )
    assert code == 0
    assert "quarantine: no node FAILed" in err
    for name in NODES:
        found = cluster.kube.get("v1", "Node", name)
        assert found is not None and not [t for t in found["spec"].get("taints", []) if t["key"] == HEALTH_TAINT_KEY]


@pytest.mark.sim
def test_standard_burnin_end_to_end_finds_the_corrupting_gpu_and_quarantines_its_node_once(
    capsys: pytest.CaptureFixture[str], cluster: Sim
) -> None:
    """Jobs on fake nodes, step output through the API (the sim's GPU agent, one GPU corrupting data),
    verdicts, the JSON and JUnit reports, and the quarantine; a second run adds no taint and no event."""
    kube, bad, good = cluster.kube, NODES[1], NODES[0]
    kube.patch("v1", "Node", bad, {"metadata": {"annotations": {FAULTS_ANNOTATION: "7=sdc"}}})
    try:
        args = ("--nodes", f"{good},{bad}", "--level", "standard", "--quarantine")
        code, out, err = burnin(capsys, cluster, *args, "--run-id", "test-e2e", "-o", "json")
        assert code == 1, err
        report = {n["node"]: n for n in json.loads(out)["nodes"]}
        assert (report[good]["verdict"], report[bad]["verdict"]) == ("PASS", "FAIL")
        checks = {c["check"]: c for c in report[bad]["checks"]}
        assert [c["check"] for c in report[good]["checks"] if c["verdict"] != "PASS"] == ["retired_pages"]
        assert checks["matmul_sdc"]["verdict"] == "FAIL"
        assert checks["matmul_sdc"]["reasons"] == ["GPU7: product differs from the fleet (silent data corruption)"]
        assert (checks["matmul_tflops"]["verdict"], checks["nccl_allreduce"]["verdict"]) == ("PASS", "PASS")
        assert report[bad]["quarantine"] is True and report[good]["quarantine"] is False
        assert f"quarantine: {bad}: tainted {HEALTH_TAINT_KEY}=unhealthy:NoSchedule" in err

        code, out, err = burnin(capsys, cluster, *args, "--run-id", "test-e2e-again", "-o", "junit")
        assert code == 1
        root = ET.fromstring(out)
        assert (root.get("failures"), root.get("errors")) == ("1", "0")
        assert [s.get("name") for s in root.iter("testsuite")] == [good, bad]
        failure = next(root.iter("failure"))
        assert "silent data corruption" in (failure.get("message") or "") + (failure.text or "")

        node = kube.get("v1", "Node", bad)
        assert node is not None
        assert [t for t in node["spec"]["taints"] if t["key"] == HEALTH_TAINT_KEY] == [
            {"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}
        ]
        events = [e for e in installer_events(kube) if e["involvedObject"]["name"] == bad]
        assert [e["reason"] for e in events].count("BurnInFailed") == 1
        healthy = kube.get("v1", "Node", good)
        assert healthy is not None and not [
            t for t in healthy["spec"].get("taints", []) if t["key"] == HEALTH_TAINT_KEY
        ]
    finally:
        release_nodes(kube, NODES)


@pytest.mark.sim
def test_quarantine_taints_a_fail_node_exactly_once(cluster: Sim) -> None:
    kube = cluster.kube
    try:
        verdicts = [failing_verdict(NODES[1]), passing_verdict(NODES[0])]
        said: list[str] = []
        quarantine_failed(kube, verdicts, said.append)
        # A second FAIL is a failed re-test of a quarantined node: no new taint.
        quarantine_failed(kube, verdicts, said.append)
        tainted = f"quarantine: {NODES[1]}: tainted {HEALTH_TAINT_KEY}=unhealthy:NoSchedule"
        assert [line for line in said if "tainted" in line] == [tainted]
        failed = kube.get("v1", "Node", NODES[1])
        assert failed is not None
        ours = [t for t in failed["spec"]["taints"] if t["key"] == HEALTH_TAINT_KEY]
        assert ours == [{"key": HEALTH_TAINT_KEY, "value": "unhealthy", "effect": "NoSchedule"}]
        assert QUARANTINED_AT in failed["metadata"]["annotations"]
        assert failed["metadata"]["annotations"][QUARANTINE_REASON].startswith("BurnInFailed")
        condition = next(c for c in failed["status"]["conditions"] if c["type"] == CONDITION_TYPE)
        assert (condition["status"], condition["reason"]) == ("False", "BurnInFailed")
        events = [e for e in installer_events(kube) if e["involvedObject"]["name"] == NODES[1]]
        reasons = sorted((e["type"], e["reason"]) for e in events)
        assert reasons == [("Warning", "BurnInFailed"), ("Warning", "RequalificationFailed")]
        assert failed["metadata"]["annotations"][REQUALIFICATION_RESULT].startswith("FAIL")
        passed = kube.get("v1", "Node", NODES[0])
        assert passed is not None and not [t for t in passed["spec"]["taints"] if t["key"] == HEALTH_TAINT_KEY]
    finally:
        release_nodes(kube, NODES)


@pytest.mark.sim
def test_dry_run_prints_the_objects_and_creates_nothing(capsys: pytest.CaptureFixture[str], cluster: Sim) -> None:
    code, out, _ = burnin(capsys, cluster, str(EXAMPLE), "--level", "quick", "--run-id", "test-dry", "--dry-run")
    assert code == 0
    kinds = [line for line in out.splitlines() if line.startswith("kind: ")]
    assert kinds == ["kind: ConfigMap"] + ["kind: Job"] * 4
    assert not run_jobs(cluster.kube, "test-dry")


@pytest.mark.sim
@pytest.mark.parametrize(
    ("args", "tier"),
    [((str(EXAMPLE),), "quick"), ((str(EXAMPLE), "--level", "full"), "full"), (("--nodes", NODES[0]), "standard")],
    ids=["the-configs-level", "the-flag-wins", "no-config"],
)
def test_the_level_defaults_to_the_configs(
    capsys: pytest.CaptureFixture[str], cluster: Sim, args: tuple[str, ...], tier: str
) -> None:
    """examples/config.yaml says `burnin.level: quick`: a burn-in of its nodes runs that level unless told."""
    code, out, _ = burnin(capsys, cluster, *args, "--run-id", "test-level", "--dry-run")
    assert code == 0
    jobs = [o for o in YAML(typ="safe").load_all(out) if o and o["kind"] == "Job"]
    assert jobs and {job["metadata"]["annotations"][BURNIN_TIER_ANNOTATION] for job in jobs} == {tier}


@pytest.mark.sim
def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str], cluster: Sim) -> None:
    code, _, err = burnin(capsys, cluster, "--nodes", "gpu-h100-9999", "--level", "quick")
    assert code == 2 and "no node named gpu-h100-9999" in err
    code, _, err = burnin(capsys, cluster, "--nodes", NODES[0], "--image", "cuda=x")
    assert code == 2 and "--image cuda=x: expected TOOL=IMAGE" in err
    code, _, _ = burnin(capsys, cluster, "--nodes", NODES[0], "--level", "extreme")
    assert code == 2


@pytest.mark.sim
def test_a_bad_run_id_writes_nothing(capsys: pytest.CaptureFixture[str], cluster: Sim) -> None:
    namespaces = {n["metadata"]["name"] for n in cluster.kube.list("v1", "Namespace")}
    args = ["burnin", "--nodes", NODES[0], "--run-id", "Not_A_Label", "--namespace", "konduktor-never-created"]
    code = main([*args, "--kubeconfig", str(cluster.kubeconfig)])
    assert code == 2 and "burn-in run id 'Not_A_Label' is not a DNS label" in capsys.readouterr().err
    assert {n["metadata"]["name"] for n in cluster.kube.list("v1", "Namespace")} == namespaces


@pytest.mark.sim
def test_node_pairs_run_one_pod_per_node_and_a_silent_pair_is_an_error(cluster: Sim) -> None:
    """The full level's fabric test: an Indexed Job of two pods, one on each node, with its headless Service."""
    kube, run_id = cluster.kube, "test-pairs"
    runner = BurnInRunner(kube, NAMESPACE, run_id, options_for_tier("full"))
    runner.prepare()
    targets = select_targets(kube.list("v1", "Node"), None, NODES[:2])
    alone = [passing_verdict(t.node) for t in targets]
    verdicts, waited_out = runner.run_pairs(targets, tuple(alone), 120)
    assert not waited_out
    (pair,) = runner.pairs  # nothing was learned, so no second round repeats the same pair
    assert pair.nodes == tuple(NODES[:2]) and pair.result.verdict is Verdict.ERROR
    for verdict in verdicts:
        assert verdict.verdict is Verdict.ERROR
        assert verdict.checks[-1].check == "nccl_pair" and verdict.checks[-1].summary == "no result"

    (job,) = [j for j in kube.list("batch/v1", "Job", NAMESPACE, label_selector=f"{RUN_LABEL}={run_id}")]
    assert (job["spec"]["completionMode"], job["spec"]["completions"], job["spec"]["parallelism"]) == ("Indexed", 2, 2)
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
    pods = kube.list("v1", "Pod", NAMESPACE, label_selector=f"batch.kubernetes.io/job-name={job['metadata']['name']}")
    placed = {p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]: p["spec"]["nodeName"] for p in pods}
    assert sorted(placed) == ["0", "1"] and sorted(placed.values()) == NODES[:2]  # one rank on each node
    service = kube.get("v1", "Service", job["metadata"]["name"], NAMESPACE)
    assert service is not None and service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]  # goes with the Job


@pytest.mark.sim
def test_a_node_whose_pod_cannot_be_scheduled_is_an_error_with_the_schedulers_reason(
    capsys: pytest.CaptureFixture[str], cluster: Sim
) -> None:
    """Another pod holds one of the node's GPUs, so the burn-in pod (which asks for all ten) cannot be placed: the
    node is an ERROR with the scheduler's words after the bound, not after the Job's deadline."""
    kube, target, blockers = cluster.kube, NODES[3], "burnin-blocker"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": blockers}})
    gpu = {"nvidia.com/gpu": "1"}
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "holds-one-gpu", "namespace": blockers},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": target},
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": gpu, "limits": gpu}}],
            },
        }
    )
    try:
        wait_until(
            "the blocker to be bound",
            lambda: bool((kube.get("v1", "Pod", "holds-one-gpu", blockers) or {}).get("spec", {}).get("nodeName")),
        )
        code, out, err = burnin(
            capsys, cluster, "--nodes", target, "--level", "quick", "--run-id", "test-unschedulable",
            "--unschedulable-timeout", "2", "-o", "json",
        )  # fmt: skip
        assert code == 1, err
        (node_report,) = json.loads(out)["nodes"]
        assert node_report["verdict"] == "ERROR"
        job_check = node_report["checks"][-1]
        assert job_check["summary"] == "unschedulable"
        assert "the pod could not be scheduled: 0/" in job_check["reasons"][0]
        assert "Insufficient nvidia.com/gpu" in job_check["reasons"][0]
        assert "is unschedulable" in err
        assert not run_jobs(kube, "test-unschedulable")  # deleted: it must not start later unannounced
    finally:
        kube.delete("v1", "Namespace", blockers)
        wait_until("the blocker to be gone", lambda: kube.get("v1", "Pod", "holds-one-gpu", blockers) is None, 60)

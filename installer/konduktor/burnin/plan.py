"""The decisions of a burn-in run, as pure functions over the objects the API returned.

Which nodes to test and how their Jobs must tolerate them, what a Job's and a pod's status say when a step left
no output, the verdicts completed with those facts, and the exit code. `konduktor.burnin.runner` does the
reading and writing; the health controller's requalification reads its Jobs with the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from konduktor.burnin.isolation import IsolationPlan
from konduktor.burnin.manifests import Manifest, node_job, taint_tolerations
from konduktor.burnin.results import BurnInReport, CheckResult, NodeVerdict, PairVerdict, Verdict, worst
from konduktor.burnin.sliced import slice_request, sliced_options, visible_gpus
from konduktor.burnin.tiers import PAIR_STEP, BurnInOptions
from konduktor.burnin.verdict import apply_isolation
from konduktor.burnin.verdict.common import NCCL_PAIR
from konduktor.config.findings import did_you_mean
from konduktor.config.model import Config, selects
from konduktor.errors import ExitCode, UsageError
from konduktor.gpu import node as gpu_node
from konduktor.kube.job_state import JobPhase, JobState
from konduktor.vocabulary import GPU_COUNT_LABEL, GPU_RESOURCE, HOSTNAME_LABEL, PRODUCT_LABEL

JOB_CHECK = "burnin_job"  # the check that carries what the Job and its pod said (as in requalification)


@dataclass(frozen=True)
class Target:
    """One node to burn in."""

    node: str
    hostname: str | None  # kubernetes.io/hostname, which the Job's node affinity matches
    gpu_product: str | None
    gpus: int  # allocatable nvidia.com/gpu: what the Job requests (all of them)
    expected_gpus: int  # what nvidia-smi must list: the GPU type's gpusPerNode, else the allocatable count
    taints: tuple[Mapping[str, str], ...]
    rdma: tuple[str, ...] = ()  # rdma/ resources the node advertises (a node-pair pod asks for one of each)
    # On a node whose GPUs are shared (MIG, time-slicing, MPS): the slices its Job asks for instead of whole GPUs
    # (`konduktor.burnin.sliced`); the Job then runs the passive step alone.
    slices: tuple[tuple[str, int], ...] = ()


def allocatable_gpus(node: Mapping[str, Any]) -> int:
    """The node's allocatable nvidia.com/gpu as GPU health reads it (`konduktor.gpu.node`); 0 when it has none."""
    return gpu_node.allocatable_gpus(node) or 0


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = node.get("metadata", {}).get("labels") or {}
    return labels


def select_targets(nodes: Sequence[Mapping[str, Any]], config: Config | None, names: Sequence[str]) -> list[Target]:
    """The named nodes; else the nodes of the config's GPU types; else every node with allocatable GPUs."""
    by_name = {n["metadata"]["name"]: n for n in nodes}
    if names:
        unknown = [name for name in names if name not in by_name]
        if unknown:
            hints = [h for name in unknown if (h := did_you_mean(name, by_name))]
            raise UsageError(
                f"no node named {', '.join(unknown)} in this cluster",
                hint="\n".join(hints) or "list the nodes: kubectl get nodes -l nvidia.com/gpu.present=true",
            )
        chosen = [by_name[name] for name in dict.fromkeys(names)]
    elif config is not None:
        selectors = [t.selector for t in config.gpu_types.values()]
        chosen = [n for n in nodes if any(_selects(s, _labels(n)) for s in selectors)]
        if not chosen:
            raise UsageError(
                "no node matches the GPU types of the config",
                hint="compare the config's gpuTypes selectors with the nodes' labels: kubectl get nodes --show-labels",
            )
    else:
        chosen = [n for n in nodes if allocatable_gpus(n) > 0 or slice_request(n)]
        if not chosen:
            raise UsageError(
                f"no node advertises {GPU_RESOURCE}", hint="name the nodes with --nodes, or check the device plugin"
            )
    return [_target(node, config) for node in chosen]


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return selects(selector, labels)


def _target(node: Mapping[str, Any], config: Config | None) -> Target:
    labels = _labels(node)
    gpus = allocatable_gpus(node)
    per_node = None
    if config is not None:
        per_node = next((t.gpus_per_node for t in config.gpu_types.values() if _selects(t.selector, labels)), None)
    slices = slice_request(node) if gpus == 0 else {}
    if slices:
        count = labels.get(GPU_COUNT_LABEL, "")
        per_node = visible_gpus(slices, per_node or (int(count) if count.isdigit() else 1))
    return Target(
        node=node["metadata"]["name"],
        hostname=labels.get(HOSTNAME_LABEL),
        gpu_product=labels.get(PRODUCT_LABEL),
        gpus=gpus,
        expected_gpus=per_node if per_node is not None else gpus,
        taints=tuple(dict(t) for t in node.get("spec", {}).get("taints") or ()),
        rdma=tuple(
            sorted(
                name
                for name, value in (node.get("status", {}).get("allocatable") or {}).items()
                if name.startswith("rdma/") and str(value) not in ("0", "")
            )
        ),
        slices=tuple(slices.items()),
    )


def target_job(
    target: Target, run_id: str, options: BurnInOptions, namespace: str, service_account: str | None
) -> Manifest:
    job = node_job(
        run_id,
        target.node,
        target.expected_gpus if target.slices else target.gpus,
        sliced_options(options) if target.slices else options,
        namespace,
        hostname=target.hostname,
        extra_tolerations=taint_tolerations(target.taints),
        slices=dict(target.slices),
    )
    if service_account:
        job["spec"]["template"]["spec"]["serviceAccountName"] = service_account
    return job


# --------------------------------------------------------------------------------------------
# What the Job and its pod say.


# Waiting reasons that mean the step will not start by itself.
_STUCK = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError")


def pod_problem(pod: Mapping[str, Any] | None) -> str | None:
    """Why a pod produced no (or not all) output, when its status says so."""
    if pod is None:
        return "no pod was created for the Job"
    status = pod.get("status", {})
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"not scheduled: {condition.get('message') or condition.get('reason', '')}".rstrip(": ")
    problems = []
    for container in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]:
        state = container.get("state", {})
        waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason") in _STUCK:
            problems.append(f"{container['name']}: {waiting['reason']}: {waiting.get('message', '')}".rstrip(": "))
        # Every step exits 0 after printing its end line, so any other exit code means it was killed.
        elif terminated and terminated.get("exitCode", 0) != 0:
            problems.append(
                f"{container['name']}: exited {terminated.get('exitCode')} ({terminated.get('reason', 'killed')})"
            )
    return "; ".join(problems) or None


@dataclass(frozen=True)
class NodeRun:
    """What the runner learned about one node's Job, beyond the step logs."""

    job: JobState
    missing_output: Mapping[str, str]  # step -> why it left no output
    pod_problem: str | None = None


def complete_verdict(verdict: NodeVerdict, run: NodeRun, run_id: str) -> NodeVerdict:
    """The judged verdict with what the Job and pod said: why each silent step is silent, and a Job-level
    ERROR when the Job failed, vanished, or outlived the wait."""
    checks = [_explain_silence(item, run.missing_output.get(item.step)) for item in verdict.checks]
    job_reasons = {
        JobPhase.FAILED: [f"the Job failed: {run.job.reason}"],
        JobPhase.GONE: ["the Job was deleted before the run read its result"],
        JobPhase.RUNNING: [f"still running when the wait ended; read it later: konduktor-install burnin show {run_id}"],
        JobPhase.UNSCHEDULABLE: [f"the pod could not be scheduled: {run.job.reason}"],
    }.get(run.job.phase)
    if job_reasons is not None:
        summary = {
            JobPhase.FAILED: "Job failed",
            JobPhase.GONE: "Job deleted",
            JobPhase.UNSCHEDULABLE: "unschedulable",
        }.get(run.job.phase, "unfinished")
        # An unschedulable pod's problem is the scheduler's message, already in the reason.
        problem = run.pod_problem if run.job.phase is not JobPhase.UNSCHEDULABLE else None
        reasons = tuple(job_reasons + ([problem] if problem else []))
        checks.append(CheckResult(JOB_CHECK, Verdict.ERROR, "", summary, reasons))
    return replace(verdict, checks=tuple(checks), verdict=worst(c.verdict for c in checks))


def _explain_silence(item: CheckResult, why: str | None) -> CheckResult:
    """A step without a log is judged ERROR with a generic guess; the runner knows why it is silent."""
    if why is None or item.verdict is not Verdict.ERROR:
        return item
    return replace(item, summary="no output", reasons=(f"no output from the {item.step} step: {why}",))


def no_gpu_verdict(target: Target) -> NodeVerdict:
    """A node without allocatable GPUs gets no Job: nothing could hold its GPUs."""
    reason = f"the node advertises no allocatable {GPU_RESOURCE} (device plugin down, or every GPU lost)"
    check = CheckResult(JOB_CHECK, Verdict.ERROR, "", "no GPUs", (reason,))
    return NodeVerdict(target.node, target.gpu_product, None, Verdict.ERROR, (check,))


def pair_groups(targets: Sequence[Target], verdicts: Sequence[NodeVerdict]) -> list[list[Target]]:
    """Nodes that passed their own steps, grouped by GPU product and count: the two ranks of a pair run the same
    number of GPUs, and a node that already failed alone would only implicate its partners."""
    passed = {v.node for v in verdicts if v.verdict in (Verdict.PASS, Verdict.WARN)}
    groups: dict[tuple[str | None, int], list[Target]] = {}
    for target in targets:
        if target.node in passed:
            groups.setdefault((target.gpu_product, target.gpus), []).append(target)
    return list(groups.values())


def settle_pairs(
    verdicts: Sequence[NodeVerdict], tested: Sequence[str], plan: IsolationPlan, pairs: Sequence[PairVerdict]
) -> tuple[NodeVerdict, ...]:
    """The pair findings of the isolation plan, plus: a node with no partner of its kind is SKIPPED, and a node
    whose every pair ERRORed is ERROR (the fabric was not tested)."""
    updated = list(apply_isolation(verdicts, plan, pairs))
    settled = plan.implicated | plan.cleared | plan.undetermined
    for index, verdict in enumerate(updated):
        if verdict.node not in tested or verdict.node in settled:
            continue
        mine = [p for p in pairs if verdict.node in p.nodes]
        if mine:
            reasons = tuple(f"{'+'.join(p.nodes)}: {r}" for p in mine for r in p.result.reasons or (p.result.summary,))
            check = CheckResult(NCCL_PAIR, Verdict.ERROR, PAIR_STEP, "no result", reasons)
        else:
            alone = ("no other node of the same GPU product and count passed its own steps",)
            check = CheckResult(NCCL_PAIR, Verdict.SKIPPED, PAIR_STEP, "no partner", alone)
        checks = (*verdict.checks, check)
        updated[index] = replace(verdict, checks=checks, verdict=worst(c.verdict for c in checks))
    return tuple(updated)


def exit_code(report: BurnInReport, waited_out: bool) -> int:
    """1: a node FAILed (hardware evidence, whatever else happened) or ended in ERROR; 4: the wait ended with
    Jobs still running and nothing failed (re-run with --run-id); 0: every node PASSed, WARNed or was SKIPPED."""
    verdicts = {node.verdict for node in report.nodes}
    if Verdict.FAIL in verdicts:
        return ExitCode.NEGATIVE
    if waited_out:
        return ExitCode.PARTIAL
    return ExitCode.NEGATIVE if Verdict.ERROR in verdicts else ExitCode.OK

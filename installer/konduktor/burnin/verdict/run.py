"""Steps, nodes and runs: each step's log parsed and judged, a node's checks aggregated, a run's matmul
digests compared across nodes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from konduktor.burnin.parsers.common import OutputError
from konduktor.burnin.parsers.dcgm import parse_dcgm_diag
from konduktor.burnin.parsers.gpu_burn import parse_gpu_burn
from konduktor.burnin.parsers.matmul import parse_matmul
from konduktor.burnin.parsers.nccl_tests import parse_nccl_tests
from konduktor.burnin.parsers.passive import parse_passive_snapshot
from konduktor.burnin.parsers.step import StepLog, split_step_log
from konduktor.burnin.results import CheckResult, NodeVerdict, Verdict, worst
from konduktor.burnin.thresholds import DEFAULT_THRESHOLDS, GpuModel, Thresholds, gpu_model_for
from konduktor.burnin.tiers import BurnInOptions, Step
from konduktor.burnin.verdict.collective import judge_nccl_one_node
from konduktor.burnin.verdict.common import DCGM_DIAG, GPU_BURN, INVENTORY, MATMUL_TFLOPS, NCCL_ALLREDUCE, check_result
from konduktor.burnin.verdict.dcgm import judge_dcgm
from konduktor.burnin.verdict.gpu_burn import judge_gpu_burn
from konduktor.burnin.verdict.matmul import fleet_reference_digests, judge_matmul
from konduktor.burnin.verdict.passive import judge_passive


@dataclass(frozen=True)
class NodeEvidence:
    """What the Job runner collected from one node."""

    node: str
    gpu_product: str | None  # the node's nvidia.com/gpu.product label
    expected_gpus: int  # allocatable nvidia.com/gpu
    step_logs: Mapping[str, str | None]  # container (step) name -> log text; None: no log


def judge_step(
    check: str, step: str, log: str | None, judge: Callable[[StepLog], tuple[CheckResult, ...]]
) -> tuple[CheckResult, ...]:
    """Parse and judge one step's log; a step that did not finish can still FAIL, never PASS."""
    if log is None:
        return (
            check_result(
                check,
                step,
                Verdict.ERROR,
                "no log",
                ["the step left no log: not scheduled, image pull failure, or deadline"],
            ),
        )
    envelope = split_step_log(log)
    try:
        checks = judge(envelope)
    except (OutputError, KeyError, ValueError, TypeError) as exc:
        return (
            check_result(check, step, Verdict.ERROR, "unreadable", [*_ending(envelope), f"output unreadable: {exc}"]),
        )
    if envelope.finished and not envelope.timed_out:
        return checks
    return tuple(
        c if c.verdict is Verdict.FAIL else replace(c, verdict=Verdict.ERROR, reasons=(*_ending(envelope), *c.reasons))
        for c in checks
    )


def _ending(envelope: StepLog) -> list[str]:
    if envelope.timed_out:
        return [f"the step hit its time limit (exit {envelope.exit_code})"]
    if not envelope.finished:
        return ["the step ended without its end line (killed, deadline, or log cut)"]
    return []


def resolve_model(evidence: NodeEvidence, thresholds: Thresholds) -> tuple[GpuModel | None, GpuModel | None]:
    """(model to judge with, model named by the label). The label decides; nvidia-smi names
    stand in when the node has no label (GPU feature discovery not installed)."""
    label_model = gpu_model_for(evidence.gpu_product, thresholds)
    if label_model is not None or evidence.gpu_product:
        return label_model, label_model
    log = evidence.step_logs.get(Step.PASSIVE.value)
    if log:
        try:
            snapshot = parse_passive_snapshot(split_step_log(log).output)
        except OutputError:
            return None, None
        names = {g.name for g in snapshot.gpus if g.name}
        if len(names) == 1:
            return gpu_model_for(names.pop(), thresholds), None
    return None, None


def judge_node(
    evidence: NodeEvidence,
    options: BurnInOptions,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    reference_digests: Mapping[str, str] | None = None,
) -> NodeVerdict:
    """One node's verdict, from what the burn-in collected on it: its steps' logs, GPU product label and GPU count.

    Each step of the tier (`options.steps`) is parsed and judged against the thresholds of the node's GPU model
    (`resolve_model`: its `nvidia.com/gpu.product` label, or nvidia-smi's GPU names when it has no label) and the
    GPUs it should have (`evidence.expected_gpus`, allocatable `nvidia.com/gpu`). A step that left no log or an
    unreadable one is ERROR; one that did not finish keeps its FAILs, and its other checks become ERROR, never PASS.
    The matmul digests are compared with `reference_digests` (the digest most of the run's GPUs agree on, from
    `judge_run`), or else with the node's own GPUs. The node's verdict is the worst of its checks."""
    model, label_model = resolve_model(evidence, thresholds)
    expected = evidence.expected_gpus
    ignored = model.dcgm_ignored_tests if model else frozenset()
    # Per step: the check named when the step yields nothing, and how its output is judged.
    judges: dict[Step, tuple[str, Callable[[StepLog], tuple[CheckResult, ...]]]] = {
        Step.PASSIVE: (
            INVENTORY,
            lambda e: judge_passive(parse_passive_snapshot(e.output), model, expected, thresholds.passive, label_model),
        ),
        Step.DCGM: (DCGM_DIAG, lambda e: (judge_dcgm(parse_dcgm_diag(e.output), e.exit_code, ignored),)),
        Step.MATMUL: (
            MATMUL_TFLOPS,
            lambda e: judge_matmul(parse_matmul(e.output), model, expected, thresholds, reference_digests),
        ),
        Step.NCCL: (
            NCCL_ALLREDUCE,
            lambda e: (judge_nccl_one_node(parse_nccl_tests(e.output), e.exit_code, model, options, expected),),
        ),
        Step.GPU_BURN: (
            GPU_BURN,
            lambda e: (judge_gpu_burn(parse_gpu_burn(e.output), expected, thresholds.node_median),),
        ),
    }
    checks: list[CheckResult] = []
    for step in options.steps:
        check, judge = judges[step]
        checks += judge_step(check, step.value, evidence.step_logs.get(step.value), judge)
    return aggregate_node(evidence.node, evidence.gpu_product, model, checks)


def aggregate_node(
    node: str, gpu_product: str | None, model: GpuModel | None, checks: Sequence[CheckResult]
) -> NodeVerdict:
    return NodeVerdict(node, gpu_product, model.key if model else None, worst(c.verdict for c in checks), tuple(checks))


def judge_run(
    evidence: Sequence[NodeEvidence],
    options: BurnInOptions,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[NodeVerdict, ...]:
    """Judge every node; matmul digests are compared across the whole run, not only within nodes."""
    runs = []
    for node in evidence:
        log = node.step_logs.get(Step.MATMUL.value)
        if log and Step.MATMUL in options.steps:
            try:
                runs.append(parse_matmul(split_step_log(log).output))
            except OutputError:
                continue
    references = fleet_reference_digests(runs)
    return tuple(judge_node(node, options, thresholds, references) for node in evidence)

"""Node pairs: the pair benchmark's verdict, what the isolation planner learns from it, and each node's
`nccl_pair` finding."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from konduktor.burnin.isolation import IsolationPlan, PairOutcome
from konduktor.burnin.parsers.allreduce import parse_allreduce_bench
from konduktor.burnin.parsers.step import StepLog
from konduktor.burnin.results import CheckResult, Evidence, NodeVerdict, PairVerdict, Verdict, worst
from konduktor.burnin.thresholds import DEFAULT_THRESHOLDS, Thresholds
from konduktor.burnin.tiers import PAIR_STEP
from konduktor.burnin.verdict.collective import judge_collective
from konduktor.burnin.verdict.common import NCCL_PAIR, check_result
from konduktor.burnin.verdict.run import judge_step


def judge_pair(
    nodes: tuple[str, str],
    log: str | None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    expected_ranks: int | None = None,
) -> PairVerdict:
    """The rank-0 log of a pair Job (allreduce.py under torchrun)."""

    def judge(envelope: StepLog) -> tuple[CheckResult, ...]:
        result = parse_allreduce_bench(envelope.output)
        return (
            judge_collective(
                NCCL_PAIR,
                PAIR_STEP,
                result,
                envelope.exit_code,
                thresholds.nccl_pair_gb_s,
                thresholds.nccl_pair,
                expected_ranks,
            ),
        )

    (check,) = judge_step(NCCL_PAIR, PAIR_STEP, log, judge)
    return PairVerdict(nodes, check)


def pair_outcomes(pairs: Iterable[PairVerdict]) -> tuple[PairOutcome, ...]:
    """What the isolation planner learns: PASS/WARN pass, FAIL fails; ERROR and SKIPPED teach nothing."""
    return tuple(
        PairOutcome(p.nodes, p.result.verdict in {Verdict.PASS, Verdict.WARN})
        for p in pairs
        if p.result.verdict in {Verdict.PASS, Verdict.WARN, Verdict.FAIL}
    )


def apply_isolation(
    nodes: Sequence[NodeVerdict], plan: IsolationPlan, pairs: Sequence[PairVerdict]
) -> tuple[NodeVerdict, ...]:
    """Add each node's `nccl_pair` finding from the fault-isolation plan and re-aggregate."""
    by_node: dict[str, list[PairVerdict]] = {}
    for pair in pairs:
        for name in pair.nodes:
            by_node.setdefault(name, []).append(pair)
    updated = []
    for node in nodes:
        tested = by_node.get(node.node, [])
        evidence = [
            Evidence(
                "pair_busbw", next((e.measured for e in p.result.evidence if e.metric == "busbw"), None), None, "GB/s"
            )
            for p in tested
        ]
        peers = [f"{'+'.join(p.nodes)}: {p.result.verdict.value} {p.result.summary}" for p in tested]
        if node.node in plan.implicated:
            check = check_result(
                NCCL_PAIR,
                PAIR_STEP,
                Verdict.FAIL,
                "implicated",
                ["failed together with a node that passed with others", *peers],
                evidence,
            )
        elif node.node in plan.undetermined:
            check = check_result(
                NCCL_PAIR,
                PAIR_STEP,
                Verdict.WARN,
                "undetermined",
                ["in failing pairs that could not be attributed to one node", *peers],
                evidence,
            )
        elif node.node in plan.cleared:
            check = check_result(NCCL_PAIR, PAIR_STEP, Verdict.PASS, "cleared", peers, evidence)
        else:
            updated.append(node)
            continue
        checks = (*[c for c in node.checks if c.check != NCCL_PAIR], check)
        updated.append(replace(node, checks=checks, verdict=worst(c.verdict for c in checks)))
    return tuple(updated)

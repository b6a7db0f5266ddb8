"""Find the bad node(s) behind failing multi-node NCCL tests, testing in node pairs.

Pairs are the unit (docs/design/burnin.md#node-pairs-and-bisection: pairs first, then bisect). Round one tests
every node once (even/odd). A pair that fails holds at least one bad node; each member is then re-paired with a
node already proven good, which halves the suspects in one round — bisection down to single
nodes. When no node is proven good yet, suspects are paired in combinations not tried before
until one pair passes.

The model: a pair passes iff both nodes are good. A passing pair clears both nodes; a node that
failed together with a cleared node is implicated. The planner is pure and stateless: it is given
every outcome so far and says which pairs to run next, so a runner can stop, resume or retry.
A node runs at most one pair per round because each pair Job takes all of a node's GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

NodePair = tuple[str, str]


@dataclass(frozen=True)
class PairOutcome:
    nodes: NodePair
    passed: bool


@dataclass(frozen=True)
class IsolationPlan:
    next_pairs: tuple[NodePair, ...]  # run these in parallel next; empty when nothing is left to learn
    implicated: frozenset[str]  # failed together with a node proven good
    cleared: frozenset[str]  # passed with some partner
    undetermined: frozenset[str]  # no test can tell (too few good nodes); only set when done
    pending: frozenset[str]  # still being isolated

    @property
    def done(self) -> bool:
        return not self.next_pairs


def plan_pair_tests(nodes: Sequence[str], outcomes: Sequence[PairOutcome]) -> IsolationPlan:
    """Which pairs to test next, and what the outcomes so far prove."""
    order = list(dict.fromkeys(nodes))
    known = set(order)
    outcomes = [o for o in outcomes if set(o.nodes) <= known]
    tried = {frozenset(o.nodes) for o in outcomes}
    cleared = {n for o in outcomes if o.passed for n in o.nodes}
    failed_with: dict[str, set[str]] = {}
    for outcome in outcomes:
        if not outcome.passed:
            a, b = outcome.nodes
            failed_with.setdefault(a, set()).add(b)
            failed_with.setdefault(b, set()).add(a)
    # A passing pair outranks a failing one: a node that ever passed is good (a flaky pair of two
    # good nodes is not attributed to either).
    implicated = {n for n, partners in failed_with.items() if n not in cleared and partners & cleared}
    suspects = [n for n in order if n in failed_with and n not in cleared and n not in implicated]
    untested = [n for n in order if n not in cleared and n not in failed_with]
    helpers = [n for n in order if n in cleared]

    busy: set[str] = set()
    pairs: list[NodePair] = []

    def take(a: str, b: str) -> None:
        pairs.append((a, b))
        busy.update((a, b))

    def partner_for(node: str, candidates: Sequence[str]) -> str | None:
        return next((c for c in candidates if c != node and c not in busy and frozenset((node, c)) not in tried), None)

    # 1. Each suspect against a node proven good: the outcome settles the suspect.
    for suspect in suspects:
        if (helper := partner_for(suspect, helpers)) is not None:
            take(suspect, helper)
    # 2. Untested nodes among themselves (the first round is all of this), the odd one out with a
    #    good node if there is one.
    free = [n for n in untested if n not in busy]
    for a, b in zip(free[0::2], free[1::2], strict=False):
        take(a, b)
    for node in free[len(free) - len(free) % 2 :]:
        if (partner := partner_for(node, helpers)) is not None:
            take(node, partner)
    # 3. No good node known: try combinations of unsettled nodes not tested before, hoping for a
    #    passing pair that yields good partners.
    if not helpers:
        unsettled = [n for n in [*suspects, *untested] if n not in busy]
        for a, b in combinations(unsettled, 2):
            if a not in busy and b not in busy and frozenset((a, b)) not in tried:
                take(a, b)

    open_nodes = frozenset(suspects) | frozenset(untested)
    done = not pairs
    return IsolationPlan(
        next_pairs=tuple(pairs),
        implicated=frozenset(implicated),
        cleared=frozenset(cleared),
        undetermined=open_nodes if done else frozenset(),
        pending=frozenset() if done else open_nodes,
    )


def isolate_faulty_nodes(
    nodes: Sequence[str],
    run_round: Callable[[tuple[NodePair, ...]], Sequence[PairOutcome]],
    max_rounds: int = 10,
) -> tuple[IsolationPlan, int]:
    """Plan, run a round of pair tests, repeat until done; returns the final plan and rounds run.

    `max_rounds` bounds a runner whose tests keep erroring: outcomes that are missing from a round
    (ERROR) leave those pairs untried, and they would otherwise be planned again forever.
    """
    outcomes: list[PairOutcome] = []
    plan = plan_pair_tests(nodes, outcomes)
    rounds = 0
    while not plan.done and rounds < max_rounds:
        outcomes.extend(run_round(plan.next_pairs))
        rounds += 1
        plan = plan_pair_tests(nodes, outcomes)
    return plan, rounds

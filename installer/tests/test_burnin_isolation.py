"""Fault isolation over node pairs: finds bad nodes in few rounds and never blames a good one."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from konduktor.burnin.isolation import NodePair, PairOutcome, isolate_faulty_nodes, plan_pair_tests

RoundRunner = Callable[[tuple[NodePair, ...]], Sequence[PairOutcome]]


def fabric(bad: set[str], log: list[tuple[NodePair, ...]] | None = None) -> RoundRunner:
    """A pair passes iff neither node is bad; every round is recorded."""

    def run_round(pairs: tuple[NodePair, ...]) -> list[PairOutcome]:
        if log is not None:
            log.append(pairs)
        return [PairOutcome(pair, not (set(pair) & bad)) for pair in pairs]

    return run_round


def names(count: int) -> list[str]:
    return [f"gpu-node-{i:02d}" for i in range(count)]


def test_first_round_tests_every_node_once() -> None:
    plan = plan_pair_tests(names(8), [])
    assert plan.next_pairs == (
        ("gpu-node-00", "gpu-node-01"),
        ("gpu-node-02", "gpu-node-03"),
        ("gpu-node-04", "gpu-node-05"),
        ("gpu-node-06", "gpu-node-07"),
    )
    assert plan.pending == frozenset(names(8)) and not plan.implicated


def test_single_bad_node_among_eight_in_two_rounds() -> None:
    rounds_run: list[tuple[NodePair, ...]] = []
    plan, rounds = isolate_faulty_nodes(names(8), fabric({"gpu-node-05"}, rounds_run))
    assert plan.implicated == {"gpu-node-05"}
    assert plan.cleared == set(names(8)) - {"gpu-node-05"}
    assert plan.done and not plan.undetermined
    assert rounds == 2
    # Round two re-pairs both members of the failing pair with nodes proven good.
    assert rounds_run[1] == (("gpu-node-04", "gpu-node-00"), ("gpu-node-05", "gpu-node-01"))


def test_two_nodes_cannot_tell_which_one_is_bad() -> None:
    plan, rounds = isolate_faulty_nodes(names(2), fabric({"gpu-node-01"}))
    assert rounds == 1 and plan.implicated == frozenset()
    assert plan.undetermined == set(names(2))


def test_healthy_fabric_clears_everyone_in_one_round() -> None:
    plan, rounds = isolate_faulty_nodes(names(9), fabric(set()))
    assert plan.cleared == set(names(9)) and rounds == 2  # the odd node waits for a proven partner


def test_errored_pairs_are_retried_at_most_max_rounds() -> None:
    def always_error(pairs: tuple[NodePair, ...]) -> list[PairOutcome]:
        return []

    plan, rounds = isolate_faulty_nodes(names(4), always_error, max_rounds=3)
    assert rounds == 3 and not plan.done and plan.pending == set(names(4))


@settings(max_examples=200, deadline=None)
@given(count=st.integers(min_value=3, max_value=48), data=st.data())
def test_single_bad_node_is_found_in_few_rounds(count: int, data: st.DataObject) -> None:
    nodes = names(count)
    bad = data.draw(st.sampled_from(nodes))
    rounds_run: list[tuple[NodePair, ...]] = []
    plan, rounds = isolate_faulty_nodes(nodes, fabric({bad}, rounds_run))
    assert plan.implicated == {bad}
    assert plan.cleared == set(nodes) - {bad}
    assert not plan.undetermined
    assert rounds <= 3
    # Few tests in total: one per pair of the first round, plus a handful to settle the failure.
    assert sum(len(r) for r in rounds_run) <= count // 2 + 4


@settings(max_examples=200, deadline=None)
@given(count=st.integers(min_value=2, max_value=24), data=st.data())
def test_never_implicates_a_good_node_and_finds_all_bad_ones_when_two_good_nodes_exist(
    count: int, data: st.DataObject
) -> None:
    nodes = names(count)
    bad = set(data.draw(st.lists(st.sampled_from(nodes), unique=True, max_size=count)))
    rounds_run: list[tuple[NodePair, ...]] = []
    plan, _ = isolate_faulty_nodes(nodes, fabric(bad, rounds_run), max_rounds=count * count)
    assert plan.done
    assert plan.implicated <= bad
    assert plan.cleared.isdisjoint(bad)
    if len(set(nodes) - bad) >= 2:
        assert plan.implicated == bad and not plan.undetermined
    # No node is in two pairs of one round: each pair Job takes all of a node's GPUs.
    for pairs in rounds_run:
        members = [n for pair in pairs for n in pair]
        assert len(members) == len(set(members))

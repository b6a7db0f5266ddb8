"""Which GPU nodes a re-run of `up` burns in, and what a burn-in records on a node (pure)."""

from __future__ import annotations

from typing import Any

from konduktor.burnin.plan import select_targets
from konduktor.burnin.record import (
    POLICY_CHECK,
    BurnInRecord,
    Policy,
    choose,
    fingerprint,
    gpus_held,
    record_of,
    record_patch,
)
from konduktor.burnin.results import NodeVerdict, Verdict
from konduktor.burnin.tiers import Tier
from konduktor.vocabulary import BURNIN_RESULT

H100 = "NVIDIA-H100-80GB-HBM3"


def node(name: str, record: BurnInRecord | None = None, **labels: str) -> dict[str, Any]:
    annotations = {BURNIN_RESULT: record.encode()} if record else {}
    return {
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.product": H100, "nvidia.com/gpu.count": "8", **labels},
            "annotations": annotations,
        },
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }


def recorded(target: dict[str, Any], verdict: str = "PASS", level: str = "standard") -> dict[str, Any]:
    return node(
        target["metadata"]["name"], BurnInRecord(verdict, level, "r1", "2027-01-15T07:00:00Z", fingerprint(target))
    )


def pod(name: str, on: str, gpus: str | None = "2", phase: str = "Running") -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"nodeName": on, "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": phase},
    }


def decide(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], policy: Policy, level: Tier = Tier.STANDARD
) -> tuple[list[str], dict[str, NodeVerdict]]:
    targets = select_targets(nodes, None, [n["metadata"]["name"] for n in nodes])
    run, skipped = choose(targets, {n["metadata"]["name"]: n for n in nodes}, pods, policy, level)
    return [t.node for t in run], {v.node: v for v in skipped}


def test_new_burns_in_only_nodes_without_a_verdict_for_what_they_are_now() -> None:
    fresh = node("fresh")
    judged = recorded(node("judged"))
    errored = recorded(node("errored"), verdict="ERROR")  # no usable result: judged again
    failed = recorded(node("failed"), verdict="FAIL")  # a verdict about this hardware: it stands
    upgraded = recorded(node("upgraded"))
    upgraded["metadata"]["labels"]["nvidia.com/cuda.driver.major"] = "580"  # the driver changed since
    quick = recorded(node("quick"), level="quick")  # judged at a lower level than asked
    run, skipped = decide([fresh, judged, errored, failed, upgraded, quick], [], Policy.NEW)
    assert run == ["fresh", "errored", "upgraded", "quick"]
    assert set(skipped) == {"judged", "failed"}
    check = skipped["judged"].checks[0]
    assert (skipped["judged"].verdict, check.check, check.summary) == (Verdict.SKIPPED, POLICY_CHECK, "unchanged")
    assert "burned in already, unchanged since: PASS at level standard" in check.reasons[0]
    assert "FAIL at level standard" in skipped["failed"].checks[0].reasons[0]
    # all: every node; none: no node
    assert decide([fresh, judged], [], Policy.ALL)[0] == ["fresh", "judged"]
    run, skipped = decide([fresh, judged], [], Policy.NONE)
    assert run == [] and set(skipped) == {"fresh", "judged"}


def test_a_node_whose_gpus_running_pods_hold_is_skipped_with_the_pods_named() -> None:
    pods = [
        pod("train-0", "busy"),
        pod("done", "free", phase="Succeeded"),  # finished: holds nothing
        pod("cpu-only", "free", gpus=None),
        pod("unbound", ""),
    ]
    assert gpus_held(pods) == {"busy": ["team-a/train-0 (2 GPUs)"]}
    for policy in (Policy.ALL, Policy.NEW):
        run, skipped = decide([node("busy"), node("free")], pods, policy)
        assert run == ["free"]
        reason = skipped["busy"].checks[0].reasons[0]
        assert skipped["busy"].verdict is Verdict.SKIPPED and skipped["busy"].checks[0].summary == "busy"
        assert reason.startswith("busy: GPUs held by 1 running pod(s): team-a/train-0 (2 GPUs)")


def test_the_record_round_trips_and_the_fingerprint_follows_gpus_and_driver() -> None:
    target = node("a")
    verdict = NodeVerdict("a", H100, "H100", Verdict.WARN, ())
    patch = record_patch(verdict, "quick", "r9", "2027-01-15T07:00:00Z", target)
    target["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    assert record_of(target) == BurnInRecord("WARN", "quick", "r9", "2027-01-15T07:00:00Z", fingerprint(target))
    assert fingerprint(node("b")) == fingerprint(node("c"))  # the name is not part of it
    assert fingerprint(node("b")) != fingerprint(node("b", **{"nvidia.com/gpu.count": "4"}))
    assert fingerprint(node("b")) != fingerprint(node("b", **{"nvidia.com/cuda.driver-version.full": "580.1"}))
    broken = node("d")
    broken["metadata"]["annotations"][BURNIN_RESULT] = "{not json"
    assert record_of(broken) is None and record_of(node("e")) is None

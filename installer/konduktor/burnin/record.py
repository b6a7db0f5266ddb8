"""What a burn-in leaves on each node, and which nodes a re-run of `up` burns in again (pure).

A judged node gets the annotation `konduktor.ai/burnin-result` (vocabulary.BURNIN_RESULT): its verdict, the level,
the run, when, and a fingerprint of what the verdict was about (GPU product and count, the driver's labels). `up`
runs on a cluster in use: re-running it to converge must not burn in nodes that were judged already, and cannot
burn in a node whose GPUs running pods hold (the burn-in Job asks for all of them, and would wait unscheduled).
So with the policy `new` it burns in only the nodes without a verdict, or whose fingerprint changed, or judged
at a lower level, or that gave no usable result (ERROR); `all` burns in every node; `none`, none. A busy node is
SKIPPED with the pods that hold its GPUs, never a failure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from konduktor.burnin.plan import Target
from konduktor.burnin.results import CheckResult, NodeVerdict, Verdict
from konduktor.burnin.tiers import Tier
from konduktor.config.quantity import parse_quantity
from konduktor.vocabulary import BURNIN_RESULT, GPU_COUNT_LABEL, GPU_RESOURCE, PRODUCT_LABEL

POLICY_CHECK = "burnin_policy"  # the check that says why a node was not burned in this time
# GPU Feature Discovery's driver labels (nvidia.com/cuda.driver.major, ...; newer: cuda.driver-version.*).
DRIVER_LABEL_PREFIX = "nvidia.com/cuda.driver"
_LEVELS = {Tier.QUICK: 0, Tier.STANDARD: 1, Tier.FULL: 2}
_FINISHED_PHASES = ("Succeeded", "Failed")


class Policy(StrEnum):
    """Which GPU nodes `up` burns in."""

    ALL = "all"  # every GPU node of the config (busy ones are skipped)
    NEW = "new"  # those never burned in, changed since their verdict, or without a usable result
    NONE = "none"  # none


@dataclass(frozen=True)
class BurnInRecord:
    """The last verdict a burn-in gave a node."""

    verdict: str
    level: str
    run: str
    at: str  # RFC 3339, UTC
    fingerprint: str

    def encode(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    def describe(self) -> str:
        return f"{self.verdict} at level {self.level} on {self.at} (run {self.run})"


def fingerprint(node: Mapping[str, Any]) -> str:
    """What a verdict is about, hashed: the GPU product and count labels, the allocatable GPUs and the driver's
    labels. A node whose GPUs or driver changed has another fingerprint, and is burned in again."""
    labels: Mapping[str, str] = node.get("metadata", {}).get("labels") or {}
    allocatable = (node.get("status", {}).get("allocatable") or {}).get(GPU_RESOURCE)
    facts = {
        PRODUCT_LABEL: labels.get(PRODUCT_LABEL),
        GPU_COUNT_LABEL: labels.get(GPU_COUNT_LABEL),
        GPU_RESOURCE: None if allocatable is None else str(allocatable),
        **{key: value for key, value in labels.items() if key.startswith(DRIVER_LABEL_PREFIX)},
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def record_of(node: Mapping[str, Any]) -> BurnInRecord | None:
    """The node's recorded verdict; None when it has none (or one this version cannot read)."""
    text = (node.get("metadata", {}).get("annotations") or {}).get(BURNIN_RESULT)
    if not text:
        return None
    try:
        return BurnInRecord(**json.loads(text))
    except (TypeError, ValueError):
        return None


def record_patch(verdict: NodeVerdict, level: str, run: str, at: str, node: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that records `verdict` on the node it judged."""
    record = BurnInRecord(verdict.verdict.value, level, run, at, fingerprint(node))
    return {"metadata": {"annotations": {BURNIN_RESULT: record.encode()}}}


def recordable(verdict: NodeVerdict) -> bool:
    """A judged node: PASS, WARN, FAIL or ERROR (a SKIPPED node was not judged)."""
    return verdict.verdict is not Verdict.SKIPPED


def gpus_held(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Node -> the pods that hold its GPUs ("namespace/name (N GPUs)"): bound there, not finished, asking for
    nvidia.com/gpu."""
    held: dict[str, list[str]] = {}
    for pod in pods:
        spec, meta = pod.get("spec", {}), pod.get("metadata", {})
        node = spec.get("nodeName")
        if not node or pod.get("status", {}).get("phase") in _FINISHED_PHASES:
            continue
        gpus = sum(_gpus(container) for container in spec.get("containers") or ())
        if gpus:
            held.setdefault(node, []).append(f"{meta.get('namespace')}/{meta.get('name')} ({gpus} GPUs)")
    return held


def _gpus(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    value = (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(GPU_RESOURCE)
    return int(parse_quantity(str(value))) if value is not None else 0


def _skipped(target: Target, summary: str, reason: str) -> NodeVerdict:
    check = CheckResult(POLICY_CHECK, Verdict.SKIPPED, "", summary, (reason,))
    return NodeVerdict(target.node, target.gpu_product, None, Verdict.SKIPPED, (check,))


def why_not_new(record: BurnInRecord | None, node: Mapping[str, Any], level: Tier) -> str | None:
    """None when the node must be burned in under the policy `new`; else why its recorded verdict stands."""
    if record is None or record.fingerprint != fingerprint(node) or record.verdict == Verdict.ERROR.value:
        return None
    try:
        recorded = Tier(record.level)
    except ValueError:
        return None
    if _LEVELS[recorded] < _LEVELS[level]:
        return None
    return f"burned in already, unchanged since: {record.describe()}"


def choose(
    targets: Sequence[Target],
    nodes: Mapping[str, Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    policy: Policy,
    level: Tier,
) -> tuple[list[Target], list[NodeVerdict]]:
    """(the nodes to burn in, the others as SKIPPED verdicts that say why), in target order."""
    if policy is Policy.NONE:
        return [], [_skipped(t, "not asked", "burn-in policy none") for t in targets]
    held = gpus_held(pods)
    run: list[Target] = []
    skipped: list[NodeVerdict] = []
    for target in targets:
        node = nodes.get(target.node, {})
        stands = why_not_new(record_of(node), node, level) if policy is Policy.NEW else None
        if stands is not None:
            skipped.append(_skipped(target, "unchanged", stands))
        elif target.node in held:
            holders = held[target.node]
            reason = (
                f"busy: GPUs held by {len(holders)} running pod(s): {', '.join(holders)}; burn it in when it is free"
            )
            skipped.append(_skipped(target, "busy", reason))
        else:
            run.append(target)
    return run, skipped

"""`why` for a job that asks for slices of GPUs (MIG instances `nvidia.com/mig-<profile>`, shared GPUs
`nvidia.com/gpu.shared`), pure: from its Workload, Kueue's message on it, its ClusterQueue's quota and usage per
flavor and resource where the reader may see it (team members may not), and its pods.

Kueue's messages (K:pkg/scheduler/flavorassigner/flavorassigner.go, v0.19.2), one per flavor tried:
- `resource R unavailable in ClusterQueue`: no flavor of the queue covers R; the config's sharing groups cover every
  slice their nodes advertise, so no node of the cluster is laid out for it;
- `insufficient quota for R in flavor F, ... > maximum capacity (N)`: N is all the team may ever hold of R in F, its
  quota plus what it may borrow; 0 in every flavor is no quota of R at all;
- `insufficient unused quota for R in flavor F, N more needed`: the quota is there but in use;
- `flavor F doesn't match node affinity`: the pod's node selector or affinity rules out F's nodes.
An admitted job whose pods the scheduler finds no room for says `Insufficient R` in its pods' PodScheduled condition:
no node advertises a free R now (a node still applying its MIG layout advertises none).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from konduktor.config.quantity import parse_quantity
from konduktor.gpu.sharing import MIG_RESOURCE_PREFIX, gpu_fraction, is_slice, resource_key, smallest_covering
from konduktor.kube.conditions import condition, is_true
from konduktor.queueing.capacity import Capacity
from konduktor.queueing.explain import Explanation, Reason
from konduktor.quotas.usage import TeamUsage, team_usage

_UNAVAILABLE = re.compile(r"resource (?P<resource>\S+) unavailable in ClusterQueue")
_BEYOND = re.compile(
    r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>[^\s,]+), previously considered podsets requests "
    r"\([^)]*\) \+ current podset request \([^)]*\) > maximum capacity \((?P<most>[^)]*)\)"
)
_IN_USE = re.compile(
    r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>[^\s,]+), (?P<more>\S+) more needed"
)
_ELSEWHERE = re.compile(r"flavor (?P<flavor>\S+) doesn't match node affinity")
_NO_ROOM = re.compile(r"Insufficient (?P<resource>nvidia\.com/[^\s,.]+(?:\.[^\s,.]+)*)")


def slices_asked(workload: dict[str, Any]) -> dict[str, int]:
    """The slices a Workload asks for, per resource: each pod set's count times what its containers ask (requests,
    else limits, as for whole GPUs)."""
    asked: dict[str, int] = defaultdict(int)
    for pod_set in workload.get("spec", {}).get("podSets", []):
        spec = pod_set.get("template", {}).get("spec", {})
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            resources = container.get("resources") or {}
            amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for resource, value in amounts.items():
                if is_slice(resource):
                    asked[resource] += int(parse_quantity(str(value))) * int(pod_set.get("count", 1))
    return dict(asked)


def slice_usage(cluster_queue: dict[str, Any] | None) -> list[TeamUsage]:
    """The ClusterQueue's quota and usage of every slice it covers, per flavor; none when it could not be read."""
    if cluster_queue is None:
        return []
    covered = {
        resource
        for group in cluster_queue.get("spec", {}).get("resourceGroups", [])
        for resource in group.get("coveredResources", [])
        if is_slice(resource)
    }
    return [row for resource in sorted(covered) for row in team_usage([cluster_queue], resource)]


def published_slice_usage(capacity: Capacity | None, cluster_queue: str | None) -> list[TeamUsage]:
    """The queue's slice rows of the capacity the platform publishes to team members, where it publishes any."""
    if capacity is None or cluster_queue is None:
        return []
    return [row for row in capacity.queues if row.cluster_queue == cluster_queue and is_slice(row.resource)]


def _number(text: str) -> int:
    try:
        return int(parse_quantity(text))
    except ValueError:
        return 0


def with_slice_reasons(
    explanation: Explanation,
    workload: dict[str, Any] | None,
    usage: Sequence[TeamUsage] = (),
    pods: Sequence[dict[str, Any]] = (),
) -> Explanation:
    """The explanation of a job that asks for slices, with why it waits for them in a team member's words and, where
    the queue's quota and usage are known, which slice would fit now."""
    asked = slices_asked(workload or {})
    if not asked or workload is None or explanation.state in ("finished", "not-queued"):
        return explanation
    found: list[Reason] = []
    if not is_true(workload, "QuotaReserved"):
        found = _pending_reasons(explanation, asked, condition(workload, "QuotaReserved") or {})
    elif explanation.state == "admitted":
        found = _unplaced(pods, asked)
    if not found:
        return explanation
    explanation.reasons = [r for r in explanation.reasons if r.kind != "kueue"] + found
    if any(r.kind in ("slice-no-layout", "slice-no-quota", "slice-over-quota", "slice-selector") for r in found):
        explanation.state = "never-fit"
    fits = _fits_now(asked, usage)
    if fits:
        explanation.remedies.append(fits)
    return explanation


def _pending_reasons(explanation: Explanation, asked: dict[str, int], reserved: dict[str, Any]) -> list[Reason]:
    message = str(reserved.get("message", ""))
    found: list[Reason] = []
    for match in _UNAVAILABLE.finditer(message):
        resource = match["resource"]
        if is_slice(resource):
            found.append(
                Reason(
                    "slice-no-layout",
                    f"no node of the cluster is laid out for {resource_key(resource)}: no sharing group's nodes "
                    "offer it, so your team's queue has no quota of it",
                )
            )
            explanation.remedies.append(
                "ask for a slice your team's queue holds (`konduktor submit --slice`), or ask an administrator for "
                f"a sharing group with {resource_key(resource)}"
            )
    most: dict[str, dict[str, int]] = defaultdict(dict)
    for match in _BEYOND.finditer(message):
        if is_slice(match["resource"]):
            most[match["resource"]][match["flavor"]] = _number(match["most"])
    taken = {m["resource"]: m for m in _IN_USE.finditer(message) if is_slice(m["resource"])}
    for resource in sorted(set(most) | set(taken)):
        key = resource_key(resource)
        if resource in taken:  # the quota is there, in one flavor at least: it is in use
            found.append(
                Reason(
                    "slice-in-use",
                    f"every {key} your team may use in {taken[resource]['flavor']} is taken: "
                    f"{taken[resource]['more']} more needed",
                )
            )
            explanation.remedies.append(f"wait for your team's jobs on {key} to finish (`konduktor queue`)")
            continue
        flavors = most[resource]
        best = max(flavors.values())
        excluded = sorted({m["flavor"] for m in _ELSEWHERE.finditer(message)})
        if best == 0 and excluded:
            found.append(
                Reason(
                    "slice-selector",
                    f"the job's node selector or affinity rules out {', '.join(excluded)}, and no other flavor of your "
                    f"team's queue holds {key}",
                )
            )
            explanation.remedies.append(
                "drop the node selector or affinity on sharing labels: Kueue places a slice on its sharing group's "
                "nodes itself"
            )
            continue
        if best == 0:
            found.append(Reason("slice-no-quota", f"your team's queue has no quota of {key}"))
            explanation.remedies.append(
                f"ask for a slice your team's queue holds, or ask an administrator for a quota of {key} "
                "(teams.<team>.slices in config.yaml)"
            )
            continue
        flavor = max(flavors, key=lambda f: flavors[f])
        found.append(
            Reason(
                "slice-over-quota",
                f"the job asks {asked.get(resource, 0)} {key}, more than your team may ever hold in {flavor} "
                f"({best}, quota and borrowing together)",
            )
        )
        explanation.remedies.append(f"ask for at most {best} {key} in all, or a bigger slice in fewer pods")
    return _once(found)


def _unplaced(pods: Sequence[dict[str, Any]], asked: dict[str, int]) -> list[Reason]:
    """An admitted job's pods that the scheduler finds no node for, for want of a slice."""
    missing = set()
    for pod in pods:
        scheduled = condition(pod, "PodScheduled") or {}
        if scheduled.get("status") == "False":
            missing |= {m["resource"] for m in _NO_ROOM.finditer(str(scheduled.get("message", "")))}
    return [
        Reason(
            "slice-no-node",
            f"admitted, but no node has a free {resource_key(resource)} now: the sharing group's nodes may still be "
            "applying their layout, or be out of service",
        )
        for resource in sorted(missing & set(asked))
    ]


def _once(reasons: list[Reason]) -> list[Reason]:
    return list(dict.fromkeys(reasons))


def _fits_now(asked: dict[str, int], usage: Sequence[TeamUsage]) -> str | None:
    """Which slice of the team's queue has room now for the job's count, preferring the smallest MIG profile at
    least as big as the one asked for; None when none has or the quota is unknown."""
    if not usage or len(asked) != 1:
        return None
    [(resource, count)] = asked.items()
    free: dict[str, tuple[Fraction, str]] = {}
    for row in usage:
        room = row.nominal - row.used
        if row.resource != resource and room >= count and room > free.get(row.resource, (Fraction(-1), ""))[0]:
            free[row.resource] = (room, row.flavor)
    if not free:
        return None
    migs = {r: gpu_fraction(r) for r in free if r.startswith(MIG_RESOURCE_PREFIX)}
    wanted = gpu_fraction(resource) if resource.startswith(MIG_RESOURCE_PREFIX) else Fraction(0)
    choice = smallest_covering(float(wanted), migs) or sorted(free)[0]
    room, flavor = free[choice]
    return (
        f"{resource_key(choice)} would fit now: {room} free of your team's quota in {flavor} "
        f"(`konduktor submit --slice {resource_key(choice)}`)"
    )

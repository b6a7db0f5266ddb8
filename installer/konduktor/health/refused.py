"""Admitted workloads whose pods admission refuses: they give their quota back (pure).

Kueue counts a workload's quota from its admission, whether its pods exist or not. When admission refuses every
pod (Pod Security, or the platform's konduktor-security-profile policy, changed after the job was made), the job's
controller retries the creates for as long as the job lives, recording a FailedCreate Event each time, and the
team's quota stays held by pods that never run. The health controller reads those Events, and this decision
deactivates (spec.active=false) an admitted Workload once its pods were refused `threshold` times since its
admission: Kueue then evicts it (reason Deactivated), suspends the job and releases its quota. It stays
deactivated: the job runs only once its pod template is fixed, which means submitting it again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from konduktor.kube.conditions import condition, is_true
from konduktor.kube.timestamps import parse_time

# Refused creates since admission before the quota is given back: a Job controller retries a failed create within
# seconds, so this is reached quickly, and a single refusal racing a policy change is not enough.
REFUSED_CREATES = 3
FAILED_CREATE = "FailedCreate"  # the reason the Job and JobSet controllers (and the training operators) record
PODS_REFUSED_EVENT = "PodsRefused"

# `Error creating: pods "x" is forbidden: <why>`; only admission refusals (Pod Security, admission policies,
# webhooks) are the pod spec's fault. Quota refusals (ResourceQuota) and API errors are not acted on.
_FORBIDDEN = re.compile(r"is forbidden: (?P<why>.*)$", re.DOTALL)
_ADMISSION = ("violates PodSecurity", "ValidatingAdmissionPolicy ", "admission webhook ")
_POLICY = re.compile(r"ValidatingAdmissionPolicy '(?P<policy>[^']+)' with binding '[^']*' denied request: ")


@dataclass(frozen=True)
class RefusedCreate:
    """A FailedCreate Event of a workload's job, already matched to the Workload by the reader."""

    namespace: str
    workload: str
    reason: str  # the admission refusal, as `admission_refusal` gives it
    count: int  # creates the Event stands for (its count, or its series' count)
    last_seen: float | None  # epoch seconds of the last of them


@dataclass(frozen=True)
class GiveBack:
    """Deactivate the Workload: its pods are refused, and it holds quota for them."""

    namespace: str
    name: str
    owner: dict[str, str] | None  # apiVersion, kind, name, uid of the job, to tell its owner
    reason: str
    refused: int

    @property
    def message(self) -> str:
        return (
            f"admitted, but its pods are refused: {self.reason}. Konduktor deactivated its Workload after "
            f"{self.refused} refused pod creations, which gave the team's quota back; fix the pod template and "
            "submit the job again"
        )


def admission_refusal(message: str) -> str | None:
    """The admission refusal in a FailedCreate Event's message, or None when the create failed for another reason.

    A policy's refusal reads `policy NAME: why`, as `konduktor why` shows policies."""
    found = _FORBIDDEN.search(message.strip())
    if found is None or not found["why"].startswith(_ADMISSION):
        return None
    why = found["why"]
    policy = _POLICY.match(why)
    return f"policy {policy['policy']}: {why[policy.end() :]}" if policy else why


def event_count(event: dict[str, Any]) -> int:
    """How many occurrences one core/v1 Event stands for: its count, or its series' count (events.k8s.io)."""
    series = (event.get("series") or {}).get("count") or 0
    return max(int(event.get("count") or 0), int(series), 1)


def event_time(event: dict[str, Any]) -> float | None:
    """When the Event last happened: its series' last observation, lastTimestamp, or eventTime."""
    for text in (
        (event.get("series") or {}).get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
    ):
        when = parse_time(text)
        if when is not None:
            return when
    return None


def holds_quota(workload: dict[str, Any]) -> bool:
    """Active, unfinished and holding a quota reservation: what giving back applies to."""
    return (
        workload.get("spec", {}).get("active", True) is not False
        and is_true(workload, "QuotaReserved")
        and not is_true(workload, "Finished")
    )


def decide_give_back(
    workloads: Iterable[dict[str, Any]], refused: Sequence[RefusedCreate], threshold: int = REFUSED_CREATES
) -> list[GiveBack]:
    """The Workloads to deactivate: holding quota, and refused `threshold` pod creates since they got it.

    Refusals from before the current reservation do not count, so a Workload reactivated after its template was
    fixed (or its profile loosened) starts afresh."""
    actions = []
    for workload in workloads:
        if not holds_quota(workload):
            continue
        meta = workload["metadata"]
        since = parse_time((condition(workload, "QuotaReserved") or {}).get("lastTransitionTime"))
        mine = [
            r
            for r in refused
            if (r.namespace, r.workload) == (meta.get("namespace", ""), meta["name"])
            and (since is None or r.last_seen is None or r.last_seen >= since)
        ]
        count = sum(r.count for r in mine)
        if count < threshold:
            continue
        latest = max(mine, key=lambda r: r.last_seen or 0.0)
        owners = meta.get("ownerReferences", [])
        owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
        actions.append(
            GiveBack(
                namespace=meta.get("namespace", ""),
                name=meta["name"],
                owner={k: str(owner[k]) for k in ("apiVersion", "kind", "name", "uid") if k in owner}
                if owner
                else None,
                reason=latest.reason,
                refused=count,
            )
        )
    return sorted(actions, key=lambda a: (a.namespace, a.name))

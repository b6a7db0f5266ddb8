"""What a Job's and a pod's status say, read as plain data: finished or not and how, when, and whether the scheduler
has been unable to place the pod. Burn-in, preflight pods and the health controller's requalification read their
Jobs with these; `konduktor.kube.jobs` waits on them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from konduktor.kube.timestamps import parse_time


class JobPhase(StrEnum):
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    GONE = "gone"  # deleted (by someone, or by its TTL) before the run read it
    UNSCHEDULABLE = "unschedulable"  # its pod could not be placed for the bound the run waits; `reason` says why


@dataclass(frozen=True)
class JobState:
    phase: JobPhase
    reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.phase is not JobPhase.RUNNING


def _final_condition(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Job's Complete or Failed condition once it holds (a finished Job has exactly one of them)."""
    for condition in job.get("status", {}).get("conditions") or ():
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            found: Mapping[str, Any] = condition
            return found
    return None


def job_state(job: Mapping[str, Any] | None) -> JobState:
    if job is None:
        return JobState(JobPhase.GONE)
    condition = _final_condition(job)
    if condition is None:
        return JobState(JobPhase.RUNNING)
    if condition.get("type") == "Complete":
        return JobState(JobPhase.COMPLETE)
    reason = f"{condition.get('reason', 'Failed')}: {condition.get('message', '')}".rstrip(": ")
    return JobState(JobPhase.FAILED, reason)


def job_finished_at(job: Mapping[str, Any]) -> float | None:
    """When the Job completed (its completionTime) or failed; None while it runs."""
    condition = _final_condition(job)
    if condition is None:
        return None
    since = parse_time(condition.get("lastTransitionTime"))
    if condition.get("type") == "Complete":
        return parse_time(job["status"].get("completionTime")) or since
    return since


def unschedulable_for(pod: Mapping[str, Any] | None, now: float) -> tuple[float, str] | None:
    """(seconds since the scheduler first failed to place the pod, its message) while it cannot place it."""
    for condition in (pod or {}).get("status", {}).get("conditions") or ():
        if condition.get("type") != "PodScheduled" or condition.get("status") != "False":
            continue
        if condition.get("reason") != "Unschedulable":
            return None
        since = parse_time(condition.get("lastTransitionTime"))
        return (max(0.0, now - since) if since is not None else 0.0), condition.get("message") or "Unschedulable"
    return None

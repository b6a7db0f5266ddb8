"""Work on a quarantined node: which policy applies to it, and what its owner is told.

Pure. The watch loop reads the Kueue Workloads with pods on a node (health/workloads.py); the decision
(decide.py) picks what to do with each of them, and this module words the Event its Job and Workload get.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from konduktor.health.classify import Finding
from konduktor.health.settings import HealthSettings, WorkPolicy
from konduktor.kube.timestamps import format_time
from konduktor.vocabulary import KUEUE_API, REQUEUED_FOR_NODE_HEALTH

# What became of a workload on a quarantined node; the owner's Event says it in words.
Fate = Literal["requeued", "drained", "untouched", "opted-out"]

REQUEUED_REASON = REQUEUED_FOR_NODE_HEALTH  # Kueue emits none of these (docs/design/kueue.md#events-kueue-emits)
NODE_FAULT_REASON = "NodeQuarantined"
# Dry-run's: the same news, as what would have happened.
WOULD_REQUEUE_REASON = "WouldRequeueForNodeHealth"
WOULD_QUARANTINE_REASON = "NodeWouldBeQuarantined"


@dataclass(frozen=True)
class ObjectRef:
    """An object an Event may name: a Workload or whatever owns it (Job, JobSet, PyTorchJob, ...)."""

    api_version: str
    kind: str
    name: str
    uid: str = ""


@dataclass(frozen=True)
class AffectedWorkload:
    """A Kueue Workload with pods on one node, as read from the cluster."""

    namespace: str
    name: str
    node: str
    pods: tuple[str, ...]  # its pods on that node
    uid: str = ""
    owner: ObjectRef | None = None
    owner_labels: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    active: bool = True  # spec.active: False when someone (or we) deactivated it
    gpus: int = 0  # GPUs its pods on that node hold (their nvidia.com/gpu limits)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(KUEUE_API, "Workload", self.name, self.uid)


@dataclass(frozen=True)
class RequeuingWorkload:
    """A Workload this controller deactivated to requeue it: reactivated once Kueue has evicted it."""

    namespace: str
    name: str
    node: str  # the quarantined node it was requeued for
    active: bool
    quota_reserved: bool


def policy_for(finding: Finding, settings: HealthSettings) -> WorkPolicy:
    """The affected-work policy for the finding's fault class."""
    work = settings.affected_work
    return work.unusable if finding.node_unusable else work.degraded


def fate_for(workload: AffectedWorkload, policy: WorkPolicy, opt_out_label: str) -> Fate:
    """What the policy does to this workload; an opt-out on its owner or namespace keeps it untouched."""
    if policy == "requeue":
        return "opted-out" if opted_out_by(workload, opt_out_label) is not None else "requeued"
    return "drained" if policy == "drain" else "untouched"


def opted_out_by(workload: AffectedWorkload, opt_out_label: str) -> str | None:
    """Which object carries the opt-out label ("Job train-1", "namespace team-a"), or None."""
    if workload.owner is not None and workload.owner_labels.get(opt_out_label) == "true":
        return f"{workload.owner.kind} {workload.owner.name}"
    if workload.namespace_labels.get(opt_out_label) == "true":
        return f"namespace {workload.namespace}"
    return None


def owner_reason(fate: Fate, *, dry_run: bool) -> str:
    """The reason of the owner's Event: a requeue, or only the news of the quarantine; dry-run says "would"."""
    if fate == "requeued":
        return WOULD_REQUEUE_REASON if dry_run else REQUEUED_REASON
    return WOULD_QUARANTINE_REASON if dry_run else NODE_FAULT_REASON


def signal_words(finding: Finding) -> str:
    """The signal as an on-call engineer names it: "Xid 79, GPU has fallen off the bus"."""
    if finding.kind in ("xid", "sxid") and finding.code is not None:
        label = "Xid" if finding.kind == "xid" else "SXid"
        return f"{label} {finding.code}, {finding.meaning}"
    return f"{finding.name}, {finding.meaning}"


def owner_message(
    workload: AffectedWorkload,
    finding: Finding,
    at: float,
    fate: Fate,
    *,
    dry_run: bool,
    opt_out_label: str,
    why: str = "",
) -> str:
    """The Event note on the workload's owner and its Workload: node, signal, when, its pods there, why this fate
    (where the fault class alone does not say it), what next."""
    gpu = f" on {finding.gpu}" if finding.gpu else ""
    pods = ", ".join(workload.pods) if workload.pods else "none"
    stamp = format_time(at)
    what = (
        f"GPU node {workload.node} {'would have been' if dry_run else 'was'} quarantined at {stamp}: "
        f"{signal_words(finding)}{gpu}. Pods of this workload on it: {pods}."
    )
    if why:
        what = f"{what} {why}"
    return f"{what} {_next_step(workload, fate, dry_run=dry_run, opt_out_label=opt_out_label)}"


def _next_step(workload: AffectedWorkload, fate: Fate, *, dry_run: bool, opt_out_label: str) -> str:
    if dry_run:
        would = {
            "requeued": "would have been requeued",
            "drained": "would have been left to finish",
            "untouched": "would have been left alone",
            "opted-out": "would have been left alone (opted out)",
        }[fate]
        return f"Dry-run: nothing was done; the workload {would}."
    if fate == "requeued":
        return (
            "Next: requeued. Kueue evicts the workload (its pods stop) and admits it again on healthy nodes; "
            "it keeps its place in the queue."
        )
    if fate == "drained":
        return "Next: left to finish. Its running pods stay; no new pod starts on that node."
    if fate == "opted-out":
        return (
            f"Next: nothing. The workload is not requeued because {opted_out_by(workload, opt_out_label)} "
            f"carries {opt_out_label}=true; delete or requeue it yourself if it hangs."
        )
    return "Next: nothing is done to the workload (affected-work policy none)."

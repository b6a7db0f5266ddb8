"""The requalification Jobs as the controller reads them, and whether the decision already acted on a finished one.

Pure: `requalification` lists the Jobs (labelled `REQUALIFICATION_LABEL`) and hands them in. Which finished Jobs
were already judged is read from the node itself: the decision stamps `requalified-at` (or a new
`quarantined-at`) when it acts on a result, so a Job that ended before that stamp has been acted on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from konduktor.burnin.manifests import NODE_ANNOTATION
from konduktor.health.decide import NodeState
from konduktor.kube.job_state import JobPhase, job_finished_at, job_state
from konduktor.kube.timestamps import parse_time
from konduktor.vocabulary import BURNIN_TIER_ANNOTATION, QUARANTINED_AT, REQUALIFIED_AT

REQUALIFICATION_LABEL = "konduktor.ai/requalification"


@dataclass(frozen=True)
class Run:
    """One requalification Job as the controller needs it."""

    job: str
    node: str
    tier: str
    finished_at: float | None  # None while it runs
    failure: str | None  # why the Job failed, when it did


def run_of(job: Mapping[str, Any]) -> Run | None:
    meta = job["metadata"]
    node = meta.get("annotations", {}).get(NODE_ANNOTATION)
    if not node:
        return None
    state = job_state(job)
    failure = state.reason if state.phase is JobPhase.FAILED else None
    tier = meta.get("annotations", {}).get(BURNIN_TIER_ANNOTATION, "")
    return Run(meta["name"], node, tier, job_finished_at(job), failure)


def acted_on(run: Run, node: NodeState) -> bool:
    """The node's stamps show that the decision already acted on this finished run."""
    stamps = [parse_time(node.annotations.get(key)) for key in (REQUALIFIED_AT, QUARANTINED_AT)]
    latest = max((s for s in stamps if s is not None), default=None)
    # Stamps have whole seconds; the run's end is compared at the same precision.
    return run.finished_at is not None and latest is not None and latest >= int(run.finished_at)

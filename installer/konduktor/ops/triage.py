"""`triage JOB` on a cluster: which node of a failed job had a GPU fault, with the evidence (the controller's
`triage_sources` reading the cluster, Loki and Prometheus); on request, a burn-in of the job's nodes whose verdicts
join the evidence, and the quarantine of the culprits as the health controller would make it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from konduktor.burnin.manifests import make_run_id
from konduktor.burnin.runner import BurnInRequest, Progress, Say
from konduktor.burnin.tiers import Tier, options_for_tier
from konduktor.health.quarantine import quarantine_findings
from konduktor.health.settings import HealthSettings
from konduktor.health.triage import Triage, burnin_sightings, culprit_findings, with_sightings
from konduktor.health.triage_sources import deployed_settings, triage_job, with_telemetry
from konduktor.kube.client import Kube
from konduktor.ops.burnin import burn_in


@dataclass(frozen=True)
class TriageRequest:
    """The Job to triage, a burn-in `level` of its nodes (None: none), whether to quarantine the culprits, and the
    Loki and Prometheus to read instead of the health controller's."""

    job: str
    namespace: str
    burnin: Tier | None = None
    quarantine: bool = False
    loki: str | None = None
    prometheus: str | None = None


def triage(kube: Kube, asked: TriageRequest, say: Say, progress: Progress) -> Triage:
    """The job's triage; what could not be read is said (`not read: ...`) as it is found."""
    settings = deployed_settings(kube)
    found, unread = with_telemetry(triage_job(kube, asked.job, asked.namespace), settings, asked.loki, asked.prometheus)
    for missing in unread:
        say(f"not read: {missing}")
    if asked.burnin is not None and found.nodes:
        nodes = tuple(n.node for n in found.nodes)
        run = make_run_id(datetime.now(UTC))
        report, _ = burn_in(kube, None, BurnInRequest(options_for_tier(asked.burnin), run, nodes=nodes), say, progress)
        found = with_sightings(found, burnin_sightings(report))
    if asked.quarantine:
        quarantine_findings(kube, culprit_findings(found), settings or HealthSettings(), say)
    return found

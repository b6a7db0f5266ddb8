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
from konduktor.health.settings import HealthSettings, KernelLogFileSettings
from konduktor.health.triage import Triage, burnin_sightings, culprit_findings, with_sightings, wrap_note
from konduktor.health.triage_sources import deployed_settings, triage_job, with_telemetry
from konduktor.kube.client import Kube
from konduktor.ops.burnin import burn_in
from konduktor.paths import state_dir
from konduktor.sim.faults import kernel_log_dir


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
    sim: str | None = None  # the simulated cluster's name, when it is one: its controller reads kernel log files


def with_sim_kernel_logs(settings: HealthSettings | None, sim: str | None) -> HealthSettings | None:
    """The settings the controller runs with: on the simulated cluster, the deployed ones and the one setting the sim
    adds, the nodes' kernel log files `sim fault` writes (`konduktor.sim.platform.with_kernel_logs`)."""
    if settings is None or sim is None or settings.kernel_log_files is not None:
        return settings
    files = KernelLogFileSettings(directory=str(kernel_log_dir((state_dir() / sim).absolute())))
    return settings.model_copy(update={"kernel_log_files": files})


def triage(kube: Kube, asked: TriageRequest, say: Say, progress: Progress) -> Triage:
    """The job's triage; what could not be read (`not read: ...`), where the kernel logs were read and how to point
    triage at Loki and Prometheus are said as they are found, each wrapped to 100 columns (`wrap_note`)."""
    settings = with_sim_kernel_logs(deployed_settings(kube), asked.sim)
    found, notes = with_telemetry(triage_job(kube, asked.job, asked.namespace), settings, asked.loki, asked.prometheus)
    for note in notes:
        say(wrap_note(note))
    if asked.burnin is not None and found.nodes:
        nodes = tuple(n.node for n in found.nodes)
        run = make_run_id(datetime.now(UTC))
        report, _ = burn_in(kube, None, BurnInRequest(options_for_tier(asked.burnin), run, nodes=nodes), say, progress)
        found = with_sightings(found, burnin_sightings(report))
    if asked.quarantine:
        quarantine_findings(kube, culprit_findings(found), settings or HealthSettings(), say)
    return found

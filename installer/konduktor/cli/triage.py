"""`konduktor-install triage JOB`: which node of a failed job had a GPU fault, with the evidence; on request, a
burn-in of the job's nodes, and the quarantine of the culprits as the health controller would make it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from konduktor.burnin.manifests import make_run_id
from konduktor.burnin.runner import BurnInRequest
from konduktor.burnin.tiers import Tier, options_for_tier
from konduktor.cli.burnin import burn_in, say
from konduktor.cli.console import OutputFormat, err, print_document, print_rows
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.errors import ExitCode
from konduktor.health.quarantine import quarantine_findings
from konduktor.health.settings import HealthSettings
from konduktor.health.triage import burnin_sightings, culprit_findings, with_sightings
from konduktor.health.triage_sources import deployed_settings, triage_job, with_telemetry


def triage(
    job: Annotated[str, typer.Argument(help="The batch Job to triage.")],
    namespace: Annotated[str, typer.Option("-n", "--namespace", help="The Job's namespace.")] = "default",
    burnin: Annotated[
        bool,
        typer.Option("--burnin", help="Also burn in the job's nodes now; a FAIL (or a failed node pair) is blamed."),
    ] = False,
    level: Annotated[
        Tier,
        typer.Option("--level", help="The burn-in's level: standard (node checks) or full (+ NCCL node pairs)."),
    ] = Tier.STANDARD,
    quarantine: Annotated[
        bool,
        typer.Option(
            "--quarantine",
            help="Quarantine the culprits as the health controller would (its settings, its fleet breaker).",
        ),
    ] = False,
    loki: Annotated[
        str | None,
        typer.Option(
            "--loki",
            help="Read the kernel logs from Loki at this URL (a port-forward, say) instead of the health "
            "controller's, with its query.",
        ),
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus",
            help="Read the DCGM series from Prometheus at this URL (a port-forward, say) instead of the health "
            "controller's.",
        ),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """Which node of a job had a GPU fault in its time window, with evidence. Exit 0: a culprit; 1: none.

    The nodes come from the job's pods and, after they are gone, from the scheduler's and the health controller's
    Events; the evidence from the controller's quarantine, the GPUHealthy condition and its Events on each node,
    and the nodes' kernel lines in Loki and DCGM series in Prometheus (read as the health controller reads them).
    With --burnin, a burn-in of just those nodes adds its verdicts (progress on stderr). With --quarantine, each
    culprit not yet quarantined goes through the controller's decision with its settings and fleet breaker. Exit 2:
    no such Job; 5: the cluster could not be reached."""
    with connect(kubeconfig, context, sim, read_only=not (burnin or quarantine)) as kube:
        settings = deployed_settings(kube)
        found, unread = with_telemetry(triage_job(kube, job, namespace), settings, loki, prometheus)
        for missing in unread:
            err.print(f"not read: {missing}", markup=False)
        if burnin and found.nodes:
            nodes = tuple(n.node for n in found.nodes)
            run = make_run_id(datetime.now(UTC))
            report, _ = burn_in(kube, None, BurnInRequest(options_for_tier(level), run, nodes=nodes))
            found = with_sightings(found, burnin_sightings(report))
        if quarantine:
            quarantine_findings(kube, culprit_findings(found), settings or HealthSettings(), say)
    if output in ("json", "yaml"):
        print_document(found.as_json(), "json" if output == "json" else "yaml")
    else:
        print_rows(found.rows(), ["node", "verdict", "pods", "evidence"], output)
    if not found.culprits:
        raise typer.Exit(ExitCode.NEGATIVE)

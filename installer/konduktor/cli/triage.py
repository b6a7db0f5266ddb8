"""`konduktor-install triage JOB`: which node of a failed job had a GPU fault, with the evidence; on request, a
burn-in of the job's nodes, and the quarantine of the culprits as the health controller would make it."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from konduktor.burnin.tiers import Tier
from konduktor.cli.console import OutputFormat, print_document, progress, say
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption
from konduktor.errors import ExitCode
from konduktor.health.triage import render_table
from konduktor.ops.target import running_target
from konduktor.ops.triage import TriageRequest
from konduktor.ops.triage import triage as run_triage


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
    target = running_target(kubeconfig, context, sim, read_only=not (burnin or quarantine))
    asked = TriageRequest(job, namespace, level if burnin else None, quarantine, loki, prometheus, target.sim)
    with target.connect() as kube:
        found = run_triage(kube, asked, say, progress)
    if output in ("json", "yaml"):
        print_document(found.as_json(), "json" if output == "json" else "yaml")
    else:
        sys.stdout.write(render_table(found))
    if not found.culprits:
        raise typer.Exit(ExitCode.NEGATIVE)

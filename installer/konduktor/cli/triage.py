"""`konduktor-install triage JOB`: which node of a failed job had a GPU fault, with the evidence."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from konduktor.cli.console import OutputFormat, print_rows
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.controller.triage_sources import triage_job
from konduktor.errors import ExitCode


def triage(
    job: Annotated[str, typer.Argument(help="The batch Job to triage.")],
    namespace: Annotated[str, typer.Option("-n", "--namespace", help="The Job's namespace.")] = "default",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """Which node of a job had a GPU fault in its time window, with evidence. Exit 0: a culprit; 1: none.

    The nodes come from the job's pods and, after they are gone, from the scheduler's and the health controller's
    Events; the evidence from the controller's quarantine, the GPUHealthy condition and its Events on each node.
    Exit 2: no such Job; 5: the cluster could not be reached."""
    with connect(kubeconfig, context, sim, read_only=True) as kube:
        found = triage_job(kube, job, namespace)
    if output == "json":
        typer.echo(json.dumps(found.as_json(), indent=2))
    else:
        print_rows(found.rows(), ["node", "verdict", "pods", "evidence"], output)
    if not found.culprits:
        raise typer.Exit(ExitCode.NEGATIVE)

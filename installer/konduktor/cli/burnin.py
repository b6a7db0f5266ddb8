"""`konduktor-install burnin`: run the burn-in Jobs on GPU nodes, judge their output, report, optionally quarantine;
`burnin show RUN`: a past run, read from the cluster.

The run itself is `konduktor.ops.burnin` over `konduktor.burnin.runner`; the quarantine of FAIL nodes is the health
controller's (`konduktor.health.quarantine`). A run is named by its run id: `burnin show RUN` reads what it
left (its report, else its Jobs), starting nothing; running a burn-in again with `--run-id` picks up that run's
Jobs instead of starting new ones (and starts those it misses), so an interrupted run can be finished.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

import typer

from konduktor.burnin.manifests import make_run_id
from konduktor.burnin.plan import exit_code, select_targets
from konduktor.burnin.report import render_json, render_junit, render_table, report_to_dict
from konduktor.burnin.results import BurnInReport
from konduktor.burnin.runner import BurnInRequest, BurnInRunner
from konduktor.burnin.tiers import BurnInImages, Tier, options_for_tier
from konduktor.cli.arguments import load_checked, parse_timeout
from konduktor.cli.console import err, print_document, progress, say
from konduktor.cli.help_text import PlainHelpGroup
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.config.model import UNSCHEDULABLE_SECONDS
from konduktor.errors import UsageError
from konduktor.ops import burnin as runs
from konduktor.quotas.manifests import to_yaml
from konduktor.vocabulary import BURNIN_NAMESPACE

ReportFormat = Literal["table", "json", "yaml", "junit"]
DEFAULT_NAMESPACE = BURNIN_NAMESPACE
_IMAGE_KEYS = {f.name.replace("_", "-"): f.name for f in fields(BurnInImages) if f.name != "nccl_tests_binary"}


RUN = "run"
GROUP_HELP = """Burn in GPU nodes with Jobs and judge them: PASS, WARN, FAIL, ERROR or SKIPPED per node.

`burnin [CONFIG] [OPTIONS]` is `burnin run`: it starts a burn-in. `burnin show RUN` shows a past run and starts
nothing."""


class BurnInCommands(PlainHelpGroup):
    """`burnin` runs a burn-in unless its first word names another of its commands (`show`): `burnin CONFIG` and
    `burnin --nodes N` mean `burnin run ...`, as before `show` existed."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = [RUN, *args]
        return super().parse_args(ctx, args)


def register(app: typer.Typer) -> None:
    commands = typer.Typer(cls=BurnInCommands, help=GROUP_HELP, no_args_is_help=False)
    commands.command(RUN)(burnin)
    commands.command("show")(show)
    app.add_typer(commands, name="burnin")


def burnin(
    config: Annotated[
        Path | None,
        typer.Argument(help="The cluster's config.yaml: test the nodes of its GPU types.", show_default=False),
    ] = None,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Test these nodes, N1,N2 (default: the config's, else all GPU nodes).")
    ] = None,
    level: Annotated[
        Tier | None,
        typer.Option(
            "--level",
            help="quick: GPU state (seconds); standard: + DCGM diag, matmul soak, one-node NCCL; "
            "full: + DCGM level 4, longer soak, node pairs over the fabric "
            "(default: the config's burnin.level, else standard).",
        ),
    ] = None,
    output: Annotated[
        ReportFormat, typer.Option("-o", "--output", help="table per node, json or yaml, or JUnit XML for CI.")
    ] = "table",
    quarantine: Annotated[
        bool, typer.Option("--quarantine", help="Taint FAIL nodes with the health controller's quarantine.")
    ] = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Where the Jobs run.")] = DEFAULT_NAMESPACE,
    timeout: Annotated[
        str | None,
        typer.Option("--timeout", help="How long to wait for each batch of Jobs, e.g. 45m (default: their deadline)."),
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            help="Finish an earlier run: reuse its Jobs, start those it misses (to only read it: burnin show RUN).",
        ),
    ] = None,
    image: Annotated[
        list[str] | None,
        typer.Option("--image", help=f"TOOL=IMAGE, TOOL one of {', '.join(_IMAGE_KEYS)} (repeatable)."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the objects; create nothing.")] = False,
    unschedulable_timeout: Annotated[
        int | None,
        typer.Option(
            "--unschedulable-timeout",
            min=1,
            help="Seconds a pod may stay unschedulable before its node is reported as ERROR with the scheduler's "
            f"reason (default: the config's burnin.unschedulableSeconds, else {UNSCHEDULABLE_SECONDS}).",
        ),
    ] = None,
) -> None:
    """Start a burn-in of GPU nodes (the default command: `burnin CONFIG` is `burnin run CONFIG`).

    Each judged node's verdict is recorded on it (annotation konduktor.ai/burnin-result, shown by `nodes`), and the
    run's report in the cluster (`burnin show RUN`). Exit 0: every node PASSed, WARNed or was SKIPPED; 1: a node
    FAILed or ended in ERROR; 4: the wait ended with Jobs still running (read them later with `burnin show RUN`);
    2: bad input.
    """
    loaded = load_checked(config) if config is not None else None
    options = options_for_tier(
        level or runs.configured_tier(loaded.config if loaded else None), images=images_from(image or [])
    )
    run = run_id or make_run_id(datetime.now(UTC))
    wait_s = parse_timeout(timeout) if timeout else None
    names = [n.strip() for n in (nodes or "").split(",") if n.strip()]
    configured = loaded.config.burnin.unschedulable_seconds if loaded else UNSCHEDULABLE_SECONDS
    unschedulable_s = unschedulable_timeout if unschedulable_timeout is not None else configured
    with connect(kubeconfig, context, sim) as kube:
        if dry_run:
            targets = select_targets(kube.list("v1", "Node"), loaded.config if loaded else None, names)
            sys.stdout.write(to_yaml(BurnInRunner(kube, namespace, run, options).objects(targets)))
            return
        request = BurnInRequest(options, run, namespace, tuple(names), wait_s, quarantine, unschedulable_s)
        report, waited_out = runs.burn_in(kube, loaded.config if loaded else None, request, say, progress)
    print_report(report, output)
    finish(report, waited_out)


def show(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The run id a burn-in printed.", show_default=False)],
    output: Annotated[
        ReportFormat, typer.Option("-o", "--output", help="table per node, json or yaml, or JUnit XML for CI.")
    ] = "table",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Where the run's Jobs ran.")] = DEFAULT_NAMESPACE,
) -> None:
    """Show a past burn-in run from what it left in the cluster: its recorded report, else its Jobs, pods and
    logs as they are now. Starts, changes and deletes nothing.

    Exit as the run: 0 every node PASSed, WARNed or was SKIPPED; 1 a node FAILed or ended in ERROR; 4 Jobs still
    running; 2 no such run.
    """
    with connect(kubeconfig, context, sim, read_only=True) as kube:
        report, running = runs.show_run(kube, namespace, run_id)
    print_report(report, output)
    finish(report, running)


def print_report(report: BurnInReport, output: ReportFormat) -> None:
    if output == "yaml":
        print_document(report_to_dict(report), "yaml")
    else:
        sys.stdout.write({"table": render_table, "json": render_json, "junit": render_junit}[output](report))


def finish(report: BurnInReport, running: bool) -> None:
    code = exit_code(report, running)
    if code == 4:
        err.print(
            f"some Jobs are still running; read them later: konduktor-install burnin show {report.run_id}", markup=False
        )
    if code:
        raise typer.Exit(code)


def images_from(overrides: Sequence[str]) -> BurnInImages:
    images = BurnInImages()
    for item in overrides:
        tool, _, reference = item.partition("=")
        if tool not in _IMAGE_KEYS or not reference:
            raise UsageError(f"--image {item}: expected TOOL=IMAGE", hint=f"TOOL is one of {', '.join(_IMAGE_KEYS)}")
        images = replace(images, **{_IMAGE_KEYS[tool]: reference})
    return images

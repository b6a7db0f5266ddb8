"""`konduktor-install burnin`: run the burn-in Jobs on GPU nodes, judge their output, report, optionally quarantine.

The run itself is `konduktor.burnin.runner`; the quarantine of FAIL nodes is the health controller's
(`konduktor.controller.quarantine`). A run is named by its run id: running the command again with `--run-id`
picks up that run's Jobs instead of starting new ones, so an interrupted run can still be collected.
"""

from __future__ import annotations

import re
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
from konduktor.burnin.results import BurnInReport, Verdict
from konduktor.burnin.runner import BurnInRequest, BurnInRunner
from konduktor.burnin.thresholds import DEFAULT_THRESHOLDS
from konduktor.burnin.tiers import BurnInImages, Tier, options_for_tier
from konduktor.cli.console import err, print_document, progress
from konduktor.cli.quotas import load_checked
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.config.model import UNSCHEDULABLE_SECONDS, Config, duration_seconds
from konduktor.controller.quarantine import quarantine_failed
from konduktor.controller.release import release_hints
from konduktor.errors import UsageError
from konduktor.kube.client import Kube
from konduktor.quotas.manifests import to_yaml
from konduktor.vocabulary import BURNIN_NAMESPACE

ReportFormat = Literal["table", "json", "yaml", "junit"]
DEFAULT_NAMESPACE = BURNIN_NAMESPACE
_IMAGE_KEYS = {f.name.replace("_", "-"): f.name for f in fields(BurnInImages) if f.name != "nccl_tests_binary"}
_DURATION = re.compile(r"^(\d+(\.\d+)?(s|m|h))+$")


def say(message: str) -> None:
    err.print(message, markup=False)


def register(app: typer.Typer) -> None:
    app.command("burnin")(burnin)


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
        str | None, typer.Option("--run-id", help="Collect (or finish) an earlier run instead of starting a new one.")
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
    """Burn in GPU nodes with Jobs and judge them: PASS, WARN, FAIL, ERROR or SKIPPED per node.

    Exit 0: every node PASSed, WARNed or was SKIPPED; 1: a node FAILed or ended in ERROR; 4: the wait ended with
    Jobs still running (collect them later with --run-id); 2: bad input.
    """
    loaded = load_checked(config) if config is not None else None
    options = options_for_tier(
        level or configured_tier(loaded.config if loaded else None), images=images_from(image or [])
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
        report, waited_out = burn_in(kube, loaded.config if loaded else None, request)
        if output == "yaml":
            print_document(report_to_dict(report), "yaml")
        else:
            sys.stdout.write({"table": render_table, "json": render_json, "junit": render_junit}[output](report))
    code = exit_code(report, waited_out)
    if code == 4:
        err.print(f"some Jobs are still running; collect them with --run-id {run}", markup=False)
    if code:
        raise typer.Exit(code)


def burn_in(kube: Kube, config: Config | None, request: BurnInRequest) -> tuple[BurnInReport, bool]:
    """One run on the chosen nodes, judged; FAIL nodes quarantined when asked. (report, whether the wait ended
    with Jobs still running). A node whose pod stays unschedulable for `request.unschedulable_s` is an ERROR
    with the scheduler's reason."""
    run, options = request.run_id, request.options
    runner = BurnInRunner(kube, request.namespace, run, options, request.unschedulable_s, say=say, progress=progress)
    targets = select_targets(kube.list("v1", "Node"), config, request.nodes)
    say(f"burn-in {run}: {options.tier.value} on {len(targets)} node(s) in {request.namespace}")
    verdicts, waited_out = runner.run(targets, request.wait_s)
    if request.quarantine:
        quarantine_failed(kube, verdicts, say)
    for hint in release_hints(verdicts, kube.list("v1", "Node")):
        say(hint)
    counts = ", ".join(f"{sum(v.verdict is s for v in verdicts)} {s.value}" for s in Verdict)
    say(f"burn-in {run}: {counts}")
    return BurnInReport(run, options.tier.value, DEFAULT_THRESHOLDS.version, verdicts, runner.pairs), waited_out


def configured_tier(config: Config | None) -> Tier:
    """The config's burn-in level; `none` only turns off the burn-in `up` runs, so asking for one gets standard."""
    level = config.burnin.level if config else "none"
    return Tier.STANDARD if level == "none" else Tier(level)


def images_from(overrides: Sequence[str]) -> BurnInImages:
    images = BurnInImages()
    for item in overrides:
        tool, _, reference = item.partition("=")
        if tool not in _IMAGE_KEYS or not reference:
            raise UsageError(f"--image {item}: expected TOOL=IMAGE", hint=f"TOOL is one of {', '.join(_IMAGE_KEYS)}")
        images = replace(images, **{_IMAGE_KEYS[tool]: reference})
    return images


def parse_timeout(text: str) -> float:
    """Seconds, or a duration such as 90s, 45m, 1h30m."""
    if text.isdigit():
        seconds = float(text)
    elif _DURATION.match(text):
        seconds = duration_seconds(text)
    else:
        raise UsageError(f"--timeout {text}: not a duration", hint="write seconds or e.g. 90s, 45m, 1h30m")
    if seconds <= 0:
        raise UsageError("--timeout must be more than zero")
    return seconds

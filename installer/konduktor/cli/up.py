"""`konduktor-install up`: install or upgrade the platform from a config, and its report (`-o json` too).

What it does is `konduktor.ops.up` (validate -> target -> preflight -> install the chart -> team quotas -> verify ->
audit the policies -> burn in); a config with `clusters:` is `konduktor.ops.multicluster`.
"""

from __future__ import annotations

import textwrap
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from konduktor.burnin.record import Policy
from konduktor.burnin.results import BurnInReport, NodeVerdict, Verdict
from konduktor.cli.arguments import ConfigArgument, check_kubeconfigs, load_checked, no_cluster_option
from konduktor.cli.confirm import YesOption, confirmation
from konduktor.cli.console import OutputFormat, err, print_document, progress, say
from konduktor.cli.quota_options import AdoptOption, DrainOption, DrainTimeoutOption
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption
from konduktor.errors import ExitCode
from konduktor.kube.documents import load_documents
from konduktor.kube.sync import WRITES, Change
from konduktor.ops.chart import skipped_on_sim
from konduktor.ops.multicluster import Member, run_fleet_up
from konduktor.ops.sharing import sharing_document, sharing_lines
from konduktor.ops.status import release_document
from konduktor.ops.up import UpReport, UpRequest, run_up
from konduktor.ops.values import merged, read_values_files
from konduktor.quotas.sync import DRAIN_TIMEOUT, Takeover


def up(
    config: ConfigArgument,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    values: Annotated[
        list[Path] | None, typer.Option("--values", "-f", help="Extra chart values files (repeatable).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Install even when preflight checks fail.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate, preflight and plan; change nothing.")] = False,
    yes: YesOption = False,
    adopt: AdoptOption = None,
    drain_removed_teams: DrainOption = None,
    drain_timeout: DrainTimeoutOption = DRAIN_TIMEOUT,
    burnin: Annotated[
        Policy,
        typer.Option(
            "--burnin",
            help="Which GPU nodes to burn in at the config's burnin.level: all; new (never burned in, changed since "
            "their verdict, or without a usable one); none. Nodes whose GPUs running pods hold are SKIPPED.",
        ),
    ] = Policy.NEW,
    drain_for_sharing: Annotated[
        bool,
        typer.Option(
            "--drain-for-sharing",
            help="Change a node's GPU sharing layout even while GPU work runs there: cordon it, evict its GPU pods "
            "(honouring PodDisruptionBudgets), relabel it, and uncordon it once the layout is in place. Without it, "
            "up refuses such a change (exit 3) and names the nodes and pods.",
        ),
    ] = False,
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """Install or upgrade Konduktor from a config: the simulated cluster when no kubeconfig is given. A config with
    `clusters:` installs every cluster it names, the workers in dispatch order, then the manager.

    A config with sharing groups (gpuTypes.<type>.sharing) also labels each group's nodes for the GPU Operator,
    keeping a node in its group from run to run, and gives the others whole GPUs back; a layout change on a node
    with GPU work is refused unless --drain-for-sharing."""
    files = read_values_files(values or [])
    loaded = load_checked(config, several_clusters=True)  # nothing runs unless the whole config validates
    if loaded.config.clusters is not None:
        no_cluster_option(kubeconfig, context, sim)
        check_kubeconfigs(loaded, config)
    request = UpRequest(
        loaded,
        kubeconfig,
        context,
        sim,
        merged(files),
        force=force,
        dry_run=dry_run,
        takeover=Takeover(adopt or (), drain_removed_teams, drain_timeout),
        values_files=tuple(files),
        burnin=burnin,
        drain_for_sharing=drain_for_sharing,
    )
    if loaded.config.clusters is not None:
        with progress("up") as report:
            fleet = run_fleet_up(request, config, confirm=confirmation(yes), report=report, say=say, progress=progress)
        _report_fleet(fleet, output)
        return
    with progress("up") as report:
        result = run_up(request, confirm=confirmation(yes), report=report, say=say, progress=progress)
    if _report_up(result, output):
        raise typer.Exit(ExitCode.NEGATIVE)


def _report_fleet(fleet: list[tuple[Member, UpReport]], output: OutputFormat) -> None:
    """Each cluster's report under its name; exit 1 when a burn-in found unfit nodes on any."""
    if output != "table":
        documents = [{"name": member.name, "role": member.role, **up_document(r)} for member, r in fleet]
        print_document({"clusters": documents}, output)
    unfit = []
    for member, result in fleet:
        if output == "table":
            typer.echo(f"== {member.name} ({member.role}) ==")
        unfit.append(_report_up(result, output, document=False))
    if any(unfit):
        raise typer.Exit(ExitCode.NEGATIVE)


def _report_up(result: UpReport, output: OutputFormat, *, document: bool = True) -> bool:
    """`up`'s report (with `document`, as the output format asks) and its warnings; whether burn-in found nodes
    that are not fit."""
    if output == "table":
        print_report(result)
    elif document:
        print_document(up_document(result), output)
    if result.violations:
        err.print(
            f"up: {len(result.violations)} existing workload(s) break the admission policies: they keep running, "
            "but new ones like them (their controllers' new pods too) are refused; fix them, or adopt with "
            "policies.validationActions=[Warn,Audit] until up reports none",
            markup=False,
        )
    where = result.target.flags()
    err.print(f"next: konduktor-install quotas explain{where}", markup=False)
    if result.burnin is not None and unfit_nodes(result.burnin):
        err.print(
            f"up: the platform is installed, but burn-in {result.burnin.run_id} found nodes that are not fit; "
            f"details: konduktor-install burnin show {result.burnin.run_id}{where}",
            markup=False,
        )
        return True
    return False


def up_document(result: UpReport) -> dict[str, Any]:
    """`up -o json`: the chart and its components, the release (null on a dry run), the teams' queues, the quota
    objects changed (or that would change), policy violations, unfit burn-in nodes and the steps' times."""
    chart = load_documents(result.chart / "Chart.yaml")[0]
    return {
        "cluster": {"simulated": result.target.simulated, "name": result.target.sim},
        "dry_run": result.release is None,
        "chart": {
            "name": chart["name"],
            "version": str(chart["version"]),
            "components": [{"name": d["name"], "version": str(d["version"])} for d in chart.get("dependencies", [])],
        },
        "release": None if result.release is None else release_document(result.release),
        "image": result.image,
        "skipped": [{"name": n, "why": why} for n, why in skipped_on_sim().items()] if result.target.simulated else [],
        "queues": [
            {"team": name, "gpus": {t: q.quota for t, q in team.gpus.items()}, "namespaces": list(team.namespaces)}
            for name, team in sorted(result.config.teams.items())
        ],
        "quotas": [change.as_json() for change in quota_writes(result.changes)],
        "policy_violations": [asdict(v) for v in result.violations],
        "sharing": sharing_document(result.sharing),
        "burnin": None
        if result.burnin is None
        else {
            "run_id": result.burnin.run_id,
            "unfit": [
                {"node": node.node, "verdict": node.verdict.value, "reasons": unfit_reasons(node)}
                for node in unfit_nodes(result.burnin)
            ],
            "tested": [node.node for node in result.burnin.nodes if node.verdict is not Verdict.SKIPPED],
            "skipped": [
                {"node": node.node, "reason": "; ".join(unfit_reasons(node))} for node in skipped_nodes(result.burnin)
            ],
        },
        "steps": [{"name": name, "seconds": round(seconds, 1)} for name, seconds in result.steps],
    }


def print_report(result: UpReport) -> None:
    """`up`'s report, on stdout: what it installed, the teams' queues, what changed, and what needs a look."""
    config = result.config
    where = f"simulated cluster {result.target.sim}" if result.target.sim else "the cluster"
    chart = load_documents(result.chart / "Chart.yaml")[0]
    if result.release is None:
        typer.echo(f"up (dry run): {where}: would install {chart['name']} {chart['version']}")
    else:
        release = result.release
        typer.echo(f"up: {where}: {chart['name']} {chart['version']} revision {release.revision} ({release.status})")
    for dependency in chart.get("dependencies", []):
        typer.echo(f"  {dependency['name']} {dependency['version']}")
    typer.echo(f"  image {result.image} (health controller, capacity publisher)")
    if result.target.simulated:
        skipped = ", ".join(f"{name} ({why})" for name, why in skipped_on_sim().items())
        typer.echo(f"  not on the simulated cluster: {skipped}")
    for name, team in sorted(config.teams.items()):
        gpus = ", ".join(f"{q.quota} {t}" for t, q in team.gpus.items())
        typer.echo(f"  queue {name}: {gpus} GPUs, namespaces {', '.join(team.namespaces)}")
    verb = "would change" if result.release is None else "changed"
    changed = quota_writes(result.changes)
    typer.echo(f"  {len(changed)} quota objects {verb}")
    for change in changed if result.release is None else []:
        typer.echo(textwrap.indent(change.describe(), "    "))
    for line in sharing_lines(result.sharing):
        typer.echo(f"  {line}")
    for violation in result.violations:
        typer.echo(f"policy: {violation.kind} {violation.namespace}/{violation.name}: {violation.reason}")
    if result.burnin is not None:
        passed_over = skipped_nodes(result.burnin)
        tested = len(result.burnin.nodes) - len(passed_over)
        typer.echo(f"burn-in {result.burnin.run_id}: {tested} node(s) burned in, {len(passed_over)} skipped")
        for node in passed_over:
            typer.echo(f"  {node.node} SKIPPED: {'; '.join(unfit_reasons(node))}")
    for node in unfit_nodes(result.burnin):
        quarantined = " (quarantined)" if node.verdict is Verdict.FAIL and config.burnin.quarantine else ""
        typer.echo(f"burn-in: {node.node} {node.verdict.value}{quarantined}: {'; '.join(unfit_reasons(node))}")
    typer.echo("took: " + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in result.steps))


def unfit_nodes(report: BurnInReport | None) -> list[NodeVerdict]:
    """The burn-in's nodes that FAILed or gave no result."""
    return [node for node in report.nodes if node.verdict in (Verdict.FAIL, Verdict.ERROR)] if report else []


def skipped_nodes(report: BurnInReport | None) -> list[NodeVerdict]:
    """The nodes `up` did not burn in this time: unchanged since their verdict, or busy."""
    return [node for node in report.nodes if node.verdict is Verdict.SKIPPED] if report else []


def unfit_reasons(node: NodeVerdict) -> list[str]:
    """The first reason of each check that gave the node its verdict."""
    return [r for c in node.checks if c.verdict is node.verdict for r in c.reasons[:1]]


def quota_writes(changes: list[Change]) -> list[Change]:
    """The quota changes `up` made (or would make, or refused): not those that left an object as it was."""
    return [c for c in changes if c.action in (*WRITES, "prune", "refuse")]

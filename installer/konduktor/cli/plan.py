"""`konduktor-install plan`: what `up` would change (the release's objects, the quota objects, the nodes'
sharing labels), and its document (`-o json`). What it reads is `konduktor.ops.plan`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from konduktor.cli.arguments import ConfigArgument, check_kubeconfigs, load_checked, no_cluster_option
from konduktor.cli.console import OutputFormat, print_document, say
from konduktor.cli.quota_options import AdoptOption
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption
from konduktor.helm.release import NAMESPACE, RELEASE
from konduktor.ops.multicluster import Member, plan_fleet
from konduktor.ops.plan import UpPlan, plan_up
from konduktor.ops.sharing import sharing_document, sharing_lines
from konduktor.ops.status import release_document
from konduktor.ops.target import resolve_target
from konduktor.ops.values import merged, read_values_files
from konduktor.quotas.sync import Takeover


def plan(
    config: ConfigArgument,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    values: Annotated[list[Path] | None, typer.Option("--values", "-f", help="Extra chart values files.")] = None,
    adopt: AdoptOption = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """What `up` would change. Exit 0: nothing; 1: changes pending (release, quotas or nodes' sharing labels); 3:
    `up` would refuse a quota change (an object belongs to someone else) or a GPU layout change on a node where GPU
    work runs (unless --drain-for-sharing); 2 or 5: error.

    The release's objects that `up` would add, remove or change (a server-side dry run of the upgrade with the
    same values, against the deployed release), each change with its diff; then the quota objects; then each node
    whose sharing labels change, with the pods (and their teams) that hold GPUs there when its layout changes."""
    loaded = load_checked(config, several_clusters=True)
    files = read_values_files(values or [])
    if loaded.config.clusters is not None:
        no_cluster_option(kubeconfig, context, sim)
        check_kubeconfigs(loaded, config)
        _plan_fleet(plan_fleet(loaded.config, config, merged(files), Takeover(adopt or ()), say), output)
        return
    target = resolve_target(kubeconfig, context, sim, read_only=True)
    planned = plan_up(target, loaded.config, merged(files), files, Takeover(adopt or ()), say)
    document = plan_document(planned)
    if output == "table":
        print_plan(document, planned)
    else:
        print_document(document, output)
    raise typer.Exit(planned.code)


def _plan_fleet(planned: list[tuple[Member, UpPlan]], output: OutputFormat) -> None:
    """Each cluster's plan under its name; the exit code is the most pressing of theirs (3 over 1 over 0)."""
    if output == "table":
        for member, one in planned:
            typer.echo(f"== {member.name} ({member.role}) ==")
            print_plan(plan_document(one), one)
    else:
        documents = [{"name": m.name, "role": m.role, **plan_document(one)} for m, one in planned]
        print_document({"clusters": documents}, output)
    raise typer.Exit(max(one.code for _, one in planned))


def plan_document(planned: UpPlan) -> dict[str, Any]:
    """`plan -o json`: the release as `status` shows it, with the chart `up` would install and its objects'
    changes, and the quota objects' changes (the shape of `quotas diff -o json`)."""
    return {
        "release": {
            **release_document(planned.installed),
            "wanted": {"chart": planned.chart, "version": planned.version},
            "changes": [change.as_json() for change in planned.changes],
        },
        "quotas": [change.as_json() for change in planned.quotas],
        "sharing": sharing_document(planned.sharing),
    }


def print_plan(document: dict[str, Any], planned: UpPlan) -> None:
    """One line for the release, one per object it adds, removes or changes (a change with its diff), one per
    quota object."""
    changes = planned.changes
    release = document["release"]
    chart = f"{release['wanted']['chart']} {release['wanted']['version']}"
    if not release["installed"]:
        typer.echo(f"install {chart} as release {RELEASE} in {NAMESPACE}: {len(changes)} objects")
    else:
        state = f"release {RELEASE} revision {release['revision']} ({release['status']})"
        typer.echo(f"{state}: {len(changes)} objects would change with {chart}" if changes else f"{state}: up to date")
    for change in changes:
        typer.echo(change.describe())
        if change.action == "change":
            typer.echo("".join(f"    {line}" for line in change.diff.splitlines(keepends=True)), nl=False)
    for quota in planned.quotas:
        typer.echo(quota.describe())
    for line in sharing_lines(planned.sharing):
        typer.echo(line)

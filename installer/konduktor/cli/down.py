"""`konduktor-install down`: remove what `up` made, from one cluster or from the clusters of a config, and what
`--dry-run` lists. What it does is `konduktor.ops.down`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from konduktor.cli.arguments import check_kubeconfigs, load_fleet
from konduktor.cli.confirm import YesOption, confirmation
from konduktor.cli.console import err, warn
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption
from konduktor.config.model import Config
from konduktor.errors import KonduktorError, PartialApply, UsageError
from konduktor.helm.release import NAMESPACE, RELEASE
from konduktor.kube.client import Kube
from konduktor.ops.down import DOWN_TIMEOUT, lost_with_crds, plan_down, take_down
from konduktor.ops.multicluster import Member, members, running, stop_dispatching_to
from konduktor.ops.status import installed_release
from konduktor.ops.target import Target, running_target


def down(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    purge: Annotated[
        bool, typer.Option("--purge", help="Also delete the team and konduktor-system namespaces.")
    ] = False,
    delete_crds: Annotated[
        bool,
        typer.Option(
            "--delete-crds",
            help="Go ahead although the release's CRDs (Kueue's) hold objects Konduktor did not create, such as "
            "Workloads: they are deleted with the CRDs.",
        ),
    ] = False,
    yes: YesOption = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what down would delete and what it would wait for; change nothing.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0, help="Seconds to wait for what it deleted to be gone.")
    ] = DOWN_TIMEOUT,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="A config with `clusters:`: every cluster of it (the manager first), each reached as it names it.",
        ),
    ] = None,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="With --config: only this cluster (the manager or a worker).")
    ] = None,
) -> None:
    """Remove what `up` made: the release and every quota object Konduktor owns. Namespaces (and what runs in
    them) stay unless --purge.

    It waits (--timeout) for what it deleted to be gone, and names what is still there and why: exit 4 then (e.g. a
    ClusterQueue Kueue keeps while Workloads hold quota in it), 0 when all is gone. On a real cluster the
    uninstall deletes Kueue's CRDs and with them every Kueue object: `down` refuses (exit 2, nothing changed)
    while they hold objects it did not create, unless --delete-crds.

    With --config, a config with `clusters:`: every cluster of it, the manager first, or the one --cluster names. A
    worker taken down alone leaves the others running: the manager first stops dispatching to it (its
    MultiKueueConfigs drop it, its MultiKueueCluster and kubeconfig Secrets go) until the next `up`. A cluster that
    does not finish stops it there: run it again."""
    if config is None:
        if cluster is not None:
            raise UsageError("--cluster names a cluster of a config with clusters:; give the config with --config")
        targets = [("", running_target(kubeconfig, context, sim))]
    else:
        loaded = load_fleet(config, kubeconfig, context, sim)
        fleet = loaded.config
        found = members(fleet, config.parent, simulated_unless_named=True)
        targets = _fleet_targets(found, config, cluster)
        manager = found[0]
        # The clusters it reaches: those it takes down, and the manager, which stops dispatching to a worker first.
        check_kubeconfigs(loaded, config, None if cluster is None else {cluster, manager.name})
        if cluster is not None and cluster != manager.name:
            _detach_worker(fleet, manager, cluster, dry_run=dry_run)
    for heading, target in targets:
        if heading:
            err.print(f"== {heading} ==", markup=False)
        _down_one(target, purge=purge, delete_crds=delete_crds, yes=yes, dry_run=dry_run, timeout=timeout)


def _fleet_targets(found: list[Member], path: Path, cluster: str | None) -> list[tuple[str, Target]]:
    """The clusters `down --config` takes down: the manager first (it stops dispatching), then each worker; or the
    one `--cluster` names. A member that names no cluster is the simulated cluster of its name, which must run."""
    chosen = [member for member in found if cluster is None or member.name == cluster]
    if not chosen:
        names = ", ".join(member.name for member in found)
        raise UsageError(f"--cluster {cluster}: no such cluster in {path} (one of {names})")
    return [(f"{m.name} ({m.role})", running(m)) for m in chosen]


def _detach_worker(fleet: Config, manager: Member, cluster: str, *, dry_run: bool) -> None:
    """Before a worker of the config goes down alone: the manager stops dispatching to it. A manager that cannot be
    reached is named, and the worker still goes down (Kueue finds it lost)."""
    try:
        changes = stop_dispatching_to(fleet, manager, cluster, dry_run=dry_run)
    except KonduktorError as problem:
        warn(f"the manager was not told to stop dispatching to {cluster}: {problem}")
        return
    for change in changes:
        if dry_run:
            typer.echo(f"{change} (on the manager {manager.name})")
        else:
            err.print(f"down: on the manager {manager.name}: {change}", markup=False)


def _down_one(target: Target, *, purge: bool, delete_crds: bool, yes: bool, dry_run: bool, timeout: float) -> None:
    with target.connect() as kube:
        lost = lost_with_crds(kube, delete_crds=delete_crds or dry_run)
        if dry_run:
            print_down_plan(kube, target, purge, lost)
            return
        done = take_down(kube, target, purge=purge, lost=lost, timeout=timeout, confirm=confirmation(yes))
    quotas, namespaces, stuck, uninstalled = done.quotas, done.namespaces, done.stuck, done.uninstalled
    deleted = ", ".join(ref.name for ref in namespaces.deleted)
    err.print(
        f"down: release {'uninstalled' if uninstalled else 'was not installed'}, {len(quotas.deleted)} quota objects "
        "deleted"
        + (f", namespaces deleted: {deleted}" if deleted else "")
        + (f", {len(stuck)} not gone" if stuck else ""),
        markup=False,
    )
    kept = [*quotas.kept, *namespaces.kept]  # adopted: Konduktor did not create them, so it never deletes them
    if kept:
        err.print(f"down: left what Konduktor adopted and did not create: {', '.join(map(str, kept))}", markup=False)
    if done.strands:
        err.print(f"down: jobs left pending without their queue: {', '.join(done.strands)}", markup=False)
    if stuck:
        raise PartialApply(
            f"{len(stuck)} deleted object(s) still there after {timeout:.0f}s",
            detail="\n".join(s.describe() for s in stuck),
            hint="finish or delete the jobs named (kubectl delete job -n NAMESPACE NAME), then run down again",
        )


def print_down_plan(kube: Kube, target: Target, purge: bool, lost: str) -> None:
    """`down --dry-run`: what it would delete, on stdout, and what it would wait for; nothing changes."""
    release = installed_release(target)
    planned = plan_down(kube, (NAMESPACE,) if purge else None)
    if release is not None:
        typer.echo(f"delete release {RELEASE} revision {release.revision} ({release.chart}) in {NAMESPACE}")
    if lost:
        typer.echo(f"delete with the release's CRDs: {lost} (down refuses this without --delete-crds)")
    for ref in planned.deleted:
        typer.echo(f"delete {ref}")
    for ref in planned.kept:
        typer.echo(f"keep   {ref}: adopted, Konduktor did not create it")
    for queue, workloads in planned.held.items():
        typer.echo(f"wait   ClusterQueue {queue}: {len(workloads)} workloads hold quota in it: {', '.join(workloads)}")
    for workload in planned.strands:
        typer.echo(f"strand {workload}: pending, its queue deleted")

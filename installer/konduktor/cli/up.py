"""The platform's life cycle: `up`, `plan`, `status`, `down`: their options and what they print.

What each does is in `konduktor.ops`: `up` in `ops.up` (validate -> target -> preflight -> install the chart ->
team quotas -> verify -> audit the policies -> burn in), `plan` in `ops.plan`, `status` in `ops.status`, `down` in
`ops.down`.
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from konduktor.burnin.record import Policy
from konduktor.burnin.results import BurnInReport, NodeVerdict, Verdict
from konduktor.cli.arguments import ConfigArgument, check_kubeconfigs, load_checked, load_fleet, no_cluster_option
from konduktor.cli.console import OutputFormat, err, print_document, print_rows, progress, say, warn
from konduktor.cli.quota_options import AdoptOption, DrainOption, DrainTimeoutOption
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption
from konduktor.config.model import Config
from konduktor.errors import ExitCode, KonduktorError, PartialApply, UsageError
from konduktor.health.breaker import BreakerView, ControllerView
from konduktor.health.health_view import ProductCapacity, capacity
from konduktor.helm.release import NAMESPACE, RELEASE, Release
from konduktor.kube.client import Kube
from konduktor.kube.documents import load_documents
from konduktor.kube.sync import WRITES, Change
from konduktor.ops.chart import skipped_on_sim
from konduktor.ops.down import DOWN_TIMEOUT, lost_with_crds, plan_down, take_down
from konduktor.ops.multicluster import Member, members, plan_fleet, run_fleet_up, running, stop_dispatching_to
from konduktor.ops.plan import UpPlan, plan_up
from konduktor.ops.sharing import SharingPlan
from konduktor.ops.status import PlatformStatus, application_state, installed_release, read_fleet_status, read_status
from konduktor.ops.target import Confirm, Target, resolve_target, running_target
from konduktor.ops.up import UpReport, UpRequest, run_up
from konduktor.ops.values import merged, read_values_files
from konduktor.quotas.sync import DRAIN_TIMEOUT, Takeover


def unfit_nodes(report: BurnInReport | None) -> list[NodeVerdict]:
    """The burn-in's nodes that FAILed or gave no result."""
    return [node for node in report.nodes if node.verdict in (Verdict.FAIL, Verdict.ERROR)] if report else []


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


def sharing_document(planned: SharingPlan | None) -> dict[str, Any] | None:
    """The nodes' sharing labels changed (or that would change), the groups short of nodes, the nodes cordoned for a
    layout that is not in place yet, and the MIG groups whose layout changed under their name; null when the cluster
    was not read."""
    if planned is None:
        return None
    return {
        "changes": [change.as_json() for change in planned.changes],
        "short": planned.short,
        "cordoned": [node.name for node in planned.cordoned],
        "relaid": planned.relaid,
    }


def sharing_lines(planned: SharingPlan | None) -> list[str]:
    """One line per node whose sharing labels change (with the GPU work on it when its layout changes), per group
    short of nodes, per node still cordoned for a layout, and per MIG group whose layout changed under its name."""
    if planned is None:
        return []
    lines = [change.describe() for change in planned.changes]
    lines += [f"sharing group {short}: the cluster has no more nodes of the type" for short in planned.short]
    lines += [f"node {node.name}: cordoned until its GPU layout is in place" for node in planned.cordoned]
    relaid = "its MIG layout changed under the same name: up refuses; give the new layout a new group name"
    lines += [f"sharing group {name}: {relaid}" for name in planned.relaid]
    return lines


def skipped_nodes(report: BurnInReport | None) -> list[NodeVerdict]:
    """The nodes `up` did not burn in this time: unchanged since their verdict, or busy."""
    return [node for node in report.nodes if node.verdict is Verdict.SKIPPED] if report else []


def unfit_reasons(node: NodeVerdict) -> list[str]:
    """The first reason of each check that gave the node its verdict."""
    return [r for c in node.checks if c.verdict is node.verdict for r in c.reasons[:1]]


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


def quota_writes(changes: list[Change]) -> list[Change]:
    """The quota changes `up` made (or would make, or refused): not those that left an object as it was."""
    return [c for c in changes if c.action in (*WRITES, "prune", "refuse")]


def confirmation(yes: bool) -> Confirm | None:
    """A question for the user on a terminal; none with --yes; an error without a terminal to ask on."""
    if yes:
        return None

    def ask(question: str) -> None:
        if not sys.stdin.isatty():
            raise UsageError(f"{question} needs an answer", hint="pass --yes when there is no terminal")
        if not typer.confirm(question):
            raise typer.Exit(ExitCode.NEGATIVE)

    return ask


YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before changing a real cluster.")]


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


def status(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="A config with `clusters:`: the status of its manager and every worker, each reached as it names it.",
        ),
    ] = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """The release, the team queues and the health controller. Exit 1 when Konduktor is not installed."""
    if config is not None:
        _fleet_status(config, kubeconfig, context, sim, output)
        return
    target = running_target(kubeconfig, context, sim, read_only=True)
    found = read_status(target)
    document = status_document(found)
    if output == "table":
        print_rows(status_rows(document), ["component", "state"], output)
    else:
        print_document(document, output)
    if found.release is None:
        raise typer.Exit(ExitCode.NEGATIVE)


def _fleet_status(
    path: Path, kubeconfig: Path | None, context: str | None, sim: str | None, output: OutputFormat
) -> None:
    """`status --config`: every cluster of the config; exit 1 when any lacks Konduktor or cannot be read."""
    loaded = load_fleet(path, kubeconfig, context, sim)
    found = read_fleet_status(members(loaded.config, path.parent))
    documents = [
        {
            "cluster": each.member.name,
            "role": each.member.role,
            **({"error": each.problem} if each.found is None else status_document(each.found[0])),
            **(
                {"workers": [asdict(w) for w in (each.found[1] if each.found else [])]}
                if each.member.role == "manager"
                else {}
            ),
        }
        for each in found
    ]
    if output == "table":
        rows = [
            {"cluster": f"{d['cluster']} ({d['role']})", **row}
            for d in documents
            for row in (
                [{"component": "cluster", "state": f"not read: {d['error']}"}] if "error" in d else status_rows(d)
            )
            + [
                {
                    "component": f"worker {w['name']}",
                    "state": "connected" if w["active"] else f"not connected: {w['reason']}",
                }
                for w in d.get("workers", [])
            ]
        ]
        print_rows(rows, ["cluster", "component", "state"], output)
    else:
        print_document({"clusters": documents}, output)
    if any(each.found is None or each.found[0].release is None for each in found):
        raise typer.Exit(ExitCode.NEGATIVE)


def status_document(found: PlatformStatus) -> dict[str, Any]:
    """One cluster's status as `status -o json` shows it."""
    health = found.health
    nodes = health.nodes
    return {
        "release": release_document(found.release),
        "health_controllers": [
            {
                "namespace": d["metadata"]["namespace"],
                "name": d["metadata"]["name"],
                "available": d.get("status", {}).get("availableReplicas", 0),
                "desired": d["spec"].get("replicas", 1),
            }
            for d in found.controllers
        ],
        # Its mode and leader (the Lease holder), and its fleet breaker: whether it quarantines at all.
        "health_controller": health.controller.row(),
        "breaker": health.breaker.row(),
        "queues": [q.row() for q in found.queues],
        # Quarantined and cordoned GPUs are capacity the queues' quotas still count on.
        "gpus": [asdict(c) for c in capacity(nodes)],
        "quarantined_nodes": [node.node for node in nodes if node.out_of_service],
        "argocd": [
            dict(zip(("namespace", "name", "sync", "health"), application_state(app), strict=True))
            for app in found.applications
        ],
    }


def release_document(release: Release | None) -> dict[str, Any]:
    """The release as `status -o json` and `up -o json` show it; `installed` false and the rest null when absent."""
    return {
        "name": RELEASE,
        "namespace": NAMESPACE,
        "installed": release is not None,
        "revision": release.revision if release else None,
        "status": release.status if release else None,
        "chart": release.chart if release else None,
    }


def status_rows(document: dict[str, Any]) -> list[dict[str, str]]:
    """`status`'s table: one line per component, in words."""
    release = document["release"]
    controller = ControllerView(**document["health_controller"])
    breaker = BreakerView.from_row(document["breaker"])
    gpus = [ProductCapacity(**c) for c in document["gpus"]]
    quarantined = document["quarantined_nodes"]
    return [
        {
            "component": "release",
            "state": f"{release['chart']} revision {release['revision']} {release['status']}"
            if release["installed"]
            else "not installed",
        },
        *[
            {
                "component": "health-controller",
                "state": f"{c['available']}/{c['desired']} available; {controller.describe()}",
            }
            for c in document["health_controllers"]
        ],
        *([{"component": "breaker", "state": breaker.describe()}] if controller.installed else []),
        *[
            {"component": f"queue {q['team']}", "state": f"{q['used']}/{q['nominal']} {q['flavor']} GPUs used"}
            for q in document["queues"]
        ],
        *[{"component": f"gpus {c.product}", "state": c.describe()} for c in gpus],
        *([{"component": "quarantined nodes", "state": ", ".join(quarantined)}] if quarantined else []),
        *[
            {"component": f"argocd {a['namespace']}/{a['name']}", "state": f"{a['sync']} {a['health']}"}
            for a in document["argocd"]
        ],
    ]


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

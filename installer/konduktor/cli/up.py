"""The platform's life cycle: `up`, `plan`, `status`, `down`.

up: validate -> target (the given cluster, else the simulated one) -> preflight -> install the chart ->
apply team quotas -> verify queues and the health controller -> audit existing workloads against the
policies -> burn in the GPU nodes (config `burnin`). Nothing touches a cluster until the whole config
validates and preflight passes; every step is safe to repeat, so a run that was interrupted is finished by
running it again.
"""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from konduktor.burnin.manifests import make_run_id
from konduktor.burnin.record import Policy
from konduktor.burnin.results import BurnInReport, NodeVerdict, Verdict
from konduktor.cli.config_commands import ConfigArgument, load_checked
from konduktor.cli.console import OutputFormat, err, print_document, print_rows, progress, say
from konduktor.cli.preflight import cluster_checks, node_checks, read_cluster, require_reachable
from konduktor.cli.quotas import AdoptOption, DrainOption, DrainTimeoutOption
from konduktor.cli.target import (
    ContextOption,
    KubeconfigOption,
    SimOption,
    Target,
    resolve_target,
    running_target,
)
from konduktor.config.load import LoadedConfig
from konduktor.config.model import Config
from konduktor.errors import ExitCode, KonduktorError, PartialApply, PreflightFailed, UsageError
from konduktor.health.breaker import BreakerView, ControllerView
from konduktor.health.health_status import read_health
from konduktor.health.health_view import ProductCapacity, capacity
from konduktor.helm.diff import ObjectChange, release_changes
from konduktor.helm.release import (
    CHARTS,
    NAMESPACE,
    RELEASE,
    Release,
    current,
    install_or_upgrade,
    release_namespace,
    render_new,
    render_upgrade,
    uninstall,
)
from konduktor.helm.schema import ValuesFile
from konduktor.helm.values import controller_image, core_values, merge_values, umbrella_values
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.documents import load_documents
from konduktor.kube.policy_audit import Violation, audit_workloads
from konduktor.kube.sync import WRITES, Change, refuse_if_any
from konduktor.ops.burnin import UpBurnIn, burn_in_for_up
from konduktor.ops.down import DOWN_TIMEOUT, plan_down, stranded_by, wait_gone
from konduktor.ops.values import check_values, read_values_files
from konduktor.preflight.inventory import SshHosts, config_inventory
from konduktor.preflight.results import Status
from konduktor.queueing.cluster import publish_capacity
from konduktor.quotas.sync import (
    DRAIN_TIMEOUT,
    NO_TAKEOVER,
    Removal,
    Takeover,
    crd_losses,
    kueue_served,
    pending_code,
    plan_quotas,
    purge_namespaces,
    remove_quota_objects,
    sync_quotas,
    wait_queues_active,
)
from konduktor.quotas.usage import team_usage
from konduktor.sim.cluster import Progress, SimCluster
from konduktor.sim.pools import spec_of
from konduktor.vocabulary import BURNIN_NAMESPACE, KUEUE_API
from konduktor.waiting import wait_until

# What the umbrella installs that the simulated cluster cannot run: its fake nodes run no containers, and
# Kueue already runs beside its control plane.
SKIPPED_ON_SIM = {
    "gpu-operator": "no real GPUs or drivers on fake nodes",
    "network-operator": "no NICs on fake nodes",
    "dcgm-exporter": "no GPUs to measure",
    "kube-prometheus-stack": "fake nodes run no containers",
    "loki": "fake nodes run no containers",
    "opentelemetry-collector": "fake nodes run no containers",
    "kueue": "the simulated cluster runs Kueue v0.19.2 as a local process",
}


Confirm = Callable[[str], None]  # asks the user a yes/no question; returns on yes


@dataclass(frozen=True)
class UpRequest:
    """What `up` is asked to do: the config, the cluster (a kubeconfig, else the simulated cluster `sim`), extra
    chart values, whether to install despite failed preflight checks or only plan, and what its quota sync may
    take over."""

    config: Path
    kubeconfig: Path | None = None
    context: str | None = None
    sim: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    force: bool = False
    dry_run: bool = False
    takeover: Takeover = NO_TAKEOVER
    values_files: tuple[ValuesFile, ...] = ()  # where `values` came from, to name the file of a refused field
    burnin: Policy = Policy.NEW  # which GPU nodes to burn in (at the config's burnin.level)


class StepClock:
    """How long each step of `up` took, for its report and the benchmark."""

    def __init__(self, report: Progress) -> None:
        self.report = report
        self.steps: list[tuple[str, float]] = []
        self._started = time.monotonic()
        self._name: str | None = None

    def step(self, name: str, message: str) -> None:
        self.finish()
        self._name, self._started = name, time.monotonic()
        self.report(f"{name}: {message}")

    def finish(self) -> None:
        if self._name is not None:
            self.steps.append((self._name, time.monotonic() - self._started))
            self._name = None


@dataclass
class UpReport:
    config: Config
    target: Target
    chart: Path
    release: Release | None
    changes: list[Change]
    violations: list[Violation]
    steps: list[tuple[str, float]]
    burnin: BurnInReport | None = None
    image: str = ""  # the konduktor image the release runs


def start_simulated(target: Target, config: Config, report: Progress) -> None:
    """The simulated cluster, started or reshaped from the config; a given cluster is used as it is."""
    if target.sim is not None:
        SimCluster(target.sim, progress=report).up(spec_of(config, job_seconds=5.0))


def preflight_passes(
    kube: Kube, loaded: LoadedConfig, inventory: SshHosts | None, force: bool, report: Progress
) -> None:
    """The same checks as `konduktor-install preflight`: the cluster's, then the GPU hosts' when the config has
    `preflight.nodes` (over SSH, or from a pod on each GPU node). A FAIL stops `up` before anything else
    changes (the pods' Jobs are all it writes)."""
    facts = read_cluster(kube)
    require_reachable(facts)
    checks = cluster_checks(loaded, facts, (NAMESPACE, RELEASE))
    checks += node_checks(kube, loaded, facts, inventory, False, report)
    failed = [c for c in checks if c.status is Status.FAIL]
    for check in failed:
        err.print(f"preflight FAIL {check.name} ({check.subject}): {check.summary}", markup=False)
        for fact in check.evidence:
            err.print(f"  {fact}", markup=False)
    if failed and not force:
        raise PreflightFailed(
            f"{len(failed)} preflight check(s) failed; nothing was changed",
            hint="fix them or pass --force; `konduktor-install preflight CONFIG` runs the checks again (with "
            "preflight.nodes.pod, a pod on each GPU node)",
        )


def chart_for(simulated: bool, config: Config, extra: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The chart and the values to install.

    On the simulated cluster only Konduktor's own chart (fake nodes run no GPU operator, and Kueue runs beside
    the control plane); else the umbrella, with the config's Kueue settings merged into Kueue's Configuration.
    The config's `health:` settings go to konduktor-core's controller settings in both, over the values files.
    """
    if simulated:
        core = CHARTS / "konduktor-core"
        values = merge_values(load_documents(core / "values-sim.yaml")[0], extra)
        return core, merge_values(values, core_values(config))
    umbrella = CHARTS / "konduktor"
    if not (umbrella / "charts").is_dir():
        raise UsageError(
            "the umbrella chart's dependencies are not downloaded",
            hint=f"run `helm dependency build {umbrella}` where the chart repositories are reachable "
            "(or unpack the air-gapped chart bundle there), then re-run",
        )
    effective = merge_values(load_documents(umbrella / "values.yaml")[0], extra)
    return umbrella, merge_values(extra, umbrella_values(config, effective))


def chart_image(chart: Path, chart_values: dict[str, Any]) -> str:
    """The konduktor image the release runs (health controller, capacity publisher): konduktor-core's defaults,
    the umbrella's, then the values `up` passes (values files and the config's `image:`)."""
    core = CHARTS / "konduktor-core"
    values = load_documents(core / "values.yaml")[0]
    if chart != core:
        values = merge_values(values, load_documents(chart / "values.yaml")[0].get("konduktor-core", {}))
        chart_values = chart_values.get("konduktor-core", {})
    app_version = str(load_documents(core / "Chart.yaml")[0]["appVersion"])
    return controller_image(merge_values(values, chart_values), app_version)


def verify(kube: Kube, config: Config, report: Progress) -> None:
    report(f"verify: waiting for {len(config.teams)} ClusterQueues to be active")
    wait_queues_active(kube, config)
    report("verify: waiting for the health controller and the capacity publisher")

    def controller_ready() -> bool:
        for deployment in kube.list(
            "apps/v1", "Deployment", NAMESPACE, label_selector="app.kubernetes.io/part-of=konduktor"
        ):
            status = deployment.get("status", {})
            if status.get("availableReplicas", 0) < deployment["spec"].get("replicas", 1):
                return False
        return True

    wait_until("konduktor-core's Deployments to be available", controller_ready, timeout=300)
    report("verify: waiting for the admission policies to be in force")
    # The API server loads a new binding's parameters asynchronously; until then it refuses every pod the
    # binding matches ("no params found"). A dry-run pod shows when that has passed.
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "konduktor-probe-", "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]},
    }

    def admitted() -> bool:
        try:
            kube.dry_run_create(probe)
        except ApiError:
            return False
        return True

    wait_until("the admission policies to be in force", admitted, timeout=60)


def run_up(request: UpRequest, *, confirm: Confirm | None = None, report: Progress = lambda _m: None) -> UpReport:
    """Everything `up` does; with `request.dry_run` it stops after preflight and plans the quota changes."""
    loaded = load_checked(request.config)  # nothing below runs unless the whole config validates
    config = loaded.config
    inventory = config_inventory(loaded)  # and its SSH key, if any, is there
    clock = StepClock(report)
    target = resolve_target(request.kubeconfig, request.context, request.sim)
    if request.values_files:  # the charts' schemas accept them, before any cluster is touched
        checked, checked_values = chart_for(target.simulated, config, request.values)
        check_values(checked, RELEASE, NAMESPACE, checked_values, request.values_files, target.toolbox(report))
    clock.step("cluster", f"simulated cluster {target.sim}" if target.sim else "given")
    start_simulated(target, config, report)
    with target.connect() as kube:
        clock.step("preflight", "checking the cluster" + (" and the GPU hosts" if config.preflight.nodes else ""))
        preflight_passes(kube, loaded, inventory, request.force, report)
        chart, chart_values = chart_for(target.simulated, config, request.values)
        image = chart_image(chart, chart_values)
        # The quota plan before anything changes: an object someone else owns, or a removed team with work,
        # stops `up` here, with nothing installed.
        planned = plan_quotas(kube, config, request.takeover)
        if request.dry_run:
            clock.finish()
            return UpReport(config, target, chart, None, planned, [], clock.steps, image=image)
        refuse_if_any(planned)
        if confirm is not None and not target.simulated:
            confirm(f"install {chart.name} into context {kube.context} ({kube.server})?")  # names the cluster
        clock.step("install", f"helm upgrade --install {RELEASE} {chart.name} in {NAMESPACE}")
        release = install_release(kube, target, chart, chart_values, report)
        try:
            if target.sim is not None:  # kwok's pods run nothing: the sim runs konduktor-core's Deployments itself
                SimCluster(target.sim, progress=report).platform.ensure(kube)
            clock.step("quotas", "applying")
            changes = sync_quotas(kube, config, prune=True, dry_run=False, takeover=request.takeover, say=say)
            clock.step("verify", "queues active, health controller available")
            verify(kube, config, report)
            # At once, for the teams' `konduktor why`; konduktor-core's capacity publisher keeps it fresh.
            publish_capacity(kube, datetime.now(UTC).isoformat(timespec="seconds"))
            clock.step("policies", "checking existing workloads")
            violations = audit_workloads(kube)
            burnin = None
            if config.burnin.level != "none" and request.burnin is not Policy.NONE:
                clock.step("burnin", f"{config.burnin.level} on the {request.burnin.value} GPU nodes that are free")
                asked = UpBurnIn(
                    request.burnin,
                    make_run_id(datetime.now(UTC)),
                    config.burnin.unschedulable_seconds,
                    config.burnin.quarantine,
                )
                burnin, _ = burn_in_for_up(kube, config, asked, say, progress)
            clock.finish()
        except KonduktorError as problem:
            if isinstance(problem, PartialApply):
                raise
            raise PartialApply(
                f"installed {chart.name} (revision {release.revision}) but could not finish: {problem.message}",
                hint=problem.hint or "fix the cause and run the same command again",
                detail=problem.detail,
            ) from problem
    return UpReport(config, target, chart, release, changes, violations, clock.steps, burnin, image)


def install_release(kube: Kube, target: Target, chart: Path, chart_values: dict[str, Any], report: Progress) -> Release:
    """The release namespace first (labelled for the GPU components), so that every subchart's pre-install hook
    finds it; then the chart."""
    kube.apply(release_namespace())
    return install_or_upgrade(
        target.kubeconfig,
        chart,
        RELEASE,
        NAMESPACE,
        chart_values,
        wait=True,
        toolbox=target.toolbox(report),
        context=target.context,
    )


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
        "skipped": [{"name": n, "why": why} for n, why in SKIPPED_ON_SIM.items()] if result.target.simulated else [],
        "queues": [
            {"team": name, "gpus": {t: q.quota for t, q in team.gpus.items()}, "namespaces": list(team.namespaces)}
            for name, team in sorted(result.config.teams.items())
        ],
        "quotas": [change.as_json() for change in quota_writes(result.changes)],
        "policy_violations": [asdict(v) for v in result.violations],
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
        skipped = ", ".join(f"{name} ({why})" for name, why in SKIPPED_ON_SIM.items())
        typer.echo(f"  not on the simulated cluster: {skipped}")
    for name, team in sorted(config.teams.items()):
        gpus = ", ".join(f"{q.quota} {t}" for t, q in team.gpus.items())
        typer.echo(f"  queue {name}: {gpus} GPUs, namespaces {', '.join(team.namespaces)}")
    verb = "would change" if result.release is None else "changed"
    changed = quota_writes(result.changes)
    typer.echo(f"  {len(changed)} quota objects {verb}")
    for change in changed if result.release is None else []:
        typer.echo(textwrap.indent(change.describe(), "    "))
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


def read_values(files: list[ValuesFile]) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    for file in files:  # e.g. overlays/<environment>/values.yaml
        extra = merge_values(extra, file.values)
    return extra


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
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """Install or upgrade Konduktor from a config: the simulated cluster when no kubeconfig is given."""
    files = read_values_files(values or [])
    request = UpRequest(
        config,
        kubeconfig,
        context,
        sim,
        read_values(files),
        force=force,
        dry_run=dry_run,
        takeover=Takeover(adopt or (), drain_removed_teams, drain_timeout),
        values_files=tuple(files),
        burnin=burnin,
    )
    with progress("up") as report:
        result = run_up(request, confirm=confirmation(yes), report=report)
    if output == "table":
        print_report(result)
    else:
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
        raise typer.Exit(ExitCode.NEGATIVE)


def plan(
    config: ConfigArgument,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    values: Annotated[list[Path] | None, typer.Option("--values", "-f", help="Extra chart values files.")] = None,
    adopt: AdoptOption = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """What `up` would change. Exit 0: nothing; 1: changes pending (release or quotas); 3: `up` would refuse a
    quota change (an object belongs to someone else); 2 or 5: error.

    The release's objects that `up` would add, remove or change (a server-side dry run of the upgrade with the
    same values, against the deployed release), each change with its diff; then the quota objects."""
    loaded = load_checked(config)
    files = read_values_files(values or [])
    extra = read_values(files)
    target = resolve_target(kubeconfig, context, sim, read_only=True)
    if files:  # a values file the charts' schemas refuse is bad input, found before the cluster is read
        checked, checked_values = chart_for(target.simulated, loaded.config, extra)
        check_values(checked, RELEASE, NAMESPACE, checked_values, files, target.toolbox())
    quotas: list[Change] = []
    if target.sim is not None and target.kubeconfig is not None and not target.kubeconfig.exists():
        err.print(f"plan: the simulated cluster {target.sim!r} is not running; up creates it", markup=False)
        chart, chart_values = chart_for(target.simulated, loaded.config, extra)
        rendered = render_new(chart, RELEASE, NAMESPACE, chart_values, target.toolbox())
    else:
        # A kubeconfig that does not load is bad input (2); then the cluster is read (unreachable: 5) before the
        # chart is looked at, so that an outage is never reported as a local problem.
        with target.connect() as kube:
            quotas = [c for c in plan_quotas(kube, loaded.config, Takeover(adopt or ())) if c.action != "unchanged"]
            chart, chart_values = chart_for(target.simulated, loaded.config, extra)
            rendered = render_upgrade(
                target.kubeconfig,
                chart,
                RELEASE,
                NAMESPACE,
                chart_values,
                toolbox=target.toolbox(),
                context=target.context,
            )
    wanted = load_documents(chart / "Chart.yaml")[0]
    changes = release_changes(rendered.deployed, rendered.wanted)
    document = plan_document(rendered.installed, f"{wanted['name']}", str(wanted["version"]), changes, quotas)
    if output == "table":
        print_plan(document, changes, quotas)
    else:
        print_document(document, output)
    raise typer.Exit(plan_code(rendered.installed, changes, quotas))


def plan_document(
    installed: Release | None, chart: str, version: str, changes: list[ObjectChange], quotas: list[Change]
) -> dict[str, Any]:
    """`plan -o json`: the release as `status` shows it, with the chart `up` would install and its objects'
    changes, and the quota objects' changes (the shape of `quotas diff -o json`)."""
    return {
        "release": {
            **release_document(installed),
            "wanted": {"chart": chart, "version": version},
            "changes": [change.as_json() for change in changes],
        },
        "quotas": [change.as_json() for change in quotas],
    }


def plan_code(installed: Release | None, changes: list[ObjectChange], quotas: list[Change]) -> int:
    """3 when `up` would refuse a quota change; 1 when it would install, change the release or the quotas; else 0.
    A release that is not `deployed` (a failed or interrupted upgrade) is pending: `up` would finish it."""
    code = pending_code(quotas)
    release_pending = installed is None or installed.status != "deployed" or bool(changes)
    return ExitCode.NEGATIVE if code == ExitCode.OK and release_pending else code


def print_plan(document: dict[str, Any], changes: list[ObjectChange], quotas: list[Change]) -> None:
    """One line for the release, one per object it adds, removes or changes (a change with its diff), one per
    quota object."""
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
    for quota in quotas:
        typer.echo(quota.describe())


def status(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """The release, the team queues and the health controller. Exit 1 when Konduktor is not installed."""
    target = running_target(kubeconfig, context, sim, read_only=True)
    with target.connect() as kube:
        release = current(target.kubeconfig, RELEASE, NAMESPACE, target.toolbox(), target.context)
        queues = team_usage(kube.list(KUEUE_API, "ClusterQueue")) if kueue_served(kube) else []
        controllers = kube.list(
            "apps/v1", "Deployment", NAMESPACE, label_selector="app.kubernetes.io/component=health-controller"
        )
        health = read_health(kube, BURNIN_NAMESPACE)
        applications = gitops_applications(kube)
    nodes = health.nodes
    document = {
        "release": release_document(release),
        "health_controllers": [
            {
                "namespace": d["metadata"]["namespace"],
                "name": d["metadata"]["name"],
                "available": d.get("status", {}).get("availableReplicas", 0),
                "desired": d["spec"].get("replicas", 1),
            }
            for d in controllers
        ],
        # Its mode and leader (the Lease holder), and its fleet breaker: whether it quarantines at all.
        "health_controller": health.controller.row(),
        "breaker": health.breaker.row(),
        "queues": [q.row() for q in queues],
        # Quarantined and cordoned GPUs are capacity the queues' quotas still count on.
        "gpus": [asdict(c) for c in capacity(nodes)],
        "quarantined_nodes": [node.node for node in nodes if node.out_of_service],
        "argocd": [
            dict(zip(("namespace", "name", "sync", "health"), application_state(app), strict=True))
            for app in applications
        ],
    }
    if output == "table":
        print_rows(status_rows(document), ["component", "state"], output)
    else:
        print_document(document, output)
    if release is None:
        raise typer.Exit(ExitCode.NEGATIVE)


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


ARGOCD_APPLICATION_CRD = "applications.argoproj.io"


def gitops_applications(kube: Kube) -> list[dict[str, Any]]:
    """Konduktor's Argo CD Applications (overlays/argocd names them konduktor and konduktor-*), where Argo CD runs."""
    if kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", ARGOCD_APPLICATION_CRD) is None:
        return []
    applications = kube.list("argoproj.io/v1alpha1", "Application")
    return [a for a in applications if a["metadata"]["name"].split("-")[0] == "konduktor"]


def application_state(application: dict[str, Any]) -> tuple[str, str, str, str]:
    """(namespace, name, sync status, health status) as Argo CD reports them; Unknown before its first
    comparison."""
    status, meta = application.get("status") or {}, application["metadata"]
    sync = (status.get("sync") or {}).get("status", "Unknown")
    return meta["namespace"], meta["name"], sync, (status.get("health") or {}).get("status", "Unknown")


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
) -> None:
    """Remove what `up` made: the release and every quota object Konduktor owns. Namespaces (and what runs in
    them) stay unless --purge.

    It waits (--timeout) for what it deleted to be gone, and names what is still there and why: exit 4 then (e.g. a
    ClusterQueue Kueue keeps while Workloads hold quota in it), 0 when all is gone. On a real cluster the
    uninstall deletes Kueue's CRDs and with them every Kueue object: `down` refuses (exit 2, nothing changed)
    while they hold objects it did not create, unless --delete-crds."""
    target = running_target(kubeconfig, context, sim)
    with target.connect() as kube:
        losses = crd_losses(kube, RELEASE, NAMESPACE)
        lost = ", ".join(map(str, losses))
        if losses and not delete_crds and not dry_run:
            raise UsageError(
                f"down would delete the CRDs of release {RELEASE} and with them objects Konduktor did not create: "
                f"{lost}",
                hint="keep a copy of what you need (kubectl get workloads -A -o yaml), then add --delete-crds; "
                "to change quotas, `quotas apply` or `up` is enough",
            )
        if dry_run:
            print_down_plan(kube, target, purge, lost)
            return
        ask = confirmation(yes)
        if ask is not None and not target.simulated:
            also = " and delete its namespaces" if purge else ""
            crds = f", deleting with its CRDs {lost}" if losses else ""
            ask(f"remove Konduktor from context {kube.context} ({kube.server}){also}{crds}?")
        quotas = remove_quota_objects(kube)
        uninstalled = uninstall(target.kubeconfig, RELEASE, NAMESPACE, target.toolbox(), target.context)
        if target.sim is not None:  # the chart's processes go with it
            SimCluster(target.sim).platform.ensure(kube)
        namespaces = purge_namespaces(kube, also=(NAMESPACE,)) if purge else Removal()
        stuck = wait_gone(kube, [*quotas.deleted, *namespaces.deleted], timeout)
        left_waiting = stranded_by(kube, quotas.deleted)
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
    if left_waiting:
        err.print(f"down: jobs left pending without their queue: {', '.join(left_waiting)}", markup=False)
    if stuck:
        raise PartialApply(
            f"{len(stuck)} deleted object(s) still there after {timeout:.0f}s",
            detail="\n".join(s.describe() for s in stuck),
            hint="finish or delete the jobs named (kubectl delete job -n NAMESPACE NAME), then run down again",
        )


def print_down_plan(kube: Kube, target: Target, purge: bool, lost: str) -> None:
    """`down --dry-run`: what it would delete, on stdout, and what it would wait for; nothing changes."""
    release = current(target.kubeconfig, RELEASE, NAMESPACE, target.toolbox(), target.context)
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

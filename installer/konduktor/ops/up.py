"""`up`: validate -> target (the given cluster, else the simulated one) -> preflight -> install the chart ->
give the sharing groups their nodes -> apply team quotas -> verify queues and the health controller -> audit
existing workloads against the policies -> burn in the GPU nodes (config `burnin`). Nothing touches a cluster until
the whole config validates and preflight passes; every step is safe to repeat, so a run that was interrupted is
finished by running it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from konduktor.burnin.manifests import make_run_id
from konduktor.burnin.record import Policy
from konduktor.burnin.results import BurnInReport
from konduktor.burnin.runner import Progress, Say
from konduktor.config.load import LoadedConfig
from konduktor.config.model import Config
from konduktor.errors import KonduktorError, PartialApply
from konduktor.helm.release import NAMESPACE, RELEASE, Release, check_values, install_or_upgrade, release_namespace
from konduktor.helm.schema import ValuesFile
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.policy_audit import Violation, audit_workloads
from konduktor.kube.sync import Change, refuse_if_any
from konduktor.ops.burnin import UpBurnIn, burn_in_for_up
from konduktor.ops.chart import chart_for, chart_image
from konduktor.ops.preflight import require_preflight
from konduktor.ops.sharing import SharingPlan, apply_sharing, read_sharing, refusal
from konduktor.ops.target import Confirm, Target, resolve_target
from konduktor.preflight.inventory import config_inventory
from konduktor.queueing.cluster import publish_capacity
from konduktor.quotas.render import render
from konduktor.quotas.sync import NO_TAKEOVER, QuotaSet, Takeover, plan_quotas, sync_quotas, wait_queues_active
from konduktor.sim.cluster import SimCluster
from konduktor.sim.pools import spec_of
from konduktor.waiting import wait_until

Report = Callable[[str], None]  # the step `up` is at, for a spinner or a log line
# The option that lets `up` drain a node whose sharing layout changes (its name in refusals).
DRAIN_FOR_SHARING = "--drain-for-sharing"


def _silent(_message: str) -> None:
    pass


@contextmanager
def _no_progress(_label: str) -> Iterator[Report]:
    yield _silent


@dataclass(frozen=True)
class FleetShare:
    """What one cluster of a fleet (a config with `clusters:`) gets beyond a single cluster's `up`: its own quota
    objects, Kueue's Configuration when it differs from the config's (the manager's dispatcher), and a step just
    before its quotas are applied (on the manager: its workers' kubeconfig Secrets, which its MultiKueueClusters
    read)."""

    quotas: QuotaSet
    kueue_settings: dict[str, Any] | None = None
    before_quotas: Callable[[Kube], None] | None = None


@dataclass(frozen=True)
class UpRequest:
    """What `up` is asked to do: the config (loaded and linted), the cluster (a kubeconfig, else the simulated
    cluster `sim`), extra chart values, whether to install despite failed preflight checks or only plan, and what
    its quota sync may take over."""

    config: LoadedConfig
    kubeconfig: Path | None = None
    context: str | None = None
    sim: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    force: bool = False
    dry_run: bool = False
    takeover: Takeover = NO_TAKEOVER
    values_files: tuple[ValuesFile, ...] = ()  # where `values` came from, to name the file of a refused field
    burnin: Policy = Policy.NEW  # which GPU nodes to burn in (at the config's burnin.level)
    share: FleetShare | None = None  # None: a cluster of its own
    # Change a sharing layout on a node with GPU work too: cordon it, evict the work, relabel, uncordon when applied.
    drain_for_sharing: bool = False


class StepClock:
    """How long each step of `up` took, for its report and the benchmark."""

    def __init__(self, report: Report) -> None:
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
    sharing: SharingPlan | None = None  # the nodes' sharing labels changed (or that would change, on a dry run)


def start_simulated(
    target: Target, config: Config, report: Report, kueue_settings: dict[str, Any] | None = None
) -> SimCluster | None:
    """The simulated cluster, started or reshaped from the config (and Kueue's settings, when they are not the
    config's); its pods keep running as long as `sim up --job-seconds` made them. A given cluster is used as it
    is: None."""
    if target.sim is None:
        return None
    sim = SimCluster(target.sim, progress=report)
    running = sim.spec()
    sim.up(spec_of(config, 5.0 if running is None else running.job_seconds, kueue_settings))
    return sim


def verify(kube: Kube, config: Config, report: Report) -> None:
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


def run_up(
    request: UpRequest,
    *,
    confirm: Confirm | None = None,
    report: Report = _silent,
    say: Say = _silent,
    progress: Progress = _no_progress,
) -> UpReport:
    """Everything `up` does; with `request.dry_run` it stops after preflight and plans the quota changes. `report`
    hears the steps, `say` what each step tells the user (quota writes, failed checks, burn-in), `progress` the
    burn-in's waits."""
    loaded = request.config  # nothing below runs unless the whole config validated
    config = loaded.config
    share = request.share or FleetShare(QuotaSet(render(config)))
    inventory = config_inventory(loaded)  # and its SSH key, if any, is there
    clock = StepClock(report)
    target = resolve_target(request.kubeconfig, request.context, request.sim)
    # The chart and its values, chosen once: at once when values files are given (the charts' schemas accept them,
    # before any cluster is touched), else after preflight.
    chosen = chart_for(target.simulated, config, request.values, share.kueue_settings) if request.values_files else None
    if chosen is not None:
        check_values(chosen[0], RELEASE, NAMESPACE, chosen[1], request.values_files, target.toolbox(report))
    clock.step("cluster", f"simulated cluster {target.sim}" if target.sim else "given")
    sim = start_simulated(target, config, report, share.kueue_settings)
    with target.connect() as kube:
        clock.step("preflight", "checking the cluster" + (" and the GPU hosts" if config.preflight.nodes else ""))
        require_preflight(kube, loaded, inventory, request.force, report, say)
        chart, chart_values = chosen or chart_for(target.simulated, config, request.values, share.kueue_settings)
        image = chart_image(chart, chart_values)
        # The quota plan before anything changes: an object someone else owns, or a removed team with work,
        # stops `up` here, with nothing installed.
        planned = plan_quotas(kube, config, request.takeover, share.quotas)
        # Likewise a sharing layout that would change under running GPU work, unless told to drain it.
        sharing = read_sharing(kube, config)
        if request.dry_run:
            clock.finish()
            return UpReport(config, target, chart, None, planned, [], clock.steps, image=image, sharing=sharing)
        refuse_if_any(planned)
        refuse_busy_layouts(sharing, request)
        if confirm is not None and not target.simulated:
            confirm(f"install {chart.name} into context {kube.context} ({kube.server})?")  # names the cluster
        clock.step("install", f"helm upgrade --install {RELEASE} {chart.name} in {NAMESPACE}")
        release = install_release(kube, target, chart, chart_values, report)
        try:
            if sim is not None:  # kwok's pods run nothing: the sim runs konduktor-core's Deployments itself
                sim.platform.ensure(kube)
            if share.before_quotas is not None:
                share.before_quotas(kube)
            sharing = give_sharing(kube, request, sharing, clock, say)
            clock.step("quotas", "applying")
            changes = sync_quotas(
                kube, config, prune=True, dry_run=False, takeover=request.takeover, say=say, quotas=share.quotas
            )
            clock.step("verify", "queues active, health controller available")
            verify(kube, config, report)
            # At once, for the teams' `konduktor why`; konduktor-core's capacity publisher keeps it fresh.
            publish_capacity(kube, datetime.now(UTC))
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
    return UpReport(config, target, chart, release, changes, violations, clock.steps, burnin, image, sharing)


def refuse_busy_layouts(planned: SharingPlan, request: UpRequest) -> None:
    """Stops `up` before it changes anything when a sharing layout would change on a node with GPU work and it was
    not told to drain such nodes, or a MIG group's layout changed under its name."""
    if planned.relaid or (planned.blocked and not request.drain_for_sharing):
        raise refusal(planned, DRAIN_FOR_SHARING)


def give_sharing(kube: Kube, request: UpRequest, planned: SharingPlan, clock: StepClock, say: Say) -> SharingPlan:
    """The sharing step: each group's nodes labelled, those left whole given back (konduktor.ops.sharing); skipped
    when no node's sharing labels change and none waits to be uncordoned."""
    if not (planned.changes or planned.cordoned):
        return planned
    clock.step("sharing", f"labelling {len(planned.changes)} node(s) for the sharing groups")
    return apply_sharing(
        kube,
        request.config.config,
        drain=request.drain_for_sharing,
        timeout=request.takeover.drain_timeout,
        say=say,
        flag=DRAIN_FOR_SHARING,
    )


def install_release(kube: Kube, target: Target, chart: Path, chart_values: dict[str, Any], report: Report) -> Release:
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

"""`konduktor-install up`: from one config to a working platform, every step safe to repeat.

validate -> target (the given cluster, else the simulated one) -> install the chart -> apply team quotas
-> verify queues and the health controller. Nothing touches a cluster until the whole config validates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from konduktor.cli.cluster_quotas import sync_quotas
from konduktor.cli.console import err, progress
from konduktor.cli.preflight import cluster_checks, read_cluster
from konduktor.cli.quotas import ConfigArgument, load_checked
from konduktor.cli.sim import spec_from
from konduktor.cli.target import KubeconfigOption, explicit_kubeconfig
from konduktor.config.load import LoadedConfig
from konduktor.config.model import Config
from konduktor.errors import KonduktorError, PartialApply, PreflightFailed, UsageError
from konduktor.helm.release import CHARTS, NAMESPACE, RELEASE, install_or_upgrade
from konduktor.helm.values import merge_values, umbrella_values
from konduktor.kube.client import Kube
from konduktor.kube.documents import load_documents
from konduktor.kube.policy_audit import audit_gpu_workloads
from konduktor.preflight.results import Status
from konduktor.quotas.render import KUEUE_API
from konduktor.sim.cluster import DEFAULT_NAME, SimCluster
from konduktor.waiting import wait_until


def target_cluster(config_path: Path, kubeconfig: Path | None, sim_name: str, report: Any) -> tuple[Path, bool]:
    """The kubeconfig to use and whether it is the simulated cluster (started or reshaped from the config)."""
    explicit = explicit_kubeconfig(kubeconfig)
    if explicit is not None:
        return explicit, False
    sim = SimCluster(sim_name, progress=report)
    sim.up(spec_from(config_path, None, job_seconds=5.0))
    return sim.kubeconfig, True


def preflight_passes(kubeconfig: Path, loaded: LoadedConfig, force: bool) -> None:
    """The same cluster checks as `konduktor-install preflight`; a FAIL stops `up` before anything changes."""
    kube = Kube(kubeconfig)
    try:
        checks = cluster_checks(loaded, read_cluster(kube), (NAMESPACE, RELEASE))
    finally:
        kube.close()
    failed = [c for c in checks if c.status is Status.FAIL]
    for check in failed:
        err.print(f"preflight FAIL {check.name} ({check.subject}): {check.summary}", markup=False)
    if failed and not force:
        raise PreflightFailed(
            f"{len(failed)} preflight check(s) failed; nothing was changed",
            hint="`konduktor-install preflight CONFIG` shows every check; fix them or pass --force",
        )


def chart_for(simulated: bool, config: Config, extra: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The chart and the values to install.

    On the simulated cluster only Konduktor's own chart (fake nodes run no GPU operator, and Kueue runs beside
    the control plane); else the umbrella, with the config's Kueue settings merged into Kueue's Configuration.
    """
    if simulated:
        core = CHARTS / "konduktor-core"
        return core, merge_values(load_documents(core / "ci" / "sim-values.yaml")[0], extra)
    umbrella = CHARTS / "konduktor"
    if not (umbrella / "charts").is_dir():
        raise UsageError(
            "the umbrella chart's dependencies are not downloaded",
            hint=f"run `helm dependency build {umbrella}` where the chart repositories are reachable "
            "(or unpack the air-gapped chart bundle there), then re-run",
        )
    effective = merge_values(load_documents(umbrella / "values.yaml")[0], extra)
    return umbrella, merge_values(extra, umbrella_values(config, effective))


def verify(kube: Kube, config: Config, report: Any) -> None:
    teams = sorted(config.teams)
    report(f"verify: waiting for {len(teams)} ClusterQueues to be active")

    def active(team: str) -> bool:
        queue = kube.get(KUEUE_API, "ClusterQueue", team) or {}
        conditions = queue.get("status", {}).get("conditions", [])
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    wait_until(
        "every team's ClusterQueue to be active",
        lambda: all(active(t) for t in teams),
        timeout=120,
        on_timeout=lambda: PartialApply(
            f"not active: {', '.join(t for t in teams if not active(t))}",
            hint="`kubectl get clusterqueue -o yaml` shows Kueue's reason (e.g. FlavorNotFound)",
        ),
    )
    report("verify: waiting for the health controller")

    def controller_ready() -> bool:
        for deployment in kube.list(
            "apps/v1", "Deployment", NAMESPACE, label_selector="app.kubernetes.io/part-of=konduktor"
        ):
            status = deployment.get("status", {})
            if status.get("availableReplicas", 0) < deployment["spec"].get("replicas", 1):
                return False
        return True

    wait_until("the health controller to be available", controller_ready, timeout=300)


def up(
    config: ConfigArgument,
    kubeconfig: KubeconfigOption = None,
    values: Annotated[
        list[Path] | None, typer.Option("--values", "-f", help="Extra chart values files (repeatable).")
    ] = None,
    sim: Annotated[str, typer.Option("--sim", help="Simulated cluster to use when no kubeconfig is given.")] = (
        DEFAULT_NAME
    ),
    force: Annotated[bool, typer.Option("--force", help="Install even when preflight checks fail.")] = False,
) -> None:
    """Install or upgrade Konduktor from a config: the simulated cluster when no kubeconfig is given."""
    loaded = load_checked(config)  # nothing below runs unless the whole config validates
    extra: dict[str, Any] = {}
    for path in values or []:  # e.g. overlays/<environment>/values.yaml
        documents = load_documents(path)
        if not documents:
            raise UsageError(f"{path}: no values in it")
        extra = merge_values(extra, documents[0])
    with progress("up") as report:
        target, simulated = target_cluster(config, kubeconfig, sim, report)
        report("preflight: checking the cluster")
        preflight_passes(target, loaded, force)
        chart, chart_values = chart_for(simulated, loaded.config, extra)
        report(f"install: helm upgrade --install {RELEASE} {chart.name} in {NAMESPACE}")
        release = install_or_upgrade(target, chart, RELEASE, NAMESPACE, chart_values)
        kube = Kube(target)
        try:
            report("quotas: applying")
            changes = sync_quotas(kube, loaded.config, prune=True, dry_run=False)
            verify(kube, loaded.config, report)
            report("policies: checking existing GPU workloads")
            violations = audit_gpu_workloads(kube)
        except KonduktorError as problem:
            if isinstance(problem, PartialApply):
                raise
            raise PartialApply(
                f"installed {chart.name} (revision {release.revision}) but could not finish: {problem.message}",
                hint=problem.hint or "fix the cause and run the same command again",
                detail=problem.detail,
            ) from problem
        finally:
            kube.close()
    changed = sum(c.action in ("create", "update", "prune") for c in changes)
    err.print(
        f"up: {'simulated cluster' if simulated else target}: {chart.name} revision {release.revision}, "
        f"{len(loaded.config.teams)} teams, {changed} quota objects changed",
        markup=False,
    )
    for violation in violations:
        err.print(f"policy: {violation.kind} {violation.namespace}/{violation.name}: {violation.reason}", markup=False)
    if violations:
        err.print(
            f"up: {len(violations)} existing GPU workload(s) break the admission policies (warned, not refused); "
            "move them to their team's queue before setting policies.validationActions=[Deny,Audit]",
            markup=False,
        )
    err.print(f"next: konduktor-install quotas explain --kubeconfig {target}", markup=False)

"""Burn-in runs on a cluster: run one (and record each node's verdict on it, and the run's report in the cluster),
run the one `up` asks for under its policy (`burnin.record`), and show a past run without starting anything.

A run leaves its report in a ConfigMap of the burn-in namespace (`konduktor-burnin-report-RUN`), which outlives
the Jobs (they go an hour after they finish): `burnin show RUN` reads it, and while a run has none yet (it is
still running, or it was interrupted) reads what its Jobs, pods and logs say now.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from konduktor.burnin.manifests import MANAGED_BY_LABEL, RUN_LABEL
from konduktor.burnin.plan import select_targets
from konduktor.burnin.record import Policy, choose, record_patch, recordable
from konduktor.burnin.report import render_json, report_from_dict
from konduktor.burnin.results import BurnInReport, NodeVerdict, Verdict
from konduktor.burnin.runner import BurnInRequest, BurnInRunner, Progress, Say
from konduktor.burnin.thresholds import DEFAULT_THRESHOLDS
from konduktor.burnin.tiers import Tier, options_for_tier
from konduktor.config.model import Config
from konduktor.errors import UsageError
from konduktor.health.quarantine import quarantine_failed
from konduktor.health.release import release_hints
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.timestamps import format_time
from konduktor.vocabulary import BURNIN_TIER_ANNOTATION

REPORT_KEY = "report.json"


def report_name(run_id: str) -> str:
    return f"konduktor-burnin-report-{run_id}"


def burn_in(
    kube: Kube, config: Config | None, request: BurnInRequest, say: Say, progress: Progress
) -> tuple[BurnInReport, bool]:
    """One run on the chosen nodes, judged; each judged node's verdict recorded on it, the report in the cluster;
    FAIL nodes quarantined when asked. (report, whether the wait ended with Jobs still running). A node whose pod
    stays unschedulable for `request.unschedulable_s` is an ERROR with the scheduler's reason."""
    targets = select_targets(kube.list("v1", "Node"), config, request.nodes)
    verdicts, pairs, waited_out = _run(kube, request, [t.node for t in targets], config, say, progress)
    report = BurnInReport(request.run_id, request.options.tier.value, DEFAULT_THRESHOLDS.version, verdicts, pairs)
    _keep(kube, request, report, waited_out, say)
    return report, waited_out


def _run(
    kube: Kube, request: BurnInRequest, nodes: list[str], config: Config | None, say: Say, progress: Progress
) -> tuple[tuple[NodeVerdict, ...], tuple[Any, ...], bool]:
    run, options = request.run_id, request.options
    runner = BurnInRunner(kube, request.namespace, run, options, request.unschedulable_s, say=say, progress=progress)
    targets = select_targets(kube.list("v1", "Node"), config, nodes)
    say(f"burn-in {run}: {options.tier.value} on {len(targets)} node(s) in {request.namespace}")
    verdicts, waited_out = runner.run(targets, request.wait_s)
    if request.quarantine:
        quarantine_failed(kube, verdicts, say)
    for hint in release_hints(verdicts, kube.list("v1", "Node")):
        say(hint)
    return verdicts, runner.pairs, waited_out


def _keep(kube: Kube, request: BurnInRequest, report: BurnInReport, waited_out: bool, say: Say) -> None:
    """The verdicts on the nodes they judged, and the report in the cluster (not while Jobs still run: their
    verdict is not known yet, and `burnin show` reads them)."""
    counts = ", ".join(f"{sum(v.verdict is s for v in report.nodes)} {s.value}" for s in Verdict)
    say(f"burn-in {report.run_id}: {counts}")
    if waited_out:
        return
    record_verdicts(kube, report, format_time(time.time()))
    store_report(kube, request.namespace, report)


def record_verdicts(kube: Kube, report: BurnInReport, at: str) -> None:
    """Each judged node's verdict, on the node (a node deleted meanwhile is left alone)."""
    nodes = {n["metadata"]["name"]: n for n in kube.list("v1", "Node")}
    for verdict in report.nodes:
        node = nodes.get(verdict.node)
        if node is not None and recordable(verdict):
            kube.patch("v1", "Node", verdict.node, record_patch(verdict, report.tier, report.run_id, at, node))


def store_report(kube: Kube, namespace: str, report: BurnInReport) -> None:
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": report_name(report.run_id),
                "namespace": namespace,
                "labels": {MANAGED_BY_LABEL: "konduktor", RUN_LABEL: report.run_id},
            },
            "data": {REPORT_KEY: render_json(report)},
        }
    )


@dataclass(frozen=True)
class UpBurnIn:
    """The burn-in `up` runs: the config's level and quarantine, on the nodes its `policy` picks."""

    policy: Policy
    run_id: str
    unschedulable_s: float
    quarantine: bool


def burn_in_for_up(
    kube: Kube, config: Config, asked: UpBurnIn, say: Say, progress: Progress
) -> tuple[BurnInReport, bool]:
    """The config's GPU nodes that `asked.policy` picks and that no running pod holds the GPUs of, burned in at the
    config's level; the others SKIPPED with the reason. The report holds every node."""
    level = Tier(config.burnin.level)
    nodes = kube.list("v1", "Node")
    targets = select_targets(nodes, config, ())
    by_name = {n["metadata"]["name"]: n for n in nodes}
    pods = kube.list("v1", "Pod", field_selector="status.phase!=Succeeded,status.phase!=Failed")
    chosen, skipped = choose(targets, by_name, pods, asked.policy, level)
    for verdict in skipped:
        say(f"burn-in {asked.run_id}: {verdict.node} SKIPPED: {verdict.checks[0].reasons[0]}")
    request = BurnInRequest(
        options_for_tier(level),
        asked.run_id,
        nodes=tuple(t.node for t in chosen),
        quarantine=asked.quarantine,
        unschedulable_s=asked.unschedulable_s,
    )
    verdicts: tuple[NodeVerdict, ...] = ()
    pairs: tuple[Any, ...] = ()
    waited_out = False
    if chosen:
        verdicts, pairs, waited_out = _run(kube, request, [t.node for t in chosen], config, say, progress)
    order = {t.node: i for i, t in enumerate(targets)}
    every = tuple(sorted((*verdicts, *skipped), key=lambda v: order.get(v.node, len(order))))
    report = BurnInReport(asked.run_id, level.value, DEFAULT_THRESHOLDS.version, every, pairs)
    if chosen:
        _keep(kube, request, report, waited_out, say)
    return report, waited_out


def configured_tier(config: Config | None) -> Tier:
    """The config's burn-in level; `none` only turns off the burn-in `up` runs, so asking for one gets standard."""
    level = config.burnin.level if config else "none"
    return Tier.STANDARD if level == "none" else Tier(level)


def show_run(kube: Kube, namespace: str, run_id: str) -> tuple[BurnInReport, bool]:
    """A past run, read from the cluster; nothing is created, changed or deleted. The report it recorded, else its
    Jobs as they are now (bool: some still run). A run that left neither is bad input."""
    stored = kube.get("v1", "ConfigMap", report_name(run_id), namespace)
    if stored is not None and REPORT_KEY in (stored.get("data") or {}):
        return report_from_dict(json.loads(stored["data"][REPORT_KEY])), False
    try:
        jobs = kube.list("batch/v1", "Job", namespace, label_selector=f"{RUN_LABEL}={run_id}")
    except ApiError:
        jobs = []
    tiers = {str((j["metadata"].get("annotations") or {}).get(BURNIN_TIER_ANNOTATION, "")) for j in jobs} - {""}
    if not jobs or len(tiers) != 1:
        raise UsageError(
            f"no burn-in run {run_id!r} in namespace {namespace}: no report and no Jobs of it",
            hint=f"a run's Jobs go an hour after they finish; list the recorded runs: kubectl get configmaps -n "
            f"{namespace} -l {RUN_LABEL}",
        )
    tier = Tier(next(iter(tiers)))
    runner = BurnInRunner(kube, namespace, run_id, options_for_tier(tier))
    names = runner.job_nodes(n["metadata"]["name"] for n in kube.list("v1", "Node"))
    targets = select_targets(kube.list("v1", "Node"), None, names) if names else []
    verdicts, running = runner.read(targets)
    return BurnInReport(run_id, tier.value, DEFAULT_THRESHOLDS.version, verdicts), running

"""Requalification: the burn-in Job of a quarantined node, and the verdict judged from its steps' output.

The Job's exit status says little: every burn-in step exits 0 and prints its tool's exit code as data
(`konduktor.burnin.manifests.wrap_step`). The verdict is therefore judged from the steps' logs with the burn-in's
own `judge_node`, for the tier the Job ran; a Job that failed (deadline, eviction) or left no logs is ERROR,
which keeps the node out. The Job, its newest pod and the pod's logs are read with the functions
`konduktor-install burnin` reads its Jobs with (`konduktor.kube.job_state`, `konduktor.kube.jobs`).

Which finished Jobs were already judged is read from the node itself: the decision stamps
`requalified-at` (or a new `quarantined-at`) when it acts on a result, so a Job that ended before that stamp
has been acted on, across restarts and without writing to the Job.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

from konduktor.burnin.manifests import make_run_id, node_job, scripts_configmap
from konduktor.burnin.plan import JOB_CHECK
from konduktor.burnin.results import CheckResult, NodeVerdict, Verdict, worst
from konduktor.burnin.tiers import BurnInImages, BurnInOptions, options_for_tier
from konduktor.burnin.verdict import NodeEvidence, judge_node
from konduktor.health.decide import NodeState
from konduktor.health.logs import log
from konduktor.health.node_writes import FIELD_MANAGER
from konduktor.health.requalification_runs import REQUALIFICATION_LABEL, Run, acted_on, run_of
from konduktor.health.settings import RequalificationSettings
from konduktor.health.telemetry import HealthMetrics
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.jobs import newest_pod, owned_by, pod_log
from konduktor.vocabulary import HOSTNAME_LABEL, PRODUCT_LABEL


class StepLogs(Protocol):
    """Where the output of a burn-in step is read from."""

    def read(self, namespace: str, pod: str, container: str) -> str | None: ...


class PodLogs:
    """Step logs through the API server's pods/log subresource (served by the node's kubelet)."""

    def __init__(self, kube: Kube, metrics: HealthMetrics) -> None:
        self.kube = kube
        self.metrics = metrics

    def read(self, namespace: str, pod: str, container: str) -> str | None:
        try:
            return pod_log(self.kube, namespace, pod, container)
        except ApiError as problem:
            self.metrics.api_error("get", "pods/log", problem)
            return None


def run_id_for(node: str, now: float) -> str:
    """Unique per node and second, so that each Job owns its own scripts ConfigMap."""
    return f"{make_run_id(datetime.fromtimestamp(now, UTC))}-{hashlib.sha256(node.encode()).hexdigest()[:4]}"


@dataclass(frozen=True)
class Result:
    verdict: NodeVerdict
    finished_at: float
    job: str


class Requalifier:
    def __init__(self, kube: Kube, settings: RequalificationSettings, metrics: HealthMetrics, logs: StepLogs) -> None:
        self.kube = kube
        self.settings = settings
        self.metrics = metrics
        self.logs = logs
        self.runs: list[Run] = []
        self._judged: set[str] = set()

    def options(self, tier: str | None = None) -> BurnInOptions:
        images = self.settings.images
        return options_for_tier(
            tier or self.settings.tier,
            priority_class=self.settings.priority_class,
            images=replace(BurnInImages(), dcgm=images.dcgm, pytorch=images.pytorch, nccl_tests=images.nccl_tests),
        )

    def refresh(self) -> None:
        """Read the requalification Jobs (once per poll; Jobs started since are added by `start`)."""
        try:
            jobs = self.kube.list(
                "batch/v1", "Job", self.settings.namespace, label_selector=f"{REQUALIFICATION_LABEL}=true"
            )
        except ApiError as problem:
            self.metrics.api_error("list", "jobs", problem)
            log(logging.WARNING, "cannot list requalification Jobs", error=problem.message)
            return
        self.runs = [run for run in map(run_of, jobs) if run is not None]

    def running(self) -> set[str]:
        return {run.node for run in self.runs if run.finished_at is None}

    def start(self, node: NodeState, now: float) -> None:
        """Create the node's burn-in Job (it tolerates the quarantine taint) and its scripts ConfigMap."""
        gpus = node.gpu_expected or node.gpu_allocatable or 0
        if gpus < 1:
            log(logging.WARNING, "no GPU count known; cannot requalify", node=node.name)
            return
        run_id = run_id_for(node.name, now)
        options = self.options()
        job = node_job(
            run_id, node.name, gpus, options, self.settings.namespace, hostname=node.labels.get(HOSTNAME_LABEL)
        )
        job["metadata"]["labels"][REQUALIFICATION_LABEL] = "true"
        job["spec"]["template"]["spec"]["serviceAccountName"] = self.settings.service_account
        created = self.kube.create(job, field_manager=FIELD_MANAGER)
        # Owned by the Job: removed with it when its TTL ends.
        self.kube.apply(
            owned_by(scripts_configmap(run_id, self.settings.namespace), [created]), field_manager=FIELD_MANAGER
        )
        self.runs.append(Run(created["metadata"]["name"], node.name, options.tier.value, None, None))
        log(logging.INFO, "requalification started", node=node.name, job=created["metadata"]["name"])

    def results(self, nodes: Mapping[str, NodeState]) -> list[Result]:
        """Verdicts of finished runs not yet acted on: the latest run per node."""
        latest: dict[str, Run] = {}
        for run in self.runs:
            best = latest.get(run.node)
            if run.finished_at is not None and (best is None or run.finished_at >= (best.finished_at or 0.0)):
                latest[run.node] = run
        results = []
        for run in latest.values():
            node = nodes.get(run.node)
            if node is None or run.job in self._judged or acted_on(run, node):
                continue
            results.append(Result(self._judge(run, node), run.finished_at or 0.0, run.job))
        return results

    def acted(self, results: Iterable[Result]) -> None:
        for result in results:
            self._judged.add(result.job)
            self.metrics.requalifications.labels(verdict=result.verdict.verdict.value).inc()

    def _judge(self, run: Run, node: NodeState) -> NodeVerdict:
        options = self.options(run.tier)
        pod = self._pod(run.job)
        logs = {
            step.value: self.logs.read(self.settings.namespace, pod, step.value) if pod else None
            for step in options.steps
        }
        evidence = NodeEvidence(node.name, node.labels.get(PRODUCT_LABEL), node.gpu_expected or 0, logs)
        verdict = judge_node(evidence, options)
        if run.failure is None:
            return verdict
        job_check = CheckResult(JOB_CHECK, Verdict.ERROR, "", "Job failed", (run.failure,))
        checks = (*verdict.checks, job_check)
        return replace(verdict, checks=checks, verdict=worst(c.verdict for c in checks))

    def _pod(self, job: str) -> str | None:
        try:
            pod = newest_pod(self.kube, self.settings.namespace, job)
        except ApiError as problem:
            self.metrics.api_error("list", "pods", problem)
            return None
        return pod["metadata"]["name"] if pod is not None else None

"""`konduktor-install burnin`: run the burn-in Jobs on GPU nodes, judge their output, report, optionally quarantine.

One Job per node (`konduktor.burnin.manifests.node_job`), then at the full level node pairs over the fabric,
bisecting failures to a node. Step output is read from each pod's log through the API and judged by
`konduktor.burnin.verdict`; what the Jobs and pods said completes the verdicts (`konduktor.cli.burnin_run`).
A run is named by its run id: running the command again with `--run-id` picks up that run's Jobs instead of
starting new ones, so an interrupted run can still be collected.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from konduktor.burnin.isolation import NodePair, PairOutcome, plan_pair_tests
from konduktor.burnin.manifests import (
    NODE_LABEL,
    RUN_LABEL,
    make_run_id,
    node_job_name,
    pair_objects,
    scripts_configmap,
    taint_tolerations,
)
from konduktor.burnin.report import render_json, render_junit, render_table
from konduktor.burnin.results import BurnInReport, NodeVerdict, PairVerdict, Verdict
from konduktor.burnin.thresholds import DEFAULT_THRESHOLDS
from konduktor.burnin.tiers import PAIR_STEP, BurnInImages, BurnInOptions, Tier, options_for_tier
from konduktor.burnin.verdict import NodeEvidence, judge_pair, judge_run, pair_outcomes
from konduktor.cli.burnin_run import (
    JobPhase,
    JobState,
    NodeRun,
    Target,
    complete_verdict,
    describe_action,
    exit_code,
    no_gpu_verdict,
    pair_groups,
    pod_problem,
    quarantine_plan,
    select_targets,
    settle_pairs,
    target_job,
)
from konduktor.cli.console import err, progress
from konduktor.cli.jobs import pods_by_job, read_log, wait_for_jobs
from konduktor.cli.quotas import load_checked
from konduktor.cli.target import KubeconfigOption, connect
from konduktor.config.model import UNSCHEDULABLE_SECONDS, Config, duration_seconds
from konduktor.controller.decide import RecordEvent, SetCondition, UpdateNode
from konduktor.controller.node_writes import FIELD_MANAGER, condition_status, event, update_node
from konduktor.errors import PartialApply, UsageError
from konduktor.kube.client import Kube
from konduktor.quotas.manifests import to_yaml
from konduktor.vocabulary import BURNIN_NAMESPACE, BURNIN_TIER_ANNOTATION, GPU_RESOURCE

ReportFormat = Literal["table", "json", "junit"]
DEFAULT_NAMESPACE = BURNIN_NAMESPACE
# Installed with konduktor-core; the admission policy lets only it (and preflight) tolerate the health taint.
SERVICE_ACCOUNT = "konduktor-burnin"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
WAIT_SLACK_S = 120  # after a Job's own deadline: time for the Job controller to mark it Failed
MAX_PAIR_ROUNDS = 10
_IMAGE_KEYS = {f.name.replace("_", "-"): f.name for f in fields(BurnInImages) if f.name != "nccl_tests_binary"}
_DURATION = re.compile(r"^(\d+(\.\d+)?(s|m|h))+$")


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
        Tier,
        typer.Option(
            "--level",
            help="quick: GPU state (seconds); standard: + DCGM diag, matmul soak, one-node NCCL; "
            "full: + DCGM level 4, longer soak, node pairs over the fabric.",
        ),
    ] = Tier.STANDARD,
    output: Annotated[
        ReportFormat, typer.Option("-o", "--output", help="table per node, JSON, or JUnit XML for CI.")
    ] = "table",
    quarantine: Annotated[
        bool, typer.Option("--quarantine", help="Taint FAIL nodes with the health controller's quarantine.")
    ] = False,
    kubeconfig: KubeconfigOption = None,
    namespace: Annotated[str, typer.Option("--namespace", help="Where the Jobs run.")] = DEFAULT_NAMESPACE,
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
    options = options_for_tier(level, images=images_from(image or []))
    run = run_id or make_run_id(datetime.now(UTC))
    wait_s = parse_timeout(timeout) if timeout else None
    names = [n.strip() for n in (nodes or "").split(",") if n.strip()]
    configured = loaded.config.burnin.unschedulable_seconds if loaded else UNSCHEDULABLE_SECONDS
    unschedulable_s = unschedulable_timeout if unschedulable_timeout is not None else configured
    kube = connect(kubeconfig)
    try:
        if dry_run:
            targets = select_targets(kube.list("v1", "Node"), loaded.config if loaded else None, names)
            sys.stdout.write(to_yaml(BurnInRunner(kube, namespace, run, options).objects(targets)))
            return
        report, waited_out = burn_in(
            kube, loaded.config if loaded else None, names, options, namespace, run, wait_s, quarantine, unschedulable_s
        )
        sys.stdout.write({"table": render_table, "json": render_json, "junit": render_junit}[output](report))
    finally:
        kube.close()
    code = exit_code(report, waited_out)
    if code == 4:
        err.print(f"some Jobs are still running; collect them with --run-id {run}", markup=False)
    if code:
        raise typer.Exit(code)


def burn_in(
    kube: Kube,
    config: Config | None,
    names: Sequence[str],
    options: BurnInOptions,
    namespace: str,
    run: str,
    wait_s: float | None,
    quarantine: bool,
    unschedulable_s: float = UNSCHEDULABLE_SECONDS,
) -> tuple[BurnInReport, bool]:
    """One run on the chosen nodes, judged; FAIL nodes quarantined when asked. (report, whether the wait ended
    with Jobs still running). A node whose pod stays unschedulable for `unschedulable_s` is an ERROR with the
    scheduler's reason."""
    runner = BurnInRunner(kube, namespace, run, options, unschedulable_s)
    targets = select_targets(kube.list("v1", "Node"), config, names)
    err.print(f"burn-in {run}: {options.tier.value} on {len(targets)} node(s) in {namespace}", markup=False)
    verdicts, waited_out = runner.run(targets, wait_s)
    if quarantine:
        quarantine_failed(kube, verdicts)
    counts = ", ".join(f"{sum(v.verdict is s for v in verdicts)} {s.value}" for s in Verdict)
    err.print(f"burn-in {run}: {counts}", markup=False)
    return BurnInReport(run, options.tier.value, DEFAULT_THRESHOLDS.version, verdicts, runner.pairs), waited_out


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


class BurnInRunner:
    """Creates a run's objects, waits for its Jobs and reads their logs; all through `Kube`."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        run_id: str,
        options: BurnInOptions,
        unschedulable_s: float = UNSCHEDULABLE_SECONDS,
    ) -> None:
        self.kube = kube
        self.unschedulable_s = unschedulable_s
        self.namespace = namespace
        self.run_id = run_id
        self.options = options
        self.pairs: tuple[PairVerdict, ...] = ()
        self.service_account: str | None = None
        self.scripts = scripts_configmap(run_id, namespace)  # also checks the run id before anything is written

    # -- objects ----------------------------------------------------------------------------------
    def objects(self, targets: Sequence[Target]) -> list[dict[str, Any]]:
        """The scripts ConfigMap and one Job per node that has GPUs, as they would be created."""
        return [self.scripts, *(self.job(t) for t in targets if t.gpus > 0)]

    def job(self, target: Target) -> dict[str, Any]:
        return target_job(target, self.run_id, self.options, self.namespace, self.service_account)

    def prepare(self) -> None:
        """The namespace (created when missing) and the burn-in service account when konduktor-core installed it."""
        if self.kube.get("v1", "Namespace", self.namespace) is None:
            self.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})
            err.print(f"created namespace {self.namespace}", markup=False)
        # Without konduktor-core there is neither the account nor the policy that requires it: run as default.
        if self.kube.get("v1", "ServiceAccount", SERVICE_ACCOUNT, self.namespace) is not None:
            self.service_account = SERVICE_ACCOUNT
        self.kube.apply(self.scripts)

    def submit(self, jobs: Sequence[dict[str, Any]], report: Callable[[str], None]) -> None:
        """Create the Jobs; one this run already has is reused when it is the same test, else replaced."""
        existing = {j["metadata"]["name"]: j for j in self._run_jobs()}
        for job in jobs:
            name = job["metadata"]["name"]
            found = existing.get(name)
            if found is not None and _same_test(found, job):
                report(f"reusing Job {name}")
                continue
            if found is not None:
                report(f"replacing Job {name} (another level or GPU count)")
                self._delete_job(name)
            self.kube.apply(job)
        self._own_scripts()

    def _run_jobs(self) -> list[dict[str, Any]]:
        return self.kube.list("batch/v1", "Job", self.namespace, label_selector=f"{RUN_LABEL}={self.run_id}")

    def _delete_job(self, name: str) -> None:
        self.kube.delete("batch/v1", "Job", name, self.namespace)
        deadline = time.monotonic() + 60
        while self.kube.get("batch/v1", "Job", name, self.namespace) is not None:
            if time.monotonic() > deadline:
                raise PartialApply(
                    f"Job {self.namespace}/{name} is still being deleted after 60s",
                    hint="run the same command again once it is gone (kubectl get job -n NAMESPACE NAME)",
                )
            time.sleep(0.5)

    def _own_scripts(self) -> None:
        """The scripts ConfigMap belongs to the run's Jobs: it goes when the last of them reaches its TTL."""
        owners = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": j["metadata"]["name"], "uid": j["metadata"]["uid"]}
            for j in self._run_jobs()
        ]
        self.kube.apply({**self.scripts, "metadata": {**self.scripts["metadata"], "ownerReferences": owners}})

    # -- the run ----------------------------------------------------------------------------------
    def run(self, targets: Sequence[Target], wait_s: float | None) -> tuple[tuple[NodeVerdict, ...], bool]:
        """Verdicts in target order, and whether the wait ended with Jobs still running."""
        runnable = [t for t in targets if t.gpus > 0]
        if not runnable:
            return tuple(no_gpu_verdict(t) for t in targets), False
        wait = wait_s if wait_s is not None else self.options.deadline_s + WAIT_SLACK_S
        with progress(f"burn-in {self.run_id}") as report:
            self.prepare()
            self.submit([self.job(t) for t in runnable], report)
            judged, waited_out = self.collect(runnable, wait, report)
        if self.options.tier is Tier.FULL and not waited_out:
            judged, waited_out = self.run_pairs(runnable, judged, wait_s)
        by_node = {v.node: v for v in judged}
        return tuple(by_node.get(t.node) or no_gpu_verdict(t) for t in targets), waited_out

    def collect(
        self, targets: Sequence[Target], wait_s: float, report: Callable[[str], None]
    ) -> tuple[tuple[NodeVerdict, ...], bool]:
        """Wait for the targets' Jobs (at most `wait_s`), then judge what their steps printed."""
        names = {t.node: node_job_name(self.run_id, t.node) for t in targets}
        states = self._wait(list(names.values()), wait_s, report)
        self._drop_unschedulable(states, report)
        report("reading the step logs")
        return self._judge(targets, names, states), any(not s.finished for s in states.values())

    def _wait(self, names: Sequence[str], wait_s: float, report: Callable[[str], None]) -> dict[str, JobState]:
        try:
            selector = f"{RUN_LABEL}={self.run_id}"
            return wait_for_jobs(self.kube, self.namespace, selector, names, wait_s, report, self.unschedulable_s)
        except KeyboardInterrupt:
            err.print(
                f"the Jobs keep running; collect their results with: konduktor-install burnin --run-id {self.run_id}",
                markup=False,
            )
            raise

    def _drop_unschedulable(self, states: Mapping[str, JobState], report: Callable[[str], None]) -> None:
        """A Job reported unschedulable is deleted: it must not start later, unannounced, when GPUs free up."""
        for name, state in states.items():
            if state.phase is JobPhase.UNSCHEDULABLE:
                report(f"Job {name} is unschedulable: {state.reason}; deleting it")
                self.kube.delete("batch/v1", "Job", name, self.namespace)

    def _pods(self) -> dict[str, list[dict[str, Any]]]:
        """The run's pods by Job name, newest last."""
        return pods_by_job(self.kube, self.namespace, f"{RUN_LABEL}={self.run_id}")

    def _log(self, pod: Mapping[str, Any] | None, container: str) -> tuple[str | None, str | None]:
        """(log, None) or (None, why there is no output)."""
        return read_log(self.kube, self.namespace, pod, container)

    def _judge(
        self, targets: Sequence[Target], names: Mapping[str, str], states: Mapping[str, JobState]
    ) -> tuple[NodeVerdict, ...]:
        pods = self._pods()
        evidence, runs = [], {}
        for target in targets:
            attempts = pods.get(names[target.node])
            pod = attempts[-1] if attempts else None
            logs: dict[str, str | None] = {}
            missing: dict[str, str] = {}
            for step in self.options.steps:
                log, why = self._log(pod, step.value)
                logs[step.value] = log
                if why is not None:
                    missing[step.value] = why
            evidence.append(NodeEvidence(target.node, target.gpu_product, target.expected_gpus, logs))
            runs[target.node] = NodeRun(states[names[target.node]], missing, pod_problem(pod))
        verdicts = judge_run(evidence, self.options)
        return tuple(complete_verdict(v, runs[v.node], self.run_id) for v in verdicts)

    # -- node pairs (full level) --------------------------------------------------------------------
    def run_pairs(
        self, targets: Sequence[Target], verdicts: tuple[NodeVerdict, ...], wait_s: float | None
    ) -> tuple[tuple[NodeVerdict, ...], bool]:
        """Pairs per GPU kind until the isolation plan is done or a round teaches nothing (every pair ERROR)."""
        tested: list[str] = []
        pairs: list[PairVerdict] = []
        waited_out = False
        for group in pair_groups(targets, verdicts):
            names = [t.node for t in group]
            tested += names
            by_node = {t.node: t for t in group}
            outcomes: list[PairOutcome] = []
            plan = plan_pair_tests(names, outcomes)
            for _ in range(MAX_PAIR_ROUNDS):
                if plan.done:
                    break
                round_verdicts, waited_out = self._pair_round(plan.next_pairs, by_node, wait_s)
                pairs += round_verdicts
                learned = pair_outcomes(round_verdicts)
                if not learned or waited_out:
                    break
                outcomes += learned
                plan = plan_pair_tests(names, outcomes)
            verdicts = settle_pairs(verdicts, names, plan, [p for p in pairs if set(p.nodes) <= set(names)])
        self.pairs = tuple(pairs)
        return verdicts, waited_out

    def _pair_round(
        self, round_pairs: Iterable[NodePair], targets: Mapping[str, Target], wait_s: float | None
    ) -> tuple[list[PairVerdict], bool]:
        jobs: dict[NodePair, dict[str, Any]] = {}
        with progress(f"burn-in {self.run_id}: node pairs") as report:
            for pair in round_pairs:
                first, second = targets[pair[0]], targets[pair[1]]
                service, job = pair_objects(
                    self.run_id,
                    pair,
                    first.gpus,
                    self.options,
                    self.namespace,
                    hostnames=(first.hostname or first.node, second.hostname or second.node),
                    rdma_resources={name: 1 for name in first.rdma if name in second.rdma},
                    extra_tolerations=taint_tolerations([*first.taints, *second.taints]),
                )
                if self.service_account:
                    job["spec"]["template"]["spec"]["serviceAccountName"] = self.service_account
                jobs[pair] = job
                self.submit([job], report)
                self._apply_owned(service, job["metadata"]["name"])
            wait = wait_s if wait_s is not None else job_deadline(next(iter(jobs.values()))) + WAIT_SLACK_S
            names = [j["metadata"]["name"] for j in jobs.values()]
            states = self._wait(names, wait, report)
            pods = self._pods()
        verdicts = []
        for pair, job in jobs.items():
            rank0 = [p for p in pods.get(job["metadata"]["name"], []) if _index(p) == "0"]
            log, _ = self._log(rank0[-1] if rank0 else None, PAIR_STEP)
            verdicts.append(judge_pair(pair, log, expected_ranks=2 * targets[pair[0]].gpus))
        return verdicts, any(not s.finished for s in states.values())

    def _apply_owned(self, service: dict[str, Any], job_name: str) -> None:
        """The pair's Service goes with its Job (Services have no TTL of their own)."""
        job = self.kube.get("batch/v1", "Job", job_name, self.namespace)
        if job is not None:
            service["metadata"]["ownerReferences"] = [
                {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job["metadata"]["uid"]}
            ]
        self.kube.apply(service)


def job_deadline(job: Mapping[str, Any]) -> float:
    return float(job["spec"]["activeDeadlineSeconds"])


def _index(pod: Mapping[str, Any]) -> str | None:
    labels: Mapping[str, str] = pod["metadata"].get("labels", {})
    return labels.get(COMPLETION_INDEX_LABEL)


def _same_test(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """The same node, level and GPU request: the existing Job answers what this run asks."""

    def key(job: Mapping[str, Any]) -> tuple[Any, ...]:
        meta, spec = job["metadata"], job["spec"]
        containers = spec["template"]["spec"].get("containers", [])
        gpus = [c.get("resources", {}).get("limits", {}).get(GPU_RESOURCE) for c in containers]
        return (
            meta.get("labels", {}).get(NODE_LABEL),
            meta.get("annotations", {}).get(BURNIN_TIER_ANNOTATION),
            [str(g) for g in gpus],
            [c.get("image") for c in containers],
        )

    return key(existing) == key(wanted)


# --------------------------------------------------------------------------------------------
# Quarantine.


def quarantine_failed(kube: Kube, verdicts: Sequence[NodeVerdict]) -> None:
    """Make the health controller's quarantine writes for the FAIL nodes; say what was done on stderr."""
    if not any(v.quarantine for v in verdicts):
        err.print("quarantine: no node FAILed", markup=False)
        return
    now = time.time()
    plan = quarantine_plan(verdicts, kube.list("v1", "Node"), now)
    for notice in plan.notices:
        err.print(f"quarantine: {notice.node or ''}: {notice.message}", markup=False)
    for action in plan.actions:
        if isinstance(action, UpdateNode):
            update_node(kube, action)
        elif isinstance(action, SetCondition):
            kube.apply_status(condition_status(action, now), field_manager=FIELD_MANAGER)
        elif isinstance(action, RecordEvent):
            kube.create(
                event(action, kube.get("v1", "Node", action.node), "konduktor-install", "konduktor-install", now)
            )
        err.print(f"quarantine: {describe_action(action)}", markup=False)

"""Running a burn-in: create the run's objects, wait for its Jobs, read their pods' logs and judge them.

One Job per node (`konduktor.burnin.manifests.node_job`), then at the full level node pairs over the fabric,
bisecting failures to a node. Step output is read from each pod's log through the API and judged by
`konduktor.burnin.verdict`; what the Jobs and pods said completes the verdicts (`konduktor.burnin.plan`).
A run is named by its run id: a runner given the id of an earlier run picks up that run's Jobs instead of
starting new ones, so an interrupted run can still be collected.

The runner says what it does through two callables the caller gives (the CLI passes its console): `say` for
a line of news, `progress` for a long step whose reporter takes updates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from konduktor.burnin.isolation import NodePair, PairOutcome, plan_pair_tests
from konduktor.burnin.manifests import (
    NODE_LABEL,
    RUN_LABEL,
    node_job_name,
    pair_objects,
    scripts_configmap,
    taint_tolerations,
)
from konduktor.burnin.plan import (
    NodeRun,
    Target,
    complete_verdict,
    no_gpu_verdict,
    pair_groups,
    pod_problem,
    settle_pairs,
    target_job,
)
from konduktor.burnin.results import NodeVerdict, PairVerdict
from konduktor.burnin.sliced import judge_sliced, sliced_options
from konduktor.burnin.tiers import PAIR_STEP, BurnInOptions, Tier
from konduktor.burnin.verdict import NodeEvidence, judge_pair, judge_run, pair_outcomes
from konduktor.config.model import UNSCHEDULABLE_SECONDS
from konduktor.errors import PartialApply
from konduktor.kube.client import Kube
from konduktor.kube.job_state import JobPhase, JobState, job_state
from konduktor.kube.jobs import owned_by, pods_by_job, read_log, wait_for_jobs
from konduktor.vocabulary import BURNIN_NAMESPACE, BURNIN_SERVICE_ACCOUNT, BURNIN_TIER_ANNOTATION, GPU_RESOURCE
from konduktor.waiting import wait_until

# Installed with konduktor-core; the admission policy lets only it (and preflight) tolerate the health taint.
SERVICE_ACCOUNT = BURNIN_SERVICE_ACCOUNT
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
WAIT_SLACK_S = 120  # after a Job's own deadline: time for the Job controller to mark it Failed
DELETE_WAIT_S = 60  # for a replaced Job to be gone
MAX_PAIR_ROUNDS = 10

Say = Callable[[str], None]
Progress = Callable[[str], AbstractContextManager[Callable[[str], None]]]


def _silent(_: str) -> None:
    pass


@contextmanager
def _no_progress(_: str) -> Iterator[Callable[[str], None]]:
    yield _silent


@dataclass(frozen=True)
class BurnInRequest:
    """One burn-in run: which nodes (none: every GPU node the config's flavors select), at which level, where its
    Jobs run, under which run id, how long to wait (None: the Jobs' deadline), whether FAIL nodes are quarantined,
    and how long a pod may stay unschedulable before its node is an ERROR."""

    options: BurnInOptions
    run_id: str
    namespace: str = BURNIN_NAMESPACE
    nodes: tuple[str, ...] = ()
    wait_s: float | None = None
    quarantine: bool = False
    unschedulable_s: float = UNSCHEDULABLE_SECONDS


class BurnInRunner:
    """Creates a run's objects, waits for its Jobs and reads their logs; all through `Kube`."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        run_id: str,
        options: BurnInOptions,
        unschedulable_s: float = UNSCHEDULABLE_SECONDS,
        *,
        say: Say = _silent,
        progress: Progress = _no_progress,
    ) -> None:
        self.kube = kube
        self.say = say
        self.progress = progress
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
            self.say(f"created namespace {self.namespace}")
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
        wait_until(
            f"Job {self.namespace}/{name} to be deleted",
            lambda: self.kube.get("batch/v1", "Job", name, self.namespace) is None,
            timeout=DELETE_WAIT_S,
            on_timeout=lambda: PartialApply(
                f"Job {self.namespace}/{name} is still being deleted after {DELETE_WAIT_S}s",
                hint="run the same command again once it is gone (kubectl get job -n NAMESPACE NAME)",
            ),
        )

    def _own_scripts(self) -> None:
        """The scripts ConfigMap belongs to the run's Jobs: it goes when the last of them reaches its TTL."""
        self.kube.apply(owned_by(self.scripts, self._run_jobs()))

    # -- the run ----------------------------------------------------------------------------------
    def run(self, targets: Sequence[Target], wait_s: float | None) -> tuple[tuple[NodeVerdict, ...], bool]:
        """Verdicts in target order, and whether the wait ended with Jobs still running."""
        runnable = [t for t in targets if t.gpus > 0 or t.slices]
        if not runnable:
            return tuple(no_gpu_verdict(t) for t in targets), False
        wait = wait_s if wait_s is not None else self.options.deadline_s + WAIT_SLACK_S
        with self.progress(f"burn-in {self.run_id}") as report:
            self.prepare()
            self.submit([self.job(t) for t in runnable], report)
            judged, waited_out = self.collect(runnable, wait, report)
        if self.options.tier is Tier.FULL and not waited_out:  # node pairs of whole GPUs only
            judged, waited_out = self.run_pairs([t for t in runnable if not t.slices], judged, wait_s)
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

    def read(self, targets: Sequence[Target]) -> tuple[tuple[NodeVerdict, ...], bool]:
        """The run's verdicts as its Jobs, pods and logs say now, and whether Jobs still run; it creates, waits for
        and deletes nothing (`burnin show`). Node pairs are not judged again: a recorded report has them."""
        names = {t.node: node_job_name(self.run_id, t.node) for t in targets}
        jobs = {j["metadata"]["name"]: j for j in self._run_jobs()}
        states = {name: job_state(jobs.get(name)) for name in names.values()}
        return self._judge(targets, names, states), any(not s.finished for s in states.values())

    def job_nodes(self, nodes: Iterable[str]) -> list[str]:
        """Those of `nodes` that this run has a node Job for."""
        jobs = {j["metadata"]["name"] for j in self._run_jobs()}
        return [node for node in nodes if node_job_name(self.run_id, node) in jobs]

    def _wait(self, names: Sequence[str], wait_s: float, report: Callable[[str], None]) -> dict[str, JobState]:
        try:
            selector = f"{RUN_LABEL}={self.run_id}"
            return wait_for_jobs(self.kube, self.namespace, selector, names, wait_s, report, self.unschedulable_s)
        except KeyboardInterrupt:
            self.say(f"the Jobs keep running; read their results later: konduktor-install burnin show {self.run_id}")
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
        evidence: list[NodeEvidence] = []
        sliced: list[NodeEvidence] = []
        runs: dict[str, NodeRun] = {}
        for target in targets:
            attempts = pods.get(names[target.node])
            pod = attempts[-1] if attempts else None
            logs: dict[str, str | None] = {}
            missing: dict[str, str] = {}
            for step in (sliced_options(self.options) if target.slices else self.options).steps:
                log, why = self._log(pod, step.value)
                logs[step.value] = log
                if why is not None:
                    missing[step.value] = why
            node = NodeEvidence(target.node, target.gpu_product, target.expected_gpus, logs)
            (sliced if target.slices else evidence).append(node)
            runs[target.node] = NodeRun(states[names[target.node]], missing, pod_problem(pod))
        verdicts = (*judge_run(evidence, self.options), *(judge_sliced(n, self.options) for n in sliced))
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
        with self.progress(f"burn-in {self.run_id}: node pairs") as report:
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
        self.kube.apply(owned_by(service, [job]) if job is not None else service)


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

"""`konduktor queue`, `why` and `submit`: parse, call konduktor.queueing, print."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from konduktor.cli.console import err, print_rows, warn
from konduktor.cli.target import AsGroupOption, AsOption, ContextOption, KubeconfigOption, connect
from konduktor.errors import ExitCode, UsageError
from konduktor.kube.client import Kube
from konduktor.kube.policy_audit import policy_findings
from konduktor.ops.submit import prepared_job, submit_job
from konduktor.queueing.cluster import (
    explanation_for,
    job_pods,
    readable_cluster_queue,
    requeue_events,
    team_queues,
    workload_of_job,
)
from konduktor.queueing.explain import Explanation, as_json, queue_view
from konduktor.queueing.slices import published_slice_usage, slice_usage, with_slice_reasons

NamespaceOption = Annotated[
    str | None, typer.Option("-n", "--namespace", help="Your team's namespace (default: the kubeconfig context's).")
]
OutputOption = Annotated[str, typer.Option("-o", "--output", help="table or json.")]
QUOTA_COLUMNS = ["flavor", "nominal", "used", "borrowed", "lent", "borrowing_limit"]
PENDING_COLUMNS = ["position", "job", "priority", "gpus", "local_queue", "created"]
RUNNING_COLUMNS = ["job", "priority", "gpus", "local_queue", "admitted"]
EXIT_CODES = {
    "admitted": ExitCode.OK,
    "pending": ExitCode.NEGATIVE,
    "not-queued": ExitCode.NEGATIVE,
    "finished": ExitCode.FINISHED,
    "never-fit": ExitCode.NEVER_FITS,
}


def register(app: typer.Typer) -> None:
    app.command("queue")(queue)
    app.command("why")(why_command)
    app.command("submit")(submit)


def _output(output: str) -> str:
    if output not in ("table", "json"):
        raise UsageError(f"-o {output}: not an output format", hint="-o table or -o json")
    return output


def _connect(kubeconfig: Path | None, context: str | None, user: str | None, group: str | None) -> Kube:
    """The cluster as kubectl would choose it (a team member's ~/.kube/config included), as `--as` when given."""
    return connect(kubeconfig, context, read_only=True, as_user=user, as_group=group)


def queue(
    namespace: NamespaceOption = None,
    output: OutputOption = "table",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    as_group: AsGroupOption = None,
) -> None:
    """Your team's GPU quota (used, borrowed, lent), its pending jobs in Kueue's order and its running jobs."""
    output = _output(output)
    with _connect(kubeconfig, context, as_user, as_group) as kube:
        ns = namespace or kube.namespace
        team = team_queues(kube, ns)
        cluster_queues = sorted(set(team.local_queues.values()))
        if not cluster_queues:
            raise UsageError(
                f"namespace {ns} has no LocalQueue: it is not a team namespace", hint="pass -n TEAM-NAMESPACE"
            )
        views = (
            [queue_view(cq, team.capacity, team.pending, team.source) for cq in cluster_queues] if team.capacity else []
        )
        if output == "json":
            body: dict[str, Any] = {
                "namespace": ns,
                "source": team.source,
                "capacityPublished": team.capacity is not None,
                "capacityFreshness": team.capacity.freshness.as_json()
                if team.capacity is not None and team.capacity.freshness is not None
                else None,
                "queues": [v.as_json() for v in views],
                "pending": [vars(p) for p in team.pending],
                "running": [vars(r) for r in team.running],
            }
            sys.stdout.write(json.dumps(body, indent=2) + "\n")
            return
        for view in views:
            err.print(f"team {view.team} (ClusterQueue {view.cluster_queue})", markup=False)
            print_rows([q.row() for q in view.quota], QUOTA_COLUMNS, "table")
        if team.capacity is None:
            err.print("quota: not published on this cluster (ask an administrator)", markup=False)
        elif team.capacity.stale and team.capacity.freshness is not None:
            err.print(f"warning: the quota figures are stale: {team.capacity.freshness.message}", markup=False)
        err.print(f"pending, in Kueue's order ({_source_text(team.source)}):", markup=False)
        print_rows([vars(p) for p in team.pending], PENDING_COLUMNS, "table")
        err.print("running (admitted by Kueue, earliest first):", markup=False)
        dispatched = ["cluster"] if any(r.cluster for r in team.running) else []  # several clusters: where it runs
        print_rows([vars(r) for r in team.running], [*RUNNING_COLUMNS, *dispatched], "table")


def _source_text(source: str) -> str:
    return "from Kueue's visibility API" if source == "visibility" else "derived from the Workloads as Kueue sorts them"


def why_command(
    job: Annotated[str, typer.Argument(help="The job's name (or its Workload's).", show_default=False)],
    namespace: NamespaceOption = None,
    output: OutputOption = "table",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    as_group: AsGroupOption = None,
) -> None:
    """Why a job waits, in plain words, and what would make it run. Exit 0: admitted; 1: pending; 6: finished;
    7: will never fit."""
    output = _output(output)
    with _connect(kubeconfig, context, as_user, as_group) as kube:
        ns = namespace or kube.namespace
        team = team_queues(kube, ns)
        workload = workload_of_job(team.workloads, job)
        found = kube.get("batch/v1", "Job", job, ns) or kube.get("v1", "Pod", job, ns)
        if workload is None and found is None:
            raise UsageError(f"no job or workload {job} in namespace {ns}", hint="`konduktor queue` lists them")
        labels = found["metadata"].get("labels", {}) if found is not None else None
        # The job as it stands, judged by the platform's policies as if the member created it now.
        policy = policy_findings(kube, found) if found is not None else []
        pods = job_pods(kube, ns, found)
        explanation = explanation_for(team, job, workload, labels, policy, pods, requeue_events(kube, ns), found)
        # The queue's quota and usage of each slice: its ClusterQueue where this identity may read it, else what the
        # platform publishes of it.
        usage = slice_usage(readable_cluster_queue(kube, explanation.cluster_queue)) or published_slice_usage(
            team.capacity, explanation.cluster_queue
        )
        explanation = with_slice_reasons(explanation, workload, usage, pods)
        _print_explanation(explanation, output)
        raise typer.Exit(EXIT_CODES[explanation.state])


def _print_explanation(explanation: Explanation, output: str) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(as_json(explanation), indent=2) + "\n")
        return
    out = sys.stdout
    where = (
        f" at position {explanation.position} of ClusterQueue {explanation.cluster_queue}"
        if explanation.position is not None
        else ""
    )
    out.write(f"{explanation.job} ({explanation.namespace}): {explanation.state}{where}\n")
    for reason in explanation.reasons:
        out.write(f"  - {reason.message}\n")
    for remedy in explanation.remedies:
        out.write(f"  to run: {remedy}\n")
    if explanation.kueue_message:
        out.write(f"  Kueue says: {explanation.kueue_message}\n")
    out.write(f"  (queue order {_source_text(explanation.source)})\n")


def submit(
    file: Annotated[Path, typer.Argument(help="A Job, JobSet or Pod manifest (one document).", show_default=False)],
    priority: Annotated[
        str | None, typer.Option("--priority", help="opportunistic, standard (the default) or urgent.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Let the cluster judge it; create nothing.")] = False,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="When the cluster refuses the job's pods (Pod Security, the platform's policies): show the least "
            "changes that satisfy it and submit the job with them.",
        ),
    ] = False,
    slice_: Annotated[
        str | None,
        typer.Option(
            "--slice",
            help="Run on a slice of a GPU instead of whole GPUs: RESOURCE[:COUNT], a MIG profile (mig-1g.10gb) or "
            "gpu.shared (time-slicing, MPS), as your team's quota names it. Each container that asks for "
            "nvidia.com/gpu asks for COUNT (default 1) of it instead.",
        ),
    ] = None,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    as_group: AsGroupOption = None,
) -> None:
    """Submit a job: fills in the queue label and priority, lets the cluster judge it (dry run), refuses one that
    the cluster or its pods' security would refuse (exit 3; --fix changes it) or that can never fit (exit 7)."""
    job = prepared_job(file, priority, slice_)
    with _connect(kubeconfig, context, as_user, as_group) as kube:
        done = submit_job(
            kube, file, job, namespace=namespace, priority=priority, fix=fix, dry_run=dry_run, say=_say, warn=warn
        )
    summary = f"queue {done.queue}, priority {done.priority}"
    if not done.created:
        err.print(
            f"dry run: the cluster accepts {done.kind} {done.name} in {done.namespace} ({summary}); created nothing",
            markup=False,
        )
        return
    err.print(f"created {done.kind} {done.name} in {done.namespace} ({summary})", markup=False)
    sys.stdout.write(f"konduktor why {done.name} -n {done.namespace}\n")


def _say(line: str) -> None:
    err.print(line, markup=False)

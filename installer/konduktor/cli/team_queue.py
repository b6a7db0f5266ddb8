"""`konduktor queue`, `why` and `submit`: parse, call konduktor.queueing, print."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from konduktor.cli.console import err, print_rows
from konduktor.cli.target import ContextOption, KubeconfigOption, running_target
from konduktor.errors import ChangeRefused, ExitCode, NeverFits, UsageError
from konduktor.kube.client import ApiError, Identity, Kube
from konduktor.kube.policy_audit import policy_findings
from konduktor.queueing.cluster import team_queues, verdict_for, workload_of_job
from konduktor.queueing.explain import QUEUE_LABEL, Verdict, as_json, queue_view
from konduktor.queueing.submit import PRIORITIES, fill_in, workload_for

NamespaceOption = Annotated[
    str | None, typer.Option("-n", "--namespace", help="Your team's namespace (default: the kubeconfig context's).")
]
OutputOption = Annotated[str, typer.Option("-o", "--output", help="table or json.")]
AsOption = Annotated[
    str | None, typer.Option("--as", help="Act as this user (as kubectl --as; the kubeconfig's user may impersonate).")
]
AsGroupOption = Annotated[str | None, typer.Option("--as-group", help="With --as: the user's group (a team's group).")]
QUOTA_COLUMNS = ["flavor", "nominal", "used", "borrowed", "lent", "borrowing_limit"]
PENDING_COLUMNS = ["position", "job", "priority", "gpus", "local_queue", "created"]
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
    target = running_target(kubeconfig, context, read_only=True)
    if user is None:
        return target.connect()
    return Kube(target.kubeconfig, target.context, impersonate=Identity(user, group))


def queue(
    namespace: NamespaceOption = None,
    output: OutputOption = "table",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    as_group: AsGroupOption = None,
) -> None:
    """Your team's GPU quota (used, borrowed, lent) and its pending jobs in Kueue's order."""
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
                "queues": [v.as_json() for v in views],
                "pending": [vars(p) for p in team.pending],
            }
            sys.stdout.write(json.dumps(body, indent=2) + "\n")
            return
        for view in views:
            err.print(f"team {view.team} (ClusterQueue {view.cluster_queue})", markup=False)
            print_rows([q.row() for q in view.quota], QUOTA_COLUMNS, "table")
        if team.capacity is None:
            err.print("quota: not published on this cluster (ask an administrator)", markup=False)
        err.print(f"pending, in Kueue's order ({_source_text(team.source)}):", markup=False)
        print_rows([vars(p) for p in team.pending], PENDING_COLUMNS, "table")


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
        verdict = verdict_for(team, job, workload, labels, policy)
        _print_verdict(verdict, output)
        raise typer.Exit(EXIT_CODES[verdict.state])


def _print_verdict(verdict: Verdict, output: str) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(as_json(verdict), indent=2) + "\n")
        return
    out = sys.stdout
    where = (
        f" at position {verdict.position} of ClusterQueue {verdict.cluster_queue}"
        if verdict.position is not None
        else ""
    )
    out.write(f"{verdict.job} ({verdict.namespace}): {verdict.state}{where}\n")
    for reason in verdict.reasons:
        out.write(f"  - {reason.message}\n")
    for remedy in verdict.remedies:
        out.write(f"  to run: {remedy}\n")
    if verdict.kueue_message:
        out.write(f"  Kueue says: {verdict.kueue_message}\n")
    out.write(f"  (queue order {_source_text(verdict.source)})\n")


def _load_job(path: Path) -> dict[str, Any]:
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except OSError as problem:
        raise UsageError(f"{path}: {problem.strerror}") from problem
    except yaml.MarkedYAMLError as problem:
        mark = problem.problem_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{path}{line}: not YAML: {problem.problem}") from problem
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise UsageError(f"{path}: holds {len(documents)} documents; submit one job per file")
    job: dict[str, Any] = documents[0]
    for field in ("apiVersion", "kind", "metadata"):
        if field not in job:
            raise UsageError(f"{path}:1: {field}: missing")
    return job


def submit(
    file: Annotated[Path, typer.Argument(help="A Job, JobSet or Pod manifest (one document).", show_default=False)],
    priority: Annotated[
        str | None, typer.Option("--priority", help="opportunistic, standard (the default) or urgent.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Let the cluster judge it; create nothing.")] = False,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    as_group: AsGroupOption = None,
) -> None:
    """Submit a job: fills in the queue label and priority, lets the cluster judge it (dry run), refuses one that
    can never fit (exit 7)."""
    if priority is not None and priority not in PRIORITIES:
        raise UsageError(f"--priority {priority}: not a priority", hint=f"one of: {', '.join(PRIORITIES)}")
    original = _load_job(file)
    with _connect(kubeconfig, context, as_user, as_group) as kube:
        ns = namespace or original["metadata"].get("namespace") or kube.namespace
        team = team_queues(kube, ns)
        queues = sorted(lq for _, lq in team.local_queues)
        if not queues:
            raise UsageError(
                f"namespace {ns} has no LocalQueue: it is not a team namespace", hint="pass -n TEAM-NAMESPACE"
            )
        job = fill_in(original, ns, "default" if "default" in queues else queues[0], priority)
        try:
            warnings = kube.dry_run_create(job)
        except ApiError as problem:
            if problem.outage:
                raise
            raise ChangeRefused(f"the cluster refuses {file}: {problem.message}") from problem
        for warning in warnings:
            err.print(f"warning: {warning}", markup=False)
        name = job["metadata"].get("name", "")
        verdict = verdict_for(team, name, workload_for(job))
        if verdict.state == "never-fit":
            raise NeverFits(
                f"{file}: {name} can never run as written: " + "; ".join(r.message for r in verdict.reasons),
                hint="\n".join(verdict.remedies) or None,
            )
        labels = job["metadata"]["labels"]
        summary = f"queue {labels[QUEUE_LABEL]}, priority {labels['kueue.x-k8s.io/priority-class']}"
        if dry_run:
            err.print(
                f"dry run: the cluster accepts {job['kind']} {name} in {ns} ({summary}); created nothing", markup=False
            )
            return
        created = kube.create(job)
        name = created["metadata"]["name"]
        err.print(f"created {job['kind']} {name} in {ns} ({summary})", markup=False)
        sys.stdout.write(f"konduktor why {name} -n {ns}\n")

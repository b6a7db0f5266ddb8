"""`konduktor queue`, `why` and `submit`: parse, call konduktor.queueing, print."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from konduktor.cli.console import err, print_rows, warn
from konduktor.cli.target import ContextOption, KubeconfigOption
from konduktor.errors import ChangeRefused, ExitCode, NeverFits, UsageError
from konduktor.kube.client import ApiError, Identity, Kube
from konduktor.kube.policy_audit import policy_findings
from konduktor.ops.target import running_target
from konduktor.queueing.admission import (
    fix_for,
    is_pod_security_refusal,
    is_pod_security_warning,
    lacks_rights,
    probe_pods,
    reasons_of,
)
from konduktor.queueing.cluster import (
    explanation_for,
    job_pods,
    readable_cluster_queue,
    requeue_events,
    team_queues,
    workload_of_job,
)
from konduktor.queueing.explain import PRIORITY_LABEL, QUEUE_LABEL, Explanation, as_json, queue_view
from konduktor.queueing.slices import published_slice_usage, slice_usage, with_slice_reasons
from konduktor.queueing.submit import (
    PRIORITIES,
    check_queue,
    default_queue,
    fill_in,
    parse_slice,
    shown_name,
    with_slices,
    workload_for,
)

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
    if not (job["metadata"] or {}).get("name") and not (job["metadata"] or {}).get("generateName"):
        raise UsageError(f"{path}:1: metadata.name: missing (give a name or a generateName)")
    return job


def _line_of(path: Path, keys: tuple[str, ...]) -> int | None:
    """The line of `keys` (a path of mapping keys) in the file's first document, or None."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    line = None
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            return line
        found = next(((k, v) for k, v in node.value if getattr(k, "value", None) == key), None)
        if found is None:
            return line
        line, node = found[0].start_mark.line + 1, found[1]
    return line


def _admission_refusal(problem: ApiError) -> bool:
    """The server judged the request and refused it (admission's 403, an invalid object's 422, a conflict), as
    opposed to an outage or this identity's missing rights."""
    return problem.status not in (None, 401) and not (problem.status == 403 and lacks_rights(problem.message))


def _judge(kube: Kube, job: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The cluster's answer to creating `job`, nothing created: the refusals (a refused dry run, or what the
    namespace's enforced Pod Security level refuses of its pods) and the warnings."""
    try:
        warnings = kube.dry_run_create(job)
    except ApiError as problem:
        if not _admission_refusal(problem):
            raise
        if problem.status == 409:
            name = job["metadata"]["name"]
            raise ChangeRefused(
                f"{job['kind']} {name} already exists in {job['metadata']['namespace']}",
                hint=f"`konduktor why {name}` says where it stands; delete it to submit it again",
            ) from problem
        return [problem.message], []
    if not any(is_pod_security_warning(w) for w in warnings):
        return [], warnings
    refusals = []
    for probe in probe_pods(job):
        try:
            kube.dry_run_create(probe)
        except ApiError as problem:
            if not _admission_refusal(problem):
                raise
            # Only Pod Security's answer counts: the probe is a bare pod, which other policies judge otherwise.
            if is_pod_security_refusal(problem.message):
                refusals.append(problem.message)
    if refusals:  # the refusals say what the warnings said
        warnings = [w for w in warnings if not is_pod_security_warning(w)]
    return refusals, warnings


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
    if priority is not None and priority not in PRIORITIES:
        raise UsageError(f"--priority {priority}: not a priority", hint=f"one of: {', '.join(PRIORITIES)}")
    sliced = parse_slice(slice_) if slice_ is not None else None
    original = _load_job(file)
    if sliced is not None:
        original = with_slices(original, *sliced)
    with _connect(kubeconfig, context, as_user, as_group) as kube:
        written = original["metadata"].get("namespace")
        ns = namespace or written or kube.namespace
        if written and written != ns:
            # Samples (Kueue's among them) say `namespace: default`: -n says where this one goes.
            err.print(f"{file}: metadata.namespace {written}: submitting in {ns} (-n)", markup=False)
        team = team_queues(kube, ns)
        queues = sorted(lq for _, lq in team.local_queues)
        if not queues:
            raise UsageError(
                f"namespace {ns} has no LocalQueue: it is not a team namespace", hint="pass -n TEAM-NAMESPACE"
            )
        job = fill_in(original, ns, default_queue(queues), priority)
        try:
            check_queue(job, queues)
        except UsageError as problem:
            line = _line_of(file, ("metadata", "labels", QUEUE_LABEL)) or _line_of(
                file, ("metadata", "annotations", QUEUE_LABEL)
            )
            raise UsageError(f"{file}:{line or 1}: {problem.message}", hint=problem.hint) from problem
        refusals, warnings = _judge(kube, job)
        for warning in warnings:
            warn(warning)
        if refusals and fix:
            job = _fixed(kube, file, job, refusals)
        elif refusals:
            reasons = reasons_of(refusals)
            fixable = fix_for(job, reasons)
            raise ChangeRefused(
                f"the cluster refuses {file}:\n" + "\n".join(f"  - {r}" for r in reasons),
                hint=f"`konduktor submit --fix {file}` shows and makes the changes that satisfy it"
                if fixable.changes
                else None,
            )
        name = shown_name(job)
        explanation = explanation_for(team, name, workload_for(job))
        if explanation.state == "never-fit":
            raise NeverFits(
                f"{file}: {name} can never run as written: " + "; ".join(r.message for r in explanation.reasons),
                hint="\n".join(explanation.remedies) or None,
            )
        labels = job["metadata"]["labels"]
        summary = f"queue {labels[QUEUE_LABEL]}, priority {labels[PRIORITY_LABEL]}"
        if dry_run:
            err.print(
                f"dry run: the cluster accepts {job['kind']} {name} in {ns} ({summary}); created nothing", markup=False
            )
            return
        created = kube.create(job)
        name = created["metadata"]["name"]
        err.print(f"created {job['kind']} {name} in {ns} ({summary})", markup=False)
        sys.stdout.write(f"konduktor why {name} -n {ns}\n")


def _fixed(kube: Kube, file: Path, job: dict[str, Any], refusals: list[str]) -> dict[str, Any]:
    """The job changed so that the cluster accepts it (shown change by change), or ChangeRefused with what no
    change answers or what the cluster still refuses."""
    reasons = reasons_of(refusals)
    fixed = fix_for(job, reasons)
    for change in fixed.changes:
        err.print(f"fix: {change}", markup=False)
    if fixed.unfixed:
        raise ChangeRefused(
            f"the cluster refuses {file}, and --fix cannot change what it refuses:\n"
            + "\n".join(f"  - {r}" for r in fixed.unfixed),
            hint="change the job by hand",
        )
    still, _ = _judge(kube, fixed.job)
    if still:
        raise ChangeRefused(
            f"the cluster still refuses {file} after --fix:\n" + "\n".join(f"  - {r}" for r in reasons_of(still)),
            hint="change the job by hand",
        )
    return fixed.job

"""`konduktor submit`: read a job's file, fill it in for the team's queue, let the cluster judge it (a dry run, and
its pods' Pod Security), change it on request so the cluster accepts it, refuse one that can never fit, create it.
The job's own changes are `konduktor.queueing.submit`'s (pure); this is the read, the cluster's answers and the
create."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from konduktor.errors import ChangeRefused, NeverFits, UsageError
from konduktor.kube.client import ApiError, Kube
from konduktor.queueing.admission import (
    fix_for,
    is_pod_security_refusal,
    is_pod_security_warning,
    lacks_rights,
    probe_pods,
    reasons_of,
)
from konduktor.queueing.cluster import explanation_for, team_queues
from konduktor.queueing.explain import PRIORITY_LABEL, QUEUE_LABEL
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

Say = Callable[[str], None]  # a line for the person submitting, as it happens


@dataclass(frozen=True)
class Submitted:
    """The job the cluster accepted: created, or only judged on a dry run."""

    kind: str
    name: str
    namespace: str
    queue: str
    priority: str
    created: bool


def load_job(path: Path) -> dict[str, Any]:
    """The one job a file holds; UsageError naming the file, the line and the field otherwise."""
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


def prepared_job(path: Path, priority: str | None = None, slice_: str | None = None) -> dict[str, Any]:
    """The file's job with `--slice` applied, its `--priority` checked: what can be said before any cluster."""
    if priority is not None and priority not in PRIORITIES:
        raise UsageError(f"--priority {priority}: not a priority", hint=f"one of: {', '.join(PRIORITIES)}")
    sliced = parse_slice(slice_) if slice_ is not None else None
    job = load_job(path)
    return with_slices(job, *sliced) if sliced is not None else job


def line_of(path: Path, keys: tuple[str, ...]) -> int | None:
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


def judge(kube: Kube, job: dict[str, Any]) -> tuple[list[str], list[str]]:
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


def fixed(kube: Kube, path: Path, job: dict[str, Any], refusals: list[str], say: Say) -> dict[str, Any]:
    """The job changed so that the cluster accepts it (each change said), or ChangeRefused with what no change
    answers or what the cluster still refuses."""
    reasons = reasons_of(refusals)
    fix = fix_for(job, reasons)
    for change in fix.changes:
        say(f"fix: {change}")
    if fix.unfixed:
        raise ChangeRefused(
            f"the cluster refuses {path}, and --fix cannot change what it refuses:\n"
            + "\n".join(f"  - {r}" for r in fix.unfixed),
            hint="change the job by hand",
        )
    still, _ = judge(kube, fix.job)
    if still:
        raise ChangeRefused(
            f"the cluster still refuses {path} after --fix:\n" + "\n".join(f"  - {r}" for r in reasons_of(still)),
            hint="change the job by hand",
        )
    return fix.job


def submit_job(
    kube: Kube,
    path: Path,
    original: dict[str, Any],
    *,
    namespace: str | None = None,
    priority: str | None = None,
    fix: bool = False,
    dry_run: bool = False,
    say: Say,
    warn: Say,
) -> Submitted:
    """Submit `original` (the job `prepared_job` read from `path`) in `namespace` (else its own, else the
    kubeconfig context's): ChangeRefused when the cluster refuses it (with `fix`, the changes that satisfy it are
    said and made), NeverFits when its team's quota can never hold it; created unless `dry_run`."""
    written = original["metadata"].get("namespace")
    ns = namespace or written or kube.namespace
    if written and written != ns:
        # Samples (Kueue's among them) say `namespace: default`: -n says where this one goes.
        say(f"{path}: metadata.namespace {written}: submitting in {ns} (-n)")
    team = team_queues(kube, ns)
    queues = sorted(lq for _, lq in team.local_queues)
    if not queues:
        raise UsageError(f"namespace {ns} has no LocalQueue: it is not a team namespace", hint="pass -n TEAM-NAMESPACE")
    job = fill_in(original, ns, default_queue(queues), priority)
    try:
        check_queue(job, queues)
    except UsageError as problem:
        line = line_of(path, ("metadata", "labels", QUEUE_LABEL)) or line_of(
            path, ("metadata", "annotations", QUEUE_LABEL)
        )
        raise UsageError(f"{path}:{line or 1}: {problem.message}", hint=problem.hint) from problem
    refusals, warnings = judge(kube, job)
    for warning in warnings:
        warn(warning)
    if refusals and fix:
        job = fixed(kube, path, job, refusals, say)
    elif refusals:
        reasons = reasons_of(refusals)
        fixable = fix_for(job, reasons)
        raise ChangeRefused(
            f"the cluster refuses {path}:\n" + "\n".join(f"  - {r}" for r in reasons),
            hint=f"`konduktor submit --fix {path}` shows and makes the changes that satisfy it"
            if fixable.changes
            else None,
        )
    name = shown_name(job)
    explanation = explanation_for(team, name, workload_for(job))
    if explanation.state == "never-fit":
        raise NeverFits(
            f"{path}: {name} can never run as written: " + "; ".join(r.message for r in explanation.reasons),
            hint="\n".join(explanation.remedies) or None,
        )
    labels = job["metadata"]["labels"]
    if not dry_run:
        name = kube.create(job)["metadata"]["name"]
    return Submitted(job["kind"], name, ns, labels[QUEUE_LABEL], labels[PRIORITY_LABEL], created=not dry_run)

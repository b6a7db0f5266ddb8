"""Node checks from a pod on each GPU node (config `preflight.nodes.pod`), for `preflight` and `up`.

One Job per node of the config's GPU types (`konduktor.preflight.pods.node_check_job`), under a new run id each
time, so a re-run never meets the Jobs of an earlier one; the earlier runs' finished Jobs are deleted first (their
TTL would, an hour later). Then wait for the Jobs, read each pod's log through the API and take the checks it
printed as the node's. A node whose pod printed no readable report FAILs `host-reachable` with the reason.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from konduktor.burnin.manifests import make_run_id
from konduktor.burnin.plan import pod_problem
from konduktor.config.model import Config, NodeCheckPods
from konduktor.kube.access import Permission, may
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.job_state import JobPhase, JobState, job_state
from konduktor.kube.jobs import pods_by_job, read_log, wait_for_jobs
from konduktor.preflight.cluster import ClusterFacts
from konduktor.preflight.inventory import expectations_of, gpu_nodes, no_hosts
from konduktor.preflight.pods import (
    CONTAINER,
    DEADLINE_S,
    NAME,
    RUN_LABEL,
    SERVICE_ACCOUNT,
    PodTarget,
    UnreadableReport,
    job_name,
    no_result,
    node_check_job,
    read_node_report,
)
from konduktor.preflight.results import Check, Status, check
from konduktor.vocabulary import HOSTNAME_LABEL

WAIT_SLACK_S = 60  # after the Jobs' deadline: time for the Job controller to mark them Failed
# What running the node checks from pods takes in their namespace: start the Jobs, clear earlier runs' Jobs,
# find each Job's pod and read its report.
POD_PERMISSIONS = (
    Permission("create", "jobs", "batch"),
    Permission("list", "jobs", "batch"),
    Permission("delete", "jobs", "batch"),
    Permission("list", "pods"),
    Permission("get", "pods", subresource="log"),
)


def missing_pod_rights(kube: Kube, namespace: str) -> Check | None:
    """A FAIL naming the rights the preflight pods need in `namespace` and this identity lacks, before any Job."""
    missing = [p for p in POD_PERMISSIONS if not may(kube, p, namespace)]
    if not missing:
        return None
    return check(
        "preflight-pods",
        Status.FAIL,
        f"no right to {', '.join(map(str, missing))} in namespace {namespace}",
        evidence=[f"SelfSubjectAccessReview: {p} in {namespace} is not allowed" for p in missing],
        hint=f"grant this identity {', '.join(map(str, missing))} in {namespace}; "
        f"`kubectl auth can-i {missing[0].verb} {missing[0].qualified_resource} -n {namespace}` shows whether it may",
    )


def pod_checks(
    kube: Kube, config: Config, facts: ClusterFacts, settings: NodeCheckPods, report: Callable[[str], None]
) -> list[Check]:
    """The node checks of every node of the config's GPU types, each from a pod on it, in node order."""
    nodes = gpu_nodes(config, facts.nodes)
    if not nodes:
        return [no_hosts(facts, "preflight-pods", "from a pod", "fix what the cluster checks report")]
    targets = [PodTarget(n.name, n.labels.get(HOSTNAME_LABEL), n.taints, expectations_of(config, n)) for n in nodes]
    run_id = f"{make_run_id(datetime.now(UTC))}-{secrets.token_hex(2)}"
    namespace = settings.namespace
    if (no_rights := missing_pod_rights(kube, namespace)) is not None:
        return [no_rights]
    names = {t.node: job_name(run_id, t.node) for t in targets}
    try:
        service_account = prepare(kube, namespace)
    except ApiError as problem:
        why = f"cannot prepare namespace {namespace}: {problem.message}"
        return [c for t in targets for c in no_result(t.node, [why], namespace, names[t.node])]
    report(f"starting {len(targets)} preflight pod(s) in {namespace} (run {run_id})")
    refused: dict[str, str] = {}
    for target in targets:
        try:
            kube.apply(node_check_job(run_id, target, config.preflight_pod_image, namespace, service_account))
        except ApiError as problem:  # e.g. an admission policy: that node's result says so
            refused[target.node] = f"the API refused the Job: {problem.message}"
    selector = f"{RUN_LABEL}={run_id}"
    started = [names[t.node] for t in targets if t.node not in refused]
    states = wait_for_jobs(kube, namespace, selector, started, DEADLINE_S + WAIT_SLACK_S, report) if started else {}
    report("reading the preflight pods' reports")
    pods = pods_by_job(kube, namespace, selector)
    checks: list[Check] = []
    for target in targets:
        name = names[target.node]
        if target.node in refused:
            checks += no_result(target.node, [refused[target.node]], namespace, name)
            continue
        attempts = pods.get(name)
        checks += node_result(kube, namespace, target.node, name, states[name], attempts[-1] if attempts else None)
    return checks


def prepare(kube: Kube, namespace: str) -> str | None:
    """The namespace (created when missing), without the finished Jobs of earlier runs; the preflight service
    account when konduktor-core installed it there."""
    if kube.get("v1", "Namespace", namespace) is None:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for job in kube.list("batch/v1", "Job", namespace, label_selector=f"app.kubernetes.io/name={NAME}"):
        if job_state(job).finished:
            kube.delete("batch/v1", "Job", job["metadata"]["name"], namespace)
    # Without konduktor-core there is neither the account nor the policy that requires it: run as default.
    return SERVICE_ACCOUNT if kube.get("v1", "ServiceAccount", SERVICE_ACCOUNT, namespace) is not None else None


def node_result(
    kube: Kube, namespace: str, node: str, job: str, state: JobState, pod: Mapping[str, Any] | None
) -> list[Check]:
    """The checks the node's pod printed; else `host-reachable` FAILs with what the log, Job and pod say."""
    reasons: list[str] = []
    if pod is not None:
        log, why = read_log(kube, namespace, pod, CONTAINER)
        if log is not None:
            try:
                return read_node_report(log, node)
            except UnreadableReport as problem:
                why = str(problem)
        reasons.append(why or "no output")
    reasons += {
        JobPhase.FAILED: [f"the Job failed: {state.reason}"],
        JobPhase.GONE: ["the Job was deleted before preflight read its result"],
        JobPhase.RUNNING: ["still running when the wait ended"],
    }.get(state.phase, [])
    if pod is None:
        # The Job controller removes the pods of a Job that ran past its deadline.
        reasons.append("the Job has no pod: none was created, or it was removed when the Job failed")
    elif problem_of_pod := pod_problem(pod):
        reasons.append(problem_of_pod)
    return no_result(node, reasons, namespace, job)

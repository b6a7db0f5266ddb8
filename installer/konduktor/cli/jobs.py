"""Jobs that test nodes (burn-in, preflight pods): waiting for them and reading their pods' logs through the API."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from konduktor.cli.burnin_run import JobPhase, JobState, job_state, unschedulable_for
from konduktor.kube.client import ApiError, Kube

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
POLL_SECONDS = 2.0


def wait_for_jobs(
    kube: Kube,
    namespace: str,
    selector: str,
    names: Sequence[str],
    wait_s: float,
    report: Callable[[str], None],
    unschedulable_s: float | None = None,
) -> dict[str, JobState]:
    """The state of each named Job once all have finished, or when `wait_s` has passed. With `unschedulable_s`, a
    Job whose pod the scheduler could not place for that long is done waiting for (UNSCHEDULABLE, with the
    scheduler's message), instead of being waited for until its deadline."""
    deadline = time.monotonic() + wait_s
    said = ""
    while True:
        jobs = {j["metadata"]["name"]: j for j in kube.list("batch/v1", "Job", namespace, label_selector=selector)}
        states = {name: job_state(jobs.get(name)) for name in names}
        if unschedulable_s is not None and any(not s.finished for s in states.values()):
            states.update(unschedulable_jobs(kube, namespace, selector, states, unschedulable_s))
        running = sum(not s.finished for s in states.values())
        if not running or time.monotonic() > deadline:
            return states
        message = f"{len(names) - running}/{len(names)} Jobs finished"
        if message != said:  # without a terminal each report is a line: only changes are news
            report(message)
            said = message
        time.sleep(POLL_SECONDS)


def unschedulable_jobs(
    kube: Kube, namespace: str, selector: str, states: Mapping[str, JobState], bound_s: float
) -> dict[str, JobState]:
    """The running Jobs whose newest pod the scheduler has not been able to place for `bound_s` or more."""
    pods = pods_by_job(kube, namespace, selector)
    now = time.time()
    found = {}
    for name, state in states.items():
        attempts = pods.get(name)
        stuck = unschedulable_for(attempts[-1], now) if attempts and not state.finished else None
        if stuck is not None and stuck[0] >= bound_s:
            found[name] = JobState(JobPhase.UNSCHEDULABLE, f"{stuck[1]} (for {stuck[0]:.0f}s)")
    return found


def pods_by_job(kube: Kube, namespace: str, selector: str) -> dict[str, list[dict[str, Any]]]:
    """The selected pods by the name of their Job, newest last."""
    pods = kube.list("v1", "Pod", namespace, label_selector=selector)
    pods.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
    by_job: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_job.setdefault(pod["metadata"].get("labels", {}).get(JOB_NAME_LABEL, ""), []).append(pod)
    return by_job


def read_log(
    kube: Kube, namespace: str, pod: Mapping[str, Any] | None, container: str
) -> tuple[str | None, str | None]:
    """(log, None) or (None, why there is no output)."""
    if pod is None:
        return None, "no pod"
    name = pod["metadata"]["name"]
    try:
        data = kube.send("GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log", query={"container": container})
    except ApiError as problem:
        # The message starts with the request ("GET /api/v1/...: "); the server's words are what matter.
        said = problem.message.partition(": ")[2] or problem.message
        return None, f"the API served no log ({said})"
    text = data.decode("utf-8", errors="replace")
    return (text, None) if text.strip() else (None, f"container {container} of pod {name} printed nothing")

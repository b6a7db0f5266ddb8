"""Jobs that test nodes (burn-in, preflight pods): waiting for them and reading their pods' logs through the API."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from konduktor.cli.burnin_run import JobState, job_state
from konduktor.kube.client import ApiError, Kube

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
POLL_SECONDS = 2.0


def wait_for_jobs(
    kube: Kube, namespace: str, selector: str, names: Sequence[str], wait_s: float, report: Callable[[str], None]
) -> dict[str, JobState]:
    """The state of each named Job once all have finished, or when `wait_s` has passed."""
    deadline = time.monotonic() + wait_s
    said = ""
    while True:
        jobs = {j["metadata"]["name"]: j for j in kube.list("batch/v1", "Job", namespace, label_selector=selector)}
        states = {name: job_state(jobs.get(name)) for name in names}
        running = sum(not s.finished for s in states.values())
        if not running or time.monotonic() > deadline:
            return states
        message = f"{len(names) - running}/{len(names)} Jobs finished"
        if message != said:  # without a terminal each report is a line: only changes are news
            report(message)
            said = message
        time.sleep(POLL_SECONDS)


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

"""Jobs through the API: waiting for them to finish (or to be found unschedulable), their pods, their logs, and
the objects they own. Burn-in, preflight pods and the health controller's requalification run their Jobs with it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from konduktor.kube.client import ApiError, Kube
from konduktor.kube.job_state import JobPhase, JobState, job_state, unschedulable_for
from konduktor.vocabulary import JOB_NAME_LABEL
from konduktor.waiting import poll_until

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
    states: dict[str, JobState] = {}
    said = ""

    def all_finished() -> bool:
        nonlocal said
        jobs = {j["metadata"]["name"]: j for j in kube.list("batch/v1", "Job", namespace, label_selector=selector)}
        states.clear()
        states.update({name: job_state(jobs.get(name)) for name in names})
        if unschedulable_s is not None and any(not s.finished for s in states.values()):
            states.update(unschedulable_jobs(kube, namespace, selector, states, unschedulable_s))
        running = sum(not s.finished for s in states.values())
        message = f"{len(names) - running}/{len(names)} Jobs finished"
        if running and message != said:  # without a terminal each report is a line: only changes are news
            report(message)
            said = message
        return not running

    poll_until(all_finished, wait_s, POLL_SECONDS)
    return states


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


def newest_pod(kube: Kube, namespace: str, job: str) -> dict[str, Any] | None:
    """The Job's latest attempt: the pod whose log says how the test ended."""
    attempts = pods_by_job(kube, namespace, f"{JOB_NAME_LABEL}={job}").get(job)
    return attempts[-1] if attempts else None


def pod_log(kube: Kube, namespace: str, pod: str, container: str) -> str:
    """What a container of the pod printed, through the API server's pods/log subresource (served by the node's
    kubelet). Raises ApiError when the API serves none."""
    data = kube.send("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", query={"container": container})
    return data.decode("utf-8", errors="replace")


def read_log(
    kube: Kube, namespace: str, pod: Mapping[str, Any] | None, container: str
) -> tuple[str | None, str | None]:
    """(log, None) or (None, why there is no output)."""
    if pod is None:
        return None, "no pod"
    name = pod["metadata"]["name"]
    try:
        text = pod_log(kube, namespace, name, container)
    except ApiError as problem:
        # The message starts with the request ("GET /api/v1/...: "); the server's words are what matter.
        said = problem.message.partition(": ")[2] or problem.message
        return None, f"the API served no log ({said})"
    return (text, None) if text.strip() else (None, f"container {container} of pod {name} printed nothing")


def owned_by(manifest: Mapping[str, Any], jobs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The object owned by the Jobs as they were created: the garbage collector removes it with the last of them
    (a scripts ConfigMap or a pair's Service has no TTL of its own)."""
    owners = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": j["metadata"]["name"], "uid": j["metadata"]["uid"]}
        for j in jobs
    ]
    return {**manifest, "metadata": {**manifest["metadata"], "ownerReferences": owners}}

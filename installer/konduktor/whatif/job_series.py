"""The Jobs kube-state-metrics exposed, read back from Prometheus for `trace export --prometheus URL`.

kube-state-metrics exposes each Job, and each pod, only while it exists; Prometheus keeps the samples for its
retention, so a Job deleted with its Workload is still there. One instant query per series, at `now`, takes each
series' last sample over the window (`last_over_time`), grouped by the Job so that two kube-state-metrics instances
(or one restarted on another address) count once. The series and labels are kube-state-metrics' (its
docs/metrics/workload/job-metrics.md and pod-metrics.md):

- `kube_job_created`, `kube_job_status_start_time`, `kube_job_status_completion_time` (set when the Job succeeded),
  `kube_job_spec_parallelism`, by `namespace` and `job_name`;
- a pod's GPUs: `kube_pod_container_resource_requests{resource="nvidia_com_gpu"}` summed over its containers, and
  its Job: `kube_pod_owner{owner_kind="Job"}`'s `owner_name`;
- the priority class: `kube_job_labels`' `label_kueue_x_k8s_io_priority_class`, there only when kube-state-metrics'
  `metricLabelsAllowlist` names the label for jobs (the umbrella chart's values do).
"""

from __future__ import annotations

import requests

from konduktor.errors import KonduktorError
from konduktor.observability.answers import SourceError, array, finite_number, labels, mapping, success_data
from konduktor.whatif.export import JobKey, JobSeries

PRIORITY_LABEL = "label_kueue_x_k8s_io_priority_class"


def queries(window_seconds: float) -> dict[str, str]:
    """The PromQL of each field of `JobSeries`, over the last `window_seconds`."""
    window = f"[{max(1, int(window_seconds))}s]"
    by_job = "by (namespace, job_name)"
    requests_of = f'last_over_time(kube_pod_container_resource_requests{{resource="nvidia_com_gpu"}}{window})'
    pod_gpus = f"sum by (namespace, pod) (max by (namespace, pod, container) ({requests_of}))"
    pod_job = f'max by (namespace, pod, owner_name) (last_over_time(kube_pod_owner{{owner_kind="Job"}}{window}))'
    return {
        "created": f"max {by_job} (last_over_time(kube_job_created{window}))",
        "started": f"max {by_job} (last_over_time(kube_job_status_start_time{window}))",
        "completed": f"max {by_job} (last_over_time(kube_job_status_completion_time{window}))",
        "parallelism": f"max {by_job} (last_over_time(kube_job_spec_parallelism{window}))",
        # The job's label is owner_name here; renamed so that every field is keyed alike.
        "gpus_per_pod": (
            f"label_replace(max by (namespace, owner_name) ({pod_job} * on (namespace, pod) group_left {pod_gpus}), "
            '"job_name", "$1", "owner_name", "(.*)")'
        ),
        "priority": (
            f"max by (namespace, job_name, {PRIORITY_LABEL}) "
            f'(last_over_time(kube_job_labels{{{PRIORITY_LABEL}!=""}}{window}))'
        ),
    }


def values_by_job(answer: object) -> dict[JobKey, float]:
    """An instant vector's value per (namespace, job_name)."""
    found: dict[JobKey, float] = {}
    for index, item in enumerate(success_data(answer, "vector")):
        where = f"data.result[{index}]"
        metric = labels(mapping(item, where).get("metric"), f"{where}.metric")
        value = array(item.get("value"), f"{where}.value")
        if len(value) != 2 or "namespace" not in metric or "job_name" not in metric:
            raise SourceError(f"{where}: expected a value and the labels namespace and job_name")
        found[(metric["namespace"], metric["job_name"])] = finite_number(value[1], f"{where}.value[1]")
    return found


def labels_by_job(answer: object, label: str) -> dict[JobKey, str]:
    """An instant vector's `label` per (namespace, job_name)."""
    found: dict[JobKey, str] = {}
    for index, item in enumerate(success_data(answer, "vector")):
        metric = labels(mapping(item, f"data.result[{index}]").get("metric"), f"data.result[{index}].metric")
        if metric.get(label) and "namespace" in metric and "job_name" in metric:
            found[(metric["namespace"], metric["job_name"])] = metric[label]
    return found


def read_job_series(url: str, since: float, now: float, timeout: float = 60) -> JobSeries:
    """What Prometheus at `url` kept of kube-state-metrics' Jobs between `since` and `now`."""
    answers: dict[str, object] = {}
    with requests.Session() as http:
        for field, query in queries(now - since).items():
            try:
                response = http.get(
                    f"{url.rstrip('/')}/api/v1/query", params={"query": query, "time": f"{now:.3f}"}, timeout=timeout
                )
                response.raise_for_status()
                answers[field] = response.json()
            except requests.RequestException as problem:
                raise KonduktorError(
                    f"Prometheus at {url}: {problem}",
                    hint="give the URL of the Prometheus that scrapes kube-state-metrics",
                ) from problem
    try:
        return JobSeries(
            created=values_by_job(answers["created"]),
            started=values_by_job(answers["started"]),
            completed=values_by_job(answers["completed"]),
            parallelism=values_by_job(answers["parallelism"]),
            gpus_per_pod=values_by_job(answers["gpus_per_pod"]),
            priority=labels_by_job(answers["priority"], PRIORITY_LABEL),
        )
    except SourceError as problem:
        raise KonduktorError(f"Prometheus at {url} gave an unexpected answer: {problem}") from problem

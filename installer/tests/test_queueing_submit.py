"""`konduktor submit`'s changes to a job before it is sent (pure): the queue label, Kueue's sample Job with its
generateName, and the Workload Kueue would make of a job whose GPUs are limits only."""

from __future__ import annotations

from typing import Any

import pytest

from konduktor.errors import UsageError
from konduktor.queueing.explain import total_gpus
from konduktor.queueing.submit import (
    check_queue,
    default_queue,
    fill_in,
    parse_slice,
    shown_name,
    with_slices,
    workload_for,
)

# Kueue's sample Job as its site ships it (site/static/examples/jobs/sample-job.yaml): a generateName, no name.
SAMPLE_JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "generateName": "sample-job-",
        "namespace": "default",
        "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
    },
    "spec": {
        "parallelism": 3,
        "completions": 3,
        "suspend": True,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "dummy-job",
                        "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                        "args": ["entrypoint-tester", "hello", "world"],
                        "resources": {"requests": {"cpu": 1, "memory": "200Mi"}},
                    }
                ],
                "restartPolicy": "Never",
            }
        },
    },
}


def test_a_generated_name_is_shown_as_such_and_the_workload_is_made_of_it() -> None:
    job = fill_in(SAMPLE_JOB, "team-a", "default", None)
    assert job["metadata"]["namespace"] == "team-a"  # the namespace submit chose (-n before the file's)
    assert shown_name(job) == "sample-job-…"
    workload = workload_for(job)
    assert workload["metadata"]["name"] == "sample-job-…" and workload["spec"]["podSets"][0]["count"] == 3
    assert shown_name({"metadata": {"name": "train"}}) == "train"


def test_a_queue_label_naming_no_local_queue_is_refused_with_the_teams_queues() -> None:
    job = fill_in(SAMPLE_JOB, "team-a", "default", None)
    with pytest.raises(UsageError) as refused:
        check_queue(job, ["default", "research"])
    assert refused.value.message == (
        "kueue.x-k8s.io/queue-name: 'user-queue' names no LocalQueue in namespace team-a (its queues: default, "
        "research)"
    )
    assert refused.value.hint is not None and "fills in default" in refused.value.hint
    check_queue(fill_in({**SAMPLE_JOB, "metadata": {"generateName": "s-"}}, "team-a", "default", None), ["default"])


def test_kueues_older_queue_annotation_is_read_as_the_label() -> None:
    job = fill_in(
        {**SAMPLE_JOB, "metadata": {"name": "s", "annotations": {"kueue.x-k8s.io/queue-name": "main"}}},
        "team-a",
        "default",
        None,
    )
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "main"
    with pytest.raises(UsageError):
        check_queue(job, ["default"])


def test_the_default_queue_is_default_else_the_first() -> None:
    assert default_queue(["research", "default"]) == "default"
    assert default_queue(["research", "batch"]) == "batch"


def test_a_workload_of_gpus_given_as_limits_counts_them() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ddp", "namespace": "team-a"},
        "spec": {
            "parallelism": 2,
            "template": {"spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}},
        },
    }
    assert total_gpus(workload_for(job)) == 16


def test_a_slice_is_named_as_the_teams_quota_names_it_or_in_full() -> None:
    assert parse_slice("mig-1g.10gb") == ("nvidia.com/mig-1g.10gb", 1)
    assert parse_slice("nvidia.com/mig-3g.40gb:2") == ("nvidia.com/mig-3g.40gb", 2)
    assert parse_slice("mig-1g.10gb.me") == ("nvidia.com/mig-1g.10gb.me", 1)
    assert parse_slice("gpu.shared") == ("nvidia.com/gpu.shared", 1)
    for wrong, says in [
        ("gpu", "not a slice"),
        ("mig-big", "not a slice"),
        ("gpu.mps", "not a slice"),
        ("mig-1g.10gb:0", "'0' is not a count of slices"),
        ("mig-1g.10gb:x", "'x' is not a count of slices"),
        ("gpu.shared:2", "a container gets at most one shared GPU"),
    ]:
        with pytest.raises(UsageError) as refused:
            parse_slice(wrong)
        assert refused.value.message.startswith(f"--slice {wrong}: ") and says in refused.value.message


def test_a_slice_replaces_the_whole_gpus_of_each_container_that_asks_for_them() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "eval", "namespace": "team-a"},
        "spec": {
            "parallelism": 2,
            "template": {
                "spec": {
                    "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "1"}}}],
                    "containers": [
                        {"name": "eval", "resources": {"requests": {"nvidia.com/gpu": "8", "cpu": "4"}}},
                        {"name": "serve", "resources": {"limits": {"nvidia.com/gpu": 1}}},
                    ],
                }
            },
        },
    }
    sliced = with_slices(job, "nvidia.com/mig-1g.10gb", 2)
    eval_, serve = sliced["spec"]["template"]["spec"]["containers"]
    assert eval_["resources"] == {
        "requests": {"cpu": "4", "nvidia.com/mig-1g.10gb": "2"},
        "limits": {"nvidia.com/mig-1g.10gb": "2"},  # an extended resource needs its limit
    }
    assert serve["resources"] == {"limits": {"nvidia.com/mig-1g.10gb": "2"}}
    assert sliced["spec"]["template"]["spec"]["initContainers"] == job["spec"]["template"]["spec"]["initContainers"]
    assert total_gpus(workload_for(sliced)) == 0  # no whole GPU left
    assert job["spec"]["template"]["spec"]["containers"][1]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    with pytest.raises(UsageError) as refused:
        with_slices(SAMPLE_JOB, "nvidia.com/gpu.shared", 1)
    assert "asks for no GPU (nvidia.com/gpu): there is nothing to make a slice of" in refused.value.message

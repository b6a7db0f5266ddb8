"""`konduktor submit`'s pipeline without the CLI (konduktor.ops.submit): the file read with file:line errors, the
options checked before any cluster, and on the simulated cluster a dry run, a create and a job that can never fit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLE, Sim

from konduktor.config.load import load_config
from konduktor.errors import NeverFits, UsageError
from konduktor.kube.conditions import is_true
from konduktor.ops.submit import Submitted, line_of, load_job, prepared_job, submit_job
from konduktor.queueing.cluster import publish_capacity
from konduktor.quotas.sync import sync_quotas
from konduktor.sim.workloads import gpu_job
from konduktor.vocabulary import GPU_RESOURCE, KUEUE_API
from konduktor.waiting import wait_until

TEAM = "team-a"


def written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("kind: Job\nmetadata: {name: x\n", ":3: not YAML"),
        ("kind: Job\n---\nkind: Job\n", ": holds 2 documents; submit one job per file"),
        ("apiVersion: batch/v1\nmetadata: {name: x}\n", ":1: kind: missing"),
        ("apiVersion: batch/v1\nkind: Job\nmetadata: {labels: {}}\n", ":1: metadata.name: missing"),
    ],
)
def test_a_file_that_holds_no_one_job_is_refused_with_its_line(tmp_path: Path, text: str, complaint: str) -> None:
    path = written(tmp_path, text)
    with pytest.raises(UsageError) as refused:
        load_job(path)
    assert refused.value.message.startswith(f"{path}{complaint}")


def test_the_options_are_checked_before_the_file_is_read_and_a_slice_replaces_whole_gpus(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(UsageError, match="--priority soon: not a priority"):
        prepared_job(missing, priority="soon")
    with pytest.raises(UsageError, match=r"missing\.yaml: No such file"):
        prepared_job(missing, priority="urgent")
    path = written(tmp_path, yaml.safe_dump(gpu_job("a-sliced", TEAM, gpus=1)))
    [container] = prepared_job(path, slice_="mig-1g.10gb:2")["spec"]["template"]["spec"]["containers"]
    assert GPU_RESOURCE not in container["resources"]["requests"]
    assert container["resources"]["requests"]["nvidia.com/mig-1g.10gb"] == "2"
    assert prepared_job(path) == load_job(path)  # no --slice: the file's job as written


def test_line_of_finds_a_nested_key_or_the_deepest_one_there_is(tmp_path: Path) -> None:
    path = written(tmp_path, "kind: Job\nmetadata:\n  name: x\n  labels:\n    a: b\n")
    assert line_of(path, ("metadata", "labels", "a")) == 5
    assert line_of(path, ("metadata", "annotations", "a")) == 2
    assert line_of(tmp_path / "missing.yaml", ("kind",)) is None


@pytest.fixture(scope="module")
def teams(sim: Sim) -> Iterator[Sim]:
    """examples/config.yaml's teams and quotas (team-a: 10 H100 nodes' worth, one LocalQueue `default`)."""
    sync_quotas(sim.kube, load_config(EXAMPLE).config, prune=False, dry_run=False)
    wait_until(
        "team-a's ClusterQueue to be active", lambda: is_true(sim.kube.get(KUEUE_API, "ClusterQueue", TEAM), "Active")
    )
    publish_capacity(sim.kube)
    yield sim
    for job in sim.kube.list("batch/v1", "Job", TEAM):
        if job["metadata"]["name"].startswith("a-pipeline-"):
            sim.kube.delete("batch/v1", "Job", job["metadata"]["name"], TEAM)
    wait_until(
        "the jobs' pods to be gone",
        lambda: not [p for p in sim.kube.list("v1", "Pod", TEAM) if p["metadata"]["name"].startswith("a-pipeline-")],
        timeout=60,
    )


@pytest.mark.sim
def test_a_dry_run_then_a_create_fill_in_the_queue_and_priority(teams: Sim, tmp_path: Path) -> None:
    job = gpu_job("a-pipeline-one", "default", gpus=1, queue=None)
    path = written(tmp_path, yaml.safe_dump(job))
    said: list[str] = []
    warned: list[str] = []

    def submit(dry_run: bool) -> Submitted:
        return submit_job(
            teams.kube, path, load_job(path), namespace=TEAM, dry_run=dry_run, say=said.append, warn=warned.append
        )

    judged = submit(dry_run=True)
    assert judged == Submitted("Job", "a-pipeline-one", TEAM, "default", "standard", created=False)
    assert said == [f"{path}: metadata.namespace default: submitting in {TEAM} (-n)"] and warned == []
    assert teams.kube.get("batch/v1", "Job", "a-pipeline-one", TEAM) is None
    assert submit(dry_run=False) == Submitted("Job", "a-pipeline-one", TEAM, "default", "standard", created=True)
    labels = teams.kube.get("batch/v1", "Job", "a-pipeline-one", TEAM)["metadata"]["labels"]  # type: ignore[index]
    assert labels["kueue.x-k8s.io/queue-name"] == "default" and labels["kueue.x-k8s.io/priority-class"] == "standard"


@pytest.mark.sim
def test_a_job_that_can_never_fit_is_refused_and_not_created(teams: Sim, tmp_path: Path) -> None:
    path = written(tmp_path, yaml.safe_dump(gpu_job("a-pipeline-twelve", TEAM, gpus=12, queue=None)))
    with pytest.raises(NeverFits, match="asks 12 GPUs, but no h100 node has more than 10"):
        submit_job(teams.kube, path, load_job(path), dry_run=True, say=print, warn=print)
    assert teams.kube.get("batch/v1", "Job", "a-pipeline-twelve", TEAM) is None

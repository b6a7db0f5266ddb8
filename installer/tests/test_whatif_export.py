"""`trace export` on the simulated cluster: GPU jobs run through Kueue come back as a trace, from the Workloads Kueue
keeps, and a job deleted with its Workload comes back from Prometheus's copy of kube-state-metrics' series.

kube-state-metrics is not served by this machine's Go module proxy, so the series it would have exposed for these
Jobs and pods are written from the objects themselves, with its metric and label names, and backfilled into the
real Prometheus, which answers the export's queries."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Sim
from support import queue_objects

from konduktor.cli.main import main
from konduktor.gpu.pod import pod_gpus
from konduktor.kube.client import Kube
from konduktor.kube.conditions import is_true
from konduktor.kube.timestamps import parse_time
from konduktor.sim.workloads import gpu_job, workload_of
from konduktor.vocabulary import KUEUE_API
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
NAMESPACE = "export-a"


@pytest.fixture
def team(sim: Sim) -> Iterator[Kube]:
    sim.kube.apply_all(queue_objects(NAMESPACE, gpus=16))
    wait_until(
        "the ClusterQueue to be active",
        lambda: is_true(sim.kube.get(KUEUE_API, "ClusterQueue", NAMESPACE), "Active"),
    )
    yield sim.kube
    sim.kube.delete("v1", "Namespace", NAMESPACE)
    sim.kube.delete(KUEUE_API, "ClusterQueue", NAMESPACE)


def seconds(timestamp: str | None) -> float:
    value = parse_time(timestamp)
    assert value is not None
    return value


def kube_state_series(kube: Kube, job: dict[str, Any]) -> str:
    """The samples kube-state-metrics would have exposed for a finished Job and its pods, as two scrapes: one when
    the Job was created, one just after it completed (OpenMetrics text, without the family headers)."""
    meta, status = job["metadata"], job["status"]
    name, namespace = meta["name"], meta["namespace"]
    created, done = seconds(meta["creationTimestamp"]), seconds(status["completionTime"]) + 1
    of_job = f'namespace="{namespace}",job_name="{name}"'
    lines = []
    for at in (created, done):
        lines += [
            f"kube_job_created{{{of_job}}} {created} {at}",
            f"kube_job_spec_parallelism{{{of_job}}} {job['spec'].get('parallelism', 1)} {at}",
        ]
    lines += [
        f"kube_job_status_start_time{{{of_job}}} {seconds(status['startTime'])} {done}",
        f"kube_job_status_completion_time{{{of_job}}} {seconds(status['completionTime'])} {done}",
    ]
    for pod in kube.list("v1", "Pod", namespace, label_selector=f"job-name={name}"):
        of_pod = f'namespace="{namespace}",pod="{pod["metadata"]["name"]}"'
        owner = f'owner_kind="Job",owner_name="{name}",owner_is_controller="true"'
        lines.append(f"kube_pod_owner{{{of_pod},{owner}}} 1 {done}")
        gpus = pod_gpus(pod["spec"])
        container = pod["spec"]["containers"][0]["name"]
        lines.append(
            f'kube_pod_container_resource_requests{{{of_pod},container="{container}",'
            f'resource="nvidia_com_gpu",unit="integer"}} {gpus} {done}'
        )
    return "\n".join(lines)


def openmetrics(samples: list[str]) -> str:
    """Samples grouped into their metric families, each with its TYPE line, as promtool's backfill wants them."""
    families: dict[str, list[str]] = {}
    for line in samples:
        families.setdefault(line.split("{", 1)[0], []).append(line)
    text = "".join(f"# TYPE {name} gauge\n" + "\n".join(lines) + "\n" for name, lines in sorted(families.items()))
    return text + "# EOF\n"


def test_a_trace_is_exported_from_the_workloads_and_a_deleted_job_from_prometheus(
    sim: Sim, team: Kube, prometheus: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    team.create(gpu_job("kept", NAMESPACE, gpus=8, run_for="2s"))
    team.create(gpu_job("gone", NAMESPACE, gpus=4, pods=2, run_for="2s"))
    for name in ("kept", "gone"):
        wait_until(
            f"Kueue to mark {name}'s Workload finished",
            lambda n=name: is_true(workload_of(team, NAMESPACE, n), "Finished"),
            timeout=120,
        )
    kept = workload_of(team, NAMESPACE, "kept")
    assert kept is not None
    jobs = {name: team.get("batch/v1", "Job", name, NAMESPACE) or {} for name in ("kept", "gone")}
    samples = [line for job in jobs.values() for line in kube_state_series(team, job).splitlines()]
    url = prometheus(openmetrics(samples))
    # The job goes, and Kueue's Workload with it (owned by the Job): only Prometheus still knows it.
    team.delete("batch/v1", "Job", "gone", NAMESPACE)
    wait_until("the deleted job's Workload to go", lambda: workload_of(team, NAMESPACE, "gone") is None, timeout=60)

    out = tmp_path / "trace.csv"
    args = ["trace", "export", "--since", "1h", "--kubeconfig", str(sim.given_kubeconfig), "-o", str(out)]
    assert main(args) == 0
    assert "only in Prometheus" not in capsys.readouterr().err
    without = {row["name"]: row for row in csv.DictReader(out.open())}
    assert f"{NAMESPACE}/kept" in without and f"{NAMESPACE}/gone" not in without

    assert main([*args, "--prometheus", url]) == 0
    assert "(1 of them only in Prometheus)" in capsys.readouterr().err
    rows = {row["name"]: row for row in csv.DictReader(out.open())}
    kept_row, gone_row = rows[f"{NAMESPACE}/kept"], rows[f"{NAMESPACE}/gone"]
    assert (kept_row["team"], kept_row["pods"], kept_row["gpus_per_pod"]) == (NAMESPACE, "1", "8")
    assert (gone_row["team"], gone_row["pods"], gone_row["gpus_per_pod"]) == (NAMESPACE, "2", "4")
    # The Workload's duration runs from its admission, the series' from the Job's start (when Kueue resumed it):
    # the same run, seen a moment apart; each at least the 2 s the pods ran.
    gone = jobs["gone"]
    assert float(gone_row["duration"]) == pytest.approx(
        seconds(gone["status"]["completionTime"]) - seconds(gone["status"]["startTime"]), abs=0.001
    )
    assert float(kept_row["duration"]) >= 2 and float(gone_row["duration"]) >= 2
    # Both on the trace's clock: a Workload's row is submitted when Kueue created the Workload (the time Kueue queues
    # it by), a row from Prometheus when its Job was created. (Kueue creates a Workload just after its Job, sometimes
    # in the next wall second: the Jobs' own times are not the kept row's.)
    submitted = {
        "kept": seconds(kept["metadata"]["creationTimestamp"]),
        "gone": seconds(gone["metadata"]["creationTimestamp"]),
    }
    assert float(gone_row["submit"]) - float(kept_row["submit"]) == pytest.approx(
        submitted["gone"] - submitted["kept"], abs=0.002
    )

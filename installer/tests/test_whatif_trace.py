"""The what-if trace format (CSV and JSON Lines) and the Alibaba GPU trace importer: jobs read as documented,
every bad row reported at its file:line with exit 2."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE

from konduktor.cli.main import main
from konduktor.config.findings import ConfigError
from konduktor.config.load import load_config
from konduktor.errors import ExitCode
from konduktor.observability.metrics import Exporter, lookup
from konduktor.observability.promql import metric_names
from konduktor.whatif.alibaba import import_alibaba, team_of
from konduktor.whatif.export import JobSeries, job_name, jobs_from_series, jobs_from_workloads, merged, rebased
from konduktor.whatif.job_series import PRIORITY_LABEL, queries
from konduktor.whatif.run import load
from konduktor.whatif.trace import TraceJob, against, load_trace, parse_rows, write_csv

DATA = Path(__file__).parent / "data" / "whatif"


def written(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_trace_csv_reads_every_field_and_defaults(tmp_path: Path) -> None:
    path = written(
        tmp_path,
        "jobs.csv",
        "submit,duration,team,pods,gpus_per_pod,gpu_type,priority,name\n"
        "100,3600,team-a,2,4,h100,urgent,train\n"
        "# a comment\n"
        "40,60.5,team-b,,1,,,\n",
    )
    jobs = load_trace(path)
    # Sorted by submit time, made relative to the earliest; an unnamed job is named by its line.
    assert jobs == [
        TraceJob("job-4", 0.0, 60.5, "team-b", 1, 1, None, None),
        TraceJob("train", 60.0, 3600.0, "team-a", 2, 4, "h100", "urgent"),
    ]
    assert jobs[1].gpus == 8 and jobs[1].gpu_hours == 8.0


def test_trace_jsonl_and_iso_times(tmp_path: Path) -> None:
    path = written(
        tmp_path,
        "jobs.jsonl",
        '{"submit": "2026-05-01T10:00:00Z", "duration": 60, "team": "team-a", "gpus_per_pod": 2}\n'
        "\n"
        '{"submit": "2026-05-01T09:00:00+00:00", "duration": 30, "team": "team-b", "gpus_per_pod": 1, "name": "x"}\n',
    )
    jobs = load_trace(path)
    assert [(j.name, j.submit) for j in jobs] == [("x", 0.0), ("job-1", 3600.0)]


def test_trace_bad_rows_name_file_line_and_field(tmp_path: Path) -> None:
    path = written(
        tmp_path,
        "jobs.csv",
        "submit,duration,team,gpus_per_pod,name\n"
        "0,60,team-a,1,a\n"
        "x,60,team-a,1,b\n"
        "0,-5,team-a,1,c\n"
        "0,60,team-a,1.5,d\n"
        "0,60,,1,e\n"
        "0,60,team-a,1,a\n"
        "0,60,team-a\n",
    )
    with pytest.raises(ConfigError) as raised:
        load_trace(path)
    assert raised.value.exit_code == ExitCode.BAD_INPUT
    located = [finding.located(str(path)) for finding in raised.value.findings]
    assert located == [
        f"{path}:3: submit: 'x' is neither seconds nor an ISO-8601 time",
        f"{path}:4: duration: must be > 0 seconds, not -5",
        f"{path}:5: gpus_per_pod: must be a whole number >= 1, not 1.5",
        f"{path}:6: team: missing",
        f"{path}:7: name: 'a' is also on line 2",
        f"{path}:8: 3 cells, the header has 5",
    ]


def test_trace_header_and_jsonl_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"jobs.csv:1: header: unknown column 'gpus'; missing column 'gpus_per_pod'"):
        load_trace(written(tmp_path, "jobs.csv", "submit,duration,team,gpus\n0,1,a,1\n"))
    with pytest.raises(ConfigError) as raised:
        load_trace(written(tmp_path, "jobs.jsonl", '{"submit": 0}\n[1]\n{"submit": 0, "gpu": 1}\nnot json\n'))
    assert [f.line for f in raised.value.findings] == [1, 2, 3, 4]
    assert "unknown field 'gpu'" in raised.value.findings[2].message
    with pytest.raises(ConfigError, match="no jobs"):
        load_trace(written(tmp_path, "empty.csv", "submit,duration,team,gpus_per_pod\n"))


def test_trace_checked_against_the_config(tmp_path: Path) -> None:
    path = written(
        tmp_path,
        "jobs.csv",
        "submit,duration,team,gpus_per_pod,gpu_type,priority\n"
        "0,60,team-a,1,h100,urgent\n"
        "0,60,team-b,1,,\n"
        "0,60,team-z,1,a100,\n"
        "0,60,team-a,1,,high\n",
    )
    with pytest.raises(ConfigError) as raised:
        load(EXAMPLE, path)
    findings = raised.value.findings
    assert [(f.line, f.path) for f in findings] == [(4, ("team",)), (4, ("gpu_type",)), (5, ("priority",))]
    assert "team-a" in str(findings[0].hint) and "gpu-lab" not in str(findings[0].hint)
    good = written(tmp_path, "good.csv", "submit,duration,team,gpus_per_pod\n0,60,team-a,1\n")
    assert [j.team for j in load(EXAMPLE, good)[1]] == ["team-a"]


def test_every_kind_of_bad_row_is_reported_at_once(tmp_path: Path) -> None:
    """A bad duration and a team the config lacks, on different lines: one report names both, in line order."""
    path = written(
        tmp_path,
        "jobs.csv",
        "submit,duration,team,gpus_per_pod\n0,60,team-a,1\n0,60,nobody,1\n0,-5,team-a,1\n0,60,team-b,1\n",
    )
    with pytest.raises(ConfigError) as raised:
        load(EXAMPLE, path)
    assert [(f.line, f.path) for f in raised.value.findings] == [(3, ("team",)), (4, ("duration",))]


def test_whatif_command_exits_2_on_a_bad_trace_before_any_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = written(tmp_path, "jobs.csv", "submit,duration,team,gpus_per_pod\n0,60,nobody,1\n")
    assert main(["whatif", str(EXAMPLE), "--trace", str(path)]) == ExitCode.BAD_INPUT
    assert f"{path}:2: team: 'nobody' is neither a team nor a namespace of the config" in capsys.readouterr().err


def test_trace_csv_round_trip(tmp_path: Path) -> None:
    jobs = [TraceJob("a", 0.0, 90.0, "team-a", 2, 4, "h100", "urgent"), TraceJob("b", 1.5, 3.25, "team-b", 1, 1)]
    out = io.StringIO()
    write_csv(jobs, out)
    assert load_trace(written(tmp_path, "again.csv", out.getvalue())) == jobs


def test_alibaba_tasks_map_to_jobs_by_the_documented_rule() -> None:
    teams = ["team-a", "team-b"]
    imported = import_alibaba(DATA / "openb_pod_list_sample.csv", teams)
    assert imported.without_gpus == 1 and imported.never_ran == 1
    by_name = {job.name: job for job in imported.jobs}
    assert sorted(by_name) == ["sample-pod-0000", "sample-pod-0001", "sample-pod-0002", "sample-pod-0005"]
    assert by_name["sample-pod-0000"].submit == 0 and by_name["sample-pod-0000"].duration == 3600
    # GPU sharing (250 milli-GPU) keeps its quarter of a GPU for the replay to map to a slice; BE is opportunistic;
    # run time counts from scheduling.
    sharing = by_name["sample-pod-0001"]
    assert (sharing.gpus_per_pod, sharing.priority, sharing.submit, sharing.duration) == (1, "opportunistic", 200, 590)
    assert sharing.gpu_fraction == 0.25
    assert by_name["sample-pod-0000"].gpu_fraction is None and by_name["sample-pod-0002"].gpu_fraction is None
    assert (by_name["sample-pod-0002"].gpus_per_pod, by_name["sample-pod-0002"].gpu_type) == (8, None)
    assert by_name["sample-pod-0005"].duration == 300  # failed tasks held their GPU until deleted
    # The team split is a stable hash of the name.
    assert all(job.team == team_of(job.name, teams) for job in imported.jobs)
    assert team_of("sample-pod-0000", teams) == team_of("sample-pod-0000", teams)


def test_alibaba_bad_rows_exit_2_with_lines(tmp_path: Path) -> None:
    header = (DATA / "openb_pod_list_sample.csv").read_text().splitlines()[0]
    path = written(
        tmp_path, "bad.csv", f"{header}\np1,1,1,x,1000,,LS,Running,0,10,0\np2,1,1,1,1000,,XX,Running,0,10,0\n"
    )
    with pytest.raises(ConfigError) as raised:
        import_alibaba(path, ["team-a"])
    assert [(f.line, f.path) for f in raised.value.findings] == [(2, ("num_gpu",)), (3, ("qos",))]
    with pytest.raises(ConfigError, match="header must be"):
        import_alibaba(written(tmp_path, "other.csv", "a,b\n1,2\n"), ["team-a"])


def workload(
    name: str, created: str, admitted: str | None, finished: str | None, gpus: int = 4, count: int = 2
) -> dict[str, Any]:
    """A Workload as Kueue (v1beta2) keeps it for a Job: pod sets, priority, admission and conditions."""
    conditions = []
    if admitted:
        conditions.append({"type": "QuotaReserved", "status": "True", "lastTransitionTime": admitted})
        conditions.append({"type": "Admitted", "status": "True", "lastTransitionTime": admitted})
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded", "lastTransitionTime": finished})
    resources = {"nvidia.com/gpu": str(gpus), "cpu": "1"} if gpus else {"cpu": "1"}
    return {
        "metadata": {
            "name": f"job-{name}-1a2b3",
            "namespace": "team-a",
            "creationTimestamp": created,
            "ownerReferences": [{"kind": "Job", "name": name}],
        },
        "spec": {
            "priorityClassName": "urgent",
            "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": resources}}]}},
                }
            ],
        },
        "status": {
            "conditions": conditions,
            "admission": {"podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "h100"}}]},
        },
    }


def test_export_turns_finished_workloads_into_jobs() -> None:
    since = datetime(2026, 5, 1, tzinfo=UTC).timestamp()
    exported = rebased(
        jobs_from_workloads(
            [
                workload("late", "2026-05-02T10:00:00Z", "2026-05-02T10:30:00Z", "2026-05-02T12:30:00Z"),
                workload(
                    "early", "2026-05-02T09:00:00Z", "2026-05-02T09:00:05Z", "2026-05-02T09:10:05Z", gpus=1, count=1
                ),
                workload("running", "2026-05-02T09:00:00Z", "2026-05-02T09:00:05Z", None),
                workload("cpu", "2026-05-02T09:00:00Z", "2026-05-02T09:00:05Z", "2026-05-02T09:10:05Z", gpus=0),
                workload("old", "2026-04-01T09:00:00Z", "2026-04-01T09:00:05Z", "2026-04-01T09:10:05Z"),
            ],
            since,
        )
    )
    assert exported.jobs == [
        TraceJob("team-a/early", 0.0, 600.0, "team-a", 1, 1, "h100", "urgent"),
        TraceJob("team-a/late", 3600.0, 7200.0, "team-a", 2, 4, "h100", "urgent"),
    ]
    assert (exported.unfinished, exported.without_gpus, exported.before) == (1, 1, 1)
    # Written as a trace, it reads back, and its namespaces are the config's teams.
    out = io.StringIO()
    write_csv(exported.jobs, out)
    jobs = parse_rows("exported.csv", enumerate(csv.DictReader(out.getvalue().splitlines()), start=2))
    checked, findings = against(jobs, load_config(EXAMPLE).config)
    assert findings == [] and [j.team for j in checked] == ["team-a"] * 2


def test_export_adds_the_jobs_only_kube_state_metrics_series_still_show() -> None:
    """A Job whose Workload is gone is taken from its series; one the Workloads have is not counted twice."""
    since = datetime(2026, 5, 1, tzinfo=UTC).timestamp()
    at = datetime(2026, 5, 2, 9, tzinfo=UTC).timestamp()
    workloads = [workload("kept", "2026-05-02T09:00:00Z", "2026-05-02T09:00:05Z", "2026-05-02T09:10:05Z")]
    keys = [("team-a", "kept"), ("team-b", "gone"), ("team-b", "failed"), ("team-b", "cpu"), ("team-b", "old")]
    series = JobSeries(
        created={("team-a", "kept"): at, ("team-b", "gone"): at + 60, ("team-b", "failed"): at,
                 ("team-b", "cpu"): at, ("team-b", "old"): since - 1},
        started=dict.fromkeys(keys, at + 120),
        completed={k: at + 1920 for k in keys if k[1] != "failed"},
        parallelism={("team-b", "gone"): 2},
        gpus_per_pod={k: 8 for k in keys if k[1] != "cpu"},
        priority={("team-b", "gone"): "urgent"},
    )  # fmt: skip
    known = {job_name(w) for w in workloads}
    assert known == {"team-a/kept"}
    from_series = jobs_from_series(series, since, known)
    assert from_series.jobs == [TraceJob("team-b/gone", at + 60, 1800.0, "team-b", 2, 8, None, "urgent")]
    assert (from_series.unfinished, from_series.without_gpus, from_series.before) == (1, 1, 1)
    both = rebased(merged(jobs_from_workloads(workloads, since), from_series))
    assert [(j.name, j.submit) for j in both.jobs] == [("team-a/kept", 0.0), ("team-b/gone", 60.0)]
    assert both.from_prometheus == 1


def test_the_export_reads_kube_state_metrics_series_the_inventory_knows() -> None:
    """Every series `trace export --prometheus` reads is kube-state-metrics' as the pinned version names it, and the
    one that needs a label allowlisted is served by the umbrella's values (test_umbrella checks the allowlist)."""
    read = set().union(*(metric_names(query) for query in queries(14 * 86400).values()))
    assert read == {
        "kube_job_created",
        "kube_job_status_start_time",
        "kube_job_status_completion_time",
        "kube_job_spec_parallelism",
        "kube_job_labels",
        "kube_pod_owner",
        "kube_pod_container_resource_requests",
    }
    for name in read:
        known = lookup(name)
        assert known is not None and known.exporter is Exporter.KUBE_STATE_METRICS, name
    assert PRIORITY_LABEL in (lookup("kube_job_labels") or pytest.fail()).labels

"""Giving back the quota of admitted workloads whose pods admission refuses: the pure decision
(konduktor.health.refused). On the simulated cluster: test_tenancy.py."""

from __future__ import annotations

from typing import Any

from konduktor.health.refused import (
    GiveBack,
    RefusedCreate,
    admission_refusal,
    decide_give_back,
    event_count,
    event_time,
)
from konduktor.kube.timestamps import parse_time

ADMITTED_AT = "2026-11-26T10:00:00Z"
PSA = (
    'Error creating: pods "train-x7k2p" is forbidden: violates PodSecurity "restricted:latest": '
    'runAsNonRoot != true (pod or container "train" must set securityContext.runAsNonRoot=true)'
)
VAP = (
    "Error creating: pods \"train-9q2ls\" is forbidden: ValidatingAdmissionPolicy 'konduktor-security-profile' "
    "with binding 'konduktor-security-profile' denied request: this pod breaks the team namespace's security "
    "profile gpu: privileged (train)"
)


def workload(name: str = "job-train-1", *, reserved: bool = True, active: bool = True, **extra: Any) -> dict[str, Any]:
    conditions = [
        {"type": "QuotaReserved", "status": "True" if reserved else "False", "lastTransitionTime": ADMITTED_AT}
    ]
    conditions += [{"type": kind, "status": "True"} for kind in extra.get("true", ())]
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1", "controller": True}
            ],
        },
        "spec": {"active": active},
        "status": {"conditions": conditions},
    }


def refused(count: int, at: str = "2026-11-26T10:00:05Z", name: str = "job-train-1") -> RefusedCreate:
    return RefusedCreate("team-a", name, "violates PodSecurity ...", count, parse_time(at))


def test_only_admission_refusals_count_and_policies_read_as_why_shows_them() -> None:
    assert admission_refusal(PSA) == PSA.split("is forbidden: ")[1]
    assert admission_refusal(VAP) == (
        "policy konduktor-security-profile: this pod breaks the team namespace's security profile gpu: "
        "privileged (train)"
    )
    webhook = 'Error creating: pods "a" is forbidden: admission webhook "x.example" denied the request: no'
    assert admission_refusal(webhook) is not None
    quota = (
        'Error creating: pods "a" is forbidden: exceeded quota: compute, requested: cpu=1, used: cpu=4, limited: cpu=4'
    )
    assert admission_refusal(quota) is None
    assert admission_refusal("Error creating: Internal error occurred: etcdserver: request timed out") is None


def test_event_count_and_time_read_both_event_apis() -> None:
    legacy = {"count": 4, "lastTimestamp": "2026-11-26T10:00:09Z"}
    series = {
        "series": {"count": 7, "lastObservedTime": "2026-11-26T10:01:00.000000Z"},
        "eventTime": "2026-11-26T10:00:00.000000Z",
    }
    assert (event_count(legacy), event_count(series), event_count({})) == (4, 7, 1)
    assert event_time(legacy) == parse_time("2026-11-26T10:00:09Z")
    assert event_time(series) == parse_time("2026-11-26T10:01:00Z")


def test_a_workload_holding_quota_gives_it_back_after_the_threshold_of_refusals() -> None:
    assert decide_give_back([workload()], [refused(2)]) == []
    [action] = decide_give_back([workload()], [refused(2), refused(1, at="2026-11-26T10:00:30Z")])
    assert action == GiveBack(
        "team-a",
        "job-train-1",
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1"},
        "violates PodSecurity ...",
        3,
    )
    assert action.message.startswith("admitted, but its pods are refused: violates PodSecurity ...")


def test_refusals_before_the_reservation_and_of_other_workloads_do_not_count() -> None:
    before = refused(10, at="2026-11-26T09:59:00Z")  # the job was reactivated after a fix: a fresh start
    other = refused(10, name="job-other-1")
    assert decide_give_back([workload()], [before, other]) == []


def test_workloads_not_holding_quota_are_left_alone() -> None:
    many = [refused(10)]
    assert decide_give_back([workload(reserved=False)], many) == []
    assert decide_give_back([workload(active=False)], many) == []  # already deactivated (by us, or someone)
    assert decide_give_back([workload(true=("Finished",))], many) == []

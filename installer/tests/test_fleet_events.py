"""The fleet-events relay (health/fleet_events.py): on a MultiKueue manager, the Events a worker's health controller
writes to a job's owner there are written once on the manager's job, naming the worker. The whole path across a
simulated fleet is in test_multikueue_sim.py; here one pass against a real API server, standing for both the
manager and a worker."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Sim

from konduktor.health.fleet_events import owner_events, relay_pass, relayed_event
from konduktor.kube.client import Kube
from konduktor.sim.workloads import gpu_job
from konduktor.vocabulary import KUBECONFIG_KEY, SYSTEM_NAMESPACE, TEAM_LABEL, fleet_events_secret
from konduktor.waiting import wait_until

NAMESPACE = "fleet-events-team"
JOB_UID = "0d3c6e2a-5a0b-4b1f-9a51-8b3c2f1e7d10"


def worker_event(reason: str = "RequeuedForNodeHealth", source: str = "konduktor-health") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "train.18a1", "namespace": NAMESPACE, "uid": "e0f1"},
        "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "namespace": NAMESPACE},
        "reason": reason,
        "message": "GPU node gpu-3 was quarantined at 2026-11-27T15:00:00Z: Xid 79, GPU has fallen off the bus.",
        "type": "Warning",
        "source": {"component": source},
        "firstTimestamp": "2026-11-27T15:00:01Z",
        "lastTimestamp": "2026-11-27T15:00:01Z",
    }


def test_a_relayed_event_names_the_worker_and_the_managers_own_object() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": NAMESPACE, "uid": JOB_UID},
    }
    event = relayed_event("west", worker_event(), job, "relay-0")
    assert event["involvedObject"] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "namespace": NAMESPACE,
        "uid": JOB_UID,  # the manager's job, so that `kubectl describe job` on the manager shows it
    }
    assert event["metadata"] == {"name": "train.west.e0f1", "namespace": NAMESPACE}  # one per worker Event
    assert event["message"].startswith("On worker cluster west: GPU node gpu-3 was quarantined")
    assert (event["reason"], event["type"], event["firstTimestamp"]) == (
        "RequeuedForNodeHealth",
        "Warning",
        "2026-11-27T15:00:01Z",
    )
    assert event["source"] == {"component": "konduktor-fleet-events"}


def test_only_the_health_controllers_events_to_owners_are_relayed() -> None:
    kept = [worker_event(reason) for reason in ("RequeuedForNodeHealth", "NodeQuarantined")]
    dropped = [worker_event("GPUHealthy"), worker_event("FailedCreate")]
    assert owner_events([*kept, *dropped]) == kept


@pytest.fixture
def manager_and_worker(sim: Sim) -> Iterator[Kube]:
    """The session cluster as both: a team namespace with a job, and the relay's Secret for worker `self` holding
    this cluster's own kubeconfig."""
    kube = sim.kube
    made_system = kube.get("v1", "Namespace", SYSTEM_NAMESPACE) is None
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {TEAM_LABEL: "x"}}})
    if made_system:
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": fleet_events_secret("self"), "namespace": SYSTEM_NAMESPACE},
        "data": {KUBECONFIG_KEY: base64.b64encode(sim.kubeconfig.read_bytes()).decode()},
    }
    kube.apply(secret)
    try:
        yield kube
    finally:
        kube.delete("v1", "Secret", fleet_events_secret("self"), SYSTEM_NAMESPACE)
        made = [NAMESPACE, SYSTEM_NAMESPACE] if made_system else [NAMESPACE]
        for namespace in made:
            kube.delete("v1", "Namespace", namespace)
        # Gone, not terminating, before the next test: a later `up` creates konduktor-system again.
        wait_until("the namespaces to go", lambda: all(kube.get("v1", "Namespace", n) is None for n in made), 120)


@pytest.mark.sim
def test_a_pass_writes_each_owner_event_once_and_names_a_worker_it_cannot_read(manager_and_worker: Kube) -> None:
    kube = manager_and_worker
    job = kube.create(gpu_job("train", NAMESPACE, gpus=1, queue=None))
    kube.create(worker_event())
    kube.create({**worker_event("GPUHealthy"), "metadata": {"name": "train.18a2", "namespace": NAMESPACE}})

    first = relay_pass(kube, ["self", "gone"], "relay-0")
    assert first.relayed == 1
    assert "konduktor-fleet-events-gone" in first.unreadable["gone"]  # no Secret for it: named, the other still read
    [relayed] = [
        e for e in kube.list("v1", "Event", NAMESPACE) if e["source"].get("component") == "konduktor-fleet-events"
    ]
    assert relayed["involvedObject"]["uid"] == job["metadata"]["uid"]
    assert relayed["message"].startswith("On worker cluster self: GPU node gpu-3")
    # A restarted relay finds it there and writes nothing again.
    restarted = relay_pass(kube, ["self"], "relay-1")
    assert restarted.relayed == 0
    # A running relay passes over what its last pass handled, without asking the manager: an Event it wrote and
    # someone deleted since stays deleted, until a restart.
    kube.delete("v1", "Event", relayed["metadata"]["name"], NAMESPACE)
    assert relay_pass(kube, ["self"], "relay-1", restarted.handled).relayed == 0
    assert relay_pass(kube, ["self"], "relay-1").relayed == 1

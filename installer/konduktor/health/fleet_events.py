"""The fleet-events relay, on a MultiKueue manager: a job's owner hears of a GPU fault on the worker that ran it.

A worker's health controller tells the owner of a job hit by a quarantine with an Event on the job and its Workload
there, on the worker's copy; MultiKueue copies no Events back, and team members read only the manager
(docs/multicluster.md#health-across-clusters). Each pass lists the health controller's owner Events in the team
namespaces of each worker, with an identity that may only read Events there, and writes each one once on the
manager's object of the same kind, namespace and name (MultiKueue gives a job and its Workload the same names on
every cluster), saying which worker.

A relayed Event's name comes from the worker Event's uid, so a restarted relay finds it on the manager (409) and
writes nothing again. A running relay passes over the Events its last pass handled, making no request on the
manager for them. Events live an hour on the API server (kube-apiserver --event-ttl), which bounds what a pass reads
and what it remembers.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from konduktor.errors import KonduktorError
from konduktor.health.actuator import COMPONENT as HEALTH_COMPONENT
from konduktor.health.affected import (
    NODE_FAULT_REASON,
    REQUEUED_REASON,
    WOULD_QUARANTINE_REASON,
    WOULD_REQUEUE_REASON,
)
from konduktor.kube.client import ApiError, Kube
from konduktor.vocabulary import KUBECONFIG_KEY, SYSTEM_NAMESPACE, TEAM_LABEL, fleet_events_secret

COMPONENT = "konduktor-fleet-events"
# The health controller's Events to a job's owner (health/affected.py); its Events about nodes stay on the worker.
RELAYED_REASONS = frozenset({REQUEUED_REASON, WOULD_REQUEUE_REASON, NODE_FAULT_REASON, WOULD_QUARANTINE_REASON})


def relayed_event(worker: str, event: Mapping[str, Any], target: Mapping[str, Any], instance: str) -> dict[str, Any]:
    """The manager's Event about `target`, its object of the kind, namespace and name the worker's `event` is about:
    the same reason, type and times, its message prefixed with the worker's name."""
    meta = target["metadata"]
    involved = {
        "apiVersion": target["apiVersion"],
        "kind": target["kind"],
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
    }
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{worker}.{event['metadata']['uid']}", "namespace": meta["namespace"]},
        "involvedObject": involved,
        "reason": event["reason"],
        "message": f"On worker cluster {worker}: {event.get('message', '')}",
        "type": event.get("type") or "Warning",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": event.get("firstTimestamp") or event.get("lastTimestamp"),
        "lastTimestamp": event.get("lastTimestamp") or event.get("firstTimestamp"),
        "count": 1,
    }


def owner_events(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The health controller's Events to job owners among `events`."""
    return [e for e in events if e.get("reason") in RELAYED_REASONS and e.get("involvedObject", {}).get("name")]


@dataclass
class RelayPass:
    """What one pass did: Events written on the manager, the workers it could not read (name -> why), and the uids
    of the worker Events it handled (now on the manager, or about an object the manager does not have), which the
    next pass passes over."""

    relayed: int = 0
    unreadable: dict[str, str] = field(default_factory=dict)
    handled: frozenset[str] = frozenset()


def relay_pass(
    manager: Kube, workers: Sequence[str], instance: str, handled: frozenset[str] = frozenset()
) -> RelayPass:
    """One pass over every worker: each owner Event not yet on the manager written there, except those `handled`
    by the pass before. A worker that cannot be read (unreachable, its Secret missing) is reported and the others
    are still read."""
    namespaces = sorted(ns["metadata"]["name"] for ns in manager.list("v1", "Namespace", label_selector=TEAM_LABEL))
    result = RelayPass()
    now_handled: set[str] = set()  # only Events still listed: what is remembered expires with them
    for worker in workers:
        try:
            with (
                tempfile.TemporaryDirectory(prefix="fleet-events-") as directory,
                worker_client(manager, worker, Path(directory)) as kube,
            ):
                events = worker_events(kube, namespaces)
        except (KonduktorError, LookupError) as problem:
            result.unreadable[worker] = str(problem)
            continue
        for event in owner_events(events):
            uid = event["metadata"]["uid"]
            if uid not in handled:
                result.relayed += relay(manager, worker, event, instance)
            now_handled.add(uid)
    result.handled = frozenset(now_handled)
    return result


def worker_client(manager: Kube, worker: str, directory: Path) -> Kube:
    """A client of the worker with the relay's kubeconfig for it, from its Secret on the manager (written by `up`)."""
    secret = manager.get("v1", "Secret", fleet_events_secret(worker), SYSTEM_NAMESPACE)
    if secret is None or KUBECONFIG_KEY not in secret.get("data", {}):
        raise LookupError(f"no Secret {SYSTEM_NAMESPACE}/{fleet_events_secret(worker)} with its kubeconfig")
    path = directory / f"{worker}.kubeconfig"
    path.write_bytes(base64.b64decode(secret["data"][KUBECONFIG_KEY]))
    return Kube(path, timeout=10)


def worker_events(kube: Kube, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The health controller's Events in the team namespaces of a worker. A namespace the relay may not read there
    (403: a team not dispatched to that worker has no binding there) is passed over; anything else is raised."""
    found = []
    for namespace in namespaces:
        try:
            found += kube.list("v1", "Event", namespace, field_selector=f"source={HEALTH_COMPONENT}")
        except ApiError as problem:
            if problem.status != 403:
                raise
    return found


def relay(manager: Kube, worker: str, event: Mapping[str, Any], instance: str) -> int:
    """Writes one worker Event on the manager's object; 1 when written, 0 when that object is not on the manager or
    the Event is there already."""
    involved = event["involvedObject"]
    target = manager.get(involved["apiVersion"], involved["kind"], involved["name"], event["metadata"]["namespace"])
    if target is None:
        return 0
    target.setdefault("apiVersion", involved["apiVersion"])
    target.setdefault("kind", involved["kind"])
    try:
        manager.create(relayed_event(worker, event, target, instance))
    except ApiError as problem:
        if problem.status == 409:
            return 0
        raise
    return 1

"""What `konduktor-install nodes` and `status` read of GPU health (every GPU node's health and next step, the fleet
breaker, the controller's mode and leader), and the operator's reset of the breaker.

The judgements are pure (`health_view`, `breaker`); this module reads the cluster for them and makes the reset's
writes: the trip removed from the controller's Lease, the reset's time stamped on it (quarantines before it no
longer count against the window), and an Event on the Lease saying who reset it and why. The running leader sees
the change at its next Lease renewal (every third of `lease_seconds`) and quarantines at once the nodes the breaker
held back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from konduktor.errors import UsageError
from konduktor.health.breaker import (
    BREAKER_ANNOTATION,
    BREAKER_RESET_ANNOTATION,
    BreakerView,
    ControllerView,
    breaker_view,
    controller_view,
)
from konduktor.health.decide import NodeState
from konduktor.health.health_view import NodeHealth, health_view
from konduktor.health.leader import LEASE_API, LEASE_NAME
from konduktor.health.node_reading import gpu_node_state
from konduktor.health.node_writes import EVENT_NAMESPACE, object_event
from konduktor.health.quarantine import COMPONENT
from konduktor.health.release import whoami
from konduktor.health.settings import HealthSettings
from konduktor.health.triage_sources import deployed_settings
from konduktor.health.workloads import gpu_pods_on
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.timestamps import format_time
from konduktor.vocabulary import HEALTH_TAINT_KEY, SYSTEM_NAMESPACE

BREAKER_RESET = "BreakerReset"  # the reset Event's reason


@dataclass(frozen=True)
class HealthReport:
    nodes: list[NodeHealth]
    breaker: BreakerView
    controller: ControllerView

    def document(self) -> dict[str, Any]:
        """`nodes -o json`: the nodes, the breaker and the controller."""
        return {
            "nodes": [view.row() for view in self.nodes],
            "breaker": self.breaker.row(),
            "controller": self.controller.row(),
        }


def _lease(kube: Kube, namespace: str) -> dict[str, Any] | None:
    try:
        return kube.get(LEASE_API, "Lease", LEASE_NAME, namespace)
    except ApiError as problem:
        if problem.status == 403:  # not ours to read: no leader and no trip to show
            return None
        raise


def _states(nodes: list[dict[str, Any]], settings: HealthSettings) -> dict[str, NodeState]:
    found = ((node["metadata"]["name"], gpu_node_state(node, settings)) for node in nodes)
    return {name: state for name, state in found if state is not None}


def read_health(kube: Kube, jobs_namespace: str, namespace: str = SYSTEM_NAMESPACE) -> HealthReport:
    """The GPU nodes with their next steps, the breaker and the controller, judged with the deployed settings (the
    defaults where konduktor-core is not installed). `jobs_namespace` holds the burn-in Jobs."""
    deployed = deployed_settings(kube, namespace)
    settings = deployed or HealthSettings()
    nodes = kube.list("v1", "Node")
    # Only Warning Events about Nodes: a quarantine is one, and the rest need not cross the network.
    events = kube.list("v1", "Event", EVENT_NAMESPACE, field_selector="involvedObject.kind=Node,type=Warning")
    jobs = kube.list("batch/v1", "Job", jobs_namespace) if kube.get("v1", "Namespace", jobs_namespace) else []
    lease = _lease(kube, namespace)
    now = time.time()
    states = _states(nodes, settings)
    breaker = breaker_view(states, settings, _annotations(lease), now)
    # The GPU pods still on the nodes out of service: a burn-in waits for them. One request per such node.
    skip = (settings.requalification.namespace, jobs_namespace)
    out = sorted(name for name, state in states.items() if any(t.key == HEALTH_TAINT_KEY for t in state.taints))
    busy = {name: gpu_pods_on(kube, name, skip) for name in out}
    views = health_view(nodes, events, jobs, settings, breaker=breaker, busy=busy, now=now)
    return HealthReport(views, breaker, controller_view(deployed, lease, now))


def _annotations(lease: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(((lease or {}).get("metadata") or {}).get("annotations") or {})


def reset_breaker(kube: Kube, reason: str, say: Callable[[str], None], namespace: str = SYSTEM_NAMESPACE) -> bool:
    """Reset a tripped breaker: remove the trip from the Lease, stamp the reset, record who and why in an Event on
    the Lease. False when it was not tripped (nothing is written)."""
    if not reason.strip():
        raise UsageError("--reason must say why the breaker is reset", hint="e.g. --reason 'rack 12 PSU replaced'")
    lease = _lease(kube, namespace)
    settings = deployed_settings(kube, namespace) or HealthSettings()
    now = time.time()
    view = breaker_view(_states(kube.list("v1", "Node"), settings), settings, _annotations(lease), now)
    if lease is None or not view.tripped:
        where = f"Lease {namespace}/{LEASE_NAME}"
        found = "does not exist" if lease is None else f"records no trip ({view.describe()})"
        say(f"breaker: not tripped: the {where} {found}; nothing to reset")
        return False
    patch = {"metadata": {"annotations": {BREAKER_ANNOTATION: None, BREAKER_RESET_ANNOTATION: format_time(now)}}}
    kube.patch(LEASE_API, "Lease", LEASE_NAME, patch, namespace)
    counted = f" ({', '.join(view.counted)})" if view.counted else ""
    message = (
        f"fleet breaker reset by {whoami(kube)}: {reason.strip()}. It had tripped at {view.tripped_since} with "
        f"{view.quarantines} of {view.limit} quarantines in the window{counted}; those no longer count, and the "
        "faults it held back are quarantined now"
    )
    involved = {
        "apiVersion": LEASE_API,
        "kind": "Lease",
        "name": LEASE_NAME,
        "namespace": namespace,
        "uid": lease["metadata"].get("uid", ""),
    }
    kube.create(object_event(involved, namespace, "Normal", BREAKER_RESET, message, COMPONENT, COMPONENT, now))
    say(f"breaker: reset (Event {BREAKER_RESET} on Lease {namespace}/{LEASE_NAME}); the leader resumes within seconds")
    return True

"""The manual quarantine: a burn-in's FAIL nodes quarantined on an operator's word (`konduktor-install burnin
--quarantine`, `up` with `burnin.quarantine`), and the culprits of a job's triage (`triage --quarantine`).

The writes are planned by the controller's own `plan_nodes` (without requalification: that is the controller's
to start, after its cooldown) and made by its node writes (`node_writes`): the same taint, annotations, condition
and Events as an unattended quarantine, so the controller later treats these quarantines as its own and releases
them through requalification.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from konduktor.burnin.results import NodeVerdict
from konduktor.health.breaker import BREAKER_ANNOTATION, BREAKER_RESET_ANNOTATION
from konduktor.health.classify import Finding
from konduktor.health.decide import (
    CONDITION_TYPE,
    BreakerState,
    Plan,
    RecordEvent,
    SetCondition,
    StartRequalification,
    UpdateNode,
    plan_nodes,
    restore_breaker,
)
from konduktor.health.leader import LEASE_API, LEASE_NAME
from konduktor.health.node_reading import gpu_node_state, node_state
from konduktor.health.node_writes import make_writes
from konduktor.health.settings import BreakerSettings, HealthSettings
from konduktor.kube.client import Kube
from konduktor.kube.timestamps import parse_time
from konduktor.vocabulary import SYSTEM_NAMESPACE

# Who made the writes, in the Events: the installer, not the controller's pod.
COMPONENT = "konduktor-install"


def quarantine_plan(verdicts: Sequence[NodeVerdict], nodes: Sequence[Mapping[str, Any]], now: float) -> Plan:
    """The health controller's writes for the FAIL nodes: taint, quarantined-at annotation, condition, Event.

    The nodes are read as the controller reads them (`konduktor.health.node_reading.node_state`), so these
    quarantines are the ones it would make.

    Only FAIL verdicts go in: this command quarantines, and leaves releasing a node to the controller's
    requalification. A node already quarantined by the controller gets no second taint, a node that opted out
    gets nothing. The fleet breaker guards the controller's unattended quarantines; here an operator asked
    for this run's verdicts to be acted on, so its limit is every node.
    """
    states = {state.name: state for state in map(node_state, nodes)}
    settings = HealthSettings(breaker=BreakerSettings(max_fraction=1.0, max_nodes=max(1, len(states))))
    failed = [v for v in verdicts if v.quarantine]
    return plan_nodes((), states, BreakerState(), settings, now, results=failed, requalify=False)


def describe_action(action: UpdateNode | SetCondition | RecordEvent | StartRequalification) -> str:
    if isinstance(action, UpdateNode):
        taints = ", ".join(f"{t.key}={t.value}:{t.effect}" for t in action.add_taints)
        removed = ", ".join(f"{t.key}:{t.effect}" for t in action.remove_taints)
        if taints:
            return f"{action.node}: tainted {taints}"
        return f"{action.node}: untainted {removed}" if removed else f"{action.node}: annotations updated"
    if isinstance(action, SetCondition):
        return f"{action.node}: {CONDITION_TYPE}={'True' if action.healthy else 'False'} ({action.reason})"
    if isinstance(action, RecordEvent):
        return f"{action.node}: event {action.reason}"
    return f"{action.node}: requalification"


def quarantine_failed(kube: Kube, verdicts: Sequence[NodeVerdict], say: Callable[[str], None]) -> None:
    """Make the health controller's quarantine writes for the FAIL nodes; `say` each one, and what was not done."""
    if not any(v.quarantine for v in verdicts):
        say("quarantine: no node FAILed")
        return
    _carry_out(kube, quarantine_plan(verdicts, kube.list("v1", "Node"), time.time()), say)


def quarantine_findings(
    kube: Kube, findings: Sequence[Finding], settings: HealthSettings, say: Callable[[str], None]
) -> None:
    """Quarantine by `findings` as the health controller would on its own signals: its `plan_nodes` with its
    `settings` (opt-out label, taint effect, dry run) and its fleet breaker as the cluster records it (the
    quarantines of its window on the nodes, the trip and the last reset on its Lease). A quarantine the breaker
    holds back is an Event on the node, as the controller's are. A trip is left to the controller to record on its
    Lease: the quarantines made here are counted from the nodes by it and by the next run all the same."""
    if not findings:
        say("quarantine: nothing to do: no culprit, or every culprit is in quarantine already")
        return
    now = time.time()
    gpu_nodes = ((node["metadata"]["name"], gpu_node_state(node, settings)) for node in kube.list("v1", "Node"))
    states = {name: state for name, state in gpu_nodes if state is not None}
    lease = kube.get(LEASE_API, "Lease", LEASE_NAME, SYSTEM_NAMESPACE) or {}
    annotations = lease.get("metadata", {}).get("annotations") or {}
    tripped, reset_at = (parse_time(annotations.get(key)) for key in (BREAKER_ANNOTATION, BREAKER_RESET_ANNOTATION))
    breaker = restore_breaker(states, settings.breaker, now, tripped, reset_at)
    _carry_out(kube, plan_nodes(findings, states, breaker, settings, now, requalify=False), say)


def _carry_out(kube: Kube, plan: Plan, say: Callable[[str], None]) -> None:
    for notice in plan.notices:
        say(f"quarantine: {notice.node or ''}: {notice.message}")
    for action in plan.withheld:
        say(f"quarantine: dry run (the health controller's dry_run): would have {describe_action(action)}")
    make_writes(kube, plan.actions, COMPONENT, COMPONENT, lambda action: say(f"quarantine: {describe_action(action)}"))

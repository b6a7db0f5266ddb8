"""Returning a quarantined node to service: by an operator's word (`konduktor-install nodes release`), or after a
burn-in the operator starts (`konduktor-install nodes requalify`).

Both make the health controller's writes through its node writes (`node_writes`): the requalification's through
the controller's own decision (`decide`, the verdict as a requalification result: PASS releases, anything else
keeps the node out and restarts the cooldown), the manual release with the same shape (taint and quarantine
annotations removed, the GPUHealthy condition set True, an Event saying who released it and why). Both stamp
`requalified-at`, from which the controller reads which evidence is older than the release.

Only what Konduktor placed is undone: a gpu-health taint without our quarantine annotation belongs to someone
else and is refused, and a cordon is never touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from konduktor.burnin.manifests import make_run_id
from konduktor.burnin.plan import select_targets
from konduktor.burnin.results import NodeVerdict, Verdict
from konduktor.burnin.runner import BurnInRunner, Progress
from konduktor.burnin.tiers import BurnInOptions
from konduktor.errors import ChangeRefused, UsageError
from konduktor.health.classify import verdict_detail
from konduktor.health.decide import (
    BreakerState,
    NodeState,
    Plan,
    RecordEvent,
    SetCondition,
    UpdateNode,
    decide,
    quarantined_by_us,
)
from konduktor.health.node_reading import expected_gpus, node_state
from konduktor.health.node_writes import make_writes
from konduktor.health.quarantine import COMPONENT, describe_action
from konduktor.health.settings import BreakerSettings, HealthSettings
from konduktor.health.workloads import gpu_pods_on
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.timestamps import format_time
from konduktor.vocabulary import (
    HEALTH_TAINT_KEY,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    REQUALIFICATION_RESULT,
    REQUALIFIED_AT,
)

RELEASED = "ReleasedManually"  # the Event's and the condition's reason
MANUAL_VERDICT = "RELEASED"  # in requalification-result, where a burn-in writes its verdict


def foreign_taint(state: NodeState) -> bool:
    """The gpu-health taint without our quarantine annotation: someone else's, never removed by Konduktor."""
    return any(t.key == HEALTH_TAINT_KEY for t in state.taints) and not quarantined_by_us(state)


def _refuse_foreign(state: NodeState, command: str) -> None:
    if foreign_taint(state):
        raise ChangeRefused(
            f"node {state.name}: the {HEALTH_TAINT_KEY} taint was not placed by Konduktor (no {QUARANTINED_AT} "
            f"annotation); {command} changes nothing",
            hint=f"whoever placed it removes it: kubectl taint node {state.name} {HEALTH_TAINT_KEY}-",
        )


def release_plan(
    state: NodeState, reason: str, actor: str, now: float
) -> tuple[UpdateNode | SetCondition | RecordEvent, ...]:
    """The writes that return a node Konduktor quarantined (or only marked GPUHealthy=False); () when there is
    nothing of ours to undo. Refuses a gpu-health taint someone else placed."""
    if not reason.strip():
        raise UsageError("--reason must say why the node is released", hint="e.g. --reason 'GPU 3 replaced, RMA 1234'")
    _refuse_foreign(state, "release")
    ours = tuple(t for t in state.taints if t.key == HEALTH_TAINT_KEY)
    if not ours and QUARANTINED_AT not in state.annotations and state.gpu_healthy is not False:
        return ()
    message = f"released by {actor}: {reason.strip()}"
    annotations: dict[str, str | None] = {
        QUARANTINED_AT: None,
        QUARANTINE_REASON: None,
        REQUALIFIED_AT: format_time(now),
        REQUALIFICATION_RESULT: f"{MANUAL_VERDICT}: {message}",
    }
    return (
        UpdateNode(state.name, remove_taints=ours, annotations=annotations),
        SetCondition(state.name, True, RELEASED, message),
        RecordEvent(state.name, "Normal", RELEASED, message),
    )


def requalification_plan(state: NodeState, verdict: NodeVerdict, now: float) -> Plan:
    """The controller's decision on a requalification result of a node it quarantined: PASS releases it,
    anything else records the attempt and keeps it out. The breaker only limits new quarantines."""
    settings = HealthSettings(breaker=BreakerSettings(max_fraction=1.0, max_nodes=1))
    plan = decide((), {state.name: state}, BreakerState(), settings, now, results=[verdict])
    # Starting the next requalification is the controller's, after its cooldown.
    return replace(
        plan, actions=tuple(a for a in plan.actions if isinstance(a, UpdateNode | SetCondition | RecordEvent))
    )


def release_hints(verdicts: Sequence[NodeVerdict], nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per node that PASSed a manual burn-in but stays quarantined by Konduktor."""
    quarantined = {
        state.name for state in (node_state(dict(n), None, False) for n in nodes) if quarantined_by_us(state)
    }
    return [
        f"{v.node} passed and stays quarantined; return it: konduktor-install nodes release {v.node} --reason '...' "
        f"(or burn it in again and release it on PASS: konduktor-install nodes requalify {v.node})"
        for v in verdicts
        if v.verdict is Verdict.PASS and v.node in quarantined
    ]


# --- the writes ----------------------------------------------------------------------------------------------------


def whoami(kube: Kube) -> str:
    """The user the API server authenticates us as (SelfSubjectReview, Kubernetes 1.28+)."""
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        answer = kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review)
    except ApiError:
        return "unknown user"
    return str(answer.get("status", {}).get("userInfo", {}).get("username") or "unknown user")


def _read(kube: Kube, name: str) -> tuple[dict[str, Any], NodeState]:
    node = kube.get("v1", "Node", name)
    if node is None:
        raise UsageError(f"no node named {name} in this cluster", hint="list the GPU nodes: konduktor-install nodes")
    return node, node_state(node, expected_gpus(node, HealthSettings()), False)


def release_node(kube: Kube, name: str, reason: str, say: Callable[[str], None]) -> bool:
    """Release a node by hand; False when there was nothing to release."""
    _, state = _read(kube, name)
    actions = release_plan(state, reason, whoami(kube), time.time())
    if not actions:
        say(f"{name}: not quarantined by Konduktor; nothing to release")
        return False
    make_writes(kube, actions, COMPONENT, COMPONENT, lambda action: say(f"release: {describe_action(action)}"))
    if state.unschedulable:
        say(f"{name}: still cordoned by someone else; kubectl uncordon {name} when its work is done")
    return True


def requalify_node(
    kube: Kube,
    name: str,
    options: BurnInOptions,
    namespace: str,
    wait_s: float | None,
    say: Callable[[str], None],
    progress: Progress,
) -> tuple[NodeVerdict, bool]:
    """Burn in one node Konduktor quarantined and act on the verdict as the controller's requalification does.
    (verdict, whether the wait ended with its Job still running: then nothing is written)."""
    node, state = _read(kube, name)
    _refuse_foreign(state, "requalify")
    if not quarantined_by_us(state):
        raise ChangeRefused(
            f"node {name} is not quarantined by Konduktor; there is nothing to requalify",
            hint=f"to test it anyway: konduktor-install burnin --nodes {name}",
        )
    busy = gpu_pods_on(kube, name, (namespace,))
    if busy:
        # Its pod asks for every GPU of the node: beside running work it could not even be scheduled.
        shown = ", ".join(busy[:5]) + (", ..." if len(busy) > 5 else "")
        raise ChangeRefused(
            f"node {name} still runs {len(busy)} GPU pod{'s' if len(busy) != 1 else ''} ({shown}): a burn-in needs "
            "every GPU of the node and cannot run beside them; nothing changed",
            hint="run it again once they have finished (the quarantine taint keeps new ones off): "
            f"kubectl get pods -A --field-selector spec.nodeName={name}",
        )
    run_id = make_run_id(datetime.now(UTC))
    runner = BurnInRunner(kube, namespace, run_id, options, say=say, progress=progress)
    say(f"requalify {name}: {options.tier.value} burn-in {run_id} in {namespace}")
    verdicts, waited_out = runner.run(select_targets([node], None, [name]), wait_s)
    verdict = verdicts[0]
    if waited_out:
        say(f"requalify {name}: the burn-in is still running; nothing changed (collect it: burnin --run-id {run_id})")
        return verdict, True
    _, state = _read(kube, name)  # as it is now, for a conditional write
    plan = requalification_plan(state, verdict, time.time())
    for notice in plan.notices:
        say(f"requalify {name}: {notice.message}")
    make_writes(kube, plan.actions, COMPONENT, COMPONENT, lambda action: say(f"requalify: {describe_action(action)}"))
    released = any(isinstance(a, UpdateNode) and a.remove_taints for a in plan.actions)
    say(requalify_outcome(verdict, released))
    return verdict, False


def requalify_outcome(verdict: NodeVerdict, released: bool) -> str:
    """The verdict line of `nodes requalify`. A node kept out carries the checks that kept it out, in the words of
    the controller's Event, so that on-call need not look the Event up to learn why."""
    why = "" if verdict.verdict is Verdict.PASS else f" ({verdict_detail(verdict)})"
    return f"requalify {verdict.node}: {verdict.verdict}{why}; " + ("released" if released else "stays quarantined")

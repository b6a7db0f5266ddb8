"""Findings, burn-in results and node state -> the cluster writes to make: the controller's safety rules.

Pure: the caller passes the nodes as it sees them, the breaker state and the clock, and gets back a
`Plan` (writes, notices, the next breaker state). The rules:

- only taints we placed are ever removed; a taint is ours when it carries our key *and* the node has our
  `quarantined-at` annotation. Cordons are never touched (no action here can write `unschedulable`);
- a node labelled with the opt-out label gets no write at all;
- new quarantines go through a fleet circuit breaker (a fraction of GPU nodes, at least two and at most a cap,
  per window); once tripped it stays open until an operator resets it, while releases continue; the findings it
  holds back are handed back (`Plan.held`), so that a reset quarantines their nodes at once;
- NoExecute only for faults the catalog marks node-unusable, and only when the config allows it;
- dry-run plans the same writes but returns them as `withheld`, never as `actions`; only the Events on the owners
  of affected workloads are still made, saying what would have happened to them (a Normal Event, reason
  WouldRequeueForNodeHealth or NodeWouldBeQuarantined);
- the Kueue workloads with pods on a node are handled only when this call quarantines the node (so the breaker,
  dry-run and the node's opt-out bound them too), by the affected-work policy of the fault's class; a lost GPU
  requeues the workload that held it and drains the others (`gpu_loss`), also on a node quarantined before (its
  holder alone is handled then); a workload whose owner or namespace opted out is only told. Only workloads we
  deactivated are ever reactivated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from konduktor.burnin.results import NodeVerdict, Verdict
from konduktor.gpu.catalog import Severity
from konduktor.gpu.node import GpuNode, Taint, TaintEffect
from konduktor.health.affected import (
    AffectedWorkload,
    ObjectRef,
    RequeuingWorkload,
    fate_for,
    owner_message,
    owner_reason,
    policy_for,
)
from konduktor.health.classify import Finding, ForeignCondition, burnin_finding, verdict_detail
from konduktor.health.gpu_loss import Attribution, Judgement, judge_lost_gpu
from konduktor.health.settings import BreakerSettings, HealthSettings
from konduktor.kube.timestamps import format_time, parse_time
from konduktor.vocabulary import (
    GPU_HEALTHY_CONDITION,
    HEALTH_TAINT_KEY,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    REQUALIFICATION_RESULT,
    REQUALIFIED_AT,
)

TAINT_VALUE = "unhealthy"
CONDITION_TYPE = GPU_HEALTHY_CONDITION
# Kubernetes truncates longer Event notes; cut them ourselves so the evidence keeps its start.
MESSAGE_LIMIT = 1024

_REQUALIFICATION_REASONS = {
    Verdict.PASS: "RequalificationPassed",
    Verdict.WARN: "RequalificationWarned",
    Verdict.FAIL: "RequalificationFailed",
    Verdict.ERROR: "RequalificationError",
    Verdict.SKIPPED: "RequalificationSkipped",
}


@dataclass(frozen=True)
class NodeState(GpuNode):
    """What the decision needs to know about one GPU node: the Node's reading (`konduktor.gpu.node`), the GPUs it
    should have, its burn-in Jobs and the conditions other tools set."""

    gpu_expected: int | None = None
    requalification_running: bool = False
    conditions: tuple[ForeignCondition, ...] = ()  # set by other tools


@dataclass(frozen=True)
class UpdateNode:
    """One patch of the Node's taints and annotations (an annotation set to None is removed)."""

    node: str
    add_taints: tuple[Taint, ...] = ()
    remove_taints: tuple[Taint, ...] = ()
    annotations: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class SetCondition:
    """Set the Node's GPUHealthy condition (status subresource)."""

    node: str
    healthy: bool
    reason: str
    message: str


@dataclass(frozen=True)
class RecordEvent:
    node: str
    event_type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class StartRequalification:
    """Create the burn-in Job for a quarantined node (it tolerates our taint)."""

    node: str


@dataclass(frozen=True)
class DeactivateWorkload:
    """Requeue a Workload through Kueue: spec.active=false makes Kueue evict it (pods stopped, quota released);
    our mark on it says that we did, and why."""

    node: str  # the quarantined node
    namespace: str
    name: str
    reason: str


@dataclass(frozen=True)
class ReactivateWorkload:
    """Kueue has evicted a Workload we deactivated: spec.active=true puts it back in its queue, where it keeps
    its place (the queue order is its creation time), and our mark is removed."""

    node: str
    namespace: str
    name: str


@dataclass(frozen=True)
class TellOwner:
    """An Event on a workload's owner (Job, JobSet, ...) and on its Workload, in their namespace."""

    node: str
    namespace: str
    objects: tuple[ObjectRef, ...]
    event_type: Literal["Normal", "Warning"]
    reason: str
    message: str


Action = UpdateNode | SetCondition | RecordEvent | StartRequalification
# Writes to workloads and their owners, kept apart from the Node writes (the manual quarantine plans none).
WorkAction = DeactivateWorkload | ReactivateWorkload | TellOwner


@dataclass(frozen=True)
class Notice:
    """Something to log and count that is not a cluster write (a tripped breaker is `error`)."""

    level: Literal["info", "warning", "error"]
    node: str | None
    message: str


@dataclass(frozen=True)
class BreakerState:
    """New quarantines in the current window, and when the breaker tripped. An operator's reset is
    `BreakerState()`: it also forgets the window, since the operator has judged that storm."""

    recent: tuple[float, ...] = ()
    tripped_at: float | None = None

    @property
    def tripped(self) -> bool:
        return self.tripped_at is not None


@dataclass(frozen=True)
class AffectedNode:
    """A node quarantined now, as the plan left it, with the fault: its workloads are requeued, drained or left. With
    `requeues_only` it was quarantined before and told then: only a workload this fault requeues is handled."""

    state: NodeState
    finding: Finding
    requeues_only: bool = False


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    withheld: tuple[Action, ...]  # dry-run: what would have been written
    notices: tuple[Notice, ...]
    breaker: BreakerState
    work: tuple[WorkAction, ...] = ()  # made after `actions`, so that a failed Node write stops its node's work
    work_withheld: tuple[WorkAction, ...] = ()
    held: tuple[Finding, ...] = ()  # quarantining findings the breaker held back: due again once it is reset
    # The nodes whose workloads the plan's quarantines affect (`plan_work` plans the work's writes from them).
    affected: tuple[AffectedNode, ...] = ()

    def followed_by(self, later: Plan) -> Plan:
        """This plan and a later one made from its breaker, as one: the later one's writes after this one's."""
        return Plan(
            actions=self.actions + later.actions,
            withheld=self.withheld + later.withheld,
            notices=self.notices + later.notices,
            breaker=later.breaker,
            work=self.work + later.work,
            work_withheld=self.work_withheld + later.work_withheld,
            held=self.held + later.held,
            affected=self.affected + later.affected,
        )


# Whatever the fraction, the breaker lets this many quarantines through per window: two faulty nodes in ten
# minutes are an ordinary week on a small cluster, not a storm.
BREAKER_FLOOR = 2


def first_taints(actions: Sequence[Action]) -> tuple[list[Action], list[Action]]:
    """Each node's first write when it adds a taint (a quarantine's, an escalation's), and the other writes, in their
    order. The first ones go out before any of the others (`in_waves`; a pass's taints as soon as they are decided)."""
    first: list[Action] = []
    rest: list[Action] = []
    seen: set[str] = set()
    for action in actions:
        if action.node not in seen and isinstance(action, UpdateNode) and action.add_taints:
            first.append(action)
        else:
            rest.append(action)
        seen.add(action.node)
    return first, rest


def breaker_limit(gpu_nodes: int, settings: BreakerSettings) -> int:
    """New quarantines allowed per window: min(cap, max(2, ceil(fraction x GPU nodes))). The cap wins over the
    floor of two, so `max_nodes: 1` still means one."""
    # The epsilon keeps 0.29 x 100 at 29 despite binary floating point.
    share = math.ceil(settings.max_fraction * gpu_nodes - 1e-9)
    return min(settings.max_nodes, max(BREAKER_FLOOR, share))


def quarantined_by_us(node: NodeState) -> bool:
    return QUARANTINED_AT in node.annotations and _carries_taint_key(node)


def _carries_taint_key(node: NodeState) -> bool:
    return any(t.key == HEALTH_TAINT_KEY for t in node.taints)


def restore_breaker(
    nodes: Mapping[str, NodeState],
    settings: BreakerSettings,
    now: float,
    tripped_at: float | None = None,
    reset_at: float | None = None,
) -> BreakerState:
    """The breaker as the cluster records it: the quarantines of the window still in place, read from our
    annotations, and when it tripped, as the leader Lease keeps it. A node released within the window (by hand or
    by a passing burn-in) no longer counts: a person or a burn-in has judged it, and the count stays what every
    reader sees on the nodes. Quarantines before an operator's reset (`reset_at`) do not count either: the reset
    judged that storm."""
    recent = tuple(sorted(t for t, _ in window_quarantines(nodes, settings, now, reset_at)))
    return BreakerState(recent, tripped_at)


def window_quarantines(
    nodes: Mapping[str, NodeState], settings: BreakerSettings, now: float, reset_at: float | None = None
) -> list[tuple[float, str]]:
    """(when, node) of each quarantine of ours still in place that counts against the breaker's window."""
    after = math.floor(reset_at) if reset_at is not None else None  # the stamps have whole seconds
    found = []
    for node in nodes.values():
        at = parse_time(node.annotations.get(QUARANTINED_AT)) if quarantined_by_us(node) else None
        if at is not None and now - at < settings.window_seconds and (after is None or at >= after):
            found.append((at, node.name))
    return sorted(found)


def decide(
    findings: Sequence[Finding],
    nodes: Mapping[str, NodeState],
    breaker: BreakerState,
    settings: HealthSettings,
    now: float,
    results: Sequence[NodeVerdict] = (),
    work: Mapping[str, Sequence[AffectedWorkload]] | None = None,
    requeuing: Sequence[RequeuingWorkload] = (),
    attribution: Mapping[str, Attribution] | None = None,
) -> Plan:
    """Plan the writes for new findings and burn-in results, then start due requalifications.

    `nodes` holds every GPU node by name (the breaker's fraction is of these); `now` is wall-clock
    seconds since the epoch, as recorded in the annotations. `work` holds the workloads with pods on the nodes
    of quarantining findings; `requeuing` the workloads this controller deactivated and has not yet reactivated;
    `attribution` what DCGM says of the GPUs of the nodes that lost some (none where it could not be read).
    """
    planned = plan_nodes(findings, nodes, breaker, settings, now, results)
    return plan_work(planned, settings, now, work or {}, requeuing, attribution)


def plan_nodes(
    findings: Sequence[Finding],
    nodes: Mapping[str, NodeState],
    breaker: BreakerState,
    settings: HealthSettings,
    now: float,
    results: Sequence[NodeVerdict] = (),
    requalify: bool = True,
) -> Plan:
    """`decide`'s Node writes, notices and breaker, with the nodes whose work they affect but none of the work's
    writes: those need the workloads on the nodes, which the Node writes do not (the controller writes a burst's
    taints before it reads the pods of their nodes). Unless `requalify`, no requalification starts: the plans for
    the faults a pass takes in leave them to its first."""
    planner = _Planner(nodes, breaker, settings, now)
    for result in results:
        planner.burnin_result(result)
    for finding in findings:
        planner.finding(finding)
    if requalify:
        planner.start_requalifications()
    writes = tuple(planner.writes)
    return Plan(
        actions=() if settings.dry_run else writes,
        withheld=writes if settings.dry_run else (),
        notices=tuple(planner.notices),
        breaker=BreakerState(tuple(planner.recent), planner.tripped_at),
        held=tuple(planner.held),
        affected=tuple(planner.affected),
    )


def plan_work(
    plan: Plan,
    settings: HealthSettings,
    now: float,
    work: Mapping[str, Sequence[AffectedWorkload]],
    requeuing: Sequence[RequeuingWorkload] = (),
    attribution: Mapping[str, Attribution] | None = None,
) -> Plan:
    """The plan with the writes of the work on its affected nodes (`work`: their workloads) and the reactivations of
    the `requeuing` workloads whose eviction is done; dry-run makes only the Events on their owners."""
    planner = _WorkPlanner(settings, now, work, attribution or {})
    for workload in requeuing:
        planner.requeue_done(workload)
    for affected in plan.affected:
        planner.affected(affected.state, affected.finding, requeues_only=affected.requeues_only)
    writes = tuple(planner.writes)
    if not settings.dry_run:
        return replace(plan, work=writes)
    return replace(
        plan,
        work=tuple(a for a in writes if isinstance(a, TellOwner)),
        work_withheld=tuple(a for a in writes if not isinstance(a, TellOwner)),
    )


class _Planner:
    """The working state of one `plan_nodes` call: nodes are updated as writes are planned, so that a second
    finding for a node quarantined a moment ago sees it quarantined."""

    def __init__(
        self,
        nodes: Mapping[str, NodeState],
        breaker: BreakerState,
        settings: HealthSettings,
        now: float,
    ) -> None:
        self.nodes = dict(nodes)
        self.affected: list[AffectedNode] = []
        self.settings = settings
        self.now = now
        self.stamp = _stamp(now)
        self.limit = breaker_limit(len(nodes), settings.breaker)
        self.recent = [t for t in breaker.recent if now - t < settings.breaker.window_seconds]
        self.tripped_at = breaker.tripped_at
        self.writes: list[Action] = []
        self.notices: list[Notice] = []
        self.held: list[Finding] = []
        # Nodes with a fault or a burn-in result in this call: requalification waits for a later call.
        self.fresh: set[str] = set()

    def burnin_result(self, result: NodeVerdict) -> None:
        node = self._managed(result.node)
        if node is None:
            return
        if quarantined_by_us(node):
            if result.verdict is Verdict.PASS:
                self._release(node, verdict_detail(result))
            else:
                self._record_attempt(node, result)
            return
        if result.verdict is Verdict.PASS:
            if node.gpu_healthy is False:
                self._condition(node, True, _REQUALIFICATION_REASONS[Verdict.PASS], verdict_detail(result))
            if _carries_taint_key(node):
                self._notice(
                    "info",
                    node.name,
                    "burn-in passed; the gpu-health taint was not placed by this controller and stays",
                )
            return
        finding = burnin_finding(result)
        if finding is None:
            self._notice("warning", node.name, f"burn-in ended in {result.verdict}: {verdict_detail(result)}")
        else:
            self.finding(finding)

    def finding(self, finding: Finding) -> None:
        node = self._managed(finding.node)
        if node is None:
            return
        if not finding.quarantine:
            event_type: Literal["Normal", "Warning"] = "Normal" if finding.severity == Severity.INFO else "Warning"
            self._event(node.name, event_type, finding.reason, _describe(finding))
        elif quarantined_by_us(node):
            self._already_quarantined(node, finding)
        elif _carries_taint_key(node):
            # Someone else put our taint key on the node: report, but do not claim it (we would remove it
            # on release) and do not count it against the breaker.
            self._notice("info", node.name, "gpu-health taint already present and not ours; not claiming it")
            self._unhealthy(node, finding)
        elif self._breaker_allows(node.name):
            self._quarantine(node, finding)
        else:
            self.held.append(finding)
            self._unhealthy(node, finding)
            self._event(
                node.name,
                "Warning",
                "QuarantineSuppressed",
                f"circuit breaker open (tripped at {_stamp(self.tripped_at)}; limit {self.limit} "
                f"per {self.settings.breaker.window_seconds:g}s); reset it to resume: "
                "konduktor-install nodes breaker reset --reason '...'. " + _describe(finding),
            )

    def start_requalifications(self) -> None:
        running = sum(1 for n in self.nodes.values() if n.requalification_running)
        slots = self.settings.max_concurrent_requalifications - running
        due = sorted((self._rested_since(n), n.name) for n in self.nodes.values() if self._due(n))
        for _, name in due[: max(slots, 0)]:
            self.writes.append(StartRequalification(name))

    def _managed(self, name: str) -> NodeState | None:
        node = self.nodes.get(name)
        if node is None:
            self._notice("warning", name, "not a known GPU node; ignored")
        elif self._opted_out(node):
            self._notice("info", name, f"opted out ({self.settings.opt_out_label}=true); no action")
            return None
        return node

    def _opted_out(self, node: NodeState) -> bool:
        return node.labels.get(self.settings.opt_out_label) == "true"

    def _breaker_allows(self, name: str) -> bool:
        if self.tripped_at is None and len(self.recent) >= self.limit:
            self.tripped_at = self.now
            self._notice(
                "error",
                None,
                f"circuit breaker tripped: {len(self.recent)} quarantines in "
                f"{self.settings.breaker.window_seconds:g}s reached the limit of "
                f"{self.limit}; no more quarantines until it is reset",
            )
        if self.tripped_at is not None:
            self._notice("error", name, "quarantine suppressed: circuit breaker open")
            return False
        self.recent.append(self.now)
        return True

    def _quarantine(self, node: NodeState, finding: Finding) -> None:
        taint = Taint(HEALTH_TAINT_KEY, self._effect(finding), TAINT_VALUE)
        reason = f"{finding.reason} {finding.name}" + (f" on {finding.gpu}" if finding.gpu else "")
        annotations = {QUARANTINED_AT: self.stamp, QUARANTINE_REASON: reason}
        self.writes.append(UpdateNode(node.name, add_taints=(taint,), annotations=annotations))
        node = self._store(replace(node, taints=(*node.taints, taint), annotations={**node.annotations, **annotations}))
        self._unhealthy(node, finding)
        self._event(node.name, "Warning", finding.reason, f"quarantined ({taint.effect}): {_describe(finding)}")
        self.fresh.add(node.name)
        self.affected.append(AffectedNode(self.nodes[node.name], finding))

    def _already_quarantined(self, node: NodeState, finding: Finding) -> None:
        self.fresh.add(node.name)
        ours = {t.effect for t in node.taints if t.key == HEALTH_TAINT_KEY}
        effect = self._effect(finding)
        if effect not in ours and effect == "NoExecute":
            # Not a new quarantine (the node is already out of scheduling), so the breaker is not asked.
            taint = Taint(HEALTH_TAINT_KEY, effect, TAINT_VALUE)
            self.writes.append(UpdateNode(node.name, add_taints=(taint,)))
            self._store(replace(node, taints=(*node.taints, taint)))
            self._event(
                node.name, "Warning", finding.reason, f"quarantine escalated to NoExecute: {_describe(finding)}"
            )
        elif node.annotations.get(QUARANTINE_REASON, "").split(" ", 1)[0] != finding.reason:
            # A further fault on a quarantined node: evidence for the engineer, no state change.
            self._event(node.name, "Warning", finding.reason, f"also: {_describe(finding)}")
        if finding.kind == "gpu_lost":
            # The Xid that made the device plugin withdraw the GPU often quarantined the node first (DCGM is read
            # every poll, a lost GPU counts after its grace), with a policy that left the GPU's holder to finish.
            self.affected.append(AffectedNode(self.nodes[node.name], finding, requeues_only=True))

    def _release(self, node: NodeState, detail: str) -> None:
        ours = tuple(t for t in node.taints if t.key == HEALTH_TAINT_KEY)
        annotations: dict[str, str | None] = {
            QUARANTINED_AT: None,
            QUARANTINE_REASON: None,
            REQUALIFIED_AT: self.stamp,
            REQUALIFICATION_RESULT: _cut(f"PASS: {detail}"),
        }
        self.writes.append(UpdateNode(node.name, remove_taints=ours, annotations=annotations))
        node = self._store(
            replace(
                node,
                taints=tuple(t for t in node.taints if t not in ours),
                annotations=_merged(node.annotations, annotations),
            )
        )
        self._condition(node, True, _REQUALIFICATION_REASONS[Verdict.PASS], detail)
        self._event(node.name, "Normal", _REQUALIFICATION_REASONS[Verdict.PASS], f"released: {detail}")
        self.fresh.add(node.name)

    def _record_attempt(self, node: NodeState, result: NodeVerdict) -> None:
        """Anything but PASS keeps the node out: WARN needs a human, ERROR/SKIPPED judged nothing. The
        stamp restarts the cooldown before the next attempt."""
        detail = verdict_detail(result)
        annotations: dict[str, str | None] = {
            REQUALIFIED_AT: self.stamp,
            REQUALIFICATION_RESULT: _cut(f"{result.verdict}: {detail}"),
        }
        self.writes.append(UpdateNode(node.name, annotations=annotations))
        self._store(replace(node, annotations=_merged(node.annotations, annotations)))
        self._event(node.name, "Warning", _REQUALIFICATION_REASONS[result.verdict], f"stays quarantined: {detail}")
        self.fresh.add(node.name)

    def _unhealthy(self, node: NodeState, finding: Finding) -> None:
        if node.gpu_healthy is not False:
            self._condition(
                node, False, finding.reason, f"{finding.name}: {finding.meaning}; recommended action: {finding.action}"
            )

    def _condition(self, node: NodeState, healthy: bool, reason: str, message: str) -> None:
        self.writes.append(SetCondition(node.name, healthy, reason, _cut(message)))
        self._store(replace(self.nodes[node.name], gpu_healthy=healthy))

    def _event(self, node: str, event_type: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.writes.append(RecordEvent(node, event_type, reason, _cut(message)))

    def _notice(self, level: Literal["info", "warning", "error"], node: str | None, message: str) -> None:
        self.notices.append(Notice(level, node, message))

    def _effect(self, finding: Finding) -> TaintEffect:
        return "NoExecute" if finding.node_unusable and self.settings.allow_noexecute else "NoSchedule"

    def _store(self, node: NodeState) -> NodeState:
        self.nodes[node.name] = node
        return node

    def _due(self, node: NodeState) -> bool:
        """A quarantined node may start its requalification burn-in now."""
        if (
            not quarantined_by_us(node)
            or self._opted_out(node)
            or node.requalification_running
            or node.name in self.fresh
        ):
            return False
        if node.unschedulable:
            return False  # someone else cordoned it (we never do): they are working on it
        if (
            node.gpu_allocatable is not None
            and node.gpu_expected is not None
            and node.gpu_allocatable < node.gpu_expected
        ):
            return False  # the burn-in asks for every GPU; it could not even be scheduled
        return self.now - self._rested_since(node) >= self.settings.cooldown_seconds

    def _rested_since(self, node: NodeState) -> float:
        times = [parse_time(node.annotations.get(k)) for k in (QUARANTINED_AT, REQUALIFIED_AT)]
        # An unreadable stamp (edited by hand) must not block requalification forever.
        return max((t for t in times if t is not None), default=0.0)


class _WorkPlanner:
    """The affected work of one `plan_work` call: which workloads on a node quarantined now are requeued, drained or
    left where they are, what their owners are told, and which requeued ones get their place back."""

    def __init__(
        self,
        settings: HealthSettings,
        now: float,
        work: Mapping[str, Sequence[AffectedWorkload]],
        attribution: Mapping[str, Attribution],
    ) -> None:
        self.settings = settings
        self.now = now
        self.stamp = _stamp(now)
        self.work = work
        self.attribution = attribution
        self.writes: list[WorkAction] = []
        self.requeued: set[tuple[str, str]] = set()  # workloads this call deactivates

    def affected(self, state: NodeState, finding: Finding, *, requeues_only: bool = False) -> None:
        """The workloads with pods on a node quarantined now: requeue, drain or leave them, and tell owners.
        `requeues_only`: the node was quarantined before, and its workloads told then; only a workload this fault
        requeues is handled (and told) now."""
        node = state.name
        work = self.work.get(node, ())
        judged = self._lost_gpu_judgements(state, work) if finding.kind == "gpu_lost" else {}
        quarantined_at = parse_time(state.annotations.get(QUARANTINED_AT))
        for workload in work:
            key = (workload.namespace, workload.name)
            if not workload.active or key in self.requeued:
                continue  # someone deactivated it (theirs to resume), or this call requeues it already
            judgement = judged.get(key)
            policy = judgement.policy if judgement else policy_for(finding, self.settings)
            fate = fate_for(workload, policy, self.settings.opt_out_label)
            if requeues_only and fate != "requeued":
                continue
            if fate == "requeued":
                reason = f"{finding.reason} on {node} at {self.stamp}"
                self.writes.append(DeactivateWorkload(node, workload.namespace, workload.name, reason))
                self.requeued.add(key)
            message = owner_message(
                workload,
                finding,
                quarantined_at if quarantined_at is not None else self.now,
                fate,
                dry_run=self.settings.dry_run,
                opt_out_label=self.settings.opt_out_label,
                why=judgement.why if judgement else "",
            )
            objects = (workload.owner, workload.ref) if workload.owner is not None else (workload.ref,)
            dry_run = self.settings.dry_run
            # Dry-run's Event is news of what did not happen: nothing went wrong with the job.
            event_type: Literal["Normal", "Warning"] = "Normal" if dry_run else "Warning"
            told = TellOwner(
                node, workload.namespace, objects, event_type, owner_reason(fate, dry_run=dry_run), _cut(message)
            )
            self.writes.append(told)

    def _lost_gpu_judgements(
        self, state: NodeState, work: Sequence[AffectedWorkload]
    ) -> dict[tuple[str, str], Judgement]:
        """Which workload held the GPUs the node lost (`gpu_loss`): its holder is requeued, the others drained."""
        missing = 1
        if state.gpu_expected is not None and state.gpu_allocatable is not None:
            missing = state.gpu_expected - state.gpu_allocatable
        return judge_lost_gpu(work, missing, self.attribution.get(state.name), self.settings.affected_work)

    def requeue_done(self, workload: RequeuingWorkload) -> None:
        """Reactivate a Workload we deactivated once Kueue has released its quota (the eviction is done)."""
        if workload.active or not workload.quota_reserved:
            self.writes.append(ReactivateWorkload(workload.node, workload.namespace, workload.name))


def _describe(finding: Finding) -> str:
    where = f" on {finding.gpu}" if finding.gpu else ""
    return (
        f"{finding.name} ({finding.meaning}){where}; recommended action: {finding.action}; evidence: {finding.evidence}"
    )


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def _merged(annotations: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    merged = {**annotations, **changes}
    return {k: v for k, v in merged.items() if v is not None}


def _stamp(when: float | None) -> str:
    return "-" if when is None else format_time(when)

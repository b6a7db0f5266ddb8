"""The watch loop: read the signals, judge them, let the pure decision plan the writes, make them.

Node changes arrive from a watch and are acted on at once (a lost GPU is a watch signal); Loki, Prometheus and
the requalification Jobs are read every `poll_seconds`. Only the replica holding the Lease acts. Each pass
hands the decision the nodes as last seen, so that its safety rules (breaker, ownership of taints, opt-out,
dry-run) see the cluster and not a stale copy.

A pass judges a node's watch signals (lost GPUs, other tools' conditions) only when what they read changed: its
Node as the decision sees it, or whether its requalification runs. A node whose signal lasts (GPUs short, within
their grace or not; a bad condition) is judged on every pass while it lasts, and every `full_pass_seconds` every
GPU node is, as a safety net (docs/design/health-passes.md). Log lines, DCGM readings and burn-in verdicts name
their nodes already. So an idle fleet costs what its changes cost, not what its size does.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from konduktor.burnin.results import NodeVerdict
from konduktor.errors import KonduktorError
from konduktor.gpu.kernel_log import parse_line
from konduktor.health.actuator import COMPONENT, Actuator, Outcome, TaintWriter, action_name
from konduktor.health.affected import AffectedWorkload, RequeuingWorkload
from konduktor.health.breaker import BREAKER_ANNOTATION, BREAKER_RESET_ANNOTATION
from konduktor.health.classify import (
    DuplicateFilter,
    LostGpuWatch,
    XidConfirmations,
    classify_dcgm,
    classify_report,
)
from konduktor.health.dcgm_reads import DcgmReads
from konduktor.health.decide import (
    Action,
    BreakerState,
    NodeState,
    Plan,
    RecordEvent,
    TellOwner,
    WorkAction,
    breaker_limit,
    first_taints,
    plan_nodes,
    plan_work,
    restore_breaker,
)
from konduktor.health.gpu_loss import Attribution
from konduktor.health.kernel_files import KernelLogFiles
from konduktor.health.leader import LeaderLease
from konduktor.health.logs import log
from konduktor.health.loki import LokiCursor, LokiSource
from konduktor.health.node_states import NodeStates, Signal
from konduktor.health.nodes import NodeCache, list_nodes, node_watch
from konduktor.health.prometheus import PrometheusSource
from konduktor.health.refused import decide_give_back
from konduktor.health.refused_writes import give_back, refused_creates
from konduktor.health.requalification import PodLogs, Requalifier, Result, StepLogs
from konduktor.health.settings import HealthSettings
from konduktor.health.signals import DcgmSignal, LogLine
from konduktor.health.telemetry import HealthMetrics
from konduktor.health.workloads import requeuing, workloads_on
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.timestamps import format_time, parse_time
from konduktor.kube.watch import WatchEvent
from konduktor.observability.answers import SourceError
from konduktor.vocabulary import QUARANTINE_REASON, REQUALIFIED_AT

CURSOR_ANNOTATION = "konduktor.ai/loki-cursor"
# A cursor that moved past nothing is saved at most this often: a quiet cluster need not write the Lease on every
# poll, and a new leader then reads again at most this much of nothing.
CURSOR_SAVE_SECONDS = 60.0
# A pass takes in the faults that arrive while it writes its taints for at most this long: a storm that goes on
# delays the pass's conditions, Events and work by this much, no more. A burst of a few hundred lost GPUs reaches a
# 2-core simulated cluster over about 5 s (bench/README.md): all of it is tainted before the first condition.
TAKE_IN_SECONDS = 10.0
# Meanwhile it looks for them (and renews its Lease when due) at least this often, and whenever a taint has been
# written; once a fault has arrived during the pass, it waits this long for the next before it ends (a burst's
# reports come unevenly).
TAKE_IN_WAIT_SECONDS = 0.05
TAKE_IN_QUIET_SECONDS = 1.0
# Signals read once (a log line past the cursor, a DCGM rise): the breaker's reset hands them to the decision again.
# The others are read again on every pass while they last, so a reset only lets them past the duplicate filter.
_READ_ONCE = ("kernel_log", "dcgm")
_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class PolledSources:
    """The sources read on every poll: kernel log lines (Loki, the node's kernel log files) and DCGM fields
    (Prometheus), turned into signals; an Xid DCGM reports confirms the same Xid in a log line."""

    def __init__(self, settings: HealthSettings, metrics: HealthMetrics) -> None:
        self.settings = settings
        self.loki = LokiSource(settings.loki, metrics) if settings.loki else None
        self.prometheus = PrometheusSource(settings.prometheus, metrics) if settings.prometheus else None
        files = settings.kernel_log_files
        self.kernel_files = KernelLogFiles(Path(files.directory)) if files else None
        self.xid_confirmations = XidConfirmations(settings.xid_confirmation_seconds)
        self.dcgm_reads: DcgmReads | None = None

    def start_reads(self, leading: Callable[[], bool]) -> None:
        """From now on DCGM is read on a thread of its own while `leading` (the watch loop; a one-shot reconcile
        reads in its pass)."""
        if self.prometheus is not None and self.dcgm_reads is None:
            # A source of its own: the loop's source asks Prometheus too (attribution), one requests session each.
            background = PrometheusSource(self.prometheus.settings, self.prometheus.metrics)
            self.dcgm_reads = DcgmReads(background.fetch, self.settings.poll_seconds, leading)
            self.dcgm_reads.start()

    def stop_reads(self) -> None:
        if self.dcgm_reads is not None:
            self.dcgm_reads.stop()
            self.dcgm_reads = None

    def read(self, after: LokiCursor | None, now: float) -> tuple[list[Signal], list[Signal], LokiCursor | None]:
        """The kernel log signals past `after`, the DCGM signals, and the cursor past the lines read (None when
        Loki was not read)."""
        dcgm = self._dcgm_signals(now)
        for found in dcgm:
            self.xid_confirmations.record(found.finding)
        kernel, cursor = self._kernel_log_signals(after)
        return kernel, dcgm, cursor

    def forget(self, signal: Signal) -> None:
        """Hand a DCGM fault out again on the next read (its node's writes failed)."""
        if signal.dcgm is not None and self.prometheus is not None:
            self.prometheus.novelty.forget(signal.dcgm)

    def attribution(self, signals: Sequence[Signal], now: float) -> dict[str, Attribution]:
        """What DCGM says of the GPUs of each node that lost some and is about to be quarantined with its work: read
        from when the node was first seen short, a query window earlier (the Xid comes before the device plugin
        withdraws the GPU). A node without an answer is judged without attribution."""
        found: dict[str, Attribution] = {}
        if self.prometheus is None:
            return found
        for signal in signals:
            if signal.finding.kind != "gpu_lost" or signal.finding.node in found:
                continue
            start = signal.at - self.prometheus.settings.window_seconds
            try:
                found[signal.finding.node] = self.prometheus.attribution(signal.finding.node, start, now)
            except SourceError as problem:
                log(
                    logging.WARNING,
                    "cannot read which pod held the lost GPU",
                    node=signal.finding.node,
                    error=str(problem),
                )
        return found

    def _kernel_log_signals(self, after: LokiCursor | None) -> tuple[list[Signal], LokiCursor | None]:
        lines = self.kernel_files.read() if self.kernel_files is not None else []
        if self.loki is None:
            return self._kernel_signals(lines), None
        try:
            read, cursor = self.loki.read(after, time.time_ns())
        except SourceError as problem:
            log(logging.WARNING, "cannot read kernel logs from Loki", error=str(problem))
            return self._kernel_signals(lines), None
        return self._kernel_signals(lines + read), cursor

    def _kernel_signals(self, lines: Sequence[LogLine]) -> list[Signal]:
        signals = []
        for line in lines:
            report = parse_line(line.line)
            if report is not None:
                finding = self.xid_confirmations.judge(classify_report(report, line.node, self.settings), self.settings)
                signals.append(Signal(finding, line.timestamp_ns / 1e9, "kernel_log"))
        return signals

    def _dcgm_signals(self, now: float) -> list[Signal]:
        if self.prometheus is None:
            return []
        try:
            found = self._dcgm_faults(self.prometheus, now)
        except SourceError as problem:
            log(logging.WARNING, "cannot read DCGM metrics from Prometheus", error=str(problem))
            return []
        signals = []
        for item in found:
            finding = classify_dcgm(item.sample, self.settings)
            if finding is not None:
                signals.append(Signal(finding, item.since, "dcgm", item))
        return signals

    def _dcgm_faults(self, prometheus: PrometheusSource, now: float) -> list[DcgmSignal]:
        """The new DCGM faults: of the answer the reads' thread has made since the last poll when it runs (none while
        its next read is under way), else read now."""
        if self.dcgm_reads is None:
            return prometheus.read(now)
        answer = self.dcgm_reads.take()
        if answer is None:
            return []
        at, found = answer
        if isinstance(found, SourceError):
            raise found
        return prometheus.novelty.new(found, at)


class HealthController:
    def __init__(
        self,
        kube: Kube,
        settings: HealthSettings,
        *,
        identity: str,
        lease_namespace: str,
        metrics: HealthMetrics | None = None,
        step_logs: StepLogs | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.identity = identity
        self.metrics = metrics or HealthMetrics()
        self.metrics.dry_run.set(1 if settings.dry_run else 0)
        self.nodes = NodeCache()
        self.node_events: queue.Queue[WatchEvent] = queue.Queue()
        self.watch = node_watch(kube, self.metrics, self.node_events)
        self.sources = PolledSources(settings, self.metrics)
        logs = step_logs or PodLogs(kube, self.metrics)
        self.requalifier = Requalifier(kube, settings.requalification, self.metrics, logs)
        self.actuator = Actuator(
            kube, self.nodes, self.requalifier, self.metrics, identity, concurrency=settings.node_concurrency
        )
        # Dry-run writes nothing at all, not even the Lease: each dry-run replica observes on its own, and its
        # Loki cursor lives in memory.
        self.lease = (
            None
            if settings.dry_run
            else LeaderLease(kube, lease_namespace, identity, settings.lease_seconds, self.metrics)
        )
        self.duplicates = DuplicateFilter(settings.dedup_window_seconds)
        self.lost_gpus = LostGpuWatch(settings.gpu_lost_grace_seconds, clock=time.time)
        self.breaker: BreakerState | None = None  # counted again from the nodes on taking the lead
        self.cursor: LokiCursor | None = None
        self.leading = False
        self.last_tick = time.monotonic()
        # Every GPU node as the decision sees it, which of them are ours, and which a pass judges.
        self.node_states = NodeStates(settings, self.lost_gpus)
        self._next_full_pass = 0.0  # monotonic: when the watch lists every Node again
        self._saved_cursor: str | None = None
        self._cursor_saved_at = 0.0  # monotonic
        self._trip_saved = False  # the Lease carries the breaker's trip, so its absence means a reset
        self._told: set[tuple[str, str, str, str]] = set()  # dry-run's owner Events: namespace, workload, node, reason
        # The newest fault per node that the breaker held back, and those due again after an operator's reset.
        self._held: dict[str, Signal] = {}
        self._replay: list[Signal] = []
        self._next_renewal = 0.0
        self.take_in_seconds = TAKE_IN_SECONDS
        self.take_in_quiet_seconds = TAKE_IN_QUIET_SECONDS

    # --- entry points ---------------------------------------------------------------------------------------

    def reconcile_once(self) -> Plan:
        """List the nodes, take the lead, read every source once, act, and hand the Lease back."""
        nodes, _ = list_nodes(self.kube)
        self.nodes.apply(WatchEvent("Node", "SYNC", tuple(nodes)))
        deadline = time.monotonic() + 2 * self.settings.lease_seconds
        while not self._lead():
            if time.monotonic() > deadline:
                raise KonduktorError(
                    "another replica holds the health controller's Lease",
                    hint="stop it, or wait until its Lease expires",
                )
            time.sleep(1)
        try:
            return self.pass_once(poll=True, full=True)
        finally:
            self._step_down()

    def run(self, stop: threading.Event) -> None:
        """Watch and act until `stop` is set; then hand the Lease over."""
        self.watch.start()
        self.sources.start_reads(lambda: self.leading)
        next_poll = 0.0
        self._next_full_pass = time.monotonic() + self.settings.full_pass_seconds  # the watch lists first
        try:
            while not stop.is_set():
                self._take_node_events(timeout=1.0)
                now = time.monotonic()
                if self.nodes.synced and (not self.leading or now >= self._next_renewal):
                    self._lead()
                if self.nodes.synced and self.leading:
                    if now >= self._next_full_pass:
                        # The safety net: a list of every Node, after which every GPU node is judged again.
                        self.watch.relist()
                        self._next_full_pass = now + self.settings.full_pass_seconds
                    poll = now >= next_poll
                    next_poll = now + self.settings.poll_seconds if poll else next_poll
                    self.passes(poll)
                self.last_tick = time.monotonic()
        finally:
            self.watch.stop()
            self.sources.stop_reads()
            self._step_down()

    def healthy(self) -> bool:
        """Liveness: the loop is still turning (a hung API call or deadlock stops it)."""
        return time.monotonic() - self.last_tick < max(60.0, 6 * self.settings.poll_seconds)

    @property
    def loki(self) -> LokiSource | None:
        return self.sources.loki

    @property
    def prometheus(self) -> PrometheusSource | None:
        return self.sources.prometheus

    @property
    def judgements(self) -> Counter[str]:
        """How often each node's watch signals were judged (the cost that grows with the fleet)."""
        return self.node_states.judgements

    # --- leadership -----------------------------------------------------------------------------------------

    def _lead(self, changes: dict[str, str] | None = None) -> bool:
        if self.lease is None:
            self.leading = True
            return True
        # Only a replica already leading writes its state: a new leader has none of its own yet.
        changes = changes if self.leading else None
        leading = self.lease.acquire_or_renew(changes)
        if leading and not self.leading:
            self.cursor = LokiCursor.decode(self.lease.annotations.get(CURSOR_ANNOTATION))
            self._saved_cursor = self.cursor.encode() if self.cursor else None
            self.breaker = None
            self._held.clear()
            self.node_states.judge_all = True  # a new leader judges every node first
        if leading and changes:
            self._saved_cursor = changes.get(CURSOR_ANNOTATION, self._saved_cursor)
            self._trip_saved = self._trip_saved or BREAKER_ANNOTATION in changes
        self.leading = leading
        self._next_renewal = time.monotonic() + self.settings.lease_seconds / 3
        return leading

    def _step_down(self) -> None:
        if self.lease is not None and self.leading:
            self.lease.release()
        self.leading = False

    # --- one pass -------------------------------------------------------------------------------------------

    def _take_node_events(self, timeout: float) -> bool:
        """Apply the Node events the watch delivered, waiting up to `timeout` for the first; whether there were any."""
        try:
            event = self.node_events.get(timeout=timeout) if timeout > 0 else self.node_events.get_nowait()
        except queue.Empty:
            return False
        while True:
            self.nodes.apply(event)
            try:
                event = self.node_events.get_nowait()
            except queue.Empty:
                return True

    def _refresh_states(self) -> None:
        """Bring the states of the nodes that changed, or whose requalification started or ended, up to date."""
        changed, relisted = self.nodes.take_changed()
        self.node_states.refresh(changed, relisted, self.nodes.get, self.requalifier.running())

    def passes(self, poll: bool) -> list[Plan]:
        """The loop's passes: when a poll is due, a pass without it first. The Node watch's faults are in memory,
        while a poll reads Loki and the requalification Jobs and waits on each (DCGM is read apart); a lost GPU's
        taint need not wait for them (nor the first taints of a burst, when its first reports come as a poll is
        due)."""
        plans = [self.pass_once(False, full=self.node_states.judge_all)] if poll else []
        return [*plans, self.pass_once(poll, full=self.node_states.judge_all)]

    def pass_once(self, poll: bool, full: bool = False) -> Plan:
        """One pass as the leader: judge the GPU nodes that changed since the last one (`full`: every GPU node),
        read the polled sources when `poll`, decide, and make the writes."""
        now = time.time()
        if poll:
            self.requalifier.refresh()
        self._refresh_states()
        states = self.node_states.states
        signals = self.node_states.watch_signals(full, now)
        results: list[Result] = []
        cursor: LokiCursor | None = None
        kernel: list[Signal] = []
        if poll:
            kernel, dcgm, cursor = self.sources.read(self.cursor, now)
            signals += kernel + dcgm
            results = self.requalifier.results(states)
        self.breaker = breaker = self._breaker(now)
        replayed = self._replayed(states)
        fresh = [s for s in signals if self.duplicates.admit(s.finding)]
        admitted = {s.finding.dedup_key for s in fresh}
        fresh += [s for s in replayed if s.finding.dedup_key not in admitted]
        if not poll and not fresh:
            # Nothing new between polls: the decision would plan nothing (requalifications start on polls).
            self._report_state(now)
            return Plan(actions=(), withheld=(), notices=(), breaker=self.breaker)
        for found in fresh:
            self.metrics.fault(found.finding)
        verdicts = [r.verdict for r in results]
        plan, rest, tainted = self._quarantine(fresh, states, breaker, verdicts, now)
        plan = self._with_work(plan, fresh, poll, now)
        outcome = self._act(plan, rest, states, tainted)
        if poll:
            self._give_back_refused()
        self._measure(outcome, fresh, results)
        # A node whose writes failed gets its signals again: the duplicate filter lets them through, DCGM faults
        # are handed out again, and the log lines are read again because the cursor stays where it was.
        for found in fresh:
            if found.finding.node in outcome.failed:
                self.duplicates.forget(found.finding)
                self.sources.forget(found)
        self.requalifier.acted(r for r in results if r.verdict.node not in outcome.failed)
        if cursor is not None and not outcome.failed:
            self.cursor = cursor
            due = bool(kernel) or time.monotonic() - self._cursor_saved_at >= CURSOR_SAVE_SECONDS
            if self.lease is not None and due and cursor.encode() != self._saved_cursor:
                self._lead({CURSOR_ANNOTATION: cursor.encode()})
                self._cursor_saved_at = time.monotonic()
        if self.lease is not None and plan.breaker.tripped_at is not None and not self._trip_saved:
            self._lead({BREAKER_ANNOTATION: format_time(plan.breaker.tripped_at)})
        self._report_state(now)
        return plan

    def _quarantine(
        self,
        fresh: list[Signal],
        states: dict[str, NodeState],
        breaker: BreakerState,
        verdicts: Sequence[NodeVerdict],
        now: float,
    ) -> tuple[Plan, list[Action], Outcome]:
        """Plan the Node writes for the fresh signals (and the burn-in verdicts) from `breaker` and write their taints
        (`first_taints`) as soon as they are decided: the plan, its Node writes still to make, and the taints'
        outcome. The work on the nodes is read and planned after the last taint (`_with_work`).

        A burst spread over the pass: the faults the Node watch delivers meanwhile (and once one has, those that come
        before none came for `take_in_quiet_seconds`), for up to `take_in_seconds` and while it leads, are judged,
        decided from the breaker as the plan before left it, and tainted in the pass too (added to `fresh`), before
        any of its conditions, Events and work, so that a burst's last node waits for a free writer, not for every
        write of the pass before. A new fault of a node whose taint is on its way is decided once that taint is
        written."""
        writer = TaintWriter(self.actuator, states)
        try:
            plan, rest = self._plan_nodes(fresh, states, breaker, verdicts, now, writer, first=True)
            taking_in_until = time.monotonic() + self.take_in_seconds
            last_arrival: float | None = None  # monotonic: when a fault last arrived during the pass
            waiting: list[Signal] = []
            while True:
                busy = writer.busy()
                listening = time.monotonic() < taking_in_until and self._still_leading()
                if listening:
                    quiet = 0.0 if busy else min(self._quiet_left(last_arrival, taking_in_until), TAKE_IN_WAIT_SECONDS)
                    arrived = self._arrived(quiet)
                    if arrived:
                        last_arrival = time.monotonic()
                    waiting += arrived
                ready = [s for s in waiting if s.finding.node not in busy]
                waiting = [s for s in waiting if s.finding.node in busy]
                if ready:
                    self._refresh_states()  # the taints written since, as their nodes' states
                    fresh += ready
                    later, later_rest = self._plan_nodes(ready, states, plan.breaker, (), time.time(), writer)
                    plan, rest = plan.followed_by(later), rest + later_rest
                elif busy:
                    writer.wait(timeout=TAKE_IN_WAIT_SECONDS)
                elif not (listening and self._quiet_left(last_arrival, taking_in_until) > 0):
                    break
        finally:
            tainted = writer.close()
        return plan, rest, tainted

    def _still_leading(self) -> bool:
        """A leader renews its Lease when it is due during a pass too: one that takes in a storm can outlast a
        third of the Lease. False once another replica holds it."""
        if self.lease is None or not self.leading or time.monotonic() < self._next_renewal:
            return True
        return self._lead()

    def _quiet_left(self, last_arrival: float | None, taking_in_until: float) -> float:
        """How much longer a pass waits for a burst's next fault: until none came for `take_in_quiet_seconds` (none
        at all when no fault came during the pass: one fault, or a few at once, is not a burst)."""
        if last_arrival is None:
            return 0.0
        return max(0.0, min(last_arrival + self.take_in_quiet_seconds, taking_in_until) - time.monotonic())

    def _plan_nodes(
        self,
        fresh: Sequence[Signal],
        states: dict[str, NodeState],
        breaker: BreakerState,
        verdicts: Sequence[NodeVerdict],
        now: float,
        writer: TaintWriter,
        first: bool = False,
    ) -> tuple[Plan, list[Action]]:
        """Plan the Node writes for `fresh` (and the burn-in verdicts) from `breaker` and start their taints: the
        plan and its Node writes still to make. Only a pass's first plan starts requalifications."""
        findings = [s.finding for s in fresh]
        plan = plan_nodes(findings, states, breaker, self.settings, now, verdicts, requalify=first)
        self.breaker = plan.breaker
        held = {finding.dedup_key for finding in plan.held}
        self._held.update((s.finding.node, s) for s in fresh if s.finding.dedup_key in held)
        for notice in plan.notices:
            log(_LEVELS[notice.level], notice.message, node=notice.node)
        taints, rest = first_taints(plan.actions)
        writer.start(taints)
        return plan, rest

    def _arrived(self, timeout: float = 0.0) -> list[Signal]:
        """The watch signals of the Node changes delivered since they were last taken, past the duplicate filter:
        mostly the pass's own taints coming back, which judge to nothing; a burst's next faults. (The lasting
        signals were judged at the start of the pass.)"""
        if not self._take_node_events(timeout):
            return []
        self._refresh_states()
        changed = self.node_states.watch_signals(False, time.time(), lasting=False)
        arrived = [s for s in changed if self.duplicates.admit(s.finding)]
        for found in arrived:
            self.metrics.fault(found.finding)
        return arrived

    def _with_work(self, plan: Plan, fresh: Sequence[Signal], poll: bool, now: float) -> Plan:
        """The plan with the writes of the work on the nodes its quarantines affect, and (on polls) the
        reactivations of the workloads we are requeueing. A cluster without Kueue, or an API error, leaves the work
        alone: the quarantine itself still goes ahead."""
        nodes = {affected.state.name for affected in plan.affected}
        work: dict[str, list[AffectedWorkload]] = {}
        requeued: list[RequeuingWorkload] = []
        try:
            work = workloads_on(self.kube, nodes, self.settings.node_concurrency) if nodes else {}
            requeued = requeuing(self.kube) if poll else []
        except ApiError as problem:
            log(logging.WARNING, "cannot read the Kueue workloads on faulty nodes", error=problem.message)
        attribution = self.sources.attribution([s for s in fresh if s.finding.node in work], now)
        return plan_work(plan, self.settings, now, work, requeued, attribution)

    def _give_back_refused(self) -> None:
        """Admitted workloads whose pods admission keeps refusing give their quota back (controller.refused)."""
        try:
            actions = decide_give_back(*refused_creates(self.kube))
        except ApiError as problem:
            log(logging.WARNING, "cannot read the refused pod creations of admitted workloads", error=problem.message)
            return
        for action in actions:
            if self.settings.dry_run:
                log(logging.INFO, "dry-run: would give back the quota of a workload whose pods are refused",
                    workload=f"{action.namespace}/{action.name}", reason=action.reason)  # fmt: skip
                continue
            try:
                give_back(self.kube, action, COMPONENT, self.identity)
            except ApiError as problem:
                log(logging.ERROR, "write failed", workload=f"{action.namespace}/{action.name}", error=problem.message)
                continue
            log(logging.WARNING, "gave back the quota of a workload whose pods are refused",
                workload=f"{action.namespace}/{action.name}", refused=action.refused, reason=action.reason)  # fmt: skip

    def _breaker(self, now: float) -> BreakerState:
        """The breaker as it stands. The window's quarantines are counted from the nodes on every pass, as
        `konduktor-install nodes` and triage count them: one made by triage counts at once, a node released since
        no longer does, nor one made before the operator's last reset (kept on the Lease). It is tripped while the
        Lease says so; when an operator has removed the trip, the faults it held back are due again at once.
        Dry-run writes no quarantine and no Lease: it counts the quarantines it would have made, in memory."""
        # Only our quarantines count in the window: the breaker is restored from those nodes alone.
        ours = {name: self.node_states.states[name] for name in self.node_states.ours}
        if self.lease is None:
            return self.breaker if self.breaker is not None else restore_breaker(ours, self.settings.breaker, now)
        on_lease = parse_time(self.lease.annotations.get(BREAKER_ANNOTATION))
        reset_at = parse_time(self.lease.annotations.get(BREAKER_RESET_ANNOTATION))
        if self.breaker is None:  # taking the lead
            tripped = on_lease
            self._trip_saved = tripped is not None
        else:
            tripped = self.breaker.tripped_at
            if tripped is not None and self._trip_saved and on_lease is None:
                log(
                    logging.WARNING,
                    "circuit breaker reset: the trip was removed from the Lease; quarantining resumes",
                    held=sorted(self._held),
                )
                if reset_at is None or reset_at < math.floor(tripped):
                    # Removed by hand, without the reset's stamp: the window restarts now, for every reader.
                    reset_at = now
                    self._lead({BREAKER_RESET_ANNOTATION: format_time(now)})
                tripped, self._trip_saved = None, False
                self._replay, self._held = list(self._held.values()), {}
        return restore_breaker(ours, self.settings.breaker, now, tripped, reset_at)

    def _replayed(self, states: dict[str, NodeState]) -> list[Signal]:
        """The held-back faults after a reset: those read once are decided again now; the rest come back on their
        own (still missing GPUs, a condition still set), so only the duplicate filter forgets them. A fault older
        than the node's last release (by hand, or a burn-in) is not: someone judged the node since."""
        replay, self._replay = self._replay, []
        for signal in replay:
            self.duplicates.forget(signal.finding)
        return [
            s
            for s in replay
            if s.source in _READ_ONCE
            and s.finding.node in states
            and s.at > (parse_time(states[s.finding.node].annotations.get(REQUALIFIED_AT)) or 0.0)
        ]

    def _act(self, plan: Plan, rest: Sequence[Action], states: dict[str, NodeState], tainted: Outcome) -> Outcome:
        """The plan's writes after its first taints (`rest`; the taints' outcome `tainted`) and its work, but none
        on a node whose taint failed; dry-run's bookkeeping. The outcome of all of them, the taints included."""
        suppressed = [a for a in (*plan.actions, *plan.withheld) if isinstance(a, RecordEvent)]
        self.metrics.quarantines_blocked.inc(sum(1 for a in suppressed if a.reason == "QuarantineSuppressed"))
        withheld = (*plan.withheld, *plan.work_withheld)
        for action in withheld:
            self.metrics.withheld.labels(action=action_name(action)).inc()
            log(logging.INFO, f"dry-run: would {action_name(action)}", node=action.node, action=repr(action))
        work = [a for a in plan.work if self._untold(a)] if self.settings.dry_run else plan.work
        due = [action for action in (*rest, *work) if action.node not in tainted.failed]
        outcome = self.actuator.execute(due, states).after(tainted)
        self._told.update(_telling(a) for a in work if isinstance(a, TellOwner) and a.node not in outcome.failed)
        done = time.time()
        for action in withheld:
            outcome.finished.setdefault(action.node, done)
        return outcome

    def _untold(self, action: WorkAction) -> bool:
        """Dry-run tells an owner once per workload, node and reason: the node stays in service, so its fault is
        judged again after every dedup window, where a quarantine would have ended the news."""
        return not isinstance(action, TellOwner) or _telling(action) not in self._told

    def _measure(self, outcome: Outcome, fresh: Sequence[Signal], results: Sequence[Result]) -> None:
        """Detection latency per node that got a write: from its earliest new evidence to its last write."""
        evidence = [(s.finding.node, s.at, s.source) for s in fresh]
        evidence += [(r.verdict.node, r.finished_at, "burnin") for r in results]
        earliest: dict[str, tuple[float, str]] = {}
        for node, at, source in evidence:
            if node not in earliest or at < earliest[node][0]:
                earliest[node] = (at, source)
        for node, finished in outcome.finished.items():
            if node in earliest:
                at, source = earliest[node]
                self.metrics.detection_latency.labels(source=source).observe(max(0.0, finished - at))

    def _report_state(self, now: float) -> None:
        self._refresh_states()  # the writes just made; their nodes are judged in the next pass
        states = self.node_states.states
        reasons = {
            name: (states[name].annotations.get(QUARANTINE_REASON) or "unknown").split(" ", 1)[0]
            for name in self.node_states.ours
        }
        self.metrics.quarantine_state(reasons)
        self.metrics.gpu_nodes.set(len(states))
        breaker = self.breaker or BreakerState()
        window = self.settings.breaker.window_seconds
        self.metrics.breaker_tripped.set(1 if breaker.tripped else 0)
        self.metrics.breaker_window.set(sum(1 for t in breaker.recent if now - t < window))
        self.metrics.breaker_limit.set(breaker_limit(len(states), self.settings.breaker))


def _telling(action: TellOwner) -> tuple[str, str, str, str]:
    """Which news an owner Event is: the Workload (the last object told) and the node, and the reason."""
    return action.namespace, action.objects[-1].name, action.node, action.reason

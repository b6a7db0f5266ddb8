"""Every GPU node as the decision sees it, and which of them a pass judges (docs/design/health-passes.md).

Pure: the controller hands in the Nodes that changed (from its cache) and the nodes whose requalification runs;
this keeps each node's `NodeState`, which of them are ours (quarantined by this controller), and which are due a
judgement of their watch signals (lost GPUs, other tools' conditions): the changed ones, those whose signal
lasts, and every one in a full pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from konduktor.health.classify import Finding, LostGpuWatch, condition_finding
from konduktor.health.decide import NodeState, quarantined_by_us
from konduktor.health.node_reading import Node, gpu_node_state
from konduktor.health.settings import HealthSettings
from konduktor.health.signals import DcgmSignal
from konduktor.kube.timestamps import parse_time
from konduktor.vocabulary import REQUALIFIED_AT


@dataclass(frozen=True)
class Signal:
    """A finding and when its evidence appeared (log line, sample, first sight of missing GPUs, Job end)."""

    finding: Finding
    at: float
    source: str  # one of observability.metrics.DETECTION_SOURCES
    dcgm: DcgmSignal | None = None  # what Prometheus showed, to show it again if the writes fail


class NodeStates:
    """The GPU nodes' states between passes, and the bookkeeping of which are due a judgement."""

    def __init__(self, settings: HealthSettings, lost_gpus: LostGpuWatch) -> None:
        self.settings = settings
        self.lost_gpus = lost_gpus
        self.states: dict[str, NodeState] = {}
        self.ours: set[str] = set()
        self._running: set[str] = set()  # nodes whose requalification runs, as last read
        self._to_judge: set[str] = set()  # changed since their last judgement
        self._lasting: set[str] = set()  # a signal that lasts: judged again on every pass
        self.judge_all = True  # the next pass judges every GPU node (a new leader's first)
        self._relisted = False  # a list replaced the cache since the last judgement: every node is judged
        # How often each node's watch signals were judged (the cost that grows with the fleet).
        self.judgements: Counter[str] = Counter()

    def refresh(
        self,
        changed: Iterable[str],
        relisted: bool,
        node: Callable[[str], Node | None],
        running: set[str],
    ) -> None:
        """Bring the NodeState of every node that changed up to date; a node whose state differs is due a
        judgement. A list that replaced the cache (the first, a 410 Gone, the safety net's) makes every node due."""
        self._relisted = self._relisted or relisted
        names = set(changed) | (running ^ self._running)
        self._running = running
        for name in names:
            found = node(name)
            state = gpu_node_state(found, self.settings, name in running) if found is not None else None
            if state is None:
                if self.states.pop(name, None) is not None:
                    self.ours.discard(name)
                    self._to_judge.discard(name)
                    self._lasting.discard(name)
                    self.lost_gpus.forget(name)
                continue
            if state != self.states.get(name):
                self._to_judge.add(name)
            self.states[name] = state
            if quarantined_by_us(state):
                self.ours.add(name)
            else:
                self.ours.discard(name)

    def watch_signals(self, full: bool, now: float, lasting: bool = True) -> list[Signal]:
        """Judge the nodes due: changed ones and lasting signals; in a full pass, every GPU node. Without `lasting`,
        the changed ones only (the faults a pass takes in: it judged the lasting ones when it began)."""
        if full or self._relisted:
            judged = list(self.states)
        else:
            judged = sorted(self._to_judge | self._lasting if lasting else self._to_judge)
        self._to_judge, self.judge_all, self._relisted = set(), False, False
        self.judgements.update(judged)
        lost, short = self._lost_gpu_signals(judged, now)
        conditions = self._condition_signals(judged, now)
        self._lasting = (self._lasting - set(judged)) | short | {s.finding.node for s in conditions}
        return lost + conditions

    def _lost_gpu_signals(self, due: Sequence[str], now: float) -> tuple[list[Signal], set[str]]:
        """Lost-GPU findings of the nodes judged now, and those of them short of GPUs (in their grace or not)."""
        signals, short = [], set()
        for name in due:
            state = self.states[name]
            if state.gpu_expected is None or state.gpu_allocatable is None:
                continue
            finding = self.lost_gpus.observe(name, state.gpu_allocatable, state.gpu_expected)
            since = self.lost_gpus.short_since(name)
            if since is not None:
                short.add(name)
            if finding is not None:
                signals.append(Signal(finding, since or now, "allocatable"))
        return signals, short

    def _condition_signals(self, due: Sequence[str], now: float) -> list[Signal]:
        signals = []
        for name in due:
            state = self.states[name]
            requalified = parse_time(state.annotations.get(REQUALIFIED_AT))
            for condition in state.conditions:
                finding = condition_finding(state.name, condition, requalified, self.settings.node_conditions)
                if finding is not None:
                    # The condition's own transition time dates the evidence, for the detection latency.
                    signals.append(Signal(finding, condition.changed_at or now, "node_condition"))
        return signals

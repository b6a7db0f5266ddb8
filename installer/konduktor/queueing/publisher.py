"""konduktor-core's capacity publisher as a service: the cluster kept current from watches, the team namespaces'
copies written only when the capacity changes, and one heartbeat Lease renewed at a slow period
(docs/design/capacity.md).

Nodes, bound pods, ResourceFlavors, ClusterQueues and team namespaces are each listed once and then watched
(`konduktor.kube.watch.ListWatch`: resumed where a watch ends, listed again after 410 Gone). Changes are gathered
for `settle` seconds after a round that changed the capacity, so a burst of pod starts costs one round of writes,
and a round writes only the copies whose revision differs; a change after a quiet spell goes out within seconds.
The heartbeat is renewed every `heartbeat` seconds while every watch is healthy: a publisher that stops, or stops
seeing the cluster, lets it age, and readers are told. An unchanged fleet costs one Lease write per period,
whatever the number of nodes and teams.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from konduktor.kube.client import ApiError, Kube
from konduktor.kube.watch import ListWatch, WatchEvent
from konduktor.queueing.capacity import HEARTBEAT_SECONDS, Fleet, micro_time, revision, slim_node, slim_pod
from konduktor.queueing.cluster import BOUND_PODS, Publication, renew_heartbeat, write_copies
from konduktor.vocabulary import CAPACITY_CONFIGMAP, KUEUE_API, TEAM_LABEL

SETTLE_SECONDS = 30.0
# Between two computations of a capacity that turned out unchanged (one costs ~0.3 s of a core at 10,000 nodes).
QUIET_ROUND_SECONDS = 5.0
# Every this many heartbeats, each team namespace's copy is read again (one deleted by hand is written back).
RESYNC_HEARTBEATS = 10
Say = Callable[[str], None]


def _name_only(obj: dict[str, object]) -> dict[str, object]:
    meta = obj.get("metadata", {})
    return {"metadata": {"name": meta.get("name", "") if isinstance(meta, dict) else ""}}


def watches(kube: Kube, events: queue.Queue[WatchEvent], on_error: Callable[[str, ApiError], None]) -> list[ListWatch]:
    """What the capacity is computed from, each kind listed once and then watched."""
    return [
        ListWatch(kube, "v1", "Node", events, slim=slim_node, on_error=on_error),
        ListWatch(kube, "v1", "Pod", events, field_selector=BOUND_PODS, slim=slim_pod, on_error=on_error),
        ListWatch(kube, KUEUE_API, "ResourceFlavor", events, on_error=on_error),
        ListWatch(kube, KUEUE_API, "ClusterQueue", events, on_error=on_error),
        ListWatch(kube, "v1", "Namespace", events, label_selector=TEAM_LABEL, slim=_name_only, on_error=on_error),
    ]


class Publisher:
    """The service's state between rounds: the fleet from the watches, each namespace's copy revision, the current
    revision and when it changed, and when the next round and heartbeat are due (monotonic seconds)."""

    def __init__(self, kube: Kube, heartbeat: float, settle: float, say: Say, resync: int = RESYNC_HEARTBEATS) -> None:
        self.kube = kube
        self.heartbeat = heartbeat
        self.settle = settle
        self.resync = resync
        self.say = say
        self.events: queue.Queue[WatchEvent] = queue.Queue()
        self.watches = watches(kube, self.events, self._failed)
        self.fleet = Fleet()
        self.known: dict[str, str | None] = {}
        self.current: str | None = None
        self.changed_at = ""
        self.dirty = True
        self.next_round = 0.0
        self.next_beat = 0.0
        self.beats = 0
        self.rounds = 0

    def _failed(self, source: str, problem: ApiError) -> None:
        again = "; listing again" if problem.status == 410 else "; retrying"
        self.say(f"watch of {source}s: {problem.message}{again}")

    def wait(self, now: float) -> float:
        """How long to wait for events before something is due (at most 1 s)."""
        if not all(w.synced for w in self.watches):
            return 1.0
        due = [*([self.next_beat] if self.current is not None else []), *([self.next_round] if self.dirty else [])]
        return min(max(min(due) - now, 0.0), 1.0) if due else 1.0

    def drain(self, timeout: float) -> None:
        """Every event that arrives within `timeout`, and all that follow at once, into the fleet."""
        try:
            self.fleet.apply(self.events.get(timeout=timeout))
        except queue.Empty:
            return
        self.dirty = True
        with contextlib.suppress(queue.Empty):
            while True:
                self.fleet.apply(self.events.get_nowait())

    def publish_round(self, now: float) -> Publication:
        """The capacity computed again, written to the copies that differ."""
        # After a change, the next one waits the settle period; events that changed nothing (a kubelet's status,
        # a pod without GPUs) only space the computations, so a change after a quiet spell goes out at once.
        self.dirty, self.next_round = False, now + min(self.settle, QUIET_ROUND_SECONDS)
        capacity = self.fleet.capacity()
        if revision(capacity) != self.current:
            self.current, self.changed_at = revision(capacity), micro_time(datetime.now(UTC))
            self.next_beat = now  # the heartbeat names the new revision at once
            self.next_round = now + self.settle
        first = not self.rounds
        done = write_copies(self.kube, capacity, self.changed_at, sorted(self.fleet.namespaces), self.known)
        self.rounds += 1
        if done.written or first:
            self.say(
                f"published ConfigMap {CAPACITY_CONFIGMAP} in {len(done.written)} team namespaces "
                f"({len(done.unchanged)} unchanged): revision {done.revision}, {capacity.nodes} GPU nodes"
            )
        for namespace, reason in done.refused.items():
            self.say(f"not published in namespace {namespace}: {reason}")
        if done.refused:  # tried again a heartbeat later
            self.dirty, self.next_round = True, now + max(self.settle, self.heartbeat)
        return done

    def beat(self, now: float) -> None:
        """The heartbeat renewed, if every watch is healthy (else it ages and readers are told)."""
        assert self.current is not None
        self.next_beat = now + self.heartbeat
        if all(w.healthy for w in self.watches):
            refused = renew_heartbeat(self.kube, self.current, datetime.now(UTC), self.heartbeat)
            if refused:
                self.say(f"heartbeat not renewed: {refused}")
        self.beats += 1
        if self.beats % self.resync == 0:
            self.known.clear()
            self.dirty = True

    def run(self, stop: threading.Event, on_round: Callable[[Publication], None] | None = None) -> None:
        for watch in self.watches:
            watch.start()
        try:
            while not stop.is_set():
                self.drain(self.wait(time.monotonic()))
                if not all(w.synced for w in self.watches):
                    continue
                now = time.monotonic()
                if self.dirty and now >= self.next_round:
                    done = self.publish_round(now)
                    if on_round is not None:
                        on_round(done)
                if self.current is not None and now >= self.next_beat:
                    self.beat(now)
        finally:
            for watch in self.watches:
                watch.stop()


def serve(
    kube: Kube,
    stop: threading.Event,
    *,
    heartbeat: float = HEARTBEAT_SECONDS,
    settle: float = SETTLE_SECONDS,
    say: Say = lambda _line: None,
    on_round: Callable[[Publication], None] | None = None,
    resync: int = RESYNC_HEARTBEATS,
) -> None:
    """Publish until `stop` is set. `say` gets one line per round that wrote something, per refusal and per watch
    failure; `on_round` each round's Publication; every `resync` heartbeats the copies are read again."""
    Publisher(kube, heartbeat, settle, say, resync).run(stop, on_round)

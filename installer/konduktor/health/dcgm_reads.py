"""The DCGM read on a thread of its own: the loop's passes, and so the Node watch's faults, never wait for Prometheus.

At thousands of GPU nodes Prometheus takes seconds to say which health series moved (6.9 s at 10,000 nodes of 8 GPUs
on the 2-core bench machine: bench/README.md); a loop that waited for it would leave a lost GPU reported meanwhile
waiting as long. This thread reads every `poll_seconds` and keeps the latest answer; each poll takes the answer read
since the one before, if there is one, and hands its faults out once (`PrometheusSource.novelty`, on the loop's
thread). A poll that finds no new answer reads no DCGM fault: the next one will.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from konduktor.health.signals import DcgmSignal
from konduktor.observability.answers import SourceError

Answer = tuple[float, list[DcgmSignal] | SourceError]  # when it was read, and what it found or why it could not read


class DcgmReads:
    """`read` every `every` seconds (or back to back when a read takes longer), while `leading` says so: a standby
    replica does not add to Prometheus's load."""

    def __init__(self, read: Callable[[float], list[DcgmSignal]], every: float, leading: Callable[[], bool]) -> None:
        self._read = read
        self._every = every
        self._leading = leading
        self._lock = threading.Lock()
        self._latest: Answer | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dcgm-reads", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ends the reads; one under way ends with its request (the thread is a daemon: shutdown need not wait)."""
        self._stopping.set()
        self._thread.join(timeout=1)

    def take(self) -> Answer | None:
        """The answer read since the last call, and when it was read; None while the next read is under way."""
        with self._lock:
            latest, self._latest = self._latest, None
        return latest

    def _run(self) -> None:
        while not self._stopping.is_set():
            started = time.monotonic()
            if self._leading():
                at = time.time()
                found: list[DcgmSignal] | SourceError
                try:
                    found = self._read(at)
                except SourceError as problem:
                    found = problem
                with self._lock:
                    self._latest = (at, found)
            self._stopping.wait(max(0.0, started + self._every - time.monotonic()))

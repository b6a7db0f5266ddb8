"""Polling until a condition holds, with an error that says what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable

from konduktor.errors import KonduktorError


def poll_until(check: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    """True as soon as `check` holds; False when it still does not once `timeout` seconds have passed. `check`
    runs at least once, and once more at the deadline, so what it last saw is what holds when the wait ends:
    for a wait whose end is itself an answer (report what is known by then), where `wait_until` would fail."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float = 120,
    interval: float = 0.5,
    on_timeout: Callable[[], KonduktorError] | None = None,
) -> None:
    if not poll_until(check, timeout, interval):
        raise (on_timeout() if on_timeout else KonduktorError(f"timed out after {timeout:.0f}s waiting for {what}"))

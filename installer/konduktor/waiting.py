"""Polling until a condition holds, with an error that says what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable

from konduktor.errors import KonduktorError


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float = 120,
    interval: float = 0.5,
    on_timeout: Callable[[], KonduktorError] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise (on_timeout() if on_timeout else KonduktorError(f"timed out after {timeout:.0f}s waiting for {what}"))

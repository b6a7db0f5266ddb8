"""The API server's timestamps (RFC 3339, as in `lastTransitionTime` and `completionTime`) as epoch seconds."""

from __future__ import annotations

from datetime import datetime


def parse_time(text: str | None) -> float | None:
    """Epoch seconds; None for a missing or unreadable timestamp."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None

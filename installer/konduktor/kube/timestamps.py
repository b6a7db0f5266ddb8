"""The API server's timestamps (RFC 3339, as in `lastTransitionTime` and `completionTime`): read as epoch seconds,
written at whole seconds in UTC ("2026-01-12T10:00:00Z", a `metav1.Time`)."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(text: str | None) -> float | None:
    """Epoch seconds; None for a missing or unreadable timestamp."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def format_time(when: float) -> str:
    """Epoch seconds as the API server writes a `metav1.Time`: RFC 3339, UTC, whole seconds."""
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

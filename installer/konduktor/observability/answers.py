"""The shape of the answers of Loki's and Prometheus's HTTP APIs, checked at the edge: the health controller's
signal sources and `trace export`'s Prometheus read.

An answer of the wrong shape (a bare list, a timestamp that is not a number, a label that is not a string) is as
failed as an HTTP 500 or a closed port: each reader's parse function returns typed data or raises the one
`SourceError`. The controller's watch loop logs it, sets `konduktor_signal_source_up{source=...}` to 0 and goes on
with the other signals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# Nanosecond Unix timestamps have 19 digits; the bound also keeps int() away from Python's digit limit.
_MAX_DIGITS = 20


class SourceError(Exception):
    """A signal source could not be asked, or gave an answer that is not what its API documents."""


def _where(path: str) -> str:
    return path or "the answer"


def mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise SourceError(f"{_where(path)}: expected an object, got {type(value).__name__}")
    return value


def array(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise SourceError(f"{_where(path)}: expected an array, got {type(value).__name__}")
    return value


def text(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise SourceError(f"{_where(path)}: expected a string, got {type(value).__name__}")
    return value


def labels(value: object, path: str) -> dict[str, str]:
    """A label set: an object whose values are all strings."""
    return {key: text(item, f"{path}.{key}") for key, item in mapping(value, path).items()}


def whole_number(value: object, path: str) -> int:
    """A non-negative integer, as a JSON number or a string of digits (Loki sends nanoseconds as strings)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**_MAX_DIGITS:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= _MAX_DIGITS:
        return int(value)
    raise SourceError(f"{_where(path)}: expected a whole number, got {str(value)[:40]!r}")


def finite_number(value: object, path: str) -> float:
    """A finite number, as a JSON number or a string (Prometheus sends sample values as strings)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SourceError(f"{_where(path)}: expected a number, got {type(value).__name__}")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise SourceError(f"{_where(path)}: expected a number, got {str(value)[:40]!r}") from None
    if not math.isfinite(number):
        raise SourceError(f"{_where(path)}: expected a finite number, got {str(value)[:40]!r}")
    return number


def success_data(answer: object, result_type: str) -> list[Any]:
    """`data.result` of a Prometheus-style API answer (Loki's has the same envelope) of the expected type."""
    envelope = mapping(answer, "")
    if envelope.get("status") != "success":
        raise SourceError(f"status is {str(envelope.get('status'))[:40]!r}, not 'success'")
    data = mapping(envelope.get("data"), "data")
    if data.get("resultType") != result_type:
        raise SourceError(f"data.resultType is {str(data.get('resultType'))[:40]!r}, not {result_type!r}")
    return array(data.get("result"), "data.result")

"""What the parsers share: the error for unreadable output, and readers of values that a tool may leave out."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any


class OutputError(ValueError):
    """A tool's output is missing, truncated or not in the expected format."""


_NOT_AVAILABLE = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions)\]?$", re.I)


def present(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if not value or _NOT_AVAILABLE.match(value) else value


def as_int(value: str | None) -> int | None:
    value = present(value)
    if value is None:
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(float(value))
    except ValueError:
        return None


def as_float(value: str | None) -> float | None:
    value = present(value)
    if value is None:
        return None
    try:
        return float(value.split()[0])  # tolerate units when `nounits` was forgotten
    except ValueError:
        return None


def as_flag(value: str | None) -> bool | None:
    value = present(value)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in {"yes", "true", "enabled", "active"}:
        return True
    if lowered in {"no", "false", "disabled", "inactive"}:
        return False
    number = as_int(value)
    return None if number is None else number > 0


def json_objects(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list; a tool that writes something else there has nothing to read."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def json_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def json_object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def schema_lines(text: str, schema: str) -> Iterator[dict[str, Any]]:
    """JSON objects of one schema among other log lines (library warnings, torchrun chatter)."""
    for line in text.splitlines():
        start = line.find("{")
        if start < 0 or schema not in line:
            continue
        try:
            record = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("schema") == schema:
            yield record

"""Kernel log lines from Loki's `query_range`, read incrementally behind a cursor that survives restarts.

Each read covers [cursor - late_seconds, now): the margin catches lines that reached Loki after later lines of
other nodes had been read (shippers batch), and the cursor remembers the lines of that margin it has already
handed out, so nothing is handed out twice. The controller stores the cursor (as text) only after it acted on
the lines, so a crash in between re-reads them rather than losing them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import requests

from konduktor.health.logs import log
from konduktor.health.settings import LokiSettings
from konduktor.health.signals import LogLine
from konduktor.health.telemetry import HealthMetrics
from konduktor.observability.answers import SourceError, array, labels, mapping, success_data, text, whole_number

QUERY_RANGE = "/loki/api/v1/query_range"
_NS = 1_000_000_000


@dataclass(frozen=True)
class LokiCursor:
    """Every line before `end_ns` has been handed out; `seen` are the keys of those inside the re-read margin."""

    end_ns: int
    seen: frozenset[str] = frozenset()

    def encode(self) -> str:
        return " ".join([str(self.end_ns), ",".join(sorted(self.seen))]).strip()

    @classmethod
    def decode(cls, text: str | None) -> LokiCursor | None:
        """The cursor from its text; None for text that is not one (edited by hand), which restarts the reading."""
        end, _, seen = (text or "").strip().partition(" ")
        if not end.isdigit():
            return None
        return cls(int(end), frozenset(key for key in seen.split(",") if _key_time(key) is not None))


def _key_time(key: str) -> int | None:
    stamp, _, digest = key.partition(".")
    return int(stamp) if stamp.isdigit() and digest else None


def line_key(stream: Mapping[str, str], timestamp_ns: int, line: str) -> str:
    """`<timestamp_ns>.<hash>`: identifies a line within the re-read margin, and says when it was logged."""
    identity = json.dumps([sorted(stream.items()), line], separators=(",", ":"))
    return f"{timestamp_ns}.{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


def entries(answer: object, node_label: str) -> list[tuple[LogLine | None, str, int]]:
    """A query_range answer as (line or None when its stream names no node, key, timestamp), oldest first.

    Raises SourceError when the answer is not in the shape Loki documents, whatever part is wrong.
    """
    found: list[tuple[LogLine | None, str, int]] = []
    for index, item in enumerate(success_data(answer, "streams")):
        where = f"data.result[{index}]"
        stream = mapping(item, where)
        names = labels(stream.get("stream"), f"{where}.stream")
        node = names.get(node_label)
        for number, value in enumerate(array(stream.get("values"), f"{where}.values")):
            entry = array(value, f"{where}.values[{number}]")
            # Newer Loki versions add a third element (structured metadata); only the first two are needed.
            if len(entry) < 2:
                raise SourceError(f"{where}.values[{number}]: expected [timestamp, line], got {len(entry)} element(s)")
            timestamp = whole_number(entry[0], f"{where}.values[{number}][0]")
            line = text(entry[1], f"{where}.values[{number}][1]")
            key = line_key(names, timestamp, line)
            # A stream without the node label cannot be acted on; it is still marked seen so it is read once.
            found.append((LogLine(node, timestamp, line) if node else None, key, timestamp))
    found.sort(key=lambda entry: (entry[2], entry[1]))
    return found


def unseen(batch: Sequence[tuple[LogLine | None, str, int]], seen: set[str]) -> list[LogLine]:
    """The lines of `batch` whose keys are not in `seen`; adds their keys to it."""
    new = []
    for line, key, _ in batch:
        if key not in seen:
            seen.add(key)
            if line is not None:
                new.append(line)
    return new


def cursor_after(seen: set[str], end_ns: int, late_ns: int) -> LokiCursor:
    """Lines before `end_ns` are done; only the keys inside the next read's margin need remembering."""
    margin = end_ns - late_ns
    return LokiCursor(end_ns, frozenset(key for key in seen if (_key_time(key) or 0) >= margin))


class LokiSource:
    def __init__(self, settings: LokiSettings, metrics: HealthMetrics, timeout: float = 10) -> None:
        self.settings = settings
        self.metrics = metrics
        self.timeout = timeout
        self.http = requests.Session()
        if settings.tenant:
            self.http.headers["X-Scope-OrgID"] = settings.tenant

    def read(self, cursor: LokiCursor | None, now_ns: int) -> tuple[list[LogLine], LokiCursor]:
        """New lines up to `now_ns` and the cursor after them. Raises SourceError when Loki cannot be asked or
        gives an answer of the wrong shape."""
        late_ns = int(self.settings.late_seconds * _NS)
        if cursor is None:
            cursor = LokiCursor(now_ns - int(self.settings.lookback_seconds * _NS))
        start = cursor.end_ns - late_ns
        seen = set(cursor.seen)
        lines: list[LogLine] = []
        try:
            while True:
                batch = entries(self._query(start, now_ns), self.settings.node_label)
                lines += unseen(batch, seen)
                if len(batch) < self.settings.limit:
                    break
                if batch[-1][2] == start:
                    # More lines than the limit carry one timestamp: the next page cannot start past them.
                    log(logging.WARNING, "Loki page full of one timestamp; raise loki.limit", limit=self.settings.limit)
                    break
                # Loki's start is inclusive: the page's last timestamp is read again and its lines skipped as seen.
                start = batch[-1][2]
        except requests.RequestException as problem:
            self.metrics.source_up.labels(source="loki").set(0)
            raise SourceError(str(problem)) from problem
        except SourceError as problem:
            self.metrics.source_up.labels(source="loki").set(0)
            raise SourceError(f"unexpected Loki answer: {problem}") from problem
        self.metrics.source_up.labels(source="loki").set(1)
        return lines, cursor_after(seen, now_ns, late_ns)

    def lines_between(self, start_ns: int, end_ns: int) -> list[LogLine]:
        """Every line from `start_ns` up to `end_ns`, oldest first (a job's time window, for triage)."""
        lines, _ = self.read(LokiCursor(start_ns + int(self.settings.late_seconds * _NS)), end_ns)
        return lines

    def _query(self, start_ns: int, end_ns: int) -> object:
        response = self.http.get(
            self.settings.url + QUERY_RANGE,
            params={
                "query": self.settings.query,
                "start": str(start_ns),
                "end": str(end_ns),  # exclusive
                "limit": str(self.settings.limit),
                "direction": "forward",
            },
            timeout=self.timeout,
        )
        response.raise_for_status()
        answer: object = response.json()  # truncated or non-JSON bodies raise requests.JSONDecodeError
        return answer

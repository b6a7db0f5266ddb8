"""A tiny HTTP server answering Loki's /loki/api/v1/query_range from lines added by the caller.

Shared by the health controller's simulated-cluster tests and `bench/health_bench.py`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest


@dataclass
class LokiApi:
    lines: list[tuple[dict[str, str], int, str]] = field(default_factory=list)
    queries: list[dict[str, str]] = field(default_factory=list)

    def add(self, node_name: str, line: str, at_ns: int | None = None) -> int:
        stamp = at_ns or time.time_ns()
        self.lines.append(({"job": "kernel", "node": node_name}, stamp, line))
        return stamp

    def answer(self, query: dict[str, str]) -> dict[str, Any]:
        self.queries.append(query)
        start, end, limit = int(query["start"]), int(query["end"]), int(query.get("limit", 100))
        chosen = sorted((e for e in self.lines if start <= e[1] < end), key=lambda e: e[1])[:limit]
        streams: dict[str, dict[str, Any]] = {}
        for labels, stamp, line in chosen:
            stream = streams.setdefault(json.dumps(labels, sort_keys=True), {"stream": labels, "values": []})
            stream["values"].append([str(stamp), line])
        return {"status": "success", "data": {"resultType": "streams", "result": list(streams.values())}}

    def serve(self) -> ThreadingHTTPServer:
        loki = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path != "/loki/api/v1/query_range":
                    self.send_error(404)
                    return
                body = json.dumps(loki.answer({k: v[0] for k, v in parse_qs(url.query).items()})).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


@pytest.fixture()
def loki() -> Iterator[tuple[LokiApi, str]]:
    """A Loki query_range server in this process, and its URL."""
    api = LokiApi()
    server = api.serve()
    yield api, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()

"""`/healthz` and `/metrics` over HTTP, served from a thread beside the watch loop."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class HealthServer:
    """`healthy()` answers /healthz (200 or 503); /metrics is the registry in Prometheus's text format."""

    def __init__(
        self, registry: CollectorRegistry, healthy: Callable[[], bool], port: int, host: str = "0.0.0.0"
    ) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] == "/metrics":
                    self._answer(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif self.path.split("?", 1)[0] == "/healthz":
                    ok = healthy()
                    self._answer(200 if ok else 503, b"ok\n" if ok else b"stalled\n", "text/plain")
                else:
                    self._answer(404, b"not found\n", "text/plain")

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every few seconds would drown the controller's own log

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

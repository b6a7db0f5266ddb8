"""A fault injector for the health controller's HTTP signal sources: a tiny server that answers every GET with
the next of the bodies it was given (the last one repeats): JSON of the wrong shape, truncated JSON, anything."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serving(bodies: Sequence[bytes]) -> Iterator[str]:
    """The base URL of a server that answers request n with bodies[min(n, last)], status 200, as JSON."""
    answered = [0]
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                body = bodies[min(answered[0], len(bodies) - 1)]
                answered[0] += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

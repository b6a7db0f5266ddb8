"""The supervisor each of the simulated cluster's platform processes runs under (`konduktor.sim.platform`): it
restarts its process when it exits, with a back-off, as the kubelet restarts a container.

Only the standard library: every `up` on a simulated cluster starts one supervisor per process, and the package's
clients and parsers would cost each of them a second of CPU to import for nothing.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time


def supervise(argv: list[str], max_backoff: float = 60.0) -> int:
    """Run `argv` until SIGTERM, restarting it when it exits (1 s, 2 s, ... up to `max_backoff` apart; back to 1 s
    after it ran a minute), as the kubelet restarts a container. SIGTERM is passed on to it."""
    stop = threading.Event()
    child: list[subprocess.Popen[bytes]] = []

    def terminate(*_: object) -> None:
        stop.set()
        if child:
            with contextlib.suppress(ProcessLookupError):
                child[-1].terminate()

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    backoff = 1.0
    while not stop.is_set():
        started = time.monotonic()
        child.append(subprocess.Popen(argv))
        code = child[-1].wait()
        child.clear()
        if stop.is_set():
            break
        if time.monotonic() - started > 60:
            backoff = 1.0
        print(f"sim supervisor: {' '.join(argv[1:3])} exited with {code}; restarting in {backoff:g} s", flush=True)
        stop.wait(backoff)
        backoff = min(backoff * 2, max_backoff)
    return 0


def main(arguments: list[str]) -> int:
    argv = arguments[1:] if arguments[:1] == ["--"] else arguments
    if not argv:
        print("usage: python -m konduktor.sim.supervisor -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    return supervise(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

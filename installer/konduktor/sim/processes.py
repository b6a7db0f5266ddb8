"""Local processes of the simulated cluster: free ports, liveness, stopping, pid files, and their logs' last lines."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# Listening ports are picked below the kernel's ephemeral range (net.ipv4.ip_local_port_range), where every
# outgoing connection takes its local port: a port picked there can be taken by any client's connect() between
# the pick and the server's bind, which happens when several clusters start at once.
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a server started next; outside the ephemeral range when it can be."""
    try:
        ephemeral_low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = LOWEST_PORT
    for _ in range(100):
        port = random.randrange(LOWEST_PORT, ephemeral_low) if ephemeral_low > LOWEST_PORT + 1000 else 0
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            chosen: int = probe.getsockname()[1]
            return chosen
    raise OSError("no free port below the ephemeral range")


def distinct_free_ports(count: int) -> list[int]:
    """`count` ports, each free now and none the same, for servers started together."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is not serving anything.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def stop_process(pid: int, grace: float = 10) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; returns once the process is gone (or after a last `grace`)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not gone(pid, grace):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        gone(pid, grace)


def gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        # Reap it when it is our child; otherwise its parent (or init) does.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@dataclass(frozen=True)
class PidFile:
    """A long-running process of the sim, started in a session of its own and named by the file its pid is in."""

    path: Path

    def pid(self) -> int | None:
        """The process, while it is alive."""
        try:
            pid = int(self.path.read_text())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None

    def start(self, command: list[str], log_path: Path) -> None:
        """Starts `command` with its output appended to `log_path`, and records its pid."""
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.path.write_text(str(process.pid))

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None:
            stop_process(pid)
        self.path.unlink(missing_ok=True)

"""How many simulated clusters a test run starts: each test process watches for the kube-apiservers started under
its own state directory, and the run's summary adds them up (bench/README.md, "The test suite's time", keeps the
figure). A cluster's start is most of its cost, so the number is the suite's budget to watch."""

from __future__ import annotations

import os
import threading
from pathlib import Path

# Set once, in the process that starts the others (pytest-xdist's workers inherit it): where each process leaves
# its count for the run's summary.
COUNTS_DIR = "KONDUKTOR_TEST_CLUSTER_COUNTS"
_POLL_SECONDS = 1.0  # a cluster's API server lives for seconds at the least


def api_servers_under(root: str) -> set[tuple[int, str]]:
    """The kube-apiserver processes whose command line names a path under `root`: (pid, start time) pairs, so that
    a pid used again is counted again."""
    marker = f"{root.rstrip(os.sep)}{os.sep}"
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if not args or Path(args[0]).name != "kube-apiserver" or not any(marker in arg for arg in args):
                continue
            started = (entry / "stat").read_text().rsplit(")", 1)[1].split()[19]
        except (OSError, IndexError):
            continue
        found.add((int(entry.name), started))
    return found


class ClusterCounter:
    """Polls this process's state directory for API servers until stopped; `count` is how many it saw."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.seen: set[tuple[int, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cluster-counter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return len(self.seen)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seen |= api_servers_under(self.root)
            self._stop.wait(_POLL_SECONDS)


def record(count: int, worker: str) -> None:
    """Leaves this process's count for the summary; a process that started none (xdist's controller) says
    nothing."""
    directory = os.environ.get(COUNTS_DIR)
    if directory and count:
        (Path(directory) / f"{worker or 'main'}.count").write_text(str(count))


def summary() -> str | None:
    """`simulated clusters started: N (gw0 3, gw1 9, ...)`, or None when no process counted."""
    directory = os.environ.get(COUNTS_DIR)
    files = sorted(Path(directory).glob("*.count")) if directory else []
    if not files:
        return None
    counts = {path.stem: int(path.read_text()) for path in files}
    parts = ", ".join(f"{worker} {count}" for worker, count in counts.items())
    return f"simulated clusters started: {sum(counts.values())} ({parts})"

"""Kernel log lines from files on the controller's machine, one file per node: `<directory>/<node name>.log`.

For clusters without Loki whose nodes' kernel logs reach one place as files (a central syslog server writing a file
per host, mounted into the controller), and for the simulated cluster, whose nodes' kernel logs are such files.
Lines are read as `tail -F` reads them: what a file holds when the controller starts is not read (a restarted
controller must not take out again a node that was requalified since), a file that appears later is read from its
start, one that shrank (rotated, truncated) from its start again, and a line is read only once its newline is
written. Unlike Loki's cursor, lines read in a pass whose writes failed are not read again: the node's next
kernel line, or its other signals, bring the fault back.
"""

from __future__ import annotations

import time
from pathlib import Path

from konduktor.health.signals import LogLine

SUFFIX = ".log"
# Bytes read per file and pass: a flood in one file cannot stall the loop; the rest is read on the next pass.
MAX_READ = 1 << 20


class KernelLogFiles:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # What is there when the controller starts is history.
        self.offsets: dict[str, int] = {node: size for node, path in self._files() if (size := _size(path)) >= 0}

    def _files(self) -> list[tuple[str, Path]]:
        try:
            paths = sorted(p for p in self.directory.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
        except OSError:
            return []
        return [(p.name[: -len(SUFFIX)], p) for p in paths]

    def read(self) -> list[LogLine]:
        """The lines appended since the last read, each with its node and the time it was read."""
        lines: list[LogLine] = []
        now = time.time_ns()
        for node, path in self._files():
            size = _size(path)
            if size < 0:
                continue
            offset = self.offsets.get(node, 0)
            if size < offset:
                offset = 0
            if size == offset:
                continue
            try:
                with path.open("rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read(MAX_READ)
            except OSError:
                continue
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self.offsets[node] = offset + len(complete)
            lines += [
                LogLine(node, now, text) for text in complete.decode(errors="replace").splitlines() if text.strip()
            ]
        return lines


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1

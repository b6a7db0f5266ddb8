"""The step envelope: every step prints its tool output, then one end line with the exit code."""

from __future__ import annotations

import json
from dataclasses import dataclass

STEP_END_MARKER = "KONDUKTOR-STEP-END"

# `timeout` exits 124 when it stopped the tool and 137 when it had to SIGKILL it.
_TIMEOUT_EXIT_CODES = frozenset({124, 137})


@dataclass(frozen=True)
class StepLog:
    output: str
    exit_code: int | None  # None: no end line, the container was killed or the log is cut
    seconds: int | None = None

    @property
    def timed_out(self) -> bool:
        return self.exit_code in _TIMEOUT_EXIT_CODES

    @property
    def finished(self) -> bool:
        return self.exit_code is not None


def split_step_log(text: str) -> StepLog:
    lines = text.splitlines()
    for position in range(len(lines) - 1, -1, -1):
        line = lines[position].strip()
        if line.startswith(STEP_END_MARKER):
            try:
                end = json.loads(line[len(STEP_END_MARKER) :])
                exit_code = int(end["exit_code"])
            except (ValueError, KeyError, TypeError):
                break
            seconds = end.get("seconds")
            return StepLog(
                output="\n".join(lines[:position]),
                exit_code=exit_code,
                seconds=int(seconds) if isinstance(seconds, int) else None,
            )
    return StepLog(output=text, exit_code=None)

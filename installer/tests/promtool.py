"""The pinned promtool for the dashboard and alert tests: built on first use, never skipped for being missing."""

from __future__ import annotations

import subprocess
from pathlib import Path

from konduktor.tools.toolbox import Toolbox

REPO = Path(__file__).resolve().parents[2]


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    binary = Toolbox().path("promtool")
    return subprocess.run([str(binary), *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=600)


def report(result: subprocess.CompletedProcess[str]) -> str:
    """What promtool said, for an assertion message."""
    return f"promtool exited {result.returncode}\n{result.stdout}\n{result.stderr}"

"""The pinned amtool and alertmanager for the alerting tests: built on first use, never skipped for being missing."""

from __future__ import annotations

import subprocess
from pathlib import Path

from konduktor.tools.toolbox import Toolbox


def amtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    binary = Toolbox().path("amtool")
    return subprocess.run([str(binary), *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=600)


def report(result: subprocess.CompletedProcess[str]) -> str:
    """What amtool said, for an assertion message."""
    return f"amtool exited {result.returncode}\n{result.stdout}\n{result.stderr}"

"""Where Konduktor keeps its caches and state on this machine."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Tool builds and other reusable artefacts (`KONDUKTOR_CACHE`, else ~/.cache/konduktor)."""
    if explicit := os.environ.get("KONDUKTOR_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "konduktor"


def state_dir() -> Path:
    """Running simulated clusters (`KONDUKTOR_STATE`, else ~/.local/state/konduktor)."""
    if explicit := os.environ.get("KONDUKTOR_STATE"):
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "konduktor"

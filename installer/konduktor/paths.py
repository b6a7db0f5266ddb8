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


PRODUCT = Path(__file__).resolve().parent / "product"


def product_dir(name: str) -> Path:
    """One of the product's folders that commands read: charts, examples, policies or dashboards.

    The wheel carries them as package data under konduktor/product/; in a checkout that folder holds
    symbolic links to the top-level folders, so an installed package and the source tree resolve alike.
    """
    directory = PRODUCT / name
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: not part of this installation of Konduktor")
    return directory.resolve()

"""What a collective benchmark measured: nccl-tests (text or -J JSON) and our allreduce.py read into one shape."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """One half of an nccl-tests row: out-of-place or in-place."""

    name: str
    time_us: float
    algbw_gb_s: float
    busbw_gb_s: float
    wrong: int | None  # None when validation was off (`-c 0` prints N/A)


@dataclass(frozen=True)
class CollectiveRow:
    size_bytes: int
    placements: tuple[Placement, ...]

    @property
    def busbw_gb_s(self) -> float:
        # Mean over placements: what `# Avg bus bandwidth` reports when -b == -e, the number the
        # goals were measured with (docs/design/burnin.md#nccl-tests).
        return statistics.fmean(p.busbw_gb_s for p in self.placements)


@dataclass(frozen=True)
class CollectiveResult:
    rows: tuple[CollectiveRow, ...]
    out_of_bounds: int | None = None
    avg_busbw_gb_s: float | None = None
    ranks: int | None = None
    hosts: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def largest(self) -> CollectiveRow | None:
        return max(self.rows, key=lambda row: row.size_bytes, default=None)

    @property
    def wrong(self) -> int | None:
        """Wrong elements over all rows; None when no row was validated."""
        counts = [p.wrong for row in self.rows for p in row.placements if p.wrong is not None]
        return sum(counts) if counts else None

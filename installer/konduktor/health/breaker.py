"""The fleet breaker and the controller as on-call sees them: how many quarantines the window holds against which
limit, since when the breaker is tripped, who leads, whether the controller runs dry.

Pure: the caller passes the GPU nodes as the controller reads them (`health.node_reading.gpu_node_state`), the
annotations and spec of its Lease, its settings and the clock. The count is the controller's own
(`decide.restore_breaker`), so `konduktor-install nodes` and `status` never disagree with what it will do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from konduktor.health.decide import NodeState, breaker_limit, window_quarantines
from konduktor.health.settings import HealthSettings
from konduktor.kube.timestamps import format_time, parse_time

# Annotations of the controller's Lease (`leader.LEASE_NAME`).
# When the fleet breaker tripped. It outlives restarts and leader changes; an operator resets the breaker with
# `konduktor-install nodes breaker reset --reason ...`, which removes it and stamps the reset.
BREAKER_ANNOTATION = "konduktor.ai/breaker-tripped-at"
# When an operator last reset the breaker: the quarantines before it no longer count against the window.
BREAKER_RESET_ANNOTATION = "konduktor.ai/breaker-reset-at"

RESET_COMMAND = "konduktor-install nodes breaker reset --reason '...'"


def _stamp(when: float | None) -> str | None:
    return None if when is None else format_time(when)


def _span(seconds: float) -> str:
    return f"{seconds / 60:g}m" if seconds >= 60 and seconds % 60 == 0 else f"{seconds:g}s"


@dataclass(frozen=True)
class BreakerView:
    """The breaker's state; the JSON shape of `breaker` in `nodes -o json` and `status -o json`."""

    quarantines: int  # new quarantines in the window that count (still in place, made after the last reset)
    limit: int  # quarantines allowed per window; one more trips it
    window_seconds: float
    tripped_since: str | None  # RFC 3339, UTC; None while closed
    reset_at: str | None  # the operator's last reset
    counted: tuple[str, ...]  # the nodes whose quarantine counts
    dry_run: bool  # the controller runs dry: it keeps its own count in memory, none of it on the cluster

    @property
    def tripped(self) -> bool:
        return self.tripped_since is not None

    def describe(self) -> str:
        # In full words: "2 of 2 quarantines in 10m" did not tell a newcomer on call what is counted against what.
        window = (
            f"{self.quarantines} of at most {self.limit} automatic quarantines in the last "
            f"{_span(self.window_seconds)} used"
        )
        if self.dry_run:
            return f"dry run: each replica counts the quarantines it would have made; the nodes show {window}"
        if self.tripped:
            return f"TRIPPED since {self.tripped_since} ({window}): no new quarantine until {RESET_COMMAND}"
        return f"closed: {window}; a quarantine past the limit trips it"

    def row(self) -> dict[str, Any]:
        row = asdict(self)
        row["counted"] = list(self.counted)
        row["tripped"] = self.tripped
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> BreakerView:
        names = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in row.items() if k in names}, "counted": tuple(row["counted"])})


def breaker_view(
    states: Mapping[str, NodeState], settings: HealthSettings, lease_annotations: Mapping[str, str], now: float
) -> BreakerView:
    """The breaker as the controller restores it from the cluster: its count and limit over these GPU nodes, its
    trip and last reset from its Lease."""
    tripped = parse_time(lease_annotations.get(BREAKER_ANNOTATION))
    reset_at = parse_time(lease_annotations.get(BREAKER_RESET_ANNOTATION))
    counted = window_quarantines(states, settings.breaker, now, reset_at)
    return BreakerView(
        quarantines=len(counted),
        limit=breaker_limit(len(states), settings.breaker),
        window_seconds=settings.breaker.window_seconds,
        tripped_since=_stamp(tripped) if tripped is not None else None,
        reset_at=_stamp(reset_at),
        counted=tuple(name for _, name in counted),
        dry_run=settings.dry_run,
    )


@dataclass(frozen=True)
class ControllerView:
    """The health controller's mode and leader; the JSON shape of `controller` in `nodes` and `status`."""

    installed: bool  # konduktor-core's settings ConfigMap was found
    dry_run: bool
    leader: str | None  # the Lease's holder
    lease_renewed: str | None
    lease_expired: bool  # the holder stopped renewing (by this machine's clock)

    def describe(self) -> str:
        if not self.installed:
            return "not installed (no konduktor-core settings)"
        mode = "dry run: decides and reports, writes nothing" if self.dry_run else "acting"
        if self.dry_run:
            return f"{mode}; no leader (dry-run replicas hold no Lease)"
        if self.leader is None:
            return f"{mode}; no leader (no replica holds the Lease)"
        expired = " (Lease expired)" if self.lease_expired else ""
        return f"{mode}; leader {self.leader}{expired}"

    def row(self) -> dict[str, Any]:
        return asdict(self)


def controller_view(settings: HealthSettings | None, lease: Mapping[str, Any] | None, now: float) -> ControllerView:
    """Mode from the deployed settings, leader from the Lease (`holderIdentity`; expired when `renewTime` plus
    `leaseDurationSeconds` has passed)."""
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity") or None
    renewed = parse_time(spec.get("renewTime"))
    duration = float(spec.get("leaseDurationSeconds") or 0)
    expired = holder is not None and (renewed is None or now - renewed > duration)
    return ControllerView(
        installed=settings is not None,
        dry_run=settings is not None and settings.dry_run,
        leader=holder,
        lease_renewed=_stamp(renewed),
        lease_expired=expired,
    )

"""One active replica: whoever holds the coordination.k8s.io/v1 Lease and keeps renewing it.

The Lease also carries the state that must outlive a replica (the Loki cursor, as an annotation). Every write
sends the resourceVersion it read, so a replica that lost the Lease without noticing (paused, partitioned)
gets 409 Conflict instead of overwriting its successor's cursor.

Expiry is judged the way client-go does: by how long the holder's record has stayed unchanged on this
replica's own clock, never by comparing the holder's renewTime with this clock (clocks of two machines differ).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from konduktor.health.logs import log
from konduktor.health.node_writes import FIELD_MANAGER
from konduktor.health.telemetry import HealthMetrics
from konduktor.kube.client import ApiError, Kube

LEASE_API = "coordination.k8s.io/v1"
LEASE_NAME = "konduktor-health"


def micro_time(when: float) -> str:
    """A `metav1.MicroTime` (the Lease's renewTime and acquireTime): microseconds, which the API requires there,
    unlike the whole seconds of `kube.timestamps.format_time`."""
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderLease:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        identity: str,
        duration_seconds: float,
        metrics: HealthMetrics,
        name: str = LEASE_NAME,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.identity = identity
        self.duration = duration_seconds
        self.metrics = metrics
        self.name = name
        self.clock = clock
        self.lease: dict[str, Any] | None = None
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0

    @property
    def annotations(self) -> Mapping[str, str]:
        return dict((self.lease or {}).get("metadata", {}).get("annotations", {}))

    @property
    def held(self) -> bool:
        return self.lease is not None and self.lease.get("spec", {}).get("holderIdentity") == self.identity

    def acquire_or_renew(self, annotations: Mapping[str, str | None] | None = None) -> bool:
        """Take the Lease if it is free or expired, or renew it if ours, writing `annotations` with it.

        True while this replica leads. An API error counts as not leading: acting without a confirmed Lease
        could make two leaders.
        """
        try:
            return self._attempt(dict(annotations or {}))
        except ApiError as problem:
            self.metrics.api_error("update", "leases", problem)
            log(logging.WARNING, "cannot reach the leader Lease", error=problem.message)
            self.lease = None
            return False

    def release(self, annotations: Mapping[str, str | None] | None = None) -> None:
        """Give the Lease up on shutdown so that a standby takes over at once instead of after it expires."""
        if not self.held or self.lease is None:
            return
        try:
            self.lease = self._write(self.lease, {"holderIdentity": None}, dict(annotations or {}))
        except ApiError as problem:
            self.metrics.api_error("update", "leases", problem)
            log(logging.WARNING, "cannot release the leader Lease; it expires by itself", error=problem.message)

    def _attempt(self, annotations: dict[str, str | None]) -> bool:
        # A leader renews from the Lease it wrote last (one request); a conflict means it must look again.
        lease = self.lease if self.held else None
        for _ in range(3):
            lease = lease or self.kube.get(LEASE_API, "Lease", self.name, self.namespace)
            if lease is None:
                return self._create(annotations)
            spec = lease.get("spec", {})
            holder = spec.get("holderIdentity")
            self._observe(spec)
            if holder and holder != self.identity and not self._expired():
                self.lease = lease
                return False
            taking_over = holder != self.identity
            now = time.time()
            changes: dict[str, Any] = {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.duration)),
                "renewTime": micro_time(now),
            }
            if taking_over:
                changes["acquireTime"] = micro_time(now)
                changes["leaseTransitions"] = int(spec.get("leaseTransitions", 0)) + 1
            try:
                self.lease = self._write(lease, changes, annotations)
            except ApiError as problem:
                if problem.status == 409:
                    lease = None  # changed since read (another replica, or an operator's edit): look again
                    continue
                raise
            if taking_over:
                log(logging.INFO, "became the leader", identity=self.identity, previous=holder or None)
            return True
        return False

    def _create(self, annotations: dict[str, str | None]) -> bool:
        now = micro_time(time.time())
        lease = {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "annotations": {k: v for k, v in annotations.items() if v is not None},
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.duration)),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            self.lease = self.kube.create(lease, field_manager=FIELD_MANAGER)
        except ApiError as problem:
            if problem.status == 409:
                return False  # another replica created it first
            raise
        log(logging.INFO, "became the leader", identity=self.identity)
        return True

    def _write(self, lease: dict[str, Any], spec: dict[str, Any], annotations: dict[str, str | None]) -> dict[str, Any]:
        patch: dict[str, Any] = {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]}, "spec": spec}
        if annotations:
            patch["metadata"]["annotations"] = annotations
        return self.kube.patch(
            LEASE_API, "Lease", self.name, patch, namespace=self.namespace, field_manager=FIELD_MANAGER
        )

    def _observe(self, spec: Mapping[str, Any]) -> None:
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()

    def _expired(self) -> bool:
        duration = float(self._observed[2] or self.duration) if self._observed else self.duration
        return self.clock() - self._observed_at > duration

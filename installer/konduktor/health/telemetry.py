"""The controller's Prometheus metrics, built from the contract in `konduktor.observability.metrics`.

Names, label names and help come from `HEALTH_CONTROLLER_METRICS`, so dashboards and alert rules that are held
to that contract see exactly what the controller exports. Each controller owns its registry: several controllers
in one process (tests) do not share counters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from konduktor.health.classify import Finding
from konduktor.kube.client import ApiError
from konduktor.observability.metrics import DETECTION_LATENCY_BUCKETS, HEALTH_CONTROLLER_METRICS, Metric, MetricType

Family = Counter | Gauge | Histogram


def _family(metric: Metric, registry: CollectorRegistry) -> Family:
    if metric.type is MetricType.COUNTER:
        return Counter(metric.name, metric.help, metric.labels, registry=registry)
    if metric.type is MetricType.GAUGE:
        return Gauge(metric.name, metric.help, metric.labels, registry=registry)
    return Histogram(metric.name, metric.help, metric.labels, registry=registry, buckets=DETECTION_LATENCY_BUCKETS)


class HealthMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        made = {metric.name: _family(metric, self.registry) for metric in HEALTH_CONTROLLER_METRICS}
        self.faults = cast(Counter, made["konduktor_gpu_faults_total"])
        self.quarantined_nodes = cast(Gauge, made["konduktor_quarantined_nodes"])
        self.node_quarantined = cast(Gauge, made["konduktor_node_quarantined"])
        self.gpu_nodes = cast(Gauge, made["konduktor_gpu_nodes"])
        self.breaker_tripped = cast(Gauge, made["konduktor_quarantine_breaker_tripped"])
        self.breaker_window = cast(Gauge, made["konduktor_quarantine_breaker_window_quarantines"])
        self.breaker_limit = cast(Gauge, made["konduktor_quarantine_breaker_limit"])
        self.quarantines = cast(Counter, made["konduktor_quarantines_total"])
        self.quarantines_blocked = cast(Counter, made["konduktor_quarantines_blocked_total"])
        self.releases = cast(Counter, made["konduktor_releases_total"])
        self.requalifications = cast(Counter, made["konduktor_requalifications_total"])
        self.detection_latency = cast(Histogram, made["konduktor_detection_latency_seconds"])
        self.api_errors = cast(Counter, made["konduktor_api_errors_total"])
        self.source_up = cast(Gauge, made["konduktor_signal_source_up"])
        self.dry_run = cast(Gauge, made["konduktor_dry_run"])
        self.withheld = cast(Counter, made["konduktor_withheld_actions_total"])
        self._quarantine_series: set[tuple[str, str]] = set()

    def fault(self, finding: Finding) -> None:
        code = "" if finding.code is None or finding.kind not in ("xid", "sxid") else str(finding.code)
        self.faults.labels(node=finding.node, kind=finding.kind, code=code, reason=finding.reason).inc()

    def api_error(self, verb: str, resource: str, problem: ApiError) -> None:
        code = str(problem.status) if problem.status else "unreachable"
        self.api_errors.labels(verb=verb, resource=resource, code=code).inc()

    def quarantine_state(self, reasons: Mapping[str, str]) -> None:
        """`reasons`: every quarantined node and its quarantine reason; released nodes lose their series."""
        current = set(reasons.items())
        for node, reason in self._quarantine_series - current:
            self.node_quarantined.remove(node, reason)
        for node, reason in current:
            self.node_quarantined.labels(node=node, reason=reason).set(1)
        self._quarantine_series = current
        self.quarantined_nodes.set(len(reasons))

    def sample(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The current value of one series (for tests and the log), None when it does not exist."""
        value = self.registry.get_sample_value(name, dict(labels or {}))
        return None if value is None else float(value)

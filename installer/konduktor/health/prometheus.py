"""DCGM exporter series from Prometheus's `/api/v1/query`, read as raw samples and turned into DCGM samples.

Each poll reads the raw samples of the health fields over a short window (a range-vector selector evaluated as an
instant query), of the nodes whose health series moved in it alone: a first query names them (`moved_query`; none
in a quiet fleet), as the raw samples of every GPU would be 80,000 series of 4 samples and some 40 MB of answer at
1,000 nodes, each poll. Reading raw samples instead of `increase()` gives the time at which the fault showed, which
the detection-latency metric measures from, and lets the controller hand out each fault once:

- counters (ECC double-bit total, NVLink error totals, throttle durations): a rise between two samples is a
  fault; its value is the rise over the window;
- `DCGM_FI_DEV_XID_ERRORS` holds the code of the last Xid, so a change to a non-zero code is a fault;
- other gauges (row remap failed / pending) are states: a non-zero value is a fault for as long as it lasts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TypeVar

import requests

from konduktor.gpu.catalog import DCGM_RULES, DCGM_XID_FIELD
from konduktor.health.classify import DcgmSample
from konduktor.health.gpu_loss import Attribution, LostGpu, is_device_plugin_xid
from konduktor.health.settings import PrometheusSettings
from konduktor.health.signals import DcgmSignal, SignalShape
from konduktor.health.telemetry import HealthMetrics
from konduktor.observability.answers import SourceError, array, finite_number, labels, mapping, success_data
from konduktor.observability.metrics import MetricType, lookup

HEALTH_FIELDS = (DCGM_XID_FIELD, *DCGM_RULES)
Answer = TypeVar("Answer")


def shape(metric: str) -> SignalShape:
    if metric == DCGM_XID_FIELD:
        return "code"
    known = lookup(metric)
    # The NVLink totals are not in the dashboards' inventory; DCGM names every counter field *_TOTAL.
    counter = known.type is MetricType.COUNTER if known else metric.endswith("_TOTAL")
    return "counter" if counter else "state"


@dataclass(frozen=True)
class DcgmSeries:
    node: str
    gpu: str
    metric: str
    points: tuple[tuple[float, float], ...]  # (unix seconds, value), oldest first


def signal(series: DcgmSeries) -> DcgmSignal | None:
    """What one series says over the window, or None when it shows no fault."""
    kind = shape(series.metric)
    points = series.points
    if not points:
        return None
    if kind == "counter":
        rise, since = 0.0, None
        for (_, before), (at, value) in pairwise(points):
            # A counter that went down was reset (exporter restart); its new value is all rise.
            step = value - before if value >= before else value
            if step > 0:
                rise += step
                since = since if since is not None else at
        return None if since is None else _signal(series, rise, since, kind)
    if kind == "code":
        changes = [(at, value) for (_, before), (at, value) in pairwise(points) if value != before]
        at, value = changes[-1] if changes else (0.0, 0.0)
        return _signal(series, value, at, kind) if value > 0 else None
    at, value = points[-1]
    if value <= 0:
        return None
    for earlier, earlier_value in reversed(points):
        if earlier_value <= 0:
            break
        at = earlier
    return _signal(series, value, at, kind)


def _signal(series: DcgmSeries, value: float, since: float, kind: SignalShape) -> DcgmSignal:
    return DcgmSignal(DcgmSample(series.node, series.gpu, series.metric, value), since, kind)


def matrix(answer: object, node_label: str, gpu_label: str) -> list[DcgmSeries]:
    """The series of an instant query's matrix answer that name a node. Raises SourceError when the answer is not
    in the shape Prometheus documents, whatever part is wrong."""
    series = []
    for index, item in enumerate(success_data(answer, "matrix")):
        where = f"data.result[{index}]"
        found = mapping(item, where)
        names = labels(found.get("metric"), f"{where}.metric")
        points = _points(found, where)
        if node_label not in names:
            continue
        if "__name__" not in names:
            raise SourceError(f"{where}.metric: no __name__")
        series.append(DcgmSeries(names[node_label], names.get(gpu_label, ""), names["__name__"], tuple(points)))
    return series


def _points(found: Mapping[str, object], where: str) -> tuple[tuple[float, float], ...]:
    points = []
    for number, value in enumerate(array(found.get("values"), f"{where}.values")):
        point = array(value, f"{where}.values[{number}]")
        if len(point) != 2:
            raise SourceError(f"{where}.values[{number}]: expected [time, value], got {len(point)} element(s)")
        at = finite_number(point[0], f"{where}.values[{number}][0]")
        points.append((at, finite_number(point[1], f"{where}.values[{number}][1]")))
    return tuple(points)


def attribution(answer: object, settings: PrometheusSettings) -> Attribution:
    """What one node's `DCGM_FI_DEV_XID_ERRORS` series over a window (a matrix answer) say about its lost GPUs: the
    GPUs that showed an Xid the device plugin withdraws GPUs for, each with the pods its series named in the window
    (the exporter's Kubernetes pod mapping labels the series of a GPU a pod holds), and whether any series of the
    node names a pod. A GPU's series before its Xid count too: a holder whose process died at once may have let go
    of the GPU by the time the exporter read the Xid. Raises SourceError when the answer is not in the shape
    Prometheus documents."""
    codes: dict[str, int] = {}
    holders: dict[str, set[tuple[str, str]]] = {}
    mapped = False
    for index, item in enumerate(success_data(answer, "matrix")):
        where = f"data.result[{index}]"
        found = mapping(item, where)
        names = labels(found.get("metric"), f"{where}.metric")
        gpu = names.get(settings.gpu_label, "")
        pod, namespace = names.get(settings.pod_label, ""), names.get(settings.namespace_label, "")
        if pod and namespace:
            mapped = True
            holders.setdefault(gpu, set()).add((namespace, pod))
        shown = [int(value) for _, value in _points(found, where) if is_device_plugin_xid(int(value))]
        if shown:
            codes[gpu] = shown[-1]
    lost = tuple(LostGpu(gpu, codes[gpu], tuple(sorted(holders.get(gpu, ())))) for gpu in sorted(codes))
    return Attribution(lost, mapped)


class Novelty:
    """Hands out each fault once per controller process: a counter's rise or a code change stays inside the
    window for several polls, and a state is reported when it starts, not again while it lasts. A restarted
    controller reports faults inside the window again; the decision step turns a repeat for a quarantined node
    into no write."""

    def __init__(self, window_seconds: float) -> None:
        self.window = window_seconds
        self._reported: set[tuple[str, str, str, float]] = set()
        self._states: set[tuple[str, str, str]] = set()

    def new(self, signals: Iterable[DcgmSignal], now: float) -> list[DcgmSignal]:
        fresh: list[DcgmSignal] = []
        states: set[tuple[str, str, str]] = set()
        for found in signals:
            sample = found.sample
            if found.shape == "state":
                key = (sample.node, sample.gpu, sample.metric)
                states.add(key)
                if key not in self._states:
                    fresh.append(found)
            elif (rise := (sample.node, sample.gpu, sample.metric, found.since)) not in self._reported:
                self._reported.add(rise)
                fresh.append(found)
        # A state that ended may start again and is then reported again.
        self._states = states
        # A rise that has left the window cannot be read again, so it need not be remembered.
        self._reported = {rise for rise in self._reported if rise[3] >= now - self.window}
        return fresh

    def forget(self, found: DcgmSignal) -> None:
        """Hand this fault out again on the next read: the writes it caused failed."""
        sample = found.sample
        self._reported.discard((sample.node, sample.gpu, sample.metric, found.since))
        self._states.discard((sample.node, sample.gpu, sample.metric))


class PrometheusSource:
    def __init__(self, settings: PrometheusSettings, metrics: HealthMetrics, timeout: float = 10) -> None:
        self.settings = settings
        self.metrics = metrics
        self.timeout = timeout
        self.http = requests.Session()
        self.novelty = Novelty(settings.window_seconds)

    def read(self, now: float) -> list[DcgmSignal]:
        """New faults; raises SourceError when Prometheus cannot be asked or gives an answer of the wrong shape."""
        return self.novelty.new(self.fetch(now), now)

    def fetch(self, now: float) -> list[DcgmSignal]:
        """Every fault the window shows, handed out before or not; raises SourceError as `read` does."""
        nodes = self.moved_nodes(now)
        if not nodes:
            return []
        series = self._series(health_query(self.settings.window_seconds, self._matcher(nodes)), now)
        return [f for f in map(signal, series) if f is not None]

    def moved_nodes(self, now: float) -> list[str]:
        """The nodes with a health series that moved in the window: a superset of those `signal` finds a fault in
        (a counter's rise or reset, a code's change, a state set are each a change or a non-zero value)."""
        window = self.settings.window_seconds
        answer = self._ask(moved_query(window, ""), now, moved)
        return sorted({names[self.settings.node_label] for _, names in answer if self.settings.node_label in names})

    def faults_between(self, start: float, end: float, nodes: Collection[str]) -> list[DcgmSignal]:
        """The faults the health series of `nodes` show between `start` and `end`, one per series and judged as
        `read` judges them (a state as it stands at `end`); nothing is held back as already reported.

        A long job's every sample on every GPU of its nodes would pass Prometheus's per-query sample limit (50
        million by default) and be a large answer besides, so one query first names the series that moved in the
        window (a counter or code that changed, a state that was set), and only those are read sample by sample.
        The read starts a window earlier: a counter's rise right after `start` is seen only against a sample
        before it."""
        if not nodes:
            return []
        seconds = end - start + self.settings.window_seconds
        found = []
        for field, series_labels in self._ask(moved_query(seconds, self._matcher(nodes)), end, moved):
            exactly = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted({**series_labels, "__name__": field}.items()))
            series = self._series(f"{{{exactly}}}[{_duration(seconds)}]", end)
            found += [f for f in map(signal, series) if f is not None]
        # A state that began before the window and lasts into it is a fault in the window from its start.
        return [replace(f, since=max(f.since, start)) for f in found if f.since >= start or f.shape == "state"]

    def attribution(self, node: str, start: float, end: float) -> Attribution:
        """Which GPUs of `node` showed an Xid the device plugin withdraws GPUs for between `start` and `end`, and
        which pods held them (`attribution`); raises SourceError as `read` does."""
        selector = f"{self.settings.node_label}={json.dumps(node)}"
        query = f"{DCGM_XID_FIELD}{{{selector}}}[{_duration(max(end - start, 1.0))}]"
        return self._ask(query, end, lambda answer: attribution(answer, self.settings))

    def _matcher(self, nodes: Collection[str]) -> str:
        """The label matcher of these nodes' series. Node names are DNS subdomains: a dot is the only regex character
        in them (escaped for RE2 and PromQL)."""
        names = "|".join(n.replace(".", "\\\\.") for n in sorted(nodes))
        return f'{self.settings.node_label}=~"{names}"'

    def _series(self, query: str, at: float) -> list[DcgmSeries]:
        return self._ask(query, at, lambda answer: matrix(answer, self.settings.node_label, self.settings.gpu_label))

    def _ask(self, query: str, at: float, read: Callable[[object], Answer]) -> Answer:
        """An instant query's answer, as `read` reads it; raises SourceError when Prometheus cannot be asked or
        gives an answer of the wrong shape."""
        try:
            response = self.http.get(
                self.settings.url + "/api/v1/query", params={"query": query, "time": f"{at:.3f}"}, timeout=self.timeout
            )
            response.raise_for_status()
            found = read(response.json())  # truncated or non-JSON bodies raise requests.JSONDecodeError
        except requests.RequestException as problem:
            self.metrics.source_up.labels(source="prometheus").set(0)
            raise SourceError(str(problem)) from problem
        except SourceError as problem:
            self.metrics.source_up.labels(source="prometheus").set(0)
            raise SourceError(f"unexpected Prometheus answer: {problem}") from problem
        self.metrics.source_up.labels(source="prometheus").set(1)
        return found


def health_query(seconds: float, matcher: str) -> str:
    """The raw samples of every health field of the series `matcher` selects, over the last `seconds`."""
    return f'{{__name__=~"{"|".join(HEALTH_FIELDS)}",{matcher}}}[{_duration(seconds)}]'


FIELD_LABEL = "konduktor_field"  # names a series' field in `moved_query`'s answer, whose functions drop __name__


def moved_query(seconds: float, matcher: str) -> str:
    """The health series (of those `matcher` selects) that moved in the last `seconds`: a counter or code that
    changed, a state that was set. One instant query, evaluated series by series within Prometheus."""
    terms = []
    for field in HEALTH_FIELDS:
        function = "max_over_time" if shape(field) == "state" else "changes"
        moved = f"{function}({field}{{{matcher}}}[{_duration(seconds)}]) > 0"
        terms.append(f'label_replace({moved}, "{FIELD_LABEL}", "{field}", "", "")')
    return " or ".join(terms)


def moved(answer: object) -> list[tuple[str, dict[str, str]]]:
    """The (field, labels) of each series in `moved_query`'s answer."""
    found = []
    for index, item in enumerate(success_data(answer, "vector")):
        where = f"data.result[{index}]"
        names = labels(mapping(item, where).get("metric"), f"{where}.metric")
        field = names.pop(FIELD_LABEL, "")
        if field not in HEALTH_FIELDS:
            raise SourceError(f"{where}.metric: {FIELD_LABEL} is {field[:60]!r}, not a health field")
        found.append((field, names))
    return found


def _duration(seconds: float) -> str:
    # Whole milliseconds: PromQL takes no fractions or exponents, which a long window in seconds would need.
    return f"{round(seconds * 1000)}ms"

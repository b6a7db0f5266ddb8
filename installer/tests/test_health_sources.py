"""Every answer Loki or Prometheus can give, of any shape, is either read or a failed poll of that source
(SourceError, `konduktor_signal_source_up{source=...} 0`), never a crash of the controller."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from garbage_api import serving
from hypothesis import given, settings
from hypothesis import strategies as st

from konduktor.gpu.catalog import DCGM_RULES, DCGM_XID_FIELD
from konduktor.gpu.kernel_log import parse_line
from konduktor.health.classify import classify_dcgm, classify_report
from konduktor.health.loki import LokiSource, entries, unseen
from konduktor.health.prometheus import Novelty, PrometheusSource, matrix, moved, signal
from konduktor.health.settings import HealthSettings, LokiSettings, PrometheusSettings
from konduktor.health.telemetry import HealthMetrics
from konduktor.observability.answers import SourceError

SETTINGS = HealthSettings()
LOKI = LokiSettings(url="http://loki.invalid", query='{job="kernel"}', node_label="node")
PROMETHEUS = PrometheusSettings(url="http://prometheus.invalid")
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def either(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the documented shape, sometimes anything: reaches deep into the answer."""
    return st.one_of(valid, valid, valid, json_values)


loki_values = st.lists(
    either(st.tuples(st.integers(0, 2**63).map(str), either(st.sampled_from([XID, "plain line"]))).map(list)),
    max_size=3,
)
loki_streams = st.lists(
    either(
        st.fixed_dictionaries(
            {
                "stream": either(st.fixed_dictionaries({"node": either(st.sampled_from(["gpu-0", "gpu-1"]))})),
                "values": either(loki_values),
            }
        )
    ),
    max_size=3,
)
loki_answers = either(
    st.fixed_dictionaries(
        {
            "status": either(st.just("success")),
            "data": either(st.fixed_dictionaries({"resultType": either(st.just("streams")), "result": loki_streams})),
        }
    )
)
metric_names = st.sampled_from([DCGM_XID_FIELD, *DCGM_RULES, "OTHER"])
prometheus_points = st.lists(
    either(st.tuples(either(st.floats(0, 2e9)), either(st.integers(0, 100).map(str))).map(list)), max_size=4
)
prometheus_series = st.lists(
    either(
        st.fixed_dictionaries(
            {
                "metric": either(
                    st.fixed_dictionaries({"__name__": metric_names, "Hostname": st.just("gpu-0"), "gpu": st.just("0")})
                ),
                "values": either(prometheus_points),
            }
        )
    ),
    max_size=3,
)
prometheus_answers = either(
    st.fixed_dictionaries(
        {
            "status": either(st.just("success")),
            "data": either(
                st.fixed_dictionaries({"resultType": either(st.just("matrix")), "result": prometheus_series})
            ),
        }
    )
)


@settings(max_examples=400)
@given(answer=loki_answers)
def test_any_loki_answer_is_read_or_a_source_error(answer: Any) -> None:
    try:
        batch = entries(json.loads(json.dumps(answer)), LOKI.node_label)
    except SourceError:
        return
    for line in unseen(batch, set()):  # and what the loop does with the lines it read
        report = parse_line(line.line)
        if report is not None:
            classify_report(report, line.node, SETTINGS)


@settings(max_examples=400)
@given(answer=prometheus_answers)
def test_any_prometheus_answer_is_read_or_a_source_error(answer: Any) -> None:
    try:
        series = matrix(json.loads(json.dumps(answer)), PROMETHEUS.node_label, PROMETHEUS.gpu_label)
    except SourceError:
        return
    found = [s for s in (signal(one) for one in series) if s is not None]
    for item in Novelty(PROMETHEUS.window_seconds).new(found, 2e9):
        classify_dcgm(item.sample, SETTINGS)


@given(answer=json_values)
def test_arbitrary_json_is_never_a_crash(answer: Any) -> None:
    with contextlib.suppress(SourceError):
        entries(answer, "node")
    with contextlib.suppress(SourceError):
        matrix(answer, "Hostname", "gpu")
    with contextlib.suppress(SourceError):
        moved(answer)


def test_the_moved_series_are_named_by_their_field() -> None:
    """The first answer of triage's DCGM read: each series' field in konduktor_field (PromQL functions drop
    __name__); anything else there is a wrong answer, not a series to read."""
    metric = {"Hostname": "gpu-0", "gpu": "3", "konduktor_field": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}
    answer = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": metric, "value": [1, "2"]}]}}
    assert moved(answer) == [("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", {"Hostname": "gpu-0", "gpu": "3"})]
    metric["konduktor_field"] = "up"
    with pytest.raises(SourceError, match="konduktor_field is 'up', not a health field"):
        moved(answer)


def stream_answer(*values: list[Any]) -> dict[str, Any]:
    result = [{"stream": {"node": "gpu-0"}, "values": list(values)}]
    return {"status": "success", "data": {"resultType": "streams", "result": result}}


# The answers of the reproduction and their kin: each is a failed poll, named.
LOKI_GARBAGE = {
    "a bare list": b"[]",
    "a non-numeric timestamp": json.dumps(stream_answer(["soon", XID])).encode(),
    "a line that is a number": json.dumps(stream_answer(["100", 7])).encode(),
    "a value of one element": json.dumps(stream_answer(["100"])).encode(),
    "labels that are not strings": json.dumps(
        {"status": "success", "data": {"resultType": "streams", "result": [{"stream": {"node": 1}, "values": []}]}}
    ).encode(),
    "truncated JSON": b'{"status": "success", "data": {"resu',
    "an error status": b'{"status": "error", "error": "too many outstanding requests"}',
}
PROMETHEUS_GARBAGE = {
    "a bare list": b"[]",
    "a string timestamp": b'{"status":"success","data":{"resultType":"matrix","result":'
    b'[{"metric":{"__name__":"DCGM_FI_DEV_XID_ERRORS","Hostname":"gpu-0"},"values":[["now","79"]]}]}}',
    "a value that is not a number": b'{"status":"success","data":{"resultType":"matrix","result":'
    b'[{"metric":{"__name__":"DCGM_FI_DEV_XID_ERRORS","Hostname":"gpu-0"},"values":[[1,"lots"]]}]}}',
    "a vector instead of a matrix": b'{"status":"success","data":{"resultType":"vector","result":[]}}',
    "truncated JSON": b'{"status":"succ',
}
# A poll first asks which nodes' series moved (a vector), then reads those nodes' raw samples (a matrix): each of the
# answers above comes second, after this one, and a wrong first answer is a failed poll too.
MOVED_GPU_0 = json.dumps(
    {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"konduktor_field": "DCGM_FI_DEV_XID_ERRORS", "Hostname": "gpu-0"}, "value": [1, "1"]}
            ],
        },
    }
).encode()
PROMETHEUS_POLLS = {
    **{f"moved, then {name}": [MOVED_GPU_0, body] for name, body in PROMETHEUS_GARBAGE.items()},
    **{f"{name} for the moved series": [body] for name, body in PROMETHEUS_GARBAGE.items() if "vector" not in name},
    "a matrix for the moved series": [
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"Hostname":"gpu-0"},"values":[]}]}}'
    ],
}


@pytest.mark.parametrize("body", LOKI_GARBAGE.values(), ids=LOKI_GARBAGE.keys())
def test_a_malformed_loki_answer_is_a_failed_poll(body: bytes) -> None:
    metrics = HealthMetrics()
    with serving([body]) as url:
        source = LokiSource(LOKI.model_copy(update={"url": url}), metrics)
        with pytest.raises(SourceError):
            source.read(None, 10**18)
    assert metrics.sample("konduktor_signal_source_up", {"source": "loki"}) == 0


@pytest.mark.parametrize("bodies", PROMETHEUS_POLLS.values(), ids=PROMETHEUS_POLLS.keys())
def test_a_malformed_prometheus_answer_is_a_failed_poll(bodies: list[bytes]) -> None:
    metrics = HealthMetrics()
    with serving(bodies) as url:
        source = PrometheusSource(PROMETHEUS.model_copy(update={"url": url}), metrics)
        with pytest.raises(SourceError):
            source.read(2e9)
    assert metrics.sample("konduktor_signal_source_up", {"source": "prometheus"}) == 0


def test_a_good_answer_after_garbage_is_read_and_the_source_is_up_again() -> None:
    metrics = HealthMetrics()
    good = json.dumps(stream_answer(["100", XID])).encode()
    with serving([b"[]", good]) as url:
        source = LokiSource(LOKI.model_copy(update={"url": url}), metrics)
        with pytest.raises(SourceError):
            source.read(None, 200)
        lines, _ = source.read(None, 200)
    assert [line.line for line in lines] == [XID]
    assert metrics.sample("konduktor_signal_source_up", {"source": "loki"}) == 1

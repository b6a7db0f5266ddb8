"""nccl-tests output: its stdout table or its `-J` JSON file."""

from __future__ import annotations

import json
import re
from typing import Any

from konduktor.burnin.parsers.collective import CollectiveResult, CollectiveRow, Placement
from konduktor.burnin.parsers.common import OutputError, as_float, json_list, json_object, json_objects


def parse_nccl_tests(text: str) -> CollectiveResult:
    """nccl-tests stdout, or the `-J` JSON file (nccl-tests ≥ 2.17.3, docs/design/burnin.md#nccl-tests)."""
    if text.lstrip().startswith("{"):
        return parse_nccl_tests_json(text)
    return parse_nccl_tests_text(text)


# The layout without per-iteration or timestamp columns, used when the header line is missing.
_DEFAULT_COLUMNS = [
    *("size", "count", "type", "redop", "root"),
    *("time", "algbw", "busbw", "#wrong"),  # out-of-place
    *("time", "algbw", "busbw", "#wrong"),  # in-place
]


# common.cu prints `# Out of bounds values : %d %s` with "FAILED" or "OK"; releases before 2.10 and builds
# derived from them print the same line without the `#` (and `Avg bus bandwidth` alike).
_OUT_OF_BOUNDS = re.compile(r"^Out of bounds values\s*:\s*(?P<count>\d{1,12})?\s*(?P<word>[A-Za-z]*)")
_AVG_BUSBW = re.compile(r"^Avg bus bandwidth\s*:\s*([-\d.eE+naif]+)")


def _out_of_bounds(match: re.Match[str]) -> int:
    """The count of wrong values; a line that says FAILED is at least one, whatever its number says."""
    count = int(match["count"]) if match["count"] else 0
    return max(count, 1) if match["word"].upper() == "FAILED" else count


def parse_nccl_tests_text(text: str) -> CollectiveResult:
    columns = _DEFAULT_COLUMNS
    rows: list[CollectiveRow] = []
    errors: list[str] = []
    hosts: list[str] = []
    ranks = 0
    out_of_bounds: int | None = None
    avg_busbw: float | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        body = line.lstrip("#").strip()
        if oob := _OUT_OF_BOUNDS.match(body):
            out_of_bounds = (out_of_bounds or 0) + _out_of_bounds(oob)
            continue
        if avg := _AVG_BUSBW.match(body):
            avg_busbw = as_float(avg.group(1))
            continue
        if line.startswith("#"):
            tokens = body.split()
            if tokens[:2] == ["size", "count"] and "busbw" in tokens:
                columns = tokens
            elif rank := re.match(r"Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)", body):
                ranks += 1
                if rank.group(1) not in hosts:
                    hosts.append(rank.group(1))
            elif body.startswith("error:"):
                errors.append(body)
            continue
        if "Test failure" in line or "NCCL failure" in line or "CUDA failure" in line:
            errors.append(line)
            continue
        row = _nccl_row(line.split(), columns)
        if row is not None:
            rows.append(row)
    if not rows and not errors and not out_of_bounds:
        raise OutputError("no nccl-tests result rows (the run did not reach the measurement)")
    return CollectiveResult(tuple(rows), out_of_bounds, avg_busbw, ranks or None, tuple(hosts), tuple(errors))


def _nccl_row(tokens: list[str], columns: list[str]) -> CollectiveRow | None:
    if not tokens or not tokens[0].isdigit():
        return None
    # The header names each column; out-of-place comes first, then in-place, each with
    # time/algbw/busbw/#wrong (extra per-iteration columns in between are skipped).
    starts = [i for i, name in enumerate(columns) if name in {"time", "cputime"}]
    placements = []
    for name, start in zip(("out-of-place", "in-place"), starts, strict=False):
        try:
            time_us, algbw, busbw = (float(tokens[start + offset]) for offset in range(3))
            wrong_token = tokens[start + 3]
            # `#wrong` is an integer; releases before 2.10 print the `error` column as a float ("0e+00").
            wrong = None if wrong_token == "N/A" else int(float(wrong_token))
        except (IndexError, ValueError, OverflowError):
            return None
        placements.append(Placement(name, time_us, algbw, busbw, wrong))
    if not placements:
        return None
    return CollectiveRow(int(tokens[0]), tuple(placements))


def _json_number(value: Any) -> float:
    # nccl-tests writes NaN as the string "nan" (util.cu jsonDouble).
    return float(value) if value is not None else float("nan")


def _json_flag(value: Any) -> bool | None:
    # nccl-tests writes booleans as the strings "true"/"false" (util.cu jsonBool).
    if isinstance(value, bool) or value is None:
        return value
    return str(value).lower() == "true"


def _json_count(value: Any) -> int | None:
    try:
        return None if value is None else int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None


def parse_nccl_tests_json(text: str) -> CollectiveResult:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OutputError(f"nccl-tests JSON unreadable (truncated?): {exc}") from exc
    if not isinstance(document, dict):
        raise OutputError("nccl-tests JSON is not an object")
    rows = []
    for result in json_objects(document.get("results")):
        placements = []
        for key, name in (("out_of_place", "out-of-place"), ("in_place", "in-place")):
            half = json_object(result.get(key))
            if not half:
                continue
            try:
                placements.append(
                    Placement(
                        name,
                        _json_number(half.get("time", half.get("cpu_time"))),
                        _json_number(half.get("alg_bw")),
                        _json_number(half.get("bus_bw")),
                        _json_count(half.get("nwrong")),
                    )
                )
            except (TypeError, ValueError) as exc:
                raise OutputError(f"nccl-tests JSON result unreadable: {half}") from exc
        size = _json_count(result.get("size"))
        if placements and size is not None:
            rows.append(CollectiveRow(size, tuple(placements)))
    oob = json_object(document.get("out_of_bounds"))
    avg = json_object(document.get("average_bus_bandwidth"))
    devices = json_objects(json_object(document.get("config")).get("devices"))
    hosts = tuple(dict.fromkeys(str(d.get("hostname")) for d in devices if d.get("hostname")))
    errors = tuple(str(e) for e in json_list(document.get("errors")))
    out_of_bounds = _json_count(oob.get("count"))
    if _json_flag(oob.get("okay")) is False:
        out_of_bounds = max(out_of_bounds or 0, 1)
    if not rows and not errors and not out_of_bounds:
        raise OutputError("nccl-tests JSON has no results")
    try:
        avg_busbw = _json_number(avg["bandwidth"]) if "bandwidth" in avg else None
    except (TypeError, ValueError):
        avg_busbw = None
    return CollectiveResult(
        rows=tuple(rows),
        out_of_bounds=out_of_bounds,
        avg_busbw_gb_s=avg_busbw,
        ranks=len(devices) or None,
        hosts=hosts,
        errors=errors,
    )

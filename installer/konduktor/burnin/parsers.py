"""Parsers for what the burn-in tools print. They turn text into facts and judge nothing.

Exit codes are recorded but never decide alone: gpu-burn exits 0 on FAULTY GPUs, `dcgmi diag`
exits 226/205 with a readable report, nccl-tests exits non-zero only for wrong data or an opt-in
bandwidth floor (docs/design/burnin.md#tool-output-and-exit-codes). Unparseable or truncated output raises
`OutputError`, which the verdict turns into ERROR, never into PASS.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from konduktor.gpu.catalog import ReportKind
from konduktor.gpu.kernel_log import parse_line

STEP_END_MARKER = "KONDUKTOR-STEP-END"
SECTION_MARKER = "### konduktor:"
MATMUL_SCHEMA = "konduktor.burnin.matmul/1"
ALLREDUCE_SCHEMA = "konduktor.burnin.allreduce/1"

# `timeout` exits 124 when it stopped the tool and 137 when it had to SIGKILL it.
_TIMEOUT_EXIT_CODES = frozenset({124, 137})


class OutputError(ValueError):
    """A tool's output is missing, truncated or not in the expected format."""


# --------------------------------------------------------------------------------------------
# Step envelope: every step prints its tool output, then one end line with the exit code.


@dataclass(frozen=True)
class StepLog:
    output: str
    exit_code: int | None  # None: no end line, the container was killed or the log is cut
    seconds: int | None = None

    @property
    def timed_out(self) -> bool:
        return self.exit_code in _TIMEOUT_EXIT_CODES

    @property
    def finished(self) -> bool:
        return self.exit_code is not None


def split_step_log(text: str) -> StepLog:
    lines = text.splitlines()
    for position in range(len(lines) - 1, -1, -1):
        line = lines[position].strip()
        if line.startswith(STEP_END_MARKER):
            try:
                end = json.loads(line[len(STEP_END_MARKER) :])
                exit_code = int(end["exit_code"])
            except (ValueError, KeyError, TypeError):
                break
            seconds = end.get("seconds")
            return StepLog(
                output="\n".join(lines[:position]),
                exit_code=exit_code,
                seconds=int(seconds) if isinstance(seconds, int) else None,
            )
    return StepLog(output=text, exit_code=None)


# --------------------------------------------------------------------------------------------
# Value helpers shared by the nvidia-smi parsers.

_NOT_AVAILABLE = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions)\]?$", re.I)


def _present(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if not value or _NOT_AVAILABLE.match(value) else value


def _int(value: str | None) -> int | None:
    value = _present(value)
    if value is None:
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(float(value))
    except ValueError:
        return None


def _float(value: str | None) -> float | None:
    value = _present(value)
    if value is None:
        return None
    try:
        return float(value.split()[0])  # tolerate units when `nounits` was forgotten
    except ValueError:
        return None


def _flag(value: str | None) -> bool | None:
    value = _present(value)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in {"yes", "true", "enabled", "active"}:
        return True
    if lowered in {"no", "false", "disabled", "inactive"}:
        return False
    number = _int(value)
    return None if number is None else number > 0


# --------------------------------------------------------------------------------------------
# nvidia-smi CSV queries (quick tier).

# Drivers before 535 name the clock-event field `clocks_throttle_reasons` (docs/design/burnin.md#nvidia-smi).
_FIELD_ALIASES = {"clocks_throttle_reasons.active": "clocks_event_reasons.active"}


_HEADER_FIELD = re.compile(r"^[a-z][a-z0-9_.]*(\s*\[[^\]]*\])?$")


def _is_csv_header(line: str) -> bool:
    """Field names only (`index, power.draw [W]`), so an error message is never taken for a header."""
    return all(_HEADER_FIELD.match(field.strip()) for field in line.split(","))


def parse_nvidia_smi_csv(text: str) -> list[dict[str, str]]:
    """Rows of `nvidia-smi --query-…=… --format=csv[,nounits]` keyed by field name.

    The header is required: it makes the parser independent of field order and of fields an
    older driver does not know. Unit suffixes in the header (`power.draw [W]`) are dropped.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if any(line.strip() == "No devices were found" for line in lines):
        return []  # the pod holds GPUs that the driver cannot see: zero rows, for the count check
    header_at = next((i for i, line in enumerate(lines) if _is_csv_header(line)), None)
    if header_at is None:
        raise OutputError(f"no CSV header in nvidia-smi output: {text.strip()[:200]!r}")
    reader = csv.reader(lines[header_at:], skipinitialspace=True)
    header = [re.sub(r"\s*\[.*\]$", "", name.strip()) for name in next(reader)]
    header = [_FIELD_ALIASES.get(name, name) for name in header]
    rows = []
    for values in reader:
        if len(values) != len(header):
            raise OutputError(f"nvidia-smi row has {len(values)} fields, header has {len(header)}: {values}")
        rows.append(dict(zip(header, (v.strip() for v in values), strict=True)))
    return rows


@dataclass(frozen=True)
class GpuState:
    index: int
    bus_id: str | None
    uuid: str | None
    name: str | None
    ecc_enabled: bool | None
    ecc_uncorrected_volatile: int | None
    sram_uncorrected_volatile: int | None
    sram_corrected_volatile: int | None
    retired_pages_pending: bool | None
    clock_event_reasons: int | None
    temperature_c: float | None
    power_w: float | None
    sm_clock_mhz: float | None


def parse_gpu_query(text: str) -> tuple[GpuState, ...]:
    gpus = []
    for position, row in enumerate(parse_nvidia_smi_csv(text)):
        index = _int(row.get("index"))
        gpus.append(
            GpuState(
                index=position if index is None else index,
                bus_id=_present(row.get("pci.bus_id")),
                uuid=_present(row.get("uuid")),
                name=_present(row.get("name")),
                ecc_enabled=_flag(row.get("ecc.mode.current")),
                ecc_uncorrected_volatile=_int(row.get("ecc.errors.uncorrected.volatile.total")),
                sram_uncorrected_volatile=_int(row.get("ecc.errors.uncorrected.volatile.sram")),
                sram_corrected_volatile=_int(row.get("ecc.errors.corrected.volatile.sram")),
                retired_pages_pending=_flag(row.get("retired_pages.pending")),
                clock_event_reasons=_int(row.get("clocks_event_reasons.active")),
                temperature_c=_float(row.get("temperature.gpu")),
                power_w=_float(row.get("power.draw")),
                sm_clock_mhz=_float(row.get("clocks.sm")),
            )
        )
    return tuple(gpus)


@dataclass(frozen=True)
class RemappedRows:
    bus_id: str | None
    correctable: int | None
    uncorrectable: int | None
    pending: bool | None
    failure: bool | None


def parse_remapped_rows(text: str) -> tuple[RemappedRows, ...]:
    return tuple(
        RemappedRows(
            bus_id=_present(row.get("gpu_bus_id")),
            correctable=_int(row.get("remapped_rows.correctable")),
            uncorrectable=_int(row.get("remapped_rows.uncorrectable")),
            pending=_flag(row.get("remapped_rows.pending")),
            failure=_flag(row.get("remapped_rows.failure")),
        )
        for row in parse_nvidia_smi_csv(text)
    )


@dataclass(frozen=True)
class NvlinkState:
    gpu: int
    active_links: int
    inactive_links: tuple[int, ...]


def parse_nvlink_status(text: str) -> tuple[NvlinkState, ...]:
    """`nvidia-smi nvlink -s`: a `GPU n: …` header, then `Link k: <speed>` or `Link k: <inactive>`."""
    states: list[NvlinkState] = []
    gpu: int | None = None
    active = 0
    inactive: list[int] = []
    for line in text.splitlines():
        if header := re.match(r"^GPU (\d+):", line.strip()):
            if gpu is not None:
                states.append(NvlinkState(gpu, active, tuple(inactive)))
            gpu, active, inactive = int(header.group(1)), 0, []
        elif (link := re.match(r"^Link (\d+):\s*(.*)$", line.strip())) and gpu is not None:
            if "inactive" in link.group(2).lower():
                inactive.append(int(link.group(1)))
            else:
                active += 1
    if gpu is not None:
        states.append(NvlinkState(gpu, active, tuple(inactive)))
    return tuple(states)


@dataclass(frozen=True)
class KernelLogEvent:
    kind: ReportKind | Literal["fell-off-bus"]  # "fell-off-bus": the driver's own line, no Xid
    code: int | None
    pci: str | None
    seconds_since_boot: float | None
    line: str


_DMESG_TIME = re.compile(r"^\[\s*(\d+\.\d+)\]")
_FELL_OFF = re.compile(r"GPU at PCI:([0-9a-fA-F:.]+).*fallen off the bus")


def parse_kernel_log(text: str) -> tuple[KernelLogEvent, ...]:
    """GPU fault lines from `dmesg`, read by the health controller's parser so both agree on them.

    The `[seconds since boot]` prefix is kept: with the uptime it dates each line.
    """
    events = []
    for raw in text.splitlines():
        line = raw.strip()
        stamp = _DMESG_TIME.match(line)
        seconds = float(stamp.group(1)) if stamp else None
        if report := parse_line(line):
            events.append(KernelLogEvent(report.kind, report.code, report.pci, seconds, line))
        elif match := _FELL_OFF.search(line):
            events.append(KernelLogEvent("fell-off-bus", None, match.group(1).lower(), seconds, line))
    return tuple(events)


@dataclass(frozen=True)
class PassiveSnapshot:
    """The quick tier's view of a node: nvidia-smi state and GPU lines of the kernel log."""

    gpus: tuple[GpuState, ...]
    remapped_rows: tuple[RemappedRows, ...] | None  # None: not reported (pre-Ampere or query failed)
    nvlink: tuple[NvlinkState, ...] | None
    uptime_s: float | None
    kernel_events: tuple[KernelLogEvent, ...] | None  # None: the kernel log could not be read
    problems: tuple[str, ...] = ()  # sections that were present but unreadable


def split_sections(text: str) -> dict[str, str]:
    """`### konduktor:<name>` lines split the passive step's output into named sections."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(SECTION_MARKER):
            current = sections.setdefault(line[len(SECTION_MARKER) :].strip(), [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


def parse_passive_snapshot(text: str) -> PassiveSnapshot:
    sections = split_sections(text)
    if "gpu" not in sections:
        raise OutputError("passive output has no GPU section")
    problems: list[str] = []
    try:
        gpus = parse_gpu_query(sections["gpu"])
    except OutputError as exc:
        raise OutputError(f"nvidia-smi GPU query unreadable: {exc}") from exc

    remapped: tuple[RemappedRows, ...] | None = None
    if (section := sections.get("remapped-rows")) is not None:
        try:
            remapped = parse_remapped_rows(section)
        except OutputError as exc:
            problems.append(f"remapped rows unreadable: {exc}")

    nvlink = parse_nvlink_status(sections["nvlink"]) if "nvlink" in sections else None
    uptime = _float(sections.get("uptime"))

    kernel_events: tuple[KernelLogEvent, ...] | None = None
    if (section := sections.get("kernel-log")) is not None:
        # The step writes `dmesg-exit: <code>` first: without CAP_SYSLOG dmesg fails, and an
        # empty Xid list must then mean "unknown", not "clean".
        exit_line = re.search(r"^dmesg-exit:\s*(\d+)", section, re.M)
        if exit_line and exit_line.group(1) == "0":
            kernel_events = parse_kernel_log(section)
        else:
            problems.append("kernel log not readable (dmesg failed)")
    return PassiveSnapshot(gpus, remapped, nvlink, uptime, kernel_events, tuple(problems))


# --------------------------------------------------------------------------------------------
# DCGM diagnostics (`dcgmi diag -r N -j`, or the table without -j).

# What dcgmi prints for a result (DiagResultToString); anything else ("Unknown", an "Error" row) is kept
# verbatim, and the verdict never reads it as a pass or a skip.
DCGM_STATUSES = ("Pass", "Fail", "Warn", "Skip", "Not Run")
# The table prints a result that did not come out as Pass/Fail/Warn/Skip with an `Error` row.
DCGM_ERROR = "Error"


@dataclass(frozen=True)
class DcgmWarning:
    message: str
    error_id: int | None = None
    category: int | None = None
    severity: int | None = None  # dcgmErrorSeverity_t: 1 monitor, 2 isolate, 5 config, 6 reset


@dataclass(frozen=True)
class DcgmEntityResult:
    entity: str  # "GPU3"
    status: str
    warnings: tuple[DcgmWarning, ...] = ()
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class DcgmTest:
    name: str
    category: str
    status: str  # the test's overall status
    results: tuple[DcgmEntityResult, ...] = ()
    warnings: tuple[DcgmWarning, ...] = ()  # not tied to one entity


@dataclass(frozen=True)
class DcgmDiag:
    tests: tuple[DcgmTest, ...]
    runtime_error: str | None = None
    dcgm_version: str | None = None
    driver_version: str | None = None


def parse_dcgm_diag(text: str) -> DcgmDiag:
    """JSON when the output holds a JSON object, the CLI table otherwise."""
    start = re.search(r"^\s*\{", text, re.M)
    return parse_dcgm_diag_json(text[start.start() :]) if start else parse_dcgm_diag_text(text)


def _objects(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list; a tool that writes something else there has nothing to read."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _small_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _dcgm_warning(entry: Any) -> DcgmWarning:
    if not isinstance(entry, dict):
        return DcgmWarning(str(entry))
    return DcgmWarning(
        message=str(entry.get("warning") or entry.get("message") or ""),
        error_id=_small_int(entry.get("error_id")),
        category=_small_int(entry.get("error_category")),
        severity=_small_int(entry.get("error_severity")),
    )


def _dcgm_warnings(*lists: Any) -> tuple[DcgmWarning, ...]:
    return tuple(_dcgm_warning(entry) for entries in lists if isinstance(entries, list) for entry in entries)


def parse_dcgm_diag_json(text: str) -> DcgmDiag:
    """`dcgmi diag -j`: `DCGM Diagnostic.test_categories[].tests[].results[]` (docs/design/burnin.md#dcgmi-diag).

    DCGM 3 named the top key `DCGM GPU Diagnostic` and the entity `gpu_id`; both are accepted. An entity's
    `errors` are kept with its warnings.
    """
    try:
        document, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except json.JSONDecodeError as exc:
        raise OutputError(f"dcgmi JSON unreadable (truncated?): {exc}") from exc
    if not isinstance(document, dict):
        raise OutputError("dcgmi JSON is not an object")
    diag = document.get("DCGM Diagnostic") or document.get("DCGM GPU Diagnostic")
    if not isinstance(diag, dict):
        raise OutputError("dcgmi JSON has no 'DCGM Diagnostic' object")
    tests = []
    for category in _objects(diag.get("test_categories")):
        for test in _objects(category.get("tests")):
            results = []
            for result in _objects(test.get("results")):
                entity_id = result.get("entity_id", result.get("gpu_id"))
                group = result.get("entity_group", "GPU")
                results.append(
                    DcgmEntityResult(
                        entity=f"{group}{entity_id}" if entity_id is not None else "",
                        status=str(result.get("status", "")),
                        warnings=_dcgm_warnings(result.get("warnings"), result.get("errors")),
                        info=tuple(str(i) for i in _list(result.get("info"))),
                    )
                )
            summary = _object(test.get("test_summary"))
            status = summary.get("status") or _overall_status([r.status for r in results])
            tests.append(
                DcgmTest(
                    name=str(test.get("name", "")),
                    category=str(category.get("category", "")),
                    status=str(status),
                    results=tuple(results),
                    warnings=_dcgm_warnings(summary.get("warnings"), summary.get("errors")),
                )
            )
    metadata = _object(document.get("metadata"))
    return DcgmDiag(
        tests=tuple(tests),
        runtime_error=_optional_str(diag.get("runtime_error")),
        dcgm_version=_optional_str(metadata.get("version")),
        driver_version=_optional_str(metadata.get("Driver Version Detected")),
    )


def _overall_status(statuses: list[str]) -> str:
    """The worst entity status: a failure, then any status that is no outcome (Error, Not Run, unknown)."""
    if "Fail" in statuses:
        return "Fail"
    if "Warn" in statuses:
        return "Warn"
    if (other := next((s for s in statuses if s not in {"Pass", "Skip"}), None)) is not None:
        return other
    return "Pass" if "Pass" in statuses else "Skip" if statuses else "Not Run"


_TABLE_ROW = re.compile(r"^\|\s?(.*?)\s*\|\s?(.*?)\s*\|$")
_CATEGORY_ROW = re.compile(r"^[|+]-+\s+(\w+)\s+-+\+")
# Any one- or two-word status, so an unknown one is kept instead of read as a message.
_ENTITY_CELL = re.compile(r"^([A-Za-z_]+)(\d+): ([A-Z][A-Za-z]*(?: [A-Z][A-Za-z]*)?)$")
# DCGM 3 printed one cell per test: `Pass - All`, `Fail - GPU: 0, 3`.
_LEGACY_CELL = re.compile(r"^(Pass|Fail|Warn|Skip)(?: - (All|GPU: ([\d, ]+)))?$")


@dataclass
class _TestDraft:
    name: str
    category: str
    status: str
    results: list[tuple[str, str]]  # (entity, status)
    messages: dict[str | None, list[str]]  # entity (None: the whole test) -> warning messages

    def mark_error(self, entity: str | None) -> None:
        """An `Error` row: the entity (or the test) has no outcome, whatever its status cell said."""
        for position, (name, status) in enumerate(self.results):
            if name == entity and status in {"Pass", "Skip"}:
                self.results[position] = (name, DCGM_ERROR)
        if (entity is None or entity not in {name for name, _ in self.results}) and self.status in {"Pass", "Skip"}:
            self.status = DCGM_ERROR


class _DcgmTable:
    """Reads the CLI table row by row; warnings wrap over several rows of 45 characters."""

    def __init__(self) -> None:
        self.category = ""
        self.metadata: dict[str, str] = {}
        self.drafts: list[_TestDraft] = []
        self._growing: tuple[_TestDraft, str | None] | None = None  # the message continuation rows extend

    def feed(self, name: str, cell: str) -> None:
        if self.category == "Metadata":
            self.metadata[name] = cell
            return
        if name.startswith(("Warning", "Info", DCGM_ERROR)):
            self._growing = None
            if self.drafts and not name.startswith("Info"):
                entity = name.partition(":")[2].strip() or None
                self.drafts[-1].messages.setdefault(entity, []).append(cell)
                self._growing = (self.drafts[-1], entity)
                if name.startswith(DCGM_ERROR):
                    self.drafts[-1].mark_error(entity)
            return
        if not name:
            if entity_row := _ENTITY_CELL.match(cell):
                self._growing = None
                if self.drafts:
                    self.drafts[-1].results.append((entity_row.group(1) + entity_row.group(2), entity_row.group(3)))
            elif self._growing is not None:
                draft, entity = self._growing
                draft.messages[entity][-1] += cell
            return
        self._growing = None
        status, legacy_results = _table_status(cell)
        self.drafts.append(_TestDraft(name, self.category, status, legacy_results, {}))

    def diag(self) -> DcgmDiag:
        tests = []
        for draft in self.drafts:
            entities = {entity for entity, _ in draft.results}
            results = tuple(
                DcgmEntityResult(entity, status, tuple(DcgmWarning(m) for m in draft.messages.get(entity, [])))
                for entity, status in draft.results
            )
            loose = [
                DcgmWarning(message if entity is None else f"{entity}: {message}")
                for entity, messages in draft.messages.items()
                if entity is None or entity not in entities
                for message in messages
            ]
            tests.append(DcgmTest(draft.name, draft.category, draft.status, results, tuple(loose)))
        return DcgmDiag(
            tests=tuple(tests),
            dcgm_version=self.metadata.get("DCGM Version"),
            driver_version=self.metadata.get("Driver Version Detected"),
        )


def parse_dcgm_diag_text(text: str) -> DcgmDiag:
    """The `dcgmi diag` CLI table: a test row, then `GPUn: <status>` rows and `Warning: GPUn` rows."""
    if "| Diagnostic" not in text:
        raise OutputError("no dcgmi diag table in the output")
    table = _DcgmTable()
    for raw in text.splitlines():
        line = raw.strip()
        if heading := _CATEGORY_ROW.match(line):
            table.category = heading.group(1)
            continue
        row = _TABLE_ROW.match(line)
        if not row or set(line) <= {"+", "-", "=", "|"}:
            continue
        name, cell = row.group(1).strip(), row.group(2).strip()
        if (name, cell) != ("Diagnostic", "Result"):
            table.feed(name, cell)
    return table.diag()


def _table_status(cell: str) -> tuple[str, list[tuple[str, str]]]:
    if cell in DCGM_STATUSES:
        return cell, []
    if legacy := _LEGACY_CELL.match(cell):
        status, gpus = legacy.group(1), legacy.group(3)
        return status, [(f"GPU{g.strip()}", status) for g in gpus.split(",")] if gpus else []
    return cell.split(" ", maxsplit=1)[0] if cell else "", []


# --------------------------------------------------------------------------------------------
# Collective benchmarks: nccl-tests (text or -J JSON) and our allreduce.py.


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
            avg_busbw = _float(avg.group(1))
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
    for result in _objects(document.get("results")):
        placements = []
        for key, name in (("out_of_place", "out-of-place"), ("in_place", "in-place")):
            half = _object(result.get(key))
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
    oob = _object(document.get("out_of_bounds"))
    avg = _object(document.get("average_bus_bandwidth"))
    devices = _objects(_object(document.get("config")).get("devices"))
    hosts = tuple(dict.fromkeys(str(d.get("hostname")) for d in devices if d.get("hostname")))
    errors = tuple(str(e) for e in _list(document.get("errors")))
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


def _schema_lines(text: str, schema: str) -> Iterator[dict[str, Any]]:
    """JSON objects of one schema among other log lines (library warnings, torchrun chatter)."""
    for line in text.splitlines():
        start = line.find("{")
        if start < 0 or schema not in line:
            continue
        try:
            record = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("schema") == schema:
            yield record


def parse_allreduce_bench(text: str) -> CollectiveResult:
    """Result line of allreduce.py, the torchrun benchmark used for node pairs."""
    records = list(_schema_lines(text, ALLREDUCE_SCHEMA))
    errors = tuple(str(r.get("error")) for r in records if r.get("kind") == "error")
    result = next((r for r in records if r.get("kind") == "result"), None)
    if result is None:
        if errors:
            return CollectiveResult(rows=(), errors=errors)
        raise OutputError("no allreduce result line (the run did not finish)")
    placement = Placement(
        "in-place",
        float(result["time_us"]),
        float(result["algbw_gb_s"]),
        float(result["busbw_gb_s"]),
        int(result["wrong"]) if result.get("wrong") is not None else None,
    )
    return CollectiveResult(
        rows=(CollectiveRow(int(result["bytes"]), (placement,)),),
        ranks=int(result["world_size"]),
        hosts=tuple(str(h) for h in result.get("hosts") or ()),
        errors=errors,
    )


# --------------------------------------------------------------------------------------------
# gpu-burn (optional second opinion).


@dataclass(frozen=True)
class GpuBurnResult:
    status: dict[int, str]  # final `GPU n: OK|FAULTY`
    died: frozenset[int]  # progress showed `(DIED!)`: the child crashed, summary may still say OK
    errors: dict[int, int]  # compare errors in the last progress line
    gflops: dict[int, float]  # last progress figure per GPU
    summary_seen: bool
    all_died: bool  # "No clients are alive!  Aborting"


_BURN_STATUS = re.compile(r"GPU (\d+): (OK|FAULTY)")


def parse_gpu_burn(text: str) -> GpuBurnResult:
    """gpu-burn prints `\\r`-separated progress and a final `Tested N GPUs:` list (docs/design/burnin.md#gpu-burn)."""
    status: dict[int, str] = {}
    died: set[int] = set()
    errors: dict[int, int] = {}
    gflops: dict[int, float] = {}
    summary_seen = False
    for line in re.split(r"[\r\n]+", text):
        if line.strip().startswith("Tested") and "GPUs" in line:
            summary_seen = True
        if final := _BURN_STATUS.search(line):
            status[int(final.group(1))] = final.group(2)
        if "proc'd:" in line:
            rates = re.findall(r"(-?\d+) \((\d+(?:\.\d+)?) Gflop/s\)", line)
            gflops = {gpu: float(rate) for gpu, (_, rate) in enumerate(rates)}
            if section := re.search(r"errors:(.*?)(?:temps:|$)", line):
                for gpu, item in enumerate(section.group(1).split("- ")):
                    if count := re.match(r"\s*(\d+)", item):
                        errors[gpu] = max(errors.get(gpu, 0), int(count.group(1)))
                    if "DIED" in item:
                        died.add(gpu)
    if not summary_seen and not gflops:
        raise OutputError("gpu-burn printed neither progress nor a summary")
    return GpuBurnResult(status, frozenset(died), errors, gflops, summary_seen, "No clients are alive" in text)


# --------------------------------------------------------------------------------------------
# matmul.py, our own burn-in.


@dataclass(frozen=True)
class MatmulGpu:
    index: int
    device: str
    name: str | None
    status: str  # "ok" or "error"
    phase: str | None  # for errors: "setup" (before any matmul) or "compute"
    error: str | None
    dtype: str
    tflops: tuple[float, ...]  # per timed window
    digest: str | None
    digest_key: str | None  # digests are comparable only between GPUs with equal keys
    digest_mismatch_windows: int
    nonfinite: int
    clock_event_reasons_seen: int | None
    sm_clock_mhz_min: float | None
    temperature_c_max: float | None

    @property
    def tflops_min(self) -> float | None:
        return min(self.tflops) if self.tflops else None


@dataclass(frozen=True)
class MatmulRun:
    gpus: tuple[MatmulGpu, ...]
    summary_seen: bool


def parse_matmul(text: str) -> MatmulRun:
    gpus = []
    summary_seen = False
    for record in _schema_lines(text, MATMUL_SCHEMA):
        if record.get("kind") == "summary":
            summary_seen = True
        elif record.get("kind") == "gpu":
            clocks = record.get("clocks") or {}
            reasons = clocks.get("event_reasons_seen")
            gpus.append(
                MatmulGpu(
                    index=int(record["index"]),
                    device=str(record.get("device", "")),
                    name=record.get("name"),
                    status=str(record.get("status", "error")),
                    phase=record.get("phase"),
                    error=record.get("error"),
                    dtype=str(record.get("dtype", "")),
                    tflops=tuple(float(t) for t in record.get("tflops") or ()),
                    digest=record.get("digest"),
                    digest_key=record.get("digest_key"),
                    digest_mismatch_windows=int(record.get("digest_mismatch_windows") or 0),
                    nonfinite=int(record.get("nonfinite") or 0),
                    clock_event_reasons_seen=int(reasons, 16) if isinstance(reasons, str) else None,
                    sm_clock_mhz_min=clocks.get("sm_mhz_min"),
                    temperature_c_max=clocks.get("temp_c_max"),
                )
            )
    if not gpus and not summary_seen:
        raise OutputError("no matmul result lines")
    return MatmulRun(tuple(sorted(gpus, key=lambda g: g.index)), summary_seen)

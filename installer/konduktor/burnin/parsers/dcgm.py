"""DCGM diagnostics (`dcgmi diag -r N -j`, or the table without -j)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from konduktor.burnin.parsers.common import OutputError, json_list, json_object, json_objects

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
    for category in json_objects(diag.get("test_categories")):
        for test in json_objects(category.get("tests")):
            results = []
            for result in json_objects(test.get("results")):
                entity_id = result.get("entity_id", result.get("gpu_id"))
                group = result.get("entity_group", "GPU")
                results.append(
                    DcgmEntityResult(
                        entity=f"{group}{entity_id}" if entity_id is not None else "",
                        status=str(result.get("status", "")),
                        warnings=_dcgm_warnings(result.get("warnings"), result.get("errors")),
                        info=tuple(str(i) for i in json_list(result.get("info"))),
                    )
                )
            summary = json_object(test.get("test_summary"))
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
    metadata = json_object(document.get("metadata"))
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

"""nvidia-smi CSV queries and `nvidia-smi nvlink -s` (quick tier)."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass

from konduktor.burnin.parsers.common import OutputError, as_flag, as_float, as_int, present

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
        index = as_int(row.get("index"))
        gpus.append(
            GpuState(
                index=position if index is None else index,
                bus_id=present(row.get("pci.bus_id")),
                uuid=present(row.get("uuid")),
                name=present(row.get("name")),
                ecc_enabled=as_flag(row.get("ecc.mode.current")),
                ecc_uncorrected_volatile=as_int(row.get("ecc.errors.uncorrected.volatile.total")),
                sram_uncorrected_volatile=as_int(row.get("ecc.errors.uncorrected.volatile.sram")),
                sram_corrected_volatile=as_int(row.get("ecc.errors.corrected.volatile.sram")),
                retired_pages_pending=as_flag(row.get("retired_pages.pending")),
                clock_event_reasons=as_int(row.get("clocks_event_reasons.active")),
                temperature_c=as_float(row.get("temperature.gpu")),
                power_w=as_float(row.get("power.draw")),
                sm_clock_mhz=as_float(row.get("clocks.sm")),
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
            bus_id=present(row.get("gpu_bus_id")),
            correctable=as_int(row.get("remapped_rows.correctable")),
            uncorrectable=as_int(row.get("remapped_rows.uncorrectable")),
            pending=as_flag(row.get("remapped_rows.pending")),
            failure=as_flag(row.get("remapped_rows.failure")),
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

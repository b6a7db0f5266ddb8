"""The quick tier's passive step: named sections of nvidia-smi queries, uptime and the kernel log."""

from __future__ import annotations

import re
from dataclasses import dataclass

from konduktor.burnin.parsers.common import OutputError, as_float
from konduktor.burnin.parsers.dmesg import KernelLogEvent, parse_kernel_log
from konduktor.burnin.parsers.nvidia_smi import (
    GpuState,
    NvlinkState,
    RemappedRows,
    parse_gpu_query,
    parse_nvlink_status,
    parse_remapped_rows,
)

SECTION_MARKER = "### konduktor:"


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
    uptime = as_float(sections.get("uptime"))

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

"""Kernel log lines -> typed GPU fault reports (Xid, NVSwitch SXid, nvidia-peermem errors).

The driver's message is the same whatever carried it, so the patterns search the line instead of parsing
a prefix: plain `dmesg` (`[12345.678] NVRM: ...`), `dmesg -T` (`[Mon Jan 12 10:00:00 2025] ...`),
`dmesg -x` (`kern  :warn  : ...`), `/dev/kmsg` records (`4,1234,5678,-;NVRM: ...`), journald and syslog
(`Jan 12 10:00:00 host kernel: ...`, `2025-01-12T10:00:00+00:00 host kernel: ...`) all parse alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from konduktor.gpu.catalog import ReportKind

# Codes are at most a few digits; the bound also keeps int() away from Python's digit limit on junk input.
_CODE = r"(?P<code>\d{1,6})(?!\d)"
# The driver prints "(PCI:0000:3b:00)" for Xids and "(PCI:0000:05:00.0)" for SXids; old drivers omit "PCI:".
# On a MIG GPU an Xid it can attribute to a GPU instance (and compute instance) says so inside the parenthesis:
# "(PCI:0000:3b:00 GPU-I:05)" or "(PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u)" (open-gpu-kernel-modules).
_PCI = (
    r"\((?:PCI:)?(?P<pci>[0-9A-Fa-f]{1,8}(?::[0-9A-Fa-f]{1,4}){1,3}(?:\.[0-7])?)"
    r"(?: +GPU-I:(?P<gpu_instance>\d{1,4})(?!\d))?(?: +GPU-CI:(?P<compute_instance>\d{1,4})(?!\d))?\)"
)

_XID = re.compile(rf"NVRM: Xid {_PCI}: {_CODE}(?:, *(?P<message>.*))?")
_SXID = re.compile(rf"SXid {_PCI}: {_CODE}(?:, *(?P<message>.*))?")
_PEERMEM = re.compile(r"nvidia-peermem[: ]+(?P<message>.*\bERROR\b.*)")


@dataclass(frozen=True)
class KernelReport:
    """One fault line from the kernel. `code` is None for peermem, which has no numbered codes.

    `gpu_instance` and `compute_instance` name the MIG instance the driver attributed the Xid to; the fault is
    still the physical GPU's at `pci`, which is what a node's health is judged by.
    """

    kind: ReportKind
    code: int | None
    pci: str | None
    message: str
    raw: str
    gpu_instance: int | None = None
    compute_instance: int | None = None


def parse_line(line: str) -> KernelReport | None:
    """The GPU fault this kernel log line reports, or None for any other line."""
    raw = line.rstrip("\r\n")
    if "NVRM: Xid" in raw and (match := _XID.search(raw)):
        return _numbered("xid", match, raw)
    if "SXid" in raw and (match := _SXID.search(raw)):
        return _numbered("sxid", match, raw)
    if "nvidia-peermem" in raw and (match := _PEERMEM.search(raw)):
        return KernelReport("peermem", None, None, match["message"].strip(), raw)
    return None


def _numbered(kind: ReportKind, match: re.Match[str], raw: str) -> KernelReport:
    groups = match.groupdict()
    return KernelReport(
        kind,
        int(match["code"]),
        match["pci"].lower(),
        (match["message"] or "").strip(),
        raw,
        gpu_instance=_optional_int(groups.get("gpu_instance")),
        compute_instance=_optional_int(groups.get("compute_instance")),
    )


def _optional_int(text: str | None) -> int | None:
    return None if text is None else int(text)

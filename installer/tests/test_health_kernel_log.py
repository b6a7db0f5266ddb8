"""Kernel log parsing: every common log format, SXid and peermem lines, and junk that must not match."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from konduktor.gpu.kernel_log import parse_line

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@pytest.mark.parametrize(
    "line",
    [
        f"[12345.678901] {XID_79}",  # dmesg
        f"[Mon Jan 12 10:00:00 2025] {XID_79}",  # dmesg -T
        f"kern  :warn  : [ 1234.567890] {XID_79}",  # dmesg -x
        f"4,1234,5678901,-;{XID_79}",  # /dev/kmsg record
        f"Jan 12 10:00:00 gpu-node-1 kernel: {XID_79}",  # syslog / journalctl short
        f"Jan  2 10:00:00.123456 gpu-node-1 kernel: [12345.678] {XID_79}",  # short-precise + kernel stamp
        f"2025-01-12T10:00:00+0000 gpu-node-1 kernel: {XID_79}",  # journalctl -o short-iso
        f"<4>1 2025-01-12T10:00:00.000Z gpu-node-1 kernel - - - {XID_79}",  # RFC 5424
        f"{XID_79}\r\n",
    ],
    ids=["dmesg", "dmesg-T", "dmesg-x", "kmsg", "syslog", "short-precise", "short-iso", "rfc5424", "crlf"],
)
def test_xid_in_every_format(line: str) -> None:
    report = parse_line(line)
    assert report is not None
    assert (report.kind, report.code, report.pci) == ("xid", 79, "0000:3b:00")
    assert report.message == "pid=1234, name=python, GPU has fallen off the bus."
    assert report.raw == line.rstrip("\r\n")


def test_xid_from_older_drivers_without_pci_prefix() -> None:
    report = parse_line("NVRM: Xid (0000:03:00): 13, Graphics Exception: ESR 0x504648=0x2000d")
    assert report is not None
    assert (report.code, report.pci) == (13, "0000:03:00")


def test_xid_without_message_and_upper_case_pci() -> None:
    report = parse_line("NVRM: Xid (PCI:0000:CA:00): 48")
    assert report is not None
    assert (report.code, report.pci, report.message) == (48, "0000:ca:00", "")


def test_xid_154_keeps_the_recovery_text() -> None:
    report = parse_line(
        "[Mon Apr  6 07:25:24 2026] NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action "
        "changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    )
    assert report is not None
    assert report.message.endswith("(GPU Reset Required)")


@pytest.mark.parametrize(
    ("line", "gpu_instance", "compute_instance", "code", "message"),
    [
        # The driver attributes a contained error to the MIG instance that caused it (A100 memory error docs).
        (
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No",
            5,
            None,
            94,
            "pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No",
        ),
        # "PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u" when a compute instance is known too.
        (
            "[ 512.25] NVRM: Xid (PCI:0000:01:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=python, Graphics Exception",
            1,
            2,
            13,
            "pid=9, name=python, Graphics Exception",
        ),
        ("Jan 12 10:00:00 n1 kernel: NVRM: Xid (PCI:0000:01:00 GPU-I:14): 43, pid=77, Ch 00000008", 14, None, 43, None),
    ],
    ids=["gpu-instance", "compute-instance", "syslog"],
)
def test_xid_from_a_mig_instance_is_the_physical_gpus(
    line: str, gpu_instance: int, compute_instance: int | None, code: int, message: str | None
) -> None:
    report = parse_line(line)
    assert report is not None
    assert (report.kind, report.code, report.pci) == ("xid", code, "0000:01:00")
    assert (report.gpu_instance, report.compute_instance) == (gpu_instance, compute_instance)
    if message is not None:
        assert report.message == message


def test_a_plain_xid_names_no_mig_instance() -> None:
    report = parse_line(XID_79)
    assert report is not None
    assert (report.gpu_instance, report.compute_instance) == (None, None)


@pytest.mark.parametrize(
    ("line", "code", "pci", "message"),
    [
        (
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 46 egress non-posted PRIV error",
            12028,
            "0000:05:00.0",
            "Non-fatal, Link 46 egress non-posted PRIV error",
        ),
        (
            "kernel: [123.456789] nvidia-nvswitch3: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, Link 28 RX Short",
            20009,
            "0000:c3:00.0",
            "Non-fatal, Link 28 RX Short",
        ),
        (
            "[2026-07-15T04:18:55.513286+00:00] nvidia-nvswitch0: SXid (PCI:0000:59:00.0): 23001, Fatal, Link 12",
            23001,
            "0000:59:00.0",
            "Fatal, Link 12",
        ),
        (
            "Jan 12 10:00:00 host kernel: nvidia-nvswitch1 SXid (PCI:0000:06:00.0): 11001, Fatal, ingress",
            11001,
            "0000:06:00.0",
            "Fatal, ingress",
        ),
    ],
)
def test_sxid(line: str, code: int, pci: str, message: str) -> None:
    report = parse_line(line)
    assert report is not None
    assert (report.kind, report.code, report.pci, report.message) == ("sxid", code, pci, message)


def test_peermem_error() -> None:
    line = (
        "[Fri Aug 30 11:11:22 2024] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid "
        "context, skipping further processing"
    )
    report = parse_line(line)
    assert report is not None
    assert (report.kind, report.code, report.pci) == ("peermem", None, None)
    assert "invalid context" in report.message


@pytest.mark.parametrize(
    "line",
    [
        "",
        "hello world",
        "NVRM: GPU at PCI:0000:3b:00: GPU-9a613ad4-057b-4fb1-8572-ae2d3c112a92",
        "NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.",  # the companion line of Xid 79, not a report
        "NVRM: Xid (PCI:0000:3b:00): abc, not a code",
        "NVRM: Xid (PCI:zz:yy): 79, bad address",
        "NVRM: Xid (PCI:0000:3b:00): 12345678, too many digits",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): , missing code",
        "nvidia-peermem: module loaded",
        "[  1.0] nvidia-nvswitch: Probing device 0000:05:00.0",
        "grep Xid /var/log/syslog",
    ],
)
def test_other_lines_are_not_reports(line: str) -> None:
    assert parse_line(line) is None


@given(st.text())
def test_parser_never_fails_on_arbitrary_text(line: str) -> None:
    report = parse_line(line)
    if report is not None:
        assert report.raw == line.rstrip("\r\n")
        assert report.code is None or report.code >= 0


@given(
    prefix=st.text(alphabet=st.characters(exclude_characters="\r\n"), max_size=40),
    code=st.integers(min_value=0, max_value=999_999),
    bus=st.integers(min_value=0, max_value=255),
    suffix=st.text(alphabet=st.characters(exclude_characters="\r\n"), max_size=40),
)
def test_any_prefix_and_message_keep_code_and_pci(prefix: str, code: int, bus: int, suffix: str) -> None:
    line = f"{prefix} NVRM: Xid (PCI:0000:{bus:02x}:00): {code}, {suffix}"
    report = parse_line(line)
    assert report is not None
    # A prefix may itself hold an Xid report; the first one in the line is the one parsed.
    if "NVRM: Xid" not in prefix:
        assert (report.code, report.pci) == (code, f"0000:{bus:02x}:00")


@given(
    code=st.integers(min_value=0, max_value=999_999),
    bus=st.integers(min_value=0, max_value=255),
    gpu_instance=st.integers(min_value=0, max_value=99),
    compute_instance=st.none() | st.integers(min_value=0, max_value=99),
    suffix=st.text(alphabet=st.characters(exclude_characters="\r\n"), max_size=40),
)
def test_any_mig_attribution_keeps_code_pci_and_instances(
    code: int, bus: int, gpu_instance: int, compute_instance: int | None, suffix: str
) -> None:
    instances = f" GPU-I:{gpu_instance:02d}" + ("" if compute_instance is None else f" GPU-CI:{compute_instance:02d}")
    report = parse_line(f"[1.0] NVRM: Xid (PCI:0000:{bus:02x}:00{instances}): {code}, {suffix}")
    assert report is not None
    assert (report.code, report.pci) == (code, f"0000:{bus:02x}:00")
    assert (report.gpu_instance, report.compute_instance) == (gpu_instance, compute_instance)

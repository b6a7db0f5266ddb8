"""`konduktor-health classify` end to end: kernel lines in, one JSON object per Xid/SXid line out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from konduktor.cli.health import main

LINES = [
    "[12345.678901] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
    "Jan 12 10:00:00 gpu-1 kernel: NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', Graphics SM Warp Exception",
    "random line from a healthy kernel",
    "[Fri Aug 30 11:11:22 2024] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context",
    "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 46 egress non-posted PRIV error",
    "4,99,123,-;NVRM: Xid (PCI:0000:01:00): 999, from a future driver",
]


def classify(stdin: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "konduktor.cli.health", "classify", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_classify_prints_one_object_per_report_line() -> None:
    done = classify("\n".join(LINES).encode() + b"\n")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert records == [
        {
            "kind": "xid",
            "code": 79,
            "pci": "0000:3b:00",
            "name": "GPU_HAS_FALLEN_OFF_THE_BUS",
            "severity": "critical",
            "action": "reboot",
            "quarantine": True,
        },
        {
            "kind": "xid",
            "code": 13,
            "pci": "0000:cb:00",
            "name": "GR_EXCEPTION",
            "severity": "warning",
            "action": "restart_app",
            "quarantine": False,
        },
        {
            "kind": "sxid",
            "code": 12028,
            "pci": "0000:05:00.0",
            "name": "NVSWITCH_EGRESS_NONPOSTED_PRIV",
            "severity": "warning",
            "action": "none",
            "quarantine": False,
        },
        {
            "kind": "xid",
            "code": 999,
            "pci": "0000:01:00",
            "name": "UNKNOWN_XID",
            "severity": "warning",
            "action": "none",
            "quarantine": False,
        },
    ]


def test_classify_survives_bytes_that_are_not_utf8() -> None:
    done = classify(b"\xff\xfe garbage\n" + LINES[0].encode() + b"\n\x80\n")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["code"] for line in done.stdout.decode().splitlines()] == [79]


def test_classify_honours_quarantine_unknown_from_the_config(tmp_path: Path) -> None:
    config = tmp_path / "health.yaml"
    config.write_text("quarantine_unknown: true\n")
    done = classify(LINES[-1].encode(), "--config", str(config))
    assert json.loads(done.stdout)["quarantine"] is True


def test_bad_config_exits_2_with_located_errors_and_no_traceback(tmp_path: Path) -> None:
    config = tmp_path / "health.yaml"
    config.write_text("breaker:\n  max_nodes: -1\n")
    done = classify(b"", "--config", str(config))
    assert done.returncode == 2
    stderr = done.stderr.decode()
    assert f"{config}:2: breaker.max_nodes: must be >= 1" in stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("argv", [["classify", "--no-such-flag"], ["no-such-command"], []])
def test_usage_errors_exit_2(argv: list[str]) -> None:
    assert main(argv) == 2

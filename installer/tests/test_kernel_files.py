"""The controller's kernel log file source: one file per node, read as `tail -F` reads them."""

from __future__ import annotations

from pathlib import Path

from konduktor.health.kernel_files import KernelLogFiles
from konduktor.health.settings import parse_settings

XID_79 = "[ 100.000001] NVRM: Xid (PCI:0000:18:00.0): 79, pid=0, GPU has fallen off the bus."


def lines(source: KernelLogFiles) -> list[tuple[str, str]]:
    return [(line.node, line.line) for line in source.read()]


def test_what_a_file_held_before_the_start_is_history_and_new_lines_are_read_once(tmp_path: Path) -> None:
    (tmp_path / "gpu-0.log").write_text("[ 1.0] old line\n")
    source = KernelLogFiles(tmp_path)
    assert lines(source) == []
    with (tmp_path / "gpu-0.log").open("a") as log:
        log.write(XID_79 + "\n")
    assert lines(source) == [("gpu-0", XID_79)]
    assert lines(source) == []


def test_a_new_file_is_read_from_its_start_and_a_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    source = KernelLogFiles(tmp_path / "not-yet")
    assert lines(source) == []  # no directory yet: nothing, no error
    (tmp_path / "not-yet").mkdir()
    (tmp_path / "not-yet" / "gpu-1.log").write_text(f"{XID_79}\n[ 2.0] half")
    (tmp_path / "not-yet" / "notes.txt").write_text("not a node's log\n")
    assert lines(source) == [("gpu-1", XID_79)]
    with (tmp_path / "not-yet" / "gpu-1.log").open("a") as log:
        log.write(" done\n")
    assert lines(source) == [("gpu-1", "[ 2.0] half done")]


def test_a_file_that_shrank_is_read_from_its_start_again(tmp_path: Path) -> None:
    log = tmp_path / "gpu-2.log"
    source = KernelLogFiles(tmp_path)
    log.write_text("[ 1.0] " + "a long line that will be rotated away " * 4 + "\n")
    assert len(lines(source)) == 1
    log.write_text(XID_79 + "\n")  # rotated: a new, shorter file
    assert lines(source) == [("gpu-2", XID_79)]


def test_the_settings_name_the_directory() -> None:
    settings = parse_settings("kernel_log_files:\n  directory: /var/log/remote\n", "health.yaml")
    assert settings.kernel_log_files is not None and settings.kernel_log_files.directory == "/var/log/remote"
    assert parse_settings("", "health.yaml").kernel_log_files is None

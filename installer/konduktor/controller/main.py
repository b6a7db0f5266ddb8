"""The `konduktor-health` command line.

`classify` judges kernel log lines offline (no cluster needed). The in-cluster watch loop,
`run --kubeconfig ... --config ...`, joins this app once the Kubernetes edge (`konduktor.kube`) exists.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from konduktor.cli.app import new_app, run_app
from konduktor.controller.classify import classify_report
from konduktor.controller.kernel_log import parse_line
from konduktor.controller.settings import HealthSettings, load_settings

app = new_app("konduktor-health", "Detect faulty GPU nodes and keep work off them until they requalify.")


@app.command("classify")
def classify(
    config: Annotated[Path | None, typer.Option("--config", help="Controller config file (YAML).")] = None,
) -> None:
    """Read kernel log lines on stdin; print one JSON object per Xid/SXid line (other lines print nothing)."""
    settings = load_settings(config) if config else HealthSettings()
    for line in _stdin_lines():
        report = parse_line(line)
        if report is None or report.kind == "peermem":
            continue
        finding = classify_report(report, node="", settings=settings)
        record = {
            "kind": finding.kind,
            "code": finding.code,
            "pci": finding.gpu,
            "name": finding.name,
            "severity": finding.severity.value,
            "action": finding.action.value,
            "quarantine": finding.quarantine,
        }
        # One line per report and flushed, so that `journalctl -kf | konduktor-health classify` streams.
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


def _stdin_lines() -> Iterable[str]:
    # Kernel logs can hold bytes that are not UTF-8; a bad byte must not end the stream.
    if isinstance(sys.stdin, io.TextIOWrapper):
        sys.stdin.reconfigure(errors="replace")
    return sys.stdin


def main(argv: list[str] | None = None) -> int:
    return run_app(app, argv, "konduktor-health")


def run() -> None:
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    run()

"""The `konduktor-health` command line.

`classify` judges kernel log lines offline (no cluster needed). `run` is the controller: in a pod it uses the
pod's service account; locally, `--kubeconfig`. `--once` makes one complete pass and exits.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from konduktor.cli.app import new_app, run_app
from konduktor.gpu.kernel_log import parse_line
from konduktor.health import logs
from konduktor.health.actuator import action_name
from konduktor.health.classify import classify_report
from konduktor.health.decide import Action, Plan, RecordEvent, SetCondition, UpdateNode
from konduktor.health.loop import HealthController
from konduktor.health.server import HealthServer
from konduktor.health.settings import HealthSettings, load_settings
from konduktor.kube.client import Kube
from konduktor.vocabulary import SYSTEM_NAMESPACE

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


@app.command("run")
def run_controller(
    config: Annotated[Path | None, typer.Option("--config", help="Controller config file (YAML).")] = None,
    kubeconfig: Annotated[
        Path | None, typer.Option("--kubeconfig", help="Cluster to watch; default: in-cluster, else ~/.kube/config.")
    ] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context.")] = None,
    once: Annotated[bool, typer.Option("--once", help="Make one complete pass, print what it did, and exit.")] = False,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port of /healthz and /metrics.")] = 8080,
    lease_namespace: Annotated[
        str, typer.Option("--lease-namespace", help="Namespace of the leader Lease (which also keeps the Loki cursor).")
    ] = SYSTEM_NAMESPACE,
) -> None:
    """Watch GPU nodes, quarantine faulty ones, requalify them by burn-in."""
    settings = load_settings(config) if config else HealthSettings()
    logs.configure()
    with Kube(kubeconfig, context) as kube:
        # The pod name in a cluster (set by the chart), so that the Lease names the replica an operator can find.
        identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        controller = HealthController(kube, settings, identity=identity, lease_namespace=lease_namespace)
        if once:
            sys.stdout.write(json.dumps(summary(controller.reconcile_once())) + "\n")
            return
        server = HealthServer(controller.metrics.registry, controller.healthy, port)
        server.start()
        logs.log(logging.INFO, "serving /healthz and /metrics", port=server.port, identity=identity)
        stop = threading.Event()
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda *_: stop.set())
        try:
            controller.run(stop)
        finally:
            server.stop()


def summary(plan: Plan) -> dict[str, object]:
    """What one pass wrote (or, in dry-run, would have written), for `--once`."""

    def described(action: Action) -> dict[str, object]:
        record: dict[str, object] = {"action": action_name(action), "node": action.node}
        if isinstance(action, RecordEvent | SetCondition):
            record["reason"] = action.reason
        if isinstance(action, UpdateNode):
            record["taints"] = [f"{t.key}={t.value}:{t.effect}" for t in (*action.add_taints, *action.remove_taints)]
        return record

    return {
        "writes": [described(a) for a in plan.actions],
        "withheld": [described(a) for a in plan.withheld],
        "breaker_tripped": plan.breaker.tripped,
        "notices": [{"level": n.level, "node": n.node, "message": n.message} for n in plan.notices],
    }


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

"""`konduktor-install relay-fleet-events`: on a MultiKueue manager, tell job owners what the workers' health
controllers told the workers' copies of their jobs."""

from __future__ import annotations

import os
import socket
import threading
from typing import Annotated

import typer

from konduktor.cli.console import err, warn
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.errors import ExitCode
from konduktor.health.fleet_events import relay_pass


def relay_fleet_events(
    worker: Annotated[
        list[str], typer.Option("--worker", help="A worker cluster's name in the config (repeat for each).")
    ],
    every: Annotated[
        float | None,
        typer.Option("--every", help="Relay again every this many seconds until interrupted (run as a service)."),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
) -> None:
    """Copy the health controller's Events to job owners from each worker to the manager's jobs.

    A worker that cannot be read is named and the others are still read (exit 1 when run once)."""
    kube = connect(kubeconfig, context, sim)
    instance = os.environ.get("POD_NAME") or socket.gethostname()
    stop = threading.Event()
    handled: frozenset[str] = frozenset()
    while True:
        done = relay_pass(kube, worker, instance, handled)
        handled = done.handled
        if done.relayed:
            err.print(f"relayed {done.relayed} Events from the workers to the manager's jobs", markup=False)
        for name, reason in done.unreadable.items():
            warn(f"worker {name} not read: {reason}")
        if every is None:
            if done.unreadable:
                raise typer.Exit(ExitCode.NEGATIVE)
            return
        if stop.wait(every):
            return

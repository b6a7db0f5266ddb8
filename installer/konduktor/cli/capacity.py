"""`konduktor-install publish-capacity`: write the capacity summary team members read (`konduktor why`)."""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer

from konduktor.cli.console import err
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.errors import ExitCode
from konduktor.queueing.capacity import HEARTBEAT_SECONDS
from konduktor.queueing.cluster import publish_capacity as publish
from konduktor.queueing.publisher import SETTLE_SECONDS, serve
from konduktor.vocabulary import CAPACITY_CONFIGMAP


def publish_capacity(
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="Run as a service: keep the capacity current from watches, write a team namespace's copy only when "
            "it changes, renew the heartbeat every --heartbeat seconds.",
        ),
    ] = False,
    heartbeat: Annotated[
        float,
        typer.Option(
            "--heartbeat",
            min=1,
            help="With --watch: seconds between heartbeats (readers call the capacity stale after 3 missed).",
        ),
    ] = HEARTBEAT_SECONDS,
    settle: Annotated[
        float,
        typer.Option(
            "--settle", min=0, help="With --watch: seconds changes are gathered before the capacity is written again."
        ),
    ] = SETTLE_SECONDS,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
) -> None:
    """Publish free GPUs per GPU type and how they spread over nodes, free slices per sharing group, quarantines and
    team quota usage (whole GPUs and slices) for team members (no job or pod names), in a size that does not grow
    with the fleet.

    A team namespace that refuses the write is named and the others still get theirs (exit 1 when run once)."""
    kube = connect(kubeconfig, context, sim)
    if watch:
        stop = threading.Event()
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda *_: stop.set())
        serve(kube, stop, heartbeat=heartbeat, settle=settle, say=lambda line: err.print(line, markup=False))
        return
    done = publish(kube)
    capacity = done.capacity
    groups = {s.flavor for s in capacity.slices}
    sliced = f", the slices of {len(groups)} sharing groups" if groups else ""
    err.print(
        f"published ConfigMap {CAPACITY_CONFIGMAP} in {len(done.namespaces)} team namespaces "
        f"({len(done.written)} written, {len(done.unchanged)} unchanged): {capacity.nodes} GPU nodes of "
        f"{len(capacity.flavors)} GPU types{sliced}, {len(capacity.queues)} queue rows",
        markup=False,
    )
    for namespace, reason in done.refused.items():
        err.print(f"warning: not published in namespace {namespace}: {reason}", markup=False)
    if done.heartbeat:
        err.print(f"warning: heartbeat not renewed: {done.heartbeat}", markup=False)
    if done.refused:
        raise typer.Exit(ExitCode.NEGATIVE)

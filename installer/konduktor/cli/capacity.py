"""`konduktor-install publish-capacity`: write the capacity summary team members read (`konduktor why`)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Annotated

import typer

from konduktor.cli.console import err
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.errors import ExitCode
from konduktor.queueing.cluster import publish_capacity as publish
from konduktor.vocabulary import CAPACITY_CONFIGMAP


def publish_capacity(
    every: Annotated[
        float | None,
        typer.Option("--every", help="Publish again every this many seconds until interrupted (run as a service)."),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
) -> None:
    """Publish free GPUs per node, quarantines and team quota usage for team members (no job or pod names).

    A team namespace that refuses the write is named and the others still get theirs (exit 1 when run once)."""
    kube = connect(kubeconfig, context, sim)
    stop = threading.Event()
    while True:
        capacity, namespaces, refused = publish(kube, datetime.now(UTC).isoformat(timespec="seconds"))
        err.print(
            f"published ConfigMap {CAPACITY_CONFIGMAP} in {len(namespaces)} team namespaces: "
            f"{len(capacity.nodes)} GPU nodes, {len(capacity.queues)} queue rows",
            markup=False,
        )
        for namespace, reason in refused.items():
            err.print(f"warning: not published in namespace {namespace}: {reason}", markup=False)
        if every is None:
            if refused:
                raise typer.Exit(ExitCode.NEGATIVE)
            return
        if stop.wait(every):
            return

"""Which cluster a command talks to: --kubeconfig, else $KUBECONFIG, else the running simulated cluster."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from konduktor.errors import UsageError
from konduktor.kube.client import Kube
from konduktor.sim.cluster import DEFAULT_NAME, SimCluster

KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Cluster to use (default: $KUBECONFIG, else the running simulated cluster).",
        dir_okay=False,
    ),
]


def explicit_kubeconfig(flag: Path | None) -> Path | None:
    """The kubeconfig the user named, by flag or environment; None means 'the simulated cluster'."""
    if flag is not None:
        return flag
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(env) if env else None


def connect(flag: Path | None) -> Kube:
    kubeconfig = explicit_kubeconfig(flag)
    if kubeconfig is None:
        sim = SimCluster(DEFAULT_NAME)
        if not sim.kubeconfig.exists():
            raise UsageError(
                "no cluster given and the simulated cluster is not running",
                hint="pass --kubeconfig or set KUBECONFIG, or start one: konduktor-install sim up",
            )
        kubeconfig = sim.kubeconfig
    return Kube(kubeconfig)

"""Which cluster a command talks to: --kubeconfig, else $KUBECONFIG, else the running simulated cluster."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from konduktor.errors import UsageError
from konduktor.kube.client import Kube
from konduktor.sim.cluster import DEFAULT_NAME, Progress, SimCluster
from konduktor.tools.pinned import Toolbox

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


@dataclass(frozen=True)
class Target:
    """The cluster a command talks to: the kubeconfig the user named, or the simulated cluster `sim`'s."""

    kubeconfig: Path
    sim: str | None = None

    @property
    def simulated(self) -> bool:
        return self.sim is not None

    def toolbox(self, progress: Progress | None = None) -> Toolbox:
        """A real cluster may use a fitting helm on this machine; the simulated one runs the pinned build."""
        return Toolbox(progress=progress, host=not self.simulated)


def resolve_target(flag: Path | None, sim: str = DEFAULT_NAME) -> Target:
    """--kubeconfig, else $KUBECONFIG, else the simulated cluster `sim` (which may not be running yet)."""
    explicit = explicit_kubeconfig(flag)
    return Target(explicit) if explicit is not None else Target(SimCluster(sim).kubeconfig, sim)


def running_target(flag: Path | None) -> Target:
    """As `resolve_target`, and the simulated cluster must be running."""
    target = resolve_target(flag)
    if target.simulated and not target.kubeconfig.exists():
        raise UsageError(
            "no cluster given and the simulated cluster is not running",
            hint="pass --kubeconfig or set KUBECONFIG, or start one: konduktor-install sim up",
        )
    return target


def connect(flag: Path | None) -> Kube:
    return Kube(running_target(flag).kubeconfig)

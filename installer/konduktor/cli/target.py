"""The options that name the cluster a command talks to (`--kubeconfig`, `--context`, `--sim`); the rules that
pick it from them are `konduktor.ops.target`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from konduktor.kube.client import Identity, Kube
from konduktor.ops.target import running_target
from konduktor.sim.cluster import DEFAULT_NAME

KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Kubeconfig file (default: $KUBECONFIG, merged as kubectl does; see --sim).",
        dir_okay=False,
    ),
]
ContextOption = Annotated[str | None, typer.Option("--context", help="The kubeconfig context to use.")]
SimOption = Annotated[
    str | None,
    typer.Option(
        "--sim",
        help=f"Use this simulated cluster (default, when no kubeconfig is named: {DEFAULT_NAME!r}).",
        show_default=False,
    ),
]


AsOption = Annotated[
    str | None, typer.Option("--as", help="Act as this user (as kubectl --as; the kubeconfig's user may impersonate).")
]
AsGroupOption = Annotated[str | None, typer.Option("--as-group", help="With --as: the user's group (a team's group).")]


def connect(
    kubeconfig: Path | None = None,
    context: str | None = None,
    sim: str | None = None,
    *,
    read_only: bool = False,
    as_user: str | None = None,
    as_group: str | None = None,
) -> Kube:
    """The cluster the options name, as `as_user` (in `as_group`) when given, as kubectl's --as and --as-group."""
    identity = Identity(as_user, as_group) if as_user is not None else None
    return running_target(kubeconfig, context, sim, read_only=read_only).connect(identity)

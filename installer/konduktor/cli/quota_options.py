"""What a quota sync may take over or remove, as `quotas apply` and `up` are told it."""

from __future__ import annotations

from typing import Annotated

import typer

from konduktor.quotas.removal import DrainPolicy

AdoptOption = Annotated[
    list[str] | None,
    typer.Option(
        "--adopt",
        metavar="KIND/[NAMESPACE/]NAME",
        help="Take over an existing object that someone else owns, e.g. Namespace/team-c (repeatable). It is "
        "marked konduktor.ai/adopted-from and never deleted by Konduktor.",
    ),
]
DrainOption = Annotated[
    DrainPolicy | None,
    typer.Option(
        "--drain-removed-teams",
        help="How to remove a team that left the config while it has work: wait (for its workloads to finish) or "
        "stop (stop its ClusterQueue: Kueue evicts them and admits no more). Without it, apply refuses.",
    ),
]
DrainTimeoutOption = Annotated[
    float,
    typer.Option(
        "--drain-timeout",
        min=1,
        help="Seconds to wait for a removed team's work to drain, then for its ClusterQueue to be deleted; for up, "
        "also for the GPU pods --drain-for-sharing evicts to go and for a node's new MIG layout to be in place.",
    ),
]

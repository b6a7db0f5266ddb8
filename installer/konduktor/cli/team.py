"""The `konduktor` command line, for team members: their queue, why a job waits, and submitting jobs.

It needs no administrator rights: the team's namespace (Kueue's batch-user role and `edit`) and the capacity
the platform publishes. Commands are imported when they run (`konduktor.cli.lazy`).
"""

from __future__ import annotations

import sys

from konduktor.cli.app import new_app, run_app
from konduktor.cli.lazy import LazyCommand, LazyGroup


class TeamCommands(LazyGroup):
    commands_to_load = (
        LazyCommand(
            "queue",
            "konduktor.cli.team_queue:register",
            "Your team's GPU quota (used, borrowed, lent), its pending jobs in Kueue's order and its running jobs.",
        ),
        LazyCommand(
            "why",
            "konduktor.cli.team_queue:register",
            "Why a job waits, in plain words, and what would make it run. Exit 0: admitted; 1: pending; 6: finished; "
            "7: will never fit.",
        ),
        LazyCommand(
            "submit",
            "konduktor.cli.team_queue:register",
            "Submit a job: fills in the queue label and priority, lets the cluster judge it (dry run), refuses one "
            "that the cluster or its pods' security would refuse (exit 3; --fix changes it) or that can never fit "
            "(exit 7).",
        ),
    )


app = new_app(
    "konduktor",
    "Run GPU jobs on a Konduktor cluster: your team's queue, why a job waits, submitting jobs.",
    group=TeamCommands,
)


def main(argv: list[str] | None = None) -> int:
    return run_app(app, argv, "konduktor")


def run() -> None:
    sys.exit(main(sys.argv[1:]))

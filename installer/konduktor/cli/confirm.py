"""`--yes`, and the question a command asks on a terminal before it changes a real cluster (`up`, `down`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from konduktor.errors import ExitCode, UsageError

if TYPE_CHECKING:  # the plumbing stays light: ops is imported by the commands that run
    from konduktor.ops.target import Confirm

YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before changing a real cluster.")]


def confirmation(yes: bool) -> Confirm | None:
    """A question for the user on a terminal; none with --yes; an error without a terminal to ask on."""
    if yes:
        return None

    def ask(question: str) -> None:
        if not sys.stdin.isatty():
            raise UsageError(f"{question} needs an answer", hint="pass --yes when there is no terminal")
        if not typer.confirm(question):
            raise typer.Exit(ExitCode.NEGATIVE)

    return ask

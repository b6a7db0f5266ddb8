"""Where the CLI writes: data to stdout, progress and status to stderr."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape

from konduktor.errors import KonduktorError

err = Console(stderr=True, highlight=False, soft_wrap=True)
OutputFormat = Literal["table", "json", "yaml"]


def report_error(error: KonduktorError) -> None:
    # Messages quote user input and YAML paths such as nodeLabels[nvidia.com/gpu.product]: not markup.
    err.print(f"[bold red]error:[/] {escape(error.message)}", markup=True, highlight=False)
    if error.detail:
        for line in error.detail.rstrip().splitlines():
            err.print(f"  {line}", markup=False)
    if error.hint:
        for line in error.hint.splitlines():
            err.print(f"[yellow]hint:[/] {escape(line)}", markup=True, highlight=False)


def warn(message: str, hint: str | None = None) -> None:
    """A warning on stderr, as every command writes one: `warning: ...`, then its hint lines indented. The message
    is printed as written (it may quote paths such as nodeLabels[nvidia.com/gpu.product], which are no markup)."""
    err.print(f"[bold yellow]warning:[/] {escape(message)}", markup=True, highlight=False)
    for line in (hint or "").splitlines():
        err.print(f"  [yellow]hint:[/] {escape(line)}", markup=True, highlight=False)


@contextmanager
def status(message: str) -> Iterator[Any]:
    """A spinner on a terminal; nothing when stderr is a pipe (callers print plain lines then)."""
    if err.is_terminal:
        with err.status(message) as spinner:
            yield spinner
    else:
        yield None


# A progress message "STEP · DETAIL" carries live detail (e.g. packages compiled so far) after the separator.
DETAIL = " · "
DETAIL_EVERY = 30.0  # seconds between two printed updates of one step without a terminal


def say(message: str) -> None:
    """One line to stderr, as written (no markup)."""
    err.print(message, markup=False)


@contextmanager
def progress(label: str) -> Iterator[Callable[[str], None]]:
    """A reporter for long work: updates the spinner on a terminal; else prints each step, and a step's live
    detail at most every DETAIL_EVERY seconds, so a log shows steady progress without a line per package."""
    with status(label) as spinner:
        last_step, last_at = "", 0.0

        def report(message: str) -> None:
            nonlocal last_step, last_at
            if spinner is not None:
                spinner.update(f"{label}: {message}")
                return
            step = message.split(DETAIL, 1)[0]
            now = time.monotonic()
            if step == last_step and now - last_at < DETAIL_EVERY:
                return
            last_step, last_at = step, now
            err.print(f"{label}: {message}", markup=False)

        yield report


def print_document(document: Any, output: Literal["json", "yaml"]) -> None:
    """Structured data on stdout, numbers as numbers: one documented shape per kind of report."""
    if output == "json":
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        from ruamel.yaml import YAML  # only YAML output needs it; every command's start would pay for it

        YAML().dump(document, sys.stdout)


def print_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], output: OutputFormat) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(list(rows), indent=2, default=str) + "\n")
    elif output == "yaml":
        from ruamel.yaml import YAML  # only YAML output needs it; every command's start would pay for it

        YAML().dump(
            [{k: (str(v) if not isinstance(v, int | float | bool) else v) for k, v in r.items()} for r in rows],
            sys.stdout,
        )
    else:
        from rich.table import Table  # only tables need it; `validate` and `render` start faster without

        table = Table(*[c.upper() for c in columns], box=None, pad_edge=False)
        for row in rows:
            table.add_row(*["-" if row.get(c) is None else str(row.get(c)) for c in columns])
        out = Console(soft_wrap=True)
        if not out.is_terminal:
            out = Console(soft_wrap=True, width=max(out.width, 200))  # a pipe or file: never truncate columns
        out.print(table)

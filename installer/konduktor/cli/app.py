"""What every Konduktor command line shares: the Typer app shape, `--debug`, `--version`, `-h`, shell completion,
and exit codes."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Annotated

import typer
from typer.core import TyperGroup

from konduktor import __version__
from konduktor.cli.console import err, report_error
from konduktor.cli.help_text import HELP_OPTION_NAMES, PlainHelpGroup
from konduktor.errors import ExitCode, KonduktorError


class Debug:
    """Whether to show tracebacks; set by the `--debug` option, read by the error handler outside Typer."""

    enabled = False


def show_version(context: typer.Context, wanted: bool) -> None:
    if wanted:
        sys.stdout.write(f"{context.find_root().info_name} {__version__}\n")
        raise typer.Exit()


def new_app(name: str, help_text: str, group: type[TyperGroup] = PlainHelpGroup) -> typer.Typer:
    app = typer.Typer(
        name=name,
        help=help_text,
        cls=group,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        # --install-completion / --show-completion: the shell completes commands, options and file names.
        add_completion=True,
        context_settings={"help_option_names": HELP_OPTION_NAMES},
    )

    @app.callback()
    def options(
        debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
        version: Annotated[
            bool,
            typer.Option("--version", help="Print the version and exit.", callback=show_version, is_eager=True),
        ] = False,
    ) -> None:
        Debug.enabled = debug

    return app


def run_app(app: typer.Typer, argv: list[str] | None, prog_name: str) -> int:
    """Run a CLI and map every outcome to an exit code of the one table, `konduktor.errors.ExitCode`."""
    # The CLI uses no pydantic plugins; looking for them reads every installed distribution's entry points at
    # each start (tens of ms in a large virtualenv).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        # Standalone mode: Typer prints its own usage errors (exit 2) and turns typer.Exit into SystemExit.
        app(args=argv, prog_name=prog_name)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (ExitCode.OK if stop.code is None else ExitCode.NEGATIVE)
    except KonduktorError as problem:
        report_error(problem)
        if Debug.enabled:
            traceback.print_exc()
        return problem.exit_code
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except Exception:
        if Debug.enabled:
            traceback.print_exc()
        else:
            err.print(f"[bold red]bug:[/] {sys.exc_info()[1]!r} (re-run with --debug for the traceback)")
        return ExitCode.BUG
    return ExitCode.OK

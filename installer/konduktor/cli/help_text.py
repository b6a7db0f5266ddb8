"""Help that names values, not Python types: `--context CONTEXT`, `CONFIG`, a bare `--yes`.

Typer shows each parameter's type (`<bool>` on a flag, `<str>`, `{config}` in the usage line), which reads like
a placeholder left in. Every parameter gets the metavar click and kubectl would show instead; a parameter that
lists its choices (`<table|wide|json>`) keeps them, and Typer's braces still mark a required argument.
"""

from __future__ import annotations

from typing import Any

from typer import _click
from typer.core import TyperGroup, TyperOption

HELP_OPTION_NAMES = ["-h", "--help"]


def plain_metavars(command: _click.Command) -> _click.Command:
    """Give every parameter of `command` (its help option included) and of its loaded subcommands a metavar that
    names its value."""
    help_option = command.get_help_option(_click.Context(command, help_option_names=HELP_OPTION_NAMES))
    for param in [*command.params, *([help_option] if help_option else [])]:
        _name_value(param)
    if isinstance(command, TyperGroup):
        for sub in getattr(command.commands, "loaded", command.commands).values():  # a LazyGroup's: only loaded
            plain_metavars(sub)
    return command


def _name_value(param: _click.Parameter) -> None:
    descriptor = getattr(param, "type_descriptor", None)
    if param.metavar is not None or (descriptor is not None and descriptor.is_choice):
        return
    if isinstance(param, TyperOption) and param.is_flag:
        param.metavar = ""  # a flag takes no value
    else:
        param.metavar = (param.name or "value").upper()


class PlainHelpGroup(TyperGroup):
    """A Typer group whose commands' help shows `plain_metavars`."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        plain_metavars(self)

    def get_params(self, ctx: _click.Context) -> list[_click.Parameter]:
        params = super().get_params(ctx)
        for param in params:  # Typer adds the shell-completion options after the group is made
            _name_value(param)
        return params

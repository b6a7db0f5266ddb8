"""Commands whose modules are imported only when they run.

`validate`, `render` and `--help` must answer as fast as kubectl does: importing every command pulls in the
Kubernetes client, the health controller and the burn-in, which cost a second before anything happens. A
`LazyGroup` knows each command's name, one-line help and where it lives, and imports that module when the
command is invoked or its own help is asked for. The top-level help lists the one-line helps without importing.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer import _click
from typer.core import TyperCommand

from konduktor.cli.help_text import PlainHelpGroup, plain_metavars


@dataclass(frozen=True)
class LazyCommand:
    """A command of a `LazyGroup`.

    `target` is `module:attribute`: a Typer sub-app, a `register(app)` function that adds commands to an app
    (this one is taken by `name`), or a command function. `help` is the line the group's help lists: the first
    paragraph of the command's own help (a test holds them equal).
    """

    name: str
    target: str
    help: str = ""
    hidden: bool = False

    def load(self) -> _click.Command:
        module_name, attribute = self.target.split(":")
        found = getattr(importlib.import_module(module_name), attribute)
        holder = typer.Typer()
        if isinstance(found, typer.Typer):
            holder.add_typer(found, name=self.name)
        elif attribute == "register":
            found(holder)
        else:
            holder.command(self.name, hidden=self.hidden)(found)
        return plain_metavars(typer.main.get_group(holder).commands[self.name])

    def listing(self) -> _click.Command:
        """What the group's help shows for this command, without importing it."""
        return TyperCommand(name=self.name, help=self.help, hidden=self.hidden)


class _Commands(MutableMapping[str, _click.Command]):
    """The group's commands by name: the lazy ones are imported on first access (or listed, while listing)."""

    def __init__(self, added: Mapping[str, _click.Command], lazy: Mapping[str, LazyCommand]) -> None:
        self.loaded = dict(added)
        self.lazy = lazy
        self.listing = False

    def __getitem__(self, name: str) -> _click.Command:
        if name in self.loaded:
            return self.loaded[name]
        entry = self.lazy[name]
        if self.listing:
            return entry.listing()
        command = self.loaded[name] = entry.load()
        return command

    def __setitem__(self, name: str, command: _click.Command) -> None:
        self.loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self.loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self.lazy, *self.loaded]))  # the listed order, whatever was loaded

    def __len__(self) -> int:
        return len(set(self.loaded) | set(self.lazy))


class LazyGroup(PlainHelpGroup):
    """A Typer group with `commands` added to the ones registered on its app; subclass it to set them."""

    commands_to_load: ClassVar[tuple[LazyCommand, ...]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = self.lazy_commands = _Commands(
            self.commands, {entry.name: entry for entry in self.commands_to_load}
        )

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(self.commands)

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        self.lazy_commands.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.lazy_commands.listing = False

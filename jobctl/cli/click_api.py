"""The parts of click and typer that jobctl needs and typer does not export: typer (since
0.26) vendors click as ``typer._click``, a private module, and keeps its shells' completion
classes and its PATH type in private or internal modules. They are imported here and nowhere else
(``tests/unit/test_layers.py``), with typer's versions pinned in pyproject.toml, and what
jobctl relies on of each is tested (``tests/unit/test_click_api.py``): a new typer that moves
them fails there, in one place.

``lazy_group`` is the one thing here that is jobctl's own: typer turns every registered
command into a click command (reading each signature's annotations) before it parses the
first argument; the lazy group builds only the command that runs (``--help`` and completion
still list them all, in order)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, MutableMapping

import typer
from typer._click.core import Command, Context, ParameterSource
from typer._click.exceptions import ClickException, MissingParameter, NoArgsIsHelpError
from typer._click.formatting import HelpFormatter
from typer._click.shell_completion import (
    CompletionItem,
    _resolve_context,
    _resolve_incomplete,
    add_completion_class,
    split_arg_string,
)
from typer._completion_classes import BashComplete, FishComplete, ZshComplete
from typer.models import OptionInfo  # what typer.Option makes (typed Any, as a default)
from typer.models import TyperPath as PathType  # typer's PATH parameter type

# what a shell's completion is about: the command and its parameter (or command) at the cursor
resolve_context, resolve_incomplete = _resolve_context, _resolve_incomplete

__all__ = [
    "BashComplete",
    "ClickException",
    "CompletionItem",
    "FishComplete",
    "LazyGroup",
    "MissingParameter",
    "NoArgsIsHelpError",
    "OptionInfo",
    "ParameterSource",
    "PathType",
    "ZshComplete",
    "add_completion_class",
    "lazy_group",
    "resolve_context",
    "resolve_incomplete",
    "split_arg_string",
]


class _Commands(MutableMapping[str, Command]):
    """A group's commands by name, in registration order, each built when first looked up."""

    def __init__(self, builders: dict[str, Callable[[], Command]]) -> None:
        self._builders = builders
        self._built: dict[str, Command] = {}

    def __getitem__(self, name: str) -> Command:
        if name not in self._built:
            self._built[name] = self._builders[name]()  # KeyError: not a command
        return self._built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._builders.setdefault(name, lambda: command)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._builders[name]
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)


class LazyGroup(typer.core.TyperGroup):
    """typer's group, listing its commands by name without building them, and in its help
    under their panels."""

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """The commands under the heading of their panel (typer's ``rich_help_panel=``, which
        typer's plain help leaves out), the panels in the order of their first command, a
        command without one under "Commands"; one column of names across the headings, and
        each summary cut to the width, as click cuts it."""
        listed = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                listed.append((name, command))
        if not listed:
            return
        widest = max(len(name) for name, _ in listed)
        limit = formatter.width - 6 - widest  # click's: three times its spacing
        panels: dict[str, list[tuple[str, str]]] = {}
        for name, command in listed:
            panel = getattr(command, "rich_help_panel", None) or "Commands"
            row = (name.ljust(widest), command.get_short_help_str(limit))
            panels.setdefault(panel, []).append(row)
        for panel, rows in panels.items():
            with formatter.section(panel):
                formatter.write_dl(rows)


def lazy_group(app: typer.Typer) -> typer.core.TyperGroup:
    """``app`` as a click group whose commands (and sub-apps) are built on first use."""
    commands, groups = app.registered_commands, app.registered_groups
    short, markup = app.pretty_exceptions_short, app.rich_markup_mode
    builders: dict[str, Callable[[], Command]] = {}
    for info in commands:
        assert info.callback is not None
        name = info.name or typer.main.get_command_name(info.callback.__name__)
        builders[name] = functools.partial(
            typer.main.get_command_from_info,
            info,
            pretty_exceptions_short=short,
            rich_markup_mode=markup,
        )
    for sub in groups:
        assert sub.name, "every sub-app is named"
        builders[sub.name] = functools.partial(
            typer.main.get_group_from_info,
            sub,
            pretty_exceptions_short=short,
            rich_markup_mode=markup,
            suggest_commands=app.suggest_commands,
        )
    app.registered_commands, app.registered_groups = [], []
    try:  # the group itself: its callback's options, built by typer as ever
        group = typer.main.get_group(app)
    finally:
        app.registered_commands, app.registered_groups = commands, groups
    group.commands = _Commands(builders)
    return group

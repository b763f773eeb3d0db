"""What jobctl builds on of typer's command line, through typer's public API alone: the names
``typer`` exports, ``typer.main.get_command`` (the click command of an app, in typer's "Using
Click" tutorial) and ``typer.core.TyperGroup`` (a ``Typer``'s documented ``cls=``). Since 0.26
typer vendors click as ``typer._click``, a private module, so click's own names (its
exceptions, ``ParameterSource``, ``CompletionItem``, the shells' completion classes) are not
imported, here or anywhere (``tests/unit/test_layers.py``); what jobctl needs of them it reads
from the objects typer hands it, by the attributes click documents, and that is tested
(``tests/unit/test_click_api.py``) on every typer the pin allows.

``LazyGroup`` is jobctl's own: a group whose commands are built on first use (typer would
turn every command into a click command, reading each signature's annotations, before it
parses the first argument); ``--help`` and completion still list them all, in order."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, ClassVar, TypeAlias

import typer
import typer.core
import typer.main

# every error click raises for the person at the keyboard (usage, a bad or missing value)
# derives from typer's public TyperException: its message and exit code
ClickException = typer.TyperException
Context = typer.Context
OptionInfo: TypeAlias = Any  # what typer.Option makes (typer types it Any, as a default)

__all__ = [
    "ClickException",
    "Context",
    "LazyGroup",
    "OptionInfo",
    "given",
    "lazy_group",
    "missing",
]


def given(ctx: typer.Context, name: str) -> bool:
    """Whether parameter ``name`` came from the command line (not a default or the
    environment): ``Context.get_parameter_source``, its enum read by name."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def missing(exc: BaseException) -> bool:
    """Whether ``exc`` says a required argument or option was not given: click's
    ``MissingParameter``, a ``typer.BadParameter`` whose message says so ("Missing argument
    'ID...'.", "Missing option '--reason'."), the one typer does not export."""
    return isinstance(exc, typer.BadParameter) and exc.format_message().startswith("Missing ")


class _Commands(MutableMapping[str, Any]):
    """A group's commands by name, in the table's order, each built when first looked up."""

    def __init__(self, builders: Mapping[str, Callable[[], Any]]) -> None:
        self._builders = dict(builders)
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            self._built[name] = self._builders[name]()  # KeyError: not a command
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
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
    """typer's group (a ``Typer``'s ``cls=``) whose commands are ``builders``' (a subclass
    sets them: name to a function that returns the click command, typically
    ``typer.main.get_command`` of a one-command app), each built when first looked up;
    listed by name without building them, and in ``--help`` under their panels."""

    builders: ClassVar[Mapping[str, Callable[[], Any]]] = {}

    def __init__(self, **attrs: Any) -> None:
        attrs["commands"] = _Commands(self.builders)  # typer registered none on the app
        super().__init__(**attrs)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
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
            summary = command.get_short_help_str(limit)
            row = (name.ljust(widest) if summary else name, summary)
            panels.setdefault(panel, []).append(row)
        for panel, rows in panels.items():
            with formatter.section(panel):
                formatter.write_dl(rows)


def lazy_group(app: typer.Typer) -> Any:
    """``app`` as its click group (``typer.main.get_command``): with a ``LazyGroup`` for its
    ``cls``, no command is built until it is looked up."""
    return typer.main.get_command(app)

"""The parts of click that jobctl needs and typer does not re-export: typer (since 0.26)
vendors click as ``typer._click``, a private module. They are imported here and nowhere else
(``tests/unit/test_layers.py``), with typer's versions pinned in pyproject.toml, and what
jobctl relies on of each is tested (``tests/unit/test_click_api.py``): a new typer that moves
them fails there, in one place."""

from typer._click.core import ParameterSource
from typer._click.exceptions import ClickException, MissingParameter, NoArgsIsHelpError
from typer._click.shell_completion import (
    CompletionItem,
    _resolve_context,
    _resolve_incomplete,
    add_completion_class,
    split_arg_string,
)

# what a shell's completion is about: the command and its parameter (or command) at the cursor
resolve_context, resolve_incomplete = _resolve_context, _resolve_incomplete

__all__ = [
    "ClickException",
    "CompletionItem",
    "MissingParameter",
    "NoArgsIsHelpError",
    "ParameterSource",
    "add_completion_class",
    "resolve_context",
    "resolve_incomplete",
    "split_arg_string",
]

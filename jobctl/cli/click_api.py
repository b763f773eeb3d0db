"""The parts of click that jobctl needs and typer does not re-export: typer (since 0.26)
vendors click as ``typer._click``, a private module. They are imported here and nowhere else
(``tests/unit/test_layers.py``), with typer's versions pinned in pyproject.toml, and what
jobctl relies on of each is tested (``tests/unit/test_click_api.py``): a new typer that moves
them fails there, in one place."""

from typer._click.core import ParameterSource
from typer._click.exceptions import ClickException, MissingParameter, NoArgsIsHelpError
from typer._click.shell_completion import CompletionItem, add_completion_class

__all__ = [
    "ClickException",
    "CompletionItem",
    "MissingParameter",
    "NoArgsIsHelpError",
    "ParameterSource",
    "add_completion_class",
]

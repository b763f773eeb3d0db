"""What jobctl relies on of typer's public API (jobctl/cli/click_api.py), on the typer
installed: a typer the pin allows that changes it fails here first."""

from __future__ import annotations

import importlib.metadata
from types import MappingProxyType

import pytest
import typer

from jobctl.cli import click_api


def test_typer_is_a_version_the_pin_allows():
    major, minor = (int(p) for p in importlib.metadata.version("typer").split(".")[:2])
    assert (0, 26) <= (major, minor) < (0, 30)  # the pin allows <0.29; 0.29.2 runs too


def test_the_errors_click_raises_are_typer_exceptions():
    app = typer.Typer(add_completion=False)

    @app.command()
    def main(job_id: int, reason: str = typer.Option(...)) -> None:
        pass

    command = typer.main.get_command(app)
    with pytest.raises(click_api.ClickException) as missing:
        command.main([], standalone_mode=False)
    assert click_api.missing(missing.value) and missing.value.exit_code == 2
    assert missing.value.ctx is not None  # type: ignore[attr-defined]
    with pytest.raises(click_api.ClickException) as bad:
        command.main(["x", "--reason", "r"], standalone_mode=False)
    assert not click_api.missing(bad.value) and "Invalid value" in bad.value.format_message()
    with pytest.raises(click_api.ClickException) as unknown:
        command.main(["1", "--reason", "r", "--nope"], standalone_mode=False)
    assert "No such option" in unknown.value.format_message()
    assert not issubclass(typer.Exit, click_api.ClickException)  # caught on its own


def test_given_says_the_command_line():
    app = typer.Typer(add_completion=False)
    seen = {}

    @app.command()
    def main(ctx: typer.Context, name: str = "x") -> None:
        seen["given"] = click_api.given(ctx, "name")

    typer.main.get_command(app).main(["--name", "y"], standalone_mode=False)
    assert seen["given"] is True
    typer.main.get_command(app).main([], standalone_mode=False)
    assert seen["given"] is False


def lazy_app(built: list[str], ran: list[tuple[str, int]]) -> typer.Typer:
    def build(name: str) -> object:
        built.append(name)
        one = typer.Typer(add_completion=False)

        @one.command(name, rich_help_panel="Second" if name == "third" else "First")
        def command(count: int = 1) -> None:
            ran.append((name, count))

        return typer.main.get_command(one)

    class Group(click_api.LazyGroup):
        builders = MappingProxyType(
            {n: (lambda n=n: build(n)) for n in ("first", "second", "third")}
        )

    app = typer.Typer(cls=Group, add_completion=False, rich_markup_mode=None)
    app.callback()(lambda: None)
    return app


def test_the_lazy_group_builds_only_the_command_that_runs():
    built: list[str] = []
    ran: list[tuple[str, int]] = []
    group = click_api.lazy_group(lazy_app(built, ran))
    assert group.list_commands(None) == ["first", "second", "third"]
    assert built == []  # listing builds nothing
    group.main(["second", "--count", "3"], standalone_mode=False)
    assert ran == [("second", 3)]
    assert built == ["second"]
    assert group.get_command(None, "no-such") is None


def test_the_lazy_groups_help_lists_its_panels():
    from typer.testing import CliRunner

    text = CliRunner().invoke(lazy_app([], []), ["--help"]).output
    assert text.index("First:") < text.index("  first") < text.index("  second")
    assert text.index("  second") < text.index("Second:") < text.index("  third")
    assert "Commands:" not in text


def test_the_apps_group_lists_the_command_tables_commands():
    from jobctl.cli import commands
    from jobctl.cli import main as cli

    group = click_api.lazy_group(cli.app)
    assert list(group.list_commands(None)) == list(commands.COMMANDS)
    for name in group.list_commands(None):
        built = group.get_command(None, name)
        assert built is not None and built.get_short_help_str()

"""What jobctl relies on of the click typer vendors (jobctl/cli/click_api.py)."""

from __future__ import annotations

import importlib.metadata

import typer

from jobctl.cli import click_api


def test_typer_is_a_version_the_pin_allows():
    major, minor = (int(p) for p in importlib.metadata.version("typer").split(".")[:2])
    assert (0, 26) <= (major, minor) < (0, 29)


def test_the_exceptions_jobctl_catches_are_click_exceptions():
    assert issubclass(click_api.MissingParameter, click_api.ClickException)
    assert issubclass(click_api.NoArgsIsHelpError, click_api.ClickException)
    assert not issubclass(typer.Exit, click_api.ClickException)  # caught on its own


def test_a_parameter_source_says_the_command_line():
    app = typer.Typer()
    seen = {}

    @app.command()
    def main(ctx: typer.Context, name: str = "x") -> None:
        seen["source"] = ctx.get_parameter_source("name")

    typer.main.get_command(app).main(["--name", "y"], standalone_mode=False)
    assert seen["source"] is click_api.ParameterSource.COMMANDLINE
    typer.main.get_command(app).main([], standalone_mode=False)
    assert seen["source"] is click_api.ParameterSource.DEFAULT


def test_a_completion_item_carries_its_value_and_help():
    item = click_api.CompletionItem("web-1", help="a worker")
    assert (item.value, item.help, item.type) == ("web-1", "a worker", "plain")
    assert callable(click_api.add_completion_class)

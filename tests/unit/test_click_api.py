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


def test_the_lazy_group_builds_only_the_command_that_runs(monkeypatch):
    built: list[str] = []
    real = typer.main.get_command_from_info

    def counting(info, **kwargs):  # type: ignore[no-untyped-def]
        built.append(info.name)
        return real(info, **kwargs)

    monkeypatch.setattr(typer.main, "get_command_from_info", counting)
    app = typer.Typer(cls=click_api.LazyGroup)
    ran = []

    def command_named(name: str):  # type: ignore[no-untyped-def]
        def command(count: int = 1) -> None:
            ran.append((name, count))

        return command

    for name in ("first", "second", "third"):
        app.command(name)(command_named(name))
    app.callback()(lambda: None)
    group = click_api.lazy_group(app)
    group.main(["second", "--count", "3"], standalone_mode=False)
    assert ran == [("second", 3)]
    assert built == ["second"]
    assert group.list_commands(None) == ["first", "second", "third"]  # type: ignore[arg-type]
    assert built == ["second"]  # listing builds nothing
    assert len(app.registered_commands) == 3  # the app is left as it was


def test_the_lazy_group_lists_what_typer_lists_in_its_order():
    from jobctl.cli import main as cli

    eager = typer.main.get_command(cli.app)
    lazy = click_api.lazy_group(cli.app)
    assert list(lazy.list_commands(None)) == list(eager.list_commands(None))  # type: ignore[arg-type,attr-defined]
    for name in eager.list_commands(None):  # type: ignore[arg-type,attr-defined]
        a, b = eager.get_command(None, name), lazy.get_command(None, name)  # type: ignore[arg-type,attr-defined]
        assert a is not None and b is not None
        assert [p.name for p in a.params] == [p.name for p in b.params]
        assert a.get_short_help_str() == b.get_short_help_str()
    assert lazy.get_command(None, "no-such") is None  # type: ignore[arg-type]


def test_an_option_is_typers_option_info():
    assert isinstance(typer.Option(metavar="DURATION"), click_api.OptionInfo)

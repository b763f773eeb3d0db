"""The command table (``cli/commands``) is the one registry: the app holds its commands in its
order, every option it names for a write is an option of that command, what it says a
command does is what the core is told, and reading it (or asking for help) loads nothing
heavy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from test_layers import MODULES, imports
from typer.testing import CliRunner

from jobctl.cli import commands, context
from jobctl.cli import main as cli
from jobctl.ops.sessions import Access

ROOT = Path(__file__).resolve().parents[2]


def built(name: str) -> typer.core.TyperCommand:
    """The click command ``jobctl NAME`` runs (``schema apply``: its subcommand)."""
    command = typer.main.get_command(cli.app)
    for word in name.split():
        command = command.commands[word]  # type: ignore[attr-defined]
    return command  # type: ignore[return-value]


def listed() -> list[tuple[str, commands.Command]]:
    """Every command of the table by its name as typed after ``jobctl``."""
    found = []
    for name, entry in commands.COMMANDS.items():
        if isinstance(entry, commands.Group):
            found += [(f"{name} {sub}", command) for sub, command in entry.commands.items()]
        else:
            found.append((name, entry))
    return found


def test_the_app_holds_the_tables_commands_in_its_order():
    group = typer.main.get_command(cli.app)
    assert list(group.commands) == list(commands.COMMANDS)  # type: ignore[attr-defined]
    for name, entry in commands.COMMANDS.items():
        if isinstance(entry, commands.Group):
            assert list(built(name).commands) == list(entry.commands)  # type: ignore[attr-defined]


def test_help_lists_the_table_under_its_panels_in_its_order():
    panels = [entry.panel for entry in commands.COMMANDS.values()]
    assert panels == sorted(panels, key=commands.PANELS.index)  # each panel one block
    assert set(panels) == set(commands.PANELS)
    text = CliRunner().invoke(cli.app, ["--help"], env={"COLUMNS": "120"}).output
    headings = re.findall(r"^(\S.*):$", text, re.MULTILINE)
    assert headings == ["Options", *commands.PANELS]  # the core first; no flat "Commands"
    listed = re.findall(r"^  ([a-z]+) +\S", text.split(commands.PANELS[0] + ":")[1], re.MULTILINE)
    assert listed == list(commands.COMMANDS)


@pytest.mark.parametrize(("name", "entry"), listed(), ids=[n for n, _ in listed()])
def test_each_entry_names_its_function_and_its_options(name, entry):
    command = built(name)
    assert command.callback is not None
    assert command.callback.__module__ == entry.module
    assert command.callback.__name__ == entry.function
    if entry.summary is not None:
        assert command.short_help == entry.summary
    flags = {p.name for p in command.params if getattr(p, "is_flag", False)}
    if isinstance(entry.writes, str):  # the option that makes it write: a flag of its own
        assert entry.writes in flags, f"{name} has no flag {entry.writes}"
    if entry.reads_with is not None:  # the option that makes it only read: a flag too
        assert entry.reads_with in flags, f"{name} has no flag {entry.reads_with}"
    if entry.widened:
        assert "trust_replica" in flags, name


def test_what_the_core_is_told_follows_the_table():
    assert context.access("schema apply", {}).writes
    assert not context.access("schema check", {}).writes
    assert not context.access("apply", {}).writes  # only as typed after jobctl
    assert context.access("top", {"allow_writes": True}).writes
    assert not context.access("no-such", {"commit": True}).writes
    assert context.access("pause", {}).writes and context.access("cancel", {}).writes
    assert not context.access("pause", {"list_pauses": True}).writes
    assert not context.access("policy", {"list_kinds": True}).writes
    for name, entry in listed():
        assert context.access(name, {}).writes is (entry.writes is True)
        assert context.access(name, {}).widened is entry.widened


def test_a_commands_access_is_found_by_its_name_as_typed():
    """``command_access`` names the command as typed after ``jobctl``, a group's too."""
    root = typer.Context(typer.main.get_command(cli.app), info_name="jobctl")
    group = typer.Context(built("schema"), info_name="schema", parent=root)
    for name, writes in (("apply", True), ("check", False)):
        command = typer.Context(built(f"schema {name}"), info_name=name, parent=group)
        told = context.command_access(command)
        assert (told.command, told.writes) == (f"schema {name}", writes)
    stuck = typer.Context(built("stuck"), info_name="stuck", parent=root)
    assert context.command_access(stuck) == Access("stuck", widened=True)


def test_the_table_imports_nothing_and_no_command_imports_main():
    """Reading the table loads no command, and the commands main imports by name (which the
    layers' test cannot see) never import main back."""
    inner, outer = imports(MODULES["jobctl.cli.commands"])
    assert not inner and outer <= {"__future__", "dataclasses", "collections", "typing"}, outer
    importing_main = {m for m, path in MODULES.items() if "jobctl.cli.main" in imports(path)[0]}
    assert importing_main == {"jobctl.__main__"}


@pytest.mark.parametrize(
    "args",
    [["--help"], ["stuck", "--help"], ["schema", "apply", "--help"]],
    ids=["--help", "stuck --help", "schema apply --help"],
)
def test_help_loads_no_driver_and_no_table_renderer(args):
    """What keeps jobctl's start fast: psycopg, tabulate and rich's tables are imported
    inside the commands, when they run."""
    code = (
        "import sys; from jobctl.cli import main as cli; "
        f"cli.main({args!r}); "
        "print(sorted(m for m in ('psycopg', 'tabulate', 'rich.table') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout

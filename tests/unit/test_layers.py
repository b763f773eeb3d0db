"""The layering rule of CONTRIBUTING.md, over packages: a module imports only from its own
package or from a lower layer; no import cycle between files; only the people layer imports
typer (prints, prompts, exits); at most six modules flat at jobctl's top, none over 600 lines.

Imports are counted at any depth (inside functions too) and under ``TYPE_CHECKING``: a
deferred import is still a dependency.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "jobctl"
# a subpackage, or a module flat at jobctl's top, and its layer: higher imports lower
LAYERS = {
    "cli": 5,  # the people: the typer app, its commands, options, terminal, completion
    "__main__": 6,  # python -m jobctl: the app
    "ops": 4,  # the workflows
    "schema": 3,  # what jobctl installs on a table, checks and removes
    "lease": 3,  # the worker API, public
    "targets": 3,  # the config file's named databases
    "db": 2,  # connecting, sessions, transactions, the jobs table resolved, locks
    "table": 1,  # the user's table in the design's terms: names, column types, libraries
    "render": 0,  # rows, documents, tables, machine formats, safe text
    "sql": 0,  # the named statements and their loader
    "contract": -1,  # the row shapes, JSON as jobctl writes it, stored text made safe: for all
    "errors": -1,  # errors with exit codes, and durations as operators type them: for all
    "durations": -1,
    "__init__": -1,
}
RICH_ALLOWED = {"render", "cli"}  # rich measures and paints cells in render, prints in cli
TEXTUAL_ALLOWED = "jobctl.cli.top."  # the console's app only (jobctl top, an optional extra)
MAX_LINES = 600
MAX_FLAT = 6


def modules() -> dict[str, Path]:
    """Every module of jobctl by dotted name (``jobctl.ops.triage``)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1 and parts[:-1] != ("jobctl",):
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = modules()


def unit(module: str) -> str:
    """The layer's unit a module belongs to: its subpackage, or itself when flat."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(jobctl modules, third-party top-level packages) ``path`` imports, at any depth."""
    inner: set[str] = set()
    outer: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "jobctl" or node.module.startswith("jobctl."):
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    inner.add(name if name in MODULES else node.module)
            else:
                outer.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("jobctl"):
                    inner.add(alias.name)
                else:
                    outer.add(alias.name.split(".")[0])
    return inner, outer


def test_every_module_has_a_layer():
    assert {unit(m) for m in MODULES} == set(LAYERS)


def test_few_modules_flat_at_the_top():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))  # __init__ and __main__ among them
    assert len(flat) <= MAX_FLAT, flat


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_only(module):
    inner, outer = imports(MODULES[module])
    mine = unit(module)
    upward = {
        m for m in inner if unit(m) != mine and LAYERS[unit(m)] >= LAYERS[mine] and m != "jobctl"
    }
    assert not upward, f"{module} (layer {LAYERS[mine]}) imports {sorted(upward)}"
    if LAYERS[mine] < LAYERS["cli"]:
        assert "typer" not in outer and "click" not in outer, module
        assert "rich" not in outer or mine in RICH_ALLOWED, module
    assert "textual" not in outer or module.startswith(TEXTUAL_ALLOWED), module


def test_the_database_layer_imports_nothing_of_render():
    """``db/`` stands on ``contract/`` (the row shapes a session returns, the JSON text of a
    statement's parameter, names made safe in its messages), never on ``render/``: how a
    command shows its rows can change nothing a statement is sent or a session returns. Lower
    than db, render may be imported by the layer rule; this one forbids it."""
    database = [m for m in MODULES if unit(m) == "db"]
    assert "jobctl.db.session" in database  # the rule has modules to hold for
    rendered = {
        module: sorted(i for i in imports(MODULES[module])[0] if unit(i) == "render")
        for module in database
    }
    assert not any(rendered.values()), {m: i for m, i in rendered.items() if i}


def test_no_module_uses_typers_private_parts():
    """typer's public API only (``cli/click_api``): no import of its private modules
    (``typer._click``, ``typer._completion_classes``) or internal models, none of
    ``typer.main``'s builders but ``get_command``, no app's ``registered_*`` lists, and no
    click (typer vendors its own: click's objects are not typer's)."""
    found = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Attribute):
                names = [ast.unparse(node)]
                if node.attr in ("registered_commands", "registered_groups"):
                    found.add((module, node.attr))
            for name in names:
                if re.match(r"(click|typer\.(_\w+|models|main\.(?!get_command$)\w+))(\.|$)", name):
                    found.add((module, name))
    assert found == set(), found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module):
    lines = MODULES[module].read_text().count("\n")
    assert lines <= MAX_LINES, f"{module}: {lines} lines; split it by job"


def test_no_import_cycle_between_files():
    graph = {m: {i for i in imports(p)[0] if i in MODULES and i != m} for m, p in MODULES.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append([*path[path.index(n) :], n])
            elif n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, " | ".join(" -> ".join(c) for c in cycles)


PURE = ("render", "sql", "table", "contract", "errors", "durations")
TOUCHES = {"environ", "stdout", "stderr", "stdin", "get_terminal_size", "getenv"}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if unit(m) in PURE))
def test_the_pure_layers_ask_nothing_of_the_process(module):
    """Layers 0 and below take what they render (a stream, a ``Screen``) as arguments: they
    never ask the environment or the terminal's size, nor print (``cli/terminal`` does).
    They may ask the stream they are given whether it is a terminal (``isatty``): what goes
    to one is escaped, whatever TERM says."""
    tree = ast.parse(MODULES[module].read_text())
    asked = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} & TOUCHES
    printed = any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
        for n in ast.walk(tree)
    )
    assert not asked and not printed, f"{module}: {sorted(asked)}{' print' if printed else ''}"


# what runs SQL on a psycopg connection, cursor or pipeline: only db/ (and the worker API)
RAW_SQL_CALLS = {"execute", "executemany", "cursor", "copy", "pipeline"}
RAW_SQL_ALLOWED = {"db", "lease"}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_db_runs_statements_on_a_connection(module):
    """One way in: outside ``db/`` a statement runs through a ``Session`` or, on a
    connection (before a table is resolved), ``db.rows/row/one/run/stream``; ``lease.py``,
    the public worker API, keeps its own cursor (it prepares its statements). A call of a
    method by these names counts whatever it is called on (a Session's write is
    ``Session.run``)."""
    if unit(module) in RAW_SQL_ALLOWED:
        return
    tree = ast.parse(MODULES[module].read_text())
    found = sorted(
        f"line {n.lineno}: .{n.func.attr}("
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in RAW_SQL_CALLS
    )
    assert not found, f"{module} runs SQL outside db/: {', '.join(found)}"

"""CONTRIBUTING.md's architecture map is true: one line per module of ``jobctl/`` (``- `path` —
what it does``), every module with its line and every line with its module, each line short;
every package says the rest in its docstring; every SQL file is named."""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "jobctl"
MAP = (ROOT / "CONTRIBUTING.md").read_text()
LINE = re.compile(r"^- `(?P<path>[a-z_/]+\.py)` — (?P<job>\S.*)$", re.MULTILINE)
LONGEST = 120


def modules() -> list[str]:
    return sorted(
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"
    )


def test_every_module_has_one_line() -> None:
    named = [m["path"] for m in LINE.finditer(MAP)]
    assert sorted(named) == modules(), {
        "without a line": sorted(set(modules()) - set(named)),
        "gone": sorted(set(named) - set(modules())),
        "twice": sorted({n for n in named if named.count(n) > 1}),
    }


def test_each_line_is_one_short_line() -> None:
    long = [m[0] for m in LINE.finditer(MAP) if len(m[0]) > LONGEST]
    assert long == []


def test_every_package_says_the_rest_in_its_docstring() -> None:
    thin = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if len(doc.split()) < 30:
            thin.append(str(init.relative_to(ROOT)))
    assert thin == []


def test_every_sql_file_is_named() -> None:
    unnamed = [
        path.name for path in sorted((PACKAGE / "sql").glob("*.sql")) if f"`{path.name}`" not in MAP
    ]
    assert not unnamed, f"SQL files CONTRIBUTING.md does not name: {unnamed}"
    assert "`history/NNN_name.sql`" in MAP  # the migrations, by their pattern

"""Load the named statements of sql/queries.sql and sql/catalog.sql (one namespace) and
compose them for one jobs table.

Each block starts with a ``-- name: NAME`` line and the comment lines that describe it, and
ends where the next one starts. ``{table}`` is the jobs table (an identifier, quoted by
psycopg), ``{other}`` includes the block named ``other``, and any other ``{placeholder}`` is
a fragment the caller supplies as ``psycopg.sql``.
"""

from __future__ import annotations

import functools
import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg import sql

# "-- name: stuck" on a line of its own, then the description's comment lines: an ordinary
# comment ("-- note: ...") can never start a block
_BLOCK_START = re.compile(
    r"^-- name: (?P<name>[a-z][a-z0-9_]*)\n(?P<doc>(?:--(?: .*)?\n)+)", re.MULTILINE
)
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


FILES = ("queries.sql", "catalog.sql", "schema.sql", "remove.sql", "doctor.sql", "reclaimer.sql")
_HERE = os.path.dirname(os.path.abspath(__file__))


def read_text(path: str) -> str:
    """jobctl's own file ``path`` under ``sql/``, read from the directory this module was
    imported from (a wheel's or an editable install's): every command reads its statements,
    and importlib.resources cost 15 ms of a command's start. A package imported from a zip
    has no such directory: importlib.resources reads it there."""
    try:
        with open(os.path.join(_HERE, path), encoding="utf-8") as f:
            return f.read()
    except NotADirectoryError:
        from importlib import resources

        return resources.files("jobctl.sql").joinpath(path).read_text(encoding="utf-8")


def list_dir(path: str) -> list[str]:
    """The names of the files in jobctl's own directory ``path`` under ``sql/`` (as
    ``read_text`` finds them)."""
    try:
        return os.listdir(os.path.join(_HERE, path))
    except NotADirectoryError:
        from importlib import resources

        return [entry.name for entry in resources.files("jobctl.sql").joinpath(path).iterdir()]


@functools.cache
def blocks() -> dict[str, str]:
    """Every named block of the statement files: name -> SQL text (names are unique)."""
    result: dict[str, str] = {}
    for file in FILES:
        try:
            text = read_text(file)
        except FileNotFoundError:
            raise _shadowed(file) from None
        for name, statement in parse(text).items():
            if name in result:
                raise ValueError(f"sql/{file}: block {name} is defined twice")
            result[name] = statement
    return result


def _shadowed(file: str) -> Exception:
    """The one line for jobctl's own SQL missing: the ``jobctl`` Python imported is not the
    installed package but a directory of that name (a clone's, a copy) on ``sys.path``,
    the current directory first for a script: say so, and where, not FileNotFoundError."""
    import jobctl
    from jobctl import errors

    where = ", ".join(getattr(jobctl, "__path__", [])) or "?"
    return errors.JobctlError(
        f"jobctl's own sql/{file} is missing from {where}: a directory named jobctl there "
        "shadows the installed package (run from another directory, or reinstall jobctl)"
    )


def parse(text: str) -> dict[str, str]:
    """The named blocks of one file: name -> SQL text, descriptions left out."""
    found = list(_BLOCK_START.finditer(text))
    if len(found) != len(re.findall(r"^-- name:", text, re.MULTILINE)):
        raise ValueError("a '-- name: NAME' line needs a name and a description line after it")
    result: dict[str, str] = {}
    for match, following in zip(found, [*found[1:], None], strict=True):
        if match["name"] in result:
            raise ValueError(f"block {match['name']} is defined twice")
        end = following.start() if following else len(text)
        result[match["name"]] = text[match.end() : end].strip()
    return result


def query(name: str, table: sql.Identifier | None = None, /, **fragments: Any) -> sql.Composed:
    """The statement ``name`` for ``table`` (catalog statements need none), with its
    included blocks and fragments (a jobs table's: ``db.JobsTable.fragments``)."""
    from psycopg import sql

    def compose(block: str) -> sql.Composable:
        text = blocks()[block]
        values: dict[str, sql.Composable] = {}
        for placeholder in set(_PLACEHOLDER.findall(text)):
            if placeholder == "table" and "table" not in fragments:
                if table is None:
                    raise ValueError(f"{name} needs a table")
                values[placeholder] = table
            elif placeholder in fragments:
                values[placeholder] = fragments[placeholder]
            else:
                values[placeholder] = compose(placeholder)
        return sql.SQL(text).format(**values)

    composed = compose(name)
    assert isinstance(composed, sql.Composed)
    return composed

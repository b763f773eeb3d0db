"""Load the named statements of sql/queries.sql and compose them for one jobs table.

Each block starts with ``-- name: description``. ``{table}`` is the jobs table (an
identifier, quoted by psycopg), ``{other}`` includes the block named ``other``, and any other
``{placeholder}`` is a fragment the caller supplies as ``psycopg.sql`` (e.g. ``{locking}``).
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg import sql

_BLOCK_START = re.compile(r"^-- (?P<name>[a-z_]+): (?P<doc>.+)$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


@functools.cache
def blocks() -> dict[str, str]:
    """Every named block of queries.sql: name -> SQL text."""
    text = resources.files("jobctl").joinpath("sql/queries.sql").read_text(encoding="utf-8")
    found = list(_BLOCK_START.finditer(text))
    result: dict[str, str] = {}
    for match, following in zip(found, [*found[1:], None], strict=True):
        end = following.start() if following else len(text)
        result[match["name"]] = text[match.end() : end].strip()
    return result


def query(name: str, table: sql.Identifier | None = None, **fragments: Any) -> sql.Composed:
    """The statement ``name`` for ``table`` (None for a statement that names no jobs table),
    with its included blocks and fragments."""
    from psycopg import sql

    def compose(block: str) -> sql.Composable:
        text = blocks()[block]
        values: dict[str, sql.Composable] = {}
        for placeholder in set(_PLACEHOLDER.findall(text)):
            if placeholder == "table" and table is not None:
                values[placeholder] = table
            elif placeholder in fragments:
                values[placeholder] = fragments[placeholder]
            else:
                values[placeholder] = compose(placeholder)
        return sql.SQL(text).format(**values)

    composed = compose(name)
    assert isinstance(composed, sql.Composed)
    return composed

"""The gateway: the one place outside ``db/``'s own modules where a statement meets a
psycopg connection. ``Session`` runs its table's statements through it, and the code that
works before a table is resolved (``schema/``, the demo's setup) calls it on the connection
it holds, as ``db.rows/row/one/run/stream``. A JSON parameter's text is ``json_parameter``'s.

A statement is the name of a block of ``sql/`` (composed with no fragments, as
``queries.query(name)``), or one already composed from such blocks (``queries.query(name,
table, **fragments)``: a jobs table's, a DDL step's). Rows come back as dicts, whatever row
factory the connection has. ``params`` go to psycopg as given: ``None`` (the default) sends the
text as it is, a mapping (even empty) has its ``%`` placeholders read. These never open a
transaction: the caller holds one (``db.transaction``, ``db.safe``) or runs in autocommit.
Example::

    with db.transaction(conn, settings, read_only=True):
        columns = db.rows(conn, "table_columns", {"oid": oid})
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from jobctl.contract import json_text
from jobctl.db import loaders
from jobctl.sql import queries

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

    Statement: TypeAlias = str | sql.SQL | sql.Composed  # a block's name, or composed blocks

Params: TypeAlias = Mapping[str, Any] | None
STREAM_CHUNK = 2_000  # rows a server-side cursor fetches at a time


def rows(
    conn: psycopg.Connection[Any],
    statement: Statement,
    params: Params = None,
    *,
    times_as_text: bool = False,
) -> list[dict[str, Any]]:
    """The statement's rows. ``times_as_text``: a timestamp beyond Python's calendar is read
    as the server's text for it (``loaders.times_beyond_the_calendar_as_text``)."""
    cursor = _cursor(conn, times_as_text)
    return cursor.execute(_composed(statement), params).fetchall()


def row(
    conn: psycopg.Connection[Any],
    statement: Statement,
    params: Params = None,
    *,
    times_as_text: bool = False,
) -> dict[str, Any] | None:
    """The statement's first row, or None (``times_as_text`` as ``rows``)."""
    cursor = _cursor(conn, times_as_text)
    return cursor.execute(_composed(statement), params).fetchone()


def one(
    conn: psycopg.Connection[Any], statement: Statement, params: Params = None
) -> dict[str, Any]:
    """The single row a statement always returns (an aggregate, EXISTS)."""
    found = row(conn, statement, params)
    if found is None:
        name = statement if isinstance(statement, str) else "the statement"
        raise AssertionError(f"{name} returned no row")
    return found


def run(conn: psycopg.Connection[Any], statement: Statement, params: Params = None) -> int:
    """Run a statement whose rows are not read (a write, DDL, a setting); the number of rows
    it changed (as psycopg reports it: -1 where none is known, in a pipeline)."""
    return _cursor(conn, False).execute(_composed(statement), params).rowcount


def stream(
    conn: psycopg.Connection[Any],
    statement: Statement,
    params: Params,
    *,
    chunk: int = STREAM_CHUNK,
) -> Iterator[dict[str, Any]]:
    """Rows through a server-side cursor, ``chunk`` at a time, so memory stays flat. The
    caller holds the transaction (a named cursor lives only inside one)."""
    from psycopg.rows import dict_row

    with conn.cursor(name="jobctl_stream", row_factory=dict_row) as cursor:
        cursor.itersize = chunk
        cursor.execute(_composed(statement), params)
        yield from cursor


def json_parameter(value: Any) -> str:
    """``value`` as the text of a statement's JSON parameter (``%(plan)s::pg_catalog.jsonb``):
    strict JSON with the contract's types (``contract.json_text``), the text a machine format
    writes of the same rows, so what was reviewed is what a write is fenced on."""
    return json_text.to_json(value)


def _cursor(conn: psycopg.Connection[Any], times_as_text: bool) -> psycopg.Cursor[dict[str, Any]]:
    from psycopg.rows import dict_row

    cursor = conn.cursor(row_factory=dict_row)
    if times_as_text:
        loaders.times_beyond_the_calendar_as_text(cursor)
    return cursor


def _composed(statement: Statement) -> sql.SQL | sql.Composed:
    return queries.query(statement) if isinstance(statement, str) else statement

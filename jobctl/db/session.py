"""A session: a connection, the settings and the resolved jobs table, held together.

Every core workflow takes a ``Session``; it runs the named statements of ``sql/`` against
its table, inside short transactions with the settings' timeouts (see ``db.transaction``).
Example::

    with session.open(db.Settings(dsn="dbname=app")) as s, s.transaction(read_only=True):
        rows = s.rows("stuck", {...})
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from jobctl import db, errors
from jobctl.contract.shapes import Row
from jobctl.db import gateway
from jobctl.sql import queries

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

STREAM_CHUNK = gateway.STREAM_CHUNK  # rows a server-side cursor fetches at a time


@dataclasses.dataclass(frozen=True)
class Session:
    """A connection to the database that holds ``table``, and how jobctl behaves on it."""

    conn: psycopg.Connection[Any]
    settings: db.Settings
    table: db.JobsTable
    # statements run again and again (a reclaim's batches), composed and encoded once
    _texts: dict[str, bytes] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def transaction(
        self, *, read_only: bool = False, action: str | None = None, reason: str | None = None
    ) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        """A short transaction with the settings' timeouts (and the audit's actor); one that
        writes the table (``action``) runs as ``write_role`` says."""
        return db.transaction(
            self.conn,
            self.settings,
            read_only=read_only,
            action=action,
            reason=reason,
            role=self.write_role() if action is not None else None,
        )

    def write_role(self) -> str | None:
        """The role a write of the table runs as (the table's ``writes_as``: jobctl's operator
        role when this session's role holds privileges the table's owner lacks), or None: the
        session's. Refused (exit 2, before anything is written) when there is none to run it
        as and the session is a superuser (``write_refusal``)."""
        if self.table.write_refusal is not None:
            raise errors.NothingDone(self.table.write_refusal)
        return self.table.writes_as

    def origin(self) -> dict[str, Any]:
        """Where this session is, for a saved plan (``db.where``), and its target's name."""
        where = db.where(self.conn, self.table)
        return where | {"target": self.settings.target} if self.settings.target else where

    def query(self, name: str, **fragments: sql.Composable) -> sql.Composed:
        """The named statement, composed for this session's table."""
        return queries.query(name, **{**self.table.fragments, **fragments})

    def job_ids(self, texts: Sequence[Any]) -> list[Any]:
        """Job ids as typed, converted by the database to the id column's type (and returned in
        it: int, UUID, str); one that is not valid for it is a UsageError (exit 2)."""
        import psycopg

        texts = [str(t) for t in texts]
        try:
            with db.safe(self.conn):
                rows = self.rows("job_ids", {"ids": texts})
        except (psycopg.DataError, psycopg.IntegrityError):  # (a domain's CHECK: 23514)
            for text in texts:  # which one: each alone
                try:
                    with db.safe(self.conn):
                        self.rows("job_ids", {"ids": [text]})
                except (psycopg.DataError, psycopg.IntegrityError):
                    raise errors.UsageError(
                        f"job id {text!r} is not a valid {self.table.id_type_display} (the "
                        f"type of the id column {self.table.mapping.column('id')})"
                    ) from None
            raise
        return [row["id"] for row in rows]

    def rows(
        self, name: str, params: dict[str, Any] | None = None, **fragments: sql.Composable
    ) -> list[Row]:
        """The named statement's rows (``fragments``: the statement's own, as ``query``)."""
        return gateway.rows(self.conn, self.query(name, **fragments), params or {})

    def row(
        self,
        name: str,
        params: dict[str, Any] | None = None,
        *,
        times_as_text: bool = False,
        **fragments: sql.Composable,
    ) -> Row | None:
        """The named statement's first row, or None (``times_as_text``: a time beyond a
        client's calendar read as its text, ``db.row``)."""
        statement = self.query(name, **fragments)
        return gateway.row(self.conn, statement, params or {}, times_as_text=times_as_text)

    def one(self, name: str, params: dict[str, Any] | None = None) -> Row:
        """The single row a statement always returns (an aggregate, say)."""
        row = self.row(name, params)
        if row is None:
            raise AssertionError(f"{name} returned no row")
        return row

    def pipelined(
        self,
        name: str,
        params: dict[str, Any],
        *,
        action: str | None = None,
        reason: str | None = None,
        **fragments: sql.Composable,
    ) -> list[Row]:
        """The named statement in its own short transaction, timeouts and actor (and the
        audit's ``action``) set transaction-locally, in one round trip (``db.pipelined``); its
        rows. The statement is composed once per session (a reclaim runs it for every batch)."""
        text = self._text(name, fragments)
        role = self.write_role() if action is not None else None
        return db.pipelined(
            self.conn, self.settings, text, params, action=action, reason=reason, role=role
        )

    @contextlib.contextmanager
    def sending(
        self,
        name: str,
        *,
        action: str | None = None,
        reason: str | None = None,
        **fragments: sql.Composable,
    ) -> Iterator[Callable[..., db.Sent]]:
        """``send(params, **more)``: the named statement as ``pipelined`` runs it, sent without
        waiting (``db.sending``): the server runs one while the rows of the one before are
        read; ``more``: fragments of this send's own (a narrower RETURNING), each name always
        given the same one (composed once per session too). Nothing else runs on the session
        inside the block."""
        text = self._text(name, fragments)
        role = self.write_role() if action is not None else None
        with db.sending(
            self.conn, self.settings, text, action=action, reason=reason, role=role
        ) as send:

            def sent(params: dict[str, Any], **more: sql.Composable) -> db.Sent:
                return send(params, self._text(name, {**fragments, **more}) if more else None)

            yield sent

    def _text(self, name: str, fragments: dict[str, sql.Composable]) -> bytes:
        """A statement run again and again, composed and encoded once per session."""
        key = "/".join([name, *sorted(fragments)])  # (a statement's own fragments: fixed)
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = self.query(name, **fragments).as_bytes(self.conn)
        return text

    def run(self, name: str, params: dict[str, Any] | None = None) -> int:
        """Run a write; the number of rows it changed."""
        return gateway.run(self.conn, self.query(name), params or {})

    def stream(
        self, name: str, params: dict[str, Any], **fragments: sql.Composable
    ) -> Iterator[Row]:
        """Rows through a server-side cursor, a chunk at a time, so memory stays flat
        (``fragments``: the statement's own, as ``query`` takes them).

        The caller holds the transaction (a named cursor lives only inside one).
        """
        yield from gateway.stream(self.conn, self.query(name, **fragments), params)


def connect(settings: db.Settings) -> Session:
    """A new session (the caller closes ``session.conn``); the table must exist."""
    conn = db.connect(settings)
    try:
        return Session(conn, settings, _table(conn, settings))
    except BaseException:
        conn.close()
        raise


@contextlib.contextmanager
def open(
    settings: db.Settings, on_connect: Callable[[Any], None] | None = None
) -> Iterator[Session]:
    """A session for one command: database errors inside become one line (``db.mapped_errors``).
    ``on_connect`` gets the connection as soon as it is made (``fleet.Busy``: Ctrl-C can then
    cancel even the table's lookup)."""
    with db.connected(settings) as conn:
        if on_connect is not None:
            on_connect(conn)
        yield Session(conn, settings, _table(conn, settings))


def _table(conn: Any, settings: db.Settings) -> db.JobsTable:
    """The jobs table; when it is missing and no DSN was set, say that libpq chose where."""
    try:
        return db.resolve_table(conn, settings.table)
    except errors.TableNotFound as exc:
        hint = db.unset_hint(settings.resolved_dsn())
        raise errors.TableNotFound(exc.message + hint) from None

"""Connecting, and short transactions with timeouts on jobctl's safe search path."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import os
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from jobctl import errors
from jobctl.db import failures, loaders
from jobctl.db.failures import mapped_errors, pooler_hint
from jobctl.db.secrets import check_dsn, holds_password, redact
from jobctl.db.settings import Settings
from jobctl.sql import queries

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql


CONNECT_TIMEOUT_S = 5
_SILENT = logging.NullHandler()


def connect(settings: Settings, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A connection with application_name=jobctl (unless the DSN sets one), dict rows, and
    no prepared statements (safe behind a connection pooler in transaction mode)."""
    import psycopg
    from psycopg import conninfo, rows

    # psycopg's warnings are no line of jobctl's: a database's TimeZone Python does not know
    # (a POSIX zone like 'XYZ-3:30') is read in UTC, the same instants, without a word
    logging.getLogger("psycopg").addHandler(_SILENT)
    dsn = settings.resolved_dsn()
    if settings.target is not None and not dsn:  # never libpq's defaults in its stead
        raise errors.UsageError(f"target {settings.target} has no connection string")
    check_dsn(dsn)
    try:
        info = conninfo.make_conninfo(
            dsn,
            fallback_application_name="jobctl",
            connect_timeout=conninfo.conninfo_to_dict(dsn).get("connect_timeout")
            or CONNECT_TIMEOUT_S,
        )
    except psycopg.ProgrammingError as exc:
        if holds_password(dsn):  # libpq's message may quote any part of it
            raise errors.UsageError(
                "invalid connection string (not shown: it holds a password)"
            ) from None
        raise errors.UsageError(f"invalid connection string: {redact(str(exc), dsn)}") from None
    try:
        # prepare_threshold=None: never prepare. Behind a pooler in transaction mode the next
        # transaction may run on another server connection, where a statement psycopg
        # prepared (after its fifth execution) does not exist, or another client's does.
        conn = psycopg.connect(
            info, autocommit=autocommit, row_factory=rows.dict_row, prepare_threshold=None
        )
    except psycopg.Error as exc:
        message = redact(" ".join(str(exc).split()), dsn)
        raise errors.ConnectError(
            f"cannot connect: {message}{pooler_hint(message)}{unset_hint(dsn)}{demo_hint(info)}"
        ) from None
    from psycopg.types.json import set_json_loads

    set_json_loads(loaders.load_json, conn)  # json and jsonb columns: see load_json
    return conn


_LIBPQ_VARIABLES = ("PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE", "PGSERVICEFILE")


def demo_hint(info: str) -> str:
    """When the DSN is a kept demo's (its database ``jobctl_demo``): whose it is, and the
    way back, rather than libpq's words alone (its server stopped by ``jobctl demo --stop``)."""
    import psycopg
    from psycopg import conninfo

    try:
        dbname = conninfo.conninfo_to_dict(info).get("dbname")
    except psycopg.ProgrammingError:
        return ""
    if dbname != "jobctl_demo":
        return ""
    return (
        " (this is the database of a demo kept with jobctl demo --keep, whose server is not "
        "running: jobctl demo --keep starts another; unset JOBCTL_DSN for your own)"
    )


def unset_hint(dsn: str) -> str:
    """When no DSN was given: libpq's defaults chose the server, and how to choose another."""
    if dsn or any(os.environ.get(name) for name in _LIBPQ_VARIABLES):
        return ""
    return (
        " (no --dsn, JOBCTL_DSN or DATABASE_URL is set, so libpq's defaults chose this: "
        "set one, e.g. JOBCTL_DSN='host=db.internal dbname=app user=ops')"
    )


@contextlib.contextmanager
def connected(settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    """A connection for one command, closed after; database errors become one line."""
    with mapped_errors(settings.resolved_dsn()):
        conn = connect(settings)
        with conn:
            yield conn


@contextlib.contextmanager
def under_user_search_path(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Inside a transaction: the session's own search_path while the body runs (statements
    that name every function, operator and type they use with its schema, and resolve only a
    name the user typed), then jobctl's safe one again."""
    conn.execute(queries.query("user_search_path"))
    try:
        yield
    finally:  # ACTIVE: in a pipeline (``batched``), statements still on their way
        if not conn.closed and conn.info.transaction_status in _in_transaction():
            conn.execute(queries.query("safe_search_path"))


def _in_transaction() -> tuple[Any, ...]:
    from psycopg import pq

    return (pq.TransactionStatus.INTRANS, pq.TransactionStatus.ACTIVE)


@contextlib.contextmanager
def batched(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """The statements inside sent in pipeline mode: a statement whose rows are not read goes
    out with the next, and a round trip happens only where rows are read (and at the end);
    the same statements, in the same order, one round trip each with a libpq older than 14."""
    import psycopg

    if not psycopg.Pipeline.is_supported():
        yield conn
        return
    with conn.pipeline():
        yield conn


@contextlib.contextmanager
def policies_named(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """PostgreSQL's refusal of a query that a row security policy would filter (jobctl runs
    with row_security off, so that no policy's expression runs as its role) raised with the
    policies of the table it names, read once the refused transaction has ended, for its one
    line (``failures.database_error``). Nothing is read for any other error, nor inside a
    transaction that is still open (a savepoint's): there the error goes on as it came."""
    import psycopg

    try:
        yield
    except psycopg.errors.InsufficientPrivilege as exc:
        if failures.row_security_refused(exc) and _idle(conn):
            with contextlib.suppress(psycopg.Error):
                with conn.transaction():
                    conn.execute(queries.query("safe_transaction_settings"))
                    rows = conn.execute(
                        queries.query("row_security_refusal"),
                        {"name": failures.refused_table(exc)},
                    ).fetchall()
                failures.name_policies(exc, [(r["qualified"], r["policies"]) for r in rows])
        raise


def _idle(conn: psycopg.Connection[Any]) -> bool:
    from psycopg import pq

    return not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE


# the role every transaction jobctl opens on a connection runs as (SET LOCAL ROLE), when the
# jobs table's lookup asked for one (``run_as``); kept beside the connection, never set on
# its session (behind a pooler the session is the application's too)
_RUNS_AS: weakref.WeakKeyDictionary[psycopg.Connection[Any], str] = weakref.WeakKeyDictionary()


def run_as(conn: psycopg.Connection[Any], role: str) -> None:
    """Every transaction jobctl opens on ``conn`` from now on runs as ``role``, set
    transaction-locally by its first statement (``safe``, ``transaction``, ``pipelined``,
    ``sending``): the jobs table's lookup found the application's code where the planner may
    run it as this stronger session (db.jobs_table)."""
    _RUNS_AS[conn] = role


@contextlib.contextmanager
def safe(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """A transaction (a savepoint inside one) on jobctl's safe search_path, with the output
    styles it parses, for the catalog reads that need no timeouts of their own (inside a
    command's transaction, or alone: ``standby.probe``)."""
    with policies_named(conn), batched(conn), conn.transaction():  # settings go with a read
        conn.execute(queries.query("safe_transaction_settings"))
        role = _RUNS_AS.get(conn)
        if role is not None:
            conn.execute(queries.query("become_role"), {"role": role})
        yield conn


@contextlib.contextmanager
def transaction(
    conn: psycopg.Connection[Any],
    settings: Settings,
    *,
    read_only: bool = False,
    action: str | None = None,
    reason: str | None = None,
    role: str | None = None,
) -> Iterator[psycopg.Connection[Any]]:
    """A short transaction with statement_timeout and lock_timeout set locally.

    ``read_only`` makes the transaction read only itself, transaction-locally (psycopg's
    read_only attribute does nothing in autocommit; SET TRANSACTION READ ONLY would mark the
    setting as the session's). ``action`` and ``reason`` reach the history trigger together
    with the actor, through transaction-local settings. ``role``: the role the transaction
    runs as, set transaction-locally (SET LOCAL ROLE: Session.write_role).
    """
    with policies_named(conn), conn.transaction():
        _apply(conn, settings, read_only=read_only, action=action, reason=reason, role=role)
        yield conn


def pipelined(
    conn: psycopg.Connection[Any],
    settings: Settings,
    statement: sql.Composed | bytes,
    params: dict[str, Any],
    *,
    action: str | None = None,
    reason: str | None = None,
    role: str | None = None,
) -> list[dict[str, Any]]:
    """``statement`` in its own short transaction, in one round trip: BEGIN, the timeouts and
    actor (and ``action``, as ``transaction``) set transaction-locally, the statement, COMMIT,
    sent as one pipeline; its rows.

    On an autocommit connection. A failure rolls the transaction back and raises. With a
    libpq older than 14 (no pipeline mode) the same transaction takes four round trips.
    """
    import psycopg

    # a connection lost mid-pipeline is raised as one error; psycopg would also log a warning
    # about the pipeline it could not close (a second line on stderr, without a handler)
    logging.getLogger("psycopg").addHandler(_SILENT)
    if not psycopg.Pipeline.is_supported():
        with transaction(conn, settings, action=action, reason=reason, role=role):
            return conn.execute(statement, params).fetchall()
    # the rows are read after the COMMIT, by the session's own DateStyle (loaders.reading_iso);
    # when that is ISO already, psycopg's own loaders (C, not a Python call per value) read them
    session_iso = (conn.info.parameter_status("DateStyle") or "").startswith("ISO")
    # the policies of a row security refusal are read once _rolled_back has ended it
    with policies_named(conn), _rolled_back(conn):
        with conn.pipeline():
            conn.execute("BEGIN")
            _apply(conn, settings, action=action, reason=reason, role=role)
            cursor = conn.cursor() if session_iso else loaders.reading_iso(conn.cursor())
            cursor.execute(statement, params)
            conn.execute("COMMIT")
        return cursor.fetchall()


class Sent:
    """A statement sent in its own short transaction (``sending``), not yet waited for."""

    def __init__(self, cursor: psycopg.Cursor[Any], pipeline: psycopg.Pipeline | None) -> None:
        self._cursor, self._pipeline = cursor, pipeline

    def count(self) -> int:
        """Wait for its transaction to end, committed (or its error raised): its row count,
        its rows not read yet."""
        if self._pipeline is not None:
            self._pipeline.sync()
        return self._cursor.rowcount

    def rows(self) -> list[dict[str, Any]]:
        """Its rows, read once ``count`` has returned (the next statement may be running)."""
        return self._cursor.fetchall()


@contextlib.contextmanager
def sending(
    conn: psycopg.Connection[Any],
    settings: Settings,
    statement: sql.Composed | bytes,
    *,
    action: str | None = None,
    reason: str | None = None,
    role: str | None = None,
) -> Iterator[Callable[..., Sent]]:
    """``send(params, text)``: ``statement`` (or ``text``, another of the same statement, when
    given) in its own short transaction, as ``pipelined`` runs it, sent without waiting for
    it, so that the server runs it while the client reads the rows of the one before
    (``Sent.count``, then ``Sent.rows``). One statement in flight at a time:
    wait for one before sending the next. A statement that fails raises from its ``count``,
    and leaving the block rolls its transaction back. With a libpq older than 14 (no pipeline
    mode) each runs as ``pipelined`` does, at once.
    """
    import psycopg

    logging.getLogger("psycopg").addHandler(_SILENT)  # as pipelined: one error, one line
    if not psycopg.Pipeline.is_supported():

        def run_now(params: dict[str, Any], text: bytes | None = None) -> Sent:
            with transaction(conn, settings, action=action, reason=reason, role=role):
                cursor = conn.cursor()
                cursor.execute(text or statement, params)
                return Sent(cursor, None)

        yield run_now
        return
    session_iso = (conn.info.parameter_status("DateStyle") or "").startswith("ISO")
    with policies_named(conn), _rolled_back(conn), conn.pipeline() as pipeline:

        def send(params: dict[str, Any], text: bytes | None = None) -> Sent:
            conn.execute("BEGIN")
            _apply(conn, settings, action=action, reason=reason, role=role)
            cursor = conn.cursor() if session_iso else loaders.reading_iso(conn.cursor())
            cursor.execute(text or statement, params)
            conn.execute("COMMIT")
            return Sent(cursor, pipeline)

        yield send


@contextlib.contextmanager
def _rolled_back(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """A failure inside ends the transaction it left open on its server connection (an error
    skipped its COMMIT), then goes on."""
    from psycopg import pq

    try:
        yield
    except BaseException:
        if not conn.closed and conn.info.transaction_status != pq.TransactionStatus.IDLE:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
        raise


def _apply(
    conn: psycopg.Connection[Any],
    settings: Settings,
    *,
    read_only: bool = False,
    action: str | None = None,
    reason: str | None = None,
    role: str | None = None,
) -> None:
    """The timeouts and the audit settings, for the current transaction only (no session
    state: behind a pooler the session is shared with the application's own clients);
    ``role``: the role the transaction runs as from here on, transaction-locally too (or
    the one ``run_as`` registered for the connection)."""
    role = role or _RUNS_AS.get(conn)
    conn.execute(
        _settings_statement(read_only, action is not None, role is not None),
        {
            "role": role,
            "st": str(_milliseconds(settings.statement_timeout)),
            "lt": str(_milliseconds(settings.lock_timeout)),
            "actor": settings.actor,
            "action": action or "",
            "reason": reason or "",
        },
    )


@functools.cache
def _settings_statement(
    read_only: bool, writes: bool = False, as_role: bool = False
) -> sql.Composed:
    """The transaction settings statement, composed once (every reclaim batch runs it).
    ``writes``: a write of jobctl's to the jobs table (it names an action), whose triggers of
    the application's run in it: pg_catalog first, then the session's own search path, so
    that they find their objects as in the workers' writes (``write_search_path``); refused,
    by an error of this statement, in a session whose session_replication_role is not origin
    (``origin_session``: no trigger would record it). Every transaction sets the output
    styles psycopg parses (``parse_settings``: DateStyle ...). ``as_role``: the transaction
    runs as the role given (``role_setting``: SET LOCAL ROLE)."""
    from psycopg import sql

    return queries.query(
        "transaction_settings",
        role=queries.query("role_setting") if as_role else sql.SQL(""),
        read_only=queries.query("read_only_setting") if read_only else sql.SQL(""),
        search_path=queries.query("write_search_path")
        if writes
        else sql.SQL("'pg_catalog, pg_temp'"),
        **({} if writes else {"origin_session": sql.SQL("")}),  # a read needs no guard
    )


def _milliseconds(duration: dt.timedelta) -> int:
    return max(1, int(duration.total_seconds() * 1000))  # never 0: "no timeout"

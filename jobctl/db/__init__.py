"""Connecting, short transactions with timeouts, the jobs table, and error mapping."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import getpass
import logging
import os
import re
import socket
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from jobctl import errors
from jobctl.db import loaders
from jobctl.sql import queries
from jobctl.table import column_types
from jobctl.table.mapping import COLUMNS, STATUSES, TableMapping

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

CONNECT_TIMEOUT_S = 5
_SILENT = logging.NullHandler()
DEFAULT_STATEMENT_TIMEOUT = dt.timedelta(seconds=30)
DEFAULT_LOCK_TIMEOUT = dt.timedelta(seconds=2)

_NAME_PART = r'(?:[A-Za-z_][A-Za-z0-9_$]*|"(?:[^"\x00-\x1f]|"")+")'
_TABLE_NAME = re.compile(rf"^{_NAME_PART}(?:\.{_NAME_PART})?$")


def default_actor() -> str:
    """Who is acting, for the audit trail: user@host."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry, e.g. in a container
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


@dataclasses.dataclass(frozen=True)
class Settings:
    """Where and how jobctl connects, from the global options."""

    dsn: str | None = None
    table: str = "jobs"
    statement_timeout: dt.timedelta = DEFAULT_STATEMENT_TIMEOUT
    lock_timeout: dt.timedelta = DEFAULT_LOCK_TIMEOUT
    actor: str = dataclasses.field(default_factory=default_actor)
    target: str | None = None  # the config file's name for this database (--target), if any

    def __post_init__(self) -> None:
        # PostgreSQL counts these in whole milliseconds, and 0 is its "no timeout": a bound
        # shorter than 1 ms would be none (the CLI's parser refuses it first, options.py)
        for name in ("statement_timeout", "lock_timeout"):
            if getattr(self, name) < dt.timedelta(milliseconds=1):
                raise errors.UsageError(f"{name} must be 1ms at least (0 means no timeout)")

    def resolved_dsn(self) -> str:
        """--dsn, then JOBCTL_DSN, then DATABASE_URL, then libpq's own PG* variables; a
        config file's target has its own DSN only (``targets``), never another's."""
        if self.target is not None:
            return self.dsn or ""
        return self.dsn or os.environ.get("JOBCTL_DSN") or os.environ.get("DATABASE_URL") or ""


# the id and status column types of a table with the lease design's own (the reference table)
DESIGN_ID_TYPE = ("pg_catalog", "int8")
DESIGN_STATUS_TYPE = ("pg_catalog", "text")


@dataclasses.dataclass(frozen=True)
class JobsTable:
    """The jobs table, resolved in the database, and how to speak to it in its own terms: its
    names for the lease design's columns and statuses (``mapping``, recorded by schema apply)
    and the types of its id and status columns (``uuid``, an ENUM, ``varchar`` ...)."""

    ident: sql.Identifier
    schema: str
    name: str
    oid: int
    qualified: str  # schema.name as the history trigger records it: format('%I.%I', ...)
    mapping: TableMapping = dataclasses.field(default_factory=TableMapping)
    id_type: tuple[str, str] = DESIGN_ID_TYPE  # the id column's type: schema, name
    status_type: tuple[str, str] = DESIGN_STATUS_TYPE
    id_type_display: str = "bigint"  # as the database prints it, for messages
    # the types of the table's columns playing the design's (by the design's name)
    types: Mapping[str, column_types.ColumnType] = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def fragments(self) -> dict[str, sql.Composable]:
        """What the statements' placeholders stand for on this table (see sql/queries.sql)."""
        return spelling(self.ident, self.mapping, self.id_type, self.status_type, self.types)


def spelling(
    table: sql.Identifier,
    mapping: TableMapping,
    id_type: tuple[str, str] = DESIGN_ID_TYPE,
    status_type: tuple[str, str] = DESIGN_STATUS_TYPE,
    types: Mapping[str, column_types.ColumnType] | None = None,
) -> dict[str, sql.Composable]:
    """The placeholders of the statements, for a table: ``{table}``; each design column
    (``{status}``, ``{attempt_token}`` ...) as the table's column; each design status
    (``{queued}`` ...) and ``{parked}`` as the table's value, cast to the status column's type
    (so that a CASE of statuses is of that type too, an ENUM say); ``{id_type}`` and
    ``{status_type}``, schema-qualified; and the typed expressions of ``column_types`` for the
    columns' ``types`` (the design's name -> type; None: the reference table's)."""
    from psycopg import sql

    status_cast = sql.Identifier(*status_type)
    fragments: dict[str, sql.Composable] = {
        "table": table,
        "id_type": sql.Identifier(*id_type),
        "status_type": status_cast,
    }
    for design in COLUMNS:
        fragments[design] = sql.Identifier(mapping.column(design))
    for design in STATUSES:
        fragments[design] = sql.SQL("{}::{}").format(
            sql.Literal(mapping.status(design)), status_cast
        )
    fragments["parked"] = sql.SQL("{}::{}").format(sql.Literal(mapping.parked), status_cast)
    fragments.update(
        column_types.fragments(
            types or {}, fragments, queries.query("reclaim_error"), mapping.units
        )
    )
    return fragments


# ---------------------------------------------------------------- secrets
_URI_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@", re.IGNORECASE)
_KV_PASSWORD = re.compile(r"(?P<head>password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|\S+)", re.IGNORECASE)


def redact(text: str, dsn: str | None = None) -> str:
    """``text`` with every password (URI, key=value, or the DSN's own) replaced by ***."""
    if dsn:
        secret = _password_of(dsn)
        if secret:
            text = text.replace(secret, "***")
    text = _URI_PASSWORD.sub(r"\g<head>***@", text)
    return _KV_PASSWORD.sub(r"\g<head>***", text)


def _password_of(dsn: str) -> str | None:
    match = _URI_PASSWORD.search(dsn)
    if match:
        return match.group(0)[len(match["head"]) : -1] or None
    try:
        from psycopg import conninfo

        password = conninfo.conninfo_to_dict(dsn).get("password")
        return str(password) if password else None
    except Exception:
        match = _KV_PASSWORD.search(dsn)
        return match.group(0)[len(match["head"]) :].strip("'") if match else None


_URI_AUTHORITY = re.compile(r"^\s*[a-z][a-z0-9+.-]*://(?P<authority>[^/?#\s]*)", re.IGNORECASE)


def holds_password(dsn: str | None) -> bool:
    """Does this connection string carry a password (URI or key=value)?"""
    return bool(dsn) and bool(re.search(r"password|://[^/@\s]*:[^@\s]*@", dsn or "", re.IGNORECASE))


def check_dsn(dsn: str) -> None:
    """Refuse (exit 2) a URI whose authority has more than one '@': libpq would take the
    first for the end of the password and the rest for the host name, and say that host name
    in its error, the end of the password with it."""
    match = _URI_AUTHORITY.match(dsn)
    if match and match["authority"].count("@") > 1:
        raise errors.UsageError(
            "invalid connection string: more than one '@' before the host name "
            "(percent-encode an '@' in a user name or password as %40)"
        )


# ---------------------------------------------------------------- errors
# What a connection pooler (PgBouncer, RDS Proxy, Supavisor, PgCat) says, or makes the
# server say, when a client relies on session state or on options it does not pass through.
_POOLER_MESSAGES = (
    "unsupported startup parameter",
    "prepared statement",
    "no more connections allowed",
    "query_wait_timeout",
    "server conn crashed",
    "pgbouncer cannot connect to server",
    "bouncer config error",
    "server login has been failing",
    "no such database",
    "client_login_timeout",
    "idle transaction timeout",
    "pgbouncer",
)


def pooler_hint(message: str) -> str:
    """A note naming the likely cause when ``message`` is typical of a connection pooler."""
    lowered = message.lower()
    if "unsupported startup parameter" in lowered:
        return (
            " (a connection pooler such as PgBouncer rejects this connection option: drop it "
            "from the DSN, or list it in the pooler's ignore_startup_parameters)"
        )
    if "prepared statement" in lowered:
        return (
            " (likely a connection pooler in transaction mode: a prepared statement does not "
            "survive between transactions there; see the README, 'Behind a connection pooler')"
        )
    if any(text in lowered for text in _POOLER_MESSAGES):
        return " (reported by a connection pooler between jobctl and PostgreSQL)"
    return ""


# SQLSTATE classes of a server that is gone or going: connection exception, insufficient
# resources, operator intervention (shutdown, terminated backend); no SQLSTATE: the client's
UNAVAILABLE = ("08", "53", "57")


def moved_to_another_partition(exc: BaseException) -> bool:
    """Is this PostgreSQL's 40001 for a row that a concurrent update moved to another
    partition (a table partitioned by status) — and not another serialization failure?"""
    import psycopg

    return isinstance(
        exc, psycopg.errors.SerializationFailure
    ) and "moved to another partition" in (exc.diag.message_primary or "")


# the error of sql/queries.sql's origin_session: a write in a session whose triggers would not fire
_REPLICATION_ROLE = re.compile(r'"jobctl refuses session_replication_role (?P<role>[a-z]{1,20})"')


def database_error(exc: Exception, dsn: str | None = None) -> errors.JobctlError:
    """The one mapping from psycopg's exceptions to jobctl's (one line, no password)."""
    import psycopg
    from psycopg import errors as pg

    first_line = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else "", dsn)
    refused = isinstance(exc, pg.UndefinedObject) and _REPLICATION_ROLE.search(
        exc.diag.message_primary or ""
    )
    if refused:
        return errors.Refused(
            f"this session's session_replication_role is {refused['role']}, not origin: no "
            "trigger would fire, so jobctl's audit would not record the write; nothing written "
            "(drop session_replication_role from the DSN's options, or ALTER ROLE ... RESET "
            "session_replication_role)"
        )
    if isinstance(exc, pg.LockNotAvailable):
        return errors.LockTimeout(f"lock not granted within lock_timeout: {first_line}")
    if isinstance(exc, pg.QueryCanceled):
        return errors.StatementTimeout(f"statement cancelled: {first_line}")
    if isinstance(exc, pg.UndefinedColumn):
        return errors.SchemaMissing(
            f"{first_line}: the table lacks the lease columns; run 'jobctl schema apply'"
        )
    if isinstance(exc, pg.UndefinedTable) and "jobctl." in first_line:
        return errors.SchemaMissing(
            f"{first_line}: jobctl's history is not installed; run 'jobctl schema apply'"
        )
    if isinstance(exc, pg.InsufficientPrivilege):
        return errors.DatabaseError(f"permission denied: {first_line}")
    if isinstance(exc, pg.ReadOnlySqlTransaction):
        return errors.DatabaseError(f"read-only transaction: {first_line}")
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, psycopg.OperationalError) and (not state or state[:2] in UNAVAILABLE):
        return errors.ConnectError(f"database unavailable: {first_line}{pooler_hint(first_line)}")
    return errors.DatabaseError((first_line or type(exc).__name__) + pooler_hint(first_line))


@contextlib.contextmanager
def mapped_errors(dsn: str | None = None) -> Iterator[None]:
    """Turn psycopg exceptions raised inside into jobctl errors."""
    import psycopg

    try:
        yield
    except psycopg.Error as exc:
        raise database_error(exc, dsn) from None


# ---------------------------------------------------------------- connecting
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
            f"cannot connect: {message}{pooler_hint(message)}{unset_hint(dsn)}"
        ) from None
    from psycopg.types.json import set_json_loads

    set_json_loads(loaders.load_json, conn)  # json and jsonb columns: see load_json
    return conn


_LIBPQ_VARIABLES = ("PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE", "PGSERVICEFILE")


def unset_hint(dsn: str) -> str:
    """When no DSN was given: libpq's defaults chose the server, and how to choose another."""
    if dsn or any(os.environ.get(name) for name in _LIBPQ_VARIABLES):
        return ""
    return (
        " (no --dsn, JOBCTL_DSN or DATABASE_URL is set, so libpq's defaults chose this: "
        "set one, e.g. JOBCTL_DSN='host=db.internal dbname=app user=ops')"
    )


def table_not_found(conn: Any, name: str) -> errors.TableNotFound:
    """The jobs table is missing: name where jobctl looked (server, database, user), since a
    wrong server or database is the usual cause, and how to set the table and the DSN."""
    info = conn.info
    host = info.host if not info.host.startswith("/") else f"the socket in {info.host}"
    where = f"database {info.dbname} on {host} port {info.port} as user {info.user}"
    return errors.TableNotFound(
        f"table {name} does not exist in {where}: set --table or JOBCTL_TABLE, or --dsn or "
        "JOBCTL_DSN for another database"
    )


@contextlib.contextmanager
def connected(settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    """A connection for one command, closed after; database errors become one line."""
    with mapped_errors(settings.resolved_dsn()):
        conn = connect(settings)
        with conn:
            yield conn


def identify(conn: psycopg.Connection[Any], name: str) -> dict[str, Any] | None:
    """The table named ``name`` as typed (a ``table_identity`` row), found through the
    session's own search_path, or None; the current transaction (or savepoint) is left on
    jobctl's safe one (see ``safe_search_path``)."""
    from psycopg.rows import dict_row

    with conn.transaction(), under_user_search_path(conn):
        cursor = conn.cursor(row_factory=dict_row)  # whatever rows the connection makes
        row: dict[str, Any] | None = cursor.execute(
            queries.query("table_identity"), {"name": name}
        ).fetchone()
    return row


def creation_schema(conn: psycopg.Connection[Any]) -> str:
    """Where the session's own search_path creates an unqualified new table."""
    from psycopg.rows import dict_row

    with conn.transaction(), under_user_search_path(conn):
        row = conn.cursor(row_factory=dict_row).execute(queries.query("current_schema")).fetchone()
    if row is None or row["s"] is None:
        raise errors.UsageError("no schema to create the table in: name it (--table schema.name)")
    return str(row["s"])


@contextlib.contextmanager
def under_user_search_path(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Inside a transaction: the session's own search_path while the body runs (statements
    that name every function, operator and type they use with its schema, and resolve only a
    name the user typed), then jobctl's safe one again."""
    conn.execute(queries.query("user_search_path"))
    try:
        yield
    finally:
        if not conn.closed and conn.info.transaction_status == _in_transaction():
            conn.execute(queries.query("safe_search_path"))


def _in_transaction() -> Any:
    from psycopg import pq

    return pq.TransactionStatus.INTRANS


@contextlib.contextmanager
def safe(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """A transaction (a savepoint inside one) on jobctl's safe search_path, with the output
    styles it parses, for the catalog reads that need no timeouts of their own (inside a
    command's transaction, or alone: ``replica.probe``)."""
    with conn.transaction():
        conn.execute(queries.query("safe_transaction_settings"))
        yield conn


def resolve_table(
    conn: psycopg.Connection[Any], name: str, mapping: TableMapping | None = None
) -> JobsTable:
    """The jobs table named ``name`` (schema-qualified allowed), checked to exist, with the
    mapping schema apply recorded for it (or ``mapping``, one about to be recorded) and the
    types of its id and status columns."""
    from psycopg import sql
    from psycopg.rows import dict_row

    if not _TABLE_NAME.match(name):
        raise errors.UsageError(f"--table {name!r} is not a table name")
    with conn.transaction():
        row = identify(conn, name)  # the rest on jobctl's safe search_path
        if row is None:
            raise table_not_found(conn, name)
        cursor = conn.cursor(row_factory=dict_row)  # whatever rows the connection makes
        if mapping is None:
            mapping = recorded_mapping(cursor, row)
        id_name, status_name = mapping.column("id"), mapping.column("status")
        names = {mapping.column(design): design for design in COLUMNS}
        types = {
            r["name"]: r
            for r in cursor.execute(
                queries.query("column_types"), {"oid": row["oid"], "names": list(names)}
            )
        }
    id_row, status_row = types.get(id_name), types.get(status_name)
    return JobsTable(
        sql.Identifier(row["nspname"], row["relname"]),
        row["nspname"],
        row["relname"],
        row["oid"],
        row["qualified"],
        mapping,
        (id_row["type_schema"], id_row["type_name"]) if id_row else DESIGN_ID_TYPE,
        # a domain's statuses as its base type's (see the column_types block)
        (status_row["literal_schema"], status_row["literal_name"])
        if status_row
        else DESIGN_STATUS_TYPE,
        id_row["type_display"] if id_row else "bigint",
        {
            names[name]: column_types.ColumnType(
                name, r["type_schema"], r["type_name"], r["type_display"], r["typtype"]
            )
            for name, r in types.items()
        },
    )


def recorded_mapping(cursor: psycopg.Cursor[Any], table: dict[str, Any]) -> TableMapping:
    """The mapping schema apply recorded for ``table`` (a ``table_identity`` row), or the
    lease design's own names when there is none (``cursor`` makes dict rows)."""
    if not table["has_mappings"]:
        return TableMapping()
    recorded = cursor.execute(
        queries.query("table_mapping"), {"job_table": table["qualified"]}
    ).fetchone()
    return TableMapping() if recorded is None else TableMapping.from_json(recorded["mapping"])


@contextlib.contextmanager
def transaction(
    conn: psycopg.Connection[Any],
    settings: Settings,
    *,
    read_only: bool = False,
    action: str | None = None,
    reason: str | None = None,
) -> Iterator[psycopg.Connection[Any]]:
    """A short transaction with statement_timeout and lock_timeout set locally.

    ``read_only`` makes the transaction read only itself, transaction-locally (psycopg's
    read_only attribute does nothing in autocommit; SET TRANSACTION READ ONLY would mark the
    setting as the session's). ``action`` and ``reason`` reach the history trigger together
    with the actor, through transaction-local settings.
    """
    with conn.transaction():
        _apply(conn, settings, read_only=read_only, action=action, reason=reason)
        yield conn


def pipelined(
    conn: psycopg.Connection[Any],
    settings: Settings,
    statement: sql.Composed | bytes,
    params: dict[str, Any],
    *,
    action: str | None = None,
) -> list[dict[str, Any]]:
    """``statement`` in its own short transaction, in one round trip: BEGIN, the timeouts and
    actor (and ``action``, as ``transaction``) set transaction-locally, the statement, COMMIT,
    sent as one pipeline; its rows.

    On an autocommit connection. A failure rolls the transaction back and raises. With a
    libpq older than 14 (no pipeline mode) the same transaction takes four round trips.
    """
    import psycopg
    from psycopg import pq

    # a connection lost mid-pipeline is raised as one error; psycopg would also log a warning
    # about the pipeline it could not close (a second line on stderr, without a handler)
    logging.getLogger("psycopg").addHandler(_SILENT)
    if not psycopg.Pipeline.is_supported():
        with transaction(conn, settings, action=action):
            return conn.execute(statement, params).fetchall()
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            _apply(conn, settings, action=action)
            cursor = loaders.reading_iso(conn.cursor())
            cursor.execute(statement, params)
            conn.execute("COMMIT")
        return cursor.fetchall()
    except BaseException:
        # the error skipped the COMMIT: end the failed transaction on its server connection
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
) -> None:
    """The timeouts and the audit settings, for the current transaction only (no session
    state: behind a pooler the session is shared with the application's own clients)."""
    conn.execute(
        _settings_statement(read_only, action is not None),
        {
            "st": str(_milliseconds(settings.statement_timeout)),
            "lt": str(_milliseconds(settings.lock_timeout)),
            "actor": settings.actor,
            "action": action or "",
            "reason": reason or "",
        },
    )


@functools.cache
def _settings_statement(read_only: bool, writes: bool = False) -> sql.Composed:
    """The transaction settings statement, composed once (every reclaim batch runs it).
    ``writes``: a write of jobctl's to the jobs table (it names an action), whose triggers of
    the application's run in it: pg_catalog first, then the session's own search path, so
    that they find their objects as in the workers' writes (``write_search_path``); refused,
    by an error of this statement, in a session whose session_replication_role is not origin
    (``origin_session``: no trigger would record it). Every transaction sets the output
    styles psycopg parses (``parse_settings``: DateStyle ...)."""
    from psycopg import sql

    return queries.query(
        "transaction_settings",
        read_only=queries.query("read_only_setting") if read_only else sql.SQL(""),
        search_path=queries.query("write_search_path")
        if writes
        else sql.SQL("'pg_catalog, pg_temp'"),
        **({} if writes else {"origin_session": sql.SQL("")}),  # a read needs no guard
    )


def _milliseconds(duration: dt.timedelta) -> int:
    return max(1, int(duration.total_seconds() * 1000))  # never 0: "no timeout"


def where(conn: psycopg.Connection[Any], table: JobsTable) -> dict[str, Any]:
    """Where this connection is, for a saved plan: host, port, database, system id, table."""
    with safe(conn):
        row = conn.execute(queries.query("database_identity")).fetchone()
    assert row is not None
    return {
        "host": conn.info.host,
        "port": conn.info.port,
        "database": row["database"],
        "system_identifier": row["system_identifier"],
        "table": table.qualified,
    }

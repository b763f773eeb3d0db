"""Database errors as one line each, with an exit code: what a command says when the server
refuses, is gone, or sits behind a pooler."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from jobctl import errors
from jobctl.contract import safe_text
from jobctl.db.secrets import redact

if TYPE_CHECKING:
    pass


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


# PostgreSQL's refusal of a query that a row security policy would filter, under jobctl's
# row_security off: raised by this function of the server, whatever the messages' language
_ROW_SECURITY_CHECK = "check_enable_rls"
_QUOTED = re.compile(r'"(?P<name>[^"]{1,63})"')
_POLICIES = "jobctl_row_security_policies"  # set on the exception by db.connection


def row_security_refused(exc: BaseException) -> bool:
    """Is this the server's refusal of a query a row security policy would have filtered?"""
    import psycopg

    return (
        isinstance(exc, psycopg.errors.InsufficientPrivilege)
        and exc.diag.source_function == _ROW_SECURITY_CHECK
    )


def refused_table(exc: BaseException) -> str | None:
    """The table the refusal names (unqualified, as the message quotes it), if it can tell."""
    import psycopg

    if not isinstance(exc, psycopg.Error):
        return None
    found = _QUOTED.search(exc.diag.message_primary or "")
    return found["name"] if found else None


def name_policies(exc: BaseException, tables: list[tuple[str, list[str]]]) -> None:
    """Keep on the refusal the tables with row security and their policies (read from the
    catalog once its transaction ended), for ``database_error``'s line."""
    setattr(exc, _POLICIES, tables)


def _row_security_line(exc: BaseException) -> str:
    """The refusal in one line: the table's policies, and the ways out."""
    tables: list[tuple[str, list[str]]] = getattr(exc, _POLICIES, None) or []
    if tables:
        on = "; ".join(
            f"{safe_text.visible(name)} (policies: "
            + (", ".join(safe_text.visible(p) for p in policies) or "none: every row hidden")
            + ")"
            for name, policies in tables
        )
    else:
        on = safe_text.visible(refused_table(exc) or "the jobs table")
    return (
        f"row security is on for {on}: jobctl never runs a policy's code as its role, so "
        "PostgreSQL refused the query; nothing read or written. Either give jobctl's roles "
        "BYPASSRLS (as a superuser: ALTER ROLE ... BYPASSRLS), or leave the jobs table "
        "without policies (ALTER TABLE ... DISABLE ROW LEVEL SECURITY)"
    )


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
    if row_security_refused(exc):
        return errors.Refused(_row_security_line(exc))
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

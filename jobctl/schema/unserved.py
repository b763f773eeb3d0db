"""Why jobctl does not serve a table (yet), and the next step that would be accepted.

A read command (``stuck``, ``summary``, ``reclaim --dry-run`` ...) on a table jobctl does not
serve fails on a column the lease design reads; PostgreSQL's "column j.x does not exist" is not
the operator's answer. ``diagnose`` (through ``explained``, around every command's session)
says which case it is — judged by ``schema_apply.plan_apply`` itself, a plan made and never
run — and the right next step, never a command that would be refused:

* a queue library's own table (``jobctl.libraries``): never served; the library's own tools;
* the table's own columns not named: no status or id column under the mapping, or another of
  the design's columns missing: ``schema apply --column DESIGN=ACTUAL``;
* statuses not mapped: the status column refuses a value jobctl writes, or the table holds
  status values none of which is one jobctl reads and writes: ``schema apply --status``;
* a column of a type jobctl does not serve (``column_types``): what is served;
* only the lease columns missing: ``schema apply`` adds them.

``apply_verdict`` is ``schema check``'s row on whether apply would accept the table (a
mapping's statuses are judged against the values the table holds in ``statuses``). Example::

    error = diagnose(conn, table)   # None: nothing found wrong
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from jobctl import db, errors
from jobctl.db.session import Session
from jobctl.table.mapping import LEASE_COLUMNS

if TYPE_CHECKING:
    import psycopg

    from jobctl.schema import shape  # (imported when a failure is judged: every session gets here)


def _judged(
    conn: psycopg.Connection[Any], table: db.JobsTable
) -> tuple[shape.TableShape, str | None]:
    """The table as found, and why ``schema apply`` would refuse it as it is (None: it would
    not); its plan is made, never run. A queue library's table is refused outright
    (errors.Refused), whatever the mapping."""
    from jobctl.schema import apply as schema_apply
    from jobctl.schema import shape

    found = shape.inspect(conn, table.qualified)
    if found.library is not None:
        raise errors.Refused(found.library.refusal(found.qualified))
    try:
        schema_apply.plan_apply(conn, table.qualified, create=False)
    except errors.NothingDone as exc:
        return found, exc.reason
    except errors.Refused as exc:
        return found, exc.message
    return found, None


def diagnose(conn: psycopg.Connection[Any], table: db.JobsTable) -> errors.JobctlError | None:
    """Why jobctl does not serve ``table`` as it is, and the next step; None if nothing is
    found wrong (the caller keeps its own error). Judged as ``schema apply`` judges it, so
    the step named is one apply accepts."""
    try:
        found, refused = _judged(conn, table)
    except errors.Refused as library:
        return library
    if refused is not None:
        return errors.SchemaMissing(
            f"jobctl does not serve {found.qualified} yet, and schema apply would refuse it as "
            f"it is: {refused}"
        )
    lacking = [d for d in LEASE_COLUMNS if found.column(table.mapping, d) is None]
    if lacking:
        return errors.SchemaMissing(
            f"{found.qualified} lacks the lease columns ({', '.join(lacking)}): run jobctl "
            "schema apply (--sql shows what it would do, first)"
        )
    return None


def apply_verdict(conn: psycopg.Connection[Any], table: db.JobsTable) -> tuple[bool, str]:
    """Would ``schema apply`` (with the recorded mapping) accept the table: (ok, detail), for
    ``schema check``; a queue library's table is refused outright (errors.Refused)."""
    _, refused = _judged(conn, table)
    if refused is not None:
        return False, "refuses the table as it is: " + refused
    return True, "accepts the table with its recorded names"


@contextlib.contextmanager
def explained(session: Session) -> Iterator[Session]:
    """Inside, a statement failing on a column the table lacks (or on a status value its
    type refuses) becomes why jobctl does not serve the table and the next step, when that
    is the cause (``diagnose``); any other failure is left as it is."""
    import psycopg

    try:
        yield session
    except (psycopg.errors.UndefinedColumn, psycopg.errors.InvalidTextRepresentation) as exc:
        try:
            with db.safe(session.conn):  # read on jobctl's search path, as every read
                error = diagnose(session.conn, session.table)
        except psycopg.errors.InsufficientPrivilege:  # the role may not read the table: that
            raise  # is its first problem (PostgreSQL resolves columns before privileges)
        except (psycopg.Error, errors.JobctlError):  # anything else: the original error
            error = None
        if error is None:
            raise exc from None
        raise error from exc

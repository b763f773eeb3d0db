"""Reclaim's row-by-row retry, its rules: which errors of a batch one row may have caused (and
are isolated, that row skipped) and which ended the statement; which are tried again; what a
skipped row says, and the rows a commit left so, named once (``LeftAlone``); a row the statement
refused because it was not written as meant (``not_as_meant``). No database here:
``batches._row_by_row`` runs the retry."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from jobctl import durations
from jobctl.db import failures
from jobctl.render import reclaim_lines

if TYPE_CHECKING:
    import psycopg

    from jobctl import db
    from jobctl.contract.shapes import ReclaimRow, Row

SKIPPED_AS = "error"  # how the skipped text of a row whose update raised begins
RETRIES = 3  # a row's deadlock or serialization failure: tried again, then skipped
# what the server raises itself when it cancels a statement (statement_timeout, Ctrl-C's
# cancel request, lock_timeout): the same SQLSTATEs a trigger can RAISE are told apart by the
# server function that raised them, whatever the language of its messages
_INTERRUPTS = "ProcessInterrupts"
# what reclaim_batch raises (jobctl.refuse, history 013) when a row it locked was not written
# as meant: an application's BEFORE trigger kept it back or changed it (sql/queries.sql,
# reclaim_refused); jobctl's own class of SQLSTATE, which no PostgreSQL error uses
NOT_AS_MEANT = "JC001"
# what the refusal's DETAIL holds of the row (the columns of reclaim_written, tally.WRITTEN)
_WRITTEN_KEYS = frozenset(
    ("written_row", "written_status", "written_token_cleared", "written_reclaim_count")
)


def isolated(exc: psycopg.DatabaseError) -> bool:
    """An error the row-by-row retry may isolate, whatever its SQLSTATE: what the row's data,
    a constraint or the application's trigger raised (a trigger may RAISE any SQLSTATE,
    42501 or 57014 included). Not what means the connection, the server or the operator
    ended the statement: no SQLSTATE (the client lost the server), class 08 (connection),
    53 (resources), 57 (operator intervention: a shutdown, a terminated backend) and a
    cancel or lock timeout the server raised itself; those stop the reclaim, as before.

    A privilege missing, a statement-level trigger's refusal: every row fails, and the
    statement alone fails too (``batches._statement_fails``): the statement's error, raised.
    A row not written as meant (``NOT_AS_MEANT``) is one row's: its batch, rolled back with
    the history's events of it, is tried again row by row, where that row alone is refused.
    """
    state = exc.sqlstate or ""
    if state == NOT_AS_MEANT:
        return True
    if not state or state[:2] in ("08", "53"):
        return False
    if failures.row_security_refused(exc):  # row security refuses every row: one line at once
        return False
    if state in ("57014", "55P03"):  # query_canceled, lock_not_available
        return exc.diag.source_function != _INTERRUPTS
    return state[:2] != "57"


def held(exc: psycopg.DatabaseError, elapsed: float, settings: db.Settings) -> bool:
    """Did the server cancel the statement because a row held it, ``elapsed`` seconds after
    it was sent: its statement_timeout ran out (57014 raised by the server itself, and at
    least the settings' statement_timeout elapsed: a cancel request, jobctl's own or anyone's
    ``pg_cancel_backend``, comes before it — on Ctrl-C psycopg raises KeyboardInterrupt, never
    this error — and stays the statement's), or a lock timeout the server raised while an
    application's trigger ran (55P03 with the trigger's context; jobctl's own statement waits
    for no row lock, SKIP LOCKED, and a table lock it waits for has no context: the
    statement's). Such a batch is tried again row by row, each row in its own transaction
    with its own timeout; a row held again is skipped (``held_skipped``), the rest applied.
    """
    if (exc.sqlstate or "") not in ("57014", "55P03"):
        return False
    if exc.diag.source_function != _INTERRUPTS:
        return False  # RAISEd by a trigger: ``isolated`` takes it
    if exc.sqlstate == "55P03":
        return bool(exc.diag.context)
    if "user request" in (exc.diag.message_primary or ""):  # a cancel request, in English
        return False
    return elapsed >= settings.statement_timeout.total_seconds()


def held_skipped(exc: psycopg.DatabaseError, settings: db.Settings) -> str:
    """The skipped text of a row the server cancelled after its timeout (``held``)."""
    timeout = settings.lock_timeout if exc.sqlstate == "55P03" else settings.statement_timeout
    return (
        f"{SKIPPED_AS}: the statement was cancelled after {durations.show(timeout)}: an "
        f"application trigger or lock held it (SQLSTATE {exc.sqlstate}); left as it was"
    )


PASSED_OVER_CAP = 10_000  # the ids the reclaimer service passes over at once, at most
PASSED_OVER_FOR = dt.timedelta(minutes=10)  # how long it passes over each, then tries it again


class PassedOver:
    """The jobs the reclaimer service passes over because their update raised or was held
    (``raised``): each for ``for_`` (10 minutes) since it was last skipped, then tried again
    (a trigger fixed, a lock released: the row is reclaimed; else skipped again, and passed
    over again); at most ``cap`` (10,000) at once, the oldest tried again first beyond that.
    Memory stays bounded however long the service runs. Example::

        over = PassedOver()
        over.add(["17"])
        over.ids()  # ["17"] for the next 10 minutes, then []
    """

    def __init__(
        self,
        cap: int = PASSED_OVER_CAP,
        for_: dt.timedelta = PASSED_OVER_FOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cap, self.for_, self._clock = cap, for_, clock
        self._until: dict[str, float] = {}  # id -> when it is tried again; oldest first

    def add(self, ids: Iterable[str]) -> None:
        """``ids`` passed over from now (one already passed over: from now again)."""
        until = self._clock() + self.for_.total_seconds()
        for job in ids:
            self._until.pop(job, None)
            self._until[job] = until
        while len(self._until) > self.cap:  # every entry lasts as long: the first ends first
            del self._until[next(iter(self._until))]

    def ids(self) -> list[str]:
        """The ids passed over now (those whose time ran out are dropped: tried again)."""
        self._expire()
        return list(self._until)

    def __contains__(self, job: object) -> bool:
        self._expire()
        return job in self._until

    def _expire(self) -> None:
        now = self._clock()
        while self._until and next(iter(self._until.values())) <= now:
            del self._until[next(iter(self._until))]


class LeftAlone:
    """The rows a commit skipped because their update raised (``batches._row_by_row``), by id, as
    its batches pass (``watch``): the picture is partial, and ``line`` says so once."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def watch(self, batches: Iterator[list[ReclaimRow]]) -> Iterator[list[ReclaimRow]]:
        for batch in batches:
            self.ids += [str(row["id"]) for row in batch if raised(row)]
            yield batch

    def line(self) -> str | None:
        """One line naming the rows left (None when none was): exit 1, the rest done."""
        return reclaim_lines.left_alone(self.ids)


def raised(row: ReclaimRow | Row) -> bool:
    """Was this row skipped because its update raised (not locked, not poisoned)?"""
    return str(row.get("skipped") or "").startswith(SKIPPED_AS + ":")


def not_as_meant(exc: psycopg.DatabaseError) -> dict[str, Any] | None:
    """What was written of the row for which reclaim_batch refused itself (``NOT_AS_MEANT``:
    an application's trigger kept it back or changed it), as its DETAIL says (the columns of
    reclaim_written, which ``tally.as_written`` judges): its transaction rolled back, so
    nothing of it was written or recorded. None for any other error (or a DETAIL that is not
    the refusal's: an application's trigger may RAISE that SQLSTATE too; the row is then
    skipped as any row whose update raised). Example::

        not_as_meant(exc)  # {"written_row": False, "written_status": None, ...}
    """
    if (exc.sqlstate or "") != NOT_AS_MEANT:
        return None
    try:
        written = json.loads(exc.diag.message_detail or "")
    except ValueError:
        return None
    if not isinstance(written, dict) or not _WRITTEN_KEYS <= written.keys():
        return None
    return written


def transient(exc: psycopg.DatabaseError) -> bool:
    """A deadlock (40P01) or serialization failure (40001): the row is tried again."""
    return (exc.sqlstate or "") in ("40P01", "40001")


def skipped(exc: psycopg.DatabaseError, tries: int) -> str:
    """The skipped text of a row whose update raised: its first line and its SQLSTATE."""
    text = str(exc).strip()
    message = text.splitlines()[0] if text else type(exc).__name__
    again = f"; tried {tries} times" if tries > 1 else ""
    return f"{SKIPPED_AS}: {message} (SQLSTATE {exc.sqlstate}{again}); left for a human to fix"

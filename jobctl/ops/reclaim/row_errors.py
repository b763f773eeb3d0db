"""Reclaim's row-by-row retry, its rules: which errors of a batch one row may have caused (and
are isolated, that row skipped) and which ended the statement; which are tried again; what a
skipped row says, and the rows a commit left so, named once (``LeftAlone``). No database here:
``batches._row_by_row`` runs the retry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from jobctl.db import failures
from jobctl.render import reclaim_lines

if TYPE_CHECKING:
    import psycopg

    from jobctl.contract.shapes import ReclaimRow, Row

SKIPPED_AS = "error"  # how the skipped text of a row whose update raised begins
RETRIES = 3  # a row's deadlock or serialization failure: tried again, then skipped
# what the server raises itself when it cancels a statement (statement_timeout, Ctrl-C's
# cancel request, lock_timeout): the same SQLSTATEs a trigger can RAISE are told apart by the
# server function that raised them, whatever the language of its messages
_INTERRUPTS = "ProcessInterrupts"


def isolated(exc: psycopg.DatabaseError) -> bool:
    """An error the row-by-row retry may isolate, whatever its SQLSTATE: what the row's data,
    a constraint or the application's trigger raised (a trigger may RAISE any SQLSTATE,
    42501 or 57014 included). Not what means the connection, the server or the operator
    ended the statement: no SQLSTATE (the client lost the server), class 08 (connection),
    53 (resources), 57 (operator intervention: a shutdown, a terminated backend) and a
    cancel or lock timeout the server raised itself; those stop the reclaim, as before.

    A privilege missing, a statement-level trigger's refusal: every row fails, and the
    statement alone fails too (``batches._statement_fails``): the statement's error, raised.
    """
    state = exc.sqlstate or ""
    if not state or state[:2] in ("08", "53"):
        return False
    if failures.row_security_refused(exc):  # row security refuses every row: one line at once
        return False
    if state in ("57014", "55P03"):  # query_canceled, lock_not_available
        return exc.diag.source_function != _INTERRUPTS
    return state[:2] != "57"


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


def transient(exc: psycopg.DatabaseError) -> bool:
    """A deadlock (40P01) or serialization failure (40001): the row is tried again."""
    return (exc.sqlstate or "") in ("40P01", "40001")


def skipped(exc: psycopg.DatabaseError, tries: int) -> str:
    """The skipped text of a row whose update raised: its first line and its SQLSTATE."""
    text = str(exc).strip()
    message = text.splitlines()[0] if text else type(exc).__name__
    again = f"; tried {tries} times" if tries > 1 else ""
    return f"{SKIPPED_AS}: {message} (SQLSTATE {exc.sqlstate}{again}); left for a human to fix"

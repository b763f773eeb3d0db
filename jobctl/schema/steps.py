"""A step of schema apply, grants or remove, and running steps: as a script for psql
(``render_sql``), or on the server (``apply``), each step that locks the jobs table in short
tries until a deadline, any other watched by a second connection that says whom it waits for."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from jobctl import db, durations, errors
from jobctl.contract import safe_text
from jobctl.db import locks
from jobctl.sql import printable


@dataclasses.dataclass(frozen=True)
class Step:
    """One statement of schema apply; ``outside_transaction`` for CREATE INDEX CONCURRENTLY.

    ``locks`` names the jobs table when the step takes a lock that conflicts with the workers'
    statements (ALTER TABLE, CREATE TRIGGER, DROP INDEX, and the history's ALTER and CREATE
    INDEX on jobctl's tables, which the trigger writes): it is tried with a short lock_timeout
    and retried (``locks.with_lock_retries``), so that workers never queue behind it for long."""

    what: str
    statement: sql.SQL | sql.Composed
    outside_transaction: bool = False
    locks: str | None = None
    probe: sql.Composed | None = None  # CONCURRENTLY: its first lock, tried in a transaction


@dataclasses.dataclass(frozen=True)
class Rerun:
    """What the operator runs again after a step failed or waited too long (the command that
    plans only what is left), and what shows what is left, if anything."""

    command: str = "jobctl schema apply"
    shows_what_is_left: str | None = "jobctl schema check"

    @property
    def advice(self) -> str:
        shows = f" ({self.shows_what_is_left} shows what is missing)"
        return f"run {self.command} again" + (shows if self.shows_what_is_left else "")


APPLY = Rerun()
REMOVE = Rerun("jobctl schema remove", None)


_SCRIPT_HEAD = """\
-- Run with: psql -v ON_ERROR_STOP=1 -f this.sql
-- Steps marked "takes a lock the workers wait for" wait at most {timeout} for it (SET LOCAL
-- lock_timeout), so the workers are never held up longer than that. If such a step fails
-- with "canceling statement due to lock timeout", nothing of it was applied: wait a moment and
-- run it again, with growing pauses, until a gap between long transactions lets it through
-- ({command} does this by itself, up to --lock-deadline). Then run the rest.
"""
_SCRIPT_OUTSIDE = """\
-- Steps without BEGIN and COMMIT build an index CONCURRENTLY, outside a transaction: the
-- workers go on during the build, which waits for the transactions already running. One that
-- fails leaves an invalid index; run {command} again (or --sql): it drops that first.
"""


def render_sql(
    conn: psycopg.Connection[Any],
    steps: list[Step],
    backoff: locks.Backoff = locks.DEFAULT_BACKOFF,
    rerun: Rerun = APPLY,
) -> str:
    """The steps as a SQL script, for review or to run by hand (--sql): each step that takes
    a lock the workers wait for in its own transaction with a short lock_timeout. Every step
    that runs in a transaction sets jobctl's search_path in it, as jobctl's own do (psql runs
    the script under the session's); a comment's text (names from the catalog or the command
    line) is shown escaped, on its one line (``safe_text.visible``), and a name or a text with
    a control character in its escaped SQL form (``printable.printable``)."""
    timeout = f"{round(backoff.max_timeout * 1000)}ms"
    path = "SET LOCAL search_path = pg_catalog, pg_temp;"
    parts = []
    for step in steps:
        text = printable.printable(step.statement).as_string(conn).strip()
        what = safe_text.visible(step.what)
        if step.outside_transaction:  # CONCURRENTLY: it names every schema itself
            parts.append(f"-- {what}\n{text};")
        elif step.locks:
            parts.append(
                f"-- {what}: takes a lock the workers wait for; retry on lock timeout\n"
                f"BEGIN;\n{path}\nSET LOCAL lock_timeout = '{timeout}';\n{text};\nCOMMIT;"
            )
        else:
            parts.append(f"-- {what}\nBEGIN;\n{path}\n{text};\nCOMMIT;")
    locking = any(s.locks for s in steps)
    head = _SCRIPT_HEAD.format(timeout=timeout, command=rerun.command) if locking else ""
    if any(s.outside_transaction for s in steps):
        head += _SCRIPT_OUTSIDE.format(command=rerun.command)
    return head + "\n" + "\n\n".join(parts) + "\n" if head else "\n\n".join(parts) + "\n"


DEFAULT_LOCK_DEADLINE = dt.timedelta(minutes=5)


def apply(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    steps: list[Step],
    *,
    deadline: dt.timedelta = DEFAULT_LOCK_DEADLINE,
    backoff: locks.Backoff = locks.DEFAULT_BACKOFF,
    on_wait: Callable[[locks.Wait], None] = lambda wait: None,
    on_done: Callable[[str], None] = lambda what: None,
    rerun: Rerun = APPLY,
) -> list[str]:
    """Run the steps in order, each atomic, never holding the workers up for long.

    A step that ``locks`` the jobs table: short tries in their own transactions (lock_timeout
    from ``backoff``, never above --lock-timeout), retried with jittered sleeps. Any other step
    (VALIDATE, CREATE INDEX CONCURRENTLY, ...) waits in one statement, its lock_timeout the
    time left, while a second connection watches whom it waits for. ``on_wait`` hears why a
    step waits, at most once a second; ``on_done`` each step done. At the deadline:
    ``locks.DeadlineExceeded``, naming the holder; the failed step left nothing behind
    (except a CONCURRENTLY build: its invalid index, which the next apply rebuilds); its line
    says what to run again (``rerun``)."""
    if settings.lock_timeout.total_seconds() > 0:  # 0: no lock_timeout, the backoff's cap
        backoff = dataclasses.replace(
            backoff, max_timeout=min(backoff.max_timeout, settings.lock_timeout.total_seconds())
        )
    ends = time.monotonic() + deadline.total_seconds()
    done = []
    for step in steps:
        remaining = ends - time.monotonic()
        if step.locks:
            _with_retries(conn, settings, step, remaining, deadline, backoff, on_wait, rerun)
        else:
            _watched(conn, settings, step, remaining, deadline, on_wait, rerun)
        done.append(step.what)
        on_done(step.what)
    return done


def _with_retries(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    step: Step,
    remaining: float,
    deadline: dt.timedelta,
    backoff: locks.Backoff,
    on_wait: Callable[[locks.Wait], None],
    rerun: Rerun,
) -> None:
    """One step that locks the jobs table: short tries until ``remaining`` seconds are up."""
    with db.transaction(conn, settings, read_only=True):
        row = db.row(conn, "lock_target", {"name": step.locks})
    assert row is not None
    throttle = locks.Throttle()
    seen = locks.Wait(step.what, 0, 0, None)

    def attempt(timeout: float) -> None:
        with db.mapped_errors(settings.resolved_dsn()), db.transaction(conn, settings):
            db.run(conn, "local_lock_timeout", {"timeout": f"{max(1, round(timeout * 1000))}ms"})
            db.run(conn, step.statement)

    def retry(tries: int, elapsed: float, timeout: float) -> None:
        nonlocal seen
        seen = dataclasses.replace(seen, elapsed=elapsed, attempts=tries)
        if throttle.ready():
            with db.transaction(conn, settings, read_only=True):
                blocker = locks.holders(conn, row["oid"], row["since"])
            seen = dataclasses.replace(seen, blocker=blocker)
            on_wait(seen)

    try:
        locks.with_lock_retries(attempt, deadline=remaining, backoff=backoff, on_retry=retry)
    except locks.DeadlineExceeded:
        with db.transaction(conn, settings, read_only=True):
            blocker = locks.holders(conn, row["oid"], row["since"])
        seen = dataclasses.replace(seen, blocker=blocker or seen.blocker)
        tries = f"{seen.attempts} {'try' if seen.attempts == 1 else 'tries'}"
        raise locks.DeadlineExceeded(
            f"{step.what}: the lock on {step.locks} was not granted within the "
            f"{_span(deadline)} deadline ({tries}, each holding the workers up at most "
            f"{round(backoff.max_timeout * 1000)} ms); held by "
            f"{seen.blocker or 'a session that has finished since'}; nothing of this step was "
            f"applied: {rerun.advice}",
            seen,
        ) from None


def _watched(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    step: Step,
    remaining: float,
    deadline: dt.timedelta,
    on_wait: Callable[[locks.Wait], None],
    rerun: Rerun,
) -> None:
    """A step that does not block the workers, in one statement: its lock_timeout is the time
    left; a second connection reports whom it waits for (old transactions, for an index
    build)."""
    throttle = locks.Throttle()
    last: list[locks.Wait] = []

    def report(blocker: str | None, phase: str | None, elapsed: float) -> None:
        last[:] = [locks.Wait(step.what, elapsed, 0, blocker, phase)]
        if throttle.ready():
            on_wait(last[0])

    if remaining <= 0:
        raise locks.DeadlineExceeded(
            f"{step.what}: not started, the {_span(deadline)} deadline has passed; run "
            f"{rerun.command} again",
            None,
        )
    try:
        with (
            db.mapped_errors(settings.resolved_dsn()),
            locks.watching(settings, conn.info.backend_pid, report),
        ):
            _run_within(conn, settings, step, f"{max(1, round(remaining * 1000))}ms")
    except errors.LockTimeout:
        raise _held_up(step, deadline, last[0] if last else None, rerun) from None


def _run_within(
    conn: psycopg.Connection[Any], settings: db.Settings, step: Step, timeout: str
) -> None:
    """Run a step that does not block the workers, its locks tried under ``timeout``."""
    if step.outside_transaction:
        # CONCURRENTLY runs outside a transaction block, so no transaction-local
        # lock_timeout; a session-level one would stay on the server connection (behind
        # a pooler, shared with the application). Its first lock (SHARE UPDATE
        # EXCLUSIVE: no worker statement conflicts with it) is tried under the time left
        # in a short transaction; then the build waits for older transactions as long
        # as they last, the watcher saying whom it waits for.
        if step.probe is not None:
            with db.transaction(conn, settings):
                db.run(conn, "local_lock_timeout", {"timeout": timeout})
                db.run(conn, step.probe)
        db.run(conn, step.statement)
    else:
        with db.transaction(conn, settings):
            db.run(conn, "local_lock_timeout", {"timeout": timeout})
            db.run(conn, step.statement)


def _held_up(
    step: Step, deadline: dt.timedelta, wait: locks.Wait | None, rerun: Rerun
) -> locks.DeadlineExceeded:
    """A watched step still waiting at the deadline: for whom, and what it left."""
    left = (
        f"; it left an invalid index, which the next {rerun.command} drops and rebuilds"
        if step.outside_transaction
        else "; nothing of this step was applied"
    )
    return locks.DeadlineExceeded(
        f"{step.what}: still held up at the {_span(deadline)} deadline"
        + (f" ({wait.phase})" if wait and wait.phase else "")
        + f" by {wait.blocker if wait and wait.blocker else 'another transaction'}"
        + left
        + f" (run {rerun.command} again)",
        wait,
    )


def _span(duration: dt.timedelta) -> str:
    return durations.human(duration)

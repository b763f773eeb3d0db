"""Taking locks on a busy table without making the workers queue: short tries with backoff
and jitter until a deadline, and naming who holds us up. Prints nothing: progress goes to a
callback.

A statement that needs a lock conflicting with the workers' (ALTER TABLE, CREATE TRIGGER, ...)
waits behind a long reader, and every worker statement that arrives meanwhile queues behind
*it* (PostgreSQL's lock queue is first come, first served). So each try waits at most a short
``lock_timeout`` -- the longest a worker can be held up -- then gives the lock queue back and
sleeps (with jitter, so that several appliers do not retry in step) before the next try, until
an overall deadline (as GitLab's ``with_lock_retries`` does).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from jobctl import errors
from jobctl.sql import queries

if TYPE_CHECKING:
    import psycopg

    from jobctl import db

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Backoff:
    """The schedule of tries: lock_timeout and sleep both grow from ``first_*`` by ``growth``
    per try up to ``max_*``; each sleep is scaled by a random factor in [1 - jitter, 1 + jitter].

    ``max_timeout`` bounds how long a worker can wait behind one try: 150 ms, so that with the
    statement's own time a worker's worst stays under the goal of 200 ms."""

    first_timeout: float = 0.05
    max_timeout: float = 0.15
    first_sleep: float = 0.1
    max_sleep: float = 1.0
    growth: float = 1.5
    jitter: float = 0.5

    def lock_timeout(self, attempt: int) -> float:
        """Seconds the try number ``attempt`` (0-based) may wait for its lock."""
        return min(self.max_timeout, self.first_timeout * self.growth**attempt)

    def sleep(self, attempt: int, rng: random.Random) -> float:
        """Seconds to sleep after the failed try number ``attempt`` (0-based), with jitter."""
        nominal = min(self.max_sleep, self.first_sleep * self.growth**attempt)
        return nominal * rng.uniform(1 - self.jitter, 1 + self.jitter)


DEFAULT_BACKOFF = Backoff()


@dataclasses.dataclass(frozen=True)
class Wait:
    """What a waiting step reports: how long it has waited, and who holds it up."""

    step: str
    elapsed: float  # seconds since the step started
    attempts: int  # tries so far (0 for a step that waits in one statement)
    blocker: str | None  # "pid 123 (active, transaction open 4.0s: SELECT ...)" when known
    phase: str | None = None  # an index build's phase, e.g. "waiting for old snapshots"

    def describe(self) -> str:
        """One line: 'waiting 3s: add the lease columns: lock held by pid 4242 (...); 9 tries'."""
        who = self.blocker or "a session that has finished since"
        head = f"waiting {self.elapsed:.1f}s: {self.step}"
        if self.attempts:
            tries = f"{self.attempts} {'try' if self.attempts == 1 else 'tries'}"
            return f"{head}: lock held by {who}; {tries}"
        return f"{head}{f' ({self.phase})' if self.phase else ''}: held up by {who}"


class DeadlineExceeded(errors.LockTimeout):
    """The lock was not granted before the deadline."""

    def __init__(self, message: str, wait: Wait | None) -> None:
        super().__init__(message)
        self.wait = wait


def with_lock_retries(
    attempt: Callable[[float], T],
    *,
    deadline: float,
    backoff: Backoff = DEFAULT_BACKOFF,
    on_retry: Callable[[int, float, float], None] = lambda n, elapsed, timeout: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """``attempt(lock_timeout_s)`` until it does not raise ``errors.LockTimeout``.

    After each failed try: ``on_retry(tries so far, seconds elapsed, its lock_timeout)``, then a
    jittered sleep. Gives up with ``DeadlineExceeded`` (its ``wait`` is None here) when the next
    try could not start before ``deadline`` seconds; a try never waits past the deadline."""
    rng = rng or random.Random()
    started = clock()
    tries = 0
    while True:
        remaining = deadline - (clock() - started)
        timeout = min(backoff.lock_timeout(tries), remaining)
        if timeout <= 0:
            raise DeadlineExceeded(f"lock not granted within {deadline:g}s ({tries} tries)", None)
        try:
            return attempt(timeout)
        except errors.LockTimeout:
            tries += 1
        elapsed = clock() - started
        on_retry(tries, elapsed, timeout)
        pause = backoff.sleep(tries - 1, rng)
        if elapsed + pause >= deadline:
            raise DeadlineExceeded(
                f"lock not granted within {deadline:g}s ({tries} tries)", None
            ) from None
        sleep(pause)


class Throttle:
    """Lets a report through at most once per ``interval`` seconds (the first at once)."""

    def __init__(self, interval: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval, self.clock = interval, clock
        self.last: float | None = None

    def ready(self) -> bool:
        now = self.clock()
        if self.last is not None and now - self.last < self.interval:
            return False
        self.last = now
        return True


# ---------------------------------------------------------------- who holds us up
def holders(conn: psycopg.Connection[Any], table_oid: int | None, since: dt.datetime) -> str | None:
    """The sessions (other than this one), in a transaction since before ``since``, that hold
    a lock on the jobs table or on jobctl's history tables -- named as requeue's ``locked``
    outcome names a row's holder; the jobs table's first, then the oldest (at most three)."""
    row = conn.execute(
        queries.query("lock_holders"), {"table_oid": table_oid, "since": since}
    ).fetchone()
    return row["holders"] if row else None


def waiting_for(conn: psycopg.Connection[Any], pid: int) -> tuple[str | None, str | None]:
    """(who blocks backend ``pid`` now, its index build's phase when that is a wait)."""
    row = conn.execute(queries.query("waiting_for"), {"pid": pid}).fetchone()
    if row is None:
        return None, None
    phase = row["phase"] if row["phase"] and "waiting" in row["phase"] else None
    return row["blockers"], phase


@contextlib.contextmanager
def watching(
    settings: db.Settings,
    pid: int,
    report: Callable[[str | None, str | None, float], None],
    *,
    interval: float = 0.25,
) -> Iterator[None]:
    """While the body runs, poll from a second connection what backend ``pid`` waits for and
    call ``report(blocker, phase, seconds elapsed)`` whenever it waits on someone. Without a
    second connection (e.g. max_connections reached) the body runs unwatched."""
    from jobctl import db

    stop = threading.Event()
    started = time.monotonic()

    def poll() -> None:
        try:
            with db.connect(settings) as conn:
                while not stop.wait(interval):
                    with db.transaction(conn, settings, read_only=True):
                        blocker, phase = waiting_for(conn, pid)
                    if blocker or phase:
                        report(blocker, phase, time.monotonic() - started)
        except Exception:  # the watcher is advisory: never fail the step because of it
            return

    thread = threading.Thread(target=poll, name="jobctl-lock-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)

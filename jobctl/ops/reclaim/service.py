"""The reclaimer service (``jobctl reclaim --commit --yes --every D``): reclaim, sleep, repeat.

It outlives database restarts and killed backends (reconnecting with backoff) and stops
cleanly on SIGTERM or SIGINT, after the batch in hand. Several may run at once: SKIP LOCKED
and the attempt-token fence keep them from ever reclaiming one lease twice.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import functools
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING

import psycopg

from jobctl import db, durations, errors
from jobctl.contract.shapes import ReclaimRow
from jobctl.db import session
from jobctl.ops import pause, standby, triage
from jobctl.ops.reclaim import batches as reclaim_batches
from jobctl.ops.reclaim import row_errors
from jobctl.ops.reclaim.tally import Tally
from jobctl.ops.slices import EVERY
from jobctl.ops.triage import ExpiredFilter
from jobctl.render import reclaim_lines

if TYPE_CHECKING:
    from jobctl.ops.notify import Watch

MAX_BACKOFF_S = 30.0


def run(
    settings: db.Settings,
    which: ExpiredFilter,
    *,
    batch_size: int,
    every: dt.timedelta,
    on_batch: Callable[[list[ReclaimRow]], None],
    log: Callable[[str], None],
    watch: Watch | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT: each batch that applied rows goes to ``on_batch``
    (its applied rows only), and a summary line and every incident to ``log``; ``watch``:
    what to notify (``ops.notify``), told of every batch, pass, loss and stop."""
    stop = _stopped_by_signals(log)
    log(f"reclaimer: every {every.total_seconds():g}s, batch {batch_size}, table {settings.table}")
    batches = serve(
        settings, which, batch_size=batch_size, every=every, stop=stop, log=log, watch=watch
    )
    try:
        for batch, park_status in batches:
            applied = [row for row in batch if row["applied"]]
            on_batch(applied)
            log(reclaim_lines.summary_line(Tally.of(applied).counts, True, park_status=park_status))
    except errors.JobctlError as exc:
        if watch is not None:
            watch.stopped(db.redact(exc.message, settings.dsn))
        raise
    log("reclaimer: stopped")


def run_many(
    targets: Sequence[tuple[str, db.Settings]],
    which: ExpiredFilter,
    *,
    batch_size: int,
    every: dt.timedelta,
    on_batch: Callable[[str, list[ReclaimRow]], None],
    log: Callable[[str], None],
) -> list[str]:
    """Serve several targets from one process until SIGTERM or SIGINT: a thread each, with
    its own connection and backoff (``serve``), so one target down never stops the others.
    Each batch goes to ``on_batch`` with its target's name, one at a time; each line logged
    names its target. The names of the targets whose service stopped on an error (one it
    does not retry: a missing table, a bad DSN) are returned."""
    stop = _stopped_by_signals(log)
    names = ", ".join(name for name, _ in targets)
    log(f"reclaimer: every {every.total_seconds():g}s, batch {batch_size}, targets {names}")
    handing = threading.Lock()  # one batch printed at a time
    speaking = threading.Lock()  # one log line at a time: never two spliced on stderr
    failed: list[str] = []

    def one(name: str, settings: db.Settings) -> None:
        def said(line: str) -> None:
            with speaking:
                log(f"target {name}: {line}")

        try:
            for batch, park_status in serve(
                settings, which, batch_size=batch_size, every=every, stop=stop, log=said
            ):
                applied = [row for row in batch if row["applied"]]
                counts = Tally.of(applied).counts
                line = reclaim_lines.summary_line(counts, True, park_status=park_status)
                with handing:
                    on_batch(name, applied)
                    said(line)
        except errors.JobctlError as exc:
            said(f"reclaimer: stopped: {db.redact(exc.message, settings.dsn)}")
            failed.append(name)
        except Exception as exc:  # a closed stdout, a bug: this target stops, said, exit 1
            message = db.redact(f"{type(exc).__name__}: {exc}", settings.dsn)
            said(f"reclaimer: stopped: {message}")
            failed.append(name)

    threads = [
        threading.Thread(target=one, args=target, name=f"jobctl-reclaimer-{target[0]}", daemon=True)
        for target in targets
    ]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):  # the main thread takes the signals
        for thread in threads:
            thread.join(0.2)
    log("reclaimer: stopped")
    return failed


def _stopped_by_signals(log: Callable[[str], None]) -> threading.Event:
    """An event SIGTERM and SIGINT set: the service stops after the batch in hand."""
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log(f"reclaimer: {signal.Signals(signum).name}, stopping after the current batch")
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop


def serve(
    settings: db.Settings,
    which: ExpiredFilter,
    *,
    batch_size: int,
    every: dt.timedelta,
    stop: threading.Event,
    log: Callable[[str], None],
    max_backoff_s: float = MAX_BACKOFF_S,
    watch: Watch | None = None,
    passed_over: row_errors.PassedOver | None = None,
) -> Iterator[tuple[list[ReclaimRow], str | None]]:
    """The permanent reclaimer: reclaim, sleep ``every``, repeat until ``stop`` is set. Each
    batch that applied rows comes with the table's park status (schema apply --park-status).
    The jobs whose update raised, or that a trigger or lock held past the statement_timeout,
    are passed over for a while (``passed_over``: 10 minutes each, 10,000 at most), then
    tried again.

    A lost connection (database restart, killed backend) is logged in one line and retried
    with exponential backoff; several reclaimers at once are safe (SKIP LOCKED + the fence).
    """
    current: session.Session | None = None
    backoff = 0.5
    connections = 0
    told: set[str] = set()  # the jobs left for a human already named (lease times unusable)
    # the jobs whose update raised or was held: passed over for a while, then tried again
    left = passed_over if passed_over is not None else row_errors.PassedOver()
    pass_counts: collections.Counter[str] = collections.Counter()  # this pass: requeue, fail
    recorded: bool | None = None  # the pass record works (None: not tried yet)
    while not stop.is_set():
        done = 0  # jobs reclaimed in this pass, for the line if the server is lost
        try:
            with db.mapped_errors(settings.resolved_dsn()):
                if current is None or current.conn.closed:
                    current = _connected(settings, connections, which, log)
                    connections += 1
                # the rows whose update raised in an earlier pass are passed over: named
                # once, tried again only once their time is up (no retry loop on one row)
                excluded = left.ids()
                this_pass = dataclasses.replace(which, exclude=excluded) if excluded else which
                for batch in reclaim_batches.commit(
                    current, this_pass, batch_size=batch_size, limit=None, stop=stop
                ):
                    applied = _counted(batch, told, left, pass_counts, log)
                    if applied:
                        done += len(applied)
                        if watch is not None:  # only queued: a webhook never delays this
                            watch.reclaimed(applied, current.table.mapping.named_park)
                        yield batch, current.table.mapping.named_park
                recorded = _record_pass(current, settings, every, pass_counts, recorded, log, watch)
                pass_counts.clear()
                if watch is not None:
                    watch.pass_done(
                        review=_review_count(current),
                        pauses=functools.partial(pause.waiting, current),
                    )
            backoff = 0.5
            _wait(stop, every.total_seconds(), watch)
        except (
            errors.ConnectError,
            errors.DatabaseError,
            errors.StatementTimeout,
            errors.LockTimeout,
        ) as exc:
            _say_lost(exc, done, backoff, settings, log, watch)
            if current is not None:
                current.conn.close()
                current = None
            _wait(stop, backoff, watch)
            backoff = min(backoff * 2, max_backoff_s)
    if current is not None:
        current.conn.close()


def _wait(stop: threading.Event, seconds: float, watch: Watch | None) -> None:
    """Waits ``seconds`` (less if ``stop`` is set), telling the watch's conditions that come
    due meanwhile (a database down for --notify-after is told then, not at the next retry,
    up to 30 s later)."""
    end = time.monotonic() + seconds
    while not stop.is_set():
        left = end - time.monotonic()
        if left <= 0:
            return
        due = watch.due_in() if watch is not None else None
        if watch is None or due is None or due >= left:
            stop.wait(left)
            return
        stop.wait(due)
        watch.tick()


def _connected(
    settings: db.Settings, connections: int, which: ExpiredFilter, log: Callable[[str], None]
) -> session.Session:
    """The service's session, (re)connected; a filter the table cannot take: exit 2, once."""
    current = _connect(settings, connections, log)
    try:
        which.check(current.table.mapping)  # --kind unmapped
    except errors.UsageError:
        current.conn.close()
        raise
    return current


def _counted(
    batch: list[ReclaimRow],
    told: set[str],
    left: row_errors.PassedOver,
    pass_counts: collections.Counter[str],
    log: Callable[[str], None],
) -> list[ReclaimRow]:
    """A batch's applied rows, counted into the pass; the jobs it left for a human named, and
    those whose update raised passed over (``left``)."""
    _tell_poisoned(batch, told, left, log)
    left.add(str(row["id"]) for row in batch if row_errors.raised(row))
    applied = [row for row in batch if row["applied"]]
    pass_counts.update(Tally.of(applied).counts)
    return applied


def _say_lost(
    exc: errors.JobctlError,
    done: int,
    backoff: float,
    settings: db.Settings,
    log: Callable[[str], None],
    watch: Watch | None,
) -> None:
    """The one line of a lost connection (or a failed pass), and the watch told."""
    lost = ""
    if isinstance(exc, errors.ConnectError) and done:
        lost = f" ({done} job(s) reclaimed and committed this pass before the loss)"
    log(f"reclaimer: {exc.message}{lost}; retrying in {backoff:.1f}s")
    if watch is not None:
        watch.down_seen(db.redact(exc.message, settings.dsn))


def _record_pass(
    s: session.Session,
    settings: db.Settings,
    every: dt.timedelta,
    counts: collections.Counter[str],
    recorded: bool | None,
    log: Callable[[str], None],
    watch: Watch | None = None,
) -> bool:
    """The pass recorded in jobctl.reclaimer_passes (the heartbeat metrics and summary
    read); a database without it (migration 006) or a role without its grant: said once,
    and the service goes on (the record is for watching it, never a reason to stop)."""
    if recorded is False:
        return False
    sent, failed = watch.delivery() if watch is not None else (0, 0)
    params = {
        "sent": sent,
        "failed": failed,
        "job_table": s.table.qualified,
        "reclaimer": settings.actor,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "every_s": every.total_seconds(),
        "requeued": counts["requeue"],
        "parked": counts["fail"],
    }
    try:
        with s.transaction():
            s.run("record_reclaimer_pass", params)
        return True
    except (psycopg.errors.UndefinedTable, psycopg.errors.InsufficientPrivilege) as exc:
        why = " ".join(str(exc).split())
        log(
            f"reclaimer: its passes are not recorded ({why}): metrics and summary "
            "cannot tell it runs; schema apply (history 006) and schema grants --operator fix it"
        )
        return False


def _review_count(s: session.Session) -> Callable[[], int]:
    """How many jobs wait for a human (what ``review`` lists), read when called."""

    def count() -> int:
        with s.transaction(read_only=True):
            return int(s.one("review_count", EVERY.params())["awaiting_review"])

    return count


def _tell_poisoned(
    batch: list[ReclaimRow],
    told: set[str],
    left: row_errors.PassedOver,
    log: Callable[[str], None],
) -> None:
    """One line for each job of ``batch`` whose lease times reclaim cannot use (once per job
    while the service runs), or whose update the database refused or held (a trigger, a
    constraint, a lock: the service then passes it over for a while, ``left``, and names it
    again if it is skipped again once tried again); it goes on with the others."""
    for row in batch:
        skipped = row.get("skipped") or ""
        if row_errors.raised(row):
            if str(row["id"]) not in left:
                log(
                    f"reclaimer: job {row['id']}: {skipped} (passed over for "
                    f"{durations.show(left.for_)}, then tried again; jobctl reclaim --commit "
                    f"--id {row['id']} tries it now)"
                )
        elif skipped.startswith(triage.POISONED) and str(row["id"]) not in told:
            told.add(str(row["id"]))
            log(f"reclaimer: job {row['id']}: {skipped}")


def _connect(
    settings: db.Settings, connections: int, log: Callable[[str], None]
) -> session.Session:
    """A session on a primary, logged with the server it reached; a standby (a multi-host DSN
    without target_session_attrs=read-write, or one not yet promoted) is refused, retried."""
    current = session.connect(settings)
    try:
        st = standby.probe(current.conn)
        if st.standby:
            raise errors.ConnectError(standby.refusal(st, "the reclaimer"))
    except BaseException:
        current.conn.close()
        raise
    log(f"reclaimer: {'reconnected' if connections else 'connected'} to {st.where} ({st.role})")
    return current

"""Reclaim's batches: the lease design's statement in fenced batches, each its own short
transaction (a batch a row failed, again row by row); a dry run that shares its SQL, whole or
streamed; a reviewed plan's rows applied exactly as reviewed (what they did is counted by
``tally``)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import psycopg

from jobctl import db, errors
from jobctl.contract.shapes import ReclaimRow, Row
from jobctl.db.session import STREAM_CHUNK, Session
from jobctl.ops import plans
from jobctl.ops.reclaim import row_errors, tally
from jobctl.ops.reclaim.plans import PLAN_COLUMNS, PLAN_FORMAT
from jobctl.ops.triage import POISONED, ExpiredFilter, stuck
from jobctl.schema import reclaimer as schema_reclaimer
from jobctl.table import column_types

if TYPE_CHECKING:
    from jobctl.ops.reclaim.request import Request

REFUND_REASON = "attempt refunded (--refund-attempt): the worker was killed, not the job"
MOVED_RETRIES = 20  # a batch read again after rows moved partitions under it, at most


def committed(
    s: Session, request: Request, planned: list[Row] | None
) -> Iterator[list[ReclaimRow]]:
    """A commit's batches: a reviewed plan's rows (``planned``, fenced on what was reviewed),
    else the expired leases ``request.expired`` selects — one database's, or one target's of
    several."""
    if planned is not None:
        return commit_plan(s, planned, batch_size=request.batch_size, how=request.expired)
    return commit(
        s,
        request.expired,
        batch_size=request.batch_size,
        limit=request.limit,
        whole=request.whole,
    )


# ---------------------------------------------------------------- dry run and commit
def dry_run(s: Session, which: ExpiredFilter, limit: int | None) -> list[ReclaimRow]:
    """What a commit would do now, changing nothing (read-only transaction).

    It is the commit's own candidate set and decision (one SQL text, see queries.sql); rows
    another session holds locked are marked ``skipped``: SKIP LOCKED would pass them by.
    """
    with s.transaction(read_only=True):
        return list(preview(s, which, limit))


def streamed_dry_run(
    s: Session, which: ExpiredFilter, limit: int | None, save_plan: Path | None = None
) -> Iterator[list[ReclaimRow]]:
    """The dry run a chunk of rows at a time, as a server-side cursor gives them, in one
    read-only transaction held while the caller drains it: memory stays flat however many
    rows expired. With ``save_plan``, each chunk is written to the plan as it comes; the plan
    lands (atomically, as ``save_plan`` writes it) once the last row is in, and not at all if
    the dry run stops before."""
    with contextlib.ExitStack() as stack:
        write = None
        if save_plan is not None:
            write = stack.enter_context(plans.writing_rows(save_plan, PLAN_FORMAT, s.origin()))
        stack.enter_context(s.transaction(read_only=True))
        chunk: list[ReclaimRow] = []
        for row in preview(s, which, limit):
            chunk.append(row)
            if len(chunk) == STREAM_CHUNK:
                if write is not None:
                    write(chunk)
                yield chunk
                chunk = []
        if write is not None:
            write(chunk)
        if chunk:
            yield chunk


def preview(s: Session, which: ExpiredFilter, limit: int | None) -> Iterator[ReclaimRow]:
    """The dry run's rows, streamed; the caller holds a read-only transaction."""
    for row in stuck(s, which, limit, no_lease=False):  # reclaim never touches those
        yield cast(ReclaimRow, {**row, "applied": False})


def commit(
    s: Session,
    which: ExpiredFilter,
    *,
    batch_size: int,
    limit: int | None,
    stop: threading.Event | None = None,
    whole: int | None = None,
) -> Iterator[list[ReclaimRow]]:
    """Reclaim in batches, each its own short transaction (BEGIN, the transaction-local
    timeouts, the statement, COMMIT: one round trip); yields each batch's rows (past the
    first ``whole`` rows, each with its id and action alone: ``Request.whole``).

    Ends when no unlocked expired row is left, ``limit`` rows were handled or ``stop`` is set;
    then yields, once, the expired rows it left (locked by another session), unapplied.
    """
    handled = 0
    poisoned: list[Any] = []  # rows whose update raises (a trigger, a constraint): left behind
    # rows a row-by-row pass found nothing to do for (locked by another session, or no longer
    # expired): passed over after, as SKIP LOCKED passes over a locked row in a batch
    passed: list[Any] = []
    moved = 0  # batches that met a row moved to another partition, in a row
    in_flight = _InFlight()
    kept_back: list[Any] = []  # rows an application's trigger kept back or changed back
    while limit is None or handled < limit:
        passed_over = [*(which.exclude or ()), *poisoned, *passed, *kept_back]
        current = dataclasses.replace(which, exclude=passed_over) if passed_over else which
        left = None if limit is None else limit - handled
        try:
            for rows in _batches(s, current, batch_size, left, stop, whole, in_flight, kept_back):
                moved = 0
                handled += len(rows)
                yield rows
            break  # a batch came back short, or the limit or stop ended them
        except psycopg.errors.SerializationFailure as exc:
            moved = _read_again(exc, moved)
            continue
        except psycopg.DatabaseError as exc:
            # a row's error, or the server's timeout while a row held the batch (a trigger
            # asleep, a lock it waits for); a cancel request, jobctl's own or anyone's, ends it
            if not (
                row_errors.isolated(exc) or row_errors.held(exc, in_flight.elapsed(), s.settings)
            ):
                raise
        # one row failed the whole batch: apply it row by row so only that row stays behind
        size = batch_size if limit is None else min(batch_size, limit - handled)
        rows, failed, untouched = _row_by_row(s, current, size)
        poisoned.extend(row["id"] for row in failed)
        passed.extend(untouched)
        handled += len(rows)
        if rows or failed:
            yield rows + failed
        # the expired rows end when the pass saw fewer than a batch, not when fewer were
        # applied (a locked row comes back with nothing); every pass adds what it saw to the
        # rows passed over, so the next batch reads on past them
        if len(rows) + len(failed) + len(untouched) < size or (stop and stop.is_set()):
            break
    if which.plan is None and (limit is None or handled < limit):
        left_locked = _left_locked(s, which, None if limit is None else limit - handled)
        if left_locked:
            yield left_locked


def _read_again(exc: psycopg.errors.SerializationFailure, moved: int) -> int:
    """A table partitioned by status: a worker's transition moved a row to another partition
    between a batch's snapshot and its lock (SQLSTATE 40001). Nothing of the batch was
    applied; the row changed, so the batch is read again (it no longer qualifies): the count
    of such batches in a row, one more. Many in a row: not a race but the statement's own
    error, raised."""
    if not db.moved_to_another_partition(exc) or moved >= MOVED_RETRIES:
        raise exc
    return moved + 1


@dataclasses.dataclass
class _InFlight:
    """When the batch in flight was sent (``time.monotonic``): a batch the server cancelled
    at least its statement_timeout after is one a row held (``row_errors.held``)."""

    at: float = 0.0

    def sent(self) -> None:
        self.at = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.at


def _left_locked(s: Session, which: ExpiredFilter, limit: int | None) -> list[ReclaimRow]:
    """The expired rows a commit passed by, locked by another session (read-only, streamed:
    only the locked rows are kept)."""
    with s.transaction(read_only=True):
        return [row for row in preview(s, which, limit) if row["skipped"]]


def _batches(
    s: Session,
    which: ExpiredFilter,
    batch_size: int,
    left: int | None,
    stop: threading.Event | None,
    whole: int | None = None,
    in_flight: _InFlight | None = None,
    kept_back: list[Any] | None = None,
) -> Iterator[list[ReclaimRow]]:
    """Batches of the reclaim while each comes back full and ``left`` (None: no limit) allows;
    once ``whole`` rows came back whole, the next return each row's id and action alone.

    Each batch is sent as soon as the one before has committed, before that one's rows are
    read and handed on: the server runs it meanwhile. With ``stop`` (the service), the next
    batch is sent only once the caller is done with the last and ``stop`` is not set: the
    service stops after the batch in hand. A batch's error is raised from it (nothing of that
    batch applied; the batches before stay committed, and were yielded); ``in_flight`` says
    when the batch that raised it was sent. Each row is judged by what was written
    (``tally.as_written``); the ids of those an application's trigger kept back or changed
    back go to ``kept_back`` and the next batches pass them over (they are still expired).
    """
    statement = _statement(s, which)
    params = statement.params
    clock = in_flight or _InFlight()
    kept = kept_back if kept_back is not None else []
    excluded = list(params.get("exclude") or [])

    def size_after(done: int) -> int:
        return batch_size if left is None else min(batch_size, left - done)

    def returned(done: int) -> dict[str, Any]:  # the statement's own RETURNING, or fewer
        if whole is None or done < whole:
            return {}
        return {"reclaim_returned": s.query("reclaim_counted")}

    done = 0
    with s.sending(
        statement.name,
        action=statement.action,
        reason=statement.reason,
        **statement.fragments,
    ) as sending:

        def send(params: dict[str, Any], **text: Any) -> db.Sent:
            clock.sent()
            if kept:  # passed over from now, as the rows the caller excludes
                params = {**params, "exclude": [*excluded, *(str(k) for k in kept)]}
            return sending(params, **text)

        size = size_after(0)
        sent: db.Sent | None = send({**params, "limit": size}, **returned(0))
        while sent is not None:
            count = sent.count()
            done += count
            full = count == size and (left is None or done < left)
            size = size_after(done)
            rows = _as_written(s, sent.rows())
            kept.extend(row["id"] for row in rows if row["skipped"])
            try:
                after = (
                    send({**params, "limit": size}, **returned(done))
                    if full and stop is None
                    else None
                )
            except psycopg.Error:
                # the next batch's error can come back while it is being sent (the pipeline
                # reads what the server has answered): this batch committed, so its rows are
                # handed on before the error goes up
                if rows:
                    yield rows
                raise
            if rows:
                yield rows
            if full and stop is not None and not stop.is_set():
                after = send({**params, "limit": size}, **returned(done))
            sent = after


@dataclasses.dataclass(frozen=True)
class _Statement:
    """The reclaim statement for one filter: its name, its parameters (but its limit), the
    action and reason the history records, its fragments (--spread, --refund-attempt)."""

    name: str
    params: dict[str, Any]
    action: str
    reason: str | None
    fragments: dict[str, Any]


def _statement(s: Session, which: ExpiredFilter) -> _Statement:
    """The reclaim statement ``which`` asks for."""
    fragments: dict[str, Any] = {}
    if which.spread:  # the returns paced over the spread (reclaim_paced)
        from psycopg import sql

        fragments |= {
            "paced": s.query("reclaim_paced"),
            "paced_join": s.query("reclaim_paced_join"),
            "returns_at": column_types.written(
                s.table.types.get("available_at"),
                s.table.mapping.zone,
                sql.SQL("paced.available_at"),
            ),
        }
    if which.refund_attempt:  # recorded in the history with the reason (--refund-attempt)
        fragments["refund_set"] = s.query("refund_attempt")
    call = schema_reclaimer.call(s)
    if call is not None:  # the reclaimer role: the table's function, reclaim_batch as installed
        if fragments or which.park_older_than is not None:
            raise errors.NothingDone(
                "the reclaimer role reclaims as its function does: no --spread, "
                "--refund-attempt or --park-older-than (jobctl's operator role takes them)"
            )
        return _Statement("reclaimer_call", which.params(), "reclaimed", None, call)
    # the action declared: the history then knows jobctl_action='reclaimed' is this write's
    return _Statement(
        "reclaim_batch",
        which.params(),
        action="reclaimed",
        reason=REFUND_REASON if which.refund_attempt else None,
        fragments=fragments,
    )


def _batch(s: Session, which: ExpiredFilter, size: int) -> list[ReclaimRow]:
    """One batch of the lease design's reclaim in its own short transaction, its timeouts
    transaction-local, sent in one round trip (no session state: pooler-safe)."""
    statement = _statement(s, which)
    rows = s.pipelined(
        statement.name,
        {**statement.params, "limit": size},
        action=statement.action,
        reason=statement.reason,
        **statement.fragments,
    )
    return _as_written(s, rows)


def _as_written(s: Session, rows: list[dict[str, Any]]) -> list[ReclaimRow]:
    """The rows a batch locked, each judged by what it wrote (``tally.as_written``)."""
    return [tally.as_written(row, s.table.mapping) for row in rows]


def _row_by_row(
    s: Session, which: ExpiredFilter, size: int
) -> tuple[list[ReclaimRow], list[ReclaimRow], list[Any]]:
    """A failed batch again, one row per transaction: (applied rows, rows that raised, the
    ids of rows that came back with nothing: locked by another session, or changed since the
    dry run). A row that deadlocks or fails to serialize is tried row_errors.RETRIES times
    more, then skipped; any other row error skips it at once (``row_errors.isolated``), and
    so does a row the server cancelled after its own timeout in its own transaction (a
    trigger or lock held it: ``row_errors.held``), and a row an application's trigger kept
    back or changed, which the statement refused (``row_errors.not_as_meant``: its own
    transaction rolled back, nothing of it written or recorded), skipped saying what the
    trigger did (``tally.as_written``). Each row is tried in this pass only: the caller
    passes over the skipped ones after."""
    applied: list[ReclaimRow] = []
    failed: list[ReclaimRow] = []
    untouched: list[Any] = []
    for candidate in dry_run(s, which, size):
        one = dataclasses.replace(which, ids=[candidate["id"]])
        for tries in range(1, row_errors.RETRIES + 2):
            started = time.monotonic()
            try:
                done = _batch(s, one, 1)
                applied += [row for row in done if not row["skipped"]]
                failed += [row for row in done if row["skipped"]]  # a trigger kept it back
                if not done:
                    untouched.append(candidate["id"])
                break
            except psycopg.DatabaseError as exc:
                if row_errors.held(exc, time.monotonic() - started, s.settings):
                    failed.append(
                        {**candidate, "skipped": row_errors.held_skipped(exc, s.settings)}
                    )
                    break
                written = row_errors.not_as_meant(exc)
                if written is not None:
                    refused = tally.as_written({**candidate, **written}, s.table.mapping)
                    if refused["skipped"] is None:  # the DETAIL says as meant: not jobctl's
                        refused = {**refused, "skipped": row_errors.skipped(exc, tries)}
                    failed.append({**refused, "applied": False})
                    break
                if not row_errors.isolated(exc):
                    raise
                if row_errors.transient(exc) and tries <= row_errors.RETRIES:
                    continue
                failed.append({**candidate, "skipped": row_errors.skipped(exc, tries)})
                break
    if failed and not applied:
        _statement_fails(s, which)  # every row failed: perhaps the statement itself
    return applied, failed, untouched


def _statement_fails(s: Session, which: ExpiredFilter) -> None:
    """The reclaim statement run on no row at all (LIMIT 0): what it raises then is the
    statement's (a privilege missing, a statement-level trigger, a table lock), not a
    row's; raised. Rows that each raised on their own pass: they are skipped."""
    _batch(s, which, 0)


# ---------------------------------------------------------------- plans
def commit_plan(
    s: Session,
    plan_rows: list[Row],
    *,
    batch_size: int,
    how: ExpiredFilter | None = None,
) -> Iterator[list[ReclaimRow]]:
    """Apply only the planned rows, each exactly as reviewed; the others come back unapplied.

    Exactly as reviewed: same attempt token, same lease_expires_at (a heartbeat since the
    review, even one whose lease ran out again, skips it), still processing, still expired,
    same decision. Each batch is the reclaim statement itself, narrowed by the plan.
    """
    for start in range(0, len(plan_rows), batch_size):
        chunk = plan_rows[start : start + batch_size]
        reviewed = [{k: r[k] for k in PLAN_COLUMNS} for r in chunk]
        # how the rows return (--spread, --refund-attempt, --park-older-than): the request's
        which = dataclasses.replace(
            how or ExpiredFilter(), ids=[r["id"] for r in chunk], plan=db.json_parameter(reviewed)
        )
        applied = [
            row
            for batch in commit(s, which, batch_size=len(chunk), limit=len(chunk))
            for row in batch
        ]
        done = {str(row["id"]) for row in applied}
        missed = [r for r in chunk if str(r["id"]) not in done]
        order = {str(r["id"]): n for n, r in enumerate(chunk)}  # the plan's order, as reviewed
        batch = applied + _why_not_applied(s, missed, which)
        yield sorted(batch, key=lambda row: order.get(str(row["id"]), len(order)))


def _why_not_applied(s: Session, missed: list[Row], which: ExpiredFilter) -> list[ReclaimRow]:
    if not missed:
        return []
    with s.transaction(read_only=True):
        ids = [str(r["id"]) for r in missed]
        state = {"ids": ids, "park_older_than": which.park_older_than}
        now = {str(r["id"]): r for r in s.rows("plan_row_state", state)}
    told = which.told()  # a planned id two rows hold now: left out (not applied), named once
    repeated = {i for i, r in now.items() if told.took(r)}
    missed = [r for r in missed if str(r["id"]) not in repeated]
    processing = s.table.mapping.status("processing")
    return [
        cast(
            ReclaimRow,
            reviewed
            | {
                "applied": False,
                "skipped": _reason(reviewed, now.get(str(reviewed["id"])), processing),
            },
        )
        for reviewed in missed
    ]


def _timestamp(value: Any) -> object:
    return dt.datetime.fromisoformat(value) if isinstance(value, str) else value


def _reason(reviewed: Row, current: Row | None, processing: str = "processing") -> str:
    """Why a planned row was not applied (``processing``: the table's value for it)."""
    if current is None:
        return "job no longer exists"
    if current.get("poisoned") and current["status"] == processing:
        return f"{POISONED}: {current['poisoned']}; left for a human to fix"
    if current["status"] != processing:
        return f"now {current['status']} (completed, reclaimed or changed since the review)"
    if str(current["attempt_token"]) != str(reviewed["attempt_token"]):
        return "claimed again since the review (new attempt token)"
    if current["lease_expires_at"] != _timestamp(reviewed["lease_expires_at"]):
        return "heartbeat since the review (lease extended)"
    if not current["lease_expired"]:
        return "lease is live"
    if current["action"] != reviewed["action"]:
        return f"decision changed since the review: now {current['action']}"
    if current["locked_by"]:
        return f"locked by {current['locked_by']}"
    return "changed since the review"

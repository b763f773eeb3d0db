"""Reclaim: the seed's statement in fenced batches; a dry run that shares its SQL; plans."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

from jobctl import db, errors, output, queries, triage

Row = dict[str, Any]
PLAN_FORMAT = "jobctl-reclaim-plan/1"
MIN_BATCH, MAX_BATCH = 1, 10_000


def dry_run(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    table: db.JobsTable,
    where: triage.ExpiredFilter,
    limit: int | None,
) -> list[Row]:
    """What a commit would do now, changing nothing (read-only transaction).

    It is the commit's own candidate set and decision (one SQL text, see queries.sql); rows
    another session holds locked are marked ``skipped``: SKIP LOCKED would pass them by.
    """
    with db.transaction(conn, settings, read_only=True):
        return list(preview(conn, table, where, limit))


def preview(
    conn: psycopg.Connection[Any],
    table: db.JobsTable,
    where: triage.ExpiredFilter,
    limit: int | None,
) -> Iterator[Row]:
    """The dry run's rows, streamed; the caller holds a read-only transaction."""
    for row in triage.stuck(conn, table, where, limit):
        yield triage.note_locked(row) | {"applied": False}


def commit(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    table: db.JobsTable,
    where: triage.ExpiredFilter,
    *,
    batch_size: int,
    limit: int | None,
    stop: threading.Event | None = None,
) -> Iterator[list[Row]]:
    """Reclaim in batches, each its own short transaction (BEGIN, the transaction-local
    timeouts, the statement, COMMIT: one round trip); yields each batch's rows.

    Ends when no unlocked expired row is left, ``limit`` rows were handled or ``stop`` is set;
    then yields, once, the expired rows it left (locked by another session), unapplied.
    """
    handled = 0
    poisoned: list[int] = []  # rows whose update raises (a trigger, a constraint): left behind
    while limit is None or handled < limit:
        size = batch_size if limit is None else min(batch_size, limit - handled)
        current = dataclasses.replace(where, exclude=poisoned) if poisoned else where
        try:
            rows, failed = _batch(conn, settings, table, current, size), []
        except psycopg.DatabaseError as exc:
            if not _row_error(exc):
                raise
            # one row fails the whole batch: apply it row by row so only that row stays behind
            rows, failed = _row_by_row(conn, settings, table, current, size)
            poisoned.extend(row["id"] for row in failed)
        handled += len(rows)
        if rows or failed:
            yield rows + failed
        if len(rows) + len(failed) < size or (stop is not None and stop.is_set()):
            break
    if where.plan is None and (limit is None or handled < limit):
        left = [
            r
            for r in dry_run(
                conn, settings, table, where, None if limit is None else limit - handled
            )
            if r["skipped"]
        ]
        if left:
            yield left


def _row_error(exc: psycopg.DatabaseError) -> bool:
    """An error one row can cause: bad data (22), a constraint (23), a trigger's RAISE (P0).

    Anything else (a missing privilege, a lost connection, a timeout) is the statement's.
    """
    return (exc.sqlstate or "")[:2] in ("22", "23", "P0")


def _batch(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    table: db.JobsTable,
    where: triage.ExpiredFilter,
    size: int,
) -> list[Row]:
    """One batch of the lease design's reclaim in its own short transaction, its timeouts
    transaction-local, sent in one round trip (no session state: pooler-safe)."""
    statement = queries.query("reclaim_batch", table.ident)
    rows = db.pipelined(conn, settings, statement, {**where.params(), "limit": size})
    for row in rows:
        row["applied"], row["skipped"] = True, None
    return rows


def _row_by_row(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    table: db.JobsTable,
    where: triage.ExpiredFilter,
    size: int,
) -> tuple[list[Row], list[Row]]:
    """A failed batch again, one row per transaction: (applied rows, rows that raised)."""
    applied: list[Row] = []
    failed: list[Row] = []
    first_error: Exception | None = None
    for candidate in dry_run(conn, settings, table, where, size):
        try:
            one = dataclasses.replace(where, ids=[candidate["id"]])
            applied += _batch(conn, settings, table, one, 1)
        except psycopg.DatabaseError as exc:
            if not _row_error(exc):
                raise
            first_error = first_error or exc
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            failed.append(candidate | {"skipped": f"error: {message}"})
    if first_error is not None and not applied:
        raise first_error  # every row fails: not one poison row but the statement itself
    return applied, failed


# ---------------------------------------------------------------- plans
def save_plan(path: Path, location: dict[str, Any], rows: list[Row]) -> None:
    """Write the reviewed rows and where they were reviewed (no password) to ``path``."""
    plan = {
        "format": PLAN_FORMAT,
        "made_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "where": location,
        "rows": rows,
    }
    try:
        path.write_text(output.to_json(plan) + "\n", encoding="utf-8")
    except OSError as exc:
        raise errors.UsageError(f"cannot write plan {path}: {exc.strerror}") from None


def load_plan(path: Path, location: dict[str, Any]) -> list[Row]:
    """The reviewed rows of a plan; refused (exit 2) when made for another database or table."""
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise errors.UsageError(f"cannot read plan {path}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError):
        raise errors.UsageError(f"{path} is not a jobctl plan (not JSON)") from None
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
        raise errors.UsageError(f"{path} is not a jobctl plan ({PLAN_FORMAT})")
    made = plan.get("where") or {}
    for key in ("system_identifier", "database", "table"):
        if made.get(key) and location.get(key) and made[key] != location[key]:
            raise errors.Refused(
                f"plan {path} was made for {key} {made[key]!r}, this is {location[key]!r}: "
                "nothing done"
            )
    rows = plan.get("rows")
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and {"id", "attempt_token", "lease_expires_at", "action"} <= r.keys()
        for r in rows
    ):
        raise errors.UsageError(f"{path}: malformed plan rows")
    return rows


def commit_plan(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    table: db.JobsTable,
    plan_rows: list[Row],
    *,
    batch_size: int,
) -> Iterator[list[Row]]:
    """Apply only the planned rows, each exactly as reviewed; the others come back unapplied.

    Exactly as reviewed: same attempt token, same lease_expires_at (a heartbeat since the
    review, even one whose lease ran out again, skips it), still processing, still expired,
    same decision. Each batch is the reclaim statement itself, narrowed by the plan.
    """
    for start in range(0, len(plan_rows), batch_size):
        chunk = plan_rows[start : start + batch_size]
        reviewed = [
            {k: r[k] for k in ("id", "attempt_token", "lease_expires_at", "action")} for r in chunk
        ]
        where = triage.ExpiredFilter(
            ids=[int(r["id"]) for r in chunk], plan=output.to_json(reviewed)
        )
        applied = [
            row
            for batch in commit(
                conn, settings, table, where, batch_size=len(chunk), limit=len(chunk)
            )
            for row in batch
        ]
        done = {row["id"] for row in applied}
        missed = [r for r in chunk if r["id"] not in done]
        yield applied + _why_not_applied(conn, settings, table, missed)


def _why_not_applied(
    conn: psycopg.Connection[Any], settings: db.Settings, table: db.JobsTable, missed: list[Row]
) -> list[Row]:
    if not missed:
        return []
    with db.transaction(conn, settings, read_only=True):
        now = {
            r["id"]: r
            for r in conn.execute(
                queries.query("plan_row_state", table.ident), {"ids": [r["id"] for r in missed]}
            )
        }
    result = []
    for reviewed in missed:
        current = now.get(reviewed["id"])
        result.append(reviewed | {"applied": False, "skipped": _reason(reviewed, current)})
    return result


def _timestamp(value: Any) -> Any:
    return dt.datetime.fromisoformat(value) if isinstance(value, str) else value


def _reason(reviewed: Row, current: Row | None) -> str:
    if current is None:
        return "job no longer exists"
    if current["status"] != "processing":
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


# ---------------------------------------------------------------- service
def serve(
    settings: db.Settings,
    where: triage.ExpiredFilter,
    *,
    batch_size: int,
    every: dt.timedelta,
    stop: threading.Event,
    log: Callable[[str], None],
    max_backoff_s: float = 30.0,
) -> Iterator[list[Row]]:
    """The permanent reclaimer: reclaim, sleep ``every``, repeat until ``stop`` is set.

    A lost connection (database restart, killed backend) is logged in one line and retried
    with exponential backoff; several reclaimers at once are safe (SKIP LOCKED + the fence).
    """
    conn: psycopg.Connection[Any] | None = None
    backoff = 0.5
    while not stop.is_set():
        try:
            with db.mapped_errors(settings.resolved_dsn()):
                if conn is None or conn.closed:
                    conn = db.connect(settings)
                    table = db.resolve_table(conn, settings.table)
                for batch in commit(
                    conn, settings, table, where, batch_size=batch_size, limit=None, stop=stop
                ):
                    if any(row["applied"] for row in batch):
                        yield batch
            backoff = 0.5
            stop.wait(every.total_seconds())
        except (
            errors.ConnectError,
            errors.DatabaseError,
            errors.StatementTimeout,
            errors.LockTimeout,
        ) as exc:
            log(f"reclaimer: {exc.message}; retrying in {backoff:.1f}s")
            if conn is not None:
                conn.close()
                conn = None
            stop.wait(backoff)
            backoff = min(backoff * 2, max_backoff_s)
    if conn is not None:
        conn.close()

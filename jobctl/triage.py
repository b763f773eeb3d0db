"""The read path: stuck jobs, a summary, one job, its history. Read-only transactions only."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from jobctl import db, errors, queries
from jobctl import history as hist

Row = dict[str, Any]
HISTORY_EVENT_LIMIT = 10_000
STREAM_CHUNK = 2_000
EXACT_COUNT_LIMIT = 1_000_000
SHOW_EVENT_LIMIT = 10


@dataclasses.dataclass(frozen=True)
class ExpiredFilter:
    """Which expired leases an operator asks about. Values are always query parameters."""

    worker: str | None = None
    policy: str | None = None
    ids: Sequence[int] | None = None
    grace: dt.timedelta = dt.timedelta(0)
    plan: str | None = None  # JSON rows of a saved plan: only those, exactly as reviewed
    exclude: Sequence[int] | None = None  # rows a batch must pass over (they raised before)

    def params(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "policy": self.policy,
            "ids": list(self.ids) if self.ids else None,
            "grace": self.grace,
            "plan": self.plan,
            "exclude": list(self.exclude) if self.exclude else None,
        }


def stuck(
    conn: psycopg.Connection[Any], table: db.JobsTable, where: ExpiredFilter, limit: int | None
) -> Iterator[Row]:
    """Processing jobs whose lease expired, oldest expiry first, with reclaim's action.

    Rows another session holds locked (reclaim's SKIP LOCKED would pass them by) carry
    ``locked_by``, naming the session where the database can tell. Streamed through a
    server-side cursor (the caller holds the transaction), so memory stays flat.
    """
    yield from _stream(
        conn, queries.query("stuck", table.ident), {**where.params(), "limit": limit}
    )


def at_risk(
    conn: psycopg.Connection[Any],
    table: db.JobsTable,
    where: ExpiredFilter,
    window: dt.timedelta,
    limit: int | None,
) -> Iterator[Row]:
    """Expired leases plus live ones that expire within ``window``, oldest expiry first.

    Each row carries ``lease_state`` (expired, expiring) and ``worker_heartbeat_lag_s``: the
    time since its worker's latest sign of life on any job, so a dying worker shows before
    its leases run out.
    """
    params = {**where.params(), "window": window, "limit": limit}
    yield from _stream(conn, queries.query("at_risk", table.ident), params)


def note_locked(row: Row) -> Row:
    """Turn ``locked_by`` into ``skipped``: why reclaim's SKIP LOCKED would pass the row by."""
    locked_by = row.pop("locked_by")
    row["skipped"] = f"locked by {locked_by}" if locked_by else None
    return row


def _stream(conn: psycopg.Connection[Any], query: Any, params: dict[str, Any]) -> Iterator[Row]:
    """Rows through a server-side cursor, a chunk at a time (inside the caller's transaction)."""
    with conn.cursor(name="jobctl_stream") as cursor:
        cursor.itersize = STREAM_CHUNK
        cursor.execute(query, params)
        yield from cursor


def summary(
    conn: psycopg.Connection[Any],
    table: db.JobsTable,
    expiring_within: dt.timedelta,
    *,
    exact: bool = False,
) -> Row:
    """Counts by status, processing split by lease state, processing jobs per worker.

    On a table the planner believes holds EXACT_COUNT_LIMIT rows or more, finished jobs
    (done, failed) are estimated from the statistics instead of counted by a full scan;
    queued and processing are always counted. ``exact`` counts everything.
    """

    def rows(name: str, **params: Any) -> list[Row]:
        return conn.execute(queries.query(name, table.ident), params).fetchall()

    size = rows("table_size_estimate", oid=table.oid)[0]["estimate"]
    estimated: list[str] = []
    if exact or size < EXACT_COUNT_LIMIT:
        by_status = {r["status"]: r["jobs"] for r in rows("summary_status")}
    else:
        live = {r["status"]: r["jobs"] for r in rows("summary_status_live")}
        guess = {r["status"]: r["jobs"] for r in rows("summary_status_estimate", oid=table.oid)}
        estimated = sorted(set(guess) - set(live) | ({"done", "failed"} - set(live)))
        by_status = {s: guess.get(s, 0) for s in estimated} | live
    return {
        "table": table.qualified,
        "status": {s: by_status.get(s, 0) for s in ("queued", "processing", "done", "failed")}
        | by_status,
        "estimated": estimated,
        "processing": rows("summary_processing", soon=expiring_within)[0],
        "expiring_within_s": expiring_within.total_seconds(),
        "workers": rows("summary_workers", soon=expiring_within),
    }


def job(conn: psycopg.Connection[Any], table: db.JobsTable, job_id: int) -> Row:
    """One job: every column plus ``lease_state`` (live, expired, none); the history's own
    columns (``jobctl_*``, the live attempt's statistics) are left out."""
    return _public(_job_row(conn, table, job_id))


def _job_row(conn: psycopg.Connection[Any], table: db.JobsTable, job_id: int) -> Row:
    row = conn.execute(queries.query("job_row", table.ident), {"id": job_id}).fetchone()
    if row is None:
        raise errors.JobctlError(f"job {job_id} not found in {table.qualified}")
    row.pop("row_version", None)
    return row


def _public(row: Row) -> Row:
    return {k: v for k, v in row.items() if not k.startswith("jobctl_")}


def _attempts_and_events(
    conn: psycopg.Connection[Any], table: db.JobsTable, the_job: Row, limit: int
) -> tuple[list[Row], list[Row]]:
    """The job's attempts (ended ones stored, the live one from its row) and its latest
    ``limit`` events (stored ones, claims and completions derived from the attempts)."""
    params = {"job_table": table.qualified, "id": the_job["id"]}
    mode = hist.table_state(conn, table.oid).mode
    stored = conn.execute(queries.query("job_attempts", table.ident), params).fetchall()
    attempts = hist.merge(stored, hist.live_attempt(the_job, mode))
    stored_events = conn.execute(
        queries.query("job_events", table.ident), params | {"limit": limit}
    ).fetchall()
    return attempts, hist.events(stored_events, attempts, limit)


def show(conn: psycopg.Connection[Any], table: db.JobsTable, job_id: int) -> Row:
    """The job row, its lease state and its latest events."""
    row = _job_row(conn, table, job_id)
    _, latest = _attempts_and_events(conn, table, row, SHOW_EVENT_LIMIT)
    return _public(row) | {"events": latest}


def history(conn: psycopg.Connection[Any], table: db.JobsTable, job_id: int) -> Row:
    """The job, its attempts (heartbeat history) and its events (reclaim history)."""
    row = _job_row(conn, table, job_id)
    attempts, all_events = _attempts_and_events(conn, table, row, HISTORY_EVENT_LIMIT)
    return {"job": _public(row), "attempts": attempts, "events": all_events}

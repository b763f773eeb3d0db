"""The worker side of the lease protocol: the lease design's claim, heartbeat, complete and fail.

Every statement after the claim is fenced by the attempt token, and each runs in autocommit
(a heartbeat inside a long transaction would write a stale ``now()``). By default no statement
is prepared and nothing is set on the session, so the connection may come from a pooler in
transaction mode (PgBouncer)::

    from jobctl import lease

    worker = lease.Worker(conn, worker_id="billing-7", lease_seconds=30)
    job = worker.claim()
    if job:
        ...                        # do the work, calling worker.heartbeat(job) every ~10 s
        worker.complete(job)       # raises lease.LeaseLost if the job was reclaimed meanwhile

``heartbeat`` raises ``LeaseLost`` when the attempt was taken back (reclaimed, or cancelled
by ``jobctl cancel``): the worker must stop the work there. That is the whole of cancellation:
jobctl cannot stop a worker, it takes the lease, and the fence refuses the late writes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

from jobctl import db
from jobctl.sql import queries


class LeaseLost(Exception):
    """The attempt token no longer holds the job: the attempt was taken back (reclaimed after
    its lease ran out, cancelled by an operator with jobctl cancel, requeued or failed by
    hand). Stop the work: its result must not be recorded, and the fence refuses it anyway.
    Cancellation is cooperative: this exception, at the next heartbeat, is how it arrives."""

    def __init__(self, job: Claim, operation: str) -> None:
        super().__init__(
            f"{operation}: job {job.id} is no longer held by attempt {job.attempt_token}: "
            "the attempt was taken back (reclaimed, or cancelled, requeued or failed by an "
            "operator); stop the work, its result will not be recorded"
        )
        self.job = job
        self.operation = operation


MOVED_RETRIES = 10  # claims tried again after the row moved partitions under them, at most
# how old the table's pauses a Worker claims by may be, at most: it reads them again after
# this long (jobctl pause returns only once this has passed, so that when it says the kind
# is paused no Worker claims it); between reads its claim is given them as a parameter (no
# read of jobctl.pauses per claim)
PAUSES_READ_EVERY = 1.0


@dataclasses.dataclass(frozen=True)
class Claim:
    """A claimed job: its id, this attempt's token and number, the lease's current expiry."""

    id: Any  # in the id column's type: int, UUID, str
    attempt_token: uuid.UUID
    attempt: int
    lease_expires_at: dt.datetime


class Worker:
    """One worker's side of the protocol on an autocommit connection.

    ``prepare=False`` (the default) never prepares a statement, so the connection may come
    from a pooler in transaction mode; ``prepare=True`` lets psycopg prepare as the
    connection's ``prepare_threshold`` says: about a fifth less time per cycle measured on a
    direct connection, for direct connections and PgBouncer 1.21+ with max_prepared_statements.
    """

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        worker_id: str,
        *,
        lease_seconds: float = 30.0,
        table: str | sql.Identifier = "jobs",
        prepare: bool = False,
    ) -> None:
        if not conn.autocommit:
            raise ValueError(
                "lease.Worker needs an autocommit connection: each statement "
                "must commit at once, with a fresh now()"
            )
        self.conn = conn
        self.worker_id = worker_id
        self.lease = dt.timedelta(seconds=lease_seconds)
        self.prepare: bool | None = None if prepare else False  # None: the connection decides
        name = table.as_string(conn) if isinstance(table, sql.Identifier) else table
        # the table's own names and types, as schema apply recorded them (jobctl.tables)
        self.table = db.resolve_table(conn, name, as_worker=True)
        self._statements: dict[str, sql.Composed] = {}
        # the table's pauses as last read (None: not yet), and when (time.monotonic(), taken
        # before the read: a pause committed after it is seen by the next read at the latest)
        self._pausable = bool(self.table.pauses and self.table.mapping.mapped_optional)
        self._pauses: list[str] | None = None
        self._pauses_read_at = 0.0
        if self._pausable:
            self._statements.update(_claims_by_pauses(self.table.fragments))

    def _run(self, name: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        # the one statement runner outside db/'s gateway, on purpose: the public worker API
        # runs on the application's own connection, with tuple rows and, when asked,
        # prepared statements (db.rows/row/run never prepare, and make dict rows)
        cursor = self.conn.cursor(row_factory=psycopg.rows.tuple_row)
        # unprepared unless asked: behind a pooler in transaction mode the next statement may
        # run on another server connection, where a prepared one does not exist
        statement = self._statements.get(name)
        if statement is None:
            statement = self._statements[name] = queries.query(name, **self.table.fragments)
        for _ in range(MOVED_RETRIES):
            try:
                return cursor.execute(statement, params, prepare=self.prepare).fetchone()
            except psycopg.errors.SerializationFailure as exc:
                if not db.moved_to_another_partition(exc):
                    raise
                # A table partitioned by status: another session moved the row to another
                # partition while this statement waited for it (SQLSTATE 40001; nothing was
                # changed). A claim tries again for another job; for this attempt's own row
                # it means the row is no longer as this attempt left it: no row.
                if not name.startswith("claim"):
                    return None
        return None

    def claim(self) -> Claim | None:
        """Claim one ready job (FOR UPDATE SKIP LOCKED) with a new token, or None. A job of a
        paused kind or queue is passed over (the table's pauses read at most
        ``PAUSES_READ_EVERY`` seconds ago)."""
        params: dict[str, Any] = {
            "worker": self.worker_id,
            "attempt_token": uuid.uuid4(),
            "lease": self.lease,
        }
        name = "claim"
        if self._pausable:  # the pauses a parameter: an empty array while none is on
            name, params["paused"] = "claim_by_pauses_read", self._paused()
        row = self._run(name, params)
        return None if row is None else Claim(row[0], row[1], row[2], row[3])

    def _paused(self) -> list[str]:
        """The table's pauses as keys ('kind:charge_card'), read again when the last read
        is ``PAUSES_READ_EVERY`` seconds old: one small read a second instead of one per
        claim (docs/reference/performance.md, "Pauses on the claim")."""
        started = time.monotonic()
        if self._pauses is None or started - self._pauses_read_at >= PAUSES_READ_EVERY:
            row = self._run("pause_keys_read", {})
            self._pauses = list(row[0]) if row is not None and row[0] else []
            self._pauses_read_at = started
        return self._pauses

    def heartbeat(self, job: Claim) -> Claim:
        """Extend the lease; LeaseLost if this attempt no longer holds the job (0 rows: the
        attempt was reclaimed or cancelled — stop the work)."""
        row = self._run(
            "heartbeat",
            {
                "id": job.id,
                "worker": self.worker_id,
                "attempt_token": job.attempt_token,
                "lease": self.lease,
            },
        )
        if row is None:
            raise LeaseLost(job, "heartbeat")
        return dataclasses.replace(job, lease_expires_at=row[0])

    def complete(self, job: Claim) -> None:
        """Mark the job done; LeaseLost if this attempt no longer holds it.

        Safe to retry after a lost acknowledgement: the completion keeps this attempt's token
        on the done row, so a job done and holding this token was completed by this attempt
        (and no other: each claim writes a new token). Nothing an operator can change decides
        it: after ``reclaim --refund-attempt`` gives the attempt number back and another
        worker completes the job, this attempt's late complete raises ``LeaseLost``.
        """
        params = {"id": job.id, "attempt_token": job.attempt_token}
        if self._run("complete", params):
            return
        row = self._run("job_outcome", params)
        if row is not None and row[0]:
            return
        raise LeaseLost(job, "complete")

    def fail(self, job: Claim, error: str, *, retry_delay: float = 0.0) -> str:
        """Give the attempt up: queued again while attempts remain, else failed.

        Returns the new status; LeaseLost if this attempt no longer holds the job.
        """
        row = self._run(
            "worker_fail",
            {
                "id": job.id,
                "attempt_token": job.attempt_token,
                "error": error,
                "retry_delay": dt.timedelta(seconds=retry_delay),
            },
        )
        if row is None:
            raise LeaseLost(job, "fail")
        return str(row[0])


def _claims_by_pauses(fragments: dict[str, sql.Composable]) -> dict[str, sql.Composed]:
    """The claim as a Worker runs it on a table that can be paused, the table's pauses given
    as a parameter (the block job_paused, its ``{pause_keys}`` the parameter ``paused``: no
    read of jobctl.pauses per claim; doctor knows this form as one that honours pauses), and
    its read of the pauses (the block pause_keys_read)."""
    given = {**fragments, "pause_keys": sql.SQL("%(paused)s::pg_catalog.text[]")}
    given["paused"] = queries.query("job_paused", **given)
    given["claim_pause_check"] = sql.SQL("\n      ") + queries.query("claim_unpaused", **given)
    return {
        "claim_by_pauses_read": queries.query("claim", **given),
        "pause_keys_read": queries.query("pause_keys_read", **fragments),
    }

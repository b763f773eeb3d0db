"""Manual requeue and fail: read the row, decide, then one UPDATE fenced on what was read."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any, Literal

import psycopg

from jobctl import db, errors, history, output, queries

Row = dict[str, Any]
Action = Literal["requeue", "fail"]

# outcome -> exit code of one id (the worst over several ids wins, see errors.worst_exit_code)
OUTCOME_EXIT = {
    "requeued": errors.EXIT_OK,
    "failed": errors.EXIT_OK,
    "refused": errors.EXIT_USAGE,
    "conflict": errors.EXIT_CONFLICT,
    "not_found": errors.EXIT_ERROR,
    "locked": errors.EXIT_ERROR,
    "quarantined": errors.EXIT_OK,
    "policy_changed": errors.EXIT_OK,
}
DONE_OUTCOME = {"requeue": "requeued", "fail": "failed"}
FENCE = ("id", "status", "attempt_token", "updated_at", "row_version")  # the row as read


@dataclasses.dataclass
class Decision:
    """One id: what was read (the fence), and whether the action may proceed."""

    id: int
    seen: Row | None
    outcome: str | None = None  # set when decided without writing: refused, conflict, ...
    detail: str = ""

    def result(self) -> Row:
        seen = self.seen or {}
        return {
            "id": self.id,
            "outcome": self.outcome,
            "detail": self.detail,
            "status_before": seen.get("status"),
            "attempt_token": seen.get("attempt_token"),
            "reserved_by": seen.get("reserved_by"),
            "lease_state": seen.get("lease_state"),
            "reclaim_count": seen.get("reclaim_count"),
            "recovery_policy_before": seen.get("recovery_policy"),
        }


def _read(
    conn: psycopg.Connection[Any], settings: db.Settings, table: db.JobsTable, job_id: int
) -> Decision:
    """The job as an operator action sees it (its fence), in a read-only transaction."""
    with db.transaction(conn, settings, read_only=True):
        seen = conn.execute(queries.query("manual_read", table.ident), {"id": job_id}).fetchone()
    decision = Decision(job_id, seen)
    if seen is None:
        decision.outcome, decision.detail = "not_found", f"job {job_id} not found"
    return decision


def decide(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    table: db.JobsTable,
    job_id: int,
    action: Action,
    *,
    force: bool,
    expect_token: uuid.UUID | None,
) -> Decision:
    """Read the job (read-only) and apply the eligibility rules of the README's table."""
    decision = _read(conn, settings, table, job_id)
    seen = decision.seen
    if seen is None:  # not_found
        return decision
    if expect_token is not None and seen["attempt_token"] != expect_token:
        decision.outcome = "conflict"
        decision.detail = f"attempt token is {seen['attempt_token']}, not {expect_token}"
    elif seen["status"] == "done":
        decision.outcome, decision.detail = "refused", "job is done"
    elif action == "requeue" and seen["status"] == "queued":
        decision.outcome, decision.detail = "refused", "job is already queued"
    elif action == "fail" and seen["status"] == "failed":
        decision.outcome, decision.detail = "refused", "job is already failed"
    elif seen["lease_state"] == "live" and not force:
        decision.outcome = "refused"
        decision.detail = (
            f"lease is live until {seen['lease_expires_at']:%Y-%m-%d %H:%M:%S%z}: "
            f"worker {seen['reserved_by']} may be running it (--force overrides)"
        )
    return decision


def apply(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    table: db.JobsTable,
    decision: Decision,
    action: Action,
    *,
    reason: str | None,
    delay: dt.timedelta,
) -> Decision:
    """Requeue or fail one decided job with one fenced UPDATE (see ``_fenced_write``)."""
    if decision.outcome is None and decision.seen is not None:
        name = "manual_requeue" if action == "requeue" else "manual_fail"
        _fenced_write(
            conn,
            settings,
            table,
            decision,
            name,
            {"reason": reason, "delay": delay},
            action=action,
            reason=reason,
            done=(
                DONE_OUTCOME[action],
                f"{decision.seen['status']} -> {'queued' if action == 'requeue' else 'failed'}",
            ),
        )
    return decision


def decide_policy(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    table: db.JobsTable,
    job_id: int,
    policy: str,
) -> Decision:
    """Read the job for a policy switch: refused when it is done or already has ``policy``."""
    decision = _read(conn, settings, table, job_id)
    seen = decision.seen
    if seen is None:  # not_found
        return decision
    if seen["status"] == "done":
        decision.outcome, decision.detail = "refused", "job is done"
    elif seen["recovery_policy"] == policy:
        decision.outcome, decision.detail = "refused", f"policy is already {policy}"
    return decision


def set_policy(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    table: db.JobsTable,
    decision: Decision,
    policy: str,
    *,
    event: str,
    reason: str | None,
) -> Decision:
    """Switch one decided job's recovery policy, fenced and audited as ``event``."""
    if decision.outcome is None and decision.seen is not None:
        before = decision.seen["recovery_policy"]
        _fenced_write(
            conn,
            settings,
            table,
            decision,
            "set_policy",
            {"policy": policy, "event": event},
            action=event,
            reason=reason,
            done=(event, f"{before} -> {policy}"),
        )
    return decision


def quarantine_candidates(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    table: db.JobsTable,
    min_reclaims: int,
    limit: int | None,
) -> list[Decision]:
    """Auto jobs reclaimed ``min_reclaims`` times or more (not done), read for the fence."""
    with db.transaction(conn, settings, read_only=True):
        rows = conn.execute(
            queries.query("quarantine_candidates", table.ident),
            {"min_reclaims": min_reclaims, "limit": limit},
        ).fetchall()
    return [Decision(row["id"], row) for row in rows]


def _fenced_write(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    table: db.JobsTable,
    decision: Decision,
    statement: str,
    params: dict[str, Any],
    *,
    action: str,
    reason: str | None,
    done: tuple[str, str],
) -> None:
    """One UPDATE fenced on the row exactly as read, its audit event in the same transaction.

    0 rows means the row is no longer as read: ``conflict``, nothing written. A row lock held
    past lock_timeout: ``locked``, naming the session that holds it. Else ``done``.
    """
    assert decision.seen is not None
    seen = output.to_json([{k: decision.seen[k] for k in FENCE}])
    try:
        with db.mapped_errors(), db.transaction(conn, settings, action=action, reason=reason):
            _require_audit(conn, table)
            updated = conn.execute(
                queries.query(statement, table.ident), {**params, "seen": seen}
            ).rowcount
    except errors.LockTimeout:
        with db.transaction(conn, settings, read_only=True):
            row = conn.execute(
                queries.query("manual_lockers", table.ident), {"id": decision.id}
            ).fetchone()
        holder = row["locked_by"] if row and row["locked_by"] else "another session"
        decision.outcome, decision.detail = "locked", f"row locked by {holder}; nothing written"
        return
    if updated == 1:
        decision.outcome, decision.detail = done
    else:
        decision.outcome = "conflict"
        decision.detail = "the row changed since it was read; nothing written"


def _require_audit(conn: psycopg.Connection[Any], table: db.JobsTable) -> None:
    """jobctl's write names itself in jobctl_action and the history trigger records it: with
    the trigger missing or disabled the action could not be audited (and the marker would
    stay in the row), so it is refused. The worker history is not needed (see
    schema apply --no-worker-history)."""
    state = history.table_state(conn, table.oid)
    if state.mode is None or not state.enabled or state.missing_columns:
        raise errors.SchemaMissing(
            "jobctl's audit trigger is not installed or disabled, so this action could not be "
            "audited: run 'jobctl schema apply' (--no-worker-history installs only the audit)"
        )

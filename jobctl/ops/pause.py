"""A pause per kind or queue: ``jobctl pause --kind K --reason TEXT`` stops the claim of every
queued job of kind K (the claim jobctl gives workers reads ``jobctl.pauses``, the block
``job_paused``) until ``jobctl resume --kind K``. Recorded in jobctl's schema (history 010)
with who and why, every pause and resume beside it (``jobctl.pause_events``), written by
schema jobctl's owner only, as the policies per kind are. Nothing about a job's row changes:
its jobs stay queued and wait. Example::

    pause.pause(s, "kind", "charge_card", reason="the provider is down")
    pause.listed(s)   # [{"dimension": "kind", "value": "charge_card", "reason": ...}]
    pause.resume(s, "kind", "charge_card", reason="the provider is back")
"""

from __future__ import annotations

import dataclasses
import time

import psycopg

from jobctl import errors, lease
from jobctl.contract.shapes import Row
from jobctl.db.session import Session
from jobctl.ops import kind_policy

# what the refusal of another role says (a pause stops every worker's claim of the kind)
RECORDED = "pauses (a pause stops every worker's claim of the kind)"

DIMENSIONS = ("kind", "queue")
SETTLE_S = 0.1  # beyond lease.PAUSES_READ_EVERY: a clock tick, a scheduler's delay


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a pause or resume did: ``changed`` False when the kind was already paused (``row``
    then the pause as it stands) or not paused (``row`` None)."""

    changed: bool
    row: Row | None


def _ready(s: Session, dimension: str, command: str) -> None:
    """UsageError (exit 2) when the table maps no such column (nothing to pause by);
    SchemaMissing (exit 1) before history 010."""
    if dimension not in DIMENSIONS:
        raise errors.UsageError(f"a pause per {dimension!r}: give --kind or --queue")
    s.table.mapping.require(dimension, f"{command} --{dimension}")
    if not s.table.pauses:
        raise errors.SchemaMissing(
            "pauses need jobctl's history at version 10: run jobctl schema apply"
        )


def pause(s: Session, dimension: str, value: str, *, reason: str) -> Outcome:
    """Pause the claim of the queued jobs whose ``dimension`` (kind, queue) is ``value``, and
    record it; an existing pause is kept as it was (``changed`` False). Refused (exit 2) to a
    role that does not own schema jobctl, and without a reason."""
    _ready(s, dimension, "pause")
    if not reason.strip():
        raise errors.UsageError("pause needs --reason: say why the claim stops (it is recorded)")
    params = {
        "job_table": s.table.qualified,
        "dimension": dimension,
        "value": value,
        "reason": reason,
    }
    done = kind_policy.owner_write(s, "pause_set", params, reason, recorded=RECORDED)
    if done:
        # a lease.Worker claims by the pauses it read at most PAUSES_READ_EVERY ago: once
        # that has passed since the commit, every Worker's next claim passes the kind over
        time.sleep(lease.PAUSES_READ_EVERY + SETTLE_S)
        return Outcome(True, done[0])
    with s.transaction(read_only=True):
        return Outcome(False, s.row("pause_existing", params))


def resume(s: Session, dimension: str, value: str, *, reason: str | None) -> Outcome:
    """Lift the pause: the kind's (or queue's) queued jobs are claimed again. ``changed``
    False: it was not paused (nothing recorded)."""
    _ready(s, dimension, "resume")
    params = {
        "job_table": s.table.qualified,
        "dimension": dimension,
        "value": value,
        "reason": reason,
    }
    done = kind_policy.owner_write(s, "pause_resume", params, reason, recorded=RECORDED)
    return Outcome(bool(done), done[0] if done else None)


def listed(s: Session) -> list[Row]:
    """The table's pauses now (none before history 010), in the caller's transaction or a
    read-only one of its own: what the views read (stuck, summary, top, report, metrics)."""
    if not s.table.pauses:
        return []
    params = {"job_table": s.table.qualified}
    if s.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return s.rows("pause_list", params)
    with s.transaction(read_only=True):
        return s.rows("pause_list", params)


def waiting(s: Session) -> list[Row]:
    """The table's pauses now, each with the queued jobs it holds back (``waiting``), oldest
    pause first; none before history 010: what every view shows (summary, stuck, metrics,
    report, top), in the caller's transaction or a read-only one of its own."""
    if not s.table.pauses:
        return []
    if s.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return s.rows("pause_waiting")
    with s.transaction(read_only=True):
        return s.rows("pause_waiting")

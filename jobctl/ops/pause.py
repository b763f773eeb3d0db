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
from psycopg import sql

from jobctl import errors, lease
from jobctl.contract.shapes import Row
from jobctl.db.session import Session
from jobctl.ops import kind_policy
from jobctl.schema import history

# what the refusal of another role says (a pause stops every worker's claim of the kind)
RECORDED = "pauses (a pause stops every worker's claim of the kind)"

DIMENSIONS = ("kind", "queue")
# which claims of a paused kind since its pause the database holds, by the history's mode
# (``claims_seen``): every one (late, exact record each ended attempt), all but those that
# completed (transitions records only the attempts that did not), or only those running now
# (audit records no worker attempt; nor does a table without the history): then
# ``claims_since`` is None, unknown
SEEN = {"late": "all", "exact": "all", "transitions": "not_completed"}
RUNNING_ONLY = "running"
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
    """The table's pauses now (none before history 010), as ``pause --list`` shows them: the
    rows every view reads (``waiting``: the queued jobs each holds back, its claims since),
    by kind or queue and value."""
    return sorted(waiting(s), key=lambda p: (p["dimension"], p["value"]))


def waiting(s: Session) -> list[Row]:
    """The table's pauses now, each with the queued jobs it holds back (``waiting``), oldest
    pause first; none before history 010: what every view shows (summary, stuck, metrics,
    report, top), in the caller's transaction or a read-only one of its own."""
    if not s.table.pauses:
        return []
    if s.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return _waiting(s)
    with s.transaction(read_only=True):
        return _waiting(s)


def claims_seen(s: Session) -> str:
    """Which claims of a paused kind the database holds (SEEN): by the mode of the history's
    trigger on the table, when it is enabled and this role reads the history."""
    if not s.table.history:
        return RUNNING_ONLY
    state = history.table_state(s.conn, s.table.oid)
    if not state.enabled or state.mode is None:
        return RUNNING_ONLY
    return SEEN.get(state.mode, RUNNING_ONLY)


def _waiting(s: Session) -> list[Row]:
    """The block pause_waiting, each pause with its claims since (the block
    claims_since_pause, its recorded attempts left out where the history keeps none)."""
    seen = claims_seen(s)
    recorded: dict[str, sql.Composable] = {}
    if seen == RUNNING_ONLY:
        recorded["claims_recorded_since_pause"] = sql.SQL("NULL::pg_catalog.int8")
    return [row | {"claims_seen": seen} for row in s.rows("pause_waiting", {}, **recorded)]

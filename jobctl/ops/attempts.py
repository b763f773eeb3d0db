"""A job's attempts and events as jobctl's history keeps them: the ended attempts stored, the
live one told from the jobs row, a completion the history did not record, and the claims and
completions derived from the attempts beside the stored events. Pure: ``ops.triage`` reads
the rows and passes them here (``schema.history`` installs what records them).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from jobctl.contract.shapes import Row
from jobctl.table.mapping import TableMapping


def _between(start: Any, end: Any) -> dt.timedelta | None:
    """end - start; None where there is no answer: a time that is none (NULL), or not one
    Python holds (infinity, a year past 9999: its text), or a time without a time zone
    against one with (a reserved_at of type timestamp)."""
    if not isinstance(start, dt.datetime) or not isinstance(end, dt.datetime):
        return None
    if (start.tzinfo is None) != (end.tzinfo is None):
        return None
    return end - start


def _lease_start(job: Row) -> Any:
    """The later of the row's heartbeat_at and reserved_at (the database's lease_start): a
    heartbeat_at an earlier attempt left behind, older than the claim, starts no lease."""
    beat, claim = job.get("heartbeat_at"), job.get("reserved_at")
    if isinstance(beat, dt.datetime) and isinstance(claim, dt.datetime):
        if _between(beat, claim) is not None:
            return max(beat, claim)
    return beat or claim


def live_attempt(job: Row, mode: str | None, mapping: TableMapping | None = None) -> Row | None:
    """The attempt running now, from the jobs row with the design's column names (None when
    the job is not processing: the table's own value for it, per ``mapping``)."""
    processing = (mapping or TableMapping()).status("processing")
    if job.get("status") != processing or job.get("attempt_token") is None:
        return None
    # audit writes no statistics: what a table switched to audit kept in them (an attempt
    # running at the switch) is not counted on
    mine = mode != "audit" and job.get("jobctl_attempt") == job["attempt_token"]
    counted = (job.get("jobctl_heartbeats") or 0) if mine else 0
    lease = job.get("jobctl_lease") if mine else None
    if lease is None and isinstance(job.get("jobctl_lease_s"), (int, float)):
        # the database's subtraction (lease_length_s): a claim time without a time zone
        # (Rails' timestamp) against a timestamptz expiry too
        lease = dt.timedelta(seconds=job["jobctl_lease_s"])
    if lease is None and job.get("lease_expires_at") is not None:
        lease = _between(_lease_start(job), job["lease_expires_at"])
    gap = job.get("jobctl_max_gap") if mine else None
    return _attempt(
        {
            "attempt": job.get("attempts"),
            "attempt_token": job["attempt_token"],
            "worker": job.get("reserved_by"),
            "claimed_at": job.get("reserved_at"),
            "heartbeats": counted,
            "last_heartbeat_at": job.get("heartbeat_at"),
            "max_heartbeat_gap_s": gap.total_seconds() if gap is not None else None,
            "ended_at": None,
            "outcome": None,
            "lease_s": lease.total_seconds() if lease is not None else None,
            "lease_expires_at": job.get("lease_expires_at"),
            "heartbeat_stats": mode if mode in ("exact", "late", "transitions") else "none",
        }
    )


def _attempt(row: Row) -> Row:
    """An attempt as history shows it: ``heartbeats`` is a count only when every heartbeat
    was counted; in ``late`` mode ``late_heartbeats`` counts those after half the lease."""
    stats = row.get("heartbeat_stats") or "exact"  # version 1 counted every heartbeat
    counted = row.get("heartbeats")
    return row | {
        "heartbeat_stats": stats,
        "heartbeats": counted if stats == "exact" else None,
        "late_heartbeats": counted if stats == "late" else None,
    }


def unrecorded_completion(
    job: Row, attempts: list[Row], stored: list[Row], done: str
) -> Row | None:
    """A completion the history did not record, told from the jobs row: for a job whose row
    says it is done (``done``: the table's value) and whose history holds neither a completed
    attempt numbered like the row's last nor a stored event that took it to done, that
    attempt as the row still tells it (when it finished; not who ran it, its token or its
    heartbeats, which the lease design's completion clears).

    Whatever the mode now: the default mode (``transitions``) records no completion, and a
    job completed under it keeps its completion after a switch to ``late`` or ``exact``
    (which record completions from then on) - a mode switch does not rewrite the past."""
    if job.get("status") != done:
        return None
    number, ended = job.get("attempts"), job.get("finished_at") or job.get("updated_at")
    recorded = any(a["outcome"] == "completed" and a["attempt"] == number for a in attempts)
    moved = any(e.get("to_status") == done for e in stored)
    # (an updated_at kept in epoch milliseconds says no time here)
    if not isinstance(ended, dt.datetime) or recorded or moved:
        return None
    return _attempt(
        {
            "attempt": number,
            "attempt_token": None,
            "worker": None,
            "claimed_at": None,
            "heartbeats": None,
            "last_heartbeat_at": None,
            "max_heartbeat_gap_s": None,
            "ended_at": ended,
            "outcome": "completed",
            "lease_s": None,
            "lease_expires_at": None,
            "heartbeat_stats": "transitions",
            "ended_by": None,
        }
    )


def merge(stored_attempts: list[Row], live: Row | None) -> list[Row]:
    """Ended attempts (one row each) and the live one. An attempt begun under version 1 has
    an open row from then, which its ending row (or the live one) continues."""
    attempts: list[Row] = []
    for row in [*map(_attempt, stored_attempts), *([live] if live else [])]:
        earlier = next(
            (
                i
                for i, a in enumerate(attempts)
                if a["attempt_token"] == row["attempt_token"] and a["ended_at"] is None
            ),
            None,
        )
        if earlier is None:
            attempts.append(row)
        else:
            attempts[earlier] = _continued(attempts[earlier], row)
    return attempts


def _continued(opened: Row, later: Row) -> Row:
    """Version 1's open row of an attempt and what came after it (its end, or the live row):
    version 1 counted every heartbeat; the sum stays exact only in 'exact' mode."""
    gaps = [g for g in (opened["max_heartbeat_gap_s"], later["max_heartbeat_gap_s"]) if g]
    exact = later["heartbeat_stats"] == "exact"
    return later | {
        "claimed_at": opened["claimed_at"] or later["claimed_at"],
        "heartbeats": (opened["heartbeats"] or 0) + (later["heartbeats"] or 0) if exact else None,
        "max_heartbeat_gap_s": max(gaps) if gaps else None,
        "lease_s": later["lease_s"] if later["lease_s"] is not None else opened["lease_s"],
    }


def events(
    stored: list[Row], attempts: list[Row], limit: int, mapping: TableMapping | None = None
) -> list[Row]:
    """The stored events with the claims and completions derived from the attempts (each
    once: version 1 stored them as events), oldest first, the latest ``limit``. Statuses are
    the table's own values, as the trigger stores them (``mapping``: the table's names)."""
    mapping = mapping or TableMapping()
    processing, done = mapping.status("processing"), mapping.status("done")
    have = {(e["event"], e["attempt_token"]) for e in stored}
    derived = []
    for a in attempts:
        if ("claimed", a["attempt_token"]) not in have and a["claimed_at"] is not None:
            derived.append(_derived(a, "claimed", a["claimed_at"], None, processing, None))
        if a["outcome"] == "completed" and ("completed", a["attempt_token"]) not in have:
            derived.append(
                _derived(a, "completed", a["ended_at"], processing, done, a.get("ended_by"))
            )
    order = {"claimed": 0}
    merged = sorted(
        [*stored, *derived],
        key=lambda e: (e["at"], order.get(e["event"], 1), e.get("event_id") or 0),
    )
    for e in merged:
        e.pop("event_id", None)
    return merged[-limit:] if limit else merged


def _derived(
    attempt: Row, kind: str, at: Any, from_status: str | None, to_status: str, actor: str | None
) -> Row:
    return {
        "at": at,
        "event": kind,
        "from_status": from_status,
        "to_status": to_status,
        "attempt": attempt["attempt"],
        "attempt_token": attempt["attempt_token"],
        "worker": attempt["worker"],
        "actor": actor,
        "reason": None,
        "db_role": actor,  # the role that ended the attempt; a claim is not seen by the trigger
        "claimed": None,
        "event_id": None,
    }

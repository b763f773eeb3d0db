"""``jobctl events``: the history's record across jobs, newest or oldest first, in a time
window, streamed through a server-side cursor (memory stays flat over millions of rows) in
the order of the event time's index (``events_at_idx``).

The stored events are every transition but claims and completions, which the history keeps
as attempts (``jobctl history ID`` shows them per job), plus each of jobctl's own writes.
Example::

    with s.transaction(read_only=True):
        for event in events.stream(s, events.Window(since=dt.timedelta(hours=2))):
            ...
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any, cast

import psycopg

from jobctl import errors
from jobctl.contract.shapes import JobEvent
from jobctl.db.session import Session
from jobctl.ops.slices import EVERY, Slice

# a bound of the window: an age (now() minus it) or a point in time
Bound = dt.timedelta | dt.datetime | None

# every kind of event the history records (the trigger's, sql/history/002_lean_history.sql,
# and jobctl's own writes): a filter on any other value could only ever print (none)
EVENTS = (
    "reclaimed",
    "requeued",
    "manually_failed",
    "cancelled",
    "quarantined",
    "policy_changed",
    "retried",
    "requeued_by_other",
    "failed",
    "superseded",
    "status_changed",
    # a kind or queue paused or resumed (jobctl pause, resume; jobctl.pause_events): no job
    "paused",
    "resumed",
)
# kept as attempts, never as events: a filter on them is pointed there
ATTEMPTS = ("claimed", "completed")


def known_events(given: Sequence[str]) -> list[str]:
    """--event's values (each may be a comma list), checked: UsageError (exit 2) naming the
    known ones for any other, with the nearest as a guess (``reclaimd``: reclaimed)."""
    import difflib

    wanted = [v.strip() for value in given for v in value.split(",") if v.strip()]
    for value in wanted:
        if value in ATTEMPTS:
            raise errors.UsageError(
                f"--event {value}: claims and completions are kept as attempts, not events "
                "(jobctl history ID shows them per job)"
            )
        if value not in EVENTS:
            near = difflib.get_close_matches(value, EVENTS, n=1)
            raise errors.UsageError(
                f"--event {value!r} is not an event"
                + (f" (did you mean {near[0]}?)" if near else "")
                + f": give one of {', '.join(EVENTS)}"
            )
    return wanted


def bound(text: str) -> dt.timedelta | dt.datetime:
    """--since/--until: a duration (2h: that long ago) or an ISO 8601 timestamp (with an
    offset; one without is taken as UTC). UsageError (exit 2) for anything else."""
    from jobctl import durations

    try:
        return durations.parse(text)
    except durations.InvalidDuration:
        pass
    try:
        at = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise errors.UsageError(
            f"{text!r} is neither a duration (30m, 2h, 1d) nor a timestamp "
            "(2026-12-01T06:00:00+00:00)"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.timezone.utc)


@dataclasses.dataclass(frozen=True)
class Window:
    """Which events: a time window and the operator's filters. Values are parameters."""

    since: Bound = None
    until: Bound = None
    events: Sequence[str] | None = None
    actor: str | None = None
    worker: str | None = None
    ids: Sequence[Any] | None = None  # job ids in the id column's type (session.job_ids)
    what: Slice = EVERY  # the jobs' kind, queue, error now, by the jobs' rows

    def params(self) -> dict[str, Any]:
        return {
            **self.what.params(),
            "since": self.since if isinstance(self.since, dt.timedelta) else None,
            "since_at": self.since if isinstance(self.since, dt.datetime) else None,
            "until": self.until if isinstance(self.until, dt.timedelta) else None,
            "until_at": self.until if isinstance(self.until, dt.datetime) else None,
            "events": list(self.events) if self.events else None,
            "actor": self.actor,
            "worker": self.worker,
            "ids": [str(i) for i in self.ids] if self.ids else None,
        }


def stream(
    s: Session,
    window: Window,
    *,
    oldest_first: bool = False,
    limit: int | None = None,
    full: bool = False,
) -> Iterator[JobEvent]:
    """The events in ``window``, newest first (or oldest), streamed; the caller holds a
    read-only transaction. A worker, actor or reason longer than triage.DISPLAY_CHARS
    characters is cut on the server, with a note (``full``: whole)."""
    from jobctl.ops import triage

    window.what.check(s.table.mapping)
    name = "events_oldest" if oldest_first else "events_newest"
    params = {
        **window.params(),
        "job_table": s.table.qualified,
        "limit": limit,
        "cut": triage.cut(full),
    }
    shown = triage.shown_texts("e", "worker", "actor", "reason", kept=s.table.kept_texts)
    pauses = _pause_events(s, params, oldest_first)
    try:
        rows = (cast(JobEvent, row) for row in s.stream(name, params, **shown))
        yield from _merged(rows, pauses, oldest_first, limit)
    except psycopg.errors.CardinalityViolation:  # a job's kind or queue read by its id
        raise errors.DatabaseError(REPEATED_IDS) from None


def _pause_events(s: Session, params: dict[str, Any], oldest_first: bool) -> list[JobEvent]:
    """The table's pauses and resumes in the window (none before history 010), as events of
    no job: the kind or queue paused in its column, in the table's mapped columns' order.
    Few (people make them), so read whole and merged into the stream by time."""
    from psycopg import sql

    from jobctl.ops import triage

    if not s.table.pauses:
        return []
    shown = {
        **triage.shown_texts("e", "actor", "reason", "value"),
        "order": sql.SQL("" if oldest_first else "DESC"),
    }
    found: list[JobEvent] = []
    for row in s.rows("pause_events_listed", params, **shown):
        event: dict[str, Any] = {"at": row["at"], "id": None}
        for design in s.table.mapping.mapped_optional:
            event[design] = row["value"] if row["dimension"] == design else None
        event |= {
            "event": row["event"],
            "from_status": None,
            "to_status": None,
            "attempt": None,
            "attempt_token": None,
            "worker": None,
            "actor": row["actor"],
            "db_role": row["db_role"],
            "reason": row["reason"],
        }
        found.append(cast(JobEvent, event))
    return found


def _merged(
    rows: Iterator[JobEvent], pauses: list[JobEvent], oldest_first: bool, limit: int | None
) -> Iterator[JobEvent]:
    """The jobs' events and the pauses' in one time order (a pause before a job's event of
    the same time), at most ``limit``."""
    import heapq

    merged = heapq.merge(pauses, rows, key=lambda e: e["at"], reverse=not oldest_first)
    for n, event in enumerate(merged):
        if limit is not None and n >= limit:
            return
        yield event


# an event names its job by id alone; two rows of the table holding that id (in two of its
# partitions) leave its kind and queue unknown: the table is one jobctl refuses
REPEATED_IDS = (
    "ids repeat across the table's partitions: an event's job is two rows, so events cannot "
    "say its kind or queue; jobctl names a job by its id alone and refuses such a table "
    "(jobctl schema check names an id that repeats)"
)

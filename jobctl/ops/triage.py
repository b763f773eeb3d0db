"""The read path: stuck jobs, a summary, one job, its history. Read-only transactions only."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any, cast

from psycopg import sql

from jobctl import errors
from jobctl.contract.shapes import AtRiskRow, Attempt, Event, History, LeaseRow, Row
from jobctl.db.session import Session
from jobctl.ops import attempts as job_history
from jobctl.ops import pause, repeated_ids
from jobctl.ops.slices import EVERY, Slice
from jobctl.sql import queries
from jobctl.table import column_types
from jobctl.table.mapping import COLUMNS, PRIORITY, TableMapping

HISTORY_EVENT_LIMIT = 10_000
EXACT_COUNT_LIMIT = 1_000_000
SHOW_EVENT_LIMIT = 10
# A display shows this many characters of a long value (a 100 MB last_error, a worker's name),
# cut on the server with a note of how much more there is; --full asks for every byte.
DISPLAY_CHARS = 4_096
CUT_PREFIX = "jobctl_cut:"  # job_row_shown's column beside a long one: its cut text, or NULL


@dataclasses.dataclass(frozen=True)
class ExpiredFilter:
    """Which expired leases an operator asks about. Values are always query parameters."""

    worker: str | None = None
    policy: str | None = None
    ids: Sequence[Any] | None = None  # as typed or as read: sent as text, cast by the database
    grace: dt.timedelta = dt.timedelta(0)
    plan: str | None = None  # JSON rows of a saved plan: only those, exactly as reviewed
    exclude: Sequence[Any] | None = None  # rows a batch must pass over (they raised before)
    what: Slice = EVERY  # what the job is: its kinds, queues (mapped columns), an error's text
    # not which rows but how the requeued return (reclaim --spread): their available_at
    # spread evenly over [now, now + spread], with jitter (reclaim_batch's paced)
    spread: dt.timedelta = dt.timedelta(0)
    # reclaim's choices about a deploy's orphans: the requeued get their killed
    # attempt back (refund_attempt); an orphan claimed longer ago than this is parked
    # (reclaim_action: the dry run's decision as the commit's)
    refund_attempt: bool = False
    park_older_than: dt.timedelta | None = None
    # not which rows but how their texts come back (--full): every byte of the worker's name,
    # kind, queue; else each cut on the server past DISPLAY_CHARS characters, with a note
    # (lease_columns), in the reads, the dry run, the plan and the commit's returned rows
    full: bool = False
    # not which rows but where the rows whose id another row holds too are told (their ids;
    # they are left out of every read and write: sql/queries.sql's id_repeated), to be
    # named once; None: left out all the same
    left_out: repeated_ids.LeftOut | None = dataclasses.field(default=None, compare=False)

    def told(self) -> repeated_ids.LeftOut:
        """Where the ids left out are told (a sink of its own when none was given)."""
        return self.left_out if self.left_out is not None else repeated_ids.LeftOut()

    def params(self) -> dict[str, Any]:
        return {
            "cut": cut(self.full),
            "spread": self.spread,
            "park_older_than": self.park_older_than,
            "worker": self.worker,
            "policy": self.policy,
            "ids": [str(i) for i in self.ids] if self.ids else None,
            "grace": self.grace,
            "plan": self.plan,
            "exclude": [str(i) for i in self.exclude] if self.exclude else None,
            **self.what.params(),
        }

    def check(self, mapping: TableMapping) -> None:
        """UsageError (exit 2) when --kind or --queue is given on a table that maps none."""
        self.what.check(mapping)


def stuck(
    s: Session, which: ExpiredFilter, limit: int | None, *, no_lease: bool = True
) -> Iterator[LeaseRow]:
    """Processing jobs whose lease expired, oldest expiry first, with reclaim's action.

    Then the processing jobs with no lease (``lease_state`` none, ``action`` none: claimed by
    code that sets none; reclaim never touches them), longest claimed first, with
    ``claimed_age_s`` (``no_lease=False``: only the expired ones, as reclaim's dry run
    shows them). Rows another session holds locked (reclaim's SKIP LOCKED would pass them by) carry
    ``skipped``, naming the session where the database can tell. Streamed through a
    server-side cursor (the caller holds the transaction), so memory stays flat.
    """
    which.check(s.table.mapping)  # before the first row is asked for
    params = {**which.params(), "limit": limit, "no_lease": no_lease}
    left = which.told()  # an id another row holds too: left out, told
    # stuck's rows carry the job's priority where the table maps one; reclaim's (no_lease
    # False) keep reclaim's columns (the table's {mapped_priority}: none)
    priority = s.table.fragments["shown_priority" if no_lease else "mapped_priority"]
    rows = s.stream("stuck", params, mapped_priority=priority)
    return (cast(LeaseRow, note_locked(row)) for row in rows if not left.took(row))


def stuck_count(s: Session, which: ExpiredFilter) -> tuple[int, int]:
    """How many rows ``stuck`` would list with no limit: (expired, with no lease). Its
    footers count these, not the rows a ``--limit`` let through."""
    found = s.one("stuck_count", {**which.params(), "no_lease": True})
    return int(found["expired"]), int(found["no_lease"])


def at_risk(
    s: Session, which: ExpiredFilter, window: dt.timedelta | None, limit: int | None
) -> Iterator[AtRiskRow]:
    """Expired leases plus live ones that expire within ``window`` (None: those in the last
    third of their lease, lease_soon_window), oldest expiry first.

    Each row carries ``lease_state`` (expired, expiring, none: no lease, as ``stuck``) and
    ``worker_heartbeat_lag_s``: the time since its worker's latest sign of life on any job,
    so a dying worker shows before its leases run out.
    """
    which.check(s.table.mapping)  # before the first row is asked for
    params = {**which.params(), "soon": window, "limit": limit}
    left = which.told()  # an id another row holds too: left out, told
    rows = s.stream("at_risk", params, mapped_priority=s.table.fragments["shown_priority"])
    return (cast(AtRiskRow, note_locked(row)) for row in rows if not left.took(row))


def note_locked(row: Row) -> Row:
    """Turn ``locked_by`` into ``skipped``: why reclaim's SKIP LOCKED would pass the row by;
    or ``poisoned`` (lease times jobctl can neither subtract nor read back: infinity, or a
    year out of a client's calendar, shown as NULL), which reclaim leaves for a human."""
    locked_by = row.pop("locked_by")
    poisoned = row.pop("poisoned", None)
    row["skipped"] = f"locked by {locked_by}" if locked_by else None
    if poisoned:
        row["skipped"] = f"{POISONED}: {poisoned}; left for a human to fix"
    if row.get("lease_state") == "none":  # claimed with no lease: reclaim never sees it
        row["action"] = "none"
        row["skipped"] = NO_LEASE
    return row


# a row's skipped reason when it is processing with no lease (stuck, stuck --expiring-within)
NO_LEASE = "no lease: reclaim never touches it (jobctl explain ID says what to do)"


# a row's skipped reason when its lease times are unusable (stuck, the dry run, the service)
POISONED = "lease times out of range"


def summary(
    s: Session,
    expiring_within: dt.timedelta | None,
    *,
    exact: bool = False,
    what: Slice = EVERY,
    full: bool = False,
) -> Row:
    """Counts by status, processing split by lease state, processing jobs per worker (each
    worker's name cut on the server past DISPLAY_CHARS characters; ``full``: whole).

    On a table the planner believes holds EXACT_COUNT_LIMIT rows or more, finished jobs
    (done, failed) are estimated from the statistics instead of counted by a full scan;
    queued and processing are always counted. ``exact`` counts everything, as does a
    narrowing by ``what`` (kind, queue, error: the statistics know nothing of it).
    """
    what.check(s.table.mapping)
    narrowed = what.params()
    size = s.one("table_size_estimate", {"oid": s.table.oid})["estimate"]
    statuses = s.table.mapping.written_statuses()  # the table's values, design order
    finished = [
        v for v in statuses if s.table.mapping.role(v) in ("done", "failed", "cancelled", "parked")
    ]
    estimated: list[str] = []
    if exact or what or size < EXACT_COUNT_LIMIT:
        by_status = {r["status"]: r["jobs"] for r in s.rows("summary_status", narrowed)}
    else:
        live = {r["status"]: r["jobs"] for r in s.rows("summary_status_live", narrowed)}
        guess = {
            r["status"]: r["jobs"]
            for r in s.rows(
                "summary_status_estimate",
                {"oid": s.table.oid, "status_column": s.table.mapping.column("status")},
            )
        }
        estimated = sorted(set(guess) - set(live) | (set(finished) - set(live)))
        by_status = {status: guess.get(status, 0) for status in estimated} | live
    soon = {"soon": expiring_within, **narrowed, "cut": cut(full)}
    return {
        "table": s.table.qualified,
        "status": {status: by_status.get(status, 0) for status in statuses} | by_status,
        "estimated": estimated,
        "processing": s.one("summary_processing", soon),
        "expiring_within_s": within_s(expiring_within),
        "workers": s.rows("summary_workers", soon),
        **_awaiting_review(s, narrowed, exact=exact),
        **s.one("queue_ready", narrowed),
        "paused": pause.waiting(s),  # the kinds and queues whose claim is paused
    }


def _awaiting_review(s: Session, narrowed: Row, *, exact: bool) -> Row:
    """The jobs awaiting review: found through the history's reclaims (review_candidates, by
    their primary key: what the incident costs); ``exact`` counts them by a scan of the whole
    table instead, the ones the history holds no reclaim of too (parked before it was
    installed, or their events purged), and says how many of them it missed
    (``awaiting_review_unrecorded``)."""
    found = int(s.one("review_count", narrowed)["awaiting_review"])
    if not exact:
        return {"awaiting_review": found}
    every = int(s.one("review_count_scan", narrowed)["awaiting_review"])
    return {"awaiting_review": every, "awaiting_review_unrecorded": every - found}


GROUPS = ("kind", "queue", "worker", "error")  # what summary --by groups by
GROUP_LIMIT = 1_000  # groups listed at most, the most stuck first


def summary_by(
    s: Session,
    by: str,
    expiring_within: dt.timedelta | None,
    *,
    what: Slice = EVERY,
    limit: int | None = GROUP_LIMIT,
    shown: int | None = DISPLAY_CHARS,
) -> Row:
    """``summary --by``: per kind, queue, worker or kind of error (the error's first line,
    numbers and ids normalized: ``error_group``), the processing jobs by lease state, the
    stuck ones, those awaiting review, the ready ones and the oldest wait; one statement.
    Grouped by the whole value, each shown cut on the server past ``shown`` characters
    (None: whole)."""
    if by not in GROUPS:
        raise errors.UsageError(f"--by {by!r}: give one of {', '.join(GROUPS)}")
    if by in ("kind", "queue"):
        s.table.mapping.require(by, f"--by {by}")
    what.check(s.table.mapping)
    fragments = s.table.fragments
    key: sql.Composable = {
        "kind": fragments["kind_value"],
        "queue": fragments["queue_value"],
        "worker": sql.SQL("j.{}::pg_catalog.text").format(fragments["reserved_by"]),
        "error": queries.query("error_group", **fragments),
    }[by]
    params = {"soon": expiring_within, "limit": limit, **what.params(), "cut": shown}
    shown_group = queries.query("display_text", text=sql.Identifier("g", "grp"))
    found = s.rows("summary_groups", params, group_key=key, shown_group=shown_group)
    return {
        "table": s.table.qualified,
        "by": by,
        "expiring_within_s": within_s(expiring_within),
        "groups": [{by: r.pop("grp"), **r} for r in found],
    }


def ready_waiting(s: Session, after: dt.timedelta) -> Row | None:
    """The jobs ready to run (queued, available, unclaimed) when the oldest has waited longer
    than ``after``: how many, and its age; else None."""
    ready = s.one("queue_ready", EVERY.params())
    oldest = ready["oldest_ready_s"]
    if oldest is None or oldest <= after.total_seconds():
        return None
    return ready


def within_s(expiring_within: dt.timedelta | None) -> float | None:
    """The window of "expiring soon" in seconds, as -o json says it: None when each lease is
    measured against its own length (its last third: lease_soon_window)."""
    return None if expiring_within is None else expiring_within.total_seconds()


def cut(full: bool) -> int | None:
    """The ``cut`` parameter of the statements that show long text (display_cut)."""
    return None if full else DISPLAY_CHARS


def _job_row(s: Session, job_id: str | int, *, full: bool = False) -> Row:
    (typed,) = s.job_ids([job_id])
    # a time beyond a client's calendar shown as its text; --full: nothing cut
    row = s.row(
        "job_row_shown",
        {"id": typed, "cut": None if full else DISPLAY_CHARS, "soon": None},
        times_as_text=True,
        shown_columns=_shown_columns(s),
    )
    if row is None:
        raise errors.JobctlError(f"job {job_id} not found in {s.table.qualified}")
    if row.pop("jobctl_id_repeated", False):  # two jobs, one id: neither shown
        raise errors.Refused(repeated_ids.refusal(s, typed))
    row.pop("row_version", None)
    return design_names(_with_cut_values(row), s.table.mapping)


def _shown_columns(s: Session) -> sql.Composable:
    """The table's columns in order, each of variable length as ``shown_column`` (cut on the
    server when long), but the id and status, which jobctl reads back (never long); a time
    of the design's kept without a zone as the instant it is (column_types.as_time: in the
    mapping's zone, never the session's)."""
    kept = {s.table.mapping.column("id"), s.table.mapping.column("status")}
    zoned = {
        s.table.mapping.column(design): found
        for design, found in s.table.types.items()
        if design in COLUMNS and column_types.naive(found)
    }
    parts: list[sql.Composable] = []
    for column in s.rows("column_lengths", {"oid": s.table.oid}):
        value = sql.Identifier("j", column["name"])
        if column["name"] in zoned:
            at = column_types.as_time(zoned[column["name"]], None, value, s.table.mapping.zone)
            parts.append(sql.SQL("{} AS {}").format(at, sql.Identifier(column["name"])))
            continue
        if not column["variable"] or column["name"] in kept:
            parts.append(value)
            continue
        shown = s.query(
            "shown_column",
            column=value,
            text=sql.SQL("{}::pg_catalog.text").format(value),
            column_name=sql.Identifier(column["name"]),
            cut_name=sql.Identifier(CUT_PREFIX + column["name"]),
        )
        parts.append(shown)
    return sql.SQL(", ").join(parts)


# the history's texts it keeps cut past history.KEPT_CHARS, with their whole length beside
# them (history 011: COLUMN_bytes)
KEPT_TEXTS = ("worker", "reason")


def shown_texts(alias: str, *columns: str, kept: bool = False) -> dict[str, sql.Composable]:
    """The fragments ``{shown_COLUMN}`` of a statement that shows the history's texts: the
    column ``alias.COLUMN`` as a display shows it (display_text: cut when long), or a text
    the history kept cut with a note of what it did not keep (kept_text; ``kept``: history
    011 is installed, s.table.kept_texts); and ``{bytes_COLUMN}``, that whole length (NULL
    when the text is whole, or before 011), for a statement that groups by the text."""
    shown: dict[str, sql.Composable] = {}
    for column in columns:
        text = sql.Identifier(alias, column)
        if column not in KEPT_TEXTS:
            shown[f"shown_{column}"] = queries.query("display_text", text=text)
            continue
        length = (
            sql.Identifier(alias, f"{column}_bytes") if kept else sql.SQL("NULL::pg_catalog.int8")
        )
        shown[f"shown_{column}"] = queries.query("kept_text", text=text, bytes=length)
        shown[f"bytes_{column}"] = length
    return shown


def _with_cut_values(row: Row) -> Row:
    """job_row_shown's row with each cut value (and its note) in its column's place."""
    for key in [k for k in row if k.startswith(CUT_PREFIX)]:
        shown = row.pop(key)
        if shown is not None:
            row[key[len(CUT_PREFIX) :]] = shown
    return row


def _plays(mapping: TableMapping) -> dict[str, str]:
    """Each part of the lease design the table plays, by the design's name: its column."""
    plays = {d: mapping.column(d) for d in COLUMNS}
    plays |= {d: mapping.columns[d] for d in mapping.mapped_optional}
    if mapping.priority is not None:
        plays[PRIORITY] = mapping.priority
    return plays


def renamed(mapping: TableMapping) -> dict[str, str]:
    """The design's names a row carries for columns the table names otherwise: each with the
    table's own name (``available_at``: ``run_at``), for a display to say both."""
    return {d: actual for d, actual in _plays(mapping).items() if actual != d}


def design_names(row: Row, mapping: TableMapping) -> Row:
    """A row of every column with the lease design's names for the columns that play its
    parts (the JSON contract), the table's other columns as they are, in the table's order."""
    plays = _plays(mapping)
    design = {actual: d for d, actual in plays.items() if actual != d}
    if not design:
        return row
    return {
        design.get(k, k): v
        for k, v in row.items()
        # a column named like a design column that plays no part here would collide: left out
        if k in design or plays.get(k, k) == k
    }


def _public(row: Row) -> Row:
    return {k: v for k, v in row.items() if not k.startswith("jobctl_")}


def _attempts_and_events(
    s: Session, the_job: Row, limit: int, *, full: bool = False
) -> tuple[list[Row], list[Row]]:
    """The job's attempts (ended ones stored, the live one from its row) and its latest
    ``limit`` events (stored ones, claims and completions derived from the attempts); long
    texts cut for display (``full``: whole)."""
    from jobctl.schema import history as hist  # (show and history only, not stuck or reclaim)

    params = {"job_table": s.table.qualified, "id": str(the_job["id"]), "cut": cut(full)}
    mode = hist.table_state(s.conn, s.table.oid).mode
    attempts = job_history.merge(
        s.rows("job_attempts", params, **shown_texts("a", "worker", kept=s.table.kept_texts)),
        job_history.live_attempt(the_job, mode, s.table.mapping),
    )
    events_texts = shown_texts("e", "worker", "actor", "reason", kept=s.table.kept_texts)
    stored = s.rows("job_events", params | {"limit": limit}, **events_texts)
    completion = job_history.unrecorded_completion(
        the_job, attempts, stored, s.table.mapping.status("done")
    )
    if completion is not None:
        attempts.append(completion)
    return attempts, job_history.events(stored, attempts, limit, s.table.mapping)


def show(s: Session, job_id: str | int, *, full: bool = False) -> Row:
    """The job row, its lease state and its latest events; a value longer than DISPLAY_CHARS
    characters cut on the server, with a note (``full``: every byte)."""
    row = _job_row(s, job_id, full=full)
    _, latest = _attempts_and_events(s, row, SHOW_EVENT_LIMIT, full=full)
    return _public(row) | {"events": latest}


def history(s: Session, job_id: str | int, *, full: bool = False) -> History:
    """The job, its attempts (heartbeat history) and its events (reclaim history); long texts
    cut as ``show`` cuts them (``full``: whole)."""
    row = _job_row(s, job_id, full=full)
    attempts, all_events = _attempts_and_events(s, row, HISTORY_EVENT_LIMIT, full=full)
    return {
        "job": _public(row),
        "attempts": cast(list[Attempt], attempts),
        "events": cast(list[Event], all_events),
    }

"""The row shapes that cross modules and layers, defined once: rows come from the database as
dicts (psycopg's ``dict_row``); these ``TypedDict`` s name their keys, which are also the JSON
contract (see the commands reference). ``Row`` is a row before it is given a shape. What a
table shows of each is ``render/rows``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, TypedDict

Row = dict[str, Any]  # a row as the database returns it, before it is given a shape


class LeaseRow(TypedDict):
    """A processing job and its lease: one row of ``stuck``, the start of a reclaim row."""

    id: Any  # the table's own id type
    status: str
    reserved_by: str | None
    attempt_token: uuid.UUID | None
    attempts: int
    max_attempts: int
    reclaim_count: int
    recovery_policy: str  # the row's own column, as the table holds it
    effective_policy: str  # auto or manual: the policy that applies (row, kind, queue)
    policy_from: str  # row, kind or queue: what makes effective_policy what it is
    reserved_at: dt.datetime | None
    heartbeat_at: dt.datetime | None
    lease_expires_at: dt.datetime | None
    lease_overdue_s: float | None
    heartbeat_age_s: float | None
    action: str  # requeue or fail: what reclaim does to it
    lease_state: str  # expired, or none (processing with no lease); expiring: --expiring-within
    claimed_age_s: float | None  # how long ago it was claimed
    skipped: str | None  # why reclaim passes it by (locked by another session), else None


class AtRiskRow(LeaseRow):
    """``stuck --expiring-within``: a lease expired or about to, with its worker's lag (its
    JSON key after ``lease_state``: ``render/rows.AT_RISK_KEYS``)."""

    worker_heartbeat_lag_s: float | None


class ReclaimRow(LeaseRow):
    """One row of a reclaim: the lease row, and whether the commit applied it."""

    applied: bool


class ManualResult(TypedDict):
    """The outcome of an operator write (requeue, fail, policy, quarantine) for one id."""

    id: Any
    outcome: str | None  # requeued, failed, policy_changed, quarantined, refused, conflict, ...
    detail: str
    status_before: str | None
    attempt_token: uuid.UUID | None
    reserved_by: str | None
    lease_state: str | None
    reclaim_count: int | None
    recovery_policy_before: str | None


class ReviewRow(TypedDict):
    """A job awaiting review (``jobctl review``): reclaim failed or parked it, nobody acted."""

    id: Any
    why: str  # manual_policy (policy_from says by what), attempts_exhausted or parked
    status: str
    last_worker: str | None  # the worker whose lease expired (from the history)
    reclaimed_at: dt.datetime | None
    waited_s: float | None
    attempts: int
    max_attempts: int
    reclaim_count: int
    recovery_policy: str  # the row's own column
    effective_policy: str  # auto or manual: the policy that applies (row, kind, queue)
    policy_from: str  # row, kind or queue
    last_error: str | None
    attempt_token: uuid.UUID | None  # the fence a saved plan keeps: status, token, version
    updated_at: dt.datetime | None
    row_version: str


class Attempt(TypedDict):
    """One attempt of a job (the heartbeat history)."""

    attempt: int | None
    attempt_token: uuid.UUID | None
    worker: str | None
    claimed_at: dt.datetime | None
    heartbeats: int | None
    last_heartbeat_at: dt.datetime | None
    max_heartbeat_gap_s: float | None
    ended_at: dt.datetime | None
    outcome: str | None
    lease_s: float | None
    lease_expires_at: dt.datetime | None
    heartbeat_stats: str  # exact, late (counted when late), transitions or none (not counted)
    late_heartbeats: int | None  # in late mode: heartbeats after half the lease
    ended_by: str | None  # the database role that ended it


class Event(TypedDict):
    """One state transition of a job (the reclaim and audit history)."""

    at: dt.datetime
    event: str
    from_status: str | None
    to_status: str | None
    attempt: int | None
    attempt_token: uuid.UUID | None
    worker: str | None
    actor: str | None  # who made it: the declared --actor of jobctl's roles, else the role
    reason: str | None
    db_role: str | None  # the database role of the session that made it (None: not known)
    claimed: dict[str, str] | None  # what a role not jobctl's declared: actor, action, reason


class JobEvent(TypedDict):
    """One event of the history across jobs (``jobctl events``)."""

    at: dt.datetime
    id: Any  # the job's id, in the id column's type
    event: str
    from_status: str | None
    to_status: str | None
    attempt: int | None
    attempt_token: uuid.UUID | None
    worker: str | None
    actor: str | None  # who the change declared it was made by (jobctl's --actor)
    db_role: str | None  # the database role that made it
    reason: str | None


class History(TypedDict):
    """``jobctl history``: the job, its attempts and its events, oldest first."""

    job: Row
    attempts: list[Attempt]
    events: list[Event]


# ---------------------------------------------------------------- the incident report
class ExpiredGroup(TypedDict):
    """``report``: one worker's leases that expired and jobctl's reclaim took back."""

    worker: str | None
    jobs: int
    reclaims: int
    first_expiry: dt.datetime | None
    last_expiry: dt.datetime | None
    first_reclaim: dt.datetime
    last_reclaim: dt.datetime


class ExpiredTotals(TypedDict):
    """``report``: every worker's expired leases, counted by the server."""

    workers: int
    jobs: int
    reclaims: int


class OtherReclaimer(TypedDict):
    """``report``: a role whose changes the history records as reclaimed, not being jobctl's
    reclaim of an expired lease."""

    db_role: str | None
    changes: int
    jobs: int
    live_leases: int  # changes of a job whose lease was still live
    first_at: dt.datetime
    last_at: dt.datetime


class OtherReclaims(TypedDict):
    """``report``: the changes recorded as reclaimed that are not counted, by role."""

    roles: list[OtherReclaimer]
    all_roles: int
    changes: int


class ReclaimGroup(TypedDict):
    """``report``: what one actor's reclaims did (the status they left the jobs in)."""

    actor: str | None
    to_status: str | None
    reclaims: int
    jobs: int
    first_at: dt.datetime
    last_at: dt.datetime


class RepeatedReclaim(TypedDict):
    """``report``: a job reclaimed more than once, and the workers that lost it."""

    id: Any
    reclaims: int
    workers: str | None


class PeopleGroup(TypedDict):
    """``report``: what one person did for one reason (requeued, failed, changed a policy)."""

    actor: str | None
    event: str
    reason: str | None
    jobs: int
    ids: list[Any] | None  # the first ten
    first_at: dt.datetime
    last_at: dt.datetime
    db_roles: str | None


class AwaitingReview(TypedDict):
    """``report``: the jobs waiting for a human, by why, and the longest waiting."""

    jobs: int
    by_why: dict[str, int]
    oldest: list[ReviewRow]


class QueueLatency(TypedDict):
    """``report``: the returns to the queue in the window, and the queue now."""

    returned: int
    claimed: int
    waiting: int
    unknown: int  # the history cannot tell (completed under the default history)
    p50_s: float | None
    p95_s: float | None
    max_s: float | None
    longest_waiting_s: float | None
    ready: int
    oldest_ready_s: float | None


class PausesSeen(TypedDict):
    """A report's pauses: the kinds and queues paused now (``pause_waiting``'s rows), and the
    pauses and resumes in the window, oldest first (``pause_events_listed``'s rows)."""

    now: list[Row]
    events: list[Row]


class IncidentReport(TypedDict):
    """``jobctl report``: an incident on one page (``-o json`` gives it as it is)."""

    table: str
    since: dt.datetime | None  # None: from the history's start
    until: dt.datetime
    expired: list[ExpiredGroup]
    expired_totals: ExpiredTotals
    not_jobctl_reclaims: OtherReclaims
    still_expired: int
    no_lease: int  # processing jobs with no lease now (reclaim never touches them)
    reclaims: list[ReclaimGroup]
    reclaim_groups: int
    reclaimed_repeatedly: list[RepeatedReclaim]
    reclaimed_repeatedly_jobs: int
    people: list[PeopleGroup]
    people_groups: int
    awaiting_review: AwaitingReview
    latency: QueueLatency
    parked: str  # the table's status values: what reclaim parks in, and queued
    queued: str
    pauses: PausesSeen  # the kinds and queues whose claim was paused (jobctl pause)

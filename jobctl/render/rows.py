"""The columns a table shows of each row shape (``contract/shapes``), in order: a
``*_COLUMNS`` list is what a table shows of a shape; JSON always carries every key, and
``-o csv``/``tsv`` every key too (a ``*_KEYS`` list), whatever the rows.
"""

from __future__ import annotations

from typing import Any

from jobctl.contract import shapes


def keys(shape: type) -> list[str]:
    """A row shape's keys (``contract/shapes``), in the order it declares them."""
    return list(shape.__annotations__)


# ---------------------------------------------------------------- what machine formats carry
# every key JSON carries of a row of each shape, in JSON's order: the header of -o csv/tsv,
# the same with no row as with many (output.Section.keys); kind and queue after the id where
# the table maps them (with_optional). tests/integration/test_formats.py holds each to the
# rows the commands print.
STUCK_KEYS = keys(shapes.LeaseRow)
_LAG = [k for k in keys(shapes.AtRiskRow) if k not in STUCK_KEYS]
_AT = STUCK_KEYS.index("lease_state") + 1  # the statement gives the lag after the state
AT_RISK_KEYS = [*STUCK_KEYS[:_AT], *_LAG, *STUCK_KEYS[_AT:]]
RECLAIM_KEYS = keys(shapes.ReclaimRow)
REVIEW_KEYS = keys(shapes.ReviewRow)
JOB_EVENT_KEYS = keys(shapes.JobEvent)
EVENT_KEYS = keys(shapes.Event)
ATTEMPT_KEYS = keys(shapes.Attempt)
MANUAL_KEYS = keys(shapes.ManualResult)
# a job as a write reads it before it decides (quarantine's dry run; requeue/fail on a
# filter, which adds kind and queue where mapped, then its lease and whether it awaits review)
READ_BEFORE_KEYS = [
    "id",
    "status",
    "reserved_by",
    "attempt_token",
    "attempts",
    "max_attempts",
    "reclaim_count",
    "recovery_policy",
    "effective_policy",
    "last_error",
    "updated_at",
    "row_version",
]
BULK_KEYS = [*READ_BEFORE_KEYS, "lease_expires_at", "lease_state", "awaiting_review"]
# a policy recorded for a kind or queue (policy --list)
KIND_POLICY_KEYS = ["dimension", "value", "policy", "reason", "actor", "db_role", "set_at"]


def bulk_keys(optional: Any) -> list[str]:
    """``BULK_KEYS`` with the optional keys ``optional`` (rows, or the keys) carries, after
    the row's version, where the statement gives them."""
    found = with_optional(["id"], optional)[1:]
    at = BULK_KEYS.index("row_version") + 1
    return [*BULK_KEYS[:at], *found, *BULK_KEYS[at:]]


# what the job is, when the table maps it; its priority (stuck's rows), when the table keeps one
OPTIONAL_KEYS = ("kind", "queue", "priority")
# those a reclaim row carries (kind and queue where mapped, never the priority): across
# targets, whose mappings differ, reclaim's header holds both, empty where a target maps none
RECLAIM_OPTIONAL_KEYS = ("kind", "queue")


def with_optional(columns: list[str], found: Any) -> list[str]:
    """``columns`` with the optional keys (kind, queue, priority) after the id: those that
    ``found`` (rows, or the keys themselves) carries."""
    keys = set(found) if all(isinstance(k, str) for k in found) else {k for r in found for k in r}
    extra = [k for k in OPTIONAL_KEYS if k in keys and k not in columns]
    if not extra:
        return list(columns)
    at = columns.index("id") + 1 if "id" in columns else 0
    return [*columns[:at], *extra, *columns[at:]]


STUCK_COLUMNS = [
    "id",
    "reserved_by",
    "recovery_policy",
    "effective_policy",
    "attempts",
    "max_attempts",
    "reclaim_count",
    "lease_expires_at",
    "lease_overdue_s",
    "heartbeat_age_s",
    "action",
    "lease_state",
    "claimed_age_s",
]
AT_RISK_COLUMNS = [*STUCK_COLUMNS, "worker_heartbeat_lag_s"]
RECLAIM_COLUMNS = [
    "id",
    "reserved_by",
    "recovery_policy",
    "effective_policy",
    "attempts",
    "max_attempts",
    "lease_overdue_s",
    "action",
    "applied",
    "skipped",
]
MANUAL_COLUMNS = [
    "id",
    "outcome",
    "detail",
    "status_before",
    "reserved_by",
    "lease_state",
    "attempt_token",
]
PREVIEW_COLUMNS = [  # a job an operator write is about to change (and quarantine's dry run)
    "id",
    "status",
    "reserved_by",
    "attempts",
    "max_attempts",
    "reclaim_count",
    "recovery_policy",
    "effective_policy",
    "lease_state",
    "attempt_token",
]
REVIEW_COLUMNS = [
    "id",
    "why",
    "last_worker",
    "reclaimed_at",
    "waited_s",
    "attempts",
    "max_attempts",
    "reclaim_count",
    "last_error",
]
# a pause of a kind or queue (jobctl pause --list; the rows of ops/pause.listed)
PAUSE_COLUMNS = [
    "dimension",
    "value",
    "reason",
    "actor",
    "db_role",
    "paused_at",
    "paused_s",
    "waiting",
    "claims_running",
    "claims_since",
    "claims_seen",
]
JOB_EVENT_COLUMNS = [
    "at",
    "id",
    "event",
    "from_status",
    "to_status",
    "attempt",
    "worker",
    "actor",
    "db_role",
    "reason",
]
EVENT_COLUMNS = [
    "at",
    "event",
    "from_status",
    "to_status",
    "attempt",
    "worker",
    "actor",
    "reason",
    "db_role",
    "claimed",
]
ATTEMPT_COLUMNS = [
    "attempt",
    "worker",
    "claimed_at",
    "heartbeats",
    "late_heartbeats",  # the default history counts only heartbeats after half the lease
    "last_heartbeat_at",
    "max_heartbeat_gap_s",
    "ended_at",
    "outcome",
    "attempt_token",
]
HISTORY_HEAD_COLUMNS = [
    "id",
    "status",
    "lease_state",
    "attempts",
    "max_attempts",
    "reclaim_count",
    "recovery_policy",
    "last_error",
]
SUMMARY_WORKER_COLUMNS = [
    "worker",
    "processing",
    "expired",
    "expired_manual",
    "expiring_soon",
    "first_expiry",
    "last_expiry",
    "last_seen_at",
    "heartbeat_lag_s",
]
SUMMARY_GROUP_COLUMNS = [  # summary --by: after the group's own column (kind, queue, ...)
    "processing",
    "live",
    "expiring_soon",
    "stuck",
    "stuck_manual",
    "no_lease",
    "awaiting_review",
    "ready",
    "oldest_ready_s",
]
BULK_COLUMNS = [  # requeue / fail on a filter: the jobs it matched, before anything is done
    "id",
    "status",
    "reserved_by",
    "recovery_policy",
    "attempts",
    "max_attempts",
    "reclaim_count",
    "lease_state",
    "last_error",
]

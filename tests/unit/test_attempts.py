"""The history's reading logic, without a database: live attempt, merging, derived events."""

from __future__ import annotations

import datetime as dt
import uuid

from jobctl.ops import attempts as job_history

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
S = dt.timedelta(seconds=1)


def stored(token, *, ended=True, heartbeats=0, stats="late", gap=None, outcome="completed"):
    return {
        "attempt": 1,
        "attempt_token": token,
        "worker": "w1",
        "claimed_at": T0,
        "heartbeats": heartbeats,
        "last_heartbeat_at": T0 + 10 * S,
        "max_heartbeat_gap_s": gap,
        "ended_at": T0 + 20 * S if ended else None,
        "outcome": outcome if ended else None,
        "lease_s": 30.0,
        "lease_expires_at": T0 + 40 * S,
        "heartbeat_stats": stats,
        "ended_by": "worker_role",
    }


def job(token, *, stats_token=None, heartbeats=None, gap=None):
    return {
        "id": 1,
        "status": "processing",
        "attempts": 2,
        "attempt_token": token,
        "reserved_by": "w2",
        "reserved_at": T0 + 30 * S,
        "heartbeat_at": T0 + 50 * S,
        "lease_expires_at": T0 + 80 * S,
        "jobctl_attempt": stats_token,
        "jobctl_heartbeats": heartbeats,
        "jobctl_max_gap": gap,
        "jobctl_lease": None,
    }


def test_live_attempt_from_the_row():
    token = uuid.uuid4()
    live = job_history.live_attempt(job(token), "late")
    assert live is not None and live["ended_at"] is None and live["worker"] == "w2"
    assert live["heartbeats"] is None and live["late_heartbeats"] == 0
    assert live["lease_s"] == 30.0  # lease_expires_at - heartbeat_at
    assert live["max_heartbeat_gap_s"] is None
    counted = job_history.live_attempt(
        job(token, stats_token=token, heartbeats=2, gap=20 * S), "late"
    )
    assert counted["late_heartbeats"] == 2 and counted["max_heartbeat_gap_s"] == 20.0
    stale = job_history.live_attempt(job(token, stats_token=uuid.uuid4(), heartbeats=5), "exact")
    assert stale["heartbeats"] == 0  # statistics of another attempt are not this one's
    # a table switched to audit keeps the columns, unwritten: the values of the switch's time
    left = job_history.live_attempt(
        job(token, stats_token=token, heartbeats=2, gap=20 * S), "audit"
    )
    assert left["max_heartbeat_gap_s"] is None and left["heartbeat_stats"] == "none"
    assert job_history.live_attempt(job(token) | {"status": "done"}, "late") is None


def test_version_1_open_row_is_continued_by_its_end():
    token = uuid.uuid4()
    opened = stored(token, ended=False, heartbeats=4, stats=None, gap=5.0)
    closed = stored(token, heartbeats=1, stats="exact", gap=9.0)
    (merged,) = job_history.merge([opened, closed], None)
    assert merged["heartbeats"] == 5 and merged["max_heartbeat_gap_s"] == 9.0
    assert merged["outcome"] == "completed"
    (late,) = job_history.merge([opened, stored(token, heartbeats=0, stats="late")], None)
    assert late["heartbeats"] is None and late["max_heartbeat_gap_s"] == 5.0


def test_claims_and_completions_are_derived_once():
    first, second = uuid.uuid4(), uuid.uuid4()
    attempts = job_history.merge([stored(first)], job_history.live_attempt(job(second), "late"))
    reclaim = {
        "at": T0 + 25 * S,
        "event": "requeued",
        "from_status": "failed",
        "to_status": "queued",
        "attempt": 1,
        "attempt_token": first,
        "worker": "w1",
        "actor": "alice",
        "reason": "x",
        "event_id": 7,
    }
    kinds = [e["event"] for e in job_history.events([reclaim], attempts, 100)]
    assert kinds == ["claimed", "completed", "requeued", "claimed"]
    version_1 = {**reclaim, "at": T0, "event": "claimed", "event_id": 1}
    kinds = [e["event"] for e in job_history.events([version_1, reclaim], attempts, 100)]
    assert kinds == ["claimed", "completed", "requeued", "claimed"]  # not twice
    assert [e["event"] for e in job_history.events([reclaim], attempts, 2)] == [
        "requeued",
        "claimed",
    ]


def test_a_completion_the_default_mode_did_not_record_is_told_from_the_row():
    done_row = {"status": "completed", "attempts": 2, "finished_at": T0 + 60 * S}
    reclaimed = stored(uuid.uuid4(), stats="transitions", outcome="reclaimed")
    attempt = job_history.unrecorded_completion(done_row, [reclaimed], [], "completed")
    assert attempt is not None
    assert (attempt["attempt"], attempt["outcome"], attempt["ended_at"]) == (
        2,
        "completed",
        T0 + 60 * S,
    )
    assert attempt["worker"] is None and attempt["attempt_token"] is None
    assert attempt["heartbeats"] is None and attempt["late_heartbeats"] is None
    (event,) = [
        e for e in job_history.events([], [reclaimed, attempt], 0) if e["event"] == "completed"
    ]
    assert event["at"] == T0 + 60 * S and event["worker"] is None
    # whatever the mode now (a switch to late or exact does not rewrite the past); not for a
    # job that is not done, not twice, not when an event moved it to done, not without a time
    assert job_history.unrecorded_completion(done_row, [], [], "completed") is not None
    assert job_history.unrecorded_completion(done_row, [], [], "done") is None
    recorded = stored(uuid.uuid4()) | {"attempt": 2}
    assert job_history.unrecorded_completion(done_row, [recorded], [], "completed") is None
    moved = {"event": "status_changed", "to_status": "completed"}
    assert job_history.unrecorded_completion(done_row, [], [moved], "completed") is None
    untimed = done_row | {"finished_at": None}
    assert job_history.unrecorded_completion(untimed, [], [], "completed") is None


def test_a_live_lease_starts_at_the_later_of_its_beat_and_claim():
    """A heartbeat_at an earlier attempt left, older than the claim, starts no lease."""
    stale = job(uuid.uuid4()) | {"heartbeat_at": T0 - 3600 * S}
    live = job_history.live_attempt(stale, "late")
    assert live is not None and live["lease_s"] == 50.0  # lease_expires_at - reserved_at

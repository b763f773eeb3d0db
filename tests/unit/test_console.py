"""ops/console's pure rules: what makes a stuck row changed since the screen read it, and
several targets' snapshots as one."""

from __future__ import annotations

import datetime as dt
import uuid

from jobctl.ops import console

T0 = dt.datetime(2026, 12, 2, 5, 0, tzinfo=dt.timezone.utc)
TOKEN = uuid.UUID("0f3c1a2e-0000-4000-8000-000000000001")


def seen(**changes):
    row = {
        "id": 7,
        "status": "processing",
        "attempt_token": TOKEN,
        "reserved_by": "web-1",
        "attempts": 1,
        "reclaim_count": 0,
        "recovery_policy": "auto",
        "lease_expires_at": T0,
    }
    return row | changes


def test_the_same_row_read_again_is_unchanged():
    # manual_read gives the token as a UUID and the time in the session's zone: the same
    now = seen(lease_expires_at=T0.astimezone(dt.timezone(dt.timedelta(hours=9))))
    assert console.since_seen(seen(), now | {"row_version": "123", "last_error": None}) is None


def test_what_changed_is_named():
    assert console.since_seen(seen(), None) == "job no longer exists; nothing written"
    assert console.since_seen(seen(), seen(status="queued")).startswith("now queued")
    heartbeat = seen(lease_expires_at=T0 + dt.timedelta(seconds=30))
    assert console.since_seen(seen(), heartbeat).startswith("lease_expires_at changed")
    other = seen(attempt_token=uuid.uuid4(), reserved_by="web-2", attempts=2)
    assert console.since_seen(seen(), other).startswith(
        "attempt_token, reserved_by, attempts changed"
    )


def snapshot(stuck, review, **counts):
    base = {"expired": 0, "expiring": 0, "awaiting_review": 0, "ready": 0}
    return console.Snapshot(
        stuck=stuck,
        review=review,
        oldest_ready_s=counts.pop("oldest", None),
        read_at=T0,
        **(base | counts),
    )


def test_targets_merged_tagged_ordered_and_added_up():
    a = snapshot(
        [{"id": 1, "lease_expires_at": T0}],
        [{"id": 9, "waited_s": 5.0}],
        expired=1,
        awaiting_review=1,
        ready=3,
        oldest=10.0,
    )
    b = snapshot(
        [{"id": 1, "lease_expires_at": T0 - dt.timedelta(minutes=1)}],
        [{"id": 8, "waited_s": 50.0}],
        expired=4,
        awaiting_review=2,
        oldest=70.0,
    )
    both = console.merged([("a", a), ("b", b)])
    assert [(r["target"], r["id"]) for r in both.stuck] == [("b", 1), ("a", 1)]
    assert [(r["target"], r["id"]) for r in both.review] == [("b", 8), ("a", 9)]
    assert (both.expired, both.awaiting_review, both.ready) == (5, 3, 3)
    assert both.oldest_ready_s == 70.0
    assert both.more_stuck == 3 and both.more_review == 1  # counted, not read


def test_a_lost_database_is_retried_with_backoff_as_the_reclaimer_does():
    lost = console.Lost.at(100.0, "database unavailable: the connection is lost")
    assert not lost.is_due(100.2) and lost.is_due(100.5)  # first try after half a second
    waits = []
    now = 100.5
    for _ in range(9):
        lost.failed(now, "cannot connect: refused")
        waits.append(lost.due - now)
        now = lost.due
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]  # doubled, capped
    assert lost.why == "cannot connect: refused" and lost.tries == 9
    assert lost.line(now - 4) == "lost 2m28s, try 10 in 4s"  # since the loss, to the next

"""The worker-side lease API: the lease design's statements, fenced by the attempt token."""

from __future__ import annotations

import psycopg
import pytest
from helpers import add_jobs

from jobctl import lease


@pytest.fixture
def worker(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        yield lease.Worker(c, "w1", lease_seconds=30)


def test_claim_heartbeat_complete(conn, worker):
    add_jobs(conn, 2)
    job = worker.claim()
    assert job is not None and job.attempt == 1
    renewed = worker.heartbeat(job)
    assert renewed.lease_expires_at >= job.lease_expires_at
    worker.complete(renewed)
    row = conn.execute("SELECT * FROM jobs WHERE id = %s", (job.id,)).fetchone()
    # the completing attempt's token stays on the done row: its proof after a lost acknowledgement
    assert row["status"] == "done" and row["attempt_token"] == job.attempt_token
    assert row["finished_at"] is not None


def test_each_claim_gets_a_new_token(conn, worker):
    add_jobs(conn, 2)
    first, second = worker.claim(), worker.claim()
    assert first and second and first.attempt_token != second.attempt_token
    assert worker.claim() is None


def test_completion_retried_after_lost_ack_is_not_a_lost_lease(conn, worker):
    add_jobs(conn, 1)
    job = worker.claim()
    assert job is not None
    worker.complete(job)
    worker.complete(job)  # the retry of a completion whose acknowledgement was lost


def test_stale_attempt_is_fenced_out(conn, dsn, worker):
    add_jobs(conn, 1)
    job = worker.claim()
    assert job is not None
    conn.execute("UPDATE jobs SET lease_expires_at = now() - interval '1s'")
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT 1").fetchone()
    from jobctl.cli import main as cli

    assert cli.main(["--dsn", dsn, "reclaim", "--commit", "--yes", "-o", "json"]) == 0
    newer = lease.Worker(worker.conn, "w2").claim()  # the job, claimed again
    assert newer is not None and newer.id == job.id and newer.attempt == 2
    for call in (worker.heartbeat, worker.complete):
        with pytest.raises(lease.LeaseLost):
            call(job)
    with pytest.raises(lease.LeaseLost):
        worker.fail(job, "late")
    assert conn.execute("SELECT status FROM jobs").fetchone()["status"] == "processing"


def test_refunded_attempt_completed_by_another_is_lost_for_the_stale_one(conn, dsn, worker):
    # Worker A's lease runs out; reclaim --refund-attempt gives the attempt back (attempts
    # 1 -> 0); worker B claims it (attempt 1 again, a new token) and completes it. A's late
    # complete must raise LeaseLost: the same attempt number is no proof, only the token is.
    add_jobs(conn, 1)
    stale = worker.claim()
    assert stale is not None and stale.attempt == 1
    conn.execute("UPDATE jobs SET lease_expires_at = now() - interval '1s'")
    from jobctl.cli import main as cli

    argv = ["--dsn", dsn, "reclaim", "--commit", "--yes", "--refund-attempt", "-o", "json"]
    assert cli.main(argv) == 0
    assert conn.execute("SELECT attempts FROM jobs").fetchone()["attempts"] == 0
    with psycopg.connect(dsn, autocommit=True) as c:
        other = lease.Worker(c, "w2")
        live = other.claim()
        assert live is not None and live.id == stale.id and live.attempt == stale.attempt
        other.complete(live)
        other.complete(live)  # its own retry after a lost acknowledgement: normal
    with pytest.raises(lease.LeaseLost):
        worker.complete(stale)
    row = conn.execute("SELECT status, attempt_token FROM jobs").fetchone()
    assert row["status"] == "done" and row["attempt_token"] == live.attempt_token


def test_fail_retries_while_attempts_remain(conn, worker):
    add_jobs(conn, 1, max_attempts=2)
    assert worker.fail(worker.claim(), "boom") == "queued"
    assert worker.fail(worker.claim(), "boom again") == "failed"


def test_needs_autocommit(dsn):
    with psycopg.connect(dsn) as c, pytest.raises(ValueError, match="autocommit"):
        lease.Worker(c, "w1")

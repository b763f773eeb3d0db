"""Semantics that vary between applications, named in the mapping, on a table of OCA
queue_job's semantics (shapes.QUEUE_JOB): a max_attempts value that means no limit
(--unlimited-max-attempts, its max_retries = 0), which the worker's fail, reclaim's action,
review's why and explain all read from one judgement (attempts_remain); and a cancelled status
of its own (--status cancelled=cancelled) that jobctl cancel writes, which the history records
as a cancel and every view counts as final. Each behaves as before without its setting. And
what the history calls a requeue jobctl did not make: a lease worker's retry (it clears the
token it was fenced on), or another writer's (requeued_by_other)."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import rows
from shapes import QUEUE_JOB

from jobctl import lease

TABLE = ("--table", QUEUE_JOB.table)


@pytest.fixture
def queue(empty_dsn, run):
    """The table made and mapped (as its users map it); returns apply(*more options)."""
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        c.execute(QUEUE_JOB.ddl)

    def apply(*more: str) -> None:
        applied = run(*TABLE, "schema", "apply", "--yes", *QUEUE_JOB.mapping_args(), *more)
        assert applied.code == 0, applied.err

    apply()
    return apply


@pytest.fixture
def conn(empty_dsn):
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as c:
        yield c


def add(conn, *, retry: int, max_retries: int) -> int:
    return conn.execute(
        "INSERT INTO job_queue (retry, max_retries) VALUES (%s, %s) RETURNING id",
        (retry, max_retries),
    ).fetchone()["id"]


def failed_by_workers(conn) -> dict[int, str]:
    """Two jobs claimed and failed by lease.Worker: one of max_retries 0 that ran 5 times,
    one of max_retries 3 on its third attempt; what each became, by max_retries."""
    ids = {0: add(conn, retry=5, max_retries=0), 3: add(conn, retry=2, max_retries=3)}
    worker = lease.Worker(conn, "101", lease_seconds=30, table=QUEUE_JOB.table)
    held = {job.id: job for job in iter(worker.claim, None)}
    return {m: worker.fail(held[i], "boom", retry_delay=0) for m, i in ids.items()}


def test_without_the_setting_zero_is_a_limit(conn, queue):
    assert failed_by_workers(conn) == {0: "failed", 3: "failed"}


def test_a_worker_retries_for_ever_where_zero_means_no_limit(conn, queue):
    queue("--unlimited-max-attempts", "0")
    assert failed_by_workers(conn) == {0: "pending", 3: "failed"}


def expired(conn, *, max_retries: int, claimed_ago: str = "1 minute") -> int:
    """A job of max_retries claimed by a worker whose lease ran out, on its sixth attempt."""
    job = add(conn, retry=5, max_retries=max_retries)
    worker = lease.Worker(conn, "102", lease_seconds=-1, table=QUEUE_JOB.table)
    assert worker.claim() is not None
    conn.execute(
        "UPDATE job_queue SET date_started = now() - %s::interval WHERE id = %s",
        (claimed_ago, job),
    )
    return job


@pytest.mark.parametrize("unlimited", [False, True])
def test_reclaim_requeues_a_job_with_no_limit(conn, queue, run, unlimited):
    if unlimited:
        queue("--unlimited-max-attempts", "0")
    job = expired(conn, max_retries=0)
    (row,) = json.loads(run(*TABLE, "stuck", "-o", "json").out)
    assert row["action"] == ("requeue" if unlimited else "fail")
    done = run(*TABLE, "reclaim", "--commit", "--yes")
    assert done.code == 0, done.err
    state = conn.execute("SELECT state FROM job_queue WHERE id = %s", (job,)).fetchone()
    assert state["state"] == ("pending" if unlimited else "failed")


def test_review_and_explain_read_no_limit(conn, queue, run):
    queue("--unlimited-max-attempts", "0")
    job = expired(conn, max_retries=0, claimed_ago="2 hours")
    done = run(*TABLE, "reclaim", "--commit", "--yes", "--park-older-than", "1h")
    assert done.code == 0, done.err
    (waiting,) = json.loads(run(*TABLE, "review", "-o", "json").out)
    # parked for its old claim, not for attempts used up (6 of a max_retries of 0)
    assert waiting["id"] == job and waiting["why"] == "parked"
    told = run(*TABLE, "explain", str(job)).out
    assert "6 attempt(s) used, no limit (max_attempts 0)" in " ".join(told.split())
    # and without the setting: used up
    queue("--unlimited-max-attempts", "")
    (waiting,) = json.loads(run(*TABLE, "review", "-o", "json").out)
    assert waiting["why"] == "attempts_exhausted"
    assert "6 of 0 attempts used" in " ".join(run(*TABLE, "explain", str(job)).out.split())


def test_the_setting_is_recorded_merged_and_checked(conn, queue, run):
    queue("--unlimited-max-attempts", "0")
    recorded = conn.execute("SELECT mapping FROM jobctl.tables").fetchone()["mapping"]
    assert recorded["unlimited_max_attempts"] == 0
    # another part named keeps it; '' takes it away
    assert run(*TABLE, "schema", "apply", "--yes", "--status", "queued=pending").code == 0
    checked = run(*TABLE, "schema", "check")
    assert "max_retries = 0 means no limit on attempts" in checked.out
    queue("--unlimited-max-attempts", "")
    recorded = conn.execute("SELECT mapping FROM jobctl.tables").fetchone()["mapping"]
    assert "unlimited_max_attempts" not in recorded
    refused = run(*TABLE, "schema", "apply", "--yes", "--unlimited-max-attempts", "never")
    assert refused.code == 2 and len(refused.err.strip().splitlines()) == 1
    assert "--unlimited-max-attempts 'never'" in refused.err


def running(conn) -> tuple[int, lease.Worker, lease.Claim]:
    job = add(conn, retry=0, max_retries=5)
    worker = lease.Worker(conn, "103", lease_seconds=300, table=QUEUE_JOB.table)
    held = worker.claim()
    assert held is not None and held.id == job
    return job, worker, held


@pytest.mark.parametrize("mapped", [False, True])
def test_cancel_writes_the_tables_own_cancelled_status(conn, queue, run, mapped):
    if mapped:
        queue("--status", "cancelled=cancelled")
    job, worker, held = running(conn)
    done = run(*TABLE, "cancel", str(job), "--reason", "customer asked", "--yes", "-o", "json")
    assert done.code == 0, done.err
    (row,) = json.loads(done.out)
    became = "cancelled" if mapped else "failed"
    assert row["outcome"] == "cancelled" and row["detail"] == f"started -> {became}", row
    state = conn.execute("SELECT state, exc_info FROM job_queue WHERE id = %s", (job,)).fetchone()
    assert state == {"state": became, "exc_info": "customer asked"}
    with pytest.raises(lease.LeaseLost):  # the fence: the worker's attempt is gone
        worker.heartbeat(held)
    (event,) = conn.execute(
        "SELECT event, from_status, to_status, reason FROM jobctl.events WHERE job_id = %s",
        (str(job),),
    ).fetchall()
    assert event == {
        "event": "cancelled",
        "from_status": "started",
        "to_status": became,
        "reason": "customer asked",
    }
    # a final state: counted as its own status, fail refuses it as it refuses a failed job
    summary = json.loads(run(*TABLE, "summary", "-o", "json").out)
    assert summary["status"].get(became) == 1, summary["status"]
    refused = run(*TABLE, "fail", str(job), "--reason", "x", "--yes", "-o", "json")
    (row,) = json.loads(refused.out)
    assert refused.code == 2 and row["outcome"] == "refused"
    assert row["detail"] == f"job is already {became}"


def test_the_cancelled_status_is_recorded_checked_and_requeued(conn, queue, run):
    queue("--status", "cancelled=cancelled")
    recorded = conn.execute("SELECT mapping FROM jobctl.tables").fetchone()["mapping"]
    assert recorded["statuses"]["cancelled"] == "cancelled"
    checked = run(*TABLE, "schema", "check")
    assert checked.code == 0, checked.out
    assert "jobctl cancel gives jobs cancelled" in checked.out
    job, _, _ = running(conn)
    assert run(*TABLE, "cancel", str(job), "--reason", "x", "--yes").code == 0
    requeued = run(*TABLE, "requeue", str(job), "--reason", "after all", "--yes")
    assert requeued.code == 0, requeued.err
    state = conn.execute("SELECT state FROM job_queue WHERE id = %s", (job,)).fetchone()
    assert state["state"] == "pending"
    # one value for two parts is refused in one line
    both = run(*TABLE, "schema", "apply", "--yes", "--status", "cancelled=pending")
    assert both.code == 2 and len(both.err.strip().splitlines()) == 1, both.err
    assert "would both be the status value 'pending'" in both.err


def test_events_tell_a_sweepers_requeue_from_a_lease_workers_retry(conn, queue, run):
    retried, worker, held = running(conn)
    assert worker.fail(held, "boom", retry_delay=3600) == "pending"  # (not claimed next)
    swept, _, _ = running(conn)
    # the application's sweeper by age (OCA's requeue of dead jobs): the token stays
    conn.execute("UPDATE job_queue SET date_started = now() - interval '1 hour'")
    assert (
        conn.execute(
            "UPDATE job_queue SET state = 'pending', retry = retry + 1 WHERE state = 'started' "
            "AND date_started < now() - interval '10 minutes'"
        ).rowcount
        == 1
    )
    # a job its own code claimed with no lease, requeued by the same sweeper
    unleased = add(conn, retry=0, max_retries=5)
    conn.execute("UPDATE job_queue SET state = 'started' WHERE id = %s", (unleased,))
    conn.execute("UPDATE job_queue SET state = 'pending' WHERE id = %s", (unleased,))
    seen = json.loads(run(*TABLE, "events", "--oldest-first", "-o", "json").out)
    told = {e["id"]: e["event"] for e in seen if e["from_status"] == "started"}
    assert told == {
        retried: "retried",
        swept: "requeued_by_other",
        unleased: "requeued_by_other",
    }, seen
    only = json.loads(run(*TABLE, "events", "--event", "requeued_by_other", "-o", "json").out)
    assert sorted(e["id"] for e in only) == sorted([swept, unleased])
    story = " ".join(run(*TABLE, "explain", str(swept)).out.split())
    assert "not by jobctl nor by that worker's fenced fail" in story, story
    assert "worker 103 gave it up" not in story

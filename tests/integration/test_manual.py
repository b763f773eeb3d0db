"""Manual requeue and fail: eligibility, the fence, locks, concurrency, audit."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time

import psycopg
import pytest
from helpers import add_jobs, claim_all, snapshot

from jobctl import db, lease
from jobctl.db import session
from jobctl.ops import manual
from jobctl.schema import history


def status_of(conn, job_id: int) -> str:
    return conn.execute("SELECT status FROM jobs WHERE id = %s", (job_id,)).fetchone()["status"]


def make(conn, dsn, state: str, policy: str = "manual") -> int:
    """One job in ``state``: queued, expired, live, failed, done."""
    (job_id,) = add_jobs(conn, 1, policy=policy)
    conn.execute(
        "UPDATE jobs SET available_at = now() + interval '1 day' WHERE id <> %s "
        "AND status = 'queued'",
        (job_id,),
    )
    if state == "queued":
        return job_id
    (claim,) = claim_all(dsn, 1, lease_seconds=600 if state == "live" else -60)
    assert claim.id == job_id
    if state in ("done", "failed"):
        with psycopg.connect(dsn, autocommit=True) as c:
            worker = lease.Worker(c, "w1")
            if state == "done":
                worker.complete(claim)
            else:
                conn.execute("UPDATE jobs SET max_attempts = attempts WHERE id = %s", (job_id,))
                assert worker.fail(claim, "boom") == "failed"
    return job_id


ELIGIBILITY = [
    # action, state, policy, extra args, outcome, exit code
    ("requeue", "expired", "manual", [], "requeued", 0),
    ("requeue", "expired", "auto", [], "requeued", 0),
    ("requeue", "live", "manual", [], "refused", 2),
    ("requeue", "live", "manual", ["--force"], "requeued", 0),
    ("requeue", "failed", "manual", [], "requeued", 0),
    ("requeue", "done", "manual", [], "refused", 2),
    ("requeue", "done", "manual", ["--force"], "refused", 2),
    ("requeue", "queued", "manual", [], "refused", 2),
    ("fail", "expired", "manual", [], "failed", 0),
    ("fail", "live", "auto", [], "refused", 2),
    ("fail", "live", "auto", ["--force"], "failed", 0),
    ("fail", "failed", "manual", [], "refused", 2),
    ("fail", "queued", "manual", [], "failed", 0),
    ("fail", "done", "auto", [], "refused", 2),
]


@pytest.mark.parametrize(("action", "state", "policy", "extra", "outcome", "code"), ELIGIBILITY)
def test_eligibility(conn, dsn, run, action, state, policy, extra, outcome, code):
    job_id = make(conn, dsn, state, policy)
    before = snapshot(conn)
    result = run(action, str(job_id), "--reason", "ops decision", "--yes", *extra, "-o", "json")
    assert result.code == code, result.err
    (row,) = json.loads(result.out)
    assert row["outcome"] == outcome and row["id"] == job_id and row["detail"]
    if outcome in ("refused",):
        assert snapshot(conn) == before
    else:
        job = conn.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()
        assert job["status"] == ("queued" if action == "requeue" else "failed")
        assert job["attempt_token"] is None and job["lease_expires_at"] is None
        assert job["reclaim_count"] == 0  # manual actions are not reclaims
        if action == "fail":
            assert job["last_error"] == "ops decision" and job["finished_at"] is not None


def test_unknown_id_and_worst_exit_code(conn, dsn, run):
    expired = make(conn, dsn, "expired")
    done = make(conn, dsn, "done")
    result = run("requeue", str(expired), str(done), "999", "--yes", "-o", "json")
    outcomes = {r["id"]: r["outcome"] for r in json.loads(result.out)}
    assert outcomes == {expired: "requeued", done: "refused", 999: "not_found"}
    assert result.code == 1  # not_found (1) ranks above refused (2)


def test_forced_requeue_fences_out_the_displaced_worker(conn, dsn, run):
    add_jobs(conn, 1)
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "live-worker", lease_seconds=600)
        job = worker.claim()
        assert job is not None
        assert (
            run("requeue", str(job.id), "--force", "--yes", "--reason", "stuck in a loop").code == 0
        )
        with pytest.raises(lease.LeaseLost):
            worker.heartbeat(job)
        with pytest.raises(lease.LeaseLost):
            worker.complete(job)
    assert status_of(conn, job.id) == "queued"


def test_expect_token(conn, dsn, run):
    job_id = make(conn, dsn, "expired")
    token = str(conn.execute("SELECT attempt_token FROM jobs").fetchone()["attempt_token"])
    before = snapshot(conn)
    wrong = run(
        "requeue",
        str(job_id),
        "--expect-token",
        "00000000-0000-0000-0000-000000000000",
        "--yes",
        "-o",
        "json",
    )
    assert wrong.code == 3 and json.loads(wrong.out)[0]["outcome"] == "conflict"
    assert snapshot(conn) == before
    assert run("requeue", str(job_id), "--expect-token", token, "--yes").code == 0


@pytest.mark.parametrize("change", ["worker completes", "reclaimer reclaims"])
def test_change_between_read_and_write_is_a_conflict(conn, dsn, change):
    add_jobs(conn, 1)
    live = change == "heartbeat"
    (job,) = claim_all(dsn, 1, lease_seconds=600 if live else -60)
    s = session.connect(db.Settings(dsn=dsn, actor="tester@ci"))
    with s.conn:
        decision = manual.decide(s, job.id, "fail", force=live, expect_token=None)
        assert decision.outcome is None
        with psycopg.connect(dsn, autocommit=True) as other:  # the concurrent change
            if change == "worker completes":
                lease.Worker(other, "w1").complete(job)
            elif change == "heartbeat":
                lease.Worker(other, "w1").heartbeat(job)
            else:
                other.execute(
                    "UPDATE jobs SET status = 'queued', attempt_token = NULL, "
                    "reclaim_count = reclaim_count + 1"
                )
        before = snapshot(conn)
        result = manual.apply(s, decision, "fail", reason="x", delay=dt.timedelta(0))
    assert result.outcome == "conflict"
    assert snapshot(conn) == before


def test_a_heartbeat_between_read_and_a_forced_fail_is_the_same_attempt(conn, dsn):
    """fail --force on a live lease is a cancel: a heartbeat moves the row's version but not
    the attempt, so the write is fenced again on the row read anew, and taken."""
    add_jobs(conn, 1)
    (job,) = claim_all(dsn, 1, lease_seconds=600)
    s = session.connect(db.Settings(dsn=dsn, actor="tester@ci"))
    with s.conn:
        decision = manual.decide(s, job.id, "fail", force=True, expect_token=None)
        with psycopg.connect(dsn, autocommit=True) as other:
            lease.Worker(other, "w1").heartbeat(job)
        result = manual.apply(s, decision, "fail", reason="x", delay=dt.timedelta(0))
    assert result.outcome == "failed" and "attempt cancelled" in result.detail
    assert status_of(conn, job.id) == "failed"
    event = conn.execute("SELECT event FROM jobctl.events").fetchone()
    assert event["event"] == "cancelled"


def test_failed_rows_are_fenced_by_version_not_only_token(conn, dsn):
    """Two failed rows both have a NULL token: the version keeps a stale read from applying."""
    job_id = make(conn, dsn, "failed")
    s = session.connect(db.Settings(dsn=dsn, actor="tester@ci"))
    with s.conn:
        decision = manual.decide(s, job_id, "requeue", force=False, expect_token=None)
        # meanwhile: requeued, claimed, reclaimed and failed again (token NULL once more)
        conn.execute("UPDATE jobs SET last_error = 'failed again', updated_at = now()")
        result = manual.apply(s, decision, "requeue", reason=None, delay=dt.timedelta(0))
    assert result.outcome == "conflict"
    assert status_of(conn, job_id) == "failed"


@pytest.mark.slow
def test_eight_concurrent_requeues_one_wins(conn, dsn):
    job_id = make(conn, dsn, "failed")
    env = {**os.environ, "JOBCTL_DSN": dsn, "JOBCTL_ACTOR": "tester@ci"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobctl",
                "requeue",
                str(job_id),
                "--yes",
                "-o",
                "json",
                "--reason",
                f"operator {i}",
            ],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        for i in range(8)
    ]
    results = [(p.communicate(timeout=60), p.returncode) for p in procs]
    outcomes = sorted(json.loads(out)[0]["outcome"] for (out, _), _ in results)
    assert outcomes.count("requeued") == 1, outcomes
    assert set(outcomes) <= {"requeued", "conflict", "refused"}  # refused: already queued
    assert (
        conn.execute("SELECT count(*) AS n FROM jobctl.events WHERE event = 'requeued'").fetchone()[
            "n"
        ]
        == 1
    )


def test_row_lock_times_out_names_the_holder(conn, dsn, run):
    job_id = make(conn, dsn, "expired")
    holder = psycopg.connect(dsn)
    holder.execute("UPDATE jobs SET heartbeat_at = heartbeat_at WHERE id = %s", (job_id,))
    try:
        before = snapshot(conn)
        started = time.monotonic()
        result = run(
            "--lock-timeout", "300ms", "fail", str(job_id), "--reason", "x", "--yes", "-o", "json"
        )
        elapsed = time.monotonic() - started
        (row,) = json.loads(result.out)
        assert result.code == 1 and row["outcome"] == "locked"
        assert f"pid {holder.info.backend_pid}" in row["detail"]
        assert elapsed < 5
        assert snapshot(conn) == before
    finally:
        holder.close()


def test_audit_event_has_actor_reason_old_token(conn, dsn, run):
    job_id = make(conn, dsn, "expired")
    token = conn.execute("SELECT attempt_token FROM jobs").fetchone()["attempt_token"]
    assert (
        run(
            "--actor",
            "alice@laptop",
            "fail",
            str(job_id),
            "--reason",
            "refunded by support \x1b[31m",
            "--yes",
        ).code
        == 0
    )
    event = conn.execute("SELECT * FROM jobctl.events WHERE event = 'manually_failed'").fetchone()
    assert event["actor"] == "alice@laptop" and event["reason"].startswith("refunded by support")
    assert event["attempt_token"] == token and event["from_status"] == "processing"
    history = run("history", str(job_id))
    assert "\x1b" not in history.out and "\\x1b" in history.out  # escapes shown, not obeyed


def test_requeue_with_delay(conn, dsn, run):
    job_id = make(conn, dsn, "failed")
    assert run("requeue", str(job_id), "--delay", "5m", "--yes").code == 0
    wait = conn.execute(
        "SELECT extract(epoch FROM available_at - now()) AS s FROM jobs WHERE id = %s", (job_id,)
    ).fetchone()["s"]
    assert 290 < wait <= 300


def test_no_audit_trigger_no_manual_action(conn, dsn, run):
    """Without jobctl's trigger (even the audit-only one) an action could not be audited."""
    job_id = make(conn, dsn, "expired")
    conn.execute("DROP TRIGGER jobctl_history ON jobs")
    result = run("fail", str(job_id), "--reason", "x", "--yes")
    assert result.code == 1 and "schema apply" in result.err
    assert status_of(conn, job_id) == "processing"
    conn.execute(
        "CREATE TRIGGER jobctl_history BEFORE UPDATE ON jobs FOR EACH ROW WHEN (false) "
        f"EXECUTE FUNCTION jobctl.{history.function_name('public', 'jobs')}('late', '2')"
    )
    conn.execute("ALTER TABLE jobs DISABLE TRIGGER jobctl_history")
    result = run("fail", str(job_id), "--reason", "x", "--yes")
    assert result.code == 1 and "schema apply" in result.err

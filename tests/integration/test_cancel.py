"""jobctl cancel with real worker processes: a lease.Worker in another process holds a job and
heartbeats; cancel takes the attempt back; the worker's next heartbeat raises LeaseLost, its
completion is refused by the fence; the history, events and report name who and why; a
cancel racing the worker's completion on real concurrent connections: exactly one wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest
from helpers import add_jobs, jobctl_process, wait_until

# A worker in its own process: claims the one ready job, says which (and its backend), then
# either heartbeats every EVERY seconds until the attempt is taken back (then tries to
# complete anyway, as a worker that did not stop would), or (EVERY 0) waits for a line on
# stdin and completes at once. Each outcome is a JSON line on stdout.
WORKER = """
import json, sys, time
import psycopg
from jobctl import lease

dsn, every = sys.argv[1], float(sys.argv[2])
with psycopg.connect(dsn, autocommit=True) as conn:
    worker = lease.Worker(conn, "billing-7", lease_seconds=60)
    job = worker.claim()
    print(json.dumps({"id": job.id, "token": str(job.attempt_token),
                      "pid": conn.info.backend_pid}), flush=True)
    if every > 0:
        while True:
            time.sleep(every)
            try:
                job = worker.heartbeat(job)
            except lease.LeaseLost as exc:
                print(json.dumps({"heartbeat": str(exc)}), flush=True)
                break
    else:
        sys.stdin.readline()
    try:
        worker.complete(job)
        print(json.dumps({"complete": "done"}), flush=True)
    except lease.LeaseLost as exc:
        print(json.dumps({"complete": str(exc)}), flush=True)
"""


def start_worker(dsn: str, every: float) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, dsn, str(every)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else ""
    return proc, json.loads(line)


def said(proc: subprocess.Popen[str]) -> dict[str, str]:
    """What the worker printed after its claim, once it has exited."""
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return {k: v for line in out.splitlines() for k, v in json.loads(line).items()}


def cancel(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return jobctl_process(dsn, "--actor", "alice@oncall", "cancel", *args)


def one_ready_job(conn: psycopg.Connection[Any]) -> int:
    (job_id,) = add_jobs(conn, 1)
    return job_id


def test_a_cancelled_worker_stops_at_its_next_heartbeat(conn, dsn, run):
    job_id = one_ready_job(conn)
    proc, claim = start_worker(dsn, every=0.2)
    assert claim["id"] == job_id
    # the worker is alive and heartbeating: the lease is live, which is the point
    wait_until(
        lambda: (
            conn.execute("SELECT heartbeat_at FROM jobs WHERE id = %s", (job_id,)).fetchone()[
                "heartbeat_at"
            ]
            is not None
        ),
        what="a heartbeat",
    )
    done = cancel(dsn, str(job_id), "--reason", "payment provider down", "--yes", "-o", "json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["outcome"] == "cancelled" and row["status_before"] == "processing"
    assert row["lease_state"] == "live" and row["attempt_token"] == claim["token"]

    lost = said(proc)
    assert "taken back" in lost["heartbeat"] and "stop the work" in lost["heartbeat"]
    assert lost["heartbeat"].startswith(f"heartbeat: job {job_id} ")
    assert lost["complete"].startswith(f"complete: job {job_id} ")  # the fence: 0 rows

    job = conn.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert job["status"] == "failed" and job["last_error"] == "payment provider down"
    assert job["attempt_token"] is None and job["lease_expires_at"] is None
    assert job["reserved_by"] is None and job["finished_at"] is not None

    # the history: one cancelled event with the actor, the role and the reason
    (event,) = conn.execute(
        "SELECT * FROM jobctl.events WHERE job_id = %s AND event = 'cancelled'", (str(job_id),)
    ).fetchall()
    assert event["actor"] == "alice@oncall" and event["reason"] == "payment provider down"
    assert event["db_role"] and event["worker"] == "billing-7"
    assert (event["from_status"], event["to_status"]) == ("processing", "failed")
    assert str(event["attempt_token"]) == claim["token"]
    (attempt,) = conn.execute(
        "SELECT outcome FROM jobctl.attempts WHERE attempt_token = %s", (claim["token"],)
    ).fetchall()
    assert attempt["outcome"] == "cancelled"

    events = run("events", "--event", "cancelled", "-o", "json")
    assert events.code == 0, events.err
    (shown,) = json.loads(events.out)
    assert shown["id"] == job_id and shown["actor"] == "alice@oncall"
    assert shown["reason"] == "payment provider down" and shown["worker"] == "billing-7"

    report = run("report", "--since", "1h", "-o", "json")
    assert report.code == 0, report.err
    people = json.loads(report.out)["people"]
    assert [(p["actor"], p["event"], p["reason"], p["jobs"]) for p in people] == [
        ("alice@oncall", "cancelled", "payment provider down", 1)
    ]
    markdown = run("report", "--since", "1h")
    assert "alice@oncall" in markdown.out and "cancelled" in markdown.out

    story = run("explain", str(job_id))
    assert "cancelled the running attempt of worker billing-7" in story.out, story.out

    # a second cancel of the same id: the job no longer runs, refused (exit 2), nothing written
    again = cancel(dsn, str(job_id), "--reason", "again", "--yes", "-o", "json")
    assert again.returncode == 2, again.stderr
    (row,) = json.loads(again.stdout)
    assert row["outcome"] == "refused" and "not running" in row["detail"]
    # ... and with the attempt's token as the operator copied it: a conflict (exit 3)
    stale = cancel(dsn, str(job_id), "--reason", "again", "--expect-token", claim["token"], "--yes")
    assert stale.returncode == 3, stale.stderr
    count = conn.execute("SELECT count(*) AS n FROM jobctl.events WHERE event = 'cancelled'")
    assert count.fetchone()["n"] == 1


def test_cancel_refuses_what_does_not_run_and_needs_a_reason(conn, dsn, run):
    queued = one_ready_job(conn)
    refused = run("cancel", str(queued), "--reason", "x", "--yes", "-o", "json")
    assert refused.code == 2
    (row,) = json.loads(refused.out)
    assert row["outcome"] == "refused" and row["detail"].startswith("job is queued, not running")
    no_reason = run("cancel", str(queued), "--yes")
    assert no_reason.code == 2 and "cancel needs --reason" in no_reason.err
    assert "Traceback" not in no_reason.err
    nothing = run("cancel", "--yes", "--reason", "x")
    assert nothing.code == 2 and "cancel needs job ids" in nothing.err


def test_fail_force_on_a_live_lease_is_cancel(conn, dsn, run):
    job_id = one_ready_job(conn)
    proc, _ = start_worker(dsn, every=0.2)
    done = run(
        "fail", str(job_id), "--force", "--reason", "stuck on a socket", "--yes", "-o", "json"
    )
    assert done.code == 0, done.err
    (row,) = json.loads(done.out)
    assert row["outcome"] == "failed" and "attempt cancelled" in row["detail"]
    lost = said(proc)
    assert "taken back" in lost["heartbeat"] and lost["complete"].startswith("complete:")
    kinds = [
        e["event"]
        for e in conn.execute("SELECT event FROM jobctl.events WHERE job_id = %s", (str(job_id),))
    ]
    assert kinds == ["cancelled"]


def test_cancel_on_a_filter_lists_then_takes_exactly_those(conn, dsn, run, tmp_path):
    first = one_ready_job(conn)
    proc, claim = start_worker(dsn, every=0.2)
    assert claim["id"] == first
    listed = run("cancel", "--worker", "billing-7", "-o", "json")
    assert listed.code == 0, listed.err
    assert [r["id"] for r in json.loads(listed.out)] == [first]
    assert "nothing changed: --yes to cancel" in listed.err
    plan = tmp_path / "p.json"
    saved = run("cancel", "--worker", "billing-7", "--save-plan", str(plan))
    assert saved.code == 0 and "jobctl cancel --plan" in saved.err
    applied = run("cancel", "--plan", str(plan), "--reason", "drain billing-7", "--yes")
    assert applied.code == 0, applied.err
    lost = said(proc)
    assert "taken back" in lost["heartbeat"]
    status = conn.execute("SELECT status FROM jobs WHERE id = %s", (first,)).fetchone()
    assert status["status"] == "failed"


def test_cancel_park_puts_the_job_in_the_park_status(conn, dsn, run):
    conn.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_status_check")
    conn.execute(
        "ALTER TABLE jobs ADD CONSTRAINT jobs_status_check "
        "CHECK (status IN ('queued', 'processing', 'done', 'failed', 'manual_review'))"
    )
    applied = run("schema", "apply", "--park-status", "manual_review", "--yes")
    assert applied.code == 0, applied.err
    job_id = one_ready_job(conn)
    proc, _ = start_worker(dsn, every=0.2)
    done = cancel(dsn, str(job_id), "--park", "--reason", "needs a look", "--yes", "-o", "json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["outcome"] == "cancelled" and row["detail"] == "processing -> manual_review"
    assert "taken back" in said(proc)["heartbeat"]
    job = conn.execute("SELECT status, last_error FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert (job["status"], job["last_error"]) == ("manual_review", "needs a look")
    (event,) = conn.execute("SELECT * FROM jobctl.events WHERE event = 'cancelled'").fetchall()
    assert event["to_status"] == "manual_review"


def waiting_on_locks(conn: psycopg.Connection[Any], n: int) -> bool:
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()
    return row["n"] >= n


def race(conn, dsn, *, cancel_first: bool) -> tuple[subprocess.CompletedProcess[str], str]:
    """The worker's complete and jobctl cancel, each on its own connection, both waiting on
    the job's row (a third session holds it) in the order asked; then the row is let go."""
    job_id = one_ready_job(conn)
    proc, claim = start_worker(dsn, every=0)
    assert claim["id"] == job_id
    assert proc.stdin is not None
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
        argv = [sys.executable, "-m", "jobctl", "--lock-timeout", "30s", "--actor", "alice"]
        argv += ["cancel", str(job_id), "--reason", "race", "--yes", "-o", "json"]
        env = {**os.environ, "JOBCTL_DSN": dsn, "NO_COLOR": "1"}
        cancelling = None
        if cancel_first:
            cancelling = subprocess.Popen(
                argv,
                env=env,
                stdout=subprocess.PIPE,
                text=True,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
            )
            wait_until(lambda: waiting_on_locks(conn, 1), what="cancel waiting on the row")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        wait_until(lambda: waiting_on_locks(conn, 1), what="a waiter")
        if not cancel_first:
            time.sleep(0.2)  # the completion is queued on the row first
            cancelling = subprocess.Popen(
                argv,
                env=env,
                stdout=subprocess.PIPE,
                text=True,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
            )
        wait_until(lambda: waiting_on_locks(conn, 2), timeout=30, what="both waiting")
    assert cancelling is not None
    out, err = cancelling.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, cancelling.returncode, out, err), said(proc)[
        "complete"
    ]


def test_a_cancel_racing_the_workers_completion_exactly_one_wins(conn, dsn):
    # the cancel queued on the row first: it wins, the completion finds no row
    cancelled, completed = race(conn, dsn, cancel_first=True)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)[0]["outcome"] == "cancelled"
    assert completed.startswith("complete: job ")
    # the completion queued first: it wins, the cancel's fence matches no row (exit 3)
    cancelled, completed = race(conn, dsn, cancel_first=False)
    assert cancelled.returncode == 3, cancelled.stderr
    assert json.loads(cancelled.stdout)[0]["outcome"] == "conflict"
    assert completed == "done"
    rows = conn.execute("SELECT status FROM jobs ORDER BY id").fetchall()
    assert [r["status"] for r in rows] == ["failed", "done"]
    count = conn.execute("SELECT count(*) AS n FROM jobctl.events WHERE event = 'cancelled'")
    assert count.fetchone()["n"] == 1


def asked_then(steps: Any, meanwhile: Any) -> Any:
    """A write's steps consumed: ``meanwhile`` while its one question is up, then the rest;
    what it did."""
    next(steps)
    meanwhile()
    with pytest.raises(StopIteration) as done:
        next(steps)
    return done.value.value


def test_heartbeats_while_the_operator_confirms_do_not_make_a_conflict(conn, dsn):
    """The worker heartbeats while the operator reads the prompt (each heartbeat a new row
    version): the attempt as read still runs, so the cancel is fenced again on it and taken;
    a completion in that time instead is a conflict (exit 3), nothing written."""
    from jobctl import db
    from jobctl.db import session
    from jobctl.ops import by_hand

    job_id = one_ready_job(conn)
    proc, _ = start_worker(dsn, every=0.1)

    def versions() -> str:
        return conn.execute("SELECT xmin::text AS v FROM jobs WHERE id = %s", (job_id,)).fetchone()[
            "v"
        ]

    def slow_operator() -> None:
        seen = versions()
        wait_until(lambda: versions() != seen, what="a heartbeat during the prompt")

    s = session.connect(db.Settings(dsn=dsn, actor="tester@ci"))
    with s.conn:
        report = asked_then(
            by_hand.run(s, by_hand.Request("cancel", (str(job_id),), reason="slow hands")),
            slow_operator,
        )
    assert [r["outcome"] for r in report.results] == ["cancelled"], report.results
    assert "taken back" in said(proc)["heartbeat"]

    job_id = one_ready_job(conn)
    proc, _ = start_worker(dsn, every=0)

    def completes_meanwhile() -> None:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        wait_until(
            lambda: (
                conn.execute("SELECT status FROM jobs WHERE id = %s", (job_id,)).fetchone()[
                    "status"
                ]
                == "done"
            ),
            what="the completion",
        )

    s = session.connect(db.Settings(dsn=dsn, actor="tester@ci"))
    with s.conn:
        report = asked_then(
            by_hand.run(s, by_hand.Request("cancel", (str(job_id),), reason="too late")),
            completes_meanwhile,
        )
    (result,) = report.results
    assert result["outcome"] == "conflict" and report.exit_code == 3
    assert "now done" in result["detail"]
    assert said(proc)["complete"] == "done"


def test_a_history_trigger_older_than_cancel_refuses_it_and_says_what_to_run(conn, dsn, run):
    """A trigger function made before cancel (here: today's with the cancel clause taken
    out) knows no 'cancelled': the write is refused whole, and cancel says to run schema
    apply, one line, exit 1; after schema apply the same cancel goes ahead."""
    (made,) = conn.execute(
        "SELECT pg_get_functiondef(t.tgfoid) AS src FROM pg_trigger t "
        "WHERE t.tgrelid = 'jobs'::regclass AND t.tgname = 'jobctl_history'"
    ).fetchall()
    assert "'cancelled'" in made["src"]
    conn.execute(made["src"].replace("'cancelled'", "'cancelled_by_a_newer_jobctl'"))
    job_id = one_ready_job(conn)
    proc, _ = start_worker(dsn, every=0.2)
    refused = run("cancel", str(job_id), "--reason", "x", "--yes")
    assert refused.code == 1 and "predates cancel" in refused.err and "schema apply" in refused.err
    assert "Traceback" not in refused.err and len(refused.err.splitlines()) == 1
    assert conn.execute("SELECT status FROM jobs").fetchone()["status"] == "processing"
    assert "out of date" in run("schema", "check").out
    assert run("schema", "apply", "--yes").code == 0
    assert run("cancel", str(job_id), "--reason", "x", "--yes").code == 0
    assert "taken back" in said(proc)["heartbeat"]

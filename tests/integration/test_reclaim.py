"""Reclaim against a real database, with real concurrency."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import helpers
import psycopg
import pytest
from helpers import add_jobs, blocked_by, claim_all, snapshot, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobctl import db, lease
from jobctl.db import session
from jobctl.ops import triage
from jobctl.ops.reclaim import batches as reclaim_batches
from jobctl.ops.reclaim import row_errors
from jobctl.ops.reclaim.tally import Tally
from jobctl.render import rows
from jobctl.sql import queries

ALL = triage.ExpiredFilter()


def core(dsn: str) -> session.Session:
    """A session of jobctl's core on the test database (close its connection)."""
    return session.connect(db.Settings(dsn=dsn, actor="tester@ci"))


# ---------------------------------------------------------------- the dry run is the commit
job_specs = helpers.job_specs(40)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(specs=job_specs, batch_size=st.integers(1, 7), grace=st.sampled_from([0, 30]))
def test_dry_run_predicts_commit_and_changes_nothing(conn, dsn, specs, batch_size, grace):
    conn.execute("TRUNCATE jobs, jobctl.events, jobctl.attempts RESTART IDENTITY")
    for status, policy, attempts, max_attempts, offset in specs:
        processing = status == "processing"
        conn.execute(
            "INSERT INTO jobs (status, recovery_policy, attempts, max_attempts, attempt_token,"
            " lease_expires_at, reserved_by) VALUES (%s, %s, %s, %s, CASE WHEN %s THEN "
            "gen_random_uuid() END, CASE WHEN %s THEN now() + %s * interval '1s' END, 'w')",
            (status, policy, attempts, max_attempts, processing, processing, offset),
        )
    where = triage.ExpiredFilter(grace=dt.timedelta(seconds=grace))
    s = core(dsn)
    with s.conn:
        before = snapshot(conn)
        predicted = {r["id"]: r["action"] for r in reclaim_batches.dry_run(s, where, None)}
        assert snapshot(conn) == before
        applied = [
            r
            for batch in reclaim_batches.commit(s, where, batch_size=batch_size, limit=None)
            for r in batch
        ]
    assert {r["id"]: r["action"] for r in applied} == predicted
    assert all(r["applied"] for r in applied)
    after = {r["id"]: r for r in conn.execute("SELECT * FROM jobs")}
    for job_id, action in predicted.items():
        row = after[job_id]
        assert row["status"] == ("queued" if action == "requeue" else "failed")
        assert row["attempt_token"] is None and row["lease_expires_at"] is None
        assert row["reclaim_count"] == 1
        assert (row["finished_at"] is None) == (action == "requeue")
    assert all(r["reclaim_count"] == 0 for i, r in after.items() if i not in predicted)


# ---------------------------------------------------------------- forced interleavings
@pytest.mark.parametrize("reclaim_commits", [True, False], ids=["commit", "rollback"])
def test_completion_blocked_behind_reclaim(conn, dsn, reclaim_commits):
    add_jobs(conn, 1)
    (job,) = claim_all(dsn, 1)
    table = db.resolve_table(conn, "jobs")
    reclaimer = psycopg.connect(dsn)  # holds its transaction open: the reclaim is uncommitted
    reclaimer.execute(
        queries.query("reclaim_batch", **table.fragments), {**ALL.params(), "limit": 50}
    )
    outcome: dict[str, str] = {}

    def complete() -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            try:
                lease.Worker(c, "w1").complete(job)
                outcome["worker"] = "completed"
            except lease.LeaseLost:
                outcome["worker"] = "lease lost"

    thread = threading.Thread(target=complete)
    thread.start()
    wait_until(lambda: blocked_by(conn, reclaimer.info.backend_pid), what="worker blocked")
    (reclaimer.commit if reclaim_commits else reclaimer.rollback)()
    thread.join(10)
    reclaimer.close()
    status = conn.execute("SELECT status FROM jobs").fetchone()["status"]
    if reclaim_commits:
        assert (outcome["worker"], status) == ("lease lost", "queued")
    else:
        assert (outcome["worker"], status) == ("completed", "done")


def test_reclaim_blocked_behind_completion_skips_it(conn, dsn):
    """The other order: a worker's uncommitted completion holds the row; reclaim skips it."""
    add_jobs(conn, 2)
    first, second = claim_all(dsn, 2)
    worker = psycopg.connect(dsn)
    table = db.resolve_table(conn, "jobs")
    worker.execute(
        queries.query("complete", **table.fragments),
        {"id": first.id, "attempt_token": first.attempt_token},
    )
    s = core(dsn)
    with s.conn:
        rows = [r for b in reclaim_batches.commit(s, ALL, batch_size=50, limit=None) for r in b]
    worker.commit()
    worker.close()
    by_id = {r["id"]: r for r in rows}
    assert by_id[second.id]["applied"] and not by_id[first.id]["applied"]
    assert "locked by pid" in by_id[first.id]["skipped"]
    statuses = {r["id"]: r["status"] for r in conn.execute("SELECT id, status FROM jobs")}
    assert statuses == {first.id: "done", second.id: "queued"}


def test_idle_in_transaction_lock_is_shown_skipped(conn, dsn, run):
    add_jobs(conn, 3)
    held, *_ = claim_all(dsn, 3)
    holder = psycopg.connect(dsn)  # an idle-in-transaction session holding one row
    holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (held.id,))
    try:
        preview = json.loads(run("reclaim", "--dry-run", "-o", "json").out)
        skipped = [r for r in preview if r["skipped"]]
        assert [r["id"] for r in skipped] == [held.id]
        assert f"pid {holder.info.backend_pid}" in skipped[0]["skipped"]
        assert "idle in transaction" in skipped[0]["skipped"]
        result = run("reclaim", "--commit", "--yes", "-o", "json")
        rows = {r["id"]: r for r in json.loads(result.out)}
        assert not rows[held.id]["applied"] and rows[held.id]["skipped"]
        assert sum(r["applied"] for r in rows.values()) == 2
        assert "2 requeued, 0 failed, 1 skipped" in result.err
        assert (
            conn.execute("SELECT status FROM jobs WHERE id = %s", (held.id,)).fetchone()["status"]
            == "processing"
        )
    finally:
        holder.close()


def test_table_shows_the_first_rows_and_the_skipped_ones(conn, dsn, run):
    """Thousands of rows help nobody on a terminal: the table shows the first 20 and the
    skipped ones, titled with how many of the total; the totals go to stderr."""
    add_jobs(conn, 45)
    *_, held = claim_all(dsn, 45)  # the latest expiry: far beyond the first 20
    holder = psycopg.connect(dsn)
    holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (held.id,))
    try:
        dry = run("reclaim", "--dry-run")
        done = run("reclaim", "--commit", "--yes", "--batch-size", "7")
    finally:
        holder.close()
    for result, summary in (
        (dry, "dry run: 44 would be requeued, 0 failed, 1 skipped"),
        (done, "reclaimed: 44 requeued, 0 failed, 1 skipped"),
    ):
        assert result.code == 0 and summary in result.err
        title, _header, _rule, *body = result.out.rstrip("\n").splitlines()
        assert title.startswith("21 of 45 rows shown") and "-o jsonl" in title
        assert len(body) == 21
        assert body[-1].split()[0] == str(held.id) and "locked by pid" in body[-1]
    assert conn.execute("SELECT count(*) FROM jobs WHERE status = 'queued'").fetchone() == {
        "count": 44
    }


def test_plan_skips_rows_that_changed_since_review(conn, dsn, run, tmp_path: Path):
    add_jobs(conn, 4)
    beat, done, keep, gone = claim_all(dsn, 4)
    plan = tmp_path / "plan.json"
    assert run("reclaim", "--dry-run", "--save-plan", str(plan)).code == 0
    saved = json.loads(plan.read_text())
    assert saved["where"]["table"] == "public.jobs" and len(saved["rows"]) == 4
    assert "password" not in plan.read_text()
    with psycopg.connect(dsn, autocommit=True) as c:
        # a heartbeat since the review whose lease has already run out again
        lease.Worker(c, "w1", lease_seconds=-1).heartbeat(beat)
        lease.Worker(c, "w1").complete(done)
    conn.execute("DELETE FROM jobs WHERE id = %s", (gone.id,))
    add_jobs(conn, 1)
    (late,) = claim_all(dsn, 1)  # expired, but not in the plan
    result = run("reclaim", "--commit", "--plan", str(plan), "--yes", "-o", "json")
    assert result.code == 0, result.err
    # the plan's order kept, and what was skipped said on stderr
    assert [r["id"] for r in json.loads(result.out)] == [r["id"] for r in saved["rows"]]
    assert "1 requeued, 0 failed, 3 skipped (nothing written for them" in result.err
    rows = {r["id"]: r for r in json.loads(result.out)}
    assert rows[keep.id]["applied"] is True
    assert "heartbeat since the review" in rows[beat.id]["skipped"]
    assert rows[done.id]["skipped"].startswith("now done")
    assert rows[gone.id]["skipped"] == "job no longer exists"
    assert late.id not in rows
    assert (
        conn.execute("SELECT status FROM jobs WHERE id = %s", (late.id,)).fetchone()["status"]
        == "processing"
    )


def test_plan_for_another_database_is_refused(conn, dsn, run, tmp_path: Path):
    add_jobs(conn, 1)
    claim_all(dsn, 1)
    plan = tmp_path / "plan.json"
    run("reclaim", "--save-plan", str(plan))
    data = json.loads(plan.read_text())
    data["where"]["database"] = "elsewhere"
    plan.write_text(json.dumps(data))
    before = snapshot(conn)
    result = run("reclaim", "--commit", "--plan", str(plan), "--yes")
    assert result.code == 2 and "elsewhere" in result.err
    assert snapshot(conn) == before
    plan.write_text("{not json")
    assert run("reclaim", "--commit", "--plan", str(plan), "--yes").code == 2


def test_batches_and_limit(conn, dsn, run):
    add_jobs(conn, 23)
    claim_all(dsn, 23)
    result = run("reclaim", "--commit", "--yes", "--batch-size", "5", "--limit", "12", "-o", "json")
    assert len(json.loads(result.out)) == 12
    per_transaction = conn.execute(
        "SELECT xmin::text, count(*) AS n FROM jobctl.events WHERE event = 'reclaimed' GROUP BY 1"
    ).fetchall()
    assert sorted(r["n"] for r in per_transaction) == [2, 5, 5]
    assert len(json.loads(run("stuck", "-o", "json").out)) == 11


def _still_processing(conn: psycopg.Connection[Any]) -> int:
    return conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'processing'").fetchone()[
        "n"
    ]


def test_next_batch_runs_while_the_last_is_handed_on(conn, dsn):
    """The batch after one is sent as soon as that one committed: while the caller still
    holds batch 1, batch 2 commits on the server (seen from another connection)."""
    add_jobs(conn, 12)
    claim_all(dsn, 12)
    s = core(dsn)
    with s.conn:
        batches = reclaim_batches.commit(s, ALL, batch_size=5, limit=None)
        first = next(batches)
        assert len(first) == 5
        wait_until(lambda: _still_processing(conn) == 2)  # batch 2 committed meanwhile
        rest = [row for batch in batches for row in batch]
    assert len(rest) == 7 and _still_processing(conn) == 0


def test_past_the_rows_a_table_shows_each_comes_back_with_its_id_and_action(conn, dsn, run):
    """A table shows a commit's first rows and counts the rest: once ``whole`` rows came back
    whole, the next batches return each row's id and action alone; everything is reclaimed
    and counted alike, and the table's rows are whole."""
    add_jobs(conn, 23)
    claim_all(dsn, 23)
    s = core(dsn)
    with s.conn:
        batches = list(reclaim_batches.commit(s, ALL, batch_size=5, limit=None, whole=7))
    keys = [set(row) for batch in batches for row in batch]
    assert [len(batch) for batch in batches] == [5, 5, 5, 5, 3]
    # (kind and queue: where mapped; lease_state and claimed_age_s: the dry run's alone, an
    # empty field of a commit's csv)
    whole = set(rows.RECLAIM_KEYS) - {"kind", "queue", "lease_state", "claimed_age_s"}
    assert all(k >= whole for k in keys[:10])  # the batches that began before the 7th row
    assert all(k == {"id", "action", "applied", "skipped"} for k in keys[10:])
    assert Tally.of([row for batch in batches for row in batch]).counts == {"requeue": 23}
    assert _still_processing(conn) == 0
    add_jobs(conn, 30)
    claim_all(dsn, 30)
    done = run("reclaim", "--commit", "--yes", "--batch-size", "7")
    assert done.code == 0 and "reclaimed: 30 requeued, 0 failed, 0 skipped" in done.err
    title, header, _rule, *body = done.out.rstrip("\n").splitlines()
    assert title.startswith("20 of 30 rows shown") and len(body) == 20
    assert all(len(line.split()) == len(header.split()) - 1 for line in body)  # skipped: none


def test_service_sends_no_batch_while_it_holds_one(conn, dsn):
    """With ``stop`` (the reclaimer service) the next batch waits for the caller: stopping
    after the batch in hand leaves the rest untouched."""
    add_jobs(conn, 12)
    claim_all(dsn, 12)
    stop = threading.Event()
    s = core(dsn)
    with s.conn:
        batches = reclaim_batches.commit(s, ALL, batch_size=5, limit=None, stop=stop)
        assert len(next(batches)) == 5
        time.sleep(0.5)
        assert _still_processing(conn) == 7
        stop.set()
        assert list(batches) == []
    assert _still_processing(conn) == 7


# ---------------------------------------------------------------- real processes
def jobctl(dsn: str, *args: str, **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "JOBCTL_DSN": dsn, "JOBCTL_ACTOR": "tester@ci"}
    return subprocess.Popen(
        [sys.executable, "-m", "jobctl", *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        **kw,
    )


def spawn_worker(dsn: str, name: str, lease_s: float, work_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobctl.cli.commands.demo",
            "worker",
            dsn,
            name,
            str(lease_s),
            str(work_s),
            "1",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_zombie_worker_is_fenced_out(conn, dsn, run):
    add_jobs(conn, 1)
    zombie = spawn_worker(dsn, "zombie", lease_s=1.0, work_s=1.5)
    try:
        assert zombie.stdout is not None
        claimed = json.loads(zombie.stdout.readline())
        assert claimed["event"] == "claimed"
        os.kill(zombie.pid, signal.SIGSTOP)
        wait_until(lambda: json.loads(run("stuck", "-o", "json").out) != [], what="expiry")
        assert run("reclaim", "--commit", "--yes").code == 0
        os.kill(zombie.pid, signal.SIGCONT)
        out, _ = zombie.communicate(timeout=20)
    finally:
        zombie.kill()
    events = [json.loads(line)["event"] for line in out.splitlines()]
    assert events[-1] == "completion_rejected"
    row = conn.execute("SELECT status, reclaim_count, attempt_token FROM jobs").fetchone()
    assert row == {"status": "queued", "reclaim_count": 1, "attempt_token": None}
    completed = conn.execute(  # the history keeps completions as attempts' outcomes
        "SELECT count(*) AS n FROM jobctl.attempts WHERE outcome = 'completed'"
    ).fetchone()["n"]
    assert completed == 0


@pytest.mark.slow
def test_concurrent_reclaimers_reclaim_each_expiry_once(conn, dsn):
    add_jobs(conn, 300)
    add_jobs(conn, 60, policy="manual")
    claim_all(dsn, 360)
    procs = [
        jobctl(dsn, "reclaim", "--commit", "--yes", "--batch-size", "7", "-o", "jsonl")
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    reported = [
        json.loads(line)["id"]
        for out, _ in outputs
        for line in out.splitlines()
        if json.loads(line)["applied"]
    ]
    assert sorted(reported) == list(range(1, 361))  # each row reported applied exactly once
    assert conn.execute(
        "SELECT count(*) FILTER (WHERE reclaim_count <> 1) AS bad, "
        "count(*) FILTER (WHERE status = 'processing') AS left "
        "FROM jobs"
    ).fetchone() == {"bad": 0, "left": 0}
    batches = conn.execute(
        "SELECT xmin::text, count(*) AS n FROM jobctl.events WHERE event = 'reclaimed' GROUP BY 1"
    ).fetchall()
    assert sum(b["n"] for b in batches) == 360 and max(b["n"] for b in batches) <= 7


@pytest.mark.slow
def test_service_survives_killed_backend_and_stops_on_sigterm(conn, dsn):
    service = jobctl(dsn, "reclaim", "--commit", "--yes", "--every", "0.2s", "-o", "jsonl")
    try:

        def expired_left() -> int:
            return conn.execute(
                "SELECT count(*) AS n FROM jobs WHERE status = 'processing'"
            ).fetchone()["n"]

        add_jobs(conn, 5)
        claim_all(dsn, 5)
        wait_until(lambda: expired_left() == 0, what="first reclaim")
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity"
            " WHERE application_name = 'jobctl' AND datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchone()["n"]
        assert killed == 1
        add_jobs(conn, 5)
        claim_all(dsn, 5)
        wait_until(lambda: expired_left() == 0, what="reclaim after the backend was killed")
        service.send_signal(signal.SIGTERM)
        out, err = service.communicate(timeout=20)
    finally:
        service.kill()
    assert service.returncode == 0, err
    assert "Traceback" not in err and "retrying" in err and "stopped" in err
    assert "error ignored" not in err, "one line per failure, no psycopg warning"
    assert len([line for line in out.splitlines() if json.loads(line)["applied"]]) == 10


@pytest.mark.parametrize(("out", "delimiter"), [("csv", ","), ("tsv", "\t")])
def test_reclaim_streams_csv_under_one_header(conn, dsn, run, out, delimiter):
    """csv and tsv print each batch as it lands (no row kept for the end): one header, every
    row once, the same values as jsonl would give."""
    add_jobs(conn, 7, policy="manual")
    claim_all(dsn, 7, lease_seconds=-60)
    result = run("reclaim", "--commit", "--yes", "--batch-size", "3", "-o", out)
    assert result.code == 0, result.err
    table = list(csv.reader(io.StringIO(result.out), delimiter=delimiter))
    assert table[0] == rows.RECLAIM_KEYS  # every key JSON carries, in its order
    assert sorted(int(r[0]) for r in table[1:]) == list(range(1, 8))
    by_column = [dict(zip(table[0], r, strict=True)) for r in table[1:]]
    assert {(r["action"], r["applied"], r["skipped"]) for r in by_column} == {("fail", "true", "")}
    nothing = run("reclaim", "--commit", "--yes", "-o", out)
    assert nothing.code == 0 and nothing.out == delimiter.join(rows.RECLAIM_KEYS) + "\n"


def test_service_names_the_park_status(conn, dsn, run):
    """reclaim --every says where it sent what it did not retry, as a single reclaim does."""
    conn.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_status_check")
    assert run("schema", "apply", "--park-status", "manual_review", "--yes").code == 0
    add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 2, lease_seconds=-60)
    service = jobctl(dsn, "reclaim", "--commit", "--yes", "--every", "0.2s", "-o", "jsonl")
    try:
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) AS n FROM jobs WHERE status = 'manual_review'"
                ).fetchone()["n"]
                == 2
            ),
            what="the manual jobs parked",
        )
        service.send_signal(signal.SIGTERM)
        _, err = service.communicate(timeout=20)
    finally:
        service.kill()
    assert "reclaimed: 0 requeued, 2 parked in manual_review, 0 skipped" in err, err


def test_poison_row_does_not_strand_the_batch(conn, dsn, run):
    """A trigger that raises for one row fails its whole batch; the other rows still go."""
    add_jobs(conn, 7)
    claims = claim_all(dsn, 7)
    poison = claims[2].id
    conn.execute(f"""
        CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.id = {poison} AND NEW.status <> 'processing' THEN
                RAISE EXCEPTION 'job % is poison', NEW.id;
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER poison BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION poison();
    """)
    result = run("reclaim", "--commit", "--yes", "--batch-size", "3", "-o", "json")
    assert result.code == 1, result.err  # partial: the poison row named, the others done
    rows = {r["id"]: r for r in json.loads(result.out)}
    assert not rows[poison]["applied"] and "is poison" in rows[poison]["skipped"]
    assert sum(r["applied"] for r in rows.values()) == 6
    left = conn.execute("SELECT id FROM jobs WHERE status = 'processing'").fetchall()
    assert [r["id"] for r in left] == [poison]


REFUSING_TRIGGER = """
    CREATE SEQUENCE refusals;
    CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.id = {job} AND NEW.status <> 'processing' THEN
            PERFORM nextval('refusals');  -- not rolled back: counts every try
            RAISE EXCEPTION 'nope' USING ERRCODE = '{state}';
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER refuse BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION refuse();
"""
# a privilege refused, a deadlock, a cancel (each RAISEd by the trigger: not the server's
# own), a plain RAISE: the row is skipped whatever the SQLSTATE; a deadlock tried again first
REFUSALS = {"42501": 2, "40P01": 2 + row_errors.RETRIES, "57014": 2, "P0001": 2}


def refused_row(conn, dsn, state: str) -> int:
    """Ten expired leases; a trigger that raises ``state`` for the fourth one's reclaim."""
    add_jobs(conn, 10)
    job = claim_all(dsn, 10)[3].id
    conn.execute(REFUSING_TRIGGER.format(job=job, state=state))
    return job


def tries(conn) -> int:
    """How many times the trigger refused the row (a sequence: its calls are never undone)."""
    row = conn.execute("SELECT last_value, is_called FROM refusals").fetchone()
    return row["last_value"] if row["is_called"] else 0


@pytest.mark.parametrize("state", list(REFUSALS))
def test_a_row_a_trigger_refuses_is_skipped_whatever_its_sqlstate(conn, dsn, run, state):
    """One row of ten refused by the application's trigger: the nine others are reclaimed,
    the row is named by id once, and the exit code says the run was partial (1)."""
    job = refused_row(conn, dsn, state)
    result = run("reclaim", "--commit", "--yes", "-o", "json")
    assert result.code == 1, result.err
    rows_out = {r["id"]: r for r in json.loads(result.out)}
    assert sum(r["applied"] for r in rows_out.values()) == 9
    skipped = rows_out[job]["skipped"]
    assert not rows_out[job]["applied"] and "nope" in skipped and state in skipped, skipped
    (line,) = [line for line in result.err.splitlines() if line.startswith("partial:")]
    assert line.endswith(f": {job}; the others reclaimed"), line
    assert "9 requeued, 0 failed, 1 skipped" in result.err, result.err
    left = conn.execute("SELECT id FROM jobs WHERE status = 'processing'").fetchall()
    assert [r["id"] for r in left] == [job]
    assert tries(conn) == REFUSALS[state]  # the batch, then the row (a deadlock: retried)


def test_a_refused_row_beside_a_locked_one_does_not_end_the_commit_early(conn, dsn, run):
    """Thirty expired leases reclaimed in batches of ten; the application's trigger refuses
    the fourth, and another session holds the second's lock. The batch that meets the refusal
    is applied row by row, where the locked row comes back with nothing: that is a row passed
    over, not the end of the expired rows. Every other row is reclaimed, the refused one is
    named, the locked one left and said."""
    add_jobs(conn, 30)
    claimed = claim_all(dsn, 30)
    refused, locked = claimed[3].id, claimed[1].id
    conn.execute(REFUSING_TRIGGER.format(job=refused, state="42501"))
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (locked,))
        result = run("reclaim", "--commit", "--yes", "--batch-size", "10", "-o", "json")
    assert result.code == 1, result.err
    rows_out = {r["id"]: r for r in json.loads(result.out)}
    assert sum(bool(r["applied"]) for r in rows_out.values()) == 28, result.err
    assert not rows_out[refused]["applied"] and "nope" in rows_out[refused]["skipped"]
    assert not rows_out[locked]["applied"] and "locked" in rows_out[locked]["skipped"]
    assert "28 requeued, 0 failed, 2 skipped" in result.err, result.err
    left = conn.execute("SELECT id FROM jobs WHERE status = 'processing' ORDER BY id")
    assert [r["id"] for r in left.fetchall()] == sorted([refused, locked])


def test_the_service_names_a_refused_row_once_and_passes_it_over(conn, dsn):
    """The reclaimer service meets the refused row in its first pass, names it once, and
    never tries it again in the passes after (no retry loop, no target_down)."""
    from jobctl.ops.reclaim import service

    job = refused_row(conn, dsn, "42501")
    stop, lines = threading.Event(), []
    passes = 0

    def log(line: str) -> None:
        lines.append(line)

    settings = db.Settings(dsn=dsn, actor="service@ci")
    reclaimed = []
    deadline = time.monotonic() + 30

    def count_passes() -> None:  # stops the service after its third pass (or 30 s)
        nonlocal passes
        while not stop.is_set() and time.monotonic() < deadline:
            passes = conn.execute(
                "SELECT coalesce(max(passes), 0) AS n FROM jobctl.reclaimer_passes"
            ).fetchone()["n"]
            if passes >= 3:
                break
            time.sleep(0.05)
        stop.set()

    counter = threading.Thread(target=count_passes)
    counter.start()
    try:
        for batch, _ in service.serve(
            settings,
            triage.ExpiredFilter(),
            batch_size=50,
            every=dt.timedelta(milliseconds=100),
            stop=stop,
            log=log,
        ):
            reclaimed += [r["id"] for r in batch if r["applied"]]
    finally:
        stop.set()
        counter.join()
    assert passes >= 3
    assert len(reclaimed) == 9 and job not in reclaimed
    named = [line for line in lines if f"job {job}:" in line]
    assert len(named) == 1 and "nope" in named[0] and "passed over" in named[0], lines
    assert not [line for line in lines if "retrying" in line], lines
    assert tries(conn) == REFUSALS["42501"]  # its first pass only


def test_a_refusal_of_every_row_by_the_statement_itself_stops_the_reclaim(conn, dsn, run):
    """A statement-level trigger refuses the reclaim itself: no row is named, nothing is
    reclaimed, one error line (exit 1), as before: not a poisoned row but the statement's."""
    add_jobs(conn, 3)
    claim_all(dsn, 3)
    conn.execute("""
        CREATE FUNCTION refuse_all() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'no updates today' USING ERRCODE = '42501'; END $$;
        CREATE TRIGGER refuse_all BEFORE UPDATE ON jobs
            FOR EACH STATEMENT EXECUTE FUNCTION refuse_all();
    """)
    result = run("reclaim", "--commit", "--yes", "-o", "json")
    assert result.code == 1 and "no updates today" in result.err, result.err
    assert "partial" not in result.err
    left = conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'processing'").fetchone()
    assert left == {"n": 3}


def test_reclaim_gives_up_at_lock_timeout(conn, dsn, run):
    """A table lock held elsewhere (a migration, say): the batch waits lock_timeout, no more."""
    add_jobs(conn, 2)
    claim_all(dsn, 2)
    holder = psycopg.connect(dsn)
    holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
    try:
        started = time.monotonic()
        result = run("--lock-timeout", "300ms", "reclaim", "--commit", "--yes")
        assert result.code == 1 and "lock not granted" in result.err, result.err
        assert time.monotonic() - started < 5
    finally:
        holder.close()
    assert (
        conn.execute("SELECT count(*) FROM jobs WHERE status = 'processing'").fetchone()["count"]
        == 2
    )


def test_jsonl_dry_run_and_commit_print_every_row(conn, dsn, run):
    add_jobs(conn, 7)
    claim_all(dsn, 7)
    dry = run("reclaim", "--dry-run", "-o", "jsonl")
    assert len(dry.out.splitlines()) == 7 and "7 would be requeued" in dry.err
    done = run("reclaim", "--commit", "--yes", "--batch-size", "3", "-o", "jsonl")
    rows = [json.loads(line) for line in done.out.splitlines()]
    assert len(rows) == 7 and all(r["applied"] for r in rows)
    assert "reclaimed: 7 requeued, 0 failed, 0 skipped" in done.err


def test_json_is_one_array_streamed_batch_by_batch(conn, dsn, run):
    """-o json writes each batch's rows as they land (memory stays flat) into one array."""
    add_jobs(conn, 7)
    claim_all(dsn, 7)
    empty = run("reclaim", "--dry-run", "--worker", "nobody", "-o", "json")
    assert empty.code == 0 and json.loads(empty.out) == []
    done = run("reclaim", "--commit", "--yes", "--batch-size", "3", "-o", "json")
    rows = json.loads(done.out)
    assert len(rows) == 7 and all(r["applied"] for r in rows)
    assert done.out.startswith("[\n  {") and done.out.endswith("}\n]\n")
    assert "reclaimed: 7 requeued, 0 failed, 0 skipped" in done.err


def test_backend_killed_mid_batch_is_one_line(conn, dsn):
    """A batch is one pipeline (BEGIN, settings, statement, COMMIT); its connection lost while
    the batch waits is one error line, nothing more, and nothing is reclaimed."""
    add_jobs(conn, 3)
    claim_all(dsn, 3)
    holder = psycopg.connect(dsn)
    holder.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")  # blocks the UPDATE, not the reads
    try:
        proc = jobctl(dsn, "--lock-timeout", "30s", "reclaim", "--commit", "--yes")
        holder_pid = holder.info.backend_pid
        wait_until(lambda: blocked_by(conn, holder_pid), what="the batch waiting")
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'jobctl' AND datname = current_database()"
            " AND %s = ANY(pg_blocking_pids(pid))",
            (holder_pid,),
        )
        _, err = proc.communicate(timeout=20)
    finally:
        holder.close()
    assert proc.returncode == 1
    assert err.splitlines() == [err.strip()] and err.startswith("jobctl: error:"), err
    assert conn.execute(
        "SELECT count(*) AS n FROM jobs WHERE status = 'processing'"
    ).fetchone() == {"n": 3}

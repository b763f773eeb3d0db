"""The history keeps a long text cut (history 011, trigger version 4): a worker's name and a
reason past history.KEPT_CHARS characters are stored as their first KEPT_CHARS characters,
with the whole text's length in bytes beside them, so that a hostile role's 30 MB name costs
the history what a short one does. schema apply upgrades a table whose trigger is version 3
with the short lock tries of every history step, the workers never queued behind it; the
rows written before are kept as they were, and every read shows both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from helpers import add_jobs, claim_all, wait_until
from psycopg import rows

from jobctl import lease
from jobctl.schema import history

FIXTURE = Path(__file__).parent.parent / "fixtures" / "history_v3_jobs.sql"
CUT = history.KEPT_CHARS
BOUND_MS = 500  # a worker's wait on a lock during an apply (tests/system/test_apply_busy.py)
FULL = "more bytes; --full shows all)"
NOT_KEPT = "more bytes not kept by the history)"


def downgrade_to_version_3(conn) -> None:
    """The database as jobctl's trigger version 3 left it: migrations 1-10 (011-013 taken
    off: their columns and function), the reference table's trigger and function as that
    version made them (tests/fixtures)."""
    conn.execute(
        "ALTER TABLE jobctl.attempts DROP COLUMN worker_bytes;"
        "ALTER TABLE jobctl.events DROP COLUMN worker_bytes, DROP COLUMN reason_bytes;"
        "ALTER TABLE jobctl.migrations DROP COLUMN jobctl_version, DROP COLUMN checksum;"
        "DROP FUNCTION jobctl.refuse(text, text);"  # history 013's
        "DELETE FROM jobctl.migrations WHERE version >= 11"
    )
    conn.execute(FIXTURE.read_text())


def fail(dsn: str, worker: str, error: str) -> lease.Claim:
    """A job claimed by ``worker`` and failed with ``error`` (a retry: the history records
    the event with its reason, and the attempt it ended)."""
    (claimed,) = claim_all(dsn, 1, worker=worker, lease_seconds=600)
    with psycopg.connect(dsn, autocommit=True) as c:
        lease.Worker(c, worker, lease_seconds=600).fail(claimed, error)
    return claimed


def stored(conn, claim: lease.Claim) -> list[tuple[str, int, int | None, int | None, int | None]]:
    """What the history holds of the claimed attempt: its events' and attempt's worker (its
    length), their whole lengths, and the reason's."""
    return [
        (r["what"], r["chars"], r["worker_bytes"], r["reason_chars"], r["reason_bytes"])
        for r in conn.execute(
            "SELECT 'attempt' AS what, length(worker) AS chars, worker_bytes, "
            "NULL::int AS reason_chars, NULL::bigint AS reason_bytes "
            "FROM jobctl.attempts WHERE attempt_token = %(token)s UNION ALL "
            "SELECT event, length(worker), worker_bytes, length(reason), reason_bytes "
            "FROM jobctl.events WHERE attempt_token = %(token)s ORDER BY 1",
            {"token": claim.attempt_token},
        ).fetchall()
    ]


def test_apply_upgrades_a_version_3_trigger_without_queueing_the_workers(empty_dsn, run):
    assert run("schema", "apply", "--create", "--yes", dsn=empty_dsn).code == 0
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        downgrade_to_version_3(conn)
        # enough that two seconds of claims and failures cannot use them all up (a fast
        # server does a few hundred a second; each failed job waits for its retry)
        add_jobs(conn, 4000)
        name = "é" * (CUT + 10)  # two bytes a character: cut by characters, not bytes
        error = "x" * 50_000
        before = fail(empty_dsn, name, error)
        # version 3 kept every byte; 011's columns are not there yet
        assert conn.execute(
            "SELECT length(worker) AS n FROM jobctl.events WHERE event = 'retried'"
        ).fetchone()["n"] == len(name)
        # and the reads of this version read that history (no 011 column named)
        seen = json.loads(run("history", str(before.id), "-o", "json", dsn=empty_dsn).out)
        assert {a["worker"] for a in seen["attempts"]} == {f"{'é' * CUT}… (20 {FULL}"}
        full = json.loads(run("history", str(before.id), "--full", "-o", "json", dsn=empty_dsn).out)
        assert {a["worker"] for a in full["attempts"]} == {name}

        check = json.loads(run("schema", "check", "-o", "json", dsn=empty_dsn).out)
        installed = {c["check"]: c for c in check}["history installed"]
        assert not installed["ok"] and "trigger version 3, want 6" in installed["detail"]
        plan = run("schema", "apply", "--sql", dsn=empty_dsn).out
        assert "history migration 011 (kept_texts)" in plan
        assert "install the history trigger" in plan

        # a worker's failure in an open transaction holds jobctl's tables and a jobs row:
        # apply's tries time out, each holding the other workers up at most one short try
        (held,) = claim_all(empty_dsn, 1, worker="slow", lease_seconds=600)
        holder = psycopg.connect(empty_dsn)  # a worker's retry, its transaction left open
        holder.execute(
            "UPDATE jobs SET status = 'queued', attempt_token = NULL, reserved_by = NULL, "
            "last_error = 'slow failure' WHERE id = %s",
            (held.id,),
        )
        env = {**os.environ, "JOBCTL_DSN": empty_dsn, "NO_COLOR": "1"}
        apply = subprocess.Popen(
            [sys.executable, "-m", "jobctl", "schema", "apply", "--yes", "--lock-deadline", "60s"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%jobctl.migrations%' AND pid <> pg_backend_pid() "
                    "AND datname = current_database()"
                ).fetchone()["n"]
                > 0
                or apply.poll() is not None
            ),
            what="apply tries its lock (its first step, migration 011)",
        )
        times = []
        try:
            # (queued behind apply's lock until the holder ends, a worker would wait for ever)
            # a wait on a lock over BOUND_MS fails the claim (lock_timeout), however busy
            # the machine is with the rest of the suite
            bounded = f"-c statement_timeout=5s -c lock_timeout={BOUND_MS}"
            with psycopg.connect(empty_dsn, autocommit=True, options=bounded) as c:
                worker = lease.Worker(c, "busy", lease_seconds=600)
                ends = time.monotonic() + 2
                while time.monotonic() < ends:
                    started = time.monotonic()
                    claim = worker.claim()
                    assert claim is not None
                    worker.fail(claim, "busy failure")  # writes the history: events, attempts
                    times.append((time.monotonic() - started) * 1000)
            assert apply.poll() is None, apply.stderr  # still trying: the holder is open
            holder.commit()
            _, err = apply.communicate(timeout=60)
        finally:  # a failure above leaves no apply running and no transaction open
            holder.close()
            if apply.poll() is None:
                apply.kill()
                apply.communicate()
        assert apply.returncode == 0, err
        assert len(times) > 20, (len(times), max(times))  # and none waited past its bound

        assert run("schema", "check", dsn=empty_dsn).code == 0
        after = fail(empty_dsn, name, error)
        # the rows written before are as they were; the new ones kept cut, with their length
        assert stored(conn, before) == [
            ("attempt", len(name), None, None, None),
            ("retried", len(name), None, len(error), None),
        ]
        assert stored(conn, after) == [
            ("attempt", CUT, len(name.encode()), None, None),
            ("retried", CUT, len(name.encode()), CUT, len(error)),
        ]
        # (its first attempt: the busy worker may have claimed the job again since)
        old = json.loads(run("history", str(before.id), "-o", "json", dsn=empty_dsn).out)
        assert old["attempts"][0]["worker"] == f"{'é' * CUT}… (20 {FULL}"
        # (the job may have been the busy worker's before: its own attempt is the last)
        new = json.loads(run("history", str(after.id), "-o", "json", dsn=empty_dsn).out)
        assert new["attempts"][-1]["worker"] == f"{'é' * CUT}… (20 {NOT_KEPT}"
        assert new["events"][-1]["reason"] == f"{'x' * CUT}… ({len(error) - CUT} {NOT_KEPT}"
        full = json.loads(run("history", str(after.id), "--full", "-o", "json", dsn=empty_dsn).out)
        assert full["attempts"][-1]["worker"] == f"{'é' * CUT}… (20 {NOT_KEPT}"


def test_a_text_up_to_the_cut_is_kept_whole(conn, dsn, run):
    """CUT characters of two bytes each (more bytes than CUT) are kept whole, with no
    length; one character more is cut, and its length kept. A uuid or short name is as it
    was."""
    add_jobs(conn, 3)
    at_cut = fail(dsn, "é" * CUT, "é" * CUT)
    past = fail(dsn, "é" * (CUT + 1), "e" * (CUT + 1))
    short = fail(dsn, "w1", "boom")
    assert stored(conn, at_cut) == [
        ("attempt", CUT, None, None, None),
        ("retried", CUT, None, CUT, None),
    ]
    assert stored(conn, past) == [
        ("attempt", CUT, 2 * (CUT + 1), None, None),
        ("retried", CUT, 2 * (CUT + 1), CUT, CUT + 1),
    ]
    assert stored(conn, short) == [("attempt", 2, None, None, None), ("retried", 2, None, 4, None)]
    events = json.loads(run("events", "-o", "json").out)
    assert {e["worker"] for e in events} >= {"é" * CUT, f"{'é' * CUT}… (2 {NOT_KEPT}", "w1"}


def test_an_operators_long_reason_is_kept_cut_too(conn, dsn, run):
    """A requeue's --reason is the event's reason: kept like the application's texts."""
    (job_id,) = add_jobs(conn, 1)
    claim_all(dsn, 1, worker="w" * (CUT + 5), lease_seconds=-60)
    reason = "r" * (CUT + 100)
    done = run("requeue", str(job_id), "--reason", reason, "--yes")
    assert done.code == 0, done.err
    (event,) = conn.execute(
        "SELECT length(worker) AS w, worker_bytes, length(reason) AS r, reason_bytes "
        "FROM jobctl.events WHERE event = 'requeued'"
    ).fetchall()
    assert event == {"w": CUT, "worker_bytes": CUT + 5, "r": CUT, "reason_bytes": CUT + 100}

"""Reclaim against the application's hostile triggers: a trigger that holds one
row past the statement_timeout (asleep, or waiting for a lock) costs that row alone, not the
reclaim; the service goes on past it, and tries it again only once its time is up."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from helpers import add_jobs, claim_all, wait_until

from jobctl import db
from jobctl.ops import triage
from jobctl.ops.reclaim import row_errors, service

HELD = "the statement was cancelled after {}: an application trigger or lock held it"

SLOW_TRIGGER = """
    CREATE SEQUENCE slow_tries;
    CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.id = {job} AND NEW.status <> 'processing' THEN
            PERFORM nextval('slow_tries');  -- not rolled back: counts every try
            PERFORM pg_sleep({seconds});
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER slow BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION slow();
"""


def slow_row(conn: psycopg.Connection[Any], dsn: str, seconds: float = 5) -> tuple[int, list[int]]:
    """Six expired leases; the application's trigger sleeps ``seconds`` on the third's
    reclaim: (its id, every id)."""
    add_jobs(conn, 6)
    claims = claim_all(dsn, 6)
    job = claims[2].id
    conn.execute(SLOW_TRIGGER.format(job=job, seconds=seconds))
    return job, [c.id for c in claims]


def tries(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT last_value, is_called FROM slow_tries").fetchone()
    return row["last_value"] if row["is_called"] else 0


def processing(conn: psycopg.Connection[Any]) -> list[int]:
    left = conn.execute("SELECT id FROM jobs WHERE status = 'processing' ORDER BY id")
    return [r["id"] for r in left.fetchall()]


def test_a_row_a_trigger_holds_past_the_timeout_is_skipped_the_others_reclaimed(conn, dsn, run):
    """The batch the server cancels at the statement_timeout is tried again row by row, each
    row in its own transaction with its own timeout: the slow row is skipped, named, left;
    the five others are reclaimed; exit 1 (partial, as a refused row)."""
    job, _ = slow_row(conn, dsn)
    started = time.monotonic()
    result = run("--statement-timeout", "1s", "reclaim", "--commit", "--yes", "-o", "json")
    assert time.monotonic() - started < 4.5  # the batch's second, the row's, not the 5 s
    assert result.code == 1, result.err
    out = {r["id"]: r for r in json.loads(result.out)}
    assert sum(bool(r["applied"]) for r in out.values()) == 5
    assert not out[job]["applied"] and HELD.format("1s") in out[job]["skipped"], out[job]
    assert "SQLSTATE 57014" in out[job]["skipped"]
    (line,) = [line for line in result.err.splitlines() if line.startswith("partial:")]
    assert line.endswith(f": {job}; the others reclaimed"), line
    assert "reclaimed: 5 requeued, 0 failed, 1 skipped" in result.err, result.err
    assert processing(conn) == [job]
    assert tries(conn) == 2  # the batch, then the row


def test_a_cancel_request_still_stops_the_reclaim(conn, dsn, run):
    """A cancel request (anyone's pg_cancel_backend, as jobctl's own on Ctrl-C) before the
    statement_timeout is not a row held: the reclaim stops, nothing of the batch written."""
    job, _ = slow_row(conn, dsn)
    outcome: dict[str, Any] = {}

    def reclaim() -> None:
        outcome["result"] = run("--statement-timeout", "30s", "reclaim", "--commit", "--yes")

    thread = threading.Thread(target=reclaim)
    thread.start()
    try:
        wait_until(lambda: tries(conn) == 1, what="the trigger asleep")
        conn.execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event = 'PgSleep'"
            " AND pid <> pg_backend_pid()"
        )
    finally:
        thread.join(20)
    result = outcome["result"]
    assert result.code == 1 and "statement cancelled" in result.err, result.err
    assert "partial" not in result.err and tries(conn) == 1
    assert len(processing(conn)) == 6 and job in processing(conn)


def test_a_lock_timeout_inside_the_applications_trigger_skips_that_row(conn, dsn, run):
    """The application's trigger waits for a lock another session holds: the server's
    lock_timeout cancels the batch (55P03, raised inside the trigger), the row is skipped."""
    add_jobs(conn, 4)
    job = claim_all(dsn, 4)[1].id
    conn.execute(f"""
        CREATE TABLE side (id int PRIMARY KEY);
        INSERT INTO side VALUES (1);
        CREATE FUNCTION locking() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.id = {job} AND NEW.status <> 'processing' THEN
                PERFORM 1 FROM side WHERE id = 1 FOR UPDATE;
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER locking BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION locking();
    """)
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT 1 FROM side WHERE id = 1 FOR UPDATE")
        result = run("--lock-timeout", "300ms", "reclaim", "--commit", "--yes", "-o", "json")
    assert result.code == 1, result.err
    out = {r["id"]: r for r in json.loads(result.out)}
    assert sum(bool(r["applied"]) for r in out.values()) == 3
    assert HELD.format("300ms") in out[job]["skipped"] and "55P03" in out[job]["skipped"]
    assert processing(conn) == [job]


def service_passes(conn: psycopg.Connection[Any]) -> int:
    """The reclaimer service's passes so far (its record in jobctl.reclaimer_passes)."""
    return conn.execute(
        "SELECT coalesce(max(passes), 0) AS n FROM jobctl.reclaimer_passes"
    ).fetchone()["n"]


def serve_until(
    settings: db.Settings, until: Callable[[], None], lines: list[str], **more: Any
) -> list[Any]:
    """The reclaimer service (batches of 50, every 100 ms, its log in ``lines``) until
    ``until``, run beside it, returns or fails; the ids it reclaimed, in order."""
    stop = threading.Event()
    reclaimed: list[Any] = []

    def watch() -> None:
        try:
            until()
        finally:
            stop.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for batch, _ in service.serve(
            settings,
            triage.ExpiredFilter(),
            batch_size=50,
            every=dt.timedelta(milliseconds=100),
            stop=stop,
            log=lines.append,
            **more,
        ):
            reclaimed += [r["id"] for r in batch if r["applied"]]
    finally:
        stop.set()
        watcher.join()
    return reclaimed


def test_the_service_goes_on_past_a_slow_row_and_tries_it_again_later(conn, dsn):
    """The reclaimer service: its first pass reclaims the five others and names the slow row;
    the passes after pass it over (no backoff, no retry first), until its time is up
    (``PassedOver``, 10 minutes by default; 3 s here), when it is tried again, once."""
    job, _ = slow_row(conn, dsn)
    lines: list[str] = []
    passed_over = row_errors.PassedOver(for_=dt.timedelta(seconds=3))
    settings = db.Settings(dsn=dsn, actor="service@ci", statement_timeout=dt.timedelta(seconds=1))
    seen: dict[str, int] = {}

    def passes() -> int:
        return service_passes(conn)

    def watch() -> None:  # until the pass that tried the slow row again ended
        wait_until(lambda: tries(conn) >= 2 and passes() >= 1, timeout=20, what="pass 1")
        seen["first"] = passes()
        wait_until(lambda: tries(conn) >= 3, timeout=20, what="the slow row tried again")
        seen["retried"] = passes()
        wait_until(lambda: passes() > seen["retried"], timeout=20, what="that pass")

    reclaimed = serve_until(settings, watch, lines, passed_over=passed_over)
    assert sorted(reclaimed) == sorted(set(reclaimed)) and len(reclaimed) == 5
    assert job not in reclaimed and processing(conn) == [job]
    assert seen["retried"] - seen["first"] >= 3, seen  # passes went on without trying it
    assert tries(conn) == 4  # the first pass (batch, row), then once more when its time was up
    named = [line for line in lines if f"job {job}:" in line]
    assert len(named) == 2 and all(HELD.format("1s") in line for line in named), lines
    assert "passed over for 3s, then tried again" in named[0], named
    assert not [line for line in lines if "retrying" in line], lines


EVIL_TRIGGER = """
    CREATE FUNCTION zz_evil() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.id = {veto} AND NEW.status <> 'processing' THEN
            RETURN NULL;  -- the row is not updated
        END IF;
        IF OLD.id = {undo} AND NEW.status <> 'processing' THEN
            {undo_body}
        END IF;
        RETURN NEW;
    END $$;
    -- BEFORE triggers fire in their names' order: after jobctl's own
    CREATE TRIGGER zz_evil BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION zz_evil();
"""
UNDO_BUT_COUNT = """NEW.status := OLD.status;  -- the change undone, but for reclaim_count
            NEW.attempt_token := OLD.attempt_token;
            NEW.lease_expires_at := OLD.lease_expires_at;"""
UNDO_ALL = "RETURN OLD;  -- the row put back as it was"
KEPT_BACK = "error: an application trigger kept it back"
CHANGED = "error: an application trigger changed it (status still processing"


def evil_rows(
    conn: psycopg.Connection[Any], dsn: str, count: int = 6, undo_body: str = UNDO_BUT_COUNT
) -> tuple[int, int, list[int]]:
    """``count`` expired leases; the application's zz_evil trigger, after jobctl's, keeps the
    second's reclaim back (RETURN NULL) and undoes the fifth's (``undo_body``: all but its
    reclaim_count, or RETURN OLD): (veto, undo, every id)."""
    add_jobs(conn, count)
    ids = [c.id for c in claim_all(dsn, count)]
    veto, undo = ids[1], ids[4]
    conn.execute(EVIL_TRIGGER.format(veto=veto, undo=undo, undo_body=undo_body))
    return veto, undo, ids


def jobs(conn: psycopg.Connection[Any]) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in conn.execute("SELECT * FROM jobs").fetchall()}


def recorded(conn: psycopg.Connection[Any], table: str, where: str = "true") -> list[int]:
    """The job ids of the history's rows in ``table`` (events, attempts), in order."""
    found = conn.execute(f"SELECT job_id FROM jobctl.{table} WHERE {where} ORDER BY 1").fetchall()
    return sorted(int(r["job_id"]) for r in found)


def assert_nothing_of_them_written(
    conn: psycopg.Connection[Any],
    before: dict[int, dict[str, Any]],
    veto: int,
    undo: int,
    ids: list[int],
) -> None:
    """The rows the trigger kept back or undid are as they were, reclaim_count too, and the
    history holds nothing of them: a ``reclaimed`` event and an ended attempt for each of
    the others, once."""
    honest = sorted(set(ids) - {veto, undo})
    after = jobs(conn)
    assert after[veto] == before[veto] and after[undo] == before[undo]
    assert after[veto]["reclaim_count"] == after[undo]["reclaim_count"] == 0
    assert all(after[i]["reclaim_count"] == 1 and after[i]["status"] == "queued" for i in honest)
    assert processing(conn) == sorted([veto, undo])
    assert recorded(conn, "events") == recorded(conn, "events", "event = 'reclaimed'") == honest
    assert recorded(conn, "attempts") == honest


@pytest.mark.parametrize("undo_body", [UNDO_BUT_COUNT, UNDO_ALL], ids=["count-kept", "old"])
@pytest.mark.parametrize("batches", [[], ["--batch-size", "1"]], ids=["batch", "one-by-one"])
def test_rows_a_later_trigger_keeps_back_or_changes_back_are_skipped_and_not_recorded(
    conn, dsn, run, undo_body, batches
):
    """What the reclaim reports and records is what was written: the
    batch with a row kept back or changed back is refused by its own statement (history 013,
    jobctl.refuse), so that its transaction, with the events jobctl's trigger inserted before
    the application's ran, rolls back; tried again row by row, those two rows are skipped
    and named, their own transactions rolled back (no event, no attempt, no reclaim_count
    bumped), the others reclaimed and recorded; the counts and the partial line say so
    (exit 1)."""
    veto, undo, ids = evil_rows(conn, dsn, undo_body=undo_body)
    before = jobs(conn)
    result = run("reclaim", "--commit", "--yes", *batches, "-o", "json")
    assert result.code == 1, result.err
    out = {r["id"]: r for r in json.loads(result.out)}
    assert sorted(out) == sorted(ids)  # each once
    assert not out[veto]["applied"] and out[veto]["skipped"].startswith(KEPT_BACK), out[veto]
    assert not out[undo]["applied"] and out[undo]["skipped"].startswith(CHANGED), out[undo]
    if undo_body == UNDO_BUT_COUNT:
        assert "attempt token not cleared" in out[undo]["skipped"], out[undo]
        assert "reclaim_count" not in out[undo]["skipped"], out[undo]
    else:
        assert "reclaim_count 0, not 1" in out[undo]["skipped"], out[undo]
    assert all(
        out[i]["applied"] and out[i]["skipped"] is None for i in ids if i not in (veto, undo)
    )
    assert not [key for row in out.values() for key in row if key.startswith(("written", "read_"))]
    assert "reclaimed: 4 requeued, 0 failed, 2 skipped" in result.err, result.err
    (line,) = [line for line in result.err.splitlines() if line.startswith("partial:")]
    assert f"{veto}, {undo}" in line or f"{undo}, {veto}" in line, line
    assert_nothing_of_them_written(conn, before, veto, undo, ids)


def test_the_services_pass_records_nothing_of_the_rows_a_trigger_kept_back(conn, dsn):
    """The reclaimer service's pass: the same batch refused and tried row by row; the two
    rows named in its log and passed over, nothing of them recorded."""
    veto, undo, ids = evil_rows(conn, dsn, undo_body=UNDO_ALL)
    before = jobs(conn)
    lines: list[str] = []
    settings = db.Settings(dsn=dsn, actor="service@ci")

    def two_passes() -> None:
        wait_until(lambda: service_passes(conn) >= 2, timeout=20, what="two passes")

    reclaimed = serve_until(settings, two_passes, lines)
    assert sorted(reclaimed) == sorted(set(ids) - {veto, undo}), lines
    (vetoed,) = [line for line in lines if f"job {veto}:" in line]
    assert "kept it back" in vetoed, lines
    (undone,) = [line for line in lines if f"job {undo}:" in line]
    assert "changed it (status still processing" in undone, lines
    assert_nothing_of_them_written(conn, before, veto, undo, ids)


def test_before_history_013_the_batch_commits_and_reports_what_was_written(conn, dsn, run):
    """A history that has not run migration 013 yet (jobctl upgraded, schema apply not run)
    has no jobctl.refuse: the reclaim works as before it, the batch committed and its rows
    reported as written (the two skipped, the trigger's rows as it left them), and the
    history holds the events jobctl's trigger inserted for them: the gap 013 closes."""
    conn.execute("DROP FUNCTION jobctl.refuse(text, text)")
    veto, undo, _ = evil_rows(conn, dsn)
    result = run("reclaim", "--commit", "--yes", "-o", "json")
    assert result.code == 1, result.err
    out = {r["id"]: r for r in json.loads(result.out)}
    assert out[veto]["skipped"].startswith(KEPT_BACK) and out[undo]["skipped"].startswith(CHANGED)
    assert "reclaimed: 4 requeued, 0 failed, 2 skipped" in result.err, result.err
    assert processing(conn) == sorted([veto, undo])
    assert jobs(conn)[undo]["reclaim_count"] == 1  # committed with its batch, as left
    assert {veto, undo} <= set(recorded(conn, "events", "event = 'reclaimed'"))


def test_rows_kept_back_are_passed_over_by_the_next_batches(conn, dsn, run):
    """Batches of one: the row kept back is locked and returned, so the batch is full, and
    the next would take it again; it is passed over, and every other row is reclaimed."""
    veto, undo, ids = evil_rows(conn, dsn)
    result = run("reclaim", "--commit", "--yes", "--batch-size", "1", "-o", "json")
    assert result.code == 1, result.err
    out = json.loads(result.out)
    assert sorted(r["id"] for r in out) == sorted(ids)  # each once
    assert sum(bool(r["applied"]) for r in out) == 4
    assert "reclaimed: 4 requeued, 0 failed, 2 skipped" in result.err, result.err
    assert processing(conn) == sorted([veto, undo])


def test_the_table_of_a_commit_says_the_rows_a_trigger_kept_back(conn, dsn, run):
    evil_rows(conn, dsn)
    result = run("reclaim", "--commit", "--yes")
    assert result.code == 1, result.err
    assert "4 requeued, 0 failed, 2 skipped" in result.err, result.err
    assert "kept it back" in result.out and "changed it" in result.out, result.out

"""What schema apply leaves, stated whole and proven; the least footprint, proven.

* The footprint apply prints before it asks (and at the head of --sql's script) names
  exactly what the catalog gains: the columns, checks, index and trigger on the table, and
  schema jobctl with its tables and functions (read from pg_catalog before and after).
* In ``--history audit`` no worker statement calls jobctl's trigger function: the lease
  design's claim, heartbeat, complete and fail, and an application's own UPDATE, INSERT and
  DELETE, counted by the server (pg_stat_user_functions, track_functions = 'all' in the
  workers' sessions); jobctl's own reclaim, requeue and fail are still recorded, and history
  and explain show them. The default mode, run through the same statements, is the control:
  its function is called by a worker's fail, so the count can see a call.
* Switching between the modes while workers run takes no ACCESS EXCLUSIVE lock on the
  table (pg_locks, sampled throughout: no column is dropped or added, the statistics
  columns stay, unused, in audit), holds no worker up past one short lock try, and an
  apply in the mode already installed has nothing to do.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import busy
import psycopg
import pytest
from helpers import add_jobs, claim_all, function_statistics, jobctl_process
from psycopg import rows

from jobctl import db, lease
from jobctl.schema import footprint, history

BOUND_MS = 500  # tests/system/test_apply_busy.py's bound for a worker statement during apply

PLAIN = """
CREATE TABLE jobs (
    id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'queued',
    attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 3,
    available_at timestamptz NOT NULL DEFAULT now(), reserved_by text,
    reserved_at timestamptz, last_error text, finished_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now());
INSERT INTO jobs (status) SELECT 'queued' FROM generate_series(1, 10);
"""


def catalog(conn: psycopg.Connection[Any]) -> dict[str, set[str]]:
    """What jobctl could add, read from pg_catalog: the table's columns, checks, indexes and
    triggers (with their definitions), schema jobctl and its tables and functions."""

    def names(query: str) -> set[str]:
        return {r["n"] for r in conn.execute(query).fetchall()}

    t = "'public.jobs'::regclass"
    return {
        "columns": names(
            f"SELECT attname::text AS n FROM pg_attribute WHERE attrelid = {t} "
            "AND attnum > 0 AND NOT attisdropped"
        ),
        "checks": names(
            f"SELECT conname::text AS n FROM pg_constraint WHERE conrelid = {t} AND contype = 'c'"
        ),
        "indexes": names(
            f"SELECT indexrelid::regclass::text AS n FROM pg_index WHERE indrelid = {t}"
        ),
        "triggers": names(
            f"SELECT tgname::text AS n FROM pg_trigger WHERE tgrelid = {t} AND NOT tgisinternal"
        ),
        "trigger_defs": names(
            f"SELECT pg_get_triggerdef(oid) AS n FROM pg_trigger WHERE tgrelid = {t} "
            "AND NOT tgisinternal"
        ),
        "schemas": names("SELECT nspname::text AS n FROM pg_namespace WHERE nspname = 'jobctl'"),
        "tables": names(
            "SELECT relname::text AS n FROM pg_class WHERE relkind IN ('r', 'p') "
            "AND relnamespace = to_regnamespace('jobctl')"
        ),
        "functions": names(
            "SELECT proname::text AS n FROM pg_proc WHERE pronamespace = to_regnamespace('jobctl')"
        ),
    }


@pytest.mark.parametrize("mode", [None, "audit"])
def test_the_footprint_printed_is_what_the_catalog_gains(empty_dsn, jobctl, mode):
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        conn.execute(PLAIN)
        before = catalog(conn)
        whole = footprint.of(conn, "jobs", history_mode=mode)
    asked = ["--history", mode] if mode else []

    code, script, err = jobctl(empty_dsn, "schema", "apply", *asked, "--sql")
    assert code == 0, err
    head = script.split("-- Run with:")[0].splitlines()
    assert head == [f"-- {line}" for line in whole.lines()]
    # off a terminal the question is refused, after the footprint and the steps are told
    code, _, err = jobctl(empty_dsn, "schema", "apply", *asked)
    assert code == 2
    assert err.startswith("\n".join(whole.lines()) + "\n  1. add the lease columns\n")
    code, _, err = jobctl(empty_dsn, "schema", "apply", *asked, "--yes")
    assert code == 0, err

    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        after = catalog(conn)
    added = {key: after[key] - before[key] for key in after}
    # the lease design's five, and jobctl_action alone in audit (the statistics' four besides
    # in the other modes)
    assert added["columns"] == set(whole.columns)
    assert len(whole.columns) == (6 if mode == "audit" else 10)
    assert added["checks"] == set(whole.checks)
    assert added["indexes"] == {whole.index}
    assert added["triggers"] == {whole.trigger}
    (definition,) = added["trigger_defs"]
    assert f"BEFORE {whole.event.replace(chr(34), '')} ON public.jobs" in definition
    assert f"EXECUTE FUNCTION jobctl.{whole.function}('{whole.mode}'" in definition
    assert added["schemas"] == {"jobctl"}
    assert added["tables"] == set(whole.tables)
    assert added["functions"] == set(whole.functions)
    text = "\n".join(whole.lines())
    for name in set().union(*(added[k] for k in added if k != "trigger_defs")):
        assert name.removeprefix("public.") in text, name
    if mode == "audit":
        assert "BEFORE UPDATE OF jobctl_action ON" in definition
        assert "WHEN ((new.jobctl_action IS NOT NULL))" in definition
        assert "this is the least footprint" in text
    else:
        assert "least footprint: --history audit" in text


def test_nothing_to_apply_prints_no_footprint(empty_dsn, jobctl):
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(PLAIN)
    assert jobctl(empty_dsn, "schema", "apply", "--yes")[0] == 0
    code, script, err = jobctl(empty_dsn, "schema", "apply", "--sql")
    assert code == 0 and "What jobctl leaves" not in script + err


# ---------------------------------------------------------------- the least footprint
def the_workers_and_the_application(dsn: str) -> None:
    """The lease design's claim, heartbeat, complete and fail (the worker API: the claim,
    heartbeat, complete and worker_fail blocks), and an application's own UPDATE of other
    columns, INSERT and DELETE, each in a session that counts every function it calls."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET track_functions = 'all'")
        w = lease.Worker(c, "w1", lease_seconds=60)
        for _ in range(3):
            job = w.claim()
            assert job is not None
            for _ in range(3):
                job = w.heartbeat(job)
            w.complete(job)
        job = w.claim()
        assert job is not None
        w.fail(job, "boom")  # retried: back to queued
        job = w.claim()
        assert job is not None
        w.fail(job, "boom again")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET track_functions = 'all'")
        c.execute("UPDATE jobs SET last_error = 'noted by the app' WHERE status = 'done'")
        c.execute("UPDATE jobs SET available_at = now() WHERE status = 'queued'")
        c.execute("INSERT INTO jobs (status) VALUES ('queued'), ('queued')")
        c.execute("DELETE FROM jobs WHERE id = (SELECT max(id) FROM jobs)")


def jobctl_calls(conn: psycopg.Connection[Any], dbname: str) -> int:
    stats = function_statistics(conn, dbname)
    return sum(calls for name, calls in stats.items() if name.startswith("jobctl."))


@pytest.mark.parametrize("mode", ["audit", "transitions"])
def test_no_worker_statement_calls_the_audit_trigger(conn, dsn, run, mode):
    assert run("schema", "apply", "--history", mode, "--yes").code == 0
    assert history.table_state(conn, db.resolve_table(conn, "jobs").oid).mode == mode
    add_jobs(conn, 8, max_attempts=2)
    dbname = conn.info.dbname
    before = jobctl_calls(conn, dbname)

    the_workers_and_the_application(dsn)

    called = jobctl_calls(conn, dbname) - before
    if mode == "transitions":  # the control: a worker's fail is a transition it records
        assert called >= 2
        return
    assert called == 0
    assert conn.execute("SELECT count(*) AS n FROM jobctl.events").fetchone()["n"] == 0

    # jobctl's own writes are still recorded, in the same transaction as the write
    expired = [c.id for c in claim_all(dsn, 3, lease_seconds=-60)]
    assert run("reclaim", "--commit", "--yes", "--id", str(expired[0])).code == 0
    assert run("requeue", str(expired[1]), "--reason", "retry it", "--yes").code == 0
    assert run("fail", str(expired[2]), "--reason", "give up", "--yes").code == 0
    events = conn.execute(
        "SELECT job_id, event, actor, reason FROM jobctl.events ORDER BY event_id"
    ).fetchall()
    assert [(e["job_id"], e["event"]) for e in events] == [
        (str(expired[0]), "reclaimed"),
        (str(expired[1]), "requeued"),
        (str(expired[2]), "manually_failed"),
    ]
    assert {e["actor"] for e in events} == {"tester@ci"}
    for job_id, event, reason in (
        (expired[1], "requeued", "retry it"),
        (expired[2], "manually_failed", "give up"),
    ):
        story = json.loads(run("history", str(job_id), "-o", "json").out)
        assert [(e["event"], e["reason"]) for e in story["events"]][-1] == (event, reason)
        assert reason in run("explain", str(job_id)).out
    story = json.loads(run("history", str(expired[0]), "-o", "json").out)
    assert "reclaimed" in [e["event"] for e in story["events"]]


# ---------------------------------------------------------------- switching modes
def exclusive_locks(dsn: str, table_oid: int, stop: threading.Event, seen: list[str]) -> None:
    """Sample pg_locks until ``stop``: every ACCESS EXCLUSIVE lock on the table itself, held
    or awaited, by whom. (Not a tuple lock: a worker whose claim waits on a row takes the row's
    tuple lock in that mode, which says nothing of the table.)"""
    with psycopg.connect(dsn, autocommit=True) as c:
        while not stop.is_set():
            for (query,) in c.execute(
                "SELECT coalesce(a.query, '?') FROM pg_locks l "
                "LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.relation = %s AND l.locktype = 'relation'"
                " AND l.mode = 'AccessExclusiveLock' AND l.database ="
                " (SELECT oid FROM pg_database WHERE datname = current_database())",
                (table_oid,),
            ):
                seen.append(query)
            time.sleep(0.002)


@pytest.mark.slow
def test_switching_modes_is_online_and_idempotent(conn, dsn):
    busy.make_queue(conn, "jobs", queued=40_000)
    first = jobctl_process(dsn, "schema", "apply", "--yes")
    assert first.returncode == 0, first.stderr
    oid = db.resolve_table(conn, "jobs").oid
    workers = busy.start_workers(dsn, "jobs", 3, seconds=60)  # stopped after the switches
    time.sleep(1)  # the workers are up and claiming
    stop, seen = threading.Event(), []
    sampler = threading.Thread(target=exclusive_locks, args=(dsn, oid, stop, seen))
    sampler.start()
    started = time.time()
    try:
        for mode in ("audit", "transitions", "audit", "transitions"):
            switched = jobctl_process(dsn, "schema", "apply", "--history", mode, "--yes")
            assert switched.returncode == 0, switched.stderr
            assert "install the history trigger" in switched.stderr
            assert history.table_state(conn, oid).mode == mode
            again = jobctl_process(dsn, "schema", "apply", "--history", mode, "--sql")
            assert again.returncode == 0 and again.stdout.strip() == "", again.stdout
    finally:
        ended = time.time()
        stop.set()
        sampler.join()
        busy.stop(workers)
    result = busy.collect(workers)

    # no ACCESS EXCLUSIVE lock on the table: a switch replaces the function and the trigger,
    # and changes no column (the statistics columns stay, unused, in audit)
    assert seen == []
    assert not result["errors"]
    meanwhile = busy.during(result, started, ended)
    assert len(meanwhile) > 100, "the workers were not running during the switches"
    worst = busy.figures(meanwhile)["worst_ms"]
    print(f"\nmode switches: worst worker statement {worst:.0f} ms of {len(meanwhile)}")
    assert worst < BOUND_MS
    checks = json.loads(jobctl_process(dsn, "schema", "check", "-o", "json").stdout)
    assert all(c["ok"] for c in checks), checks

"""The whole flow on the tables people have (tests/shapes.py): apply with the table's own
mapping, check, real workers with the history on, stuck, reclaim (dry run = commit), the stale
worker fenced out, show/history/explain, requeue, fail, summary, metrics."""

from __future__ import annotations

import json
import threading
import time
import uuid

import helpers
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import rows, sql
from shapes import (
    BIGINT_ENUM,
    LIST_BY_QUEUE,
    LIST_BY_STATUS,
    OWN_NAMES_PARKED,
    SERVED,
    SHAPES,
    TEXT_VARCHAR_NAIVE,
    UUID_TEXT_CHECK,
)

from jobctl import db, lease
from jobctl.db import session
from jobctl.ops import triage
from jobctl.ops.reclaim import batches

LEASE_S = 0.4


def made(dsn: str, ddl: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=True, row_factory=rows.dict_row)
    conn.execute(ddl)
    return conn


def as_json(result) -> object:
    assert result.code == 0, (result.code, result.err)
    return json.loads(result.out)


def applied(run, s, dsn: str) -> None:
    """schema apply with the shape's own mapping: it must succeed."""
    result = run("--table", s.table, "schema", "apply", "--yes", *s.mapping_args(), dsn=dsn)
    assert result.code == 0, result.err


def natural(s, value: object) -> object:
    """An id as JSON gives it: a number for integer ids, a string for any other."""
    return int(str(value)) if s.id_kind == "bigint" else str(value)


@pytest.mark.parametrize("s", SERVED, ids=[s.name for s in SERVED])
def test_the_whole_flow_on_each_shape(empty_dsn, run, s):
    def jobctl(*args: str):
        return run("--table", s.table, *args, dsn=empty_dsn)

    with made(empty_dsn, s.ddl) as conn:
        for _ in range(6):
            conn.execute(s.new_job)

        applied(run, s, empty_dsn)
        again = jobctl("schema", "apply", "--sql")  # idempotent: nothing left to do
        assert again.code == 0 and again.out.strip() == "", again.out
        checked = jobctl("schema", "check", "-o", "json")
        checks = {c["check"]: c for c in as_json(checked)}
        assert checked.code == 0, [c for c in checks.values() if not c["ok"]]
        if s.columns:
            assert f"status = {s.status_column}" in checks["the table's names"]["detail"]

        # the workers, with the history on: the worker API reads the recorded mapping
        with psycopg.connect(empty_dsn, autocommit=True) as wconn:
            worker = lease.Worker(wconn, "w1", table=s.table, lease_seconds=LEASE_S)
            claims = [worker.claim() for _ in range(5)]
            assert all(claims)
            first, stale, *expiring = claims
            worker.heartbeat(first)
            worker.complete(first)
            retry_status = worker.fail(expiring[-1], "boom", retry_delay=0)
            assert retry_status == s.queued  # attempts left: queued again, in the table's terms
            expiring[-1] = worker.claim()
            assert expiring[-1] is not None
        manual = expiring[0]
        assert jobctl("policy", str(manual.id), "--manual", "--yes").code == 0
        time.sleep(LEASE_S + 0.2)  # the rest of the leases run out

        stuck = as_json(jobctl("stuck", "-o", "json"))
        expired = {natural(s, c.id) for c in [stale, *expiring]}
        assert {r["id"] for r in stuck} == expired  # natural JSON ids
        assert {r["status"] for r in stuck} == {s.processing}

        dry = as_json(jobctl("reclaim", "-o", "json"))
        done = as_json(jobctl("reclaim", "--commit", "--yes", "-o", "json"))
        decided = sorted((r["id"], r["action"]) for r in dry)
        assert decided == sorted((r["id"], r["action"]) for r in done)
        assert all(r["applied"] for r in done)
        assert ("fail" in {a for _, a in decided}) and ("requeue" in {a for _, a in decided})

        parked = s.park_status or s.failed
        status_of = {
            str(r["id"]): r["status"]
            for r in conn.execute(
                f"SELECT id, {s.status_column}::text AS status FROM {s.table}"
            ).fetchall()
        }
        assert status_of[str(manual.id)] == parked
        assert status_of[str(first.id)] == s.done
        assert status_of[str(stale.id)] == s.queued
        # the manual job awaits review, in the table's own terms
        waiting = as_json(jobctl("review", "-o", "json"))
        assert natural(s, manual.id) in [r["id"] for r in waiting]
        assert {r["status"] for r in waiting} == {parked}
        assert jobctl("report", "--since", "1h").code == 0
        assert as_json(jobctl("events", "--id", str(manual.id), "-o", "json"))[0]["event"] in (
            "reclaimed",
            "policy_changed",
        )

        # the stale worker comes back: fenced out by the token
        with psycopg.connect(empty_dsn, autocommit=True) as wconn:
            zombie = lease.Worker(wconn, "w1", table=s.table, lease_seconds=LEASE_S)
            with pytest.raises(lease.LeaseLost):
                zombie.heartbeat(stale)
            with pytest.raises(lease.LeaseLost):
                zombie.complete(stale)

        shown = as_json(jobctl("show", str(manual.id), "-o", "json"))
        assert shown["id"] == natural(s, manual.id) and shown["status"] == parked
        # for a person, a column the table names otherwise shows both names; JSON the design's
        table_view = jobctl("show", str(manual.id)).out
        for design, actual in (c.split("=", 1) for c in s.columns):
            if design != actual and design in shown:
                assert f"{design} ({actual})" in table_view, table_view
        story = as_json(jobctl("history", str(manual.id), "-o", "json"))
        assert "reclaimed" in [e["event"] for e in story["events"]]
        assert jobctl("explain", str(manual.id)).code == 0

        summary = as_json(jobctl("summary", "-o", "json"))
        assert summary["status"][parked] >= 1 and summary["status"][s.done] == 1
        metrics = jobctl("metrics")
        assert metrics.code == 0, metrics.err
        (gauge,) = [
            m for m in metrics.out.splitlines() if m.startswith("jobctl_manual_review_jobs{")
        ]
        assert gauge.endswith(" 1"), gauge

        requeued = as_json(jobctl("requeue", str(manual.id), "--yes", "-o", "json"))
        assert requeued[0]["outcome"] == "requeued", requeued
        failed = as_json(jobctl("fail", str(stale.id), "--reason", "bad", "--yes", "-o", "json"))
        assert failed[0]["outcome"] == "failed", failed
        assert jobctl("fail", str(stale.id), "--reason", "again", "--yes").code == 2  # refused

        # the application's own insert still works, and so does a new worker's claim
        assert conn.execute(s.new_job).fetchone() is not None


# ---------------------------------------------------------------- the dry run is the commit
PROPERTY_SHAPES = [s for s in SERVED if s.name in {UUID_TEXT_CHECK.name, BIGINT_ENUM.name}]
job_specs = helpers.job_specs(30)


@pytest.mark.parametrize("s", PROPERTY_SHAPES, ids=[s.name for s in PROPERTY_SHAPES])
def test_dry_run_predicts_commit_on_each_shape(empty_dsn, run, s):
    with made(empty_dsn, s.ddl) as conn:
        applied(run, s, empty_dsn)
        names = dict(c.split("=") for c in s.columns)

        def col(design: str) -> sql.Identifier:
            return sql.Identifier(names.get(design, design))

        insert = sql.SQL(
            "INSERT INTO {t} ({status}, {policy}, {attempts}, {max_attempts}, {token}, {lease},"
            " {worker}) VALUES (%s::text::{status_type}, %s, %s, %s, CASE WHEN %s THEN "
            "gen_random_uuid() END, CASE WHEN %s THEN now() + %s * interval '1s' END, 'w')"
        ).format(
            t=sql.Identifier(*s.table.split(".")),
            status=col("status"),
            policy=col("recovery_policy"),
            attempts=col("attempts"),
            max_attempts=col("max_attempts"),
            token=col("attempt_token"),
            lease=col("lease_expires_at"),
            worker=col("reserved_by"),
            status_type=sql.SQL(
                conn.execute(
                    "SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute "
                    "WHERE attrelid = %s::regclass AND attname = %s",
                    (s.table, names.get("status", "status")),
                ).fetchone()["t"]
            ),
        )
        value = {"queued": s.queued, "processing": s.processing, "done": s.done, "failed": s.failed}

        @settings(max_examples=15, deadline=None)
        @given(specs=job_specs, batch_size=st.integers(1, 7))
        def dry_run_is_commit(specs, batch_size):
            conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(*s.table.split("."))))
            for status, policy, attempts, max_attempts, offset in specs:
                busy = status == "processing"
                conn.execute(
                    insert, (value[status], policy, attempts, max_attempts, busy, busy, offset)
                )
            dry = as_json(run("--table", s.table, "reclaim", "-o", "json", dsn=empty_dsn))
            done = as_json(
                run(
                    "--table",
                    s.table,
                    "reclaim",
                    "--commit",
                    "--yes",
                    "--batch-size",
                    str(batch_size),
                    "-o",
                    "json",
                    dsn=empty_dsn,
                )
            )
            assert sorted((r["id"], r["action"]) for r in dry) == sorted(
                (r["id"], r["action"]) for r in done
            )
            assert all(r["applied"] for r in done)

        dry_run_is_commit()


def test_a_mapping_is_recorded_for_everyone_and_merged_by_the_next_apply(empty_dsn, run):
    s = OWN_NAMES_PARKED
    with made(empty_dsn, s.ddl) as conn:
        applied(run, s, empty_dsn)
        (recorded,) = conn.execute("SELECT mapping FROM jobctl.tables").fetchall()
        assert recorded["mapping"]["park_status"] == "manual_review"
        # without the options, the recorded mapping is kept
        again = run("--table", s.table, "schema", "apply", "--yes", dsn=empty_dsn)
        assert again.code == 0, again.err
        assert conn.execute("SELECT mapping FROM jobctl.tables").fetchone() == recorded
        # the options merge into it: the rest given again without --park-status keeps it
        args = [a for a in s.mapping_args() if a not in ("--park-status", "manual_review")]
        assert run("--table", s.table, "schema", "apply", "--yes", *args, dsn=empty_dsn).code == 0
        assert conn.execute("SELECT mapping FROM jobctl.tables").fetchone() == recorded
        # --park-status '' names the park status as gone: reclaim fails them again
        gone = ("--park-status", "")
        assert run("--table", s.table, "schema", "apply", "--yes", *gone, dsn=empty_dsn).code == 0
        mapping = conn.execute("SELECT mapping FROM jobctl.tables").fetchone()["mapping"]
        assert mapping["park_status"] is None
        assert mapping["columns"] == recorded["mapping"]["columns"]  # the rest kept


def test_an_enum_without_a_status_mapping_is_refused_and_nothing_changes(empty_dsn, run):
    s = OWN_NAMES_PARKED
    with made(empty_dsn, s.ddl):
        columns_only = [a for c in s.columns for a in ("--column", c)]
        result = run("--table", s.table, "schema", "apply", "--yes", *columns_only, dsn=empty_dsn)
    assert result.code == 2 and result.err.count("\n") == 1
    assert "would refuse 'queued'" in result.err and "--status" in result.err


def test_an_id_the_column_cannot_hold_is_one_line(empty_dsn, run):
    s = SHAPES[0]  # uuid ids
    with made(empty_dsn, s.ddl):
        assert run("--table", s.table, "schema", "apply", "--yes", dsn=empty_dsn).code == 0
        result = run("--table", s.table, "show", "42", dsn=empty_dsn)
        assert result.code == 2 and result.err.count("\n") == 1
        assert "job id '42' is not a valid uuid" in result.err
        missing = run("--table", s.table, "show", str(uuid.uuid4()), dsn=empty_dsn)
        assert missing.code == 1 and "not found" in missing.err


def test_a_row_moved_to_another_partition_under_a_manual_write_is_a_conflict(empty_dsn, run):
    """On a table partitioned by status, a worker's completion moves the row while jobctl's
    fenced write waits for its lock: PostgreSQL raises 40001 ("already moved to another
    partition"); jobctl reports a conflict (exit 3), nothing written, no traceback."""
    s = LIST_BY_STATUS
    with made(empty_dsn, s.ddl) as conn:
        conn.execute(s.new_job)
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        with psycopg.connect(empty_dsn, autocommit=True) as wconn:
            job = lease.Worker(wconn, "w1", lease_seconds=-1).claim()  # expired at once
        assert job is not None
        worker = psycopg.connect(empty_dsn)  # completes, and holds its transaction open
        worker.execute(
            "UPDATE jobs SET status = 'done', attempt_token = NULL, lease_expires_at = NULL, "
            "reserved_by = NULL WHERE id = %s",
            (job.id,),
        )
        result: dict[str, object] = {}
        thread = threading.Thread(
            target=lambda: result.update(
                r=helpers.jobctl_process(empty_dsn, "fail", str(job.id), "--reason", "x", "--yes")
            )
        )
        thread.start()
        helpers.wait_until(
            lambda: helpers.blocked_by(conn, worker.info.backend_pid), what="jobctl waits"
        )
        worker.commit()  # the row moves to jobs_finished under jobctl's waiting UPDATE
        thread.join(30)
        worker.close()
        failed = result["r"]
        assert failed.returncode == 3, (failed.returncode, failed.stdout, failed.stderr)
        assert "Traceback" not in failed.stderr and "conflict" in failed.stdout
        (row,) = conn.execute("SELECT status, last_error FROM jobs").fetchall()
        assert row == {"status": "done", "last_error": None}


def test_reclaim_races_workers_moving_rows_between_partitions(empty_dsn, run):
    """Workers claim and complete on a table partitioned by status (each transition moves the
    row) while reclaim runs over and over with leases running out under it. A claim that
    finds its row moved by another claimer (40001) tries again (jobctl.lease); a row moved
    between reclaim's snapshot and its lock makes reclaim read the batch again. Neither the
    workers nor reclaim fail, and every job is still there once."""
    s = LIST_BY_STATUS
    with made(empty_dsn, s.ddl) as conn:
        for _ in range(200):
            conn.execute(s.new_job)
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        stop = threading.Event()
        errors: list[BaseException] = []

        def work(name: str) -> None:
            try:
                with psycopg.connect(empty_dsn, autocommit=True) as c:
                    worker = lease.Worker(c, name, lease_seconds=0.05)
                    while not stop.is_set():
                        job = worker.claim()
                        if job is None:
                            time.sleep(0.01)
                            continue
                        time.sleep(0.15 if job.attempt == 1 else 0)  # first leases run out
                        try:
                            worker.complete(job)
                        except lease.LeaseLost:
                            pass
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(3)]
        for t in threads:
            t.start()
        s_ = session.connect(db.Settings(dsn=empty_dsn))
        reclaimed = 0
        try:
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                for batch in batches.commit(s_, triage.ExpiredFilter(), batch_size=5, limit=None):
                    reclaimed += sum(r["applied"] for r in batch)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
            s_.conn.close()
        assert not errors, errors
        assert reclaimed > 0
        counts = {
            r["status"]: r["n"]
            for r in conn.execute("SELECT status, count(*) AS n FROM jobs GROUP BY status")
        }
        assert sum(counts.values()) == 200  # no job lost or doubled by a move


@pytest.mark.parametrize("s", [TEXT_VARCHAR_NAIVE, LIST_BY_QUEUE], ids=["plain", "partitioned"])
def test_new_names_on_an_installed_table_rebuild_its_index(empty_dsn, run, s):
    """--status processing=running on a table installed with the design's names: jobctl's
    reclaim index (WHERE status = 'processing') serves nothing any more and holds the name:
    dropped (a short-lock step) and built again; the history's function is made anew in the
    transaction that records the new names; then nothing is left to do."""
    dsn = empty_dsn
    with made(dsn, s.ddl) as conn:
        conn.execute(s.new_job)
        assert run("--table", s.table, "schema", "apply", "--yes", dsn=dsn).code == 0
        renamed = run(
            "--table",
            s.table,
            "schema",
            "apply",
            "--yes",
            "--status",
            "processing=running",
            dsn=dsn,
        )
        assert renamed.code == 0, renamed.err
        assert "drop the reclaim index" in renamed.err
        assert run("--table", s.table, "schema", "apply", "--sql", dsn=dsn).out.strip() == ""
        checked = run("--table", s.table, "schema", "check", dsn=dsn)
        assert checked.code == 0, checked.out
        predicates = [
            r["p"]
            for r in conn.execute(
                "SELECT pg_get_expr(indpred, indrelid) AS p FROM pg_index "
                "WHERE indrelid = %s::regclass AND indpred IS NOT NULL",
                (s.table,),
            )
        ]
        assert predicates and all("'running'" in p for p in predicates), predicates
        with psycopg.connect(dsn, autocommit=True) as wconn:
            worker = lease.Worker(wconn, "w1", table=s.table, lease_seconds=30)
            job = worker.claim()
            assert job is not None
            worker.complete(job)
        status = conn.execute(f"SELECT status FROM {s.table}").fetchone()["status"]
        assert status == "done"


def test_a_worker_role_reads_the_mapping_without_grants_on_jobctl(empty_dsn, run, roles):
    """The application's own role (SELECT, UPDATE on its table, nothing of jobctl's) still
    runs the worker API after schema apply recorded a mapping."""
    s = OWN_NAMES_PARKED
    app = roles["operator"]
    with made(empty_dsn, s.ddl) as conn:
        conn.execute(s.new_job)
        applied(run, s, empty_dsn)
        conn.execute(f"GRANT SELECT, UPDATE ON {s.table} TO {app}")
        as_app = psycopg.conninfo.make_conninfo(empty_dsn, user=app)
        with psycopg.connect(as_app, autocommit=True) as wconn:
            worker = lease.Worker(wconn, "w1", table=s.table, lease_seconds=30)
            job = worker.claim()
            assert job is not None
            worker.complete(job)
        conn.execute(f"REVOKE ALL ON {s.table} FROM {app}")


def test_an_id_a_domain_refuses_is_one_line(empty_dsn, run):
    ddl = """
    CREATE DOMAIN pos_id AS bigint CHECK (VALUE > 0);
    CREATE TABLE jobs (
        id pos_id PRIMARY KEY DEFAULT 1, status text NOT NULL DEFAULT 'queued',
        attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 3,
        available_at timestamptz NOT NULL DEFAULT now(), reserved_by text,
        reserved_at timestamptz, last_error text, finished_at timestamptz,
        updated_at timestamptz NOT NULL DEFAULT now())"""
    with made(empty_dsn, ddl):
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        # a read passes the id as the domain's base type: its CHECK, the application's code,
        # is not run, so -5 is a bigint no row holds
        result = run("show", "--", "-5", dsn=empty_dsn)
        assert result.code == 1 and "job -5 not found" in result.err, result.err
        result = run("show", "abc", dsn=empty_dsn)
        assert result.code == 2 and result.err.count("\n") == 1, result.err
        assert "job id 'abc' is not a valid public.pos_id" in result.err


def test_create_makes_the_table_where_the_search_path_says(empty_dsn, run):
    dsn = empty_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA app")
    in_app = psycopg.conninfo.make_conninfo(dsn, options="-c search_path=app,public")
    assert run("schema", "apply", "--create", "--yes", dsn=in_app).code == 0
    checked = run("--table", "app.jobs", "schema", "check", dsn=dsn)
    assert checked.code == 0, checked.out
    with psycopg.connect(dsn, autocommit=True) as conn:
        (comment,) = conn.execute(
            "SELECT obj_description(tgfoid, 'pg_proc') FROM pg_trigger "
            "WHERE tgrelid = 'app.jobs'::regclass AND tgname = 'jobctl_history'"
        ).fetchone()
    assert "app.jobs" in comment, comment

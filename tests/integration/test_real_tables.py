"""The whole flow on the tables people have (tests/shapes.py): apply with the table's own
mapping, check, real workers with the history on, stuck, reclaim (dry run = commit), the stale
worker fenced out, show/history/explain, requeue, fail, summary, metrics."""

from __future__ import annotations

import json
import time
import uuid

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import rows, sql
from shapes import BIGINT_ENUM, OWN_NAMES_PARKED, SERVED, SHAPES, UUID_TEXT_CHECK

from jobctl import lease

LEASE_S = 0.4


def made(dsn: str, ddl: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=True, row_factory=rows.dict_row)
    conn.execute(ddl)
    return conn


def as_json(result) -> object:
    assert result.code == 0, (result.code, result.err)
    return json.loads(result.out)


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

        applied = jobctl("schema", "apply", "--yes", *s.mapping_args())
        assert applied.code == 0, applied.err
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

        # the stale worker comes back: fenced out by the token
        with psycopg.connect(empty_dsn, autocommit=True) as wconn:
            zombie = lease.Worker(wconn, "w1", table=s.table, lease_seconds=LEASE_S)
            with pytest.raises(lease.LeaseLost):
                zombie.heartbeat(stale)
            with pytest.raises(lease.LeaseLost):
                zombie.complete(stale)

        shown = as_json(jobctl("show", str(manual.id), "-o", "json"))
        assert shown["id"] == natural(s, manual.id) and shown["status"] == parked
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
job_specs = st.lists(
    st.tuples(
        st.sampled_from(["queued", "processing", "processing", "done", "failed"]),
        st.sampled_from(["auto", "manual"]),
        st.integers(0, 4),  # attempts
        st.integers(1, 4),  # max_attempts
        st.integers(-100, 100),  # lease offset in seconds (negative: expired)
    ),
    max_size=30,
)


@pytest.mark.parametrize("s", PROPERTY_SHAPES, ids=[s.name for s in PROPERTY_SHAPES])
def test_dry_run_predicts_commit_on_each_shape(empty_dsn, run, s):
    with made(empty_dsn, s.ddl) as conn:
        assert (
            run(
                "--table", s.table, "schema", "apply", "--yes", *s.mapping_args(), dsn=empty_dsn
            ).code
            == 0
        )
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


def test_a_mapping_is_recorded_for_everyone_and_replaced_by_the_next_apply(empty_dsn, run):
    s = OWN_NAMES_PARKED
    with made(empty_dsn, s.ddl) as conn:
        assert (
            run(
                "--table", s.table, "schema", "apply", "--yes", *s.mapping_args(), dsn=empty_dsn
            ).code
            == 0
        )
        (recorded,) = conn.execute("SELECT mapping FROM jobctl.tables").fetchall()
        assert recorded["mapping"]["park_status"] == "manual_review"
        # without the options, the recorded mapping is kept
        again = run("--table", s.table, "schema", "apply", "--yes", dsn=empty_dsn)
        assert again.code == 0, again.err
        assert conn.execute("SELECT mapping FROM jobctl.tables").fetchone() == recorded
        # a different park status replaces it (the rest given again: the whole mapping)
        args = [a for a in s.mapping_args() if a not in ("--park-status", "manual_review")]
        assert run("--table", s.table, "schema", "apply", "--yes", *args, dsn=empty_dsn).code == 0
        assert (
            conn.execute("SELECT mapping FROM jobctl.tables").fetchone()["mapping"]["park_status"]
            is None
        )


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

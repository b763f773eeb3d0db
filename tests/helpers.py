"""Data helpers shared by the tests: real rows, made through the worker API where it matters."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import psycopg
from hypothesis import strategies as st
from psycopg import rows

from jobctl import lease

# ---------------------------------------------------------------- data helpers
POOL_SIZE = 2  # server connections per database of the test PgBouncer: commands share them


def add_jobs(
    conn: psycopg.Connection[Any], count: int, *, policy: str = "auto", max_attempts: int = 3
) -> list[int]:
    rows_ = conn.execute(
        "INSERT INTO jobs (recovery_policy, max_attempts) "
        "SELECT %s, %s FROM generate_series(1, %s) RETURNING id",
        (policy, max_attempts, count),
    ).fetchall()
    return [r["id"] for r in rows_]


def claim_all(
    dsn: str, count: int, *, worker: str = "w1", lease_seconds: float = -60
) -> list[lease.Claim]:
    """Claim ``count`` jobs through the worker API; a negative lease is already expired."""
    with psycopg.connect(dsn, autocommit=True) as c:
        w = lease.Worker(c, worker, lease_seconds=lease_seconds)
        claims = [w.claim() for _ in range(count)]
    return [c for c in claims if c is not None]


def snapshot(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Every byte of the jobs table and the history, to prove nothing changed."""
    with conn.cursor(row_factory=rows.tuple_row) as cur:
        jobs = cur.execute("SELECT j.*, j.xmin::text FROM jobs j ORDER BY id").fetchall()
        events = cur.execute("SELECT count(*) FROM jobctl.events").fetchall()
    return [*jobs, *events]


# every command that only reads: each must work for the read-only role and change nothing
READ_COMMANDS = (
    ["stuck"],
    ["stuck", "--expiring-within", "1m"],
    ["summary"],
    ["show", "1"],
    ["history", "1"],
    ["explain", "1"],
    ["metrics"],
    ["reclaim", "--dry-run"],
    ["quarantine"],
    ["review"],
    ["schema", "check"],
    ["schema", "statements"],
    ["doctor"],
)


def jobctl_process(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed entry point as a real process, without a terminal."""
    env = {**os.environ, "JOBCTL_DSN": dsn, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "jobctl", *args],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def reclaim_times(conn, dsn, run, times: int, job_ids: list[int]) -> None:
    """Claim and let the leases of ``job_ids`` expire, then reclaim, ``times`` times."""
    for _ in range(times):
        claim_all(dsn, len(job_ids))
        assert run("reclaim", "--commit", "--yes").code == 0


# ---------------------------------------------------------------- barriers
def wait_until(condition, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def blocked_by(conn: psycopg.Connection[Any], pid: int) -> bool:
    """Is any session waiting on a lock that backend ``pid`` holds? (the barrier)"""
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)
    ).fetchone()
    return row["n"] > 0


def grant_roles(run, roles: dict[str, str], dsn: str | None = None):
    """jobctl schema grants for the ``roles`` fixture's read-only and operator roles (``dsn``:
    in that database instead of the test's)."""
    return run(
        "schema",
        "grants",
        "--readonly",
        roles["readonly"],
        "--operator",
        roles["operator"],
        "--yes",
        dsn=dsn,
    )


def job_specs(max_size: int) -> st.SearchStrategy[list[tuple[str, str, int, int, int]]]:
    """Jobs for the dry run = commit property: (status, policy, attempts, max_attempts, lease
    offset in seconds: negative is expired), in the lease design's status names."""
    return st.lists(
        st.tuples(
            st.sampled_from(["queued", "processing", "processing", "done", "failed"]),
            st.sampled_from(["auto", "manual"]),
            st.integers(0, 4),
            st.integers(1, 4),
            st.integers(-100, 100),
        ),
        max_size=max_size,
    )


def function_statistics(conn: psycopg.Connection[Any], dbname: str) -> dict[str, int]:
    """``schema.function: calls`` for the user functions the server has counted, once every
    other session of ``dbname`` has gone (a backend's function statistics reach the others
    at its exit, and on PostgreSQL 14 later still: a message to the statistics collector).
    A marker function is called by one more session; the counts are read when its call
    shows, so that none of the sessions before it is still on the way."""
    tuples = conn.cursor(row_factory=rows.tuple_row)

    def others() -> int:
        row = tuples.execute(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_catalog.pg_backend_pid()",
            (dbname,),
        ).fetchone()
        return int(row[0]) if row else 0

    def counts() -> dict[str, int]:
        tuples.execute("SELECT pg_catalog.pg_stat_clear_snapshot()")
        return {
            f"{schema}.{name}": int(calls)
            for schema, name, calls in tuples.execute(
                "SELECT schemaname, funcname, calls FROM pg_catalog.pg_stat_user_functions"
            )
        }

    marker = "public.jobctl_test_statistics_marker"
    tuples.execute(
        f"CREATE OR REPLACE FUNCTION {marker}() RETURNS pg_catalog.bool LANGUAGE plpgsql "
        "SET search_path = pg_catalog AS $$ BEGIN RETURN true; END $$"
    )
    deadline = time.monotonic() + 10
    while others() and time.monotonic() < deadline:
        time.sleep(0.05)
    before = counts().get(marker, 0)
    with psycopg.connect(conn.info.dsn, autocommit=True) as one_more:
        one_more.execute(f"SET track_functions = 'pl'; SELECT {marker}()")
    deadline = time.monotonic() + 30
    while (after := counts()).get(marker, 0) <= before:
        assert time.monotonic() < deadline, "the function statistics did not arrive"
        time.sleep(0.1)
    after.pop(marker)
    return after


# the application's trigger that records the role each UPDATE of the jobs table ran as (in
# public.ran_as: current_user, whether a superuser, the login); the test makes its owner
RECORD_ROLE = (
    "CREATE TABLE public.ran_as (who text, superuser boolean, login text);"
    "GRANT INSERT ON public.ran_as TO PUBLIC;"
    "CREATE FUNCTION public.record_role() RETURNS trigger LANGUAGE plpgsql AS $$"
    "BEGIN INSERT INTO public.ran_as SELECT current_user, rolsuper, session_user"
    " FROM pg_roles WHERE rolname = current_user; RETURN NEW; END $$;"
    "CREATE TRIGGER zz_app_records BEFORE UPDATE ON jobs"
    " FOR EACH ROW EXECUTE FUNCTION public.record_role()"
)

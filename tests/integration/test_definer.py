"""What the history's SECURITY DEFINER function records and runs.

Finding 5: an operator's action records the operator's reason or none, never the row's text.
Finding 2 (the function's part): the function runs as its owner on every worker's write; a
cast the application made for an ENUM it owns (CREATE CAST ... WITH FUNCTION) is never called
by it — a status is recorded as text through the type's output function."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from helpers import add_jobs, claim_all
from psycopg import conninfo, sql
from shapes import BIGINT_ENUM

FORGED = "Approved by finance (J. Doe): customer NOT charged, safe to requeue"


def test_a_requeue_without_a_reason_records_none_not_the_rows_last_error(conn, dsn, run):
    add_jobs(conn, 1, policy="manual")
    claim_all(dsn, 1)
    assert run("reclaim", "--commit", "--yes").code == 0  # manual: failed, awaiting review
    conn.execute("UPDATE jobs SET last_error = %s", (FORGED,))  # the application's text
    code, out, err = run("requeue", "1", "--yes", "-o", "json")
    assert code == 0 and json.loads(out)[0]["outcome"] == "requeued", err
    events = conn.execute(
        "SELECT event, reason FROM jobctl.events WHERE job_id = '1' ORDER BY event_id"
    ).fetchall()
    assert [(e["event"], e["reason"]) for e in events] == [
        ("reclaimed", "lease expired before completion"),
        ("requeued", None),
    ]
    code, out, _ = run("explain", "1")
    assert code == 0
    assert "requeued it by hand" in out and "Approved by finance" not in out, out


def test_a_requeue_with_a_reason_records_it(conn, dsn, run):
    add_jobs(conn, 1, policy="manual")
    claim_all(dsn, 1)
    assert run("reclaim", "--commit", "--yes").code == 0
    assert run("requeue", "1", "--yes", "--reason", "retry after fix").code == 0
    row = conn.execute("SELECT reason FROM jobctl.events WHERE event = 'requeued'").fetchone()
    assert row["reason"] == "retry after fix"


@pytest.fixture
def enum_app(empty_dsn: str) -> Iterator[tuple[str, str]]:
    """An application role owning an ENUM status type and the jobs table, with a cast of that
    type to text that notes who ran it; its name and DSN."""
    name = f"jobctl_app_{uuid.uuid4().hex[:8]}"
    app_dsn = conninfo.make_conninfo(empty_dsn, user=name)
    with psycopg.connect(empty_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        admin.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(name)))
    with psycopg.connect(app_dsn, autocommit=True) as c:
        c.execute(BIGINT_ENUM.ddl)
        c.execute("CREATE TABLE public.cast_calls (who text)")
        c.execute("GRANT INSERT ON public.cast_calls TO PUBLIC")
        c.execute(
            "CREATE FUNCTION public.spy(job_status) RETURNS text LANGUAGE plpgsql AS $$ "
            "BEGIN INSERT INTO public.cast_calls VALUES (current_user); "
            "RETURN pg_catalog.format('%s', $1); END $$"
        )
        c.execute("CREATE CAST (job_status AS text) WITH FUNCTION public.spy(job_status)")
    yield name, app_dsn
    with psycopg.connect(empty_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_the_history_function_never_calls_the_applications_cast(empty_dsn, enum_app, run):
    _, app_dsn = enum_app
    code, _, err = run("schema", "apply", "--yes", dsn=empty_dsn)
    assert code == 0, err
    with psycopg.connect(app_dsn, autocommit=True) as c:  # the workers' own writes
        c.execute("INSERT INTO jobs DEFAULT VALUES")
        c.execute(
            "UPDATE jobs SET status = 'processing', attempt_token = gen_random_uuid(), "
            "lease_expires_at = now() + interval '1 minute', reserved_by = 'w1'"
        )
        c.execute("UPDATE jobs SET status = 'failed', last_error = 'boom', attempt_token = NULL")
        c.execute("UPDATE jobs SET status = 'queued'")
    with psycopg.connect(empty_dsn) as c:
        calls = c.execute("SELECT who FROM public.cast_calls").fetchall()
        events = c.execute(
            "SELECT from_status, to_status FROM jobctl.events ORDER BY event_id"
        ).fetchall()
    assert calls == []  # (on the old function: one call per status recorded, as its owner)
    assert ("processing", "failed") in events and ("failed", "queued") in events, events


def test_the_history_function_never_runs_a_domains_check_as_its_owner(empty_dsn, run):
    """A domain status whose CHECK calls a function of the application's: the function's
    comparisons cast jobctl's status values to the domain's base type, not to the domain."""
    name = f"jobctl_app_{uuid.uuid4().hex[:8]}"
    app_dsn = conninfo.make_conninfo(empty_dsn, user=name)
    with psycopg.connect(empty_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        admin.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(name)))
    try:
        with psycopg.connect(app_dsn, autocommit=True) as c:
            c.execute("CREATE TABLE public.check_calls (who text)")
            c.execute("GRANT INSERT ON public.check_calls TO PUBLIC")
            c.execute(
                # (schema apply evaluates the CHECK on jobctl's values read-only: not noted)
                "CREATE FUNCTION public.spy(text) RETURNS boolean LANGUAGE plpgsql AS $$ "
                "BEGIN IF current_setting('transaction_read_only') = 'off' THEN "
                "INSERT INTO public.check_calls VALUES (current_user); END IF; "
                "RETURN true; END $$"
            )
            c.execute("CREATE DOMAIN job_state AS text CHECK (public.spy(VALUE))")
            c.execute(
                "CREATE TABLE jobs (id bigserial PRIMARY KEY, "
                "status job_state NOT NULL DEFAULT 'queued', attempts int NOT NULL DEFAULT 0, "
                "max_attempts int NOT NULL DEFAULT 3, "
                "available_at timestamptz NOT NULL DEFAULT now(), reserved_by text, "
                "reserved_at timestamptz, last_error text, finished_at timestamptz, "
                "updated_at timestamptz NOT NULL DEFAULT now())"
            )
        code, _, err = run("schema", "apply", "--yes", dsn=empty_dsn)
        assert code == 0, err
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            admin.execute("TRUNCATE public.check_calls")
        with psycopg.connect(app_dsn, autocommit=True) as c:  # the workers' own writes
            c.execute("INSERT INTO jobs DEFAULT VALUES")
            c.execute(
                "UPDATE jobs SET status = 'processing', attempt_token = gen_random_uuid(), "
                "lease_expires_at = now() + interval '1 minute', reserved_by = 'w1'"
            )
            c.execute("UPDATE jobs SET status = 'failed', attempt_token = NULL")
        with psycopg.connect(empty_dsn) as c:
            callers = {r[0] for r in c.execute("SELECT who FROM public.check_calls")}
            events = c.execute("SELECT count(*) FROM jobctl.events").fetchone()
        assert callers == {name}, callers  # the workers' own, as themselves; never the owner's
        assert events is not None and events[0] >= 1
    finally:
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))

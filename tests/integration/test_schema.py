"""schema apply and schema check on tables with and without the lease design's columns."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

from jobctl import lease
from jobctl.schema import apply as schema_apply

DESIGN_COLUMNS = """
ALTER TABLE {t}
    ADD COLUMN attempt_token UUID,
    ADD COLUMN lease_expires_at TIMESTAMPTZ,
    ADD COLUMN heartbeat_at TIMESTAMPTZ,
    ADD COLUMN recovery_policy TEXT NOT NULL DEFAULT 'auto'
        CHECK (recovery_policy IN ('auto', 'manual')),
    ADD COLUMN reclaim_count INTEGER NOT NULL DEFAULT 0 CHECK (reclaim_count >= 0);
CREATE INDEX idx_{t}_processing_timeout ON {t} (status, lease_expires_at, id)
    WHERE status = 'processing';
"""

PLAIN_QUEUE = """
CREATE TABLE {t} (
    id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'queued',
    attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 5,
    available_at timestamptz NOT NULL DEFAULT now(), reserved_by text,
    reserved_at timestamptz, last_error text, finished_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now());
INSERT INTO {t} (status) SELECT 'done' FROM generate_series(1, 100);
"""


def schema_state(conn, table: str):
    return conn.execute(
        "SELECT (SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute "
        "        WHERE attrelid = %(t)s::regclass AND attnum > 0 AND NOT attisdropped) AS cols,"
        " (SELECT array_agg(conname::text ORDER BY conname) FROM pg_constraint "
        "        WHERE conrelid = %(t)s::regclass) AS cons,"
        " (SELECT array_agg(indexrelid::regclass::text ORDER BY 1) FROM pg_index "
        "        WHERE indrelid = %(t)s::regclass) AS idx,"
        " (SELECT array_agg(tgname::text ORDER BY 1) FROM pg_trigger "
        "        WHERE tgrelid = %(t)s::regclass) AS trg",
        {"t": table},
    ).fetchone()


@pytest.mark.parametrize("with_design_columns", [False, True], ids=["plain", "design-columns"])
def test_apply_is_idempotent(conn, run, with_design_columns):
    conn.execute(PLAIN_QUEUE.format(t="q"))
    if with_design_columns:
        conn.execute(DESIGN_COLUMNS.format(t="q"))
    assert run("--table", "q", "schema", "check").code == 4
    preview = run("--table", "q", "schema", "apply", "--sql")
    assert "CREATE INDEX CONCURRENTLY" in preview.out or with_design_columns
    first = run("--table", "q", "schema", "apply", "--yes")
    assert first.code == 0, first.err
    state = schema_state(conn, "q")
    assert run("--table", "q", "schema", "apply", "--yes").code == 0
    assert schema_state(conn, "q") == state
    assert [i for i in state["idx"] if "processing_timeout" in i] == ["idx_q_processing_timeout"]
    assert "q_recovery_policy_check" in state["cons"] and "q_reclaim_count_check" in state["cons"]
    check = run("--table", "q", "schema", "check", "-o", "json")
    assert check.code == 0, check.out
    assert all(c["ok"] for c in json.loads(check.out))


def test_sql_changes_nothing(conn, run):
    conn.execute(PLAIN_QUEUE.format(t="q"))
    before = schema_state(conn, "q")
    assert "ALTER TABLE" in run("--table", "q", "schema", "apply", "--sql").out
    assert schema_state(conn, "q") == before


def test_create_in_another_schema(conn, run):
    conn.execute("CREATE SCHEMA queue")
    assert run("--table", "queue.jobs", "schema", "apply", "--create", "--yes").code == 0
    assert run("--table", "queue.jobs", "schema", "check").code == 0
    assert run("--table", "queue.jobs", "stuck").code == 0


def test_check_finds_what_reclaim_cannot_see(conn, run):
    conn.execute("INSERT INTO jobs (status) VALUES ('processing')")  # no lease, no token
    # a token on a queued row: only a processing row holds one, and a done row keeps its own
    conn.execute("INSERT INTO jobs (status, attempt_token) VALUES ('queued', gen_random_uuid())")
    conn.execute("DROP INDEX idx_jobs_processing_timeout")
    result = run("schema", "check", "-o", "json")
    assert result.code == 4
    failed = {c["check"] for c in json.loads(result.out) if not c["ok"]}
    assert failed == {
        "reclaim index",
        "processing rows without lease or token",
        "a token only on processing or done rows",
    }
    shown = json.loads(run("show", "1", "-o", "json").out)
    assert shown["lease_state"] == "none"


def test_invalid_index_is_rebuilt(conn, run):
    conn.execute(
        "UPDATE pg_index SET indisvalid = false "
        "WHERE indexrelid = 'idx_jobs_processing_timeout'::regclass"
    )
    assert "INVALID" in run("schema", "check").out
    conn.execute("INSERT INTO jobs DEFAULT VALUES")
    result = run("schema", "apply", "--yes")
    assert result.code == 0 and "drop the invalid reclaim index" in result.err
    assert run("schema", "check").code == 0


def test_a_reclaim_index_of_another_name_is_kept(conn, run):
    conn.execute(PLAIN_QUEUE.format(t="q"))
    conn.execute(DESIGN_COLUMNS.format(t="q").split("CREATE INDEX")[0])
    conn.execute(
        "CREATE INDEX q_expiry ON q (status, lease_expires_at) WHERE status = 'processing'"
    )
    assert run("--table", "q", "schema", "apply", "--yes").code == 0
    indexes = [i for i in schema_state(conn, "q")["idx"] if "expir" in i or "timeout" in i]
    assert indexes == ["q_expiry"]
    check = {
        c["check"]: c for c in json.loads(run("--table", "q", "schema", "check", "-o", "json").out)
    }
    assert check["reclaim index"]["detail"] == "q_expiry (valid)"


@pytest.mark.parametrize("name", ['"order"', '"Jobs"', 'queue."Work Items"'])
def test_history_works_for_keyword_and_quoted_table_names(conn, dsn, run, name):
    """The history keys jobs by format('%I.%I'): jobctl must spell the table the same way
    (a keyword such as "order" is quoted there, and was not by jobctl before)."""
    conn.execute("CREATE SCHEMA IF NOT EXISTS queue")
    assert run("--table", name, "schema", "apply", "--create", "--yes").code == 0
    conn.execute(f"INSERT INTO {name} DEFAULT VALUES")
    table = sql.Identifier(*schema_apply.split_name(name))
    with psycopg.connect(dsn, autocommit=True) as c:
        assert lease.Worker(c, "w1", lease_seconds=-1, table=table).claim() is not None
    assert run("--table", name, "reclaim", "--commit", "--yes").code == 0
    history = json.loads(run("--table", name, "history", "1", "-o", "json").out)
    assert [e["event"] for e in history["events"]] == ["claimed", "reclaimed"]

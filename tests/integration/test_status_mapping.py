"""A status mapping judged against the rows: schema apply refuses, and schema check fails, a
mapping neither of whose queued and processing values the table holds while it holds values
no status names (the jobs that wait and run are under other names, and summary would count
none of them); only one of the two not seen is named, not refused; an idle table whose
every value is named is served."""

from __future__ import annotations

import json

import psycopg
from queue_libraries import schema_dump

TASKS = """
CREATE TABLE tasks (
    id bigserial PRIMARY KEY, state varchar(20) NOT NULL DEFAULT 'pending',
    attempts integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL DEFAULT 3,
    available_at timestamptz NOT NULL DEFAULT now(), reserved_by text, reserved_at timestamptz,
    last_error text, finished_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now()
)
"""
# what the application uses: pending, started, done, failed (OCA queue_job's words)
ROWS = """
INSERT INTO tasks (state, reserved_by, reserved_at)
SELECT (ARRAY['pending', 'started', 'done', 'failed'])[1 + i % 4],
       CASE WHEN i % 4 = 1 THEN 'w1' END, CASE WHEN i % 4 = 1 THEN now() END
FROM generate_series(0, 199) AS i
"""
TABLE = ("--table", "tasks")
WRONG = ("--column", "status=state", "--status", "done=done", "--status", "failed=failed")
RIGHT = (*WRONG, "--status", "queued=pending", "--status", "processing=started")


def made(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def held(run, dsn: str):
    result = run(*TABLE, "schema", "check", "-o", "json", dsn=dsn)
    return result, {c["check"]: c for c in json.loads(result.out)}["status values the table holds"]


def test_apply_refuses_a_mapping_whose_queued_and_processing_values_are_not_held(empty_dsn, run):
    made(empty_dsn, TASKS, ROWS)
    before = schema_dump(empty_dsn)
    refused = run(*TABLE, "schema", "apply", "--yes", *WRONG, dsn=empty_dsn)
    assert refused.code == 2, refused.err
    line = refused.err.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert line.startswith("jobctl: error: public.tasks: its statuses are not mapped"), line
    # the values it maps, the values it saw (those no status names), the flag to fix it
    assert "queued value 'queued'" in line and "processing value 'processing'" in line, line
    assert "'done', 'failed', 'pending', 'started'" in line, line
    assert "'pending', 'started' no status of the mapping names" in line, line
    assert "--status queued=ACTUAL --status processing=ACTUAL" in line, line
    assert line.endswith("; nothing done"), line
    assert schema_dump(empty_dsn) == before
    script = run(*TABLE, "schema", "apply", "--sql", *WRONG, dsn=empty_dsn)
    assert script.code == 2 and script.out == "", script.err
    # the values the application uses: served
    applied = run(*TABLE, "schema", "apply", "--yes", *RIGHT, dsn=empty_dsn)
    assert applied.code == 0, applied.err
    _, row = held(run, empty_dsn)  # (its started rows have no lease: another check fails)
    assert row["ok"] is True and "not seen" not in row["detail"], row


def test_check_fails_the_mapping_once_the_rows_hold_other_values(empty_dsn, run):
    """Applied while the table was empty (nothing to judge by), the mapping's queued and
    processing values then never come: check fails it (exit 4), and summary indeed counts
    none of the running jobs."""
    made(empty_dsn, TASKS)
    applied = run(*TABLE, "schema", "apply", "--yes", *WRONG, dsn=empty_dsn)
    assert applied.code == 0, applied.err
    made(empty_dsn, ROWS)
    result, row = held(run, empty_dsn)
    assert result.code == 4, result.err
    assert row["ok"] is False, row
    assert "queued value 'queued'" in row["detail"], row
    assert "schema apply --status queued=ACTUAL" in row["detail"], row
    summary = json.loads(run(*TABLE, "summary", "-o", "json", dsn=empty_dsn).out)
    counts = summary["status"]  # the 50 started jobs are running, counted as none of them
    assert counts["processing"] == 0 and counts["queued"] == 0 and counts["started"] == 50


def test_one_of_the_two_not_seen_is_named_not_refused(empty_dsn, run):
    """No job running at the moment (or the processing value mistyped): apply goes on, and
    check passes, naming the value not seen."""
    made(empty_dsn, TASKS, ROWS, "UPDATE tasks SET state = 'pending' WHERE state = 'started'")
    applied = run(*TABLE, "schema", "apply", "--yes", *RIGHT, dsn=empty_dsn)
    assert applied.code == 0, applied.err
    result, row = held(run, empty_dsn)
    assert result.code == 0, result.out
    assert row["ok"] is True, row
    assert "(not seen in the rows sampled: 'started')" in row["detail"], row


def test_an_idle_table_whose_every_value_is_named_is_served(empty_dsn, run):
    """Only done and failed jobs, both named: nothing says the queued and processing names
    are wrong, so apply serves the table and check passes."""
    made(empty_dsn, TASKS, ROWS, "DELETE FROM tasks WHERE state IN ('pending', 'started')")
    applied = run(*TABLE, "schema", "apply", "--yes", *WRONG, dsn=empty_dsn)
    assert applied.code == 0, applied.err
    result, row = held(run, empty_dsn)
    assert result.code == 0, result.out
    assert row["ok"] is True and "not seen in the rows sampled" in row["detail"], row

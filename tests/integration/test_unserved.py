"""A table jobctl does not serve (yet): read commands say which case it is — missing columns,
unmapped statuses, only the lease columns to add — and the next step, which is then accepted
(never a command that would be refused); schema check and schema apply judge the status
values against what the table holds (the django-tasks-db case)."""

from __future__ import annotations

import json

import psycopg
import pytest
from queue_libraries import schema_dump

# django-tasks' database backend (django_tasks_db's DBTaskResult): status varchar(10) holding
# READY/RUNNING/SUCCESSFUL/FAILED, no CHECK
DJANGO_TASKS = """
CREATE TABLE django_tasks_database_dbtaskresult (
    id uuid PRIMARY KEY,
    status varchar(10) NOT NULL,
    enqueued_at timestamptz NOT NULL,
    started_at timestamptz,
    finished_at timestamptz,
    args_kwargs jsonb NOT NULL,
    priority integer NOT NULL,
    task_path text NOT NULL,
    queue_name varchar(32) NOT NULL,
    backend_name varchar(32) NOT NULL,
    run_after timestamptz,
    return_value jsonb,
    exception_class_path text NOT NULL,
    traceback text NOT NULL,
    worker_ids jsonb NOT NULL DEFAULT '[]',
    last_attempted_at timestamptz
);
INSERT INTO django_tasks_database_dbtaskresult
    (id, status, enqueued_at, args_kwargs, priority, task_path, queue_name, backend_name,
     exception_class_path, traceback)
SELECT gen_random_uuid(), (ARRAY['READY', 'RUNNING', 'SUCCESSFUL', 'FAILED'])[1 + i %% 4],
       now(), '{}', 0, 'app.tasks.send', 'default', 'default', '', ''
FROM generate_series(1, 200) AS i;
"""
DJANGO = "django_tasks_database_dbtaskresult"
# the design's columns named as django-tasks has them (and two it lacks, added); not its statuses
DJANGO_COLUMNS = (
    "--column", "attempts=priority", "--column", "max_attempts=priority2",
    "--column", "available_at=run_after", "--column", "reserved_by=worker",
    "--column", "reserved_at=started_at", "--column", "last_error=traceback",
    "--column", "updated_at=last_attempted_at",
)  # fmt: skip

READS = (("stuck",), ("summary",), ("reclaim", "--dry-run"))


def made(dsn: str, ddl: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ddl.replace("%%", "%"))


def test_schema_check_judges_the_status_values_the_table_holds(empty_dsn, run):
    made(empty_dsn, DJANGO_TASKS)
    result = run("--table", DJANGO, "schema", "check", "-o", "json", dsn=empty_dsn)
    assert result.code == 4, result.err
    checks = {c["check"]: c for c in json.loads(result.out)}
    held = checks["status values the table holds"]
    assert held["ok"] is False
    for value in ("READY", "RUNNING", "SUCCESSFUL", "FAILED"):
        assert repr(value) in held["detail"]
    assert "--status" in held["detail"]
    verdict = checks["schema apply"]  # (and the columns to name, before the statuses)
    assert verdict["ok"] is False and "--column DESIGN=ACTUAL" in verdict["detail"], verdict
    # mapped to the table's own, the check passes
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(  # (the columns it lacks, added as a user would)
            f"ALTER TABLE {DJANGO} ADD COLUMN priority2 integer NOT NULL DEFAULT 3, "
            "ADD COLUMN worker text"
        )
        before = schema_dump(empty_dsn)
    refused = run("--table", DJANGO, "schema", "apply", "--yes", *DJANGO_COLUMNS, dsn=empty_dsn)
    assert refused.code == 2, refused.err
    assert "statuses are not mapped" in refused.err and "'READY'" in refused.err
    assert "nothing done" in refused.err
    assert schema_dump(empty_dsn) == before
    mapped = (
        *DJANGO_COLUMNS,
        "--status", "queued=READY", "--status", "processing=RUNNING",
        "--status", "done=SUCCESSFUL", "--status", "failed=FAILED",
    )  # fmt: skip
    applied = run("--table", DJANGO, "schema", "apply", "--yes", *mapped, dsn=empty_dsn)
    assert applied.code == 0, applied.err
    result = run("--table", DJANGO, "schema", "check", "-o", "json", dsn=empty_dsn)
    held = {c["check"]: c for c in json.loads(result.out)}["status values the table holds"]
    assert held["ok"] is True and "'RUNNING'" in held["detail"], held


def test_schema_check_on_an_empty_table_has_nothing_to_judge_by(dsn, run):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM jobs")
    result = run("schema", "check", "-o", "json", dsn=dsn)
    held = {c["check"]: c for c in json.loads(result.out)}["status values the table holds"]
    assert held == {"check": "status values the table holds", "ok": True,
                    "detail": "no rows to judge by"}  # fmt: skip


def test_reads_on_a_table_with_columns_to_name_say_so(empty_dsn, run):
    made(empty_dsn, DJANGO_TASKS)
    for command in READS:
        result = run("--table", DJANGO, *command, dsn=empty_dsn)
        assert result.code == 1, result.err
        assert "does not exist" not in result.err and "lacks the lease" not in result.err
        assert "schema apply would refuse it as it is" in result.err
        assert "no column for the lease design's attempts" in result.err
        assert "--column DESIGN=ACTUAL" in result.err


def test_reads_on_a_table_without_a_status_column_say_so(empty_dsn, run):
    made(empty_dsn, "CREATE TABLE locks (id bigserial PRIMARY KEY, locked_until timestamptz)")
    for command in READS:
        result = run("--table", "locks", *command, dsn=empty_dsn)
        assert result.code == 1 and "no status column 'status'" in result.err, result.err
        assert "--column status=ACTUAL" in result.err


ENUM_TABLE = """
CREATE TYPE job_state AS ENUM ('pending', 'running', 'completed', 'errored');
CREATE TABLE jobs (
    id bigserial PRIMARY KEY, status job_state NOT NULL DEFAULT 'pending',
    attempts integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL DEFAULT 3,
    available_at timestamptz NOT NULL DEFAULT now(), reserved_by text, reserved_at timestamptz,
    last_error text, finished_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO jobs (status) VALUES ('pending'), ('running'), ('completed');
"""
TEXT_TABLE = ENUM_TABLE.replace("status job_state", "status text").replace(
    "CREATE TYPE job_state AS ENUM ('pending', 'running', 'completed', 'errored');", ""
)


@pytest.mark.parametrize("ddl", [ENUM_TABLE, TEXT_TABLE], ids=["enum", "text"])
def test_reads_on_a_table_whose_statuses_are_not_mapped_say_so(empty_dsn, run, ddl):
    made(empty_dsn, ddl)
    for command in READS:
        result = run(*command, dsn=empty_dsn)
        assert result.code == 1, result.err
        assert "does not exist" not in result.err, result.err
        assert "--status DESIGN=ACTUAL" in result.err, result.err
    mapping = (
        "--status", "queued=pending", "--status", "processing=running",
        "--status", "done=completed", "--status", "failed=errored",
    )  # fmt: skip
    assert run("schema", "apply", "--yes", *mapping, dsn=empty_dsn).code == 0
    assert run("stuck", dsn=empty_dsn).code == 0


def test_reads_on_a_table_lacking_only_the_lease_columns_name_apply_which_then_works(
    empty_dsn, run
):
    made(empty_dsn, TEXT_TABLE.replace("'errored'", "'failed'").replace(
        "('pending'), ('running'), ('completed')", "('queued'), ('processing'), ('done')"
    ))  # fmt: skip
    for command in READS:
        result = run(*command, dsn=empty_dsn)
        assert result.code == 1, result.err
        assert "lacks the lease columns (attempt_token" in result.err, result.err
        assert "run jobctl schema apply" in result.err
    assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
    assert run("stuck", dsn=empty_dsn).code == 0


def test_a_read_only_role_gets_the_diagnosis_or_the_original_error_in_one_line(
    roles, empty_dsn, run
):
    """A role that may only read the table: the catalog and its rows are enough to judge it;
    one that may not even read the rows is told so (PostgreSQL names the missing column
    first), one line, never a traceback."""
    from psycopg import conninfo

    made(empty_dsn, TEXT_TABLE.replace("'errored'", "'failed'").replace(
        "('pending'), ('running'), ('completed')", "('queued'), ('processing'), ('done')"
    ))  # fmt: skip
    reader, stranger = roles["readonly"], roles["operator"]
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT ON jobs TO {reader}")
    try:
        result = run("stuck", dsn=conninfo.make_conninfo(empty_dsn, user=reader))
    finally:
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            conn.execute(f"REVOKE SELECT ON jobs FROM {reader}")
    assert result.code == 1 and "lacks the lease columns" in result.err, result.err
    result = run("stuck", dsn=conninfo.make_conninfo(empty_dsn, user=stranger))
    assert result.code == 1 and "permission denied" in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err

"""Least privilege: a read-only role and an operator role, logged in as each."""

from __future__ import annotations

import json

import psycopg
import pytest
from conftest import dsn_for
from helpers import READ_COMMANDS, add_jobs, claim_all, grant_roles, snapshot
from psycopg import conninfo


def as_role(dsn: str, role: str) -> str:
    return conninfo.make_conninfo(dsn, user=role)


def test_readonly_and_operator_roles(roles, conn, dsn, run):
    add_jobs(conn, 6, policy="manual")
    claim_all(dsn, 6)
    grant = grant_roles(run, roles)
    assert grant.code == 0, grant.err
    ro, rw = as_role(dsn, roles["readonly"]), as_role(dsn, roles["operator"])

    for args in READ_COMMANDS:
        code, _, err = run(*args, dsn=ro)
        assert code == 0, (args, err)

    before = snapshot(conn)
    for args in (
        ["reclaim", "--commit", "--yes"],
        ["requeue", "1", "--yes", "--force"],
        ["fail", "2", "--reason", "x", "--yes"],
    ):
        code, out, err = run(*args, dsn=ro)
        assert code == 1, (args, out, err)
        assert len(err.strip().splitlines()) == 1 and "permission denied" in err, err
        assert "Traceback" not in err
    assert snapshot(conn) == before

    code, out, err = run("reclaim", "--commit", "--yes", "--limit", "2", "-o", "json", dsn=rw)
    assert code == 0 and len(json.loads(out)) == 2, err
    code, out, err = run("requeue", "1", "--yes", "--reason", "ok", "-o", "json", dsn=rw)
    assert code == 0 and json.loads(out)[0]["outcome"] == "requeued", err
    code, out, err = run("fail", "3", "--yes", "--reason", "no", "-o", "json", dsn=rw)
    assert code == 0 and json.loads(out)[0]["outcome"] == "failed", err
    events = conn.execute(
        "SELECT event, actor FROM jobctl.events WHERE event IN "
        "('requeued', 'manually_failed', 'reclaimed') ORDER BY event_id"
    ).fetchall()
    assert [e["event"] for e in events] == ["reclaimed", "reclaimed", "requeued", "manually_failed"]

    # the operator may not forge the audit trail nor change the schema
    with (
        psycopg.connect(rw, autocommit=True) as c,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        c.execute("INSERT INTO jobctl.events (job_table, job_id, event) VALUES ('x', 1, 'fake')")
    with (
        psycopg.connect(rw, autocommit=True) as c,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        c.execute("UPDATE jobs SET payload = '{}'")
    # something for apply to do (it is idempotent: with nothing missing it changes nothing)
    conn.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_reclaim_count_check")
    before = snapshot(conn)
    code, _, err = run("schema", "apply", "--yes", dsn=rw)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "permission denied" in err
    assert snapshot(conn) == before


def test_table_names_cannot_inject(conn, run):
    before = snapshot(conn)
    for name in (
        '"jobs""; DROP TABLE jobs; --"',
        "jobs;drop table jobs",
        "pg_catalog.pg_class x",
        '"public"."jobs" OR 1=1',
    ):
        result = run("--table", name, "stuck")
        assert result.code in (1, 2) and len(result.err.strip().splitlines()) == 1, result.err
    assert snapshot(conn) == before
    assert dsn_for  # the helper the fixtures use

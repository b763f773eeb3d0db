"""A row security policy on the jobs table is the application's code,
which PostgreSQL would run for every row jobctl reads or writes, as jobctl's role. jobctl
runs every transaction with row_security off (transaction-locally), so the server refuses
such a query instead of running the policy: one line naming the policies and the ways out
(BYPASSRLS for jobctl's roles, or no policy on the table), exit 2. The policy's function is
counted by the server's function statistics: it never runs, as the read-only role, the
operator role or the superuser; a role given BYPASSRLS is served, still without a call.
"""

from __future__ import annotations

import json

import pytest
from helpers import add_jobs, claim_all, function_statistics, grant_roles
from psycopg import conninfo

SPY = """
CREATE SCHEMA app;
CREATE TABLE app.seen (id bigint, role text);
GRANT USAGE ON SCHEMA app TO PUBLIC;
CREATE FUNCTION app.spy(job bigint) RETURNS boolean LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    INSERT INTO app.seen VALUES (job, session_user);
    RETURN true;
EXCEPTION WHEN read_only_sql_transaction THEN RETURN true;
END $$;
ALTER TABLE jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY p ON jobs USING (app.spy(id));
"""


def as_role(dsn: str, role: str) -> str:
    return conninfo.make_conninfo(dsn, user=role)


@pytest.fixture
def spied(roles, conn, dsn, run):
    """Ten expired leases, the read-only and operator roles granted, then the policy."""
    dbname = conninfo.conninfo_to_dict(dsn)["dbname"]
    conn.execute(f"ALTER DATABASE {dbname} SET track_functions = 'pl'")
    add_jobs(conn, 10)
    claim_all(dsn, 10, lease_seconds=-60)
    assert grant_roles(run, roles).code == 0
    conn.execute(SPY)
    return dbname


def spy_calls(conn, dbname: str) -> int:
    return function_statistics(conn, dbname).get("app.spy", 0)


READS = (("stuck",), ("metrics",), ("summary",))


@pytest.mark.parametrize("who", ["readonly", "operator"])
def test_no_policy_runs_as_jobctls_roles(spied, conn, dsn, run, roles, who):
    login = as_role(dsn, roles[who])
    commands = [*READS, *([("reclaim", "--commit", "--yes")] if who == "operator" else [])]
    for command in commands:
        result = run(*command, dsn=login)
        assert result.code == 2, (command, result.err)
        line = result.err.strip()
        assert "\n" not in line and "row security is on for public.jobs" in line, line
        assert "policies: p" in line and "BYPASSRLS" in line, line
    assert spy_calls(conn, spied) == 0
    assert conn.execute("SELECT count(*) AS n FROM app.seen").fetchone()["n"] == 0
    assert conn.execute(
        "SELECT count(*) AS n FROM jobs WHERE status = 'processing'"
    ).fetchone() == {"n": 10}


def test_the_superuser_and_a_role_that_bypasses_it_run_no_policy(spied, conn, dsn, run, roles):
    conn.execute(f"ALTER ROLE {roles['operator']} BYPASSRLS")
    try:
        login = as_role(dsn, roles["operator"])
        for command in READS:
            assert run(*command).code in (0, 4)
            assert run(*command, dsn=login).code in (0, 4)
        result = run("reclaim", "--commit", "--yes", "--limit", "5", dsn=login)
        assert result.code == 0, result.err
        result = run("reclaim", "--commit", "--yes")
        assert result.code == 0, result.err
    finally:
        conn.execute(f"ALTER ROLE {roles['operator']} NOBYPASSRLS")
    assert conn.execute(
        "SELECT count(*) AS n FROM jobs WHERE status = 'processing'"
    ).fetchone() == {"n": 0}
    assert spy_calls(conn, spied) == 0


def test_schema_check_and_grants_report_row_security(spied, conn, dsn, run, roles):
    result = run("schema", "check", "-o", "json")
    assert result.code == 4, result.err
    (found,) = [c for c in json.loads(result.out) if c["check"] == "row security"]
    assert not found["ok"] and "p" in found["detail"] and roles["readonly"] in found["detail"]
    granted = grant_roles(run, roles)
    assert granted.code == 0, granted.err
    assert "row security is on for public.jobs" in granted.err, granted.err
    assert roles["operator"] in granted.err and "BYPASSRLS" in granted.err
    conn.execute("ALTER TABLE jobs DISABLE ROW LEVEL SECURITY")
    result = run("schema", "check", "-o", "json")
    (found,) = [c for c in json.loads(result.out) if c["check"] == "row security"]
    assert found["ok"], found

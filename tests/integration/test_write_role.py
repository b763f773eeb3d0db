"""Whose privileges jobctl's writes run the application's code with.

A write of the jobs table runs its owner's triggers, checks, domain checks, index expressions
and defaults: PostgreSQL's rule. jobctl runs such a write with no more privilege than the
table's owner: as the session's role when the owner holds all of its privileges, else as
jobctl's operator role (SET LOCAL ROLE, for the write's transaction only), else, for a
superuser, not at all (exit 2, nothing written).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from helpers import RECORD_ROLE, add_jobs, grant_roles
from psycopg import sql


@pytest.fixture
def app_owned(dsn: str) -> Iterator[str]:
    """The jobs table owned by a non-superuser application role, with a trigger of its own
    that records the role each UPDATE of it ran as; the role's name."""
    name = f"jobctl_app_{uuid.uuid4().hex[:8]}"
    role = sql.Identifier(name)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
        admin.execute(RECORD_ROLE)
        admin.execute(sql.SQL("ALTER FUNCTION public.record_role() OWNER TO {}").format(role))
        admin.execute(sql.SQL("ALTER TABLE jobs OWNER TO {}").format(role))
    yield name
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP TABLE public.ran_as")
        admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(role))
        admin.execute(sql.SQL("DROP ROLE {}").format(role))


def expired(conn: psycopg.Connection, n: int) -> None:
    add_jobs(conn, n)
    conn.execute(
        "UPDATE jobs SET status = 'processing', attempt_token = gen_random_uuid(),"
        " attempts = 1, lease_expires_at = now() - interval '1 minute'"
    )
    conn.execute("DELETE FROM public.ran_as")


def test_a_superuser_with_no_operator_role_is_refused_before_writing(conn, run, app_owned):
    expired(conn, 2)
    before = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    for args in (
        ["reclaim", "--commit", "--yes"],
        ["fail", "1", "--force", "--yes", "--reason", "x"],
    ):
        result = run(*args)
        assert result.code == 2, result
        line = result.err.strip()
        assert len(line.splitlines()) == 1 and f"owned by role {app_owned}" in line, line
        assert "--operator" in line and "nothing done" in line
    assert conn.execute("SELECT * FROM jobs ORDER BY id").fetchall() == before
    assert conn.execute("SELECT count(*) AS n FROM public.ran_as").fetchone()["n"] == 0
    # reads run none of the application's code and are not refused
    assert run("stuck", "-o", "json").code == 0


def test_a_superuser_writes_as_the_operator_role(roles, conn, run, app_owned):
    assert grant_roles(run, roles).code == 0
    expired(conn, 3)
    result = run("reclaim", "--commit", "--yes", "-o", "json")
    assert result.code == 0, result
    ran = conn.execute("SELECT DISTINCT who, superuser, login FROM public.ran_as").fetchall()
    assert ran == [{"who": roles["operator"], "superuser": False, "login": "postgres"}]
    # the history keeps the login
    roles_seen = conn.execute(
        "SELECT DISTINCT db_role FROM jobctl.events WHERE event = 'reclaimed'"
    ).fetchall()
    assert roles_seen == [{"db_role": "postgres"}]
    # nothing of the role is left on the session after the write's transaction
    assert conn.execute("SELECT status FROM jobs WHERE id = 1").fetchone()["status"] == "queued"


def test_the_owner_and_the_operator_write_as_themselves(roles, dsn, conn, run, app_owned):
    assert grant_roles(run, roles).code == 0
    expired(conn, 2)
    as_operator = psycopg.conninfo.make_conninfo(dsn, user=roles["operator"])
    assert run("reclaim", "--commit", "--yes", "--id", "1", dsn=as_operator).code == 0
    as_owner = psycopg.conninfo.make_conninfo(dsn, user=app_owned)
    with psycopg.connect(dsn, autocommit=True) as admin:  # the owner may read the history
        admin.execute(
            sql.SQL("GRANT USAGE ON SCHEMA jobctl TO {}").format(sql.Identifier(app_owned))
        )
        admin.execute(
            sql.SQL("GRANT SELECT ON jobctl.events TO {}").format(sql.Identifier(app_owned))
        )
    assert run("reclaim", "--commit", "--yes", "--id", "2", dsn=as_owner).code == 0
    ran = conn.execute("SELECT who, superuser FROM public.ran_as ORDER BY who").fetchall()
    assert sorted(r["who"] for r in ran) == sorted([roles["operator"], app_owned])
    assert not any(r["superuser"] for r in ran)


def test_a_function_the_planner_folds_is_never_run_as_a_superuser(roles, conn, run, app_owned):
    # an index on a function of constants: PostgreSQL's planner folds it as whoever plans a
    # query on the table. A superuser with no operator role is refused before any read; with
    # one, every transaction runs as the operator role. The function fails any statement
    # that runs it as a superuser (an IMMUTABLE function may not write down its calls)
    expired(conn, 1)  # (before the index: this test's own statements are a superuser's)
    conn.execute(
        "CREATE FUNCTION public.folded(text) RETURNS integer LANGUAGE plpgsql IMMUTABLE AS $$"
        "BEGIN IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
        " THEN RAISE EXCEPTION 'folded as a superuser'; END IF; RETURN 1; END $$"
    )
    conn.execute(
        sql.SQL("ALTER FUNCTION public.folded(text) OWNER TO {}").format(sql.Identifier(app_owned))
    )
    conn.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(app_owned)))
    conn.execute("SET ROLE " + app_owned)  # (as a superuser the index could not be built)
    conn.execute("CREATE INDEX jobs_folded ON jobs ((public.folded('x')))")
    conn.execute("RESET ROLE")
    for args in (["stuck"], ["show", "1"], ["schema", "check"]):
        result = run(*args)
        assert result.code == 2 and "index jobs_folded calls public.folded()" in result.err
        assert len(result.err.strip().splitlines()) == 1 and "--operator" in result.err
    assert grant_roles(run, roles).code == 0  # it plans no query on the table
    for args in (["stuck"], ["show", "1"], ["reclaim", "--commit", "--yes"], ["summary"]):
        result = run(*args)
        assert result.code == 0, (args, result.err)
    conn.execute("DROP INDEX jobs_folded")

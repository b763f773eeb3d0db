"""Jobctl owns what it installs. A `jobctl` schema (or a table in it) that
the application made first is never adopted; once installed, the application role can neither
create in schema jobctl nor put a trigger on its tables; schema check fails when ownership,
privileges or what sits on jobctl's tables are not what jobctl leaves."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import conninfo, sql

from jobctl.sql import queries

EVENTS_LIKE_001 = """
CREATE TABLE jobctl.events (
    event_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_table text NOT NULL,
    job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now(), event text NOT NULL,
    from_status text, to_status text, attempt integer, attempt_token uuid, worker text,
    actor text, reason text)
"""
ESCALATE = """
CREATE FUNCTION public.escalate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER ROLE %I SUPERUSER', '{role}');
    RETURN NEW;
END $$;
CREATE TRIGGER escalate BEFORE INSERT ON jobctl.events
    FOR EACH ROW EXECUTE FUNCTION public.escalate();
"""


@pytest.fixture
def app(empty_dsn: str) -> Iterator[tuple[str, str]]:
    """An application role that runs its own migrations (CREATE on the database and on
    public) and owns the jobs table; its name and DSN."""
    name = f"jobctl_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(empty_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        dbname = admin.info.dbname
        admin.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                sql.Identifier(dbname), sql.Identifier(name)
            )
        )
        admin.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(name)))
        jobs = sql.Identifier("jobs")
        admin.execute(queries.query("reference_table", jobs, queued_index=sql.Identifier("jq")))
        admin.execute(sql.SQL("ALTER TABLE jobs OWNER TO {}").format(sql.Identifier(name)))
    yield name, conninfo.make_conninfo(empty_dsn, user=name)
    with psycopg.connect(empty_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def is_superuser(dsn: str, role: str) -> bool:
    with psycopg.connect(dsn) as c:
        row = c.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    assert row is not None
    return bool(row[0])


def installed(dsn: str) -> tuple[bool, bool]:
    """Whether jobctl.migrations exists and whether the jobs table got the lease columns."""
    with psycopg.connect(dsn) as c:
        row = c.execute(
            "SELECT to_regclass('jobctl.migrations') IS NOT NULL, EXISTS (SELECT FROM "
            "pg_attribute WHERE attrelid = 'jobs'::regclass AND attname = 'attempt_token')"
        ).fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1])


@pytest.mark.parametrize("create", [False, True])
def test_a_jobctl_schema_the_application_made_first_is_not_adopted(empty_dsn, app, run, create):
    role, app_dsn = app
    with psycopg.connect(app_dsn, autocommit=True) as c:
        c.execute("CREATE SCHEMA jobctl")
    args = [*(["--table", "new_jobs"] if create else []), "schema", "apply", "--yes"]
    args += ["--create"] if create else []
    code, out, err = run(*args, dsn=empty_dsn)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert f"schema jobctl is owned by role {role}" in err and "nothing done" in err, err
    assert installed(empty_dsn) == (False, False)


def test_the_application_cannot_become_superuser_through_jobctls_history(empty_dsn, app, run):
    """The attack end to end: the application makes schema jobctl and an events table with a
    trigger that makes it superuser; the operator applies (as a superuser); a worker's write
    would fire jobctl's SECURITY DEFINER history function, which inserts into that table."""
    role, app_dsn = app
    with psycopg.connect(app_dsn, autocommit=True) as c:
        c.execute("CREATE SCHEMA jobctl")
        c.execute(EVENTS_LIKE_001)
        c.execute(ESCALATE.replace("{role}", role))
    code, out, err = run("schema", "apply", "--yes", dsn=empty_dsn)
    assert code == 2 and "owned by role" in err, (out, err)
    with psycopg.connect(app_dsn, autocommit=True) as c:  # the workers go on
        c.execute("INSERT INTO jobs DEFAULT VALUES")
        c.execute("UPDATE jobs SET status = 'processing'")
        c.execute("UPDATE jobs SET status = 'failed', last_error = 'x'")
    assert not is_superuser(empty_dsn, role)


def test_once_installed_the_application_can_neither_create_in_jobctl_nor_trigger_it(
    empty_dsn, app, run
):
    role, app_dsn = app
    code, _, err = run("schema", "apply", "--yes", dsn=empty_dsn)
    assert code == 0, err
    statements = [
        "CREATE TABLE jobctl.planted (x int)",
        "CREATE FUNCTION jobctl.planted() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        ESCALATE.replace("{role}", role),
        "DROP TABLE jobctl.events",
        "TRUNCATE jobctl.events",
        "INSERT INTO jobctl.events (job_table, job_id, event) VALUES ('x', '1', 'requeued')",
        "ALTER TABLE jobctl.events ENABLE ROW LEVEL SECURITY",
    ]
    for statement in statements:
        with psycopg.connect(app_dsn, autocommit=True) as c:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(statement)
    code, out, _ = run("schema", "check", "-o", "json", dsn=empty_dsn)
    assert code == 0, out
    assert "\"jobctl's objects are jobctl's\"" in out


@pytest.mark.parametrize(
    ("misconfiguration", "said"),
    [
        ("GRANT CREATE ON SCHEMA jobctl TO {role}", "holds CREATE on schema jobctl"),
        ("GRANT TRIGGER, TRUNCATE ON jobctl.events TO {role}", "holds TRIGGER, TRUNCATE on"),
        ("GRANT INSERT (reason) ON jobctl.events TO {role}", "holds INSERT on column"),
        ("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA jobctl TO PUBLIC", "PUBLIC holds EXECUTE"),
        ("ALTER TABLE jobctl.events OWNER TO {role}", "table jobctl.events"),
        (
            "CREATE FUNCTION public.nothing() RETURNS trigger LANGUAGE plpgsql AS "
            "'BEGIN RETURN NEW; END'; CREATE TRIGGER foreign_one BEFORE INSERT ON "
            "jobctl.events FOR EACH ROW EXECUTE FUNCTION public.nothing()",
            "trigger foreign_one on jobctl.events",
        ),
        (
            "CREATE RULE quiet AS ON INSERT TO jobctl.attempts DO INSTEAD NOTHING",
            "rule quiet on jobctl.attempts",
        ),
        ("CREATE POLICY hide ON jobctl.events USING (false)", "policy hide on jobctl.events"),
    ],
)
def test_schema_check_and_apply_see_what_others_may_do_in_jobctl(
    empty_dsn, app, run, misconfiguration, said
):
    role, _ = app
    assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
    with psycopg.connect(empty_dsn, autocommit=True) as admin:
        admin.execute(misconfiguration.replace("{role}", role))
    code, out, err = run("schema", "check", dsn=empty_dsn)
    assert code != 0, out
    if "OWNER TO" in misconfiguration:  # nothing of it read: refused at once, named
        assert code == 2 and said in err and f"owned by role {role}" in err, (out, err)
    else:
        assert said in out, out
    code, out, err = run("schema", "apply", "--yes", dsn=empty_dsn)
    if misconfiguration.startswith("GRANT EXECUTE"):  # apply revokes it with the function
        assert code == 0, err
        return
    assert code == 2 and said in err and "nothing done" in err, (out, err)
    assert len(err.strip().splitlines()) == 1, err

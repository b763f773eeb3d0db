"""Functions, operators and types planted by an application role never
run inside jobctl's sessions, as the superuser, the operator or the read-only role.

The attacker's schema ``evil`` comes first on the database's search_path (before pg_catalog,
as a database owner may set it) and holds a look-alike of every pg_catalog function jobctl's
SQL names (same name and arguments: found first), of every comparison, arithmetic and text
operator, and domains named like the common types; ``public`` holds the issue's better-matching
``format`` overloads. Each look-alike records its call (a row when the transaction can write,
and the server's function statistics always); every command is run as each role and the
calls are counted: none.
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from helpers import add_jobs, claim_all, function_statistics, grant_roles
from psycopg import conninfo

from jobctl import lease

SQL_DIR = Path(__file__).resolve().parents[2] / "jobctl" / "sql"
OPERATORS = (
    "=",
    "<>",
    "<",
    ">",
    "<=",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "||",
    "~~",
    "!~~",
    "@>",
    "<@",
    "&&",
    "->",
    "->>",
    "#>>",
    "?",
)
TYPES = (
    "text",
    "int4",
    "int8",
    "bool",
    "timestamptz",
    "oid",
    "regclass",
    "jsonb",
    "uuid",
    "name",
    "float8",
    "int2",
    "regnamespace",
    "text[]",
)

PLANT = r"""
CREATE SCHEMA canary;
CREATE TABLE canary.calls (fn text, role text);
CREATE FUNCTION canary.record(fn text) RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog AS $$
BEGIN
    BEGIN
        INSERT INTO canary.calls VALUES (fn, session_user);
    EXCEPTION WHEN read_only_sql_transaction THEN NULL;  -- counted by track_functions still
    END;
    RETURN true;
END $$;
GRANT USAGE ON SCHEMA canary TO PUBLIC;
CREATE SCHEMA evil;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
"""

# a clone of each pg_catalog function named ``names`` (all its overloads that plpgsql can
# take), and a look-alike of each binary operator in ``ops``, in schema evil
CLONE = r"""
DO $do$
DECLARE
    f record;
    body text;
BEGIN
    FOR f IN
        SELECT p.oid, p.proname, pg_catalog.pg_get_function_arguments(p.oid) AS args,
               pg_catalog.pg_get_function_result(p.oid) AS result,
               p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid)
               || ')' AS label
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.prokind = 'f'
          AND p.proname = ANY (%(names)s::text[])
    LOOP
        FOREACH body IN ARRAY ARRAY['RETURN NULL;', 'RETURN;'] LOOP
            BEGIN
                EXECUTE pg_catalog.format(
                    'CREATE FUNCTION evil.%%I(%%s) RETURNS %%s LANGUAGE plpgsql AS %%L',
                    f.proname, f.args, f.result,
                    pg_catalog.format('BEGIN PERFORM canary.record(%%L); %%s END', f.label, body));
                EXIT;
            EXCEPTION WHEN others THEN NULL;  -- polymorphic "any" and the like
            END;
        END LOOP;
    END LOOP;
    FOR f IN
        SELECT o.oid, o.oprname, o.oprleft::regtype AS l, o.oprright::regtype AS r,
               o.oprresult::regtype AS result
        FROM pg_catalog.pg_operator o
        JOIN pg_catalog.pg_type lt ON lt.oid = o.oprleft
        JOIN pg_catalog.pg_type rt ON rt.oid = o.oprright
        WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprname = ANY (%(ops)s::text[])
          AND lt.typtype <> 'p' AND rt.typtype <> 'p'
    LOOP
        BEGIN
            EXECUTE pg_catalog.format(
                'CREATE FUNCTION evil.op_%%s(%%s, %%s) RETURNS %%s LANGUAGE plpgsql AS %%L',
                f.oid, f.l, f.r, f.result,
                pg_catalog.format('BEGIN PERFORM canary.record(%%L); RETURN NULL; END',
                                  'operator ' || f.oprname || ' (' || f.l || ', ' || f.r || ')'));
            EXECUTE pg_catalog.format(
                'CREATE OPERATOR evil.%%s (LEFTARG = %%s, RIGHTARG = %%s, FUNCTION = evil.op_%%s)',
                f.oprname, f.l, f.r, f.oid);
        EXCEPTION WHEN others THEN NULL;
        END;
    END LOOP;
END $do$
"""

# the issue's own: better matches than pg_catalog.format(text, VARIADIC "any"), in public
PUBLIC_FORMAT = r"""
CREATE FUNCTION public.format(text, name, name) RETURNS text LANGUAGE plpgsql AS
$$ BEGIN PERFORM canary.record('public.format(text, name, name)'); RETURN $2 || '.' || $3; END $$;
CREATE FUNCTION public.format(text, text, text) RETURNS text LANGUAGE plpgsql AS
$$ BEGIN PERFORM canary.record('public.format(text, text, text)'); RETURN $2 || '.' || $3; END $$;
CREATE FUNCTION public.format(text, text) RETURNS text LANGUAGE plpgsql AS
$$ BEGIN PERFORM canary.record('public.format(text, text)'); RETURN $2; END $$;
"""


def function_names() -> list[str]:
    """Every name followed by a parenthesis in jobctl's SQL: the functions it may call."""
    text = "\n".join(p.read_text() for p in SQL_DIR.rglob("*.sql")).lower()
    return sorted(set(re.findall(r"\b([a-z_][a-z0-9_]*)\s*\(", text)) | {"format"})


def plant(conn: psycopg.Connection, dbname: str) -> int:
    """The look-alikes; how many were planted."""
    conn.execute(PLANT)
    # a DO block takes no parameters: the lists are quoted into its text
    psycopg.ClientCursor(conn).execute(CLONE, {"names": function_names(), "ops": list(OPERATORS)})
    conn.execute(PUBLIC_FORMAT)
    for name in TYPES:
        if name.endswith("[]"):
            continue
        conn.execute(
            f"CREATE DOMAIN evil.{name} AS pg_catalog.{name} CHECK (canary.record('type {name}'))"
        )
    conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    conn.execute(f'ALTER DATABASE "{dbname}" SET search_path = evil, pg_catalog, public')
    conn.execute(f"ALTER DATABASE \"{dbname}\" SET track_functions = 'pl'")
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_catalog.pg_proc WHERE pronamespace = 'evil'::regnamespace"
    ).fetchone()
    return row["n"]


def planted_calls(conn: psycopg.Connection, dbname: str) -> list[str]:
    """The calls recorded: the function statistics of every backend gone since, and rows."""
    stats = [
        f"{name}: {calls}"
        for name, calls in function_statistics(conn, dbname).items()
        if name.split(".")[0] in ("evil", "public") and calls > 0
    ]
    rows = conn.execute("SELECT fn || ' as ' || role AS c FROM canary.calls").fetchall()
    return stats + [r["c"] for r in rows]


def as_role(dsn: str, role: str) -> str:
    return conninfo.make_conninfo(dsn, user=role)


@pytest.fixture
def planted(roles, conn, dsn, run):
    """Jobs in every state, the roles granted, then the look-alikes planted."""
    ids = add_jobs(conn, 8, policy="manual") + add_jobs(conn, 8)
    claim_all(dsn, 12)
    assert grant_roles(run, roles).code == 0
    # something for schema apply to do, with rows: a concurrent index build among its steps
    conn.execute("DROP INDEX IF EXISTS idx_jobs_processing_timeout")
    conn.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_reclaim_count_check")
    dbname = conninfo.conninfo_to_dict(dsn)["dbname"]
    count = plant(conn, dbname)
    assert count > 300, count  # format, now, set_config, to_regclass ... and the operators
    return ids, dbname


def commands(
    tmp_path: Path, tag: str, ids: list[int], k: int
) -> list[tuple[list[str], tuple[int, ...]]]:
    """Every command, with the exit codes it ends with as the superuser; the ``k``th role
    writes jobs of its own (each reclaim fails the next two manual jobs: requeued then)."""
    plan = tmp_path / f"plan-{tag}.json"
    return [
        (["stuck"], (0,)),
        (["stuck", "-o", "json"], (0,)),
        (["stuck", "--expiring-within", "1m"], (0,)),
        (["summary"], (0,)),
        (["show", str(ids[0])], (0,)),
        (["history", str(ids[0])], (0,)),
        (["explain", str(ids[0])], (0,)),
        (["metrics"], (0,)),
        (["quarantine"], (0,)),
        (["reclaim", "--dry-run"], (0,)),
        (["reclaim", "--save-plan", str(plan)], (0,)),
        (["review"], (0,)),
        (["review", "--save-plan", str(tmp_path / f"review-{tag}.json")], (0,)),
        (["events"], (0,)),
        (["report"], (0,)),
        (["schema", "check"], (0, 4)),
        (["schema", "remove", "--history", "--columns", "--sql"], (0,)),
        (["schema", "apply", "--sql"], (0,)),
        (["reclaim", "--commit", "--yes", "--limit", "2"], (0, 1)),
        (["reclaim", "--commit", "--yes", "--plan", str(plan)], (0, 1, 3)),
        (["requeue", str(ids[max(0, 2 * k - 2)]), "--yes", "--reason", "r"], (0,)),
        (["fail", str(ids[-1 - k]), "--yes", "--reason", "r"], (0,)),
        (["policy", str(ids[5 + k]), "--auto", "--yes"], (0,)),
        (["requeue", "--plan", str(tmp_path / f"review-{tag}.json"), "--yes"], (0, 3)),
    ]


def test_no_planted_function_runs_in_jobctls_sessions(roles, planted, conn, dsn, run, tmp_path):
    ids, dbname = planted
    failures = []
    for k, (who, login) in enumerate(
        (
            ("read-only", as_role(dsn, roles["readonly"])),
            ("operator", as_role(dsn, roles["operator"])),
            ("superuser", None),
        )
    ):
        for args, codes in commands(tmp_path, who, ids, k):
            result = run(*args, dsn=login) if login else run(*args)
            if "canary" in result.err or (
                who == "superuser" and result.code not in codes
            ):  # the roles may lack a privilege: a refusal is fine, a call is not
                failures.append((who, args, result.code, result.err))
    # the superuser's schema apply, last: it creates the index concurrently, the check ...
    result = run("schema", "apply", "--yes")
    if result.code != 0:
        failures.append(("superuser", ["schema", "apply"], result.code, result.err))
    result = run("schema", "grants", "--readonly", roles["readonly"], "--yes")
    if result.code != 0:
        failures.append(("superuser", ["schema", "grants"], result.code, result.err))
    calls = planted_calls(conn, dbname)
    assert calls == [], "\n".join(calls)
    assert failures == [], "\n".join(map(str, failures))
    # the look-alikes were reachable: an ordinary session of the database calls them
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT format('%I.%I', 'a'::name, 'b'::name), 1 = 1")
    assert planted_calls(conn, dbname)


def test_no_planted_function_runs_in_the_worker_api(roles, planted, conn, dsn):
    """The worker API's statements run in the workers' autocommit, under their search path:
    claim, heartbeat, complete (and its outcome check) and fail call nothing planted."""
    ids, dbname = planted
    conn.execute(
        "UPDATE jobs SET status = 'queued', attempt_token = NULL WHERE id = ANY(%s)", (ids,)
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SHOW search_path").fetchone()[0].startswith("evil")
        worker = lease.Worker(c, "w-planted", lease_seconds=30)
        first, second = worker.claim(), worker.claim()
        assert first is not None and second is not None
        worker.heartbeat(first)
        worker.complete(first)
        worker.complete(first)  # an unacknowledged completion: job_outcome says it is done
        assert worker.fail(second, "boom") == "queued"
    calls = planted_calls(conn, dbname)
    assert calls == [], "\n".join(calls)


def test_the_applications_triggers_run_in_jobctls_writes_as_in_the_workers(conn, dsn, run):
    """jobctl's writes set pg_catalog first, then the session's own search path: a trigger
    of the application that names its objects without a schema finds them, as it does in
    the workers' writes (a read-only transaction of jobctl's runs on pg_catalog alone)."""
    conn.execute(
        """
        CREATE TABLE app_log (id bigint, status text);
        CREATE FUNCTION app_log_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO app_log VALUES (NEW.id, NEW.status); RETURN NEW; END $$;
        CREATE TRIGGER app_log_change AFTER UPDATE ON jobs
            FOR EACH ROW EXECUTE FUNCTION app_log_change();
        """
    )
    first, _ = add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 2)
    assert run("reclaim", "--commit", "--yes").code == 0
    assert run("requeue", str(first), "--yes", "--reason", "checked").code == 0
    statuses = [r["status"] for r in conn.execute("SELECT status FROM app_log ORDER BY 1")]
    assert statuses.count("failed") == 2 and "queued" in statuses

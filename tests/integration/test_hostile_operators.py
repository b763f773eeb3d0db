"""Operators, functions and casts an application plants in ``public``
never run in jobctl's sessions, whatever the status column's type.

jobctl's writes run under pg_catalog, then the session's own search path (so that the
application's triggers find their objects): there an operator of ``public`` whose operands
match better than pg_catalog's would be chosen (``public.=(varchar, varchar)`` against
``pg_catalog.=(text, text)``), and a cast an application defines for its own ENUM is used
whatever the search path. Here the application role (CREATE on its database and on
``public``, not a superuser) owns its table and plants, for every operator and function name
jobctl's SQL uses, versions for the string types, its ENUM and domain, the id types and the
lease's times, and casts of its ENUM and domain to the string types; each counts its calls.
Every command runs as the superuser and as the operator role on a varchar, an ENUM and a
domain status column: no call. (test_hostile_path.py plants look-alikes ahead of pg_catalog.)
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import uuid
from pathlib import Path

import psycopg
import pytest
from helpers import function_statistics, grant_roles
from psycopg import conninfo, rows
from shapes import BIGINT_ENUM, INT_DOMAIN_PARKED, TEXT_VARCHAR_NAIVE, UUID_TEXT_CHECK

from jobctl import db, lease
from jobctl.ops.reclaim import service
from jobctl.ops.triage import ExpiredFilter

SQL_DIR = Path(__file__).resolve().parents[2] / "jobctl" / "sql"
OPERATORS = (
    "=", "<>", "<", ">", "<=", ">=", "+", "-", "*", "/", "%", "||", "~~", "!~~",
    "->", "->>", "#>>", "@>", "<@", "?",
)  # fmt: skip
BUILT_IN = (
    "text", "varchar", "bpchar", "name", "int8", "int4", "uuid",
    "timestamptz", "timestamp", "interval", "jsonb",
)  # fmt: skip
NOT_FUNCTIONS = {"in", "any", "all", "exists", "values", "on", "as", "cast", "operator", "and"}
NOT_FUNCTIONS |= {"or", "not", "coalesce", "greatest", "least", "char", "varchar", "numeric"}

# the counters: one for a call in jobctl's own statements, one for a call inside a trigger
# (the history's trigger fires in jobctl's writes and the workers'); each a plpgsql function
# the server's function statistics count (track_functions), recording its label where the
# transaction can write
COUNTERS = r"""
CREATE TABLE public.planted_calls (label text, role text, depth int);
CREATE FUNCTION public.planted_note(label text) RETURNS void LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    INSERT INTO public.planted_calls VALUES (label, session_user, pg_trigger_depth());
EXCEPTION WHEN read_only_sql_transaction THEN NULL;
END $$;
CREATE FUNCTION public.planted_call(label text) RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog AS $$
BEGIN PERFORM public.planted_note(label); RETURN true; END $$;
CREATE FUNCTION public.planted_trigger_call(label text) RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog AS $$
BEGIN PERFORM public.planted_note(label); RETURN true; END $$;
CREATE FUNCTION public.planted(label text) RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog AS $$
BEGIN
    IF pg_trigger_depth() OPERATOR(pg_catalog.>) 0 THEN
        RETURN public.planted_trigger_call(label);
    END IF;
    RETURN public.planted_call(label);
END $$;
"""

# as the application: an operator of each name for each pair of operand types (both the
# type, or it and text either side) that pg_catalog's operator of that name takes, doing
# pg_catalog's work after counting; a function of each name for each type in a few shapes
PLANT = r"""
DO $do$
DECLARE
    op text;
    fn text;
    t text;
    l text;
    r text;
    result text;
    args text;
    n int := 0;
BEGIN
    FOREACH op IN ARRAY %(ops)s::text[] LOOP
        FOREACH t IN ARRAY %(types)s::text[] LOOP
            FOREACH args IN ARRAY ARRAY[t || ',' || t, t || ',text', 'text,' || t] LOOP
                l := pg_catalog.split_part(args, ',', 1);
                r := pg_catalog.split_part(args, ',', 2);
                BEGIN
                    EXECUTE pg_catalog.format(
                        'SELECT pg_catalog.pg_typeof(NULL::%%s OPERATOR(pg_catalog.%%s) NULL::%%s)',
                        l, op, r) INTO result;
                    n := n + 1;
                    EXECUTE pg_catalog.format(
                        'CREATE FUNCTION public.planted_op_%%s(%%s, %%s) RETURNS %%s '
                        'LANGUAGE plpgsql SET search_path = pg_catalog AS %%L',
                        n, l, r, result,
                        pg_catalog.format('BEGIN PERFORM public.planted(%%L); '
                               'RETURN $1 OPERATOR(pg_catalog.%%s) $2; END',
                               pg_catalog.format('operator %%s (%%s, %%s)', op, l, r), op));
                    EXECUTE pg_catalog.format(
                        'CREATE OPERATOR public.%%s (LEFTARG = %%s, RIGHTARG = %%s, '
                        'FUNCTION = public.planted_op_%%s)', op, l, r, n);
                EXCEPTION WHEN others THEN NULL;  -- pg_catalog has no such operator
                END;
            END LOOP;
        END LOOP;
    END LOOP;
    FOREACH fn IN ARRAY %(functions)s::text[] LOOP
        FOREACH t IN ARRAY %(types)s::text[] LOOP
            FOREACH args IN ARRAY ARRAY[t, t || ', ' || t, 'text, ' || t, t || ', text',
                                        t || ', integer', 'text, ' || t || ', ' || t,
                                        t || ', ' || t || ', ' || t] LOOP
                BEGIN
                    EXECUTE pg_catalog.format(
                        'CREATE FUNCTION public.%%I(%%s) RETURNS text LANGUAGE plpgsql '
                        'SET search_path = pg_catalog AS %%L',
                        fn, args,
                        pg_catalog.format('BEGIN PERFORM public.planted(%%L); RETURN NULL; END',
                               pg_catalog.format('function %%s(%%s)', fn, args)));
                EXCEPTION WHEN others THEN NULL;
                END;
            END LOOP;
        END LOOP;
    END LOOP;
END $do$
"""

# as the application, which owns its ENUM and domain: casts of them to the string types,
# each with a function that counts (a domain's are ignored by the server, as they should be).
# Explicit (what ::text uses) or assignment: an implicit one makes a comparison of two of its
# values ambiguous for every session, its own workers' too (an error, no call: an application
# can always break its own table)
CASTS = r"""
DO $do$
DECLARE
    s text;
    t text;
BEGIN
    FOREACH s IN ARRAY %(sources)s::text[] LOOP
        FOREACH t IN ARRAY ARRAY['text', 'varchar', 'bpchar', 'name'] LOOP
            EXECUTE pg_catalog.format(
                'CREATE FUNCTION public.%%I(%%s) RETURNS %%s LANGUAGE plpgsql '
                'SET search_path = pg_catalog AS %%L',
                'planted_cast_' || pg_catalog.replace(s, '.', '_') || '_' || t, s, t,
                pg_catalog.format('BEGIN PERFORM public.planted(%%L); '
                       'RETURN pg_catalog.format(''%%%%s'', $1); END',
                       pg_catalog.format('cast (%%s AS %%s)', s, t)));
            EXECUTE pg_catalog.format('CREATE CAST (%%s AS %%s) WITH FUNCTION public.%%I(%%s) %%s',
                           s, t, 'planted_cast_' || pg_catalog.replace(s, '.', '_') || '_' || t, s,
                           CASE WHEN t = 'text' THEN '' ELSE 'AS ASSIGNMENT' END);
        END LOOP;
    END LOOP;
END $do$
"""


def function_names() -> list[str]:
    """Every name followed by a parenthesis in jobctl's SQL (a schema's prefix dropped), its
    comments left out: their prose ("the jobs (each ...)") names no function, and each name
    costs a hundred planted functions. Read left to right, a string literal is kept whole
    (a ``--`` inside one is text, not a comment)."""
    text = "\n".join(p.read_text() for p in SQL_DIR.rglob("*.sql")).lower()
    code = re.sub(r"('(?:[^']|'')*')|--[^\n]*", lambda m: m.group(1) or "", text)
    found = set(re.findall(r"\b([a-z_][a-z0-9_]*)\s*\(", code)) - NOT_FUNCTIONS
    return sorted(found | {"format", "now", "date_part", "isfinite", "concat_ws"})


def as_role(dsn: str, role: str) -> str:
    return conninfo.make_conninfo(dsn, user=role)


def counted(conn: psycopg.Connection, dbname: str) -> tuple[int, int, list[str]]:
    """(calls in jobctl's statements, calls inside triggers, the labels recorded): the
    function statistics of every backend gone since, and the rows."""
    calls = function_statistics(conn, dbname)
    labels = [
        f"{r['label']} as {r['role']} (trigger depth {r['depth']})"
        for r in conn.execute("SELECT * FROM public.planted_calls ORDER BY 1")
    ]
    return calls.get("public.planted_call", 0), calls.get("public.planted_trigger_call", 0), labels


SHAPES = {
    "varchar status, text ids": (TEXT_VARCHAR_NAIVE, "work.jobs", ()),
    "ENUM status, bigint ids": (BIGINT_ENUM, "public.job_status", ("public.job_status",)),
    "domain status, integer ids": (INT_DOMAIN_PARKED, "public.job_state", ("public.job_state",)),
    "text status, uuid ids": (UUID_TEXT_CHECK, "text", ()),
}


@pytest.fixture
def app(server_dsn):
    """An application role (no superuser), dropped after the test's database."""
    name = f"jobctl_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN")
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"DROP ROLE {name}")


def application_database(dsn: str, app: str) -> str:
    """The application's rights on the test's database: CREATE on it and on public (a role
    that runs its own migrations); the function statistics on. Its login DSN."""
    dbname = conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"GRANT CREATE ON DATABASE {dbname} TO {app}")
        admin.execute(f"GRANT CREATE ON SCHEMA public TO {app}")
        admin.execute(f"ALTER DATABASE {dbname} SET track_functions = 'pl'")
    return as_role(dsn, app)


def claim(dsn: str, table: str, count: int) -> None:
    """``count`` jobs claimed by a worker, their leases already expired."""
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w-1", table=table, lease_seconds=-60)
        for _ in range(count):
            worker.claim()


def one_service_pass(dsn: str, table: str) -> list[str]:
    """The reclaimer service (reclaim --every), one pass: the lines it logged."""
    stop, lines = threading.Event(), []

    def log(line: str) -> None:
        lines.append(line)
        if "connected" in line:
            stop.set()  # the pass in hand still runs: one batch, then it stops

    settings = db.Settings(dsn=dsn, table=table, actor="service@ci")
    for _ in service.serve(
        settings, ExpiredFilter(), batch_size=100, every=dt.timedelta(seconds=1), stop=stop, log=log
    ):
        pass
    return lines


@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_no_planted_operator_function_or_cast_runs(shape_name, roles, app, empty_dsn, run):
    s, _, casts_from = SHAPES[shape_name]
    dbname = conninfo.conninfo_to_dict(empty_dsn)["dbname"]
    app_dsn = application_database(empty_dsn, app)
    with psycopg.connect(app_dsn, autocommit=True) as c:
        c.execute(s.ddl)
        c.execute("CREATE TYPE public.app_enum AS ENUM ('a', 'b')")
        c.execute("CREATE DOMAIN public.app_text AS text")
        for _ in range(40):
            c.execute(s.new_job)

    def jobctl(*args: str, dsn: str | None = None):
        return run("--table", s.table, *args, dsn=dsn or empty_dsn)

    result = jobctl("schema", "apply", "--yes", *s.mapping_args())
    assert result.code == 0, result.err
    result = jobctl("schema", "grants", "--operator", roles["operator"], "--yes")
    assert result.code == 0, result.err
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as admin:
        ids = [str(r["id"]) for r in admin.execute(f"SELECT id FROM {s.table} ORDER BY id")]
        manual = ids[:20:2]
        admin.execute(
            f"UPDATE {s.table} SET recovery_policy = 'manual' WHERE id::text = ANY(%s)", (manual,)
        )

    types = [*BUILT_IN, "public.app_enum", "public.app_text", *casts_from]
    with psycopg.connect(app_dsn, autocommit=True) as c:
        c.execute(COUNTERS)
        cursor = psycopg.ClientCursor(c)  # a DO block takes no parameters: lists quoted in
        cursor.execute(
            PLANT, {"ops": list(OPERATORS), "types": types, "functions": function_names()}
        )
        cursor.execute(CASTS, {"sources": ["public.app_enum", "public.app_text", *casts_from]})
        planted = c.execute(
            "SELECT count(*) FROM pg_catalog.pg_proc WHERE pronamespace = 'public'::regnamespace"
        ).fetchone()
        assert planted is not None and planted[0] > 1000, planted

    failures = []
    for who, login in (
        ("superuser", empty_dsn),
        ("operator", as_role(empty_dsn, roles["operator"])),
    ):
        claim(empty_dsn, s.table, 8)  # expired leases for this round's reclaims
        for args in (
            ["stuck"],
            ["stuck", "-o", "json"],
            ["stuck", "--expiring-within", "1m"],
            ["summary"],
            ["summary", "--exact"],
            ["show", ids[0]],
            ["history", ids[0]],
            ["explain", ids[0]],
            ["metrics"],
            ["reclaim", "--dry-run"],
            ["reclaim", "--commit", "--yes", "--limit", "3"],
            ["reclaim", "--commit", "--yes"],
            ["requeue", ids[0] if who == "superuser" else ids[2], "--yes", "--reason", "r"],
            ["fail", ids[4] if who == "superuser" else ids[6], "--yes", "--reason", "r"],
            ["policy", ids[21 if who == "superuser" else 23], "--manual", "--yes"],
            ["quarantine", "--min-reclaims", "1"],
            ["quarantine", "--min-reclaims", "1", "--commit", "--yes", "--reason", "r"],
            ["review"],
            ["events"],
            ["report"],
        ):
            result = jobctl(*args, dsn=login)
            if result.code not in (0, 2, 3):  # refused by the rules or a conflict: no error
                failures.append((who, args, result.code, result.err))
        claim(empty_dsn, s.table, 2)
        lines = one_service_pass(login, s.table)
        if any("retrying" in line or "stopped:" in line for line in lines):
            failures.append((who, ["the reclaimer service"], lines))
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as admin:
        in_jobctl, in_triggers, labels = counted(admin, dbname)
        assert in_jobctl == 0, "\n".join(labels)
        assert failures == [], "\n".join(map(str, failures))
        assert in_triggers == 0, "\n".join(labels)  # the history trigger's, in the writes
    # the planted things were reachable: the application's own session calls them
    with psycopg.connect(app_dsn, autocommit=True) as c:
        c.execute("SELECT 'a'::varchar = 'b'::varchar, 'a'::public.app_enum::text")
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as admin:
        assert counted(admin, dbname)[0] >= 2


def test_the_history_trigger_calls_no_planted_cast(roles, app, empty_dsn, run):
    """A worker's claim and jobctl's reclaim fire the history trigger on an ENUM status:
    the application's cast of its ENUM to text is not called there (the trigger records the
    status with its type's output function too, not a cast: SECURITY DEFINER, as its owner)."""
    dbname = conninfo.conninfo_to_dict(empty_dsn)["dbname"]
    app_dsn = application_database(empty_dsn, app)
    with psycopg.connect(app_dsn, autocommit=True) as c:
        c.execute(BIGINT_ENUM.ddl)
        c.execute(BIGINT_ENUM.new_job)
    assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
    with psycopg.connect(app_dsn, autocommit=True) as c:
        c.execute(COUNTERS)
        psycopg.ClientCursor(c).execute(CASTS, {"sources": ["public.job_status"]})
    claim(empty_dsn, "jobs", 1)
    # the superuser's write of the application's table runs as jobctl's operator role
    assert grant_roles(run, roles, dsn=empty_dsn).code == 0
    assert run("reclaim", "--commit", "--yes", dsn=empty_dsn).code == 0
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as admin:
        in_jobctl, in_triggers, labels = counted(admin, dbname)
    assert in_jobctl == 0, "\n".join(labels)
    assert in_triggers == 0, "\n".join(labels)

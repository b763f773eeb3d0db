"""The trust boundary over every place PostgreSQL runs a role's code.

The property: jobctl never runs the application's code with more privilege than the
application's own role, and a command that writes nothing runs none of it. The application
is a role of its own (not a superuser) that owns the jobs table and a function,
``app.spy(tag)``, which records each call: its tag, ``current_user``, ``session_user`` and
whether ``current_user`` is a superuser. It hangs that function on every hook PostgreSQL
offers on a table it owns (one row of ``HOOKS`` each: a new hook is a new row), and every
command runs as the superuser, as jobctl's operator role and as its read-only role:

- a command that writes nothing: no call at all;
- a command that writes: every call as a role that is no superuser and no stronger than the
  table's owner (the owner itself, or the operator role; the read-only role's own refused
  write as itself), or the write refused in one line with a documented exit code.

Hooks are grouped: one database carries several, told apart by the tag each passes to
``app.spy``, and each command runs once per role on it; a test is one group, its cells
(command, role) run in order on its one database, and a failure lists every cell that broke,
naming its hook, command and role. (A test per cell spread one group's cells over every test
process, each building the group's database again: five databases a process.) The calls are
recorded through dblink by a function of the test's own superuser (a separate session,
committed at once): a call in a read-only transaction, or in one that rolls back, is recorded
all the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import scratch_database
from psycopg import conninfo, sql
from test_hostile_path import CLONE, OPERATORS, PUBLIC_FORMAT, TYPES, function_names

from jobctl.cli import main as cli
from jobctl.sql import queries

ROLES = ("superuser", "operator", "readonly")
DOCUMENTED_CODES = (0, 1, 2, 3, 4)

# the test's own recorder, owned by the superuser: a call is written by another session
RECORDER = """
CREATE SCHEMA canary;
GRANT USAGE ON SCHEMA canary TO PUBLIC;
CREATE EXTENSION dblink SCHEMA canary;
CREATE TABLE canary.calls (
    tag text, detail text, current_role_ text, session_role text, super boolean);
CREATE FUNCTION canary.note(tag text, detail text, cur text, ses text, super boolean)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, canary AS $$
BEGIN
    IF NOT 'spy' = ANY (COALESCE(canary.dblink_get_connections(), '{}')) THEN
        PERFORM canary.dblink_connect('spy', %(recorder)s);
    END IF;
    PERFORM canary.dblink_exec('spy', pg_catalog.format(
        'INSERT INTO canary.calls VALUES (%%L, %%L, %%L, %%L, %%L)',
        tag, detail, cur, ses, super));
END $$;
"""

# the application's spy: declared IMMUTABLE (a lie an index or a generated column needs)
SPY = """
CREATE SCHEMA app;
GRANT USAGE ON SCHEMA app TO PUBLIC;
CREATE FUNCTION app.spy(tag text, detail text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog AS $$
BEGIN
    PERFORM canary.note(tag, detail, current_user::text, session_user::text,
                        (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user));
    RETURN true;
END $$;
"""

# the application's own table with a domain of its own on each column jobctl maps
DOMAIN_TABLE = """
CREATE DOMAIN app.job_id AS bigint CHECK (app.spy('domain on id', VALUE::text));
CREATE DOMAIN app.status_t AS text CHECK (app.spy('domain on status', VALUE));
CREATE DOMAIN app.queue_t AS text CHECK (app.spy('domain on queue', VALUE));
CREATE DOMAIN app.worker_t AS text CHECK (app.spy('domain on reserved_by', VALUE));
CREATE DOMAIN app.available_ts AS timestamptz CHECK (app.spy('domain on available_at'));
CREATE DOMAIN app.reserved_ts AS timestamptz CHECK (app.spy('domain on reserved_at'));
CREATE SEQUENCE app.jobs_id;
CREATE TABLE public.jobs (
    id              app.job_id   PRIMARY KEY DEFAULT nextval('app.jobs_id'),
    queue           app.queue_t  NOT NULL DEFAULT 'default',
    payload         jsonb        NOT NULL DEFAULT '{}'::jsonb,
    status          app.status_t NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'processing', 'done', 'failed')),
    attempts        integer      NOT NULL DEFAULT 0,
    max_attempts    integer      NOT NULL DEFAULT 3,
    available_at    app.available_ts NOT NULL DEFAULT now(),
    reserved_by     app.worker_t,
    reserved_at     app.reserved_ts,
    last_error      text,
    finished_at     timestamptz,
    created_at      timestamptz  NOT NULL DEFAULT now(),
    updated_at      timestamptz  NOT NULL DEFAULT now()
);
"""

# after schema apply (which adds the lease columns with their own types): those as domains
LEASE_DOMAINS = """
CREATE DOMAIN app.lease_ts AS timestamptz CHECK (app.spy('domain on lease_expires_at'));
CREATE DOMAIN app.heartbeat_ts AS timestamptz CHECK (app.spy('domain on heartbeat_at'));
ALTER TABLE jobs ALTER COLUMN lease_expires_at TYPE app.lease_ts,
                 ALTER COLUMN heartbeat_at TYPE app.heartbeat_ts;
"""

TRIGGER_FUNCTIONS = """
CREATE FUNCTION app.row_spy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM app.spy('trigger ' || TG_NAME);
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    RETURN NEW;
END $$;
CREATE FUNCTION app.statement_spy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM app.spy('trigger ' || TG_NAME); RETURN NULL; END $$;
"""
TRIGGERS = tuple(
    f"{prefix}_{when}_{level}"
    for prefix in ("aa", "zz")  # before and after jobctl's own jobctl_... by name
    for when in ("before", "after")
    for level in ("row", "statement")
)

TABLE_HOOKS = """
ALTER TABLE jobs ADD CONSTRAINT spy_check CHECK (app.spy('table check', id::text)) NOT VALID;
CREATE INDEX spy_expression ON jobs ((app.spy('index expression', id::text)));
CREATE INDEX spy_predicate ON jobs (id) WHERE app.spy('partial index predicate', id::text);
CREATE INDEX spy_constant_expression ON jobs ((app.spy('index expression, constant')));
CREATE INDEX spy_constant_predicate ON jobs (id) WHERE app.spy('partial index predicate, constant');
ALTER TABLE jobs ADD COLUMN spy_default boolean DEFAULT app.spy('column default');
ALTER TABLE jobs ADD COLUMN spy_generated boolean
    GENERATED ALWAYS AS (app.spy('generated column', id::text)) STORED;
"""

RULE = "CREATE RULE spy_rule AS ON UPDATE TO jobs DO ALSO SELECT app.spy('rule')"
POLICY = """
CREATE POLICY spy_policy ON jobs USING (app.spy('row security policy', id::text));
ALTER TABLE jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE jobs FORCE ROW LEVEL SECURITY;
"""

# jobctl's relations, each of which the application makes a view of where jobctl is not
JOBCTL_RELATIONS = (
    "tables",
    "migrations",
    "events",
    "attempts",
    "kind_policies",
    "kind_policy_events",
    "pauses",
    "pause_events",
    "reclaimer_passes",
)


@dataclasses.dataclass(frozen=True)
class Hook:
    name: str  # the tag app.spy records, and the test's id
    group: str  # the database that carries it


HOOKS = (
    *(
        Hook(f"domain on {column}", "table")
        for column in (
            "id",
            "status",
            "queue",
            "reserved_by",
            "available_at",
            "reserved_at",
            "lease_expires_at",
            "heartbeat_at",
        )
    ),
    Hook("table check", "table"),
    *(Hook(f"trigger {name}", "table") for name in TRIGGERS),
    Hook("index expression", "table"),
    Hook("partial index predicate", "table"),
    Hook("index expression, constant", "table"),  # folded by the planner: run as it plans
    Hook("partial index predicate, constant", "table"),
    Hook("column default", "table"),
    Hook("generated column", "table"),
    Hook("rule", "rule"),
    Hook("row security policy", "policy"),
    *(Hook(f"foreign jobctl.{name}", "foreign") for name in JOBCTL_RELATIONS),
    Hook("search path", "search path"),
)

# every command: (args with {placeholders} of the role's jobs, whether it writes)
COMMANDS: tuple[tuple[str, bool], ...] = (
    ("stuck", False),
    ("summary", False),
    ("show {read}", False),
    ("history {read}", False),
    ("explain {read}", False),
    ("events", False),
    ("review", False),
    ("metrics", False),
    ("report --since 1d", False),
    ("quarantine", False),
    ("reclaim --dry-run", False),
    ("reclaim --id {read}", False),
    ("pause --list", False),
    ("policy --list", False),
    ("doctor", False),
    ("schema check", False),
    ("reclaim --commit --yes --queue {queue}", True),
    ("requeue {requeue} --yes --reason r", True),
    ("fail {fail} --yes --reason r", True),
    ("cancel {cancel} --yes --reason r", True),
    ("policy {policy} --manual --yes --reason r", True),
    ("policy --queue {queue} --manual --yes --reason r", True),
    ("pause --queue {queue} --reason r", True),
    ("resume --queue {queue} --reason r", True),
)


def as_role(dsn: str, role: str) -> str:
    return conninfo.make_conninfo(dsn, user=role)


@dataclasses.dataclass
class Run:
    code: int
    out: str
    err: str
    calls: list[tuple[str, str | None, str, str, bool]]  # tag, detail, current, session, super


@dataclasses.dataclass
class Database:
    """One group's database: its DSN, the roles' logins, each role's jobs, the runs made."""

    dsn: str
    app: str
    logins: dict[str, str]
    jobs: dict[str, dict[str, str]]
    runs: dict[tuple[str, str], Run] = dataclasses.field(default_factory=dict)

    def take_calls(self) -> list[tuple[str, str | None, str, str, bool]]:
        with psycopg.connect(self.dsn, autocommit=True, options="-c search_path=pg_catalog") as c:
            found = c.execute(
                "SELECT tag, detail, current_role_, session_role, super FROM canary.calls"
            ).fetchall()
            c.execute("TRUNCATE canary.calls")
        return found


class Groups:
    """The groups' databases, each made when a test first needs it, dropped with the module."""

    def __init__(self, server_dsn: str, stack: contextlib.ExitStack) -> None:
        self.server_dsn = server_dsn
        self.stack = stack
        self.made: dict[str, Database] = {}
        suffix = uuid.uuid4().hex[:8]
        self.roles = {
            "app": f"app_{suffix}",
            "operator": f"jobctl_rw_{suffix}",
            "readonly": f"jobctl_ro_{suffix}",
        }

    def get(self, group: str) -> Database:
        if group not in self.made:
            try:
                self.made[group] = self.build(group)
            except Exception as e:  # said once, not built again for each cell
                self.made[group] = e  # type: ignore[assignment]
                raise
        made = self.made[group]
        if isinstance(made, Exception):
            pytest.fail(f"the database of group {group!r} could not be made: {made}")
        return made

    def build(self, group: str) -> Database:
        dsn = self.stack.enter_context(scratch_database(self.server_dsn, "jobctl_trust"))
        app = self.roles["app"]
        app_dsn = as_role(dsn, app)
        dbname = conninfo.conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                    sql.Identifier(dbname), sql.Identifier(app)
                )
            )
            admin.execute(
                sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(app))
            )
            recorder = conninfo.make_conninfo(dsn, options="-c search_path=pg_catalog")
            psycopg.ClientCursor(admin).execute(RECORDER, {"recorder": recorder})
        with psycopg.connect(app_dsn, autocommit=True) as c:
            c.execute(SPY)
            if group == "table":
                c.execute(DOMAIN_TABLE)
            else:
                c.execute(
                    queries.query(
                        "reference_table",
                        sql.Identifier("jobs"),
                        queued_index=sql.Identifier("jobs_queued"),
                    )
                )
        install(dsn, "schema", "apply", "--column", "queue=queue", "--yes")
        install(
            dsn,
            "schema",
            "grants",
            "--readonly",
            self.roles["readonly"],
            "--operator",
            self.roles["operator"],
            "--yes",
        )
        jobs = seed(dsn)
        with psycopg.connect(app_dsn, autocommit=True) as c:
            if group == "table":
                c.execute(LEASE_DOMAINS)
                c.execute(TRIGGER_FUNCTIONS)
                for name in TRIGGERS:
                    _, when, level = name.split("_")
                    c.execute(
                        f"CREATE TRIGGER {name} {when.upper()} INSERT OR UPDATE OR DELETE "
                        f"ON jobs FOR EACH {level.upper()} EXECUTE FUNCTION "
                        f"app.{'row' if level == 'row' else 'statement'}_spy()"
                    )
                c.execute(TABLE_HOOKS)
            elif group == "rule":
                c.execute(RULE)
            elif group == "policy":
                c.execute(POLICY)
            elif group == "search path":
                plant_on_the_path(c, dsn, dbname, app)
        if group == "foreign":
            foreign_jobctl(dsn, app_dsn)
        made = Database(
            dsn,
            app,
            {
                "superuser": dsn,
                **{r: as_role(dsn, self.roles[r]) for r in ("operator", "readonly")},
            },
            jobs,
        )
        made.take_calls()  # the set-up's own
        return made


def install(dsn: str, *args: str) -> None:
    """A command of the installer's (the superuser's), as set-up."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["--dsn", dsn, *args])
    assert code == 0, (args, err.getvalue())


JOB = """
INSERT INTO jobs (queue, status, attempts, attempt_token, lease_expires_at, reserved_by,
                  reserved_at, last_error, finished_at)
SELECT %(queue)s, s, %(attempts)s,
       CASE WHEN s = 'processing' THEN gen_random_uuid() END,
       now() + %(lease)s::interval, CASE WHEN s = 'processing' THEN 'w1' END,
       CASE WHEN s = 'processing' THEN now() - interval '10 minutes' END,
       CASE WHEN s = 'failed' THEN 'boom' END,
       CASE WHEN s = 'failed' THEN now() END
FROM (SELECT %(status)s::text AS s) AS given
RETURNING id::text
"""


def seed(dsn: str) -> dict[str, dict[str, str]]:
    """Each role's jobs, in a queue of its own: one for each write, and one to read."""
    jobs: dict[str, dict[str, str]] = {}
    with psycopg.connect(dsn, autocommit=True) as c:

        def add(queue: str, status: str, lease: str | None, attempts: int = 1) -> str:
            params = {"queue": queue, "status": status, "lease": lease, "attempts": attempts}
            row = c.execute(JOB, params).fetchone()
            assert row is not None
            return str(row[0])

        for role in ROLES:
            queue = f"q_{role}"
            jobs[role] = {
                "queue": queue,
                "read": add(queue, "processing", "-5 minutes"),
                "reclaim": add(queue, "processing", "-5 minutes"),
                "requeue": add(queue, "failed", None, 3),
                "fail": add(queue, "processing", "-5 minutes"),
                "cancel": add(queue, "processing", "1 hour"),
                "policy": add(queue, "queued", None, 0),
            }
    return jobs


def plant_on_the_path(c: psycopg.Connection[Any], dsn: str, dbname: str, app: str) -> None:
    """test_hostile_path's look-alikes of every function, operator and type jobctl's SQL
    names, planted by the application in its schema app (first on the database's search
    path: the application owns the database) and in public, each calling app.spy."""
    c.execute(
        "CREATE FUNCTION app.spy_path(label text) RETURNS boolean LANGUAGE sql "
        "SET search_path = pg_catalog AS $$ SELECT app.spy('search path', label) $$"
    )
    plant = CLONE.replace("evil.", "app.").replace("canary.record(", "app.spy_path(")
    psycopg.ClientCursor(c).execute(plant, {"names": function_names(), "ops": list(OPERATORS)})
    c.execute(PUBLIC_FORMAT.replace("canary.record(", "app.spy_path("))
    for name in TYPES:
        if not name.endswith("[]"):
            c.execute(
                f"CREATE DOMAIN app.{name} AS pg_catalog.{name} CHECK (app.spy_path('type {name}'))"
            )
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                sql.Identifier(dbname), sql.Identifier(app)
            )
        )
    c.execute(
        sql.SQL("ALTER DATABASE {} SET search_path = app, public, pg_catalog").format(
            sql.Identifier(dbname)
        )
    )


def foreign_jobctl(dsn: str, app_dsn: str) -> None:
    """jobctl removed from the table (its lease columns kept), then a schema jobctl of the
    application's: a view of each of jobctl's relations, as it was, calling app.spy."""
    views = []
    with psycopg.connect(dsn, autocommit=True) as c:
        for name in JOBCTL_RELATIONS:
            columns = c.execute(
                "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) "
                "FROM pg_catalog.pg_attribute a WHERE a.attrelid = %s::regclass "
                "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                (f"jobctl.{name}",),
            ).fetchall()
            names = sql.SQL(", ").join(sql.Identifier(n) for n, _ in columns)
            texts = c.execute(
                sql.SQL("SELECT {} FROM jobctl.{}").format(
                    sql.SQL(", ").join(
                        sql.SQL("{}::text").format(sql.Identifier(n)) for n, _ in columns
                    ),
                    sql.Identifier(name),
                )
            ).fetchall()
            tag = sql.Literal(f"foreign jobctl.{name}")
            if texts:
                values = sql.SQL(", ").join(
                    sql.SQL("({})").format(
                        sql.SQL(", ").join(
                            sql.SQL("{}::{}").format(sql.Literal(v), sql.SQL(t))
                            for v, (_, t) in zip(row, columns, strict=True)
                        )
                    )
                    for row in texts
                )
                body = sql.SQL("SELECT * FROM (VALUES {}) AS v ({}) WHERE app.spy({})").format(
                    values, names, tag
                )
            else:
                body = sql.SQL("SELECT {} WHERE NOT app.spy({})").format(
                    sql.SQL(", ").join(
                        sql.SQL("NULL::{} AS {}").format(sql.SQL(t), sql.Identifier(n))
                        for n, t in columns
                    ),
                    tag,
                )
            views.append(sql.SQL("CREATE VIEW jobctl.{} AS {}").format(sql.Identifier(name), body))
        c.execute("DROP SCHEMA jobctl CASCADE")  # the history trigger with it
    with psycopg.connect(app_dsn, autocommit=True) as c:
        c.execute("CREATE SCHEMA jobctl")
        c.execute("GRANT USAGE ON SCHEMA jobctl TO PUBLIC")
        for view in views:
            c.execute(view)
        c.execute("GRANT SELECT ON ALL TABLES IN SCHEMA jobctl TO PUBLIC")


@pytest.fixture(scope="module")
def groups(server_dsn: str) -> Iterator[Groups]:
    with contextlib.ExitStack() as stack:
        made = Groups(server_dsn, stack)
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(made.roles["app"])))
            for role in ("operator", "readonly"):
                admin.execute(
                    sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(made.roles[role]))
                )
        try:
            yield made
        finally:
            stack.close()  # the databases, then the roles
            with psycopg.connect(server_dsn, autocommit=True) as admin:
                for name in made.roles.values():
                    admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def run_once(
    database: Database,
    command: str,
    role: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Run:
    """The command as ``role`` on the group's database, run the first time a cell asks."""
    key = (command, role)
    if key not in database.runs:
        args = command.format(**database.jobs[role]).split()
        monkeypatch.setenv("JOBCTL_ACTOR", "tester@ci")
        for name in ("JOBCTL_DSN", "DATABASE_URL", "JOBCTL_TABLE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setattr(sys, "stdin", io.StringIO(""))
        capsys.readouterr()
        code = cli.main(["--dsn", database.logins[role], *args])
        captured = capsys.readouterr()
        database.runs[key] = Run(code, captured.out, captured.err, database.take_calls())
    return database.runs[key]


def shown(command: str) -> str:
    """The command as a test's id says it: ``fail ID``, ``pause --queue Q``."""
    return re.sub(r"{(queue)?[a-z]*}", lambda m: "Q" if m[1] else "ID", command)


# the cells that fail today, each with why (strict: one that passes must lose its mark)
FOLDED = ("index expression, constant", "partial index predicate, constant")
# what remains (docs/safety.md, "The trust boundary"): the planner folds an IMMUTABLE function
# of constants in an index's expression or predicate (RelationGetIndexExpressions) as whoever
# plans a query on the table, every read included. jobctl runs a stronger session as its
# operator role on such a table (or refuses a superuser with none): a read's calls there are
# never a superuser's nor stronger than the operator's, but a read makes them
NOT_READING_JOBS = ("policy --list",)  # (pause --list counts the claims since each pause)


def planner_folds(hook: Hook, command: str, writes: bool) -> bool:
    return hook.name in FOLDED and not writes and command not in NOT_READING_JOBS


GROUPS = tuple(dict.fromkeys(h.group for h in HOOKS))  # each a database, in HOOKS' order
CELLS = [(command, writes, role) for command, writes in COMMANDS for role in ROLES]


def broken(
    hook: Hook, run: Run, command: str, writes: bool, role: str, app: str, allowed: set[str]
) -> str | None:
    """What ``hook`` did that the property forbids in ``run`` of ``command`` as ``role``, or
    None: reads call none of it (a schema check's status probe only as the application
    ``app``, a function the planner folds never as a superuser nor as a role outside
    ``allowed``); writes call it only as a non-superuser in ``allowed``: the table's owner,
    the operator role, the session's own non-superuser role."""
    calls = [c for c in run.calls if c[0] == hook.name]
    seen = sorted({f"current_user={c[2]} rolsuper={c[4]}" for c in calls})
    said = f"{hook.name} ran {len(calls)} time(s) in {command!r} as {role} (exit {run.code})"
    if not writes and command == "schema check" and not planner_folds(hook, command, writes):
        # it asks the status column whether it accepts the values jobctl writes: the
        # application's code, run only as the application (the owner), or not at all
        ok = {(c[2], c[4]) for c in calls} <= {(app, False)}
        return None if ok else f"{said}: {seen}"
    if not writes and not planner_folds(hook, command, writes):
        return None if seen == [] else f"{said}: {seen}"
    stronger = [c for c in calls if c[4] or c[2] not in allowed]
    return None if stronger == [] else f"{said}: {seen}"


@pytest.mark.parametrize("group", GROUPS)
def test_the_applications_code_never_runs_stronger_than_the_application(
    groups: Groups,
    group: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every command as every role on one database of hooks, every hook of it judged in
    each cell (a failure names each cell and each hook that broke the property)."""
    database = groups.get(group)
    found = []
    for command, writes, role in CELLS:
        cell = f"{group}-{shown(command)}-{role}"
        run = run_once(database, command, role, capsys, monkeypatch)
        if "Traceback" in run.err or run.code not in DOCUMENTED_CODES:
            found.append(f"{cell}: exit {run.code}: {run.err}")
            continue
        allowed = {database.app, groups.roles["operator"]}
        if role != "superuser":
            allowed.add(groups.roles[role])
        for hook in HOOKS:
            if hook.group == group:
                broke = broken(hook, run, command, writes, role, database.app, allowed)
                if broke:
                    found.append(f"{cell}: {broke}")
    assert found == []
    assert len(database.runs) == len(CELLS)  # every cell ran


# what the application's own statements do, as the application: each hook runs there
LIVE = {
    "table": (
        "INSERT INTO jobs (queue, status, reserved_by, available_at, reserved_at, "
        "lease_expires_at, heartbeat_at) "
        "VALUES ('live', 'queued', 'w', now(), now(), now(), now())",
        "UPDATE jobs SET status = 'done' WHERE queue = 'live'",
    ),
    "rule": ("UPDATE jobs SET attempts = attempts WHERE queue = 'q_superuser'",),
    "policy": ("SELECT count(*) FROM jobs",),
    "foreign": tuple(f"SELECT * FROM jobctl.{name}" for name in JOBCTL_RELATIONS),
    "search path": ("SELECT format('%I.%I', 'a'::name, 'b'::name), 1 = 1, now()",),
}


@pytest.mark.parametrize("hook", [pytest.param(h, id=h.name) for h in HOOKS])
def test_each_hook_runs_in_the_applications_own_statements(groups: Groups, hook: Hook) -> None:
    """A hook that never runs proves nothing: each does, as the application, in its own
    statements (run after the cells: they change rows)."""
    database = groups.get(hook.group)
    with psycopg.connect(as_role(database.dsn, database.app), autocommit=True) as c:
        for statement in LIVE[hook.group]:
            c.execute(statement)
    calls = [c for c in database.take_calls() if c[0] == hook.name]
    assert calls, f"{hook.name} never ran"
    assert {(c[2], c[4]) for c in calls} == {(database.app, False)}, calls

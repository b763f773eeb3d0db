"""schema remove: the way back out, in layers (the trigger; --history; --columns), on every
table shape of the real-tables tests, with real workers writing meanwhile; idempotent; the
--sql script run through psql; refusals that change nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import rows, sql
from shapes import OWN_NAMES_PARKED, SHAPES, WORKER_STATEMENTS, Shape

from jobctl import db

BOUND_MS = 500  # schema apply's bound for a worker's wait on a lock while it runs (the same here)
LEASE = "30 seconds"


def catalog(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    """Everything a schema change could leave behind, in every schema but the system's: the
    schemas, relations, columns, constraints, indexes, triggers and functions."""
    user = (
        "NOT IN ('pg_catalog', 'information_schema', 'pg_toast') AND nspname NOT LIKE 'pg_temp%%'"
        " AND nspname NOT LIKE 'pg_toast_temp%%'"
    )
    queries = {
        "schemas": f"SELECT nspname FROM pg_namespace WHERE nspname {user}",
        "relations": "SELECT n.nspname || '.' || c.relname || ' ' || c.relkind::text "
        f"FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname {user}",
        "columns": "SELECT a.attrelid::regclass || '.' || a.attname || ' ' || "
        "format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' ' || "
        "coalesce(pg_get_expr(d.adbin, d.adrelid), '') FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
        f"WHERE n.nspname {user} AND a.attnum > 0 AND NOT a.attisdropped",
        "constraints": "SELECT conrelid::regclass || ' ' || conname || ' ' || "
        "pg_get_constraintdef(c.oid) || ' ' || convalidated FROM pg_constraint c "
        f"JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname {user}",
        "indexes": "SELECT pg_get_indexdef(indexrelid) || ' ' || indisvalid FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE n.nspname {user}",
        "triggers": "SELECT tgrelid::regclass || ' ' || tgname FROM pg_trigger t "
        "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE n.nspname {user} AND NOT t.tgisinternal",
        "functions": "SELECT p.oid::regprocedure::text FROM pg_proc p "
        f"JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname {user}",
    }
    with conn.cursor(row_factory=rows.tuple_row) as cur:
        return {k: sorted(r[0] for r in cur.execute(q).fetchall()) for k, q in queries.items()}


def made(dsn: str, s: Shape, jobs: int = 20) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, row_factory=rows.dict_row)
    conn.execute(s.ddl)
    for _ in range(jobs):
        conn.execute(s.new_job)
    return conn


def checks(run, s: Shape, dsn: str) -> dict[str, dict[str, Any]]:
    result = run("--table", s.table, "schema", "check", "-o", "json", dsn=dsn)
    assert result.code in (0, 4), result.err
    return {c["check"]: c for c in json.loads(result.out)}


class Workers:
    """Real workers on their own connections, running the lease design's statements in the
    table's own names (claim, heartbeat, then complete or fail), timing each statement.

    A worker's wait on a lock is bounded by the server (``lock_timeout``: over ``BOUND_MS``
    and the statement fails, an error the test reports), not by the statement's time seen
    from here, which a machine busy with the rest of the suite stretches (562 ms was seen
    once, with no lock wait)."""

    def __init__(self, dsn: str, s: Shape, count: int = 3) -> None:
        with psycopg.connect(dsn, row_factory=rows.dict_row) as conn:
            table = db.resolve_table(conn, s.table)
        self.statements = {
            name: sql.SQL(text).format(
                **db.spelling(table.ident, s.mapping(), table.id_type, table.status_type)
            )
            for name, text in WORKER_STATEMENTS.items()
            if name != "requeue"
        }
        self.dsn = dsn
        self.stop = threading.Event()
        self.timed: list[tuple[float, float, str]] = []  # (started, seconds, statement)
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self.work, args=(f"w{i}",)) for i in range(count)]
        for t in self.threads:
            t.start()

    def run(self, conn: psycopg.Connection[Any], name: str, **params: Any) -> Any:
        started = time.time()
        clock = time.perf_counter()
        try:
            return conn.execute(self.statements[name], params).fetchone()
        finally:
            self.timed.append((started, time.perf_counter() - clock, name))

    def work(self, name: str) -> None:
        n = 0
        bounded = f"-c lock_timeout={BOUND_MS}"
        with psycopg.connect(self.dsn, autocommit=True, options=bounded) as conn:
            while not self.stop.is_set():
                token = uuid.uuid4()
                try:
                    row = self.run(conn, "claim", worker=name, lease=LEASE, attempt_token=token)
                    if row is None:
                        time.sleep(0.01)
                        continue
                    job = {"id": row[0], "attempt_token": token}
                    self.run(conn, "heartbeat", worker=name, lease=LEASE, ahead="0 s", **job)
                    n += 1
                    if n % 3:
                        self.run(conn, "complete", **job)
                    else:
                        self.run(conn, "worker_fail", error="boom", **job)
                except psycopg.Error as exc:
                    if not getattr(exc, "sqlstate", "") == "40001":  # moved partition: retry
                        self.errors.append(f"{type(exc).__name__}: {exc}".splitlines()[0])

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def during(self, start: float, end: float) -> list[float]:
        return [lat for at, lat, _ in self.timed if start <= at <= end]


def removed(
    dsn: str, s: Shape, *args: str
) -> tuple[subprocess.CompletedProcess[str], float, float]:
    from helpers import jobctl_process

    started = time.time()
    done = jobctl_process(dsn, "--table", s.table, "schema", "remove", "--yes", *args)
    return done, started, time.time()


@pytest.mark.parametrize("s", SHAPES, ids=[s.name for s in SHAPES])
def test_remove_in_layers_while_workers_run_on_each_shape(empty_dsn, run, s):
    dsn = empty_dsn
    with made(dsn, s) as conn:
        before = catalog(conn)
        applied = run("--table", s.table, "schema", "apply", "--yes", *s.mapping_args(), dsn=dsn)
        assert applied.code == 0, applied.err
        installed = catalog(conn)
        for _ in range(200):
            conn.execute(s.new_job)

        workers = Workers(dsn, s)
        try:
            time.sleep(0.5)  # they claim, heartbeat, complete and fail: the history fills
            trigger, t0, t1 = removed(dsn, s)
            time.sleep(0.3)
            history_rows = conn.execute("SELECT count(*) AS n FROM jobctl.events").fetchone()["n"]
            wiped, t2, t3 = removed(dsn, s, "--history")
            time.sleep(0.3)
        finally:
            workers.finish()

        assert trigger.returncode == 0, trigger.stderr
        assert "done: drop the history trigger and its function jobctl.record_" in trigger.stderr
        assert "kept: the history of" in trigger.stderr
        assert history_rows > 0  # the workers' failures were recorded, and are kept
        assert wiped.returncode == 0, wiped.stderr
        assert not workers.errors, workers.errors[:3]  # a lock wait over BOUND_MS is one
        meanwhile = workers.during(t0, t1) + workers.during(t2, t3)
        assert len(meanwhile) > 10, "the workers were not running during the removes"

        found = checks(run, s, dsn)
        assert found["history installed"]["ok"] is False
        assert "trigger missing" in found["history installed"]["detail"]
        assert found["lease columns"]["ok"] and found["reclaim index"]["ok"]
        if s.mapping_args():  # the recorded names stay while the lease columns do: schema kept
            assert "kept: schema jobctl" in wiped.stderr and "names recorded" in wiped.stderr
            assert conn.execute("SELECT count(*) AS n FROM jobctl.events").fetchone()["n"] == 0
        else:
            assert "done: drop schema jobctl" in wiped.stderr
            assert conn.execute("SELECT to_regnamespace('jobctl') AS s").fetchone()["s"] is None
        again = run("--table", s.table, "schema", "remove", "--yes", dsn=dsn)
        assert again.code == 0 and "nothing left to remove" in again.err, again.err
        # the application's own statements after the trigger is gone
        assert conn.execute(s.new_job).fetchone() is not None

        # the idle table (the workers gone: in-process, as every other command here):
        # everything else of jobctl's goes, and the catalog is as before
        remove_all = ("--table", s.table, "schema", "remove", "--yes", "--history", "--columns")
        columns = run(*remove_all, dsn=dsn)
        assert columns.code == 0, columns.err
        assert catalog(conn) == before
        found = checks(run, s, dsn)
        assert found["jobctl installed"]["ok"] is False
        assert "nothing of jobctl's on" in found["jobctl installed"]["detail"]
        last = run(*remove_all, dsn=dsn)
        assert last.code == 0 and "nothing left to remove" in last.err

        # and back: apply again makes the same objects, schema check clean
        again_applied = run(
            "--table", s.table, "schema", "apply", "--yes", *s.mapping_args(), dsn=dsn
        )
        assert again_applied.code == 0, again_applied.err
        assert catalog(conn) == installed
        assert all(c["ok"] for c in checks(run, s, dsn).values())


# ---------------------------------------------------------------- refusals, scripts, sharing
def claimed(dsn: str, table: str = "jobs", lease_seconds: float = 300) -> Any:
    from jobctl import lease

    with psycopg.connect(dsn, autocommit=True) as c:
        return lease.Worker(c, "w1", table=table, lease_seconds=lease_seconds).claim()


def test_columns_are_refused_while_a_lease_is_live_and_nothing_changes(conn, dsn, run):
    conn.execute("INSERT INTO jobs DEFAULT VALUES")
    assert claimed(dsn) is not None
    before = catalog(conn)
    result = run("schema", "remove", "--history", "--columns", "--yes")
    assert result.code == 2 and result.err.count("\n") == 1, result.err
    assert "1 row(s) processing with a live lease" in result.err
    assert "nothing done" in result.err
    assert catalog(conn) == before  # not even the trigger: refused before any step
    # an expired lease is no worker's any more: reclaim it, then the columns go
    conn.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 minute'")
    script = run("schema", "remove", "--columns", "--sql")
    assert script.code == 0, script.err
    assert "(1 row(s) still processing with an expired lease stay so" in script.out
    assert "no lease stay so" not in script.out
    # a claim with no lease beside it: reclaim never touches it, the question says what does
    conn.execute(
        "INSERT INTO jobs (status, reserved_by, reserved_at) "
        "VALUES ('processing', 'legacy-1', now())"
    )
    script = run("schema", "remove", "--columns", "--sql")
    assert script.code == 0, script.err
    assert (
        "(1 row(s) still processing with an expired lease stay so, with no lease to expire: "
        "jobctl reclaim --commit first to requeue them; 1 row(s) processing with no lease stay "
        "so (reclaim never touches them): jobctl requeue --no-lease once no old worker runs, "
        "or the old workers take them back after their own timeout)"
    ) in " ".join(script.out.split())
    # --table typed: the commands it names repeat it, so that they run as printed
    typed = run("--table", "public.jobs", "schema", "remove", "--columns", "--sql")
    said = " ".join(typed.out.split())
    assert "jobctl --table public.jobs reclaim --commit first" in said, typed.out
    assert "jobctl --table public.jobs requeue --no-lease once" in said
    conn.execute("DELETE FROM jobs WHERE reserved_by = 'legacy-1'")
    assert run("reclaim", "--commit", "--yes").code == 0
    done = run("schema", "remove", "--columns", "--yes")
    assert done.code == 0, done.err
    columns = [
        r["attname"]
        for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'jobs'::regclass AND attnum > 0 "
            "AND NOT attisdropped"
        )
    ]
    assert not {"attempt_token", "lease_expires_at", "jobctl_action"} & set(columns)
    assert "kept: the history of public.jobs" in done.err  # --keep-history, the default


def test_a_claim_with_an_expiry_but_no_token_is_no_lease_and_does_not_block(conn, run):
    """A processing row with an expiry still ahead but no attempt token has no lease (as stuck,
    summary and show judge it: reclaim's fence needs both), so it neither is a live lease that
    refuses --columns nor trips the guard under the lock: counted with no lease, it stays."""
    conn.execute(
        "INSERT INTO jobs (status, reserved_by, reserved_at, lease_expires_at) "
        "VALUES ('processing', 'legacy-1', now(), now() + interval '1 hour')"
    )
    script = run("schema", "remove", "--columns", "--sql")
    assert script.code == 0, script.err
    assert "1 row(s) processing with no lease stay so" in " ".join(script.out.split())
    assert "expired lease" not in script.out
    done = run("schema", "remove", "--columns", "--yes")
    assert done.code == 0, done.err
    assert conn.execute("SELECT status FROM jobs").fetchone()["status"] == "processing"


@pytest.mark.skipif(shutil.which("psql") is None, reason="needs psql")
def test_the_sql_script_runs_through_psql_and_its_guard_holds(empty_dsn, run):
    s = OWN_NAMES_PARKED
    with made(empty_dsn, s) as conn:
        before = catalog(conn)
        assert (
            run(
                "--table", s.table, "schema", "apply", "--yes", *s.mapping_args(), dsn=empty_dsn
            ).code
            == 0
        )
        installed = catalog(conn)
        args = ("--table", s.table, "schema", "remove", "--history", "--columns", "--sql")
        script = run(*args, dsn=empty_dsn)
        assert script.code == 0, script.err
        assert catalog(conn) == installed  # --sql changes nothing
        assert (
            "BEGIN;\nSET LOCAL search_path = pg_catalog, pg_temp;\n"
            "SET LOCAL lock_timeout = '150ms';\nDROP TRIGGER"
        ) in script.out
        assert "jobctl schema remove does this by itself" in script.out

        def psql(text: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", empty_dsn, "-f", "-"],
                input=text,
                capture_output=True,
                text=True,
            )

        # a worker claims between the review and the run: the columns' step refuses, whole
        job = claimed(empty_dsn, s.table)
        assert job is not None
        refused = psql(script.out)
        assert refused.returncode != 0 and "live lease" in refused.stderr, refused.stderr
        left = catalog(conn)
        assert any(".attempt_token uuid " in c for c in left["columns"])
        assert not left["triggers"]  # the script's first step (the trigger) had run
        conn.execute(f"UPDATE {s.table} SET lease_expires_at = now() - interval '1 minute'")
        assert run("--table", s.table, "reclaim", "--commit", "--yes", dsn=empty_dsn).code == 0

        # reviewed again, and run: the catalog is as it was before apply
        again = run(*args, dsn=empty_dsn)
        done = psql(again.out)
        assert done.returncode == 0, done.stderr
        assert catalog(conn) == before
        assert run(*args, dsn=empty_dsn).out == ""  # nothing left: an empty script
        nothing = run("--table", s.table, "schema", "remove", "--yes", dsn=empty_dsn)
        assert nothing.code == 0 and "nothing left to remove from public.tasks" in nothing.err


def test_tables_sharing_the_history_are_removed_one_by_one(conn, dsn, run):
    """Two jobs tables in schema jobctl: removing one's history keeps the other's, its trigger
    and the schema (named); the last table's --history takes the schema."""
    conn.execute("CREATE TABLE other (LIKE jobs INCLUDING ALL)")
    assert run("--table", "other", "schema", "apply", "--yes").code == 0
    for table in ("jobs", "other"):
        conn.execute(f"INSERT INTO {table} (payload) SELECT '{{}}' FROM generate_series(1, 3)")
        job = claimed(dsn, table)
        with psycopg.connect(dsn, autocommit=True) as c:
            from jobctl import lease

            lease.Worker(c, "w1", table=table, lease_seconds=30).fail(job, "boom", retry_delay=0)

    first = run("schema", "remove", "--history", "--columns", "--yes")
    assert first.code == 0, first.err
    assert "done: delete the history of public.jobs (1 event, 1 attempt)" in first.err
    assert "kept: schema jobctl: it serves other tables too (public.other" in first.err
    counts = conn.execute(
        "SELECT (SELECT count(*) FROM jobctl.events WHERE job_table = 'public.other') AS other,"
        " (SELECT count(*) FROM jobctl.events WHERE job_table = 'public.jobs') AS jobs"
    ).fetchone()
    assert counts == {"other": 1, "jobs": 0}
    # the other table's history still records
    job = claimed(dsn, "other")
    with psycopg.connect(dsn, autocommit=True) as c:
        from jobctl import lease

        lease.Worker(c, "w1", table="other", lease_seconds=30).fail(job, "again", retry_delay=0)
    assert (
        conn.execute(
            "SELECT count(*) AS n FROM jobctl.events WHERE job_table = 'public.other'"
        ).fetchone()["n"]
        == 2
    )
    assert all(
        c["ok"] for c in json.loads(run("--table", "other", "schema", "check", "-o", "json").out)
    )

    last = run("--table", "other", "schema", "remove", "--history", "--yes")
    assert last.code == 0, last.err
    assert "done: drop schema jobctl: the history of public.other (2 events, 2 attempts)" in (
        last.err
    )
    assert conn.execute("SELECT to_regnamespace('jobctl') AS s").fetchone()["s"] is None
    # the other table keeps its lease columns (no --columns): jobctl still reads it
    assert run("--table", "other", "stuck", "-o", "json").code == 0


def test_a_schema_holding_objects_of_someone_elses_is_kept(conn, run):
    conn.execute("CREATE VIEW jobctl.my_report AS SELECT count(*) AS n FROM jobctl.events")
    result = run("schema", "remove", "--history", "--yes")
    assert result.code == 0, result.err
    assert "kept: schema jobctl: it holds objects jobctl did not make (my_report)" in result.err
    assert conn.execute("SELECT n FROM jobctl.my_report").fetchone()["n"] == 0


def test_a_lease_column_that_is_the_tables_own_is_kept(empty_dsn, run):
    ddl = """
    CREATE TABLE q (
        id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'queued',
        attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 3,
        available_at timestamptz NOT NULL DEFAULT now(), reserved_by text,
        reserved_at timestamptz, last_error text, finished_at timestamptz,
        updated_at timestamptz NOT NULL DEFAULT now(), last_seen timestamptz)"""
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        conn.execute(ddl)
        args = ("--table", "q", "schema")
        assert (
            run(*args, "apply", "--yes", "--column", "heartbeat_at=last_seen", dsn=empty_dsn).code
            == 0
        )
        result = run(*args, "remove", "--history", "--columns", "--yes", dsn=empty_dsn)
        assert result.code == 0, result.err
        assert "kept: last_seen, the table's own column for the lease design's heartbeat_at" in (
            result.err
        )
        columns = {
            r["attname"]
            for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'q'::regclass AND attnum > 0 "
                "AND NOT attisdropped"
            )
        }
        assert "last_seen" in columns and "attempt_token" not in columns
        assert conn.execute("SELECT to_regnamespace('jobctl') AS s").fetchone()["s"] is None


# ---------------------------------------------------------------- the application's objects
def jobctl_rows(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    """The rows of jobctl's own tables, as text: the history, the recorded names, the pauses."""
    return {
        t: [
            r["row"]
            for r in conn.execute(
                sql.SQL("SELECT t::text AS row FROM jobctl.{} t ORDER BY 1").format(
                    sql.Identifier(t)
                )
            )
        ]
        for t in ("events", "attempts", "tables", "pauses", "pause_events")
    }


@pytest.mark.parametrize(
    ("view", "named"),
    [
        (
            "CREATE VIEW app_events AS SELECT job_id, event, at FROM jobctl.events",
            "view public.app_events (on table jobctl.events)",
        ),
        (
            "CREATE VIEW app_pauses AS SELECT job_table, value FROM jobctl.pauses",
            "view public.app_pauses (on table jobctl.pauses)",
        ),
        (
            "CREATE VIEW app_leases AS SELECT id, lease_expires_at FROM public.jobs",
            "view public.app_leases (on table column public.jobs.lease_expires_at)",
        ),
    ],
    ids=["over the events", "over the pauses", "over a lease column"],
)
def test_an_object_on_what_remove_drops_refuses_it_before_any_step(conn, dsn, run, view, named):
    """A view of the application's over what the steps would drop: refused before the first
    step (the trigger's), naming it; before, the columns' step ran and the schema's failed."""
    assert run("schema", "apply", "--yes", "--column", "queue=queue").code == 0  # names recorded
    assert run("pause", "--queue", "mail", "--reason", "provider down").code == 0
    conn.execute("INSERT INTO jobs (payload) SELECT '{}' FROM generate_series(1, 3)")
    from jobctl import lease

    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w1", lease_seconds=30)
        job = worker.claim()
        assert job is not None
        worker.fail(job, "boom", retry_delay=0)  # an event and an attempt in the history
    conn.execute(view)
    before, rows_before = catalog(conn), jobctl_rows(conn)
    assert rows_before["events"] and rows_before["tables"] and rows_before["pauses"]

    for args in (("--yes",), ("--sql",)):
        result = run("schema", "remove", "--history", "--columns", *args)
        assert result.code == 2, result.err
        assert result.out == ""
        assert result.err.count("\n") == 1, result.err
        assert named in result.err and result.err.endswith("; nothing done\n"), result.err
        assert catalog(conn) == before  # the trigger, the columns, schema jobctl: all there
        assert jobctl_rows(conn) == rows_before

    # the view gone, the same removal takes everything, the recorded names said once
    conn.execute("DROP VIEW " + view.split()[2])
    done = run("schema", "remove", "--history", "--columns", "--yes")
    assert done.code == 0, done.err
    assert "; the recorded names" in done.err and "the the" not in done.err
    assert conn.execute("SELECT to_regnamespace('jobctl') AS s").fetchone()["s"] is None
    assert "lease_expires_at" not in {c.split()[0].split(".")[-1] for c in catalog(conn)["columns"]}


def test_an_object_on_what_remove_keeps_does_not_stop_it(conn, run):
    """Only what the steps drop counts: a view over a lease column leaves --history free (the
    columns stay), a view over the history leaves the bare removal free (the history stays)."""
    conn.execute("CREATE VIEW app_leases AS SELECT id, lease_expires_at FROM jobs")
    conn.execute("CREATE VIEW app_events AS SELECT job_id FROM jobctl.events")
    bare = run("schema", "remove", "--yes")
    assert bare.code == 0, bare.err
    conn.execute("DROP VIEW app_events")
    history = run("schema", "remove", "--history", "--yes")
    assert history.code == 0, history.err
    assert "done: drop schema jobctl" in history.err
    refused = run("schema", "remove", "--columns", "--yes")
    assert refused.code == 2, refused.err
    assert "view public.app_leases (on table column public.jobs.lease_expires_at)" in refused.err


NO_UPDATED_AT = """
CREATE TABLE tasks (
    id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'queued',
    attempts integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL DEFAULT 3,
    available_at timestamptz NOT NULL DEFAULT now(), reserved_by text, reserved_at timestamptz,
    last_error text, finished_at timestamptz
);
INSERT INTO tasks (status) SELECT 'queued' FROM generate_series(1, 20);
"""


def test_remove_names_the_column_apply_asked_for_with_the_statement_that_drops_it(empty_dsn, run):
    """A table without updated_at: apply refuses it, suggesting the ALTER that adds it; the
    user runs it as printed, apply then serves the table; schema remove --history --columns
    takes jobctl's own off and names updated_at (the table's own now) with the exact
    statement that drops it, which it does not run; run as printed, it drops it."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(NO_UPDATED_AT)
    refused = run("--table", "tasks", "schema", "apply", "--yes", dsn=empty_dsn)
    assert refused.code == 2 and "updated_at ('updated_at')" in refused.err, refused.err
    suggested = refused.err.split("(retry on lock timeout): ", 1)[1].split("; nothing done")[0]
    assert suggested.startswith("BEGIN;") and "ADD COLUMN updated_at" in suggested, suggested
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(suggested)  # as printed (several statements: one simple query)
    assert run("--table", "tasks", "schema", "apply", "--yes", dsn=empty_dsn).code == 0
    removed = run(
        "--table", "tasks", "schema", "remove", "--history", "--columns", "--yes", dsn=empty_dsn
    )
    assert removed.code == 0, removed.err
    named = [line for line in removed.err.splitlines() if "which schema apply asked" in line]
    assert len(named) == 1, removed.err
    assert named[0].startswith("kept: column updated_at of public.tasks"), named
    drop = named[0].split("(retry on lock timeout): ", 1)[1]
    assert drop == (
        "BEGIN; SET LOCAL lock_timeout = '150ms'; "
        'ALTER TABLE "public"."tasks" DROP COLUMN "updated_at"; COMMIT'
    ), drop
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        has = (
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'tasks'::regclass AND attname = %s"
        )
        assert conn.execute(has, ("updated_at",)).fetchone()[0] == 1  # named, not dropped
        assert conn.execute(has, ("lease_expires_at",)).fetchone()[0] == 0  # jobctl's: gone
        conn.execute(drop)
        assert conn.execute(has, ("updated_at",)).fetchone()[0] == 0
    again = run("--table", "tasks", "schema", "remove", "--columns", "--yes", dsn=empty_dsn)
    assert "which schema apply asked" not in again.err, again.err


def test_remove_names_no_column_the_table_had_of_its_own(dsn, run):
    """The reference table's updated_at was never asked for: remove --columns names none."""
    removed = run("schema", "remove", "--history", "--columns", "--yes", dsn=dsn)
    assert removed.code == 0, removed.err
    assert "which schema apply asked" not in removed.err, removed.err

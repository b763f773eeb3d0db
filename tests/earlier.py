"""Databases as each earlier history version left them, for the upgrade tests
(tests/integration/test_baseline.py, tests/system/test_upgrade_online.py).

Each earlier version is built as it was left: the reference jobs table with the lease columns,
migrations 001 to N applied as schema apply runs them (008 concurrently), and the table's
trigger of that time — version 1's two triggers on record_transition() up to history 1,
version 2's on the shared record_change() up to history 3, the table's own function from 4
on; history 0 is the unversioned history of jobctl 0.1-0.2 (001 run by hand, no record).

    EARLIER: every earlier history version the builder makes (0, 1 ... the latest but one)
    at_version(dsn, version, mode, trigger): the database as ``version`` left it
"""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
from psycopg import sql

from jobctl import db
from jobctl.schema import history, reclaim_index
from jobctl.schema import steps as schema_steps
from jobctl.sql import queries
from jobctl.table.mapping import TableMapping

LATEST = history.latest_version()
EARLIER = [0, *(m.version for m in history.migrations() if m.version < LATEST)]

# version 1's triggers (tests/integration/test_history.py's) and version 2's
V1_TRIGGERS = """
CREATE TRIGGER jobctl_history_insert AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.status = 'processing') EXECUTE FUNCTION jobctl.record_transition();
CREATE TRIGGER jobctl_history_update AFTER UPDATE ON jobs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION jobctl.record_transition()
"""
V2_TRIGGER = """
CREATE TRIGGER jobctl_history BEFORE UPDATE ON jobs FOR EACH ROW
    WHEN (NEW.status <> 'processing' OR NEW.jobctl_action IS NOT NULL)
    EXECUTE FUNCTION jobctl.record_change('late', '2')
"""


def reference_table(conn: psycopg.Connection[Any]) -> None:
    """The jobs table schema apply --create makes, with the lease columns: nothing else."""
    jobs = sql.Identifier("jobs")
    queued = sql.Identifier(reclaim_index.index_name("jobs", "_queued"))
    conn.execute(queries.query("reference_table", jobs, queued_index=queued))
    conn.execute(queries.query("add_lease_columns", **db.spelling(jobs, TableMapping())))


def history_columns(conn: psycopg.Connection[Any]) -> None:
    columns = sql.SQL(", ").join(
        queries.query("add_column", column=sql.Identifier(c), type=sql.SQL(t))
        for c, t in history.COLUMNS.items()
    )
    conn.execute(queries.query("add_columns", sql.Identifier("jobs"), columns=columns))


def at_version(
    dsn: str, version: int, mode: str = "transitions", trigger: str | None = None
) -> None:
    """The database as history ``version`` left it, with the table's trigger of that time (in
    ``mode`` from version 4 on; audit's as jobctl 0.2 made it: legacy_audit). ``trigger``:
    from version 4 on, the SQL that makes the table's function and trigger instead of this
    jobctl's (an older release's, whose function writes only the columns of its time)."""
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as conn:
        conn.autocommit = True
        reference_table(conn)
        if version == 0:  # the unversioned history: 001's text, no jobctl.migrations
            conn.execute(history.migrations()[0].text)
        for m in history.migrations():
            if m.version <= version:
                schema_steps.apply(conn, settings, history.migration_steps(conn, m, locks="jobs"))
        if version <= 1:
            conn.execute(V1_TRIGGERS)
            return
        history_columns(conn)
        if version <= 3:
            conn.execute(V2_TRIGGER)
            return
        if trigger is not None:
            conn.execute(trigger)  # type: ignore[call-overload]
            return
        target = history.Target.of(db.resolve_table(conn, "jobs"))
        want = history.wanted(conn, target, mode)
        if mode == history.LEAST:
            want = legacy_audit(conn, target)
        conn.execute(history.install_sql(target, mode, want))


def legacy_audit(conn: psycopg.Connection[Any], target: history.Target) -> history.Wanted:
    """An audit install's function as jobctl 0.2 made it: the one body every mode shared,
    the statistics block included (audit's today leaves it out), so that schema apply
    replaces it as it does on a user's 0.2 audit install."""
    audit = history.wanted(conn, target, history.LEAST)
    shared = history.wanted(conn, target, "transitions").body
    assert shared != audit.body
    return dataclasses.replace(audit, body=shared, digest="0" * 16)

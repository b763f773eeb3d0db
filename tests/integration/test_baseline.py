"""A fresh install is the current schema: one baseline (sql/history/baseline.sql) makes what
the migrations end with, and a database upgraded from every earlier history version has the
same catalog as a fresh one — tables, columns and their types, indexes, functions and their
definitions, triggers, grants, comments (tests/catalogs.py) — in mode audit too, whose table
has jobctl_action alone; and the columns the application sees in each mode, counted.

Each earlier version is built as it was left: the reference jobs table with the lease columns,
migrations 001 to N applied as schema apply runs them (008 concurrently), and the table's
trigger of that time — version 1's two triggers on record_transition() up to history 1,
version 2's on the shared record_change() up to history 3, the table's own function from 4
on; history 0 is the unversioned history of jobctl 0.1-0.2 (001 run by hand, no record).
Then schema apply upgrades it, as it does a user's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from catalogs import catalog, differences
from conftest import scratch_database
from psycopg import rows, sql

import jobctl
from jobctl import db
from jobctl.schema import apply as schema_apply
from jobctl.schema import history, reclaim_index
from jobctl.schema import steps as schema_steps
from jobctl.sql import queries
from jobctl.table.mapping import TableMapping

LATEST = history.latest_version()
EARLIER = [0, *(m.version for m in history.migrations() if m.version < LATEST)]
SQL_LINES = 250  # what a fresh --history audit install's --sql may hold, comments aside

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


def at_version(dsn: str, version: int) -> None:
    """The database as history ``version`` left it, with the table's trigger of that time."""
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
        target = history.Target.of(db.resolve_table(conn, "jobs"))
        want = history.wanted(conn, target, "transitions")
        conn.execute(history.install_sql(target, "transitions", want))


def applied(dsn: str, mode: str) -> dict[str, list[Any]]:
    """schema apply --history MODE --yes on ``dsn``, then its catalog."""
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as conn:
        steps = schema_apply.plan_apply(conn, "jobs", create=False, history_mode=mode)
        schema_steps.apply(conn, settings, steps)
        assert schema_apply.plan_apply(conn, "jobs", create=False, history_mode=mode) == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        return catalog(conn)


@pytest.fixture(scope="module")
def fresh(server_dsn: str) -> Iterator[dict[str, dict[str, list[Any]]]]:
    """A fresh install's catalog in each mode: the reference table, then schema apply."""
    made = {}
    for mode in ("transitions", "audit"):
        with scratch_database(server_dsn, "jobctl_f") as dsn:
            with psycopg.connect(dsn, autocommit=True) as conn:
                reference_table(conn)
            made[mode] = applied(dsn, mode)
    yield made


@pytest.mark.parametrize("version", EARLIER)
def test_an_upgrade_from_each_earlier_version_is_a_fresh_install(fresh, empty_dsn, version):
    at_version(empty_dsn, version)
    upgraded = applied(empty_dsn, "transitions")
    assert differences(fresh["transitions"], upgraded) == {}
    with psycopg.connect(empty_dsn, row_factory=rows.dict_row) as conn:
        recorded = conn.execute("SELECT version FROM jobctl.migrations ORDER BY 1").fetchall()
    assert [r["version"] for r in recorded] == [m.version for m in history.migrations()]


@pytest.mark.parametrize("version", [2, 7, LATEST - 1])
def test_an_audit_install_upgraded_is_a_fresh_audit_install(fresh, empty_dsn, version):
    """An audit install of before (all five jobctl_* columns on the table) upgraded with
    --history audit: the four statistics columns dropped (after the function that wrote them
    is replaced), the catalog a fresh audit install's."""
    at_version(empty_dsn, version)
    upgraded = applied(empty_dsn, "audit")
    assert differences(fresh["audit"], upgraded) == {}


def test_the_columns_the_application_sees_in_each_mode(empty_dsn):
    """What schema apply adds to a plain jobs table, by mode: the lease design's five columns,
    and jobctl_action alone under --history audit (the four statistics columns besides in the
    modes whose trigger keeps them on the row)."""
    settings = db.Settings(dsn=empty_dsn)
    added = {}
    with db.connect(settings) as conn:
        conn.autocommit = True
        for mode in history.MODES:
            jobs = sql.Identifier(f"jobs_{mode}")
            queued = sql.Identifier(reclaim_index.index_name(f"jobs_{mode}", "_queued"))
            conn.execute(queries.query("reference_table", jobs, queued_index=queued))
            before = set(table_columns(conn, f"jobs_{mode}"))
            steps = schema_apply.plan_apply(conn, f"jobs_{mode}", create=False, history_mode=mode)
            schema_steps.apply(conn, settings, steps)
            added[mode] = [c for c in table_columns(conn, f"jobs_{mode}") if c not in before]
    lease = list(schema_apply.LEASE_COLUMNS)
    assert added == {
        "transitions": [*lease, *history.COLUMNS],
        "late": [*lease, *history.COLUMNS],
        "exact": [*lease, *history.COLUMNS],
        "audit": [*lease, "jobctl_action"],
    }
    assert {mode: len(columns) for mode, columns in added.items()} == {
        "transitions": 10,
        "late": 10,
        "exact": 10,
        "audit": 6,
    }


def table_columns(conn: psycopg.Connection[Any], name: str) -> list[str]:
    found = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        (name,),
    ).fetchall()
    return [r["attname"] for r in found]


def test_the_catalog_comparison_sees_what_a_migration_left(fresh, empty_dsn):
    """The control: an upgraded database with one thing more or other than a fresh one."""
    at_version(empty_dsn, LATEST - 1)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE jobctl.attempts SET (fillfactor = 70)")
        conn.execute("COMMENT ON TABLE jobctl.events IS 'x'")
        conn.execute("REVOKE SELECT ON jobctl.pauses FROM PUBLIC")
    found = differences(fresh["transitions"], applied(empty_dsn, "transitions"))
    assert set(found) == {"relations"}
    only_fresh, only_upgraded = found["relations"]
    assert len(only_fresh) == len(only_upgraded) == 3


def test_a_fresh_install_runs_the_baseline_and_records_every_migration(conn):
    """The template is a fresh install: every migration recorded as applied by this jobctl,
    with its file's checksum, in the baseline's one transaction (one applied_at)."""
    recorded = conn.execute(
        "SELECT version, name, jobctl_version, checksum, applied_at FROM jobctl.migrations "
        "ORDER BY version"
    ).fetchall()
    assert [(r["version"], r["name"], r["jobctl_version"], r["checksum"]) for r in recorded] == [
        (m.version, m.name, jobctl.__version__, m.checksum) for m in history.migrations()
    ]
    assert len({r["applied_at"] for r in recorded}) == 1


def test_the_baseline_stands_for_every_migration():
    """A new migration changes the baseline too: what it makes, and the header's number."""
    assert history.baseline().version == LATEST, (
        f"history {LATEST:03d} is not in sql/history/baseline.sql: add what it makes there "
        f"and change its line '-- jobctl: baseline {history.baseline().version:03d}'"
    )


def test_a_fresh_install_script_is_the_baseline(empty_dsn, run):
    """schema apply --history audit --sql on a table without jobctl: the baseline, none of the
    migrations, at most SQL_LINES lines of SQL."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        reference_table(conn)
    script = run("schema", "apply", "--history", "audit", "--sql", dsn=empty_dsn)
    assert script.code == 0, script.err
    code = [ln for ln in script.out.splitlines() if ln.strip() and not ln.lstrip().startswith("--")]
    assert len(code) <= SQL_LINES
    assert f"-- create the history, as migrations 001-{LATEST:03d} leave it" in script.out
    assert not re.search(r"^-- history migration", script.out, re.MULTILINE)
    for dead in history.SHARED_FUNCTIONS:
        assert dead not in script.out

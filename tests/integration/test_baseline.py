"""A fresh install is the current schema: one baseline (sql/history/baseline.sql) makes what
the migrations end with, and a database upgraded from every earlier history version has the
same catalog as a fresh one — tables, columns and their types, indexes, functions and their
definitions, triggers, grants, comments (tests/catalogs.py) — in mode audit too, whose fresh
table has jobctl_action alone, with one named allowance: a table switched to audit, or an
audit install of jobctl 0.2, keeps the four statistics columns (schema apply drops no column:
an application's prepared SELECT * would fail). The columns each mode adds, counted; a
worker's server-side prepared SELECT * and RETURNING * across those applies.

Each earlier version is built as it was left (tests/earlier.py); then schema apply upgrades
it, as it does a user's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from catalogs import catalog, differences
from conftest import scratch_database
from earlier import EARLIER, LATEST, at_version, reference_table
from psycopg import rows, sql

import jobctl
from jobctl import db
from jobctl.schema import apply as schema_apply
from jobctl.schema import check as schema_check
from jobctl.schema import history, reclaim_index
from jobctl.schema import steps as schema_steps
from jobctl.sql import queries

SQL_LINES = 250  # what a fresh --history audit install's --sql may hold, comments aside


def applied(dsn: str, mode: str | None) -> dict[str, list[Any]]:
    """schema apply --history MODE --yes on ``dsn`` (None: no --history), then its catalog."""
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


# the one difference allowed between a fresh audit install and a table that had the four
# statistics columns before it was switched to audit (or a jobctl 0.2 audit install): they
# stay, unused, after jobctl_action, nullable, no default (schema apply drops no column)
KEPT_IN_AUDIT = [
    ("jobctl_attempt", "uuid"),
    ("jobctl_heartbeats", "integer"),
    ("jobctl_max_gap", "interval"),
    ("jobctl_lease", "interval"),
]


def kept_in_audit(upgraded: dict[str, list[Any]]) -> list[tuple[Any, ...]]:
    """The KEPT_IN_AUDIT columns' rows of the upgraded catalog, checked to be just those."""
    kept = [r for r in upgraded["columns"] if r[0] == "jobs" and r[2] in history.STATISTICS]
    kept.sort(key=lambda r: r[1])  # by position in the table
    action = next(r[1] for r in upgraded["columns"] if r[0] == "jobs" and r[2] == "jobctl_action")
    assert [(r[2], r[3]) for r in kept] == KEPT_IN_AUDIT
    assert [r[1] for r in kept] == [action + 1, action + 2, action + 3, action + 4]
    assert [(r[5], r[6]) for r in kept] == [(False, None)] * 4  # nullable, no default
    return kept


@pytest.mark.parametrize(
    ("version", "installed"),
    [
        (2, "late"),
        (7, "transitions"),
        (LATEST - 1, "transitions"),
        (7, "audit"),
        (LATEST - 1, "audit"),
    ],
)
def test_an_install_upgraded_to_audit_is_a_fresh_audit_install_but_kept_columns(
    fresh, empty_dsn, run, version, installed
):
    """An install of before switched to --history audit, or an audit install of jobctl 0.2
    upgraded by a plain schema apply (the mode installed is kept): its function is replaced
    by audit's, which writes no statistics; the catalog is a fresh audit install's, and the
    four statistics columns besides (KEPT_IN_AUDIT), which schema check accepts and schema
    remove drops."""
    at_version(empty_dsn, version, installed)  # version 2: version 2's trigger, in late
    upgraded = applied(empty_dsn, None if installed == history.LEAST else history.LEAST)
    assert differences(fresh["audit"], upgraded) == {"columns": ([], kept_in_audit(upgraded))}
    with db.connect(db.Settings(dsn=empty_dsn)) as conn:
        table = db.resolve_table(conn, "jobs")
        found = schema_check.history_check(conn, table)
        state = history.table_state(conn, table.oid)
    assert found.ok, found.detail
    assert state.mode == history.LEAST
    assert state.unused_columns == history.STATISTICS
    assert "jobctl_attempt, jobctl_heartbeats, jobctl_max_gap, jobctl_lease left from an " in (
        found.detail
    )
    # schema remove takes whatever of jobctl's columns is there
    removed = run("schema", "remove", "--history", "--columns", "--yes")
    assert removed.code == 0, removed.err
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        left = table_columns(conn, "jobs")
    assert not [c for c in left if c in history.COLUMNS or c in schema_apply.LEASE_COLUMNS]


# a worker's statements over the whole row, prepared on the server (psycopg prepare=True):
# PostgreSQL fails such a statement, once, when the table's row type has changed
WORKER_STATEMENTS = (
    "SELECT * FROM jobs WHERE id = %s",
    "UPDATE jobs SET heartbeat_at = now(), lease_expires_at = now() + interval '30 seconds' "
    "WHERE id = %s RETURNING *",
)


def claimed_job(conn: psycopg.Connection[Any]) -> int:
    job = conn.execute(
        "INSERT INTO jobs (status, attempt_token, lease_expires_at, reserved_by, reserved_at) "
        "VALUES ('processing', gen_random_uuid(), now() + interval '30 seconds', 'w1', now()) "
        "RETURNING id"
    ).fetchone()
    assert job is not None
    return int(job[0])


def worker_rows(worker: psycopg.Connection[Any], job: int) -> list[int]:
    """Each WORKER_STATEMENTS run prepared on the server: the width of the row it returns."""
    widths = [len(worker.execute(q, (job,), prepare=True).fetchall()[0]) for q in WORKER_STATEMENTS]
    prepared = worker.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    assert prepared == (len(WORKER_STATEMENTS),)  # they are prepared on the server
    return widths


@pytest.mark.parametrize(
    ("version", "installed", "asked"),
    [
        (LATEST - 1, history.LEAST, None),  # jobctl 0.2's audit install, upgraded
        (LATEST - 1, "transitions", history.LEAST),  # switched while upgraded
        (LATEST, "transitions", history.LEAST),  # switched
    ],
)
def test_a_worker_prepared_select_star_survives_apply_to_audit(
    empty_dsn, version, installed, asked
):
    """A worker's server-side prepared SELECT * and UPDATE ... RETURNING *, run before and
    after schema apply leaves a table in audit (the plain apply on a 0.2 audit install, which
    keeps the mode; a switch): no error, the same row, since no column was dropped."""
    at_version(empty_dsn, version, installed)
    with psycopg.connect(empty_dsn, autocommit=True) as worker:
        job = claimed_job(worker)
        before = worker_rows(worker, job)
        applied(empty_dsn, asked)
        assert worker_rows(worker, job) == before
        assert history.table_state(worker, db.resolve_table(worker, "jobs").oid).mode == "audit"


def test_adding_the_statistics_columns_fails_a_prepared_select_star(fresh, empty_dsn):
    """The control, and what the docs say of a switch from a fresh audit install to a mode
    that fills the statistics: the columns added change SELECT *'s row, and PostgreSQL fails
    a statement prepared before (0A000) each time it runs, until the client prepares it
    again (psycopg does after a rollback on that connection)."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        reference_table(conn)
    applied(empty_dsn, history.LEAST)
    with psycopg.connect(empty_dsn, autocommit=True) as worker:
        job = claimed_job(worker)
        assert worker_rows(worker, job) == [19, 19]
        worker.execute("PREPARE by_hand (bigint) AS SELECT * FROM jobs WHERE id = $1")
        applied(empty_dsn, "transitions")
        for _ in range(2):  # each time: the server does not prepare them again by itself
            for q in WORKER_STATEMENTS:
                with pytest.raises(psycopg.errors.FeatureNotSupported, match="cached plan must"):
                    worker.execute(q, (job,), prepare=True)
            with pytest.raises(psycopg.errors.FeatureNotSupported, match="cached plan must"):
                worker.execute("EXECUTE by_hand (%s)", (job,))
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="cached plan must"):
            with worker.transaction():
                worker.execute(WORKER_STATEMENTS[0], (job,), prepare=True)
        # psycopg's rollback deallocates its statements: prepared again, the new row
        assert worker_rows(worker, job) == [23, 23]


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

"""The suite's own database lending (tests/databases.py): a database given back after a test
that wrote only rows is lent again as a fresh clone; after any other change it is dropped."""

from __future__ import annotations

import psycopg
from databases import Databases

from jobctl import lease


def fresh_state(dsn: str) -> dict[str, object]:
    with psycopg.connect(dsn, autocommit=True) as c:
        return {
            "jobs": c.execute("SELECT count(*) FROM jobs").fetchone(),
            "events": c.execute("SELECT count(*) FROM jobctl.events").fetchone(),
            "pages": c.execute(
                "SELECT relpages, reltuples FROM pg_class WHERE oid = 'jobs'::regclass"
            ).fetchone(),
            "statistics": c.execute(
                "SELECT count(*) FROM pg_statistic WHERE starelid = 'jobs'::regclass"
            ).fetchone(),
            "next id": c.execute(
                "INSERT INTO jobs (payload) VALUES ('{}') RETURNING id"
            ).fetchone(),
        }


def test_rows_written_are_emptied_and_the_database_lent_again(server_dsn, template):
    lending = Databases(server_dsn, template)
    try:
        with lending.lent() as first:
            fresh = fresh_state(first)
            with psycopg.connect(first, autocommit=True) as c:
                c.execute("INSERT INTO jobs (payload) SELECT '{}' FROM generate_series(1, 500)")
                worker = lease.Worker(c, "w1", lease_seconds=30)
                worker.fail(worker.claim(), "boom", retry_delay=0)  # a history row
                c.execute("ANALYZE jobs")
                c.execute("SELECT setval('jobctl.pause_events_event_id_seq', 40)")
                left_open = psycopg.connect(first)  # a session the test forgot
        with lending.lent() as second:
            assert second == first
            assert left_open.closed or left_open.broken or _gone(left_open)
            assert fresh_state(second) == fresh
            with psycopg.connect(second) as c:
                assert c.execute(
                    "SELECT nextval('jobctl.pause_events_event_id_seq')"
                ).fetchone() == (1,)
        assert lending.reused == 2
    finally:
        lending.close()


def _gone(conn: psycopg.Connection) -> bool:
    try:
        conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    finally:
        conn.close()
    return False


def test_a_changed_catalog_or_database_is_dropped_not_lent(server_dsn, template):
    lending = Databases(server_dsn, template)
    changes = [
        "ALTER TABLE jobs ADD COLUMN kind text",
        "CREATE INDEX ON jobs (created_at)",
        "GRANT SELECT ON jobs TO PUBLIC",
        "CREATE TEMP TABLE t (x int)",
        "DELETE FROM jobctl.migrations WHERE true",
        "COMMENT ON TABLE jobs IS 'x'",
    ]
    names = []
    try:
        for change in changes:
            with lending.lent() as dsn, psycopg.connect(dsn, autocommit=True) as c:
                names.append(c.info.dbname)
                c.execute(change)
            assert lending.idle == [], change
        with lending.lent() as dsn, psycopg.connect(dsn, autocommit=True) as c:
            names.append(c.info.dbname)
            c.execute(f"ALTER DATABASE {c.info.dbname} SET work_mem = '8MB'")
        assert lending.idle == []
        with lending.lent() as dsn:
            lending.spoil(dsn)
        assert lending.idle == [] and lending.reused == 0
        with psycopg.connect(server_dsn) as admin:
            left = admin.execute(
                "SELECT count(*) FROM pg_database WHERE datname = ANY(%s)", (names,)
            ).fetchone()
        assert left == (0,)  # each dropped
    finally:
        lending.close()

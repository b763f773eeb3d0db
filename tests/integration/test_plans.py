"""The plans of the incident's reads, and the planner settings jobctl's transactions run with.

A server with ``jit = on`` compiles any statement whose plan costs more than
``jit_above_cost`` (and inlines and optimizes it past ``jit_inline_above_cost`` /
``jit_optimize_above_cost``): 0.1-0.5 s on every call of a read that runs in milliseconds.
``stuck`` read its lock holders with a subquery per row, about 24 a row in the planner's
units, so 20,000 processing rows took its plan past 500,000. The holders are now read once per
statement, and jobctl's transactions set ``jit = off`` for themselves.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import psycopg
import pytest
from helpers import add_jobs, claim_all

from jobctl import db
from jobctl.ops import triage
from jobctl.sql import queries

PROCESSING, EXPIRED, DONE = 20_000, 2_000, 20_000


@pytest.fixture
def incident(conn: psycopg.Connection[Any]) -> None:
    """The big incident's shape: 20,000 processing rows, 2,000 of them expired, beside done
    ones; triggers off while loading (the history has nothing to say about it), analyzed."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            """
            INSERT INTO jobs (status, attempts, recovery_policy, reserved_by, reserved_at,
                              heartbeat_at, lease_expires_at, attempt_token, finished_at)
            SELECT CASE WHEN g <= %(p)s THEN 'processing' ELSE 'done' END, 1,
                   CASE WHEN g %% 5 = 0 THEN 'manual' ELSE 'auto' END,
                   CASE WHEN g <= %(p)s THEN 'worker-' || (g %% 40) END,
                   CASE WHEN g <= %(p)s THEN now() - interval '10 minutes' END,
                   CASE WHEN g <= %(p)s THEN now() - interval '1 minute' END,
                   CASE WHEN g <= %(e)s THEN now() - (g || ' milliseconds')::interval
                        WHEN g <= %(p)s THEN now() + interval '1 hour' END,
                   CASE WHEN g <= %(p)s THEN gen_random_uuid() END,
                   CASE WHEN g > %(p)s THEN now() END
            FROM generate_series(1, %(n)s) g
            """,
            {"p": PROCESSING, "e": EXPIRED, "n": PROCESSING + DONE},
        )
    conn.execute("VACUUM ANALYZE jobs")


def _plan(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN (FORMAT JSON) of jobctl's statement ``name`` on the jobs table, as jobctl sends
    it (its parameters bound by the client, under jobctl's search path)."""
    table = db.resolve_table(conn, "jobs")
    statement = queries.query(name, **table.fragments)
    text = psycopg.ClientCursor(conn).mogrify(statement, params)
    with conn.transaction():
        conn.execute("SELECT set_config('search_path', 'pg_catalog, pg_temp', true)")
        (row,) = conn.execute("EXPLAIN (FORMAT JSON) " + text).fetchone().values()
    plan: dict[str, Any] = (json.loads(row) if isinstance(row, str) else row)[0]
    return plan


def _jit_above_cost(conn: psycopg.Connection[Any]) -> float:
    return float(conn.execute("SELECT current_setting('jit_above_cost') AS c").fetchone()["c"])


def test_stuck_on_20000_processing_rows_costs_less_than_jit_compiles(conn, incident):
    """The cost that made the server JIT-compile ``stuck`` on every call (370,000 for this
    shape with the lock holders read per row, 517,000 in a 1M-row table) is now below even
    ``jit_above_cost``."""
    params = {**triage.ExpiredFilter().params(), "limit": None, "no_lease": True}
    cost = _plan(conn, "stuck", params)["Plan"]["Total Cost"]
    assert cost < _jit_above_cost(conn), cost


@pytest.mark.parametrize("soon", [None, dt.timedelta(seconds=30)])
def test_at_risk_on_20000_processing_rows_costs_less_than_jit_compiles(conn, incident, soon):
    """``stuck --expiring`` (and top's refresh) read the lock holders the same way, the
    leases' last third or a window (--expiring-within)."""
    params = {**triage.ExpiredFilter().params(), "limit": None, "soon": soon}
    cost = _plan(conn, "at_risk", params)["Plan"]["Total Cost"]
    assert cost < _jit_above_cost(conn), cost


def test_the_lock_holders_are_read_once_not_per_row(conn, incident):
    """pg_locks is read by one function scan per statement, whatever the number of rows."""
    params = {**triage.ExpiredFilter().params(), "limit": None, "no_lease": True}
    plan = json.dumps(_plan(conn, "stuck", params))
    assert plan.count('"pg_lock_status"') == 1
    assert '"SubPlan' not in plan  # (a subquery per row is a SubPlan of the scan)


def _jit(c: psycopg.Connection[Any]) -> str:
    """The jit setting in force, as pg_settings reports it."""
    row = c.execute("SELECT setting FROM pg_settings WHERE name = 'jit'").fetchone()
    return str(row["setting"])


def test_jit_is_off_in_jobctls_transactions_and_only_there(dsn):
    """Every kind of transaction jobctl opens runs with jit off; the session keeps its own
    setting after (transaction-local, like the timeouts: behind a pooler it is shared)."""
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as c:
        c.execute("SET jit = on")  # the session's own, as a server with jit on gives it
        for opened in (
            lambda: db.transaction(c, settings, read_only=True),
            lambda: db.transaction(c, settings, action="requeued"),
            lambda: db.safe(c),
        ):
            with opened():
                assert _jit(c) == "off"
            assert _jit(c) == "on"
        show = b"SELECT setting FROM pg_catalog.pg_settings WHERE name = 'jit'"
        (row,) = db.pipelined(c, settings, show, {}, action="requeued")
        assert row == {"setting": "off"}
        assert _jit(c) == "on"
        with db.sending(c, settings, show) as send:
            sent = send({})
            sent.count()
            assert sent.rows() == [{"setting": "off"}]
        assert _jit(c) == "on"


def test_a_row_locked_elsewhere_is_named_by_stuck_and_expiring_within(conn, dsn, run):
    """The holders read once still name the session that holds each locked row, in stuck and
    in stuck --expiring-within, and no other row."""
    add_jobs(conn, 4)
    held, other, *_ = claim_all(dsn, 4)
    holder = psycopg.connect(dsn)  # idle in transaction, holding two rows
    holder.execute("SELECT 1 FROM jobs WHERE id = ANY(%s) FOR UPDATE", ([held.id, other.id],))
    try:
        for args in (["stuck"], ["stuck", "--expiring-within", "1m"]):
            found = json.loads(run(*args, "-o", "json").out)
            skipped = {r["id"]: r["skipped"] for r in found if r["skipped"]}
            assert sorted(skipped) == sorted([held.id, other.id]), args
            for reason in skipped.values():
                assert f"locked by pid {holder.info.backend_pid}" in reason
                assert "idle in transaction" in reason
    finally:
        holder.close()

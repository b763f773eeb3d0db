"""Behind PgBouncer in transaction mode: every command, the reclaimer service and the worker
API work, and none leaves anything on the server connections the pool shares.

The pool (tests/conftest.py: ``pgbouncer``) has POOL_SIZE server connections per database,
so consecutive commands, and the checks between them, share server connections.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import POOL_SIZE, add_jobs, claim_all, wait_until

from jobctl import db, lease
from jobctl.db import connection, locks, session
from jobctl.ops.reclaim import batches as reclaim_batches
from jobctl.ops.triage import ExpiredFilter
from jobctl.schema import apply as schema_apply
from jobctl.schema import steps as schema_steps

# what jobctl sets (transaction-locally), read on every server connection of the pool
SETTINGS = (
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "default_transaction_read_only",
    "transaction_read_only",
    "search_path",
)
AUDIT = ("jobctl.actor", "jobctl.action", "jobctl.reason")
# parameters PgBouncer itself sets on a server connection for each client (startup params)
POOLER_TRACKED = ("application_name", "client_encoding", "DateStyle", "TimeZone")

_CURRENT = [f"current_setting('{name}') AS {name}" for name in SETTINGS] + [
    f"current_setting('{name}', true) AS \"{name}\"" for name in AUDIT
]
STATE = f"""
SELECT pg_backend_pid() AS pid, {", ".join(_CURRENT)},
       (SELECT array_agg(name ORDER BY name) FROM pg_settings
        WHERE source = 'session' AND name <> ALL(%(tracked)s)) AS session_settings,
       (SELECT count(*) FROM pg_prepared_statements) AS prepared,
       (SELECT count(*) FROM pg_cursors) AS cursors,
       (SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()
        AND locktype = 'advisory') AS advisory_locks,
       (SELECT count(*) FROM pg_class WHERE relpersistence = 't') AS temp_tables
"""


def defaults(dsn: str) -> dict[str, Any]:
    """The server's defaults for this database: what a fresh direct connection sees."""
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as c:
        row = c.execute(STATE, {"tracked": list(POOLER_TRACKED)}).fetchone()
    assert row is not None
    return clean(row)


def clean(row: dict[str, Any]) -> dict[str, Any]:
    """A state without its pid; an audit setting never set and one reset to '' are alike."""
    state = {k: v for k, v in row.items() if k != "pid"}
    for name in AUDIT:
        state[name] = state[name] or ""
    return state


def pool_state(pooled_dsn: str) -> list[dict[str, Any]]:
    """The state of every server connection of the pool, from separate clients of the pool:
    POOL_SIZE clients each inside a transaction pin every server connection there is."""
    with contextlib.ExitStack() as stack:
        clients = [
            stack.enter_context(
                psycopg.connect(
                    pooled_dsn,
                    row_factory=psycopg.rows.dict_row,
                    prepare_threshold=None,
                    application_name="pool-check",
                )
            )
            for _ in range(POOL_SIZE)
        ]
        rows = [c.execute(STATE, {"tracked": list(POOLER_TRACKED)}).fetchone() for c in clients]
    assert len({r["pid"] for r in rows}) == POOL_SIZE, "every server connection was checked"
    return rows


def assert_pool_clean(dsn: str, pooled_dsn: str, after: str) -> None:
    expected = defaults(dsn)
    for row in pool_state(pooled_dsn):
        assert clean(row) == expected, f"server connection {row['pid']} after {after}"


@pytest.fixture
def pooled_run(run, pooled_dsn: str):
    """The CLI runner, connecting through the pool."""
    return lambda *args: run(*args, dsn=pooled_dsn)


def jobctl(dsn: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "JOBCTL_DSN": dsn, "NO_COLOR": "1", "JOBCTL_ACTOR": "tester@ci"}
    return subprocess.Popen(
        [sys.executable, "-m", "jobctl", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def processing(conn: psycopg.Connection[Any]) -> int:
    return conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'processing'").fetchone()[
        "n"
    ]


# ---------------------------------------------------------------- every command
def test_every_command_through_the_pool_leaves_server_defaults(
    conn, dsn, pooled_dsn, pooled_run, tmp_path: Path
):
    add_jobs(conn, 12, policy="auto")
    add_jobs(conn, 3, policy="manual")
    claim_all(pooled_dsn, 15)  # the worker API through the pool too
    plan = tmp_path / "plan.json"
    commands = [
        ["stuck"],
        ["stuck", "--expiring-within", "1m", "-o", "json"],
        ["summary"],
        ["show", "1"],
        ["history", "1"],
        ["explain", "1"],
        ["metrics"],
        ["schema", "check"],
        ["reclaim", "--dry-run", "--save-plan", str(plan)],
        ["reclaim", "--commit", "--plan", str(plan), "--yes", "--batch-size", "4"],
        ["history", "13"],
        ["requeue", "13", "--reason", "checked by hand", "--yes"],
        ["fail", "1", "--reason", "not safe to retry", "--yes"],
        ["policy", "2", "--manual", "--reason", "look first", "--yes"],
        ["policy", "2", "--auto", "--yes"],
        ["quarantine", "--min-reclaims", "1"],
        ["quarantine", "--min-reclaims", "1", "--commit", "--yes", "--reason", "loop"],
        ["reclaim", "--dry-run"],
        ["reclaim", "--commit", "--yes"],
        ["summary", "--watch", "--every", "0.1s", "--count", "2"],
    ]
    for command in commands:
        result = pooled_run(*command)
        assert result.code in (0, 4), (command, result.err)  # 4: schema check's findings
        assert "Traceback" not in result.err
        assert_pool_clean(dsn, pooled_dsn, " ".join(command))
    assert processing(conn) == 0
    events = conn.execute(
        "SELECT job_id, actor, reason FROM jobctl.events "
        "WHERE (job_id, event) IN (('13', 'requeued'), ('1', 'manually_failed')) "
        "ORDER BY job_id::bigint"
    ).fetchall()
    assert [(e["job_id"], e["actor"], e["reason"]) for e in events] == [
        ("1", "tester@ci", "not safe to retry"),
        ("13", "tester@ci", "checked by hand"),
    ], "the audit settings reached the trigger inside jobctl's own transactions"


def test_reclaim_commit_runs_in_a_row_through_the_pool(conn, dsn, pooled_dsn, pooled_run):
    """Several runs, each of more than ten batches, on the same few server connections (a
    statement psycopg prepared on the first run collided with the second's)."""
    for run_number in range(4):
        add_jobs(conn, 120)
        claim_all(pooled_dsn, 120)
        result = pooled_run("reclaim", "--commit", "--yes", "--batch-size", "10", "-o", "jsonl")
        assert result.code == 0, (run_number, result.err)
        rows = [json.loads(line) for line in result.out.splitlines()]
        assert len(rows) == 120 and all(r["applied"] for r in rows), run_number
        assert processing(conn) == 0
        assert_pool_clean(dsn, pooled_dsn, f"reclaim run {run_number}")
    batches = conn.execute(
        "SELECT count(DISTINCT xmin::text) AS n FROM jobctl.events WHERE event = 'reclaimed'"
    ).fetchone()["n"]
    assert batches >= 4 * 12


def test_many_short_commands_share_the_server_connections(conn, dsn, pooled_dsn, pooled_run):
    add_jobs(conn, 5)
    claim_all(pooled_dsn, 5)
    for i in range(40):
        command = (["stuck"], ["summary"], ["show", "2"], ["reclaim", "--dry-run"])[i % 4]
        result = pooled_run(*command)
        assert result.code == 0, (command, result.err)
    backends = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()["n"]
    assert backends <= POOL_SIZE, "forty commands, at most POOL_SIZE server connections"
    assert_pool_clean(dsn, pooled_dsn, "forty short commands")


def test_schema_apply_through_the_pool(conn, dsn, pooled_dsn, pooled_run):
    """The CONCURRENTLY index build, outside a transaction, sets nothing on the session."""
    conn.execute("DROP INDEX idx_jobs_processing_timeout")
    add_jobs(conn, 3)
    result = pooled_run("schema", "apply", "--yes")
    assert result.code == 0, result.err
    assert "create the reclaim index concurrently" in result.err
    assert_pool_clean(dsn, pooled_dsn, "schema apply")
    assert pooled_run("schema", "check").code == 0


# ---------------------------------------------------------------- the reclaimer service
@pytest.mark.slow
def test_reclaimer_service_through_the_pool(conn, dsn, pooled_dsn):
    service = jobctl(pooled_dsn, "reclaim", "--commit", "--yes", "--every", "0.2s", "-o", "jsonl")
    try:
        for round_number in range(4):  # its one client connection, many batches, rounds apart
            add_jobs(conn, 30)
            claim_all(pooled_dsn, 30)
            wait_until(lambda: processing(conn) == 0, timeout=15, what=f"round {round_number}")
            assert_pool_clean(dsn, pooled_dsn, f"service round {round_number}")
        service.send_signal(signal.SIGTERM)
        out, err = service.communicate(timeout=20)
    finally:
        service.kill()
    assert service.returncode == 0, err
    assert "retrying" not in err and "Traceback" not in err, err
    assert len([line for line in out.splitlines() if json.loads(line)["applied"]]) == 120


def test_reclaim_core_through_the_pool(conn, dsn, pooled_dsn):
    """The core's commit on one pooled connection, batch after batch (the service's loop)."""
    add_jobs(conn, 70)
    claim_all(pooled_dsn, 70)
    s = session.connect(db.Settings(dsn=pooled_dsn, actor="core@ci"))
    with s.conn:
        batches = list(reclaim_batches.commit(s, ExpiredFilter(), batch_size=3, limit=None))
    assert sum(len(b) for b in batches) == 70 and len(batches) == 24
    assert processing(conn) == 0
    assert_pool_clean(dsn, pooled_dsn, "reclaim.commit")


# ---------------------------------------------------------------- the worker API
def test_worker_api_through_the_pool(conn, dsn, pooled_dsn):
    """claim, heartbeat, complete and fail, many times on one pooled connection with psycopg's
    default prepare_threshold: the worker API prepares nothing."""
    add_jobs(conn, 12)
    with psycopg.connect(pooled_dsn, autocommit=True) as wc:
        worker = lease.Worker(wc, "pooled-1", lease_seconds=30)
        for i in range(12):
            job = worker.claim()
            assert job is not None
            for _ in range(3):
                job = worker.heartbeat(job)
            if i % 4 == 3:
                assert worker.fail(job, "boom") == "queued"
            else:
                worker.complete(job)
    assert conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'done') AS done, "
        "count(*) FILTER (WHERE status = 'queued') AS queued FROM jobs"
    ).fetchone() == {"done": 9, "queued": 3}
    assert_pool_clean(dsn, pooled_dsn, "the worker API")


def test_worker_prepares_only_when_asked(conn, dsn):
    """On a direct connection with psycopg's default prepare_threshold: the default worker
    leaves no prepared statement, ``prepare=True`` does (the opt-in for direct connections)."""
    add_jobs(conn, 16)

    def prepared_after_cycles(prepare: bool) -> int:
        with psycopg.connect(dsn, autocommit=True) as wc:
            worker = lease.Worker(wc, "direct", prepare=prepare)
            for _ in range(8):
                job = worker.claim()
                assert job is not None
                worker.complete(worker.heartbeat(job))
            return int(wc.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0])

    assert prepared_after_cycles(False) == 0
    assert prepared_after_cycles(True) > 0


# ---------------------------------------------------------------- errors name the pooler
def test_unsupported_startup_parameter_names_the_pooler(pooled_dsn, run):
    result = run("summary", dsn=f"{pooled_dsn} options='-c statement_timeout=5s'")
    assert result.code == 1
    assert "unsupported startup parameter" in result.err
    assert "connection pooler" in result.err and len(result.err.strip().splitlines()) == 1


# ---------------------------------------------------------------- direct: no session state
def test_no_command_leaves_session_state_on_a_direct_connection(
    conn, dsn, run, monkeypatch, tmp_path: Path
):
    """Every connection jobctl opens is inspected just before it closes: no setting whose
    source is the session, no prepared statement, no open cursor."""
    found: list[tuple[str, dict[str, Any]]] = []
    ours: set[int] = set()
    connect, close = db.connect, psycopg.Connection.close

    def tracked_connect(*args: Any, **kwargs: Any) -> psycopg.Connection[Any]:
        c = connect(*args, **kwargs)
        ours.add(id(c))
        return c

    def inspecting_close(self: psycopg.Connection[Any]) -> None:
        if id(self) in ours and not self.closed and not self.broken:
            ours.discard(id(self))
            with self.cursor(row_factory=psycopg.rows.dict_row) as cur:
                found.append(
                    (current, cur.execute(STATE, {"tracked": list(POOLER_TRACKED)}).fetchone())
                )
        close(self)

    monkeypatch.setattr(db, "connect", tracked_connect)  # db.connect, as the callers call it
    monkeypatch.setattr(connection, "connect", tracked_connect)  # and as db's own modules do
    monkeypatch.setattr(psycopg.Connection, "close", inspecting_close)
    add_jobs(conn, 30)
    claim_all(dsn, 30)
    plan = tmp_path / "plan.json"
    expected = defaults(dsn)
    for command in (
        ["stuck"],
        ["summary"],
        ["show", "1"],
        ["history", "1"],
        ["explain", "1"],
        ["metrics"],
        ["schema", "check"],
        ["reclaim", "--dry-run", "--limit", "5", "--save-plan", str(plan)],
        ["reclaim", "--commit", "--plan", str(plan), "--yes"],
        ["reclaim", "--commit", "--yes", "--batch-size", "2"],  # > 5 batches: no prepare
        ["fail", "1", "--reason", "r", "--yes"],
        ["requeue", "1", "--yes"],
        ["policy", "3", "--manual", "--yes"],
        ["quarantine", "--min-reclaims", "1", "--commit", "--yes"],
    ):
        current = " ".join(command)
        before = len(found)
        result = run(*command)
        assert result.code == 0, (command, result.err)
        assert len(found) > before, f"{current}: its connection was inspected"
    for command, state in found:
        assert clean(state) == expected, command


def test_prepared_statement_error_names_the_pooler(conn):
    """The error a pooler in transaction mode typically causes, raised for real by the server,
    becomes one line naming the likely cause."""
    conn.execute("PREPARE _pg3_0 AS SELECT 1")
    with pytest.raises(psycopg.errors.DuplicatePreparedStatement) as raised:
        conn.execute("PREPARE _pg3_0 AS SELECT 1")
    mapped = db.database_error(raised.value)
    assert mapped.exit_code == 1 and "\n" not in mapped.message
    assert '"_pg3_0" already exists' in mapped.message and "connection pooler" in mapped.message


@pytest.mark.parametrize(
    ("message", "named"),
    [
        ('prepared statement "_pg3_0" does not exist', True),
        ("unsupported startup parameter: options", True),
        ("no more connections allowed (max_client_conn)", True),
        ("query_wait_timeout", True),
        ("server conn crashed?", True),
        ('relation "jobs" does not exist', False),
        ("canceling statement due to statement timeout", False),
    ],
)
def test_pooler_hint(message: str, named: bool):
    assert ("connection pooler" in db.pooler_hint(message)) is named


def test_concurrent_index_build_gives_up_at_the_deadline(conn, dsn):
    """CREATE INDEX CONCURRENTLY takes no session-level lock_timeout: its first lock is tried
    under a transaction-local one (the time left), so a table locked elsewhere still stops it
    at the deadline, leaving nothing behind on the session."""
    conn.execute("DROP INDEX idx_jobs_processing_timeout")
    add_jobs(conn, 3)
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as c:
        steps = [
            s for s in schema_apply.plan_apply(c, "jobs", create=False) if s.outside_transaction
        ]
        assert [s.what for s in steps] == ["create the reclaim index concurrently"]
        with psycopg.connect(dsn) as holder:
            holder.execute("LOCK TABLE jobs IN SHARE UPDATE EXCLUSIVE MODE")
            started = time.monotonic()
            with pytest.raises(locks.DeadlineExceeded):
                schema_steps.apply(c, settings, steps, deadline=dt.timedelta(milliseconds=300))
            assert time.monotonic() - started < 5
        assert c.execute(
            "SELECT count(*) AS n FROM pg_settings WHERE source = 'session'"
        ).fetchone() == {"n": 0}
        assert schema_steps.apply(c, settings, steps) == ["create the reclaim index concurrently"]
        assert c.execute(
            "SELECT count(*) AS n FROM pg_settings WHERE source = 'session'"
        ).fetchone() == {"n": 0}
    assert conn.execute(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = 'idx_jobs_processing_timeout'::regclass"
    ).fetchone() == {"indisvalid": True}

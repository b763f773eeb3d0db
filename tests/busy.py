"""A busy jobs table, as real processes: workers that claim and complete as fast as they can,
timing each statement, and a long report holding the table. Used by the schema-apply tests
and tests/bench/bench_apply.py.

    python tests/busy.py worker DSN TABLE NAME SECONDS   # prints its latencies (JSON)
    python tests/busy.py report DSN TABLE SECONDS        # prints its pid once it holds the
                                                         # table, then when it let go (epoch)
    python tests/busy.py lease DSN TABLE NAME SECONDS    # a lease.Worker: claim, heartbeat,
                                                         # complete or fail (JSON, as worker)

The table may lack the lease columns (a queue before ``jobctl schema apply``), so the workers
run the lease design's claim and completion as such a table allows them: the same statements
without ``lease_expires_at`` and ``attempt_token``.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time

import psycopg
from psycopg import sql

HERE = os.path.abspath(__file__)

PLAIN_QUEUE = """
CREATE TABLE {t} (
    id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'queued',
    attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 5,
    available_at timestamptz NOT NULL DEFAULT now(), reserved_by text,
    reserved_at timestamptz, last_error text, finished_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON {t} (available_at, id) WHERE status = 'queued';
"""

CLAIM = """
WITH target AS (
    SELECT id FROM {t}
    WHERE status = 'queued' AND available_at <= now()
    ORDER BY available_at, id
    FOR UPDATE SKIP LOCKED
    LIMIT 1
)
UPDATE {t} AS j
SET status = 'processing', reserved_by = %(worker)s, reserved_at = now(),
    attempts = j.attempts + 1, updated_at = now()
FROM target
WHERE j.id = target.id
RETURNING j.id
"""

COMPLETE = """
UPDATE {t}
SET status = 'done', reserved_by = NULL, reserved_at = NULL, finished_at = now(),
    updated_at = now()
WHERE id = %(id)s AND status = 'processing' AND reserved_by = %(worker)s
RETURNING id
"""


def make_queue(conn: psycopg.Connection, table: str, queued: int, done: int = 0) -> None:
    """A queue table without the lease columns: ``done`` finished jobs, ``queued`` ready."""
    t = sql.Identifier(table)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {t}").format(t=t))
    conn.execute(sql.SQL(PLAIN_QUEUE).format(t=t))
    conn.execute(
        sql.SQL(
            "INSERT INTO {t} (status, finished_at) "
            "SELECT CASE WHEN g <= %(done)s THEN 'done' ELSE 'queued' END, "
            "CASE WHEN g <= %(done)s THEN now() END FROM generate_series(1, %(n)s) g"
        ).format(t=t),
        {"done": done, "n": done + queued},
    )
    conn.execute(sql.SQL("VACUUM ANALYZE {t}").format(t=t))


def worker(dsn: str, table: str, name: str, seconds: float) -> dict[str, list[float]]:
    """Claim and complete for ``seconds``, or until SIGTERM (``stop``: the test is done with
    the workers before then); every statement's latency, in seconds."""
    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    t = sql.Identifier(table)
    claim, complete = sql.SQL(CLAIM).format(t=t), sql.SQL(COMPLETE).format(t=t)
    latencies: list[float] = []
    at: list[float] = []  # when each statement started (epoch seconds)
    errors: list[str] = []

    def timed(statement: sql.Composed, params: dict) -> tuple | None:
        at.append(time.time())
        started = time.perf_counter()
        try:
            return conn.execute(statement, params).fetchone()
        finally:
            latencies.append(time.perf_counter() - started)

    with psycopg.connect(dsn, autocommit=True) as conn:
        ends = time.monotonic() + seconds
        while time.monotonic() < ends and not stopped:
            try:
                row = timed(claim, {"worker": name})
                if row is None:
                    time.sleep(0.01)
                    continue
                timed(complete, {"id": row[0], "worker": name})
            except psycopg.Error as exc:
                errors.append(str(exc).splitlines()[0])
    return {"latencies": latencies, "at": at, "errors": errors}


def lease_worker(dsn: str, table: str, name: str, seconds: float) -> dict[str, list]:
    """jobctl's worker API (``lease.Worker``) on its own connection, for ``seconds`` or until
    SIGTERM: claim, heartbeat, then complete every other job and fail the rest (a retry while
    attempts remain: each a transition the history records, an event inserted). Every
    statement timed (``ops``: which one; ``failed``: how many fail() calls returned)."""
    from jobctl import lease

    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    out: dict[str, list] = {"latencies": [], "at": [], "ops": [], "errors": [], "failed": []}

    def timed(op: str, call, *args):
        out["at"].append(time.time())
        out["ops"].append(op)
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            out["latencies"].append(time.perf_counter() - started)

    failed = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        worker = lease.Worker(conn, name, table=table)
        ends = time.monotonic() + seconds
        n = 0
        while time.monotonic() < ends and not stopped:
            try:
                job = timed("claim", worker.claim)
                if job is None:
                    time.sleep(0.01)
                    continue
                job = timed("heartbeat", worker.heartbeat, job)
                n += 1
                if n % 2:
                    timed("complete", worker.complete, job)
                else:
                    timed("fail", worker.fail, job, "boom")
                    failed += 1
            except Exception as exc:
                out["errors"].append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    out["failed"] = [failed]
    return out


def report(dsn: str, table: str, seconds: float) -> None:
    """BEGIN; SELECT count(*) FROM the table; then keep the transaction (and its ACCESS SHARE
    lock) open for ``seconds``, running, as a long report does."""
    with psycopg.connect(dsn) as conn:
        conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
        print(conn.info.backend_pid, flush=True)
        conn.execute("SELECT pg_sleep(%s)", (seconds,))
        conn.rollback()
        print(time.time(), flush=True)  # when it let go of the table


def _start(kind: str, dsn: str, table: str, count: int, seconds: float) -> list[subprocess.Popen]:
    """``count`` processes of this module running ``kind`` (worker, lease), each its own."""
    return [
        subprocess.Popen(
            [sys.executable, HERE, kind, dsn, table, f"w{i}", str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]


def start_workers(dsn: str, table: str, count: int, seconds: float) -> list[subprocess.Popen]:
    return _start("worker", dsn, table, count, seconds)


def start_lease_workers(dsn: str, table: str, count: int, seconds: float) -> list[subprocess.Popen]:
    """``count`` lease.Worker processes (lease_worker), each on its own connection."""
    return _start("lease", dsn, table, count, seconds)


def stop(workers: list[subprocess.Popen]) -> None:
    """Tell the workers to finish their current statement and print what they timed."""
    for proc in workers:
        proc.send_signal(signal.SIGTERM)


def collect(workers: list[subprocess.Popen]) -> dict[str, list]:
    """All the workers' latencies and errors, once they have finished."""
    merged: dict[str, list] = {"latencies": [], "at": [], "errors": []}
    for proc in workers:
        out, _ = proc.communicate(timeout=120)
        for key, values in json.loads(out).items():
            merged.setdefault(key, [])
            merged[key] += values
    return merged


def during(result: dict[str, list], start: float, end: float) -> list[float]:
    """The latencies of the statements that started between ``start`` and ``end`` (epoch)."""
    return [
        lat for at, lat in zip(result["at"], result["latencies"], strict=True) if start <= at <= end
    ]


def start_report(dsn: str, table: str, seconds: float) -> tuple[subprocess.Popen, int]:
    """A report process holding the table; returns once it does, with its backend pid."""
    proc = subprocess.Popen(
        [sys.executable, HERE, "report", dsn, table, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def figures(latencies: list[float]) -> dict[str, float]:
    """worst, p99 and median of statement latencies, in milliseconds."""
    ordered = sorted(latencies)
    return {
        "statements": len(ordered),
        "worst_ms": ordered[-1] * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99)] * 1000,
        "median_ms": statistics.median(ordered) * 1000,
    }


if __name__ == "__main__":
    command, dsn, table, *rest = sys.argv[1:]
    if command == "worker":
        print(json.dumps(worker(dsn, table, rest[0], float(rest[1]))))
    elif command == "lease":
        print(json.dumps(lease_worker(dsn, table, rest[0], float(rest[1]))))
    elif command == "report":
        report(dsn, table, float(rest[0]))
    else:
        sys.exit(f"unknown command {command}")

"""Reclaim throughput and its impact on workers.

1. 100k expired rows reclaimed at batch 50, 500, 5000: rows/s of ``jobctl reclaim --commit``
   against the lease design's statement looped in psql (one statement per batch, autocommit).
2. The same reclaim while 8 worker processes claim, heartbeat and complete other jobs: their
   throughput before and during the reclaim, and their worst single-statement wait.

    python tests/bench/bench_reclaim.py
"""

from __future__ import annotations

import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import psycopg
from common import JOBCTL, arguments, bench_dsn, machine, table
from psycopg import sql

from jobctl import db, lease, schema

NAME = "bench_reclaim"
EXPIRED = 100_000
DESIGN_RECLAIM = """
WITH expired AS (
    SELECT id, attempt_token, recovery_policy FROM {t}
    WHERE status = 'processing' AND lease_expires_at < NOW()
    ORDER BY lease_expires_at, id FOR UPDATE SKIP LOCKED LIMIT {n})
UPDATE {t} j
SET status = CASE WHEN expired.recovery_policy = 'auto' AND j.attempts < j.max_attempts
                  THEN 'queued' ELSE 'failed' END,
    available_at = CASE WHEN expired.recovery_policy = 'auto' AND j.attempts < j.max_attempts
                        THEN NOW() ELSE j.available_at END,
    reserved_by = NULL, reserved_at = NULL, heartbeat_at = NULL, lease_expires_at = NULL,
    attempt_token = NULL, reclaim_count = j.reclaim_count + 1,
    last_error = 'lease expired before completion',
    finished_at = CASE WHEN expired.recovery_policy = 'auto' AND j.attempts < j.max_attempts
                       THEN NULL ELSE NOW() END,
    updated_at = NOW()
FROM expired WHERE j.id = expired.id AND j.attempt_token = expired.attempt_token
RETURNING j.id, j.status, j.reclaim_count;
"""


def reset(dsn: str, queued: int = 0) -> None:
    """EXPIRED processing rows with expired leases (+ ``queued`` ready jobs for workers)."""
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(NAME)))
        conn.execute("DELETE FROM jobctl.events WHERE job_table = %s", (f"public.{NAME}",))
        conn.execute("DELETE FROM jobctl.attempts WHERE job_table = %s", (f"public.{NAME}",))
        steps = schema.plan_apply(conn, NAME, create=True)
        schema.apply(conn, settings, steps)
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (status, attempts, recovery_policy, reserved_by, reserved_at, "
                    "lease_expires_at, attempt_token) "
                    "SELECT CASE WHEN g <= %(e)s THEN 'processing' ELSE 'queued' END, "
                    "CASE WHEN g <= %(e)s THEN 1 ELSE 0 END, "
                    "CASE WHEN g %% 5 = 0 THEN 'manual' ELSE 'auto' END, "
                    "CASE WHEN g <= %(e)s THEN 'dead-' || (g %% 8) END, "
                    "CASE WHEN g <= %(e)s THEN now() - interval '5 minutes' END, "
                    "CASE WHEN g <= %(e)s THEN now() - interval '1 minute' "
                    "+ (g || ' microseconds')::interval END, "
                    "CASE WHEN g <= %(e)s THEN gen_random_uuid() END "
                    "FROM generate_series(1, %(n)s) g"
                ).format(sql.Identifier(NAME)),
                {"e": EXPIRED, "n": EXPIRED + queued},
            )
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(NAME)))


def run_jobctl(dsn: str, batch: int) -> float:
    env = {**os.environ, "JOBCTL_DSN": dsn}
    started = time.perf_counter()
    subprocess.run(
        [
            *JOBCTL,
            "--table",
            NAME,
            "reclaim",
            "--commit",
            "--yes",
            "--batch-size",
            str(batch),
            "-o",
            "jsonl",
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def run_psql(dsn: str, batch: int) -> float:
    statement = DESIGN_RECLAIM.format(t=NAME, n=batch)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(statement * (math.ceil(EXPIRED / batch) + 1))
    started = time.perf_counter()
    subprocess.run(
        ["psql", "-X", "-q", "-d", dsn, "-f", script.name], check=True, stdout=subprocess.DEVNULL
    )
    elapsed = time.perf_counter() - started
    os.unlink(script.name)
    return elapsed


def left(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE status = 'processing'").format(
                sql.Identifier(NAME)
            )
        ).fetchone()[0]


def worker(dsn: str, name: str, stop: Any, results: multiprocessing.Queue) -> None:
    """claim, 3 heartbeats, complete, in a loop: (time of each cycle end, worst statement)."""
    cycles = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        w = lease.Worker(conn, name, lease_seconds=60, table=NAME)
        while not stop.is_set():
            t0 = time.perf_counter()
            job = w.claim()
            if job is None:
                break
            steps = [time.perf_counter() - t0]
            for _ in range(3):
                t = time.perf_counter()
                job = w.heartbeat(job)
                steps.append(time.perf_counter() - t)
            t = time.perf_counter()
            w.complete(job)
            steps.append(time.perf_counter() - t)
            cycles.append((time.time(), max(steps)))
    results.put(cycles)


def impact(dsn: str, batch: int, workers: int = 8, baseline_s: float = 5.0) -> dict:
    reset(dsn, queued=200_000)
    results: multiprocessing.Queue = multiprocessing.Queue()
    stop = multiprocessing.Event()
    start = time.time() + 1.0
    procs = [
        multiprocessing.Process(target=worker, args=(dsn, f"w{i}", stop, results))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    time.sleep(1.0 + baseline_s)
    reclaim_start = time.time()
    elapsed = run_jobctl(dsn, batch)
    reclaim_end = time.time()
    stop.set()
    cycles = [c for _ in procs for c in results.get(timeout=30)]
    for p in procs:
        p.join()
    before = [c for c in cycles if start <= c[0] < reclaim_start]
    during = [c for c in cycles if reclaim_start <= c[0] < reclaim_end]
    batches = math.ceil(EXPIRED / batch)
    rate_before = len(before) / (reclaim_start - start)
    rate_during = len(during) / (reclaim_end - reclaim_start)
    return {
        "batch": batch,
        "reclaim s": f"{elapsed:.2f}",
        "one batch ms": f"{elapsed / batches * 1000:.1f}",
        "cycles/s before": f"{rate_before:.0f}",
        "cycles/s during": f"{rate_during:.0f}",
        "drop": f"{(1 - rate_during / rate_before) * 100:.0f} %",
        "worst stmt ms before": f"{max((c[1] for c in before), default=0) * 1000:.1f}",
        "worst stmt ms during": f"{max((c[1] for c in during), default=0) * 1000:.1f}",
        "p50 stmt ms during": f"{statistics.median(c[1] for c in during) * 1000:.1f}"
        if during
        else "",
    }


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--batches", default="50,500,5000")
    parser.add_argument(
        "--queued",
        type=int,
        default=0,
        help="queued rows beside the 100k expired (900000: a 1M-row table)",
    )
    parser.add_argument("--skip-impact", action="store_true", help="throughput only")
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    print(
        f"machine: {machine()}; {EXPIRED:,} expired rows among {EXPIRED + args.queued:,}, "
        "history trigger on"
    )
    throughput = []
    for batch in map(int, args.batches.split(",")):
        reset(dsn, args.queued)
        jobctl_s = run_jobctl(dsn, batch)
        assert left(dsn) == 0
        reset(dsn, args.queued)
        psql_s = run_psql(dsn, batch)
        assert left(dsn) == 0
        throughput.append(
            {
                "batch": batch,
                "jobctl s": f"{jobctl_s:.2f}",
                "psql loop s": f"{psql_s:.2f}",
                "jobctl rows/s": f"{EXPIRED / jobctl_s:,.0f}",
                "psql rows/s": f"{EXPIRED / psql_s:,.0f}",
                "jobctl/psql time": f"{jobctl_s / psql_s:.2f}",
            }
        )
        print(f"  batch {batch} done", file=sys.stderr)
    print(
        table(
            throughput,
            [
                "batch",
                "jobctl s",
                "psql loop s",
                "jobctl rows/s",
                "psql rows/s",
                "jobctl/psql time",
            ],
        )
    )
    if args.skip_impact:
        return
    rows = [impact(dsn, batch) for batch in map(int, args.batches.split(","))]
    print("\nwhile 8 worker processes claim, heartbeat x3 and complete other jobs:")
    print(
        table(
            rows,
            [
                "batch",
                "reclaim s",
                "one batch ms",
                "cycles/s before",
                "cycles/s during",
                "drop",
                "worst stmt ms before",
                "worst stmt ms during",
                "p50 stmt ms during",
            ],
        )
    )


if __name__ == "__main__":
    main()

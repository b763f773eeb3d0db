"""Reclaim throughput and its impact on workers.

1. ``--expired`` rows (100k by default; ``--queued`` more beside them) reclaimed at batch 50,
   500, 5000: the whole process of ``jobctl reclaim --commit --yes`` in each of ``--outputs``
   (``table``, the default output, and ``jsonl``; stdout a pipe) against the floor, the lease
   design's statement looped from a bare psycopg script (``psycopg loop``: one autocommitted
   statement per batch, rows fetched, nothing printed), and with ``--psql`` also looped in
   psql; with ``--pooled-dsn``, jobctl also through a connection pooler (PgBouncer in
   transaction mode) in front of the same server; with ``--baseline-src``, also another jobctl
   source tree (e.g. the previous release) directly. Interleaved, ``--repeat`` times: best and
   median. The table is built once (``--rebuild`` to force) and its expired rows restored
   before every run (an UPDATE with triggers off, then VACUUM).
2. The same reclaim while 8 worker processes claim, heartbeat and complete other jobs: their
   throughput before and during the reclaim, and their worst single-statement wait.

    python tests/bench/bench_reclaim.py
    python tests/bench/bench_reclaim.py --expired 20000 --queued 980000 --skip-impact --repeat 5
    python tests/bench/bench_reclaim.py --skip-impact --repeat 3 \
        --pooled-dsn "host=127.0.0.1 port=6432 user=postgres"
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
from psycopg import conninfo, sql

from jobctl import db, lease
from jobctl.schema import apply as schema_apply
from jobctl.schema import steps as schema_steps

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


def reset(dsn: str, queued: int = 0, expired: int = EXPIRED) -> None:
    """``expired`` processing rows with expired leases (+ ``queued`` ready jobs for workers)."""
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(NAME)))
        steps = schema_apply.plan_apply(conn, NAME, create=True)  # the history too, on a fresh db
        schema_steps.apply(conn, settings, steps)
        conn.execute("DELETE FROM jobctl.events WHERE job_table = %s", (f"public.{NAME}",))
        conn.execute("DELETE FROM jobctl.attempts WHERE job_table = %s", (f"public.{NAME}",))
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
                {"e": expired, "n": expired + queued},
            )
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(NAME)))


def build(dsn: str, expired: int, queued: int, rebuild: bool = False) -> None:
    """The table of ``expired + queued`` rows, built once (ids 1..expired are the expired)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (NAME,)).fetchone()[0]
        if found and not rebuild:
            count = conn.execute(
                sql.SQL("SELECT count(*), max(id) FROM {}").format(sql.Identifier(NAME))
            ).fetchone()
            if tuple(count) == (expired + queued, expired + queued):
                return
    reset(dsn, queued, expired)


def restore(dsn: str, expired: int) -> None:
    """Rows 1..``expired`` processing with an expired lease again, as ``reset`` makes them
    (triggers off), their history deleted, the table vacuumed: each run starts alike."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM jobctl.events WHERE job_table = %s", (f"public.{NAME}",))
        conn.execute("DELETE FROM jobctl.attempts WHERE job_table = %s", (f"public.{NAME}",))
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(
                sql.SQL(
                    "UPDATE {} SET status = 'processing', attempts = 1, reclaim_count = 0, "
                    "reserved_by = 'dead-' || (id %% 8), "
                    "reserved_at = now() - interval '5 minutes', heartbeat_at = NULL, "
                    "lease_expires_at = now() - interval '1 minute' "
                    "+ (id || ' microseconds')::interval, "
                    "attempt_token = gen_random_uuid(), last_error = NULL, finished_at = NULL, "
                    "available_at = now() WHERE id <= %(e)s"
                ).format(sql.Identifier(NAME)),
                {"e": expired},
            )
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(NAME)))
        # the history's deleted rows too: left, they pile up run after run (1.6M dead rows
        # after a few hundred runs) and every later run's trigger inserts into bloated indexes
        conn.execute("VACUUM jobctl.events, jobctl.attempts")


FLOOR = """
import sys, psycopg
dsn, statement, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
with psycopg.connect(dsn, autocommit=True) as conn:
    while len(conn.execute(statement).fetchall()) == batch:
        pass
"""


def timed(
    command: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None
) -> tuple[float, float]:
    """The whole process's wall time and its CPU time (user + system, from wait4: what a
    queue for a core on a loaded machine does not inflate)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status):
        raise subprocess.CalledProcessError(os.waitstatus_to_exitcode(status), command)
    return wall, usage.ru_utime + usage.ru_stime


def run_floor(dsn: str, batch: int) -> tuple[float, float]:
    """The lease design's statement looped from a bare psycopg script (psycopg's defaults)."""
    dsn = conninfo.make_conninfo(dsn, application_name=NAME)
    statement = DESIGN_RECLAIM.format(t=NAME, n=batch)
    return timed([sys.executable, "-c", FLOOR, dsn, statement, str(batch)])


def run_jobctl(
    dsn: str, batch: int, source: str | None = None, out: str = "jsonl"
) -> tuple[float, float]:
    # its own application_name: test runs on a shared server terminate 'jobctl' backends
    env = {**os.environ, "JOBCTL_DSN": conninfo.make_conninfo(dsn, application_name=NAME)}
    if source is not None:  # another jobctl source tree: python -m finds it in the cwd first
        env["PYTHONPATH"] = source
    return timed(
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
            out,
        ],
        env={k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"},
        cwd=source,
    )


def run_psql(dsn: str, batch: int, expired: int = EXPIRED) -> float:
    statement = DESIGN_RECLAIM.format(t=NAME, n=batch)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(statement * (math.ceil(expired / batch) + 1))
    started = time.perf_counter()
    subprocess.run(
        ["psql", "-X", "-q", "-d", dsn, "-f", script.name], check=True, stdout=subprocess.DEVNULL
    )
    elapsed = time.perf_counter() - started
    os.unlink(script.name)
    return elapsed


def conninfo_dbname(dsn: str) -> str:
    return str(conninfo.conninfo_to_dict(dsn)["dbname"])


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
    elapsed, _ = run_jobctl(dsn, batch)
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
    parser.add_argument("--expired", type=int, default=EXPIRED, help="expired rows to reclaim")
    parser.add_argument(
        "--queued",
        type=int,
        default=0,
        help="queued rows beside the expired (--expired 20000 --queued 980000: a 1M-row table)",
    )
    parser.add_argument(
        "--outputs", default="table,jsonl", help="jobctl's -o for each run (table: the default)"
    )
    parser.add_argument("--psql", action="store_true", help="the design's statement in psql too")
    parser.add_argument("--rebuild", action="store_true", help="build the table again")
    parser.add_argument("--skip-impact", action="store_true", help="throughput only")
    parser.add_argument(
        "--pooled-dsn",
        help="a PgBouncer (transaction mode) in front of the same server: jobctl through it too",
    )
    parser.add_argument(
        "--baseline-src",
        action="append",
        help="another jobctl source tree to time directly, e.g. the last release (repeatable; "
        "NAME=PATH labels it NAME)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds per batch")
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    expired = args.expired
    print(
        f"machine: {machine(args.dsn)}; {expired:,} expired rows among {expired + args.queued:,}, "
        "history trigger on"
    )
    build(dsn, expired, args.queued, args.rebuild)
    contenders: dict[str, Any] = {}
    pooled = (
        conninfo.make_conninfo(args.pooled_dsn, dbname=conninfo_dbname(dsn))
        if args.pooled_dsn
        else ""
    )
    for out in args.outputs.split(","):
        contenders[f"jobctl {out}"] = lambda b, o=out: run_jobctl(dsn, b, out=o)
        if pooled:
            contenders[f"jobctl {out} pooled"] = lambda b, o=out: run_jobctl(pooled, b, out=o)
        for source in args.baseline_src or []:  # each a name: "baseline" or NAME=path
            label, _, path = source.rpartition("=")
            contenders[f"{label or 'baseline'} {out}"] = lambda b, o=out, p=path: run_jobctl(
                dsn, b, p, out=o
            )
    contenders["psycopg loop"] = lambda b: run_floor(dsn, b)
    if args.psql:
        contenders["psql loop"] = lambda b: run_psql(dsn, b, expired)
    floor_name = "psycopg loop"
    throughput = []
    for batch in map(int, args.batches.split(",")):
        times: dict[str, list[float]] = {name: [] for name in contenders}
        cpu: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.repeat):
            for name, contender in contenders.items():
                restore(dsn, expired)
                took = contender(batch)
                wall, used = took if isinstance(took, tuple) else (took, math.nan)
                times[name].append(wall)
                cpu[name].append(used)
                assert left(dsn) == 0, name
        floor, floor_median = min(times[floor_name]), statistics.median(times[floor_name])
        row: dict[str, Any] = {"batch": batch}
        for name, values in times.items():
            best, median = min(values), statistics.median(values)
            row[f"{name} s"] = f"{best:.2f}" + (f" ({median:.2f})" if args.repeat > 1 else "")
            row[f"{name} rows/s"] = f"{expired / best:,.0f}"
            row[f"{name} cpu"] = f"{min(cpu[name]):.2f} ({statistics.median(cpu[name]):.2f})"
            if name != floor_name:
                # paired: each round against that round's floor (the two ran back to back, so
                # a burst of load hits both), the median over the rounds
                floors = times[floor_name]
                paired = statistics.median(v / f for v, f in zip(values, floors, strict=True))
                row[f"{name}/floor"] = f"{best / floor:.2f}" + (
                    f" ({median / floor_median:.2f}; paired {paired:.2f})"
                    if args.repeat > 1
                    else ""
                )
        throughput.append(row)
        print(f"  batch {batch} done", file=sys.stderr)
    columns = [
        *(f"{name} s" for name in contenders),
        *(f"{name}/floor" for name in contenders if name != floor_name),
        *(f"{name} cpu" for name in contenders if name != "psql loop"),
    ]
    if args.repeat > 1:
        print(
            f"best of {args.repeat} interleaved rounds (median in brackets); ratios: best to "
            "best (median to median; paired: the median of each round's ratio); the floor: the "
            "design's statement looped from psycopg; cpu: the process's user + system "
            "seconds, best (median)"
        )
    print(table(throughput, ["batch", *columns]))
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

"""What never preparing statements costs on a direct connection (jobctl's choice, so that it
works behind a connection pooler in transaction mode).

1. Reclaim batches (100k expired rows, batch 50): one session whose connection never prepares
   (``prepare_threshold=None``, jobctl's) and one with psycopg's default (5: the batch is
   prepared from its fifth execution) take turns, batch by batch, on the same table.
2. The worker API, one process: a cycle (claim, 3 heartbeats, complete) unprepared
   (``lease.Worker``'s default), then one with ``prepare=True`` (psycopg's default threshold
   on its connection), in turns.

Interleaved at the finest grain, so the shared machine's noise hits both alike; median and
10th percentile of the per-batch and per-cycle times, and the ratio of medians.

    python tests/bench/bench_prepare.py
"""

from __future__ import annotations

import contextlib
import statistics
import time

import psycopg
from bench_reclaim import EXPIRED, NAME, left, reset
from common import arguments, bench_dsn, machine, table

from jobctl import db, lease
from jobctl.db import session
from jobctl.ops.reclaim import batches
from jobctl.ops.triage import ExpiredFilter

UNPREPARED, PREPARED = "unprepared (jobctl)", "prepared (psycopg default)"
ALL = ExpiredFilter()


def reclaim_batches(dsn: str) -> dict[str, list[float]]:
    """Seconds per batch of 50, the two sessions taking turns until nothing is left."""
    times: dict[str, list[float]] = {UNPREPARED: [], PREPARED: []}
    with contextlib.ExitStack() as stack:
        sessions = {}
        for name, threshold in ((UNPREPARED, None), (PREPARED, 5)):
            conn = stack.enter_context(
                psycopg.connect(
                    dsn,
                    autocommit=True,
                    row_factory=psycopg.rows.dict_row,
                    prepare_threshold=threshold,
                )
            )
            settings = db.Settings(dsn=dsn, table=NAME)
            sessions[name] = session.Session(conn, settings, db.resolve_table(conn, NAME))
        done = False
        while not done:
            for name, s in sessions.items():
                started = time.perf_counter()
                rows = [r for b in batches.commit(s, ALL, batch_size=50, limit=50) for r in b]
                if len(rows) < 50:
                    done = True
                    break
                times[name].append(time.perf_counter() - started)
    return times


def worker_cycles(dsn: str, cycles: int) -> dict[str, list[float]]:
    """Seconds per cycle (claim, 3 heartbeats, complete), the two workers taking turns."""
    times: dict[str, list[float]] = {UNPREPARED: [], PREPARED: []}
    with (
        psycopg.connect(dsn, autocommit=True) as c1,
        psycopg.connect(dsn, autocommit=True) as c2,
    ):
        workers = {
            UNPREPARED: lease.Worker(c1, "bench-u", lease_seconds=60, table=NAME),
            PREPARED: lease.Worker(c2, "bench-p", lease_seconds=60, table=NAME, prepare=True),
        }
        for _ in range(cycles):
            for name, worker in workers.items():
                started = time.perf_counter()
                job = worker.claim()
                assert job is not None
                for _ in range(3):
                    job = worker.heartbeat(job)
                worker.complete(job)
                times[name].append(time.perf_counter() - started)
    return times


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{statistics.median(ordered) * 1000:.2f} ({ordered[len(ordered) // 10] * 1000:.2f})"


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=2000, help="worker cycles per variant")
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    print(f"machine: {machine()}")
    reset(dsn)
    batches = reclaim_batches(dsn)
    assert left(dsn) == 0
    reset(dsn, queued=2 * args.cycles + 10)
    cycles = worker_cycles(dsn, args.cycles)
    rows = [
        {
            "statements": name,
            "reclaim batch of 50 ms": summary(batches[name]),
            "batches": len(batches[name]),
            "worker cycle ms": summary(cycles[name]),
            "cycles": len(cycles[name]),
        }
        for name in (UNPREPARED, PREPARED)
    ]
    ratio = statistics.median(batches[UNPREPARED]) / statistics.median(batches[PREPARED])
    cycle_ratio = statistics.median(cycles[UNPREPARED]) / statistics.median(cycles[PREPARED])
    rows[0]["unprepared/prepared"] = f"batch {ratio:.2f}, cycle {cycle_ratio:.2f}"
    print(f"{EXPIRED:,} expired rows; median (10th percentile) per batch and per cycle")
    print(
        table(
            rows,
            [
                "statements",
                "reclaim batch of 50 ms",
                "batches",
                "worker cycle ms",
                "cycles",
                "unprepared/prepared",
            ],
        )
    )


if __name__ == "__main__":
    main()

"""What never preparing statements costs on a direct connection (jobctl's choice, so that it
works behind a connection pooler in transaction mode).

1. ``reclaim.commit`` in-process, 100k expired rows at batch 50 (2,000 batches of one
   statement): a connection with ``prepare_threshold=None`` (jobctl's) against psycopg's
   default (5: the batch statement is prepared from its fifth execution).
2. The worker API: cycles of claim, 3 heartbeats, complete, one process, with every statement
   unprepared (``lease.Worker``) against prepared.

Rounds interleaved; best and median.

    python tests/bench/bench_prepare.py --repeat 3
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import psycopg
from bench_reclaim import EXPIRED, NAME, left, reset
from common import arguments, bench_dsn, machine, table

from jobctl import db, lease, queries, reclaim, session
from jobctl.triage import ExpiredFilter


def reclaim_in_process(dsn: str, prepare_threshold: int | None) -> float:
    settings = db.Settings(dsn=dsn, table=NAME)
    conn = psycopg.connect(
        dsn,
        autocommit=True,
        row_factory=psycopg.rows.dict_row,
        prepare_threshold=prepare_threshold,
    )
    with conn:
        s = session.Session(conn, settings, db.resolve_table(conn, NAME))
        started = time.perf_counter()
        for _ in reclaim.commit(s, ExpiredFilter(), batch_size=50, limit=None):
            pass
        return time.perf_counter() - started


class PreparedWorker(lease.Worker):
    """The worker API with its statements prepared (psycopg's prepare=True)."""

    def _run(self, name: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        cursor = self.conn.cursor(row_factory=psycopg.rows.tuple_row)
        return cursor.execute(queries.query(name, self.table), params, prepare=True).fetchone()


def worker_cycles(dsn: str, prepared: bool, cycles: int) -> float:
    """Seconds per cycle (claim, 3 heartbeats, complete)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        kind = PreparedWorker if prepared else lease.Worker
        worker = kind(conn, "bench", lease_seconds=60, table=NAME)
        started = time.perf_counter()
        for _ in range(cycles):
            job = worker.claim()
            assert job is not None
            for _ in range(3):
                job = worker.heartbeat(job)
            worker.complete(job)
        return (time.perf_counter() - started) / cycles


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=1000, help="worker cycles per round")
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    print(f"machine: {machine()}")
    reclaim_times: dict[str, list[float]] = {"unprepared (jobctl)": [], "prepared (psycopg)": []}
    for _ in range(args.repeat):
        for name, threshold in (("unprepared (jobctl)", None), ("prepared (psycopg)", 5)):
            reset(dsn)
            reclaim_times[name].append(reclaim_in_process(dsn, threshold))
            assert left(dsn) == 0
    reset(dsn, queued=2 * args.repeat * args.cycles + 10)
    cycle_times: dict[str, list[float]] = {"unprepared (jobctl)": [], "prepared (psycopg)": []}
    for _ in range(args.repeat):
        for name, prepared in (("unprepared (jobctl)", False), ("prepared (psycopg)", True)):
            cycle_times[name].append(worker_cycles(dsn, prepared, args.cycles))
    rows = []
    for name in reclaim_times:
        r, c = reclaim_times[name], cycle_times[name]
        rows.append(
            {
                "statements": name,
                "reclaim 100k @50 s": f"{min(r):.2f} ({statistics.median(r):.2f})",
                "rows/s": f"{EXPIRED / min(r):,.0f}",
                "worker cycle ms": f"{min(c) * 1000:.2f} ({statistics.median(c) * 1000:.2f})",
            }
        )
    base_r = min(reclaim_times["prepared (psycopg)"])
    base_c = min(cycle_times["prepared (psycopg)"])
    rows[0]["vs prepared"] = (
        f"reclaim {min(reclaim_times['unprepared (jobctl)']) / base_r:.2f}x, "
        f"cycle {min(cycle_times['unprepared (jobctl)']) / base_c:.2f}x"
    )
    print(f"best of {args.repeat} interleaved rounds (median in brackets)")
    print(
        table(
            rows,
            ["statements", "reclaim 100k @50 s", "rows/s", "worker cycle ms", "vs prepared"],
        )
    )


if __name__ == "__main__":
    main()

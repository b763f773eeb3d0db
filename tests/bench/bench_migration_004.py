"""How long migration 004 (job ids as text) holds its locks on a history of N rows.

A scratch database gets migrations 001-003 and N attempts and N events (as version 2 writes
them), then migration 004 runs, timed: the rewrite of jobctl.attempts and jobctl.events and
their indexes, during which the workers' completions wait (docs/history.md).

    python tests/bench/bench_migration_004.py --rows 1000000
"""

from __future__ import annotations

import time

import psycopg
from common import arguments, machine
from psycopg import conninfo

from jobctl.schema import history

DATABASE = "jobctl_bench_m004"


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    try:
        with psycopg.connect(conninfo.make_conninfo(args.dsn, dbname=DATABASE)) as c:
            c.autocommit = True
            for m in history.migrations():
                if m.version <= 3:
                    c.execute(history.migration_statement(m))
            c.execute(
                "INSERT INTO jobctl.attempts (attempt_token, job_table, job_id, attempt, worker,"
                " claimed_at, heartbeats, last_heartbeat_at, ended_at, outcome, lease,"
                " lease_expires_at, heartbeat_stats, ended_by)"
                " SELECT gen_random_uuid(), 'public.jobs', i, 1, 'worker-' || (i %% 16), now(),"
                " 0, now(), now(), 'completed', interval '60 s', now(), 'late', 'postgres'"
                " FROM generate_series(1, %s) i",
                (args.rows,),
            )
            c.execute(
                "INSERT INTO jobctl.events (job_table, job_id, event, from_status, to_status,"
                " attempt, attempt_token, worker, actor, reason, db_role)"
                " SELECT 'public.jobs', i, 'reclaimed', 'processing', 'queued', 1,"
                " gen_random_uuid(), 'w', 'postgres', 'lease expired before completion',"
                " 'postgres' FROM generate_series(1, %s) i",
                (args.rows,),
            )
            c.execute("VACUUM ANALYZE jobctl.attempts")
            c.execute("VACUUM ANALYZE jobctl.events")
            c.execute("CHECKPOINT")
            size = c.execute(
                "SELECT pg_size_pretty(pg_total_relation_size('jobctl.attempts')"
                " + pg_total_relation_size('jobctl.events'))"
            ).fetchone()[0]
            (m4,) = [m for m in history.migrations() if m.version == 4]
            started = time.perf_counter()
            with c.transaction():
                c.execute(history.migration_statement(m4))
            took = time.perf_counter() - started
        print(f"{args.rows:,} attempts + {args.rows:,} events ({size}): 004 took {took:.2f} s")
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DATABASE}")


if __name__ == "__main__":
    main()

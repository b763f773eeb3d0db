"""jobctl doctor's judging against the number of distinct statements: 5,000 statements that
write the jobs table (claims, heartbeats, completions, sweepers, deletes, each distinct: its own
column), judged as ``doctor`` judges pg_stat_statements' rows (one fingerprint and at most one
parse each), alone and inside the whole ``doctor.collect`` (jobctl's own fingerprints, the
history's checks) on the benchmark database. With ``--rss-server DSN`` (a server with
pg_stat_statements preloaded), also doctor's peak RSS on four statements with a 20 MB comment
each, run for real there in a database of its own, doctor in a process of its own (VmHWM).

    python tests/bench/bench_doctor.py [--statements 5000] [--rss-server DSN]
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import subprocess
import sys
import time

import psycopg
from common import arguments, bench_dsn, machine
from psycopg import conninfo

from jobctl import db
from jobctl.cli import main as cli
from jobctl.db import session
from jobctl.ops import doctor
from jobctl.ops import doctor_statements as judge

TABLE = "doctor_jobs"  # the benchmark database's table of its own (created once)
SHAPES = (
    "WITH target AS (SELECT id FROM jobs WHERE status = $1 AND tenant_{i} = $2 "
    "AND available_at <= now() ORDER BY available_at, id FOR UPDATE SKIP LOCKED LIMIT $3) "
    "UPDATE jobs AS j SET status = $4, reserved_by = $5, reserved_at = now(), "
    "lease_expires_at = now() + $6::interval, attempt_token = $7, attempts = j.attempts + $8 "
    "FROM target WHERE j.id = target.id RETURNING j.id, j.attempt_token, j.attempts",
    "UPDATE jobs SET heartbeat_at = now(), lease_expires_at = now() + $1::interval, "
    "progress_{i} = $2 WHERE id = $3 AND status = $4 AND attempt_token = $5",
    "UPDATE jobs SET status = $1, result_{i} = $2, reserved_by = $3, attempt_token = $4, "
    "finished_at = now() WHERE id = $5",
    "UPDATE jobs SET status = $1, reserved_by = $2, retries_{i} = retries_{i} + $3 "
    "WHERE status = $4 AND reserved_at < now() - interval $5",
    "DELETE FROM jobs WHERE status = $1 AND archived_{i} AND finished_at < now() - $2",
)


def rows(n: int, table: str = "jobs") -> list[dict[str, object]]:
    return [
        {
            "queryid": i,
            "query": SHAPES[i % len(SHAPES)].format(i=i).replace(" jobs", f" {table}"),
            "role": "app",
            "calls": 100,
            "rows": 99,
        }
        for i in range(n)
    ]


RSS_DB = "jobctl_bench_doctor_rss"
PEAK = (
    "import sys\n"
    "from jobctl.cli import main\n"
    "code = main.main(sys.argv[1:])\n"
    "peak = [x for x in open('/proc/self/status') if x.startswith('VmHWM:')]\n"
    "sys.stderr.write(f'peak_rss_kb={peak[0].split()[1]} exit={code}')\n"
)


def peak_rss(server: str, comment_chars: int = 20_000_000) -> float:
    """doctor's peak RSS (MB) on four statements with a ``comment_chars`` comment each."""
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {RSS_DB}")
        admin.execute(f"CREATE DATABASE {RSS_DB}")
    dsn = conninfo.make_conninfo(server, dbname=RSS_DB)
    cli.main(["--dsn", dsn, "schema", "apply", "--create", "--yes"])
    comment = "/* " + "x" * comment_chars + " */"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        c.execute("INSERT INTO jobs (recovery_policy) VALUES ('auto')")
        for column in ("status", "attempts", "available_at", "reserved_by"):
            c.execute(f"UPDATE jobs SET {column} = {column} WHERE id = 1 {comment}")
    done = subprocess.run(
        [sys.executable, "-c", PEAK, "--dsn", dsn, "doctor", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(done.stderr.rsplit("peak_rss_kb=", 1)[1].split()[0]) / 1024


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--statements", type=int, default=5000)
    parser.add_argument("--rss-server", help="a server with pg_stat_statements preloaded")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    statements = rows(args.statements)
    table = judge.Table("jobs", "public", {})
    alone = []
    for _ in range(args.runs):
        started = time.perf_counter()
        found, _, judged = doctor.findings(statements, table, set())
        alone.append(time.perf_counter() - started)
    assert judged == args.statements
    dsn = bench_dsn(args.dsn)
    cli.main(["--dsn", dsn, "--table", TABLE, "schema", "apply", "--create", "--yes"])
    whole = []
    on_table = rows(args.statements, TABLE)
    s = session.connect(db.Settings(dsn=dsn, table=TABLE))
    with s.conn:
        for _ in range(args.runs):
            started = time.perf_counter()
            with s.transaction(read_only=True):
                doctor.collect(s, window=dt.timedelta(days=7), statements=on_table)
            whole.append(time.perf_counter() - started)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"load average {load}; {args.statements} distinct statements, {len(found)} "
        f"findings; median of {args.runs}:\n"
        f"  judged alone (fingerprint + parse + judge): {statistics.median(alone):.3f} s "
        f"({statistics.median(alone) / args.statements * 1e6:.0f} us each)\n"
        f"  doctor.collect with them (own fingerprints, history checks): "
        f"{statistics.median(whole):.3f} s"
    )
    if args.rss_server:
        print(
            "  peak RSS of doctor, 4 statements with a 20 MB comment each: "
            f"{peak_rss(args.rss_server):.0f} MB"
        )


if __name__ == "__main__":
    main()

"""How long the workers wait during ``jobctl schema apply`` on a busy table.

The issue's scenario: a 300k-row queue without the lease columns, 3 worker processes claiming
and completing as fast as they can (timing every statement), and a 6-second report holding
the table (``BEGIN; SELECT count(*) ...; pg_sleep(6)``). Three variants, interleaved, each on
a freshly built table:

* ``floor``: the workers and the report, no apply: what the workers see anyway;
* ``one 2 s try``: the first step as jobctl did it before (ALTER TABLE with lock_timeout 2s,
  the global default), retried by hand after a second until it passes;
* ``jobctl schema apply``: the whole apply, short tries with backoff.

For each: the worst, p99 and median worker statement latency while the apply ran (for the
floor: the same window after the report started), the apply's duration, and how long after the
report let go of the table it finished.

With ``--remove``, the same for ``jobctl schema remove --history --columns`` on the table
after an apply (the floor is then the applied table's), against the same report.

    python tests/bench/bench_apply.py [--runs 3] [--rows 300000] [--report-seconds 6] [--remove]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import psycopg
from common import JOBCTL, arguments, machine, table
from psycopg import conninfo, sql

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import busy

NAME = "bench_apply"
BENCH_DB = "jobctl_bench_apply"  # its own: a long transaction elsewhere would hold up its index
WORKERS = 3

ALTER = """
ALTER TABLE {t}
    ADD COLUMN IF NOT EXISTS attempt_token uuid,
    ADD COLUMN IF NOT EXISTS lease_expires_at timestamptz,
    ADD COLUMN IF NOT EXISTS heartbeat_at timestamptz,
    ADD COLUMN IF NOT EXISTS recovery_policy text NOT NULL DEFAULT 'auto',
    ADD COLUMN IF NOT EXISTS reclaim_count integer NOT NULL DEFAULT 0
"""


def one_long_try(dsn: str) -> None:
    """The first step as before: one transaction, lock_timeout 2s; again a second later."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            try:
                with conn.transaction():
                    conn.execute("SELECT set_config('lock_timeout', '2s', true)")
                    conn.execute(sql.SQL(ALTER).format(t=sql.Identifier(NAME)))
                return
            except psycopg.errors.LockNotAvailable:
                time.sleep(1)


def jobctl(dsn: str, *args: str) -> str:
    done = subprocess.run(
        [*JOBCTL, "--dsn", dsn, "--table", NAME, "schema", *args, "--yes"],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def run(dsn: str, variant: str, rows: int, report_seconds: float, removing: bool = False) -> dict:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS jobctl CASCADE")
        busy.make_queue(conn, NAME, queued=rows // 2, done=rows - rows // 2)
    if removing:
        jobctl(dsn, "apply")
    workers = busy.start_workers(dsn, NAME, WORKERS, seconds=report_seconds + 6)
    time.sleep(1.5)  # the workers are up and claiming
    report, _ = busy.start_report(dsn, NAME, report_seconds)
    started = time.time()
    stderr = ""
    if variant == "floor":
        time.sleep(report_seconds)
    elif variant == "one 2 s try":
        one_long_try(dsn)
    elif variant == "jobctl schema remove":
        stderr = jobctl(dsn, "remove", "--history", "--columns")
    else:
        stderr = jobctl(dsn, "apply")
    ended = time.time()
    out, _ = report.communicate(timeout=60)
    released = float(out.split()[-1])
    result = busy.collect(workers)
    assert not result["errors"], result["errors"][:3]
    figures = busy.figures(busy.during(result, started, ended))
    return {
        **figures,
        "apply_s": ended - started,
        "after_report_s": ended - released,
        "stderr": stderr,
    }


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.set_defaults(runs=3)
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--report-seconds", type=float, default=6.0)
    parser.add_argument("--remove", action="store_true", help="Measure schema remove instead.")
    args = parser.parse_args()
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {BENCH_DB}")
    dsn = conninfo.make_conninfo(args.dsn, dbname=BENCH_DB)
    variants = (
        ["floor", "jobctl schema remove"]
        if args.remove
        else ["floor", "one 2 s try", "jobctl schema apply"]
    )
    results: dict[str, list[dict]] = {v: [] for v in variants}
    print(f"# {machine()}, load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    for n in range(args.runs):
        for variant in variants:  # interleaved, so drift hits them all alike
            results[variant].append(run(dsn, variant, args.rows, args.report_seconds, args.remove))
            print(f"  run {n + 1} {variant}: done", file=sys.stderr)
    rows = []
    for variant, runs in results.items():
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "stderr"}
        rows.append(
            {
                "variant": variant,
                "worst ms (best run / median)": f"{min(r['worst_ms'] for r in runs):.0f} / "
                f"{median['worst_ms']:.0f}",
                "worst ms (all runs)": ", ".join(f"{r['worst_ms']:.0f}" for r in runs),
                "p99 ms": f"{median['p99_ms']:.1f}",
                "median ms": f"{median['median_ms']:.1f}",
                "statements": f"{median['statements']:.0f}",
                "apply s": "" if variant == "floor" else f"{median['apply_s']:.2f}",
                "done s after the report": ""
                if variant == "floor"
                else f"{median['after_report_s']:.2f}",
            }
        )
    print(
        f"{args.rows:,} rows, {WORKERS} workers, a {args.report_seconds:g} s report, "
        f"{args.runs} runs interleaved (medians; load average now {os.getloadavg()[0]:.1f})"
    )
    print(table(rows, list(rows[0])))
    floor = statistics.median(r["worst_ms"] for r in results["floor"])
    for variant in variants[1:]:
        worst = statistics.median(r["worst_ms"] for r in results[variant])
        print(f"{variant}: worst worker statement {worst / floor:.1f}x the floor's")
    print(f"\nstderr of the last {variants[-1]}:")
    print(results[variants[-1]][-1]["stderr"], end="")


if __name__ == "__main__":
    main()

"""The incident's reads against the JIT thresholds: each plan's cost, and EXPLAIN ANALYZE.

A server with ``jit = on`` compiles a statement whose plan costs more than ``jit_above_cost``
(100,000), and inlines and optimizes it past ``jit_inline_above_cost`` and
``jit_optimize_above_cost`` (500,000). This prints, for ``stuck`` and ``stuck
--expiring-within`` (``at_risk``) on 1M- and 10M-row tables with 20,000 processing rows, the
plan's total cost, the rows it returned, its execution time (best of ``--runs``) and what JIT
did, as EXPLAIN (ANALYZE, FORMAT JSON) reports them, run outside jobctl's transaction (the
server's own jit setting: what the statement costs without jobctl's ``jit = off``).

    python tests/bench/bench_plans.py --baseline-src before=PATH
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys

import psycopg
from common import arguments, bench_dsn, build_table, literal_sql, machine

from jobctl.ops import triage

TABLES = {  # name: (rows, processing, expired)
    "bench_1m": (1_000_000, 20_000, 2_000),
    "bench_1m_20000_expired": (1_000_000, 20_000, 20_000),
    "bench_10m": (10_000_000, 20_000, 2_000),
}


def measure(dsn: str, runs: int, tables: list[str]) -> list[str]:
    """One line per table and statement, for the jobctl this process imports."""
    lines = []
    for table in tables:
        for name in ("stuck", "at_risk"):
            where = triage.ExpiredFilter().params()
            params = (
                {**where, "limit": 100_000, "no_lease": True}
                if name == "stuck"
                else {**where, "limit": 100_000, "soon": dt.timedelta(seconds=30)}
            )
            statement = literal_sql(dsn, name, table, params)
            with psycopg.connect(dsn) as c:
                c.execute("SET search_path = pg_catalog, pg_temp")
                plans = [
                    c.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement).fetchone()[0][0]
                    for _ in range(runs)
                ]
            plan = min(plans, key=lambda p: p["Execution Time"])
            jit = plan.get("JIT")
            said = (
                f"JIT {jit['Functions']} functions, {jit['Timing']['Total']:.0f} ms"
                if jit
                else "no JIT"
            )
            lines.append(
                f"| {table} | {name} | {plan['Plan']['Total Cost']:,.0f} | "
                f"{plan['Plan']['Actual Rows']:,} | {plan['Execution Time']:.1f} | {said} |"
            )
    return lines


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument(
        "--baseline-src",
        action="append",
        default=[],
        help="another jobctl source tree to measure too, as NAME=PATH (repeatable)",
    )
    parser.add_argument("--only", action="store_true", help=argparse.SUPPRESS)  # one tree's rows
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    tables = args.tables.split(",")
    if args.only:
        print("\n".join(measure(dsn, args.runs, tables)))
        return
    print(f"machine: {machine(args.dsn)}; best of {args.runs} by execution time")
    for table in tables:
        build_table(dsn, table, *TABLES[table])
    print("| tree | table | statement | cost | rows | execution ms | JIT |")
    print("|---|---|---|---|---|---|---|")
    only = ["--only", "--tables", args.tables]
    for label, path in [("this", ""), *(b.split("=", 1) for b in args.baseline_src)]:
        env = {**os.environ, "PYTHONPATH": path} if path else dict(os.environ)
        found = subprocess.run(
            [sys.executable, __file__, "--dsn", args.dsn, "--runs", str(args.runs), *only],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for line in found.splitlines():
            print(f"| {label} {line}")


if __name__ == "__main__":
    main()

"""Triage at scale: stuck, summary and show on 100k / 1M / 10M-row tables.

Each command is timed as a whole process against (a) a bare Python script that connects with
psycopg and runs the same SQL (the floor for any Python tool) and (b) psql -c with the same
SQL. Also checks that the stuck query uses the reclaim index.

    python tests/bench/bench_triage.py --sizes 100k,1m,10m
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys

import psycopg
from common import JOBCTL, arguments, bench_dsn, build_table, compare, literal_sql, machine, table

from jobctl.ops import triage

SIZES = {"100k": 100_000, "1m": 1_000_000, "10m": 10_000_000}
PROCESSING, EXPIRED = 20_000, 2_000

BARE = """
import json, sys, psycopg
with psycopg.connect(sys.argv[1]) as conn:
    for statement in sys.argv[2:]:
        cursor = conn.execute(statement)
        rows = cursor.fetchall() if cursor.description else []
        names = [d.name for d in cursor.description or []]
        print(json.dumps([dict(zip(names, r)) for r in rows], default=str))
"""


def statements(dsn: str, name: str, job_id: int) -> dict[str, list[str]]:
    """The SQL each jobctl command runs, parameters inlined (the same text jobctl sends)."""
    where = triage.ExpiredFilter().params()
    every = triage.EVERY.params()  # no --kind, --queue, --error
    soon = dt.timedelta(seconds=30)
    with psycopg.connect(dsn) as conn:
        oid = conn.execute("SELECT %s::regclass::oid::int", (name,)).fetchone()[0]
    big = triage.EXACT_COUNT_LIMIT <= SIZES.get(name.removeprefix("bench_"), 0)
    status = ["summary_status_live", "summary_status_estimate"] if big else ["summary_status"]
    return {
        "stuck": [literal_sql(dsn, "stuck", name, {**where, "limit": 100_000, "no_lease": True})],
        "summary": [
            literal_sql(dsn, q, name, {"oid": oid, "status_column": "status", **every})
            for q in ["table_size_estimate", *status]
        ]
        + [
            literal_sql(dsn, "summary_processing", name, {"soon": soon, **every}),
            literal_sql(dsn, "summary_workers", name, {"soon": soon, **every}),
        ],
        "show": [
            literal_sql(dsn, "job_row", name, {"id": job_id}),
            literal_sql(
                dsn,
                "job_events",
                name,
                {"job_table": f"public.{name}", "id": job_id, "limit": 10, "cut": None},
                **triage.shown_texts("e", "worker", "actor", "reason"),
            ),
        ],
    }


def uses_reclaim_index(dsn: str, stuck_sql: str, name: str) -> bool:
    with psycopg.connect(dsn) as conn:
        plan = json.dumps(conn.execute("EXPLAIN (FORMAT JSON) " + stuck_sql).fetchone()[0])
    return f"idx_{name}_processing_timeout" in plan


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100k,1m,10m")
    parser.add_argument("--commands", default="stuck,summary,show", help="which to time")
    parser.add_argument(
        "--baseline-src",
        action="append",
        default=[],
        help="another jobctl source tree to time too, as NAME=PATH (repeatable)",
    )
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    baselines = dict(b.split("=", 1) for b in args.baseline_src)
    in_tree = {b: ["env", "-C", p, f"PYTHONPATH={p}", *JOBCTL] for b, p in baselines.items()}
    print(
        f"machine: {machine(args.dsn)}; {args.runs} runs each, "
        "median wall time of the whole process"
    )
    results = []
    for label in args.sizes.split(","):
        name = f"bench_{label}"
        build_table(dsn, name, SIZES[label], PROCESSING, EXPIRED)
        job_id = PROCESSING // 2
        sql_of = statements(dsn, name, job_id)
        env = {**os.environ, "JOBCTL_DSN": dsn, "NO_COLOR": "1"}
        for command, args_ in (
            ("stuck", ["stuck", "-o", "json", "--limit", "100000"]),
            ("summary", ["summary", "-o", "json"]),
            ("show", ["show", str(job_id), "-o", "json"]),
        ):
            if command not in args.commands.split(","):
                continue
            medians = compare(
                {
                    "jobctl": [*JOBCTL, "--table", name, *args_],
                    **{  # python -m finds jobctl in the cwd first: run from the tree itself
                        label: [*in_tree[label], "--table", name, *args_]
                        for label, path in baselines.items()
                    },
                    "psycopg": [sys.executable, "-c", BARE, dsn, *sql_of[command]],
                    "psql": [
                        "psql",
                        "-X",
                        "-q",
                        "-A",
                        "-t",
                        "-d",
                        dsn,
                        *[a for s in sql_of[command] for a in ("-c", s)],
                    ],
                },
                args.runs,
                env,
            )
            results.append(
                {
                    "rows": label,
                    "command": command,
                    **{f"{b} s": f"{medians[b]:.3f}" for b in baselines},
                    **{f"{b}/psycopg": f"{medians[b] / medians['psycopg']:.2f}" for b in baselines},
                    "jobctl s": f"{medians['jobctl']:.3f}",
                    "psycopg s": f"{medians['psycopg']:.3f}",
                    "psql s": f"{medians['psql']:.3f}",
                    "jobctl/psycopg": f"{medians['jobctl'] / medians['psycopg']:.2f}",
                    "jobctl/psql": f"{medians['jobctl'] / medians['psql']:.2f}",
                    "_jobctl": medians["jobctl"],
                }
            )
        print(
            f"  {name}: stuck uses the reclaim index: "
            f"{uses_reclaim_index(dsn, sql_of['stuck'][0], name)}",
            file=sys.stderr,
        )
    print(
        table(
            results,
            [
                "rows",
                "command",
                "jobctl s",
                *(f"{b} s" for b in baselines),
                "psycopg s",
                "psql s",
                "jobctl/psycopg",
                *(f"{b}/psycopg" for b in baselines),
                "jobctl/psql",
            ],
        )
    )
    labels = args.sizes.split(",")
    if len(labels) > 1:
        first, last = labels[0], labels[-1]
        by = {(r["rows"], r["command"]): r["_jobctl"] for r in results}
        for command in args.commands.split(","):
            ratio = by[(last, command)] / by[(first, command)]
            print(f"{command}: {last}/{first} wall-time ratio {ratio:.2f}")


if __name__ == "__main__":
    main()

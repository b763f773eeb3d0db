"""The reads an incident needs, on 1M and 10M rows: their cost should follow the incident, not
the table (docs/reference/performance.md, "Awaiting review without a scan").

Two tables in one scratch database (``JOBCTL_BENCH_DB``, default ``jobctl_bench``), the same
incident in each: 20,000 processing (2,000 of them expired), 20,000 queued, and ``--parked``
jobs (200) parked by a real ``jobctl reclaim --commit`` (so that the history holds their
reclaims as it would), the rest done. Then ``metrics``, ``review``, ``summary`` and ``report
--since 1h`` run as real processes on each table, interleaved round after round; printed per
command: the minimum and median of the rounds on each size and the 10M/1M ratio of the
minimums. With ``--before DIR`` the same commands also run with the jobctl package in DIR
(``git archive main jobctl | tar -x -C DIR``), interleaved with this checkout's.

Then each statement that reads "awaits a human", planned and run on the server alone
(``EXPLAIN (ANALYZE, FORMAT JSON)``: its execution time and whether it scans the table).
Last, what history migration 008's partial index costs where it is written (the inserts into
jobctl.events: a worker's failure, a reclaim; in one transaction, so that commits do not
drown it) and its build on a history of ten times as many events. The
server's ``jit`` settings are printed: the figures hold for them only.

    python tests/bench/bench_read_scans.py --runs 3 [--before /tmp/before] [--drop]
    python tests/bench/bench_read_scans.py --sizes 1M --statements-only --stale 10000,100000

``--stale N,...``: what the history's stale reclaims cost "awaits a human" (``review_count``,
``EXPLAIN ANALYZE`` with ``jit = off`` as jobctl runs it) on the first size's table: N
reclaims to the park status added to the history, of jobs a person acted on since (a requeue
recorded after each), of jobs deleted since (no row, nothing recorded) and of jobs changed
since with nothing recorded (their rows no longer parked), each kind on its own, then
deleted again.

Building the 10M table takes minutes and about 1.5 GB; ``--drop`` drops both tables after.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import psycopg
from common import JOBCTL, arguments, bench_dsn, build_table, literal_sql, machine, samples
from psycopg import sql
from tabulate import tabulate

from jobctl.ops import triage
from jobctl.sql import queries

SIZES = {"1M": ("scan_1m", 1_000_000), "10M": ("scan_10m", 10_000_000)}
PROCESSING, EXPIRED, QUEUED = 20_000, 2_000, 20_000
COMMANDS = {
    "metrics": ["metrics"],
    "review": ["review", "-o", "json"],
    "summary": ["summary", "-o", "json"],
    "report": ["report", "--since", "1h", "-o", "json"],
}
PARKER = "parked-by-bench"  # the worker whose expired jobs the bench parks


def apply_schema(dsn: str, name: str, jobctl: list[str], env: dict[str, str]) -> None:
    """schema apply on the table: this checkout's history migrations (008's index)."""
    subprocess.run(
        [*jobctl, "--dsn", dsn, "--table", name, "schema", "apply", "--yes"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def park(dsn: str, name: str, parked: int, env: dict[str, str]) -> None:
    """``parked`` done jobs made expired manual claims of PARKER, then parked by jobctl's
    reclaim of that worker alone (the incident's own expired leases are left as they are);
    kept between runs."""
    table = sql.Identifier(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        waiting = conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {} WHERE status = 'failed' "
                "AND last_error = 'lease expired before completion'"
            ).format(table)
        ).fetchone()[0]
        if waiting == parked:
            return
        conn.execute(
            sql.SQL(
                """UPDATE {t} SET status = 'processing', recovery_policy = 'manual',
                   finished_at = NULL, reserved_by = %(w)s, reserved_at = now() - interval '1h',
                   attempt_token = gen_random_uuid(),
                   lease_expires_at = now() - interval '1 minute'
                   WHERE id > (SELECT max(id) FROM {t}) - %(n)s"""
            ).format(t=table),
            {"w": PARKER, "n": parked},
        )
    subprocess.run(
        [
            *JOBCTL,
            "--dsn",
            dsn,
            "--table",
            name,
            "reclaim",
            "--commit",
            "--yes",
            "--worker",
            PARKER,
            "--batch-size",
            "500",
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
        conn.execute("VACUUM ANALYZE jobctl.events")


def statement_times(dsn: str, name: str) -> list[dict[str, object]]:
    """Each statement that reads "awaits a human", on the server alone: its execution time
    (EXPLAIN ANALYZE) and whether its plan scans the jobs table."""
    every = {"kinds": None, "queues": None, "error": None, "cut": triage.DISPLAY_CHARS}
    review = {
        **every,
        "policy": None,
        "worker": None,
        "since": None,
        "older_than": None,
        "limit": 1000,
        "job_table": f"public.{name}",
        "cut": triage.DISPLAY_CHARS,  # the texts as review shows them
    }
    worker_key = sql.SQL("j.{}::pg_catalog.text").format(sql.Identifier("reserved_by"))
    statements = {
        "review_count": literal_sql(dsn, "review_count", name, every),
        "review": literal_sql(dsn, "review", name, review),
        "report_review": literal_sql(dsn, "report_review", name, every),
        "summary_groups (--by worker)": literal_sql(
            dsn,
            "summary_groups",
            name,
            {**every, "soon": "30s", "limit": 1000, "cut": triage.DISPLAY_CHARS},
            group_key=worker_key,
            shown_group=queries.query("display_text", text=sql.Identifier("g", "grp")),
        ),
        "review_count_scan (summary --exact)": literal_sql(dsn, "review_count_scan", name, every),
    }
    soon = {**every, "soon": "30s"}
    for other in ("summary_status_live", "summary_processing", "summary_workers", "metrics_leases"):
        statements[other] = literal_sql(dsn, other, name, soon)
    statements["queue_ready"] = literal_sql(dsn, "queue_ready", name, every)
    found = []
    with psycopg.connect(dsn) as conn:
        for label, text in statements.items():
            times = []
            for _ in range(3):
                ((plan,),) = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {text}").fetchall()
                times.append(plan[0]["Execution Time"])
            scans = "Seq Scan" in json.dumps(plan) and f'"Relation Name": "{name}"' in json.dumps(
                [n for n in _nodes(plan) if n.get("Node Type") == "Seq Scan"]
            )
            found.append(
                {
                    "statement": label,
                    "ms (min of 3)": f"{min(times):.1f}",
                    "seq scan of the table": "yes" if scans else "no",
                }
            )
    return found


def event_costs(dsn: str, events: int, rounds: int) -> list[dict[str, object]]:
    """What history migration 008's partial index costs where it is written: a copy of
    jobctl.events (its columns and indexes, no rows) into which ``events`` events are inserted
    one statement each, with and without the index, interleaved: a worker's failure
    (event 'failed': the predicate evaluated, no entry) and a reclaim (an entry); then the
    index built on ten times ``events`` rows already there (what the migration's build holds the
    history's inserts for)."""
    found = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_events_copy")
        conn.execute("CREATE TABLE bench_events_copy (LIKE jobctl.events INCLUDING ALL)")
        insert = (
            "INSERT INTO bench_events_copy (job_table, job_id, event, from_status, to_status, "
            "attempt, worker, actor, reason) VALUES ('public.jobs', %s, %s, 'processing', "
            "'failed', 1, 'worker-1', 'w', 'boom')"
        )
        times: dict[tuple[str, bool], list[float]] = {}
        for _ in range(rounds):
            for indexed in (False, True):
                conn.execute("DROP INDEX IF EXISTS bench_events_copy_reclaimed")
                if indexed:
                    conn.execute(
                        "CREATE INDEX bench_events_copy_reclaimed ON bench_events_copy "
                        "(job_table, to_status, job_id) INCLUDE (at) WHERE event = 'reclaimed'"
                    )
                for event in ("failed", "reclaimed"):
                    conn.execute("TRUNCATE bench_events_copy")
                    started = time.perf_counter()
                    with conn.transaction(), conn.pipeline():  # the index's cost, not fsync's
                        for i in range(events):
                            conn.execute(insert, (str(i), event))
                    times.setdefault((event, indexed), []).append(time.perf_counter() - started)
        for event in ("failed", "reclaimed"):
            bare, indexed = min(times[(event, False)]), min(times[(event, True)])
            found.append(
                {
                    "insert": f"{events:,} '{event}' events, one statement each",
                    "without the index s": f"{bare:.3f}",
                    "with it s": f"{indexed:.3f}",
                    "ratio": f"{indexed / bare:.3f}",
                }
            )
        conn.execute("DROP INDEX IF EXISTS bench_events_copy_reclaimed")
        conn.execute("TRUNCATE bench_events_copy")
        conn.execute(
            "INSERT INTO bench_events_copy (job_table, job_id, event, from_status, to_status) "
            "SELECT 'public.jobs', g::text, CASE WHEN g %% 10 = 0 THEN 'reclaimed' ELSE "
            "'failed' END, 'processing', 'failed' FROM generate_series(1, %s) g",
            (events * 10,),
        )
        conn.execute("VACUUM ANALYZE bench_events_copy")
        started = time.perf_counter()
        conn.execute(
            "CREATE INDEX bench_events_copy_reclaimed ON bench_events_copy "
            "(job_table, to_status, job_id) INCLUDE (at) WHERE event = 'reclaimed'"
        )
        found.append(
            {
                "insert": f"the index built on {events * 10:,} events (a tenth reclaims)",
                "without the index s": "",
                "with it s": f"{time.perf_counter() - started:.3f}",
                "ratio": "",
            }
        )
        conn.execute("DROP TABLE bench_events_copy")
    return found


STALE = "stale-bench"  # the reason of the events --stale adds, by which they are deleted
STALE_KINDS = {
    # the reclaim's job, and what the history holds after it
    "acted on: a requeue recorded after": (100_000, True),
    "deleted since: no row, nothing recorded": (20_000_000, False),
    "changed since, nothing recorded: the row not parked": (100_000, False),
}


def stale_costs(dsn: str, name: str, counts: list[int]) -> list[dict[str, object]]:
    """``review_count`` with N stale reclaims of each kind in the history (STALE_KINDS)."""
    every = {"kinds": None, "queues": None, "error": None}
    statement = literal_sql(dsn, "review_count", name, every)
    table = f"public.{name}"

    def timed(conn: psycopg.Connection) -> tuple[float, str]:
        conn.execute("ANALYZE jobctl.events")
        times, plan = [], None
        for _ in range(3):
            ((plan,),) = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}").fetchall()
            times.append(plan[0]["Execution Time"])
        joins = {n["Node Type"] for n in _nodes(plan) if "Anti" in str(n.get("Join Type"))}
        return min(times), ", ".join(sorted(joins)) or "-"

    found = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET jit = off")  # as jobctl's own transactions set it
        ms, joins = timed(conn)
        found.append({"stale reclaims": 0, "kind": "-", "review_count ms": f"{ms:.1f}"})
        for n in counts:
            for kind, (first_id, acted) in STALE_KINDS.items():
                events = [("reclaimed", "processing", "failed")]
                events += [("requeued", "failed", "queued")] if acted else []
                for event, before, after in events:  # in this order: the requeue after
                    conn.execute(
                        "INSERT INTO jobctl.events (job_table, job_id, event, from_status, "
                        "to_status, reason) SELECT %s, (%s + g)::text, %s, %s, %s, %s "
                        "FROM generate_series(1, %s) g",
                        (table, first_id, event, before, after, STALE, n),
                    )
                ms, joins = timed(conn)
                found.append(
                    {
                        "stale reclaims": f"{n:,}",
                        "kind": kind,
                        "review_count ms": f"{ms:.1f}",
                        "anti-join": joins,
                    }
                )
                conn.execute("DELETE FROM jobctl.events WHERE reason = %s", (STALE,))
                conn.execute("VACUUM ANALYZE jobctl.events")
    return found


def _nodes(plan: object) -> list[dict]:
    if isinstance(plan, dict):
        return [plan, *(n for v in plan.values() for n in _nodes(v))]
    if isinstance(plan, list):
        return [n for v in plan for n in _nodes(v)]
    return []


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--parked", type=int, default=200, help="jobs awaiting review")
    parser.add_argument("--before", help="a directory holding another jobctl package")
    parser.add_argument("--drop", action="store_true", help="drop both tables after")
    parser.add_argument("--events", type=int, default=50_000, help="events inserted (008)")
    parser.add_argument(
        "--statements-only", action="store_true", help="the statements alone, no processes"
    )
    parser.add_argument("--sizes", default=",".join(SIZES), help="the tables: 1M, 10M or both")
    parser.add_argument("--stale", default="", help="stale reclaims added to the history: N,...")
    args = parser.parse_args()
    sizes = {size: SIZES[size] for size in args.sizes.split(",")}
    dsn = bench_dsn(args.dsn)
    here = {**os.environ, "PYTHONPATH": os.getcwd()}
    print(f"machine: {machine()}")
    with psycopg.connect(dsn) as conn:
        jit = {
            s: conn.execute(f"SHOW {s}").fetchone()[0]
            for s in ("jit", "jit_above_cost", "jit_inline_above_cost", "jit_optimize_above_cost")
        }
        load = os.getloadavg()
    print("server: " + ", ".join(f"{k} = {v}" for k, v in jit.items()))
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (a shared machine)")
    for name, rows in sizes.values():
        build_table(dsn, name, rows, PROCESSING, EXPIRED, QUEUED)
        apply_schema(dsn, name, JOBCTL, here)
        park(dsn, name, args.parked, here)
    commands: dict[str, list[str]] = {}
    versions = {"now": here}
    if args.before:
        versions["before"] = {**os.environ, "PYTHONPATH": args.before}
    for version, env in versions.items():
        for command, argv in COMMANDS.items():
            for size, (name, _) in sizes.items():
                # -P: the jobctl of PYTHONPATH, not the one of the current directory
                commands[f"{version}|{command}|{size}"] = [
                    "env",
                    f"PYTHONPATH={env['PYTHONPATH']}",
                    sys.executable,
                    "-P",
                    "-m",
                    "jobctl",
                    "--dsn",
                    dsn,
                    "--table",
                    name,
                    *argv,
                ]
    times = {} if args.statements_only else samples(commands, args.runs)
    table = []
    for version in versions if times else ():
        for command in COMMANDS:
            small, large = (times[f"{version}|{command}|{s}"] for s in sizes)
            table.append(
                {
                    "jobctl": version,
                    "command": command,
                    "1M min / median s": f"{min(small):.3f} / {statistics.median(small):.3f}",
                    "10M min / median s": f"{min(large):.3f} / {statistics.median(large):.3f}",
                    "10M / 1M (min)": f"{min(large) / min(small):.2f}x",
                    "10M / 1M (median)": (
                        f"{statistics.median(large) / statistics.median(small):.2f}x"
                    ),
                }
            )
    print(
        f"\ncommands as real processes, {args.runs} interleaved rounds after a warm-up, "
        f"{args.parked} jobs awaiting review in each table"
    )
    print(tabulate(table, headers="keys", tablefmt="github"))
    for size, (name, _) in sizes.items():
        print(f"\nstatements on the server alone, {size} rows ({name}):")
        print(tabulate(statement_times(dsn, name), headers="keys", tablefmt="github"))
    if not args.statements_only:
        print(f"\nhistory migration 008's index on jobctl.events, min of {args.runs} rounds:")
        print(tabulate(event_costs(dsn, args.events, args.runs), headers="keys", tablefmt="github"))
    if args.stale:
        name = next(iter(sizes.values()))[0]
        counts = [int(n) for n in args.stale.split(",")]
        print(f"\nthe history's stale reclaims and review_count, {name}, jit = off, min of 3:")
        print(tabulate(stale_costs(dsn, name, counts), headers="keys", tablefmt="github"))
    load = os.getloadavg()
    print(f"\nload average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.drop:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name, _ in sizes.values():
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


if __name__ == "__main__":
    main()

"""jobctl report on a large incident: seconds and peak RSS, against a jobctl to compare with.

A jobs table whose ``--review`` jobs (333k by default) await review,
parked by a reclaim the history records in the last hour (one reclaimed event and one ended
attempt per job, 40 workers), plus as many done jobs. Then ``jobctl report --since 2h`` runs
as a real process, Markdown and ``-o json`` to a pipe, with this checkout's jobctl and, with
``--before DIR``, with the jobctl package in DIR (e.g. main before the change:
``git archive main jobctl | tar -x -C /tmp/before``), interleaved. Peak RSS from the kernel
(wait4). Nothing here asserts a time: python tests/bench/bench_report.py --help
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import psycopg
from common import JOBCTL, arguments, bench_dsn, build_table, literal_sql, machine
from psycopg import sql
from tabulate import tabulate


def load_incident(dsn: str, name: str, review: int) -> None:
    """``review`` jobs awaiting review and their reclaims in the history (kept between runs)."""
    job_table = f"public.{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        table = sql.Identifier(name)
        waiting = conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {} WHERE status = 'failed' AND recovery_policy = 'manual'"
            ).format(table)
        ).fetchone()[0]
        events = conn.execute(
            "SELECT count(*) FROM jobctl.events WHERE job_table = %s "
            "AND at > now() - '2h'::interval",
            (job_table,),
        ).fetchone()[0]
        if waiting == review and events == review:
            return
        started = time.monotonic()
        conn.execute("DELETE FROM jobctl.events WHERE job_table = %s", (job_table,))
        conn.execute("DELETE FROM jobctl.attempts WHERE job_table = %s", (job_table,))
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")  # no triggers
            conn.execute(
                sql.SQL(
                    """UPDATE {} SET status = 'failed', recovery_policy = 'manual',
                       reclaim_count = 1, last_error = 'lease expired before completion',
                       finished_at = now() - (id %% 3600) * interval '1 second'
                       WHERE id <= %s"""
                ).format(table),
                (review,),
            )
        conn.execute(
            """
            WITH j AS (
                SELECT g, gen_random_uuid() AS token,
                       now() - (g %% 3600) * interval '1 second' AS at
                FROM generate_series(1, %(n)s) g
            ), a AS (
                INSERT INTO jobctl.attempts (attempt_token, job_table, job_id, attempt, worker,
                                             claimed_at, ended_at, outcome, lease,
                                             lease_expires_at)
                SELECT token, %(t)s, g::text, 1, 'worker-' || (g %% 40), at - interval '90 s',
                       at, 'reclaimed', interval '30 s', at - interval '60 s'
                FROM j
            )
            INSERT INTO jobctl.events (job_table, job_id, at, event, from_status, to_status,
                                       attempt, attempt_token, worker, actor, reason, db_role)
            SELECT %(t)s, g::text, at, 'reclaimed', 'processing', 'failed', 1, token,
                   'worker-' || (g %% 40), 'reclaimer@host', 'lease expired before completion',
                   'jobctl_operator'
            FROM j
            """,
            {"t": job_table, "n": review},
        )
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
        conn.execute("VACUUM ANALYZE jobctl.events")
        conn.execute("VACUUM ANALYZE jobctl.attempts")
        print(
            f"  loaded {review:,} jobs awaiting review in {time.monotonic() - started:.1f}s",
            file=sys.stderr,
        )


STATEMENTS = [
    "report_expired",
    "report_not_jobctl",
    "report_reclaims",
    "report_repeats",
    "report_people",
    "report_review",
    "review",
    "report_latency",
]


def statement_times(dsn: str, name: str) -> list[dict[str, str]]:
    """Each statement of this checkout's report, timed on the server's side (one run)."""
    import datetime as dt

    from jobctl.ops import events, report

    window = events.Window(since=events.bound("2h"))
    params = {**window.params(), "job_table": f"public.{name}", "listed": report.LISTED}
    from jobctl.ops.review import ReviewFilter

    review = ReviewFilter().params()
    found = []
    for statement in STATEMENTS:
        own = {**params, **review, "limit": report.LISTED} if statement == "review" else params
        text = literal_sql(dsn, statement, name, {**own, "soon": dt.timedelta(0)})
        with psycopg.connect(dsn) as conn:
            started = time.perf_counter()
            rows = conn.execute(text).fetchall()
            seconds = time.perf_counter() - started
        found.append({"statement": statement, "seconds": f"{seconds:.2f}", "rows": len(rows)})
    return found


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--review", type=int, default=333_000, help="jobs awaiting review")
    parser.add_argument("--before", help="a directory holding the jobctl package to compare")
    parser.add_argument(
        "--statements", action="store_true", help="also time each statement of the report"
    )
    parser.set_defaults(runs=3)
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    name = f"bench_report_{args.review}"
    build_table(dsn, name, 2 * args.review, 0, 0)
    load_incident(dsn, name, args.review)
    env = {**os.environ, "JOBCTL_DSN": dsn, "NO_COLOR": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    builds = {"this checkout": env}
    if args.before:
        builds = {"before": {**env, "PYTHONPATH": os.path.abspath(args.before)}, **builds}
    print(
        f"machine: {machine()}; {args.review:,} jobs awaiting review, {args.runs} runs each "
        "(median wall time of the whole process, largest peak RSS)"
    )
    figures: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    for _ in range(args.runs):
        for build, build_env in builds.items():
            for what, options in (("markdown", []), ("-o json", ["-o", "json"])):
                command = [*JOBCTL, "--table", name, "report", "--since", "2h", *options]
                figures.setdefault((build, what), []).append(measure(command, build_env))
    rows = []
    for (build, what), samples in figures.items():
        rows.append(
            {
                "jobctl": build,
                "output": what,
                "seconds": f"{statistics.median(s for s, _, _ in samples):.2f}",
                "peak RSS MB": f"{max(r for _, r, _ in samples):.0f}",
                "bytes out": f"{samples[-1][2]:,}",
            }
        )
    print(tabulate(rows, headers="keys", tablefmt="github", disable_numparse=True))
    if args.statements:
        print()
        print(
            tabulate(
                statement_times(dsn, name), headers="keys", tablefmt="github", disable_numparse=True
            )
        )


def measure(command: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MB (the kernel's, from wait4) and the bytes of stdout."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=err)
        assert proc.stdout is not None
        size = sum(len(chunk) for chunk in iter(lambda: proc.stdout.read(1 << 20), b""))
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{command} exited {proc.returncode}: {err.read()[-500:]!r}")
    rss = usage.ru_maxrss / 1024
    print(f"  {' '.join(command[-4:])}: {seconds:.2f}s, {rss:.0f} MB", file=sys.stderr)
    return seconds, rss, size


if __name__ == "__main__":
    main()

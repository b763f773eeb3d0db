"""jobctl events over millions of history rows: rows, seconds and peak RSS per size.

For each size, a day of history (``--sizes 100k,1m,3m`` rows, spread evenly over 24 hours) is
loaded into jobctl.events for a jobs table of its own; then ``jobctl events --since 1d`` runs
as a real process writing every row (-o jsonl, -o csv; newest and oldest first) to /dev/null,
beside psql printing the same statement (the floor). The peak RSS of each process is read
from the kernel (wait4); memory that stays flat while the rows grow tenfold is the claim.
Nothing here asserts a time: python tests/bench/bench_events.py --help
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psycopg
from common import JOBCTL, arguments, bench_dsn, build_table, literal_sql, machine
from tabulate import tabulate

from jobctl.ops import events

SIZES = {"100k": 100_000, "1m": 1_000_000, "3m": 3_000_000, "10m": 10_000_000}
KINDS = ["reclaimed", "requeued", "retried", "failed", "manually_failed", "policy_changed"]


def load_events(dsn: str, name: str, rows: int) -> None:
    """A day of events of ``rows`` rows for the table ``name`` (kept between runs)."""
    job_table = f"public.{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        have = conn.execute(
            "SELECT count(*) FROM jobctl.events WHERE job_table = %s", (job_table,)
        ).fetchone()[0]
        if have == rows:
            return
        conn.execute("DELETE FROM jobctl.events WHERE job_table = %s", (job_table,))
        started = time.monotonic()
        conn.execute(
            """
            INSERT INTO jobctl.events (job_table, job_id, at, event, from_status, to_status,
                                       attempt, attempt_token, worker, actor, reason, db_role)
            SELECT %(t)s, (1 + g %% 1000)::text,
                   now() - (g * 86000.0 / %(n)s) * interval '1 second',
                   (%(kinds)s::text[])[1 + g %% 6], 'processing', 'queued', 1 + g %% 3,
                   gen_random_uuid(), 'worker-' || (g %% 40), 'reclaimer@host',
                   'lease expired before completion', 'app'
            FROM generate_series(1, %(n)s) g
            """,
            {"t": job_table, "n": rows, "kinds": KINDS},
        )
        conn.execute("VACUUM ANALYZE jobctl.events")
        print(f"  loaded {rows:,} events in {time.monotonic() - started:.1f}s", file=sys.stderr)


def run(command: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MB (the kernel's), and the lines written to stdout."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    lines = sum(chunk.count(b"\n") for chunk in iter(lambda: proc.stdout.read(1 << 20), b""))
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{command} exited {proc.returncode}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024, lines


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100k,1m,3m")
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    env = {**os.environ, "JOBCTL_DSN": dsn, "NO_COLOR": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    print(f"machine: {machine()}; one run each (wall time of the whole process, peak RSS)")
    results = []
    for label in args.sizes.split(","):
        name = f"bench_events_{label}"
        build_table(dsn, name, 1000, 0, 0)
        load_events(dsn, name, SIZES[label])
        window = events.Window(since=events.bound("1d"))
        params = {**window.params(), "job_table": f"public.{name}", "limit": None}
        floor = literal_sql(dsn, "events_newest", name, params)
        for what, command in (
            ("jsonl, newest first", ["events", "--since", "1d", "-o", "jsonl"]),
            ("csv, oldest first", ["events", "--since", "1d", "--oldest-first", "-o", "csv"]),
            ("psql -A (floor)", None),
        ):
            argv = (
                [*JOBCTL, "--table", name, *command]
                if command
                else ["psql", "-X", "-q", "-A", "-t", "-d", dsn, "-c", floor]
            )
            seconds, rss, lines = run(argv, env)
            results.append(
                {
                    "events": f"{SIZES[label]:,}",
                    "command": what,
                    "rows out": f"{lines:,}",
                    "seconds": f"{seconds:.2f}",
                    "rows/s": f"{lines / seconds:,.0f}",
                    "peak RSS MB": f"{rss:.0f}",
                }
            )
            print(f"  {label} {what}: {seconds:.2f}s, {rss:.0f} MB", file=sys.stderr)
    print(tabulate(results, headers="keys", disable_numparse=True))


if __name__ == "__main__":
    main()

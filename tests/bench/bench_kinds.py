"""at scale: ``summary --by kind`` and ``requeue --kind K --save-plan F`` on a 1M-row
table with 20 kinds, each timed as a whole process (wall time and peak RSS) against a bare
psycopg script running the same SQL (the floor for any Python tool; target: within 1.3x).

The table: 20k processing (2k of them expired), 50k failed by reclaim awaiting review
(manual policy), 30k queued and ready, the rest done; ``kind`` is one of 20 values, mapped
with ``schema apply --column kind=kind --column queue=queue``. With ``--index`` (the default)
it carries the index docs/your-table.md recommends for --kind on a large table,
``(kind, status)``; ``--no-index`` measures without it.

    JOBCTL_BENCH_DB=jobctl_bench_me python tests/bench/bench_kinds.py --runs 5

``--baseline-src NAME=PATH`` (repeatable) runs another jobctl source tree (a ``git worktree``
of an older commit) interleaved with this one, on the same data.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import psycopg
from common import JOBCTL, arguments, bench_dsn, literal_sql, machine, table
from psycopg import sql

from jobctl import db
from jobctl.ops import bulk, triage
from jobctl.schema import apply as schema_apply
from jobctl.schema import steps as schema_steps
from jobctl.table.mapping import TableMapping

NAME = "bench_kinds"
ROWS, KINDS = 1_000_000, 20
PROCESSING, EXPIRED, FAILED, QUEUED = 20_000, 2_000, 50_000, 30_000

BARE = """
import json, sys, psycopg
with psycopg.connect(sys.argv[1]) as conn:
    cursor = conn.execute(sys.argv[2])
    names = [d.name for d in cursor.description]
    text = json.dumps([dict(zip(names, r)) for r in cursor.fetchall()], default=str)
if len(sys.argv) > 3:
    with open(sys.argv[3], "w") as f:
        f.write(text)
else:
    print(text)
"""


def build(dsn: str, *, index: bool) -> None:
    """The table (kept between runs when it is whole), its mapping and (``index``) its index."""
    settings = db.Settings(dsn=dsn, table=NAME)
    with db.connect(settings) as conn:
        found = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS e", (NAME,)).fetchone()
        whole = found["e"] and (
            conn.execute(
                sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier(NAME))
            ).fetchone()["n"]
            == ROWS
        )
        if not whole:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(NAME)))
            schema_steps.apply(conn, settings, schema_apply.plan_apply(conn, NAME, create=True))
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN kind text").format(sql.Identifier(NAME))
            )
            started = time.monotonic()
            with conn.transaction():
                conn.execute("SET LOCAL session_replication_role = replica")  # no triggers
                conn.execute(
                    sql.SQL("""
                    INSERT INTO {t} (kind, queue, status, attempts, max_attempts,
                                     recovery_policy, available_at, reserved_by, reserved_at,
                                     heartbeat_at, lease_expires_at, attempt_token, last_error,
                                     finished_at, reclaim_count)
                    SELECT 'kind_' || (g %% %(k)s), 'queue_' || (g %% 4),
                           CASE WHEN g <= %(p)s THEN 'processing'
                                WHEN g <= %(p)s + %(f)s THEN 'failed'
                                WHEN g <= %(p)s + %(f)s + %(q)s THEN 'queued' ELSE 'done' END,
                           1, 3,
                           CASE WHEN g > %(p)s AND g <= %(p)s + %(f)s THEN 'manual'
                                ELSE 'auto' END,
                           now() - interval '1 hour',
                           CASE WHEN g <= %(p)s THEN 'worker-' || (g %% 40) END,
                           CASE WHEN g <= %(p)s THEN now() - interval '10 minutes' END,
                           CASE WHEN g <= %(p)s THEN now() - interval '1 minute' END,
                           CASE WHEN g <= %(e)s THEN now() - (g || ' milliseconds')::interval
                                WHEN g <= %(p)s THEN now() + interval '1 hour' END,
                           CASE WHEN g <= %(p)s THEN gen_random_uuid() END,
                           CASE WHEN g > %(p)s AND g <= %(p)s + %(f)s
                                THEN 'lease expired before completion' END,
                           CASE WHEN g > %(p)s AND g <> %(p)s + %(f)s + %(q)s THEN now() END,
                           CASE WHEN g > %(p)s AND g <= %(p)s + %(f)s THEN 1 ELSE 0 END
                    FROM generate_series(1, %(n)s) g""").format(t=sql.Identifier(NAME)),
                    {
                        "k": KINDS,
                        "p": PROCESSING,
                        "e": EXPIRED,
                        "f": FAILED,
                        "q": QUEUED,
                        "n": ROWS,
                    },
                )
                # the reclaims that parked the failed ones, as the history records them: the
                # reads of "awaits a human" find their jobs through these (review_candidates)
                conn.execute("DELETE FROM jobctl.events WHERE job_table = %s", (f"public.{NAME}",))
                conn.execute(
                    """
                    INSERT INTO jobctl.events (job_table, job_id, event, from_status, to_status,
                                               attempt, worker, actor, reason)
                    SELECT %(t)s, g::text, 'reclaimed', 'processing', 'failed', 1,
                           'worker-' || (g %% 40), 'reclaimer@host',
                           'lease expired before completion'
                    FROM generate_series(%(p)s::int8 + 1, %(p)s::int8 + %(f)s::int8) g
                    """,
                    {"t": f"public.{NAME}", "p": PROCESSING, "f": FAILED},
                )
            print(
                f"  built {NAME}: {ROWS:,} rows in {time.monotonic() - started:.1f}s",
                file=sys.stderr,
            )
        mapping = TableMapping.parse(columns=["kind=kind", "queue=queue"])
        steps = schema_apply.plan_apply(conn, NAME, create=False, mapping=mapping)
        schema_steps.apply(conn, settings, steps)
        name = sql.Identifier(f"{NAME}_kind_status")
        if index:
            conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (kind, status)").format(
                    name, sql.Identifier(NAME)
                )
            )
        else:
            conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(name))
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(NAME)))


def measured(command: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one run of ``command``, as its own process."""
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{command}: exit {proc.returncode}: {proc.stderr.read().decode()}")
    return seconds, usage.ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--no-index", action="store_true", help="without the (kind, status) index")
    parser.add_argument(
        "--baseline-src",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="another jobctl source tree, run interleaved with this one (repeatable)",
    )
    args = parser.parse_args()
    baselines = dict(b.split("=", 1) for b in args.baseline_src)
    dsn = bench_dsn(args.dsn)
    build(dsn, index=not args.no_index)
    plan_dir = tempfile.mkdtemp(prefix="bench-kinds-")
    soon = dt.timedelta(seconds=30)
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        fragments = db.resolve_table(conn, NAME).fragments
    groups = literal_sql(
        dsn,
        "summary_groups",
        NAME,
        {"soon": soon, "limit": triage.GROUP_LIMIT, **triage.EVERY.params()},
        group_key=fragments["kind_value"],
    )
    which = bulk.BulkFilter(triage.Slice(kinds=("kind_7",)))
    candidates = literal_sql(
        dsn,
        "bulk_candidates",
        NAME,
        {
            "statuses": ["failed"],
            "worker": None,
            "older_than": None,
            "limit": which.limit,
            "no_lease": False,
            **which.what.params(),
        },
    )
    env = {**os.environ, "JOBCTL_DSN": dsn, "JOBCTL_TABLE": NAME, "NO_COLOR": "1"}
    plan = os.path.join(plan_dir, "p.json")
    trees = {"jobctl": JOBCTL} | {
        name: ["env", "-C", path, f"PYTHONPATH={path}", *JOBCTL] for name, path in baselines.items()
    }
    commands: dict[tuple[str, str], list[str]] = {}
    for name, jobctl in trees.items():
        commands[("summary --by kind", name)] = [*jobctl, "summary", "--by", "kind", "-o", "json"]
        commands[("requeue --kind --save-plan", name)] = [
            *jobctl, "requeue", "--kind", "kind_7", "--save-plan", plan, "-o", "json",
        ]  # fmt: skip
    commands[("summary --by kind", "psycopg")] = [sys.executable, "-c", BARE, dsn, groups]
    commands[("requeue --kind --save-plan", "psycopg")] = [
        sys.executable, "-c", BARE, dsn, candidates, os.path.join(plan_dir, "bare.json"),
    ]  # fmt: skip
    for command in commands.values():  # warm caches once
        measured(command, env)
    times: dict[tuple[str, str], list[float]] = {k: [] for k in commands}
    peaks: dict[tuple[str, str], float] = dict.fromkeys(commands, 0.0)
    for _ in range(args.runs):
        for key, command in commands.items():
            seconds, peak = measured(command, env)
            times[key].append(seconds)
            peaks[key] = max(peaks[key], peak)
    with open(plan) as f:
        planned = len(json.load(f)["rows"])
    indexed = "no" if args.no_index else "yes"
    print(
        f"# {machine()}; {ROWS:,} rows, {KINDS} kinds, index (kind, status): {indexed}; "
        f"median of {args.runs}; plan of {planned} rows"
    )
    rows = []
    for command in ("summary --by kind", "requeue --kind --save-plan"):
        floor = statistics.median(times[(command, "psycopg")])
        for name in trees:
            ours = statistics.median(times[(command, name)])
            rows.append(
                {
                    "command": command,
                    "tree": name,
                    "jobctl s": f"{ours:.3f}",
                    "psycopg s": f"{floor:.3f}",
                    "ratio": f"{ours / floor:.2f}",
                    "jobctl MiB": f"{peaks[(command, name)]:.0f}",
                    "psycopg MiB": f"{peaks[(command, 'psycopg')]:.0f}",
                }
            )
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()

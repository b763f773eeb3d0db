"""Memory under hostile sizes: the peak RSS of the whole jobctl process.

Builds, in a scratch database of its own (``JOBCTL_BENCH_DB``, default jobctl_bench_memory,
kept between runs; ``--rebuild`` to force), a jobs table with one job whose last_error is
``--error-mb`` MB (100 by default) of text that does not compress, failed by its worker so that
the history's event carries the same text as its reason, and a table of ``--expired`` expired
jobs (1M by default). Then, in ``--runs`` interleaved rounds, each command as a real process
writing to /dev/null, its peak RSS read from the kernel (wait4's ru_maxrss):

* jobctl ``show``, ``show -o json``, ``show --full -o json``, ``history``, ``events``,
  ``reclaim`` (the dry run: table, ``-o jsonl``) and ``reclaim --save-plan``;
* the floor: a bare psycopg script that runs the same statement and fetches its rows
  streaming (a named cursor, 2,000 rows a fetch, each row written out), and psql printing
  it (``FETCH_COUNT=2000``: psql streams too).

Prints each figure (MB; the median of the rounds, and the largest) and jobctl's ratio to
each floor; the target is 100 MB or less for each command but ``show --full`` (every byte of a
100 MB value, on purpose). Nothing here asserts: python tests/bench/bench_memory.py --help

``--hostile`` measures instead ``stuck``, the dry run, ``summary``,
``metrics`` and ``reclaim --commit`` (with its wall time) on ``--hostile-rows`` expired jobs
(16) whose worker name, kind and last_error are each ``--hostile-mb`` MB (30), against bare
psycopg scripts reading the same rows one at a time; the target is 150 MB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import psycopg
from common import JOBCTL, arguments, build_table, machine
from psycopg import conninfo, sql
from tabulate import tabulate

from jobctl import db
from jobctl.db import session
from jobctl.ops import triage
from jobctl.schema import apply as schema_apply
from jobctl.schema import steps as schema_steps
from jobctl.table.mapping import TableMapping

BIG = "bench_memory_big"
EXPIRED = "bench_memory_expired"
HOSTILE = "bench_memory_hostile"  # --hostile: expired rows whose texts are each tens of MB
HOSTILE_TEXT = "bench_memory_hostile_text"  # the long text, kept to restore a reclaimed row
TARGET_MB = 100
HOSTILE_TARGET_MB = 150
FLOOR_SCRIPT = """
import os, sys, psycopg
with psycopg.connect(os.environ["FLOOR_DSN"]) as conn, conn.cursor(name="floor") as cursor:
    cursor.itersize = 2000
    cursor.execute(os.environ["FLOOR_SQL"].encode())
    for row in cursor:
        sys.stdout.write(repr(row) + "\\n")
"""


def scratch_dsn(server_dsn: str) -> str:
    name = os.environ.get("JOBCTL_BENCH_DB", "jobctl_bench_memory")
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return conninfo.make_conninfo(server_dsn, dbname=name)


def build_big(dsn: str, megabytes: int, rebuild: bool) -> int:
    """The table ``BIG``: one job, failed by its worker with a last_error of ``megabytes`` MB
    (md5 text: it does not compress away), the history's event carrying it as its reason."""
    size = megabytes * 1024 * 1024
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as conn:
        if not rebuild and conn.execute("SELECT to_regclass(%s) AS t", (BIG,)).fetchone()["t"]:
            found = conn.execute(
                sql.SQL("SELECT id, octet_length(last_error) AS n FROM {}").format(
                    sql.Identifier(BIG)
                )
            ).fetchone()
            if found is not None and found["n"] == size:
                return int(found["id"])
        started = time.monotonic()
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(BIG)))
        schema_steps.apply(conn, settings, schema_apply.plan_apply(conn, BIG, create=True))
        conn.execute("DELETE FROM jobctl.events WHERE job_table = %s", (f"public.{BIG}",))
        conn.execute("DELETE FROM jobctl.attempts WHERE job_table = %s", (f"public.{BIG}",))
        table = sql.Identifier(BIG)
        job_id = conn.execute(
            sql.SQL("INSERT INTO {} (status) VALUES ('queued') RETURNING id").format(table)
        ).fetchone()["id"]
        conn.execute(
            sql.SQL(
                "UPDATE {} SET status = 'processing', attempts = 1, reserved_by = 'worker-1', "
                "reserved_at = now(), heartbeat_at = now(), attempt_token = gen_random_uuid(), "
                "lease_expires_at = now() + interval '1 minute' WHERE id = %s"
            ).format(table),
            (job_id,),
        )
        conn.execute(  # the worker fails it: the history records the reason it gave
            sql.SQL(
                "UPDATE {} SET status = 'failed', finished_at = now(), reserved_by = NULL, "
                "reserved_at = NULL, heartbeat_at = NULL, attempt_token = NULL, "
                "lease_expires_at = NULL, last_error = (SELECT left(string_agg(md5(g::text), ''),"
                " %s) FROM generate_series(1, %s / 32 + 1) g) WHERE id = %s"
            ).format(table),
            (size, size, job_id),
        )
        reason = conn.execute(
            "SELECT max(octet_length(reason)) AS n FROM jobctl.events WHERE job_table = %s",
            (f"public.{BIG}",),
        ).fetchone()["n"]
        if (reason or 0) < size:  # a history that no longer copies it: the event made here
            conn.execute(
                sql.SQL(
                    "INSERT INTO jobctl.events (job_table, job_id, event, from_status, "
                    "to_status, attempt, worker, reason, db_role) SELECT %s, id::text, "
                    "'failed', 'processing', 'failed', 1, 'worker-1', last_error, 'app' FROM {}"
                ).format(table),
                (f"public.{BIG}",),
            )
        print(
            f"  built {BIG}: {megabytes} MB in {time.monotonic() - started:.1f}s", file=sys.stderr
        )
        return int(job_id)


def build_hostile(dsn: str, rows: int, megabytes: int, rebuild: bool) -> None:
    """The table ``HOSTILE``: ``rows`` expired jobs, auto, whose worker
    name, kind (the queue column, mapped as kind) and last_error are each ``megabytes`` MB
    of md5 text (it compresses about 4:1 on disk, as the finding's did), and one live job
    beside them; the text kept in ``HOSTILE_TEXT`` so that ``restore_hostile`` can put the
    rows back after a commit."""
    size = megabytes * 1024 * 1024
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as conn:
        found = conn.execute("SELECT to_regclass(%s) AS t", (HOSTILE_TEXT,)).fetchone()["t"]
        if (
            found
            and not rebuild
            and conn.execute("SELECT to_regclass(%s) AS t", (HOSTILE,)).fetchone()["t"]
        ):
            have = conn.execute(
                sql.SQL("SELECT octet_length(t) AS n, r FROM {}").format(
                    sql.Identifier(HOSTILE_TEXT)
                )
            ).fetchone()
            if have is not None and (have["n"], have["r"]) == (size, rows):
                restore_hostile(dsn)
                return
        started = time.monotonic()
        for name in (HOSTILE, HOSTILE_TEXT):
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} AS SELECT left(string_agg(md5(g::text), ''), %s) AS t, "
                "%s::int AS r FROM generate_series(1, %s / 32 + 1) g"
            ).format(sql.Identifier(HOSTILE_TEXT)),
            (size, rows, size),
        )
        steps = schema_apply.plan_apply(conn, HOSTILE, create=True)
        schema_steps.apply(conn, settings, steps)
        mapping = TableMapping(columns={"kind": "queue"})  # the queue column as the job's kind
        steps = schema_apply.plan_apply(conn, HOSTILE, create=False, mapping=mapping)
        schema_steps.apply(conn, settings, steps)
        conn.execute(
            sql.SQL("INSERT INTO {} (status) SELECT 'queued' FROM generate_series(1, %s)").format(
                sql.Identifier(HOSTILE)
            ),
            (rows + 1,),
        )
    restore_hostile(dsn)
    print(
        f"  built {HOSTILE}: {rows} x {megabytes} MB in {time.monotonic() - started:.1f}s",
        file=sys.stderr,
    )


def restore_hostile(dsn: str) -> None:
    """The hostile rows as built: every one processing with a long worker name, kind and
    last_error, its lease expired a minute ago (the last one live), whatever a reclaim did."""
    with db.connect(db.Settings(dsn=dsn)) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {t} SET status = 'processing', attempts = 1, recovery_policy = 'auto', "
                "reserved_by = x.t || id, queue = x.t || id, last_error = x.t || id, "
                "reserved_at = now() - interval '10 minutes', heartbeat_at = now() - interval "
                "'2 minutes', finished_at = NULL, attempt_token = gen_random_uuid(), "
                "lease_expires_at = CASE WHEN id <= x.r THEN now() - interval '1 minute' "
                "ELSE now() + interval '1 hour' END FROM {x} x"
            ).format(t=sql.Identifier(HOSTILE), x=sql.Identifier(HOSTILE_TEXT))
        )


def statements(dsn: str, job_id: int) -> dict[str, str]:
    """jobctl's own statements with their parameters inlined, for the floor (psycopg, psql)."""
    texts: dict[str, str] = {}
    with session.open(db.Settings(dsn=dsn, table=BIG)) as s:
        mogrify = psycopg.ClientCursor(s.conn).mogrify
        shown = s.query("job_row_shown", shown_columns=triage._shown_columns(s))
        texts["show"] = mogrify(shown, {"id": job_id, "cut": triage.DISPLAY_CHARS})
        texts["show --full"] = mogrify(s.query("job_row"), {"id": job_id})
        history = {"job_table": s.table.qualified, "id": str(job_id), "limit": 10_000}
        job_events = s.query("job_events", **triage.shown_texts("e", "worker", "actor", "reason"))
        texts["history"] = mogrify(job_events, history | {"cut": triage.DISPLAY_CHARS})
        window = {
            "since": None, "since_at": None, "until": None, "until_at": None, "events": None,
            "actor": None, "worker": None, "ids": None, "job_table": s.table.qualified,
            "limit": 50, "cut": triage.DISPLAY_CHARS,
        }  # fmt: skip
        events = s.query("events_newest", **triage.shown_texts("e", "worker", "actor", "reason"))
        texts["events"] = mogrify(events, window)
    with session.open(db.Settings(dsn=dsn, table=EXPIRED)) as s:
        where = triage.ExpiredFilter().params() | {"limit": None, "no_lease": False}
        texts["dry run"] = psycopg.ClientCursor(s.conn).mogrify(s.query("stuck"), where)
    return texts


def peak_mb(command: Sequence[str], env: dict[str, str]) -> float:
    """The peak RSS of ``command`` (its whole process), stdout and stderr to /dev/null, as
    /usr/bin/time reads it from the kernel. (Not this script's own wait4: a child's maxrss
    starts at its parent's size at the fork, this script's 40 MB.)"""
    with tempfile.NamedTemporaryFile("r") as figure:
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", figure.name, *command],
            env=env,
            cwd=tempfile.gettempdir(),  # python -m puts the working directory first on the path
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {proc.returncode}: {proc.stderr!r}")
        return int(figure.read().split()[-1]) / 1024  # KiB


FLOOR_WHOLE = """
import os, sys, psycopg
with psycopg.connect(os.environ["FLOOR_DSN"]) as conn, conn.cursor(name="floor") as cursor:
    cursor.itersize = 1
    cursor.execute(os.environ["FLOOR_SQL"].encode())
    for row in cursor:
        for value in row:
            sys.stdout.write(str(value) + "\\n")
"""


def hostile(args: argparse.Namespace, dsn: str, env: dict[str, str]) -> None:
    """--hostile: each command's peak RSS (and the commit's wall time) on ``HOSTILE``'s rows,
    against bare psycopg scripts reading the same rows one at a time: every byte of them
    (``SELECT *``), and jobctl's own statement (the texts cut on the server)."""
    build_hostile(dsn, args.hostile_rows, args.hostile_mb, args.rebuild)
    table = ["--statement-timeout", "10m", "--table", HOSTILE]
    commands = {
        "stuck": ["stuck"],
        "stuck -o json": ["stuck", "-o", "json"],
        "stuck --expiring-within 2h": ["stuck", "--expiring-within", "2h"],
        "reclaim --dry-run -o json": ["reclaim", "--dry-run", "-o", "json"],
        "reclaim --dry-run": ["reclaim", "--dry-run"],
        "summary": ["summary"],
        "summary --by kind": ["summary", "--by", "kind"],
        "summary --by worker": ["summary", "--by", "worker"],
        "metrics": ["metrics"],
        "reclaim --commit -o json": ["reclaim", "--commit", "--yes", "-o", "json"],
    }
    with session.open(db.Settings(dsn=dsn, table=HOSTILE)) as s:
        where = triage.ExpiredFilter().params() | {"limit": None, "no_lease": True}
        where |= {"cut": triage.DISPLAY_CHARS}
        stuck = psycopg.ClientCursor(s.conn).mogrify(s.query("stuck"), where)
    floors = {
        "psycopg SELECT * (every byte)": (FLOOR_WHOLE, f"SELECT * FROM {HOSTILE}"),
        "psycopg stuck's statement": (FLOOR_SCRIPT, stuck),
    }
    figures: dict[str, list[float]] = {}
    commit_s: list[float] = []
    for round_ in range(args.runs):
        for name, argv in commands.items():
            started = time.monotonic()
            figures.setdefault(name, []).append(peak_mb([*JOBCTL, *table, *argv], env))
            if "--commit" in argv:  # the only one that changes the rows: put them back
                commit_s.append(time.monotonic() - started)
                if round_ + 1 < args.runs:
                    restore_hostile(dsn)
            print(f"  {name}: {figures[name][-1]:.0f} MB", file=sys.stderr, flush=True)
        for name, (script, statement) in floors.items():
            floor_env = env | {"FLOOR_SQL": statement}
            figures.setdefault(name, []).append(peak_mb([sys.executable, "-c", script], floor_env))
        print(f"  round {round_ + 1} of {args.runs} done", file=sys.stderr)
    print(
        f"\n{args.hostile_rows} expired jobs whose worker name, kind and last_error are each "
        f"{args.hostile_mb} MB; peak RSS in MB, median of {args.runs} rounds (largest):\n"
    )
    rows = [
        [
            name,
            f"{statistics.median(v):.0f} ({max(v):.0f})",
            ""
            if name.startswith("psycopg")
            else ("yes" if statistics.median(v) <= HOSTILE_TARGET_MB else "no"),
        ]
        for name, v in figures.items()
    ]
    print(
        tabulate(
            rows,
            headers=["command", "MB", f"≤ {HOSTILE_TARGET_MB} MB"],
            tablefmt="github",
            disable_numparse=True,
        )
    )
    print(f"\nreclaim --commit: {statistics.median(commit_s):.1f}s (median wall time)")


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--error-mb", type=int, default=100, help="the long last_error, MB")
    parser.add_argument("--expired", type=int, default=1_000_000, help="expired jobs")
    parser.add_argument("--rebuild", action="store_true", help="build the tables again")
    parser.add_argument(
        "--baseline-src",
        help="also another jobctl source tree (e.g. main before this work), run directly "
        "(its show prints every byte: --full is left out for it)",
    )
    parser.add_argument("--hostile", action="store_true", help="the hostile rows instead")
    parser.add_argument("--hostile-rows", type=int, default=16, help="hostile rows")
    parser.add_argument("--hostile-mb", type=int, default=30, help="each hostile text, MB")
    parser.set_defaults(runs=3)
    args = parser.parse_args()
    print(machine())
    dsn = scratch_dsn(args.dsn)
    if args.hostile:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        hostile(args, dsn, env | {"JOBCTL_DSN": dsn, "NO_COLOR": "1", "FLOOR_DSN": dsn})
        return
    job_id = build_big(dsn, args.error_mb, args.rebuild)
    build_table(dsn, EXPIRED, args.expired, args.expired, args.expired, rebuild=args.rebuild)
    texts = statements(dsn, job_id)
    plan = os.path.join(tempfile.mkdtemp(prefix="bench_memory_"), "plan.json")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"JOBCTL_DSN": dsn, "NO_COLOR": "1", "FLOOR_DSN": dsn}
    big = ["--statement-timeout", "10m", "--table", BIG]
    many = ["--statement-timeout", "10m", "--table", EXPIRED]
    # name: (jobctl's command, the floor's statement)
    commands = {
        "show": ([*big, "show", str(job_id)], "show"),
        "show -o json": ([*big, "show", str(job_id), "-o", "json"], "show"),
        "show --full -o json": ([*big, "show", str(job_id), "--full", "-o", "json"], "show --full"),
        "history": ([*big, "history", str(job_id)], "history"),
        "events": ([*big, "events"], "events"),
        "reclaim (dry run, table)": ([*many, "reclaim"], "dry run"),
        "reclaim -o jsonl": ([*many, "reclaim", "-o", "jsonl"], "dry run"),
        "reclaim --save-plan": ([*many, "reclaim", "--save-plan", plan], "dry run"),
    }
    psql = conninfo.conninfo_to_dict(dsn)
    psql_command = [
        "psql",
        "-X",
        "-q",
        "-v",
        "FETCH_COUNT=2000",
        "-d",
        conninfo.make_conninfo(**psql),
    ]
    baseline_env = env | {"PYTHONPATH": args.baseline_src or ""}
    figures: dict[str, list[float]] = {}
    for round_ in range(args.runs):
        for name, (argv, floor) in commands.items():
            figures.setdefault(name, []).append(peak_mb([*JOBCTL, *argv], env))
            if args.baseline_src:
                before = [a for a in argv if a != "--full"]
                figures.setdefault(f"baseline {name}", []).append(
                    peak_mb([*JOBCTL, *before], baseline_env)
                )
            if len(figures.get(f"psql {floor}", [])) > round_:
                continue  # each floor once a round
            floor_env = env | {"FLOOR_SQL": texts[floor]}
            figures.setdefault(f"psycopg {floor}", []).append(
                peak_mb([sys.executable, "-c", FLOOR_SCRIPT], floor_env)
            )
            figures.setdefault(f"psql {floor}", []).append(
                peak_mb([*psql_command, "-c", texts[floor]], env)
            )
        print(f"  round {round_ + 1} of {args.runs} done", file=sys.stderr)
    rows = []
    for name, (_, floor) in commands.items():
        ours = statistics.median(figures[name])
        bare = statistics.median(figures[f"psycopg {floor}"])
        client = statistics.median(figures[f"psql {floor}"])
        baseline = figures.get(f"baseline {name}")
        rows.append(
            [
                name,
                f"{ours:.0f} ({max(figures[name]):.0f})",
                *([f"{statistics.median(baseline):.0f}"] if baseline else []),
                f"{bare:.0f}",
                f"{client:.0f}",
                f"{ours / bare:.2f}",
                f"{ours / client:.2f}",
                "yes" if ours <= TARGET_MB else "no",
            ]
        )
    print(
        f"\none job with a {args.error_mb} MB last_error (and its event); {args.expired:,} "
        f"expired jobs; peak RSS in MB, median of {args.runs} rounds (largest):\n"
    )
    headers = ["command", "jobctl MB", "psycopg MB", "psql MB", "/psycopg", "/psql", "≤ 100 MB"]
    if args.baseline_src:
        headers.insert(2, "baseline MB")
    print(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))


if __name__ == "__main__":
    main()

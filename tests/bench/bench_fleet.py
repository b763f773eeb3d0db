"""The fleet: one jobctl command across 1, 4 and 16 targets, as whole processes.

Makes 16 databases (clones of one template: the reference jobs table, schema applied, --stuck
expired leases among --rows rows), a config file naming them t00..t15, and times
``jobctl --target t00``, ``--target t00..t03`` and ``--all-targets`` for ``stuck -o json`` and
``metrics``, rounds interleaved, against the floor: psql -c on one database and on each of the
16 in turn, a bare psycopg script on one, and on all 16 at once (threads). The goal: 16 targets
within 2x one. The databases are dropped at the end.

    python tests/bench/bench_fleet.py [--dsn ...] [--runs 7] [--stuck 200] [--rows 5000]
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence

import psycopg
from bench_triage import BARE
from common import JOBCTL, arguments, build_table, literal_sql, machine, samples, table
from psycopg import conninfo

from jobctl.ops import triage

TARGETS = 16

# the floor for a fan-out: every database at once from one Python process
BARE_MANY = """
import json, sys, psycopg
from concurrent.futures import ThreadPoolExecutor
def one(dsn):
    with psycopg.connect(dsn) as conn:
        cursor = conn.execute(sys.argv[1])
        names = [d.name for d in cursor.description]
        return [dict(zip(names, r)) for r in cursor.fetchall()]
with ThreadPoolExecutor(len(sys.argv) - 2) as pool:
    print(json.dumps([r for rows in pool.map(one, sys.argv[2:]) for r in rows], default=str))
"""


def made(server_dsn: str, prefix: str, rows: int, stuck: int) -> dict[str, str]:
    """The template, loaded once, then TARGETS clones of it: target name -> DSN."""
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {prefix}_template")
    template = conninfo.make_conninfo(server_dsn, dbname=f"{prefix}_template")
    # processing: the stuck ones plus as many live leases; a fifth of the rest queued
    live = stuck
    build_table(template, "jobs", rows, stuck + live, stuck, (rows - stuck - live) // 5)
    dsns = {}
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for i in range(TARGETS):
            name = f"{prefix}_t{i:02d}"
            admin.execute(f"CREATE DATABASE {name} TEMPLATE {prefix}_template")
            dsns[f"t{i:02d}"] = conninfo.make_conninfo(server_dsn, dbname=name)
    return dsns


def dropped(server_dsn: str, prefix: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        names = admin.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{prefix}\\_%",)
        ).fetchall()
        for (name,) in names:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def write_config(path: str, dsns: dict[str, str]) -> None:
    text = "".join(f"[targets.{name}]\ndsn = {json.dumps(dsn)}\n\n" for name, dsn in dsns.items())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def measure(
    commands: dict[str, Sequence[str]], runs: int, env: dict[str, str]
) -> dict[str, tuple[float, float]]:
    """(median, p90) wall time of each command, rounds interleaved so drift hits them all."""
    times = samples(commands, runs, env)
    return {name: (statistics.median(v), p90(v)) for name, v in times.items()}


def p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def rows_out(command: Sequence[str], env: dict[str, str]) -> str:
    """One run's exit code and what it printed, in a few words (also: does it work at all)."""
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    if "-o" in command:
        found = json.loads(done.stdout)
        targets = {r.get("target") for r in found}
        return f"{len(found)} rows from {len(targets - {None}) or 1} target(s)"
    return f"{len(done.stdout.splitlines())} lines"


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--stuck", type=int, default=200, help="expired leases per database")
    parser.add_argument("--rows", type=int, default=5000, help="rows per database")
    parser.add_argument("--keep", action="store_true", help="keep the databases (debugging)")
    args = parser.parse_args()
    prefix = f"jobctl_bench_fleet_{os.getpid()}"
    print(f"machine: {machine()}; {args.runs} rounds, whole processes, interleaved")
    dropped(args.dsn, prefix)
    try:
        with tempfile.TemporaryDirectory(prefix="jobctl-bench-fleet-") as tmp:
            run(args, prefix, os.path.join(tmp, "config.toml"))
    finally:
        if not args.keep:
            dropped(args.dsn, prefix)


def run(args, prefix: str, config: str) -> None:
    dsns = made(args.dsn, prefix, args.rows, args.stuck)
    print(f"{TARGETS} databases of {args.rows:,} rows, {args.stuck} stuck in each", file=sys.stderr)
    write_config(config, dsns)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JOBCTL_DSN", "DATABASE_URL", "JOBCTL_TABLE", "JOBCTL_TARGET")
    }
    env |= {"JOBCTL_CONFIG": config, "NO_COLOR": "1"}
    first = dsns["t00"]
    stuck_sql = literal_sql(
        first, "stuck", "jobs", {**triage.ExpiredFilter().params(), "limit": 1000, "no_lease": True}
    )
    psql = ["psql", "-X", "-q", "-A", "-t", "-c", stuck_sql, "-d"]

    four = [a for name in list(dsns)[:4] for a in ("--target", name)]
    fleet: dict[str, tuple[str, int, list[str]]] = {}  # label -> (group, targets, command)
    for what in (["stuck", "-o", "json"], ["metrics"]):
        group = f"jobctl {what[0]}"
        fleet[f"jobctl --target t00 {' '.join(what)}"] = (
            group,
            1,
            [*JOBCTL, "--target", "t00", *what],
        )
        fleet[f"jobctl --target t00..t03 {' '.join(what)}"] = (group, 4, [*JOBCTL, *four, *what])
        fleet[f"jobctl --all-targets {' '.join(what)}"] = (
            group,
            16,
            [*JOBCTL, "--all-targets", *what],
        )
    floor: dict[str, tuple[str, int, list[str]]] = {
        "psql -c stuck SQL, 1 db": ("psql", 1, [*psql, first]),
        "psql -c stuck SQL, each of 16 in turn": (
            "psql",
            16,
            [
                "sh",
                "-c",
                " && ".join(shlex.join([*psql, d]) + " >/dev/null" for d in dsns.values()),
            ],
        ),
        "psycopg script, 1 db": ("psycopg", 1, [sys.executable, "-c", BARE, first, stuck_sql]),
        "psycopg script, 16 dbs at once": (
            "psycopg",
            16,
            [sys.executable, "-c", BARE_MANY, stuck_sql, *dsns.values()],
        ),
    }

    # each jobctl command once, as it answers (rows, targets); those that fail are not timed
    for label, (_, _, command) in list(fleet.items()):
        said = rows_out(command, env)
        print(f"  {label}: {said}", file=sys.stderr)
        if said.startswith("exit"):
            del fleet[label]

    commands = {**fleet, **floor}
    figures = measure({k: v[2] for k, v in commands.items()}, args.runs, env)
    one = {group: figures[label][0] for label, (group, n, _) in commands.items() if n == 1}
    print(
        table(
            [
                {
                    "command": label,
                    "targets": str(n),
                    "median ms": f"{figures[label][0] * 1000:.0f}",
                    "p90 ms": f"{figures[label][1] * 1000:.0f}",
                    "vs 1 target": f"{figures[label][0] / one[group]:.2f}x" if group in one else "",
                }
                for label, (group, n, _) in commands.items()
            ],
            ["command", "targets", "median ms", "p90 ms", "vs 1 target"],
        )
    )
    for label, (group, n, _) in fleet.items():
        if n == TARGETS and group in one:
            ratio = figures[label][0] / one[group]
            verdict = "within" if ratio <= 2 else "OVER"
            print(f"{group}: {TARGETS} targets {ratio:.2f}x one ({verdict} the 2x goal)")


if __name__ == "__main__":
    main()

"""Shared helpers for the benchmarks: a database, tables of a given shape, whole-process timing.

The benchmarks are scripts, not tests: ``python tests/bench/<name>.py --help``. They print
figures and ratios measured side by side in one run; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

import psycopg
from psycopg import conninfo, sql

from jobctl import db
from jobctl.schema import apply as schema_apply
from jobctl.schema import steps as schema_steps
from jobctl.sql import queries

JOBCTL = [sys.executable, "-m", "jobctl"]
BENCH_DB = os.environ.get("JOBCTL_BENCH_DB", "jobctl_bench")  # one of its own per runner


def arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("JOBCTL_BENCH_DSN", "host=127.0.0.1 user=postgres dbname=postgres"),
        help="a server to create the benchmark database on",
    )
    parser.add_argument("--runs", type=int, default=7, help="runs per command (median)")
    return parser


def bench_dsn(server_dsn: str) -> str:
    """The benchmark database (created once, kept between runs to save loading time)."""
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        exists = admin.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (BENCH_DB,)
        ).fetchone()
        if not exists:
            admin.execute(f"CREATE DATABASE {BENCH_DB}")
    return conninfo.make_conninfo(server_dsn, dbname=BENCH_DB)


def machine(dsn: str | None = None) -> str:
    """The machine and the server a benchmark ran on, with the server's JIT: whether it would
    compile a costly plan (``jit`` on and LLVM there: ``pg_jit_available()``), since a plan
    past ``jit_above_cost`` costs 0.1-0.5 s more on such a server; a run without it says so."""
    server = dsn or os.environ.get(
        "JOBCTL_BENCH_DSN", "host=127.0.0.1 user=postgres dbname=postgres"
    )
    with psycopg.connect(server) as c:
        version, jit, llvm, above = c.execute(
            "SELECT current_setting('server_version'), current_setting('jit'), "
            "pg_jit_available(), current_setting('jit_above_cost')"
        ).fetchone()
    compiles = jit == "on" and llvm
    said = (
        f"jit {jit}, LLVM available: {'yes' if llvm else 'no'}"
        + (f", jit_above_cost {above}" if compiles else "")
        + ("" if compiles else " (this run measures a server that never JIT-compiles)")
    )
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}, Python {platform.python_version()}, PostgreSQL {version} "
        f"({said})"
    )


def build_table(
    dsn: str,
    name: str,
    rows: int,
    processing: int,
    expired: int,
    queued: int = 0,
    *,
    rebuild: bool = False,
) -> None:
    """A jobs table of ``rows`` rows: ``processing`` of them processing (``expired`` with an
    expired lease), ``queued`` queued, the rest done. Loaded with triggers off."""
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as conn:
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS e", (name,)).fetchone()["e"]
        if exists and not rebuild:
            count = conn.execute(
                sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier(name))
            ).fetchone()["n"]
            if count == rows:
                return
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
        steps = schema_apply.plan_apply(conn, name, create=True)
        schema_steps.apply(conn, settings, steps)
        started = time.monotonic()
        # the counts as int8: psycopg sends a small Python int as int2, and the sum of two
        # of them (20,000 processing + 20,000 queued) overflowed it
        counts = {"p": processing, "q": queued, "e": expired, "n": rows}
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")  # no triggers
            conn.execute(
                sql.SQL("""
                INSERT INTO {t} (status, attempts, max_attempts, recovery_policy, available_at,
                                 reserved_by, reserved_at, heartbeat_at, lease_expires_at,
                                 attempt_token, finished_at)
                SELECT CASE WHEN g <= %(p)s THEN 'processing'
                            WHEN g <= %(p)s + %(q)s THEN 'queued' ELSE 'done' END,
                       1, 3, CASE WHEN g %% 5 = 0 THEN 'manual' ELSE 'auto' END,
                       now() - interval '1 hour',
                       CASE WHEN g <= %(p)s THEN 'worker-' || (g %% 40) END,
                       CASE WHEN g <= %(p)s THEN now() - interval '10 minutes' END,
                       CASE WHEN g <= %(p)s THEN now() - interval '1 minute' END,
                       CASE WHEN g <= %(e)s THEN now() - (g || ' milliseconds')::interval
                            WHEN g <= %(p)s THEN now() + interval '1 hour' END,
                       CASE WHEN g <= %(p)s THEN gen_random_uuid() END,
                       CASE WHEN g > %(p)s + %(q)s THEN now() END
                FROM generate_series(1, %(n)s) g""").format(t=sql.Identifier(name)),
                {k: psycopg.types.numeric.Int8(v) for k, v in counts.items()},
            )
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(name)))
        print(
            f"  built {name}: {rows:,} rows in {time.monotonic() - started:.1f}s", file=sys.stderr
        )


def literal_sql(dsn: str, name: str, table: str, params: dict, **own: sql.Composable) -> str:
    """A jobctl statement with its parameters inlined, for psql and the bare script (``own``:
    the statement's own fragments, as ``Session.query`` takes them)."""
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        fragments = db.resolve_table(conn, table).fragments
        statement = queries.query(name, **{**fragments, **own})
        return psycopg.ClientCursor(conn).mogrify(statement, params)


def timed(command: Sequence[str], *, env: dict[str, str] | None = None) -> float:
    # as on a user's machine: modules compiled once and cached (some shells set
    # PYTHONDONTWRITEBYTECODE, which makes every run recompile jobctl's modules)
    env = {k: v for k, v in (env or os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    subprocess.run(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
    )
    return time.perf_counter() - started


def compare(
    commands: dict[str, Sequence[str]], runs: int, env: dict[str, str] | None = None
) -> dict[str, float]:
    """Median wall time of each command, runs interleaved so drift hits them all alike."""
    return {name: statistics.median(v) for name, v in samples(commands, runs, env).items()}


def samples(
    commands: dict[str, Sequence[str]], runs: int, env: dict[str, str] | None = None
) -> dict[str, list[float]]:
    """Every wall time of each command: one warm-up each, then ``runs`` interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():  # warm caches once
        timed(command, env=env)
    for _ in range(runs):
        for name, command in commands.items():
            times[name].append(timed(command, env=env))
    return times


def table(rows: list[dict], columns: list[str]) -> str:
    from tabulate import tabulate

    return tabulate(
        [[r.get(c, "") for c in columns] for r in rows],
        headers=columns,
        tablefmt="github",
        disable_numparse=True,
    )

"""Startup and memory: jobctl --help against python -c pass; what --help imports; peak RSS of
stuck -o json over 100k expired rows (streamed) against the bare psycopg script.

    python tests/bench/bench_startup.py
"""

from __future__ import annotations

import os
import subprocess
import sys

from bench_triage import BARE
from common import JOBCTL, arguments, bench_dsn, build_table, compare, literal_sql, machine, table

from jobctl.ops import triage

RSS = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL,"
    " check=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def peak_rss_mb(command: list[str], env: dict[str, str]) -> float:
    out = subprocess.run(
        [sys.executable, "-c", RSS, *command], env=env, capture_output=True, text=True, check=True
    ).stdout
    return int(out.strip()) / 1024


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    print(f"machine: {machine()}")
    medians = compare(
        {
            "python -c pass": [sys.executable, "-c", "pass"],
            "jobctl --help": [*JOBCTL, "--help"],
            "jobctl --version": [*JOBCTL, "--version"],
        },
        max(args.runs, 15),
    )
    print(
        table(
            [
                {
                    "command": k,
                    "median s": f"{v:.3f}",
                    "vs python -c pass": f"{v / medians['python -c pass']:.1f}x",
                }
                for k, v in medians.items()
            ],
            ["command", "median s", "vs python -c pass"],
        )
    )
    imports = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "jobctl", "--help"],
        capture_output=True,
        text=True,
    ).stderr
    heavy = sorted(
        {
            line.rsplit("|", 1)[-1].strip().split(".")[0]
            for line in imports.splitlines()
            if line.rsplit("|", 1)[-1].strip().split(".")[0]
            in ("psycopg", "tabulate", "psycopg_binary")
        }
    )
    print(f"\njobctl --help imports psycopg or tabulate: {heavy or 'no'}")

    dsn = bench_dsn(args.dsn)
    build_table(dsn, "bench_rss", 150_000, 100_000, 100_000)
    env = {**os.environ, "JOBCTL_DSN": dsn}
    where = triage.ExpiredFilter().params()
    stuck_sql = literal_sql(
        dsn, "stuck", "bench_rss", {**where, "limit": 200_000, "no_lease": True}
    )
    rows = [
        {
            "command": "jobctl stuck -o json (100k rows, streamed)",
            "peak RSS MB": peak_rss_mb(
                [*JOBCTL, "--table", "bench_rss", "stuck", "-o", "json", "--limit", "200000"], env
            ),
        },
        {
            "command": "jobctl stuck -o jsonl (100k rows, streamed)",
            "peak RSS MB": peak_rss_mb(
                [*JOBCTL, "--table", "bench_rss", "stuck", "-o", "jsonl", "--limit", "200000"], env
            ),
        },
        {
            "command": "bare psycopg fetchall + json.dumps (same SQL)",
            "peak RSS MB": peak_rss_mb([sys.executable, "-c", BARE, dsn, stuck_sql], env),
        },
        {"command": "jobctl --help", "peak RSS MB": peak_rss_mb([*JOBCTL, "--help"], env)},
    ]
    for row in rows:
        row["peak RSS MB"] = f"{row['peak RSS MB']:.0f}"
    print()
    print(table(rows, ["command", "peak RSS MB"]))


if __name__ == "__main__":
    main()

"""The history's cost measured by an independent load generator: pgbench running the cycle.

Each configuration of bench_trigger.py (the same table with no trigger, each history mode,
version 1) gets a freshly loaded table, then

    pgbench -n -M prepared -c 4 -T SECONDS -r -f tests/bench/cycle.sql

(claim, 3 heartbeats, complete; one script run = one cycle), interleaved round after round.
Printed: cycles/s best and median, the loss against the no-trigger table (best against best,
median against median, and paired round by round), WAL bytes per cycle, and the heartbeat
statement's mean latency from pgbench's per-statement report (pgbench reports no
per-statement percentiles; the Python benchmark gives p50/p99).

    python tests/bench/bench_pgbench.py --seconds 10 --rounds 5
    python tests/bench/bench_pgbench.py --synchronous-commit off   # CPU-bound: the worst case
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench_trigger import (
    chosen_configs,
    config_arguments,
    report,
    server_cpu,
    setup,
    wal_lsn,
)
from common import arguments, bench_dsn, machine
from psycopg import conninfo

CYCLE = Path(__file__).with_name("cycle.sql")
_TPS = re.compile(r"^tps = ([\d.]+) \(without initial connection time\)", re.MULTILINE)
_DONE = re.compile(r"number of transactions actually processed: (\d+)")
_FAILED = re.compile(r"number of failed transactions: (\d+)")
_HEARTBEAT = re.compile(r"^\s+([\d.]+)\s+(?:\d+\s+)+UPDATE bench_trigger\s*$", re.MULTILINE)


def pgbench(
    dsn: str, seconds: float, synchronous_commit: str = "on", clients: int = 4
) -> tuple[float, int, float]:
    """cycles/s, cycles, the heartbeat statement's mean latency in ms."""
    params = conninfo.conninfo_to_dict(dsn)
    env = {**os.environ, "PGOPTIONS": f"-c synchronous_commit={synchronous_commit}"}
    for key, var in (("host", "PGHOST"), ("port", "PGPORT"), ("user", "PGUSER")):
        if params.get(key):
            env[var] = str(params[key])
    command = [
        "pgbench",
        "-n",
        "-M",
        "prepared",
        "-c",
        str(clients),
        "-T",
        str(int(seconds)),
        "-r",
        "-f",
        str(CYCLE),
        str(params["dbname"]),
    ]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    failed = _FAILED.search(out)
    if failed and int(failed[1]):
        print(f"  pgbench: {failed[1]} failed transactions", file=sys.stderr)
    tps = float(_TPS.search(out)[1])  # type: ignore[index]
    done = int(_DONE.search(out)[1])  # type: ignore[index]
    # the per-statement report lists the claim, three heartbeats, the completion: the
    # heartbeats are the 2nd-4th "UPDATE bench_trigger" lines (the claim starts with WITH)
    updates = [float(m) for m in _HEARTBEAT.findall(out)]
    beat = sum(updates[:3]) / 3 if len(updates) >= 3 else float("nan")
    return tps, done, beat


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--synchronous-commit", choices=["on", "off"], default="on")
    config_arguments(parser)
    args = parser.parse_args()
    configs = chosen_configs(args)
    if shutil.which("pgbench") is None:
        sys.exit("pgbench not found (apt-get install postgresql-client)")
    dsn = bench_dsn(args.dsn)
    print(
        f"machine: {machine()}; pgbench -n -M prepared -c 4 -T {args.seconds:g} -r -f "
        f"tests/bench/cycle.sql, {args.rounds} interleaved rounds, "
        f"synchronous_commit={args.synchronous_commit}"
    )
    figures: dict[str, dict[str, list]] = {
        label: {"rate": [], "wal": [], "cpu": [], "beat_mean": []} for label in configs
    }
    for n in range(args.rounds):
        for label, mode in configs.items():
            setup(dsn, mode)
            before, cpu_before = wal_lsn(dsn), server_cpu(dsn)
            rate, cycles, beat = pgbench(dsn, args.seconds, args.synchronous_commit)
            wal = (wal_lsn(dsn) - before) / max(cycles, 1)
            cpu_after = server_cpu(dsn)
            figures[label]["rate"].append(rate)
            figures[label]["wal"].append(wal)
            if cpu_before and cpu_after:
                figures[label]["cpu"].append((cpu_after - cpu_before) / max(cycles, 1) * 1e6)
            figures[label]["beat_mean"].append(beat)
            print(
                f"  round {n + 1} {label}: {rate:.0f} cycles/s, {wal:,.0f} B/cycle, "
                f"heartbeat {beat:.3f} ms",
                file=sys.stderr,
            )
    print(
        report(
            figures,
            "loss best: 1 - best cycles/s / the no-trigger table's best; loss median: the same "
            "with the medians; loss paired: median of each round's loss against the same "
            "round's no-trigger run; WAL and server CPU (all the server's processes): medians of "
            "the rounds; heartbeat mean: pgbench -r, median of the rounds.",
        )
    )


if __name__ == "__main__":
    main()

"""The big incident printed: ``stuck -o jsonl/json/csv`` against a bare typer + psycopg script.

A deploy that killed every worker leaves thousands of expired leases; the operator pipes
them somewhere. Each jobctl run is timed as a whole process against the floor for any Python
CLI: a script that imports typer, connects with psycopg, runs the same statement (jobctl's
``stuck``, parameters inlined) and prints the same rows in the same format with the standard
library (``json.dumps`` per row, ``json.dump`` of the list, ``csv.writer``). Interleaved
rounds, minimum and median, ratios within the run. Two tables of 1M rows, 20,000 of them
processing: 2,000 expired (``--expired 2000``, the issue's JIT cliff) and 20,000 expired.

``--outputs terminal`` runs ``stuck`` (its table) on a pseudo-terminal ``--columns`` wide, as
a person reads it, and times its first line as well as the whole run: the first screen at
once, not after every row is laid out. The bare script's first line is its JSON lines' on the
same terminal (it fetches every row, then prints).

    python tests/bench/bench_stream.py --runs 7
    python tests/bench/bench_stream.py --expired 20000 --outputs jsonl --baseline-src old=PATH
    python tests/bench/bench_stream.py --expired 20000 --outputs terminal --columns 80
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Sequence

from common import JOBCTL, arguments, bench_dsn, build_table, literal_sql, machine, table

from jobctl.ops import triage

ROWS, PROCESSING = 1_000_000, 20_000

BARE = """
import csv, datetime, json, sys, uuid

import psycopg
import typer

app = typer.Typer(add_completion=False)


def default(value):
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    return str(value)


@app.command()
def main(dsn: str, statement: str, output: str = "jsonl") -> None:
    with psycopg.connect(dsn) as conn:
        cursor = conn.execute(statement)
        names = [d.name for d in cursor.description]
        out = sys.stdout
        if output == "jsonl":
            for row in cursor:
                out.write(json.dumps(dict(zip(names, row)), default=default) + "\\n")
        elif output == "json":
            # one element a line, as jobctl writes it
            lines = (json.dumps(dict(zip(names, row)), default=default) for row in cursor)
            out.write("[\\n  " + ",\\n  ".join(lines) + "\\n]\\n")
        else:
            writer = csv.writer(out, lineterminator="\\n")
            writer.writerow(names)
            writer.writerows(
                [default(v) if isinstance(v, (datetime.datetime, uuid.UUID)) else v for v in row]
                for row in cursor
            )


app()
"""


def run(command: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """The whole process's wall time and its CPU time (user + system, from wait4: what a busy
    machine's queue for a core does not inflate)."""
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as common.timed
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command)
    return wall, usage.ru_utime + usage.ru_stime


def on_terminal(
    command: Sequence[str], env: dict[str, str], columns: int
) -> tuple[float, float, float]:
    """The command on a pseudo-terminal ``columns`` wide, 40 lines, read as fast as it
    writes: the time to its first line, its whole wall time, its CPU time (wait4)."""
    env = {k: v for k, v in env.items() if k not in ("PYTHONDONTWRITEBYTECODE", "NO_COLOR")}
    started = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdin, stdout and stderr the terminal
        os.execvpe(command[0], list(command), {**env, "TERM": "xterm-256color"})
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    first = None
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        if first is None and b"\n" in chunk:
            first = time.perf_counter() - started
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    os.close(fd)
    if os.waitstatus_to_exitcode(status) not in (0, 4):
        raise subprocess.CalledProcessError(os.waitstatus_to_exitcode(status), command)
    return first if first is not None else wall, wall, usage.ru_utime + usage.ru_stime


def rounds(
    commands: dict[str, Sequence[str]],
    runs: int,
    env: dict[str, str],
    columns: int | None = None,
) -> dict[str, list[tuple[float, ...]]]:
    """Each command's (wall, CPU) per round, on a terminal ``columns`` wide (first line,
    wall, CPU): one warm-up each, then ``runs`` interleaved."""

    def once(command: Sequence[str]) -> tuple[float, ...]:
        return run(command, env) if columns is None else on_terminal(command, env, columns)

    for command in commands.values():
        once(command)
    times: dict[str, list[tuple[float, ...]]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            times[name].append(once(command))
    return times


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--expired", default="2000,20000", help="expired leases, each a table")
    parser.add_argument("--outputs", default="jsonl,json,csv", help="and terminal (see above)")
    parser.add_argument("--columns", type=int, default=120, help="the terminal's width")
    parser.add_argument(
        "--baseline-src",
        action="append",
        default=[],
        help="another jobctl source tree to time too, as NAME=PATH (repeatable)",
    )
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    baselines = dict(b.split("=", 1) for b in args.baseline_src)
    print(
        f"machine: {machine(args.dsn)}; {args.runs} interleaved rounds, wall time of the whole "
        "process, stdout a pipe"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(BARE)
    env = {**os.environ, "JOBCTL_DSN": dsn, "NO_COLOR": "1"}
    results: list[dict[str, str]] = []
    terminal: list[dict[str, str]] = []
    for expired in map(int, args.expired.split(",")):
        name = "bench_1m" if expired == 2_000 else f"bench_1m_{expired}_expired"
        build_table(dsn, name, ROWS, PROCESSING, expired)
        params = {**triage.ExpiredFilter().params(), "limit": 100_000, "no_lease": True}
        statement = literal_sql(dsn, "stuck", name, params)
        for out in args.outputs.split(","):
            if out == "terminal":
                terminal.append(
                    screen_rounds(name, expired, statement, dsn, script.name, baselines, env, args)
                )
                continue
            stuck = ["--table", name, "stuck", "-o", out, "--limit", "100000"]
            commands = {
                "jobctl": [*JOBCTL, *stuck],
                **{  # python -m finds jobctl in the cwd first: run from the tree itself
                    label: ["env", "-C", path, f"PYTHONPATH={path}", *JOBCTL, *stuck]
                    for label, path in baselines.items()
                },
                "bare": [sys.executable, script.name, dsn, statement, "--output", out],
            }
            times = rounds(commands, args.runs, env)
            floor = times["bare"]
            row = {"expired": f"{expired:,}", "output": out}
            for label, values in times.items():
                wall = [w for w, _ in values]
                cpu = statistics.median(c for _, c in values)
                row[f"{label} s"] = f"{min(wall):.3f} ({statistics.median(wall):.3f})"
                row[f"{label} cpu"] = f"{cpu:.3f}"
                if label != "bare":
                    paired = statistics.median(
                        w / f for (w, _), (f, _) in zip(values, floor, strict=True)
                    )
                    best = min(wall) / min(w for w, _ in floor)
                    cpu_ratio = cpu / statistics.median(c for _, c in floor)
                    row[f"{label}/bare"] = f"{best:.2f} ({paired:.2f}); cpu {cpu_ratio:.2f}"
            results.append(row)
            print(f"  {name} -o {out} done", file=sys.stderr)
    os.unlink(script.name)
    labels = ["jobctl", *baselines]
    if terminal:
        print(
            f"on a pseudo-terminal {args.columns} columns wide: the first line's time, minimum "
            "(median); whole run's wall time, median; cpu: the process's, median. The bare "
            "script prints JSON lines there; jobctl --limit 40 is one screen's worth"
        )
        heads = [f"{b} {k}" for b in [*labels, "one screen", "bare"] for k in ("first", "all")]
        print(table(terminal, ["expired", *heads, *(f"{b} cpu" for b in labels)]))
    if not results:
        return
    print(
        "wall time: minimum (median) of the rounds; cpu: the process's user + system time, "
        "median; ratios: minimum to minimum (paired: the median of each round's ratio); cpu: "
        "median to median"
    )
    print(
        table(
            results,
            [
                "expired",
                "output",
                *(f"{b} s" for b in labels),
                "bare s",
                *(f"{b} cpu" for b in labels),
                "bare cpu",
                *(f"{b}/bare" for b in labels),
            ],
        )
    )


def screen_rounds(
    name: str,
    expired: int,
    statement: str,
    dsn: str,
    script: str,
    baselines: dict[str, str],
    env: dict[str, str],
    args: argparse.Namespace,
) -> dict[str, str]:
    """``stuck``'s table of every expired lease on a terminal, each tree's, against one
    screen's worth (``--limit 40``) and the bare script's JSON lines on the same terminal."""
    stuck = ["--table", name, "stuck", "--limit", "100000"]
    commands = {
        "jobctl": [*JOBCTL, *stuck],
        **{
            label: ["env", "-C", path, f"PYTHONPATH={path}", *JOBCTL, *stuck]
            for label, path in baselines.items()
        },
        "one screen": [*JOBCTL, "--table", name, "stuck", "--limit", "40"],
        "bare": [sys.executable, script, dsn, statement, "--output", "jsonl"],
    }
    times = rounds(commands, args.runs, env, args.columns)
    row = {"expired": f"{expired:,}"}
    for label, values in times.items():
        first = [f for f, _, _ in values]
        row[f"{label} first"] = f"{min(first):.3f} ({statistics.median(first):.3f})"
        row[f"{label} all"] = f"{statistics.median(w for _, w, _ in values):.3f}"
        row[f"{label} cpu"] = f"{statistics.median(c for _, _, c in values):.3f}"
    print(f"  {name} on a terminal done", file=sys.stderr)
    return row


if __name__ == "__main__":
    main()

"""The pause check's cost on the workers' claim: the claim jobctl renders with it (nothing
paused; another kind paused) against the same claim without it, under pgbench.

Each configuration's claim and completion are the statements ``jobctl schema statements``
renders for the table (the worker API's blocks), the claim rendered once with the pause check
(history 010 installed, kind and queue mapped) and once as before it (the same table read
without jobctl.pauses), turned into a pgbench script (claim, complete: one cycle; no
heartbeats, so the claim weighs the most it can). Configurations are interleaved round after
round, each on a freshly loaded table:

    pgbench -n -M prepared|simple -c 4 -T SECONDS -r -f <the configuration's script>

Printed per configuration: cycles/s (best, median), the loss against the claim without the
check (best against best, median against median, paired round by round), the server's CPU
per cycle (all its processes) and the claim's mean latency (pgbench -r). By default on a
private server started for the run (tests/cluster.py: initdb, fsync off), so that the
server's CPU is this run's alone on a shared machine; --dsn SERVER --shared runs on yours.

    python tests/bench/bench_pause.py --seconds 10 --rounds 6
    python tests/bench/bench_pause.py --protocol simple   # lease.Worker's default: no PREPARE
    python tests/bench/bench_pause.py --worker --rounds 8  # lease.Worker itself, its copy

--worker times lease.Worker's own cycle (claim, complete) in this process, one connection,
unprepared: the design's claim with no pause check at all (the floor: the Worker with the
check taken out), the check read per claim (the subquery form, before lease.Worker kept a
copy), and the Worker as it is (the table's pauses read at most once a second, passed as a
parameter while one is on), nothing paused and another kind paused.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
from bench_trigger import paired_loss, server_cpu
from common import arguments, machine
from psycopg import conninfo, sql

from jobctl import db, lease
from jobctl.schema import statements
from jobctl.sql import queries

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cluster

JOBS = 400_000
TABLE = "bench_pause"
FLOOR = "claim without the pause check"
CONFIGS = {
    FLOOR: (False, False),  # (the check rendered, a pause of another kind recorded)
    "with the check, nothing paused": (True, False),
    "with the check, another kind paused": (True, True),
}
_TPS = re.compile(r"^tps = ([\d.]+) \(without initial connection time\)", re.MULTILINE)
_DONE = re.compile(r"number of transactions actually processed: (\d+)")
_LATENCY = re.compile(r"^\s+([\d.]+)\s+\d+\s+(?:WITH|UPDATE)", re.MULTILINE)


@contextlib.contextmanager
def server(args) -> Iterator[str]:
    """The server's DSN: a private one started for the run (the default), or --dsn."""
    if args.shared:
        yield args.dsn
        return
    with psycopg.connect(args.dsn) as c:
        major = int(c.execute("SHOW server_version_num").fetchone()[0]) // 10_000  # type: ignore[index]
    bindir = cluster.bindir_for(major)
    if bindir is None:
        sys.exit(f"no PostgreSQL {major} server binaries here: run with --shared")
    with cluster.replicated(bindir) as made:
        made.primary.conf("shared_buffers = 256MB\nautovacuum = off\n")
        made.primary.stop()
        made.primary.start()
        yield made.primary.dsn


def setup(dsn: str) -> str:
    """A database with the reference table (kind and queue mapped, history 010) and jobctl's
    DSN for it."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {TABLE}")
        admin.execute(f"CREATE DATABASE {TABLE}")
    bench = conninfo.make_conninfo(dsn, dbname=TABLE)
    jobctl = [sys.executable, "-m", "jobctl", "--dsn", bench, "--table", TABLE]
    subprocess.run([*jobctl, "schema", "apply", "--create", "--yes"], check=True, text=True,
                   capture_output=True)  # fmt: skip
    with psycopg.connect(bench, autocommit=True) as c:
        c.execute(f"ALTER TABLE {TABLE} ADD COLUMN kind text")
    mapped = ["--column", "kind=kind", "--column", "queue=queue"]
    subprocess.run([*jobctl, "schema", "apply", *mapped, "--yes"], check=True, text=True,
                   capture_output=True)  # fmt: skip
    return bench


def scripts(dsn: str, directory: Path, protocol: str, heartbeats: int) -> dict[str, Path]:
    """Each configuration's pgbench script from the rendered claim and completion."""
    made = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        table = db.resolve_table(conn, TABLE)
        assert table.pauses, "history 010 is not installed"
        for label, (checked, _) in CONFIGS.items():
            shaped = table if checked else dataclasses.replace(table, pauses=False)
            found = {s.name: s.sql for s in statements.render(conn, shaped)}
            assert ("jobctl.pauses" in found["claim"]) == checked
            claim = (
                found["claim"]
                .replace("$1::pg_catalog.text", "('pgbench-' || :client_id)::pg_catalog.text")
                .replace("$2::pg_catalog.uuid", "pg_catalog.gen_random_uuid()")
            )
            seconds = (
                "($3::pg_catalog.float8 OPERATOR(pg_catalog.*) '1 second'::pg_catalog.interval)"
            )
            claim = claim.replace(seconds, "'60 seconds'::pg_catalog.interval")
            # pgbench -M simple puts a variable's text in as it is: the uuid needs quotes there
            token = ":attempt_token" if protocol == "prepared" else "':attempt_token'"
            complete = found["complete"].replace("$1", ":id").replace("$2", token)
            path = directory / f"{len(made)}.sql"
            beat = (
                found["heartbeat"]
                .replace("$1", ":id")
                .replace("$2::pg_catalog.text", "('pgbench-' || :client_id)::pg_catalog.text")
                .replace("$3", token)
                .replace(seconds.replace("$3", "$4"), "'60 seconds'::pg_catalog.interval")
            )
            beats = "".join(f"{beat.strip()};\n" for _ in range(heartbeats))
            path.write_text(f"{claim.strip()} \\gset\n{beats}{complete.strip()};\n")
            made[label] = path
    return made


def load(dsn: str, paused: bool, jobs: int) -> None:
    """A fresh table of ``jobs`` queued jobs of three kinds (none of the paused one)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"TRUNCATE {TABLE}")
        c.execute("DELETE FROM jobctl.pauses")
        c.execute(
            f"INSERT INTO {TABLE} (kind, queue, recovery_policy) "
            "SELECT (ARRAY['send_email', 'resize_image', 'sync_crm'])[g %% 3 + 1], 'main', 'auto' "
            "FROM generate_series(1, %s) g",
            (jobs,),
        )
        if paused:
            c.execute(
                "INSERT INTO jobctl.pauses (job_table, dimension, value, reason) "
                "VALUES (%s, 'kind', 'charge_card', 'bench')",
                (f"public.{TABLE}",),
            )
        c.execute(f"VACUUM ANALYZE {TABLE}")
        c.execute("VACUUM ANALYZE jobctl.pauses")
        c.execute("CHECKPOINT")


def pgbench(dsn: str, script: Path, args: argparse.Namespace) -> tuple[float, int, float]:
    """cycles/s, cycles, the claim's mean latency in ms (for --seconds, or --transactions
    per client)."""
    params = conninfo.conninfo_to_dict(dsn)
    env = {**os.environ, "PGOPTIONS": "-c synchronous_commit=off"}
    for key, var in (("host", "PGHOST"), ("port", "PGPORT"), ("user", "PGUSER")):
        if params.get(key):
            env[var] = str(params[key])
    length = ["-t", str(args.transactions)] if args.transactions else ["-T", str(int(args.seconds))]
    command = ["pgbench", "-n", "-M", args.protocol, "-c", str(args.clients), *length, "-r",
               "-f", str(script), str(params["dbname"])]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"pgbench: {done.stderr[-2000:]}\n{script.read_text()}")
    out = done.stdout
    latencies = [float(m) for m in _LATENCY.findall(out)]
    return (
        float(_TPS.search(out)[1]),  # type: ignore[index]
        int(_DONE.search(out)[1]),  # type: ignore[index]
        latencies[0] if latencies else float("nan"),
    )


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--protocol", choices=["prepared", "simple"], default="prepared")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--heartbeats", type=int, default=0, help="heartbeats per cycle (3: the design's cycle)"
    )
    parser.add_argument("--transactions", type=int, help="cycles per client (instead of -T)")
    parser.add_argument("--jobs", type=int, default=JOBS, help="queued jobs in each run's table")
    parser.add_argument("--shared", action="store_true", help="run on --dsn, not a private one")
    parser.add_argument(
        "--per-claim", action="store_true", help="the backend's CPU per claim instead of pgbench"
    )
    parser.add_argument(
        "--worker", action="store_true", help="lease.Worker's own cycle instead of pgbench"
    )
    parser.add_argument("--cycles", type=int, default=3000, help="--worker: cycles per round")
    args = parser.parse_args()
    if shutil.which("pgbench") is None:
        sys.exit("pgbench not found (apt-get install postgresql-client)")
    with server(args) as dsn, tempfile.TemporaryDirectory() as tmp:
        bench = setup(dsn)
        if args.worker:
            print(
                f"machine: {machine(dsn)}; lease.Worker unprepared, claim + complete, "
                f"{args.rounds} interleaved rounds of {args.cycles:,} cycles, "
                f"{min(args.jobs, 50_000):,} jobs, synchronous_commit=off"
            )
            print(worker_cycles(bench, args.rounds, args.cycles, min(args.jobs, 50_000)))
            return
        if args.per_claim:
            print(f"machine: {machine(dsn)}; {args.rounds} interleaved rounds of 1,500 claims")
            print(per_claim(bench, args.rounds))
            return
        made = scripts(bench, Path(tmp), args.protocol, args.heartbeats)
        print(
            f"machine: {machine(dsn)}; pgbench -n -M {args.protocol} -c {args.clients} "
            + (f"-t {args.transactions}" if args.transactions else f"-T {args.seconds:g}")
            + f" -r (claim, {args.heartbeats} heartbeat(s), complete), {args.rounds} interleaved "
            f"rounds, "
            f"synchronous_commit=off, {args.jobs:,} jobs, "
            f"{'a private server' if not args.shared else 'the server given'}"
        )
        figures: dict[str, dict[str, list[float]]] = {
            label: {"rate": [], "cpu": [], "claim": []} for label in CONFIGS
        }
        for n in range(args.rounds):
            order = list(CONFIGS) if n % 2 == 0 else list(reversed(CONFIGS))
            for label in order:
                load(bench, CONFIGS[label][1], args.jobs)
                cpu_before = server_cpu(bench)
                rate, cycles, claim = pgbench(bench, made[label], args)
                cpu_after = server_cpu(bench)
                figures[label]["rate"].append(rate)
                figures[label]["claim"].append(claim)
                if cpu_before is not None and cpu_after is not None:
                    figures[label]["cpu"].append((cpu_after - cpu_before) / max(cycles, 1) * 1e6)
                print(f"  round {n + 1} {label}: {rate:.0f} cycles/s, claim {claim:.3f} ms",
                      file=sys.stderr)  # fmt: skip
    print(report(figures))


def per_claim(dsn: str, rounds: int, calls: int = 1500) -> str:
    """The backend's own CPU per claim (unprepared, as lease.Worker runs it by default),
    nothing paused: the design's claim without the check, with the check reading the pauses
    (the subquery ``schema statements`` renders), and lease.Worker's (the pauses given, an
    empty array): each claim sent by psycopg as the Worker sends it, in a transaction rolled
    back (the same first job every time), the backend's user + system time read from /proc,
    the variants interleaved round after round, in turn forward and backward. The figure a
    loaded machine moves least."""
    import uuid

    from bench_trigger import _ticks

    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        load(dsn, False, 20_000)
        worker = lease.Worker(conn, "bench", table=TABLE)
        bare = {**worker.table.fragments, "claim_pause_check": sql.SQL("")}
        claims = {
            FLOOR: queries.query("claim", **bare),
            "with the check, nothing paused": queries.query("claim", **worker.table.fragments),
            "lease.Worker, the pauses given, nothing paused": worker._statements[
                "claim_by_pauses_read"
            ],
        }
        params = {"worker": "bench", "attempt_token": uuid.uuid4(), "lease": dt.timedelta(60)}
        pid = conn.info.backend_pid
        spent: dict[str, list[float]] = {label: [] for label in claims}
        for n in range(rounds):
            for label in list(claims) if n % 2 == 0 else list(reversed(claims)):
                statement = claims[label]
                given = {**params, "paused": []} if label.startswith("lease") else params
                before = _ticks(pid)
                for _ in range(calls):
                    with conn.transaction(force_rollback=True):
                        conn.execute(statement, given, prepare=False)
                spent[label].append((_ticks(pid) - before) / os.sysconf("SC_CLK_TCK") / calls)
    floor = statistics.median(spent[FLOOR])
    return "\n".join(
        f"{label}: {statistics.median(times) * 1e6:.0f} µs of the backend's CPU per claim"
        + (
            ""
            if label == FLOOR
            else f" ({(statistics.median(times) / floor - 1) * 100:+.1f} %, paired "
            f"{-paired_loss(times, spent[FLOOR]) * 100:+.1f} %)"
        )
        for label, times in spent.items()
    )


WORKER_FLOOR = "the design's claim, no pause check"
WORKERS = {  # label: (how the Worker claims, a pause of another kind recorded)
    WORKER_FLOOR: ("bare", False),
    "the check read per claim (before)": ("per-claim", False),
    "pauses read once a second, nothing paused": ("cached", False),
    "pauses read once a second, another kind paused": ("cached", True),
}


def _worker(conn: psycopg.Connection, how: str) -> lease.Worker:
    """A Worker claiming as ``how`` says: as it is (cached), or with its claim replaced by the
    design's bare claim or by the claim with the per-claim subquery (the block as the
    statements render it without a copy)."""
    worker = lease.Worker(conn, "bench", table=TABLE)
    if how == "cached":
        return worker
    worker._pausable = False  # its claim is then the statement named "claim", set here
    if how == "bare":
        bare = {**worker.table.fragments, "claim_pause_check": sql.SQL("")}
        worker._statements["claim"] = queries.query("claim", **bare)
    return worker


def worker_cycles(dsn: str, rounds: int, cycles: int, jobs: int) -> str:
    """lease.Worker's cycles per second and the backend's CPU per cycle, configurations
    interleaved round after round, each round on a table loaded afresh."""
    from bench_trigger import _ticks
    from tabulate import tabulate

    rate: dict[str, list[float]] = {label: [] for label in WORKERS}
    cpu: dict[str, list[float]] = {label: [] for label in WORKERS}
    for n in range(rounds):
        order = list(WORKERS) if n % 2 == 0 else list(reversed(WORKERS))
        for label in order:
            how, paused = WORKERS[label]
            load(dsn, paused, jobs)
            with psycopg.connect(dsn, autocommit=True, options="-c synchronous_commit=off") as conn:
                worker = _worker(conn, how)
                pid = conn.info.backend_pid
                before, started = _ticks(pid), time.perf_counter()
                for _ in range(cycles):
                    job = worker.claim()
                    assert job is not None
                    worker.complete(job)
                elapsed = time.perf_counter() - started
                spent = (_ticks(pid) - before) / os.sysconf("SC_CLK_TCK")
            rate[label].append(cycles / elapsed)
            cpu[label].append(spent / cycles * 1e6)
            print(f"  round {n + 1} {label}: {cycles / elapsed:.0f} cycles/s", file=sys.stderr)
    rows = []
    for label in WORKERS:
        row = {
            "lease.Worker": label,
            "cycles/s median": f"{statistics.median(rate[label]):.0f}",
            "backend CPU µs/cycle": f"{statistics.median(cpu[label]):.0f}",
        }
        if label != WORKER_FLOOR:
            row["loss paired"] = f"{paired_loss(rate[label], rate[WORKER_FLOOR]) * 100:.1f} %"
            row["CPU paired"] = f"{-paired_loss(cpu[label], cpu[WORKER_FLOOR]) * 100:+.1f} %"
        else:
            row["loss paired"] = row["CPU paired"] = "-"
        rows.append(row)
    return tabulate(rows, headers="keys", tablefmt="github") + (
        "\n\nloss paired: the median of each round's 1 - cycles/s against the same round's "
        "design's claim; CPU paired: the backend's CPU per cycle against the same round's."
    )


def report(figures: dict[str, dict[str, list[float]]]) -> str:
    from tabulate import tabulate

    floor = figures[FLOOR]
    rows = []
    for label, f in figures.items():
        row = {
            "configuration": label,
            "cycles/s best": f"{max(f['rate']):.0f}",
            "cycles/s median": f"{statistics.median(f['rate']):.0f}",
        }
        if label == FLOOR:
            row |= {"loss best": "-", "loss median": "-", "loss paired": "-"}
        else:
            row |= {
                "loss best": f"{(1 - max(f['rate']) / max(floor['rate'])) * 100:.1f} %",
                "loss median": f"{(1 - statistics.median(f['rate']) / statistics.median(floor['rate'])) * 100:.1f} %",  # noqa: E501
                "loss paired": f"{paired_loss(f['rate'], floor['rate']) * 100:.1f} %",
            }
        if f["cpu"]:
            cpu = statistics.median(f["cpu"])
            row["server CPU µs/cycle"] = f"{cpu:.0f}"
            row["CPU vs without"] = (
                f"{(cpu / statistics.median(floor['cpu']) - 1) * 100:+.1f} %"
                if label != FLOOR
                else "-"
            )
            row["CPU paired"] = (
                f"{-paired_loss(f['cpu'], floor['cpu']) * 100:+.1f} %" if label != FLOOR else "-"
            )
        row["claim mean ms"] = f"{statistics.median(f['claim']):.3f}"
        rows.append(row)
    return tabulate(rows, headers="keys", tablefmt="github") + (
        "\n\nloss: 1 - cycles/s against the claim without the check (paired: the median of "
        "each round's); server CPU: all the server's processes, median of the rounds; claim "
        "mean: pgbench -r, median of the rounds; CPU paired: the median of each round's server "
        "CPU per cycle against the same round's without the check (the figure a loaded "
        "machine moves least)."
    )


if __name__ == "__main__":
    main()

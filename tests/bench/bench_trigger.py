"""The history's cost on the workers' cycles, each mode against the same table with no trigger.

4 worker processes run the lease design's cycle (claim, 3 heartbeats, complete: jobctl's
lease.Worker, one autocommitted statement each) for --seconds per configuration; the
configurations are interleaved, round after round, each on a freshly loaded table. Printed per
configuration: cycles/s (best and median over the rounds), the loss against the table with no
trigger (best against best, median against median, and paired: the median of each round's
loss against that round's no-trigger run), WAL bytes per cycle, and the heartbeat
statement's latency as the worker sees it (p50, p99, pooled over the rounds).

    python tests/bench/bench_trigger.py --seconds 10 --rounds 7
    python tests/bench/bench_trigger.py --synchronous-commit off   # CPU-bound: the worst case
    python tests/bench/bench_pgbench.py --seconds 10 --rounds 5   # the same, load by pgbench
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

import psycopg
from common import arguments, bench_dsn, machine, table
from psycopg import conninfo, sql

from jobctl import db, lease
from jobctl.schema import apply as schema_apply
from jobctl.schema import history
from jobctl.schema import steps as schema_steps
from jobctl.sql import queries

NAME = "bench_trigger"
JOBS = 150_000


# version 2's trigger (jobctl before the per-table function), on the shared function that
# migration 002 still installs: the 'before' of the per-table function
V2_LATE_TRIGGER = """
CREATE TRIGGER jobctl_history BEFORE UPDATE ON {t}
    FOR EACH ROW WHEN (NEW.status <> 'processing' OR NEW.jobctl_action IS NOT NULL
        OR NEW.heartbeat_at - coalesce(OLD.heartbeat_at, OLD.reserved_at)
           > OLD.lease_expires_at - NEW.heartbeat_at)
    EXECUTE FUNCTION jobctl.record_change('late', '2')
"""

# label -> history mode (None: the same table with no trigger; "bare": a table made with the
# lease design's columns alone, none of jobctl's, no trigger; "v2": the shared function of
# version 2 in late mode; "late+set": the per-table function with SET search_path added).
# Version 1 (jobctl 0.2) is no longer measured: its function's ON CONFLICT needs the
# attempts' primary key, which migration 002 dropped.
CONFIGS = {
    "no trigger": None,
    "lease columns alone": "bare",
    "transitions (default)": "transitions",
    "audit only": "audit",
    "late (opt-in)": "late",
    "exact (opt-in)": "exact",
}
# earlier designs, measured with --variants: version 2's trigger, and a SET search_path;
# and the function of trigger version 3 (before the history kept long texts cut, history 011)
VARIANTS = {
    "late, version 2": "v2",
    "late + SET search_path": "late+set",
    "late, version 3": "v3:late",
    "exact, version 3": "v3:exact",
}
# the reference table's function and trigger as trigger version 3 made them
V3_FIXTURE = Path(__file__).parents[1] / "fixtures" / "history_v3_jobs.sql"
FLOOR = "no trigger"
BARE = "lease columns alone"  # the floor of the cautious adopter's question: nothing of jobctl's


def config_arguments(parser: argparse.ArgumentParser) -> None:
    """--variants and --only: which configurations a run measures."""
    parser.add_argument(
        "--variants", action="store_true", help="also the earlier designs (version 2, SET)"
    )
    parser.add_argument(
        "--only", help="these modes, comma-separated (e.g. transitions,audit), and no trigger"
    )


def chosen_configs(args: argparse.Namespace) -> dict[str, str | None]:
    """label -> mode of the configurations --variants and --only ask for."""
    configs = CONFIGS | (VARIANTS if args.variants else {})
    if args.only:
        wanted = {None, "bare", *args.only.split(",")}
        configs = {
            label: mode
            for label, mode in configs.items()
            if mode in wanted or (mode or "").removeprefix("v3:") in wanted
        }
    return configs


def setup(dsn: str, mode: str | None) -> None:
    """The jobs table with JOBS queued rows and the history in ``mode``, history emptied."""
    settings = db.Settings(dsn=dsn)
    t = sql.Identifier(NAME)
    with db.connect(settings) as conn:
        has = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL AS table, EXISTS (SELECT FROM pg_attribute"
            " WHERE attrelid = to_regclass(%s) AND attname = 'jobctl_action'"
            " AND NOT attisdropped) AS columns",
            (NAME, NAME),
        ).fetchone()
        bare = mode == "bare"
        if not has["table"] or has["columns"] == bare:
            # made afresh rather than its columns dropped: a dropped column stays in every
            # new row's null bitmap, and the bare table must be the one the design alone makes
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(t))
            steps = schema_apply.plan_apply(conn, NAME, create=True)
            if bare:
                steps = [
                    s
                    for s in steps
                    if not s.what.startswith(("add the history columns", "install the history"))
                ]
            schema_steps.apply(conn, settings, steps)
        conn.execute(sql.SQL("TRUNCATE {}, jobctl.events, jobctl.attempts").format(t))
        conn.execute(sql.SQL("DROP TRIGGER IF EXISTS jobctl_history ON {}").format(t))
        for old in history.OLD_TRIGGERS:
            conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(old), t))
        if mode == "v2":
            conn.execute(sql.SQL(V2_LATE_TRIGGER).format(t=t))
        elif mode is not None and mode.startswith("v3:"):
            install_version_3(conn, mode.removeprefix("v3:"))
        elif mode is not None and mode != "bare":
            target = history.Target.of(db.resolve_table(conn, NAME))
            base = mode.removesuffix("+set")
            conn.execute(history.install_sql(target, base, history.wanted(conn, target, base)))
            if mode.endswith("+set"):
                conn.execute(
                    sql.SQL("ALTER FUNCTION {}() SET search_path = pg_catalog, pg_temp").format(
                        sql.Identifier("jobctl", target.function)
                    )
                )
        conn.execute(
            sql.SQL("INSERT INTO {} (status) SELECT 'queued' FROM generate_series(1, %s)").format(
                t
            ),
            (JOBS,),
        )
        # no autovacuum during the runs: one started at a random point of some runs and not
        # of others; every configuration starts from a freshly loaded, vacuumed table instead
        conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = off)").format(t))
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(t))
        conn.execute("CHECKPOINT")  # full-page writes start afresh for every configuration


def install_version_3(conn: psycopg.Connection, mode: str) -> None:
    """The function of trigger version 3 (tests/fixtures: made for public.jobs, renamed here;
    its body is the same for every mode), and today's trigger of ``mode`` calling it."""
    target = history.Target.of(db.resolve_table(conn, NAME))
    text = V3_FIXTURE.read_text()
    function = text[
        text.index("CREATE OR REPLACE FUNCTION") : text.index("CREATE OR REPLACE TRIGGER")
    ]
    function = function.replace(history.function_name("public", "jobs"), target.function)
    function = function.replace('"public"."jobs"', sql.Identifier("public", NAME).as_string(conn))
    conn.execute(function.replace("public.jobs", f"public.{NAME}"))
    want = history.wanted(conn, target, mode)
    conn.execute(
        queries.query(
            "history_trigger",
            target.ident,
            trigger=sql.Identifier(history.TRIGGER),
            event=sql.SQL(want.event),
            when=sql.SQL(want.when),
            function=sql.Identifier("jobctl", target.function),
            mode=sql.Literal(mode),
            version=sql.Literal("3"),
            digest=sql.Literal("version 3"),
        )
    )


def worker_dsn(dsn: str, synchronous_commit: str) -> str:
    """The workers' DSN: ``off`` makes commits not wait for the disk (CPU-bound: the worst
    case for the trigger's relative cost; on a shared machine, less noise from others' I/O)."""
    return conninfo.make_conninfo(dsn, options=f"-c synchronous_commit={synchronous_commit}")


def worker(dsn: str, name: str, seconds: float, results: multiprocessing.Queue) -> None:
    done, beats = 0, []
    with psycopg.connect(dsn, autocommit=True) as conn:
        w = lease.Worker(conn, name, lease_seconds=60, table=NAME)
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at:
            job = w.claim()
            if job is None:
                break
            for _ in range(3):
                started = time.perf_counter()
                job = w.heartbeat(job)
                beats.append(time.perf_counter() - started)
            w.complete(job)
            done += 1
    results.put((done, beats))


def server_cpu(dsn: str) -> float | None:
    """CPU seconds the server has used: the postmaster, every live child, and the children it
    has reaped (their time is added to its own). Robust to a loaded machine, unlike a rate:
    waiting for a CPU costs no CPU. None when the server is not on this machine."""
    try:
        with psycopg.connect(dsn) as conn:
            datadir = conn.execute("SHOW data_directory").fetchone()[0]
        with open(os.path.join(datadir, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        total = _ticks(postmaster, children=True)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if _stat(int(entry))[1] == postmaster:
                        total += _ticks(int(entry))
                except OSError:
                    pass  # exited meanwhile: counted in the postmaster's children
        return total / os.sysconf("SC_CLK_TCK")
    except (OSError, psycopg.Error):
        return None


def _stat(pid: int) -> list[int]:
    """/proc/PID/stat from the state on: [state, ppid, ...] with numbers as ints."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return [0, *map(int, fields[1:])]


def _ticks(pid: int, *, children: bool = False) -> int:
    fields = _stat(pid)  # utime, stime, cutime, cstime are fields 14-17 of stat
    return fields[11] + fields[12] + ((fields[13] + fields[14]) if children else 0)


def wal_lsn(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


def measure(
    dsn: str, seconds: float, synchronous_commit: str = "on", workers: int = 4
) -> tuple[float, float, float | None, list[float]]:
    """cycles/s, WAL bytes per cycle, server CPU µs per cycle, heartbeat latencies (s)."""
    results: multiprocessing.Queue = multiprocessing.Queue()
    workers_dsn = worker_dsn(dsn, synchronous_commit)
    procs = [
        multiprocessing.Process(target=worker, args=(workers_dsn, f"w{i}", seconds, results))
        for i in range(workers)
    ]
    wal_before, cpu_before = wal_lsn(dsn), server_cpu(dsn)
    for p in procs:
        p.start()
    outcomes = [results.get() for _ in procs]
    for p in procs:
        p.join()
    cycles = max(sum(done for done, _ in outcomes), 1)
    wal = (wal_lsn(dsn) - wal_before) / cycles
    cpu_after = server_cpu(dsn)
    cpu = (cpu_after - cpu_before) / cycles * 1e6 if cpu_before and cpu_after else None
    return cycles / seconds, wal, cpu, [b for _, beats in outcomes for b in beats]


def paired_loss(rates: list[float], floor: list[float]) -> float:
    """The median over the rounds of 1 - this round's rate / the no-trigger table's rate in the
    same round: the configurations of a round run minutes apart at most, the rounds further."""
    return statistics.median(1 - r / n for r, n in zip(rates, floor, strict=True))


def report(figures: dict[str, dict[str, list]], unit_note: str) -> str:
    """The table of a run: rates and losses per round, WAL, heartbeat percentiles."""
    floor = figures[FLOOR]["rate"]
    rows = []
    for label, f in figures.items():
        best, median = max(f["rate"]), statistics.median(f["rate"])
        beats = sorted(f.get("beats", []))
        row = {
            "configuration": label,
            "cycles/s best": f"{best:.0f}",
            "cycles/s median": f"{median:.0f}",
            "loss best": f"{(1 - best / max(floor)) * 100:.1f} %" if label != FLOOR else "-",
            "loss median": f"{(1 - median / statistics.median(floor)) * 100:.1f} %"
            if label != FLOOR
            else "-",
            "loss paired": f"{paired_loss(f['rate'], floor) * 100:.1f} %"
            if label != FLOOR
            else "-",
        }
        if BARE in figures:  # against the table with nothing of jobctl's on it
            bare = figures[BARE]["rate"]
            row["vs lease columns alone, paired"] = (
                f"{paired_loss(f['rate'], bare) * 100:.1f} %" if label != BARE else "-"
            )
        row |= {
            "WAL B/cycle": f"{statistics.median(f['wal']):,.0f}",
        }
        if f.get("cpu"):
            cpu = statistics.median(f["cpu"])
            row["server CPU µs/cycle"] = f"{cpu:.0f}"
            row["CPU vs no trigger"] = (
                f"{(cpu / statistics.median(figures[FLOOR]['cpu']) - 1) * 100:+.1f} %"
                if label != FLOOR
                else "-"
            )
        if beats:
            row["heartbeat p50 ms"] = f"{beats[len(beats) // 2] * 1000:.2f}"
            row["heartbeat p99 ms"] = f"{beats[int(len(beats) * 0.99)] * 1000:.2f}"
        if f.get("beat_mean"):
            row["heartbeat mean ms"] = f"{statistics.median(f['beat_mean']):.3f}"
        rows.append(row)
    columns = [c for c in rows[0] if any(c in r for r in rows)]
    return table(rows, columns) + "\n" + unit_note


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--synchronous-commit", choices=["on", "off"], default="on")
    config_arguments(parser)
    args = parser.parse_args()
    configs = chosen_configs(args)
    dsn = bench_dsn(args.dsn)
    print(
        f"machine: {machine()}; 4 worker processes (Python, lease.Worker), "
        f"{args.seconds:g}s per configuration, {args.rounds} interleaved rounds, "
        f"synchronous_commit={args.synchronous_commit}"
    )
    figures: dict[str, dict[str, list]] = {
        label: {"rate": [], "wal": [], "cpu": [], "beats": []} for label in configs
    }
    for n in range(args.rounds):
        for label, mode in configs.items():
            setup(dsn, mode)
            rate, wal, cpu, beats = measure(dsn, args.seconds, args.synchronous_commit)
            figures[label]["rate"].append(rate)
            figures[label]["wal"].append(wal)
            if cpu is not None:
                figures[label]["cpu"].append(cpu)
            figures[label]["beats"].extend(beats)
            print(
                f"  round {n + 1} {label}: {rate:.0f} cycles/s, {wal:,.0f} B/cycle, "
                f"server CPU {cpu or 0:.0f} µs/cycle",
                file=sys.stderr,
            )
    print(
        report(
            figures,
            "loss best: 1 - best cycles/s / the no-trigger table's best; loss median: the same "
            "with the medians; loss paired: median of each round's loss against the same "
            "round's no-trigger run; WAL: median of the rounds (server-wide, so other sessions "
            "on a shared server add to it); server CPU: all the server's processes, median of the "
            "rounds (a private server: other sessions add to it too); heartbeat latency: the "
            "worker's wall time per heartbeat, pooled over the rounds.",
        )
    )


if __name__ == "__main__":
    main()

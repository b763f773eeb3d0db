"""Where the history's cost goes: pgbench running the cycle against one table, its trigger
taken apart, the table set back before every run.

One table made by `jobctl schema apply --create` (history in `late` mode), filled with queued
jobs. Each run first sets every row back to `queued` and vacuums (without that, the rows
each run claims bloat the queue's index and every run is slower than the one before it,
whatever its trigger), then runs

    pgbench -n -M prepared -c 4 -T SECONDS -f tests/bench/cycle.sql

with one of: no trigger; a trigger whose WHEN is false on every worker statement, calling a
plpgsql function that does nothing; the late WHEN calling that no-op function; a WHEN that
lets only transitions through, calling the table's real function; the full late trigger;
the audit trigger (as jobctl installs it: only on UPDATEs that name jobctl_action).
Interleaved round after round; printed: cycles/s best and median, and the loss against no
trigger.

    python tests/bench/bench_history_parts.py --seconds 5 --rounds 3
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys

import psycopg
from bench_pgbench import pgbench
from common import arguments, bench_dsn, machine
from psycopg import sql

TABLE = "bench_trigger"  # the name cycle.sql uses
RESET = f"""
UPDATE {TABLE} SET status = 'queued', attempt_token = NULL, reserved_by = NULL,
    reserved_at = NULL, lease_expires_at = NULL, heartbeat_at = NULL, jobctl_attempt = NULL,
    jobctl_heartbeats = NULL, jobctl_max_gap = NULL, jobctl_lease = NULL
WHERE status <> 'queued'
"""


def variants(conn: psycopg.Connection) -> dict[str, str | None]:
    """name -> the trigger's DDL (None: no trigger), from the table's installed one."""
    (definition,) = conn.execute(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger "
        "WHERE tgrelid = %s::regclass AND tgname = 'jobctl_history'",
        (TABLE,),
    ).fetchone()
    when = re.search(r" WHEN (.*) EXECUTE FUNCTION ", definition)[1]  # type: ignore[index]
    function = re.search(r"EXECUTE FUNCTION (.*)$", definition)[1]  # type: ignore[index]
    head = f"CREATE TRIGGER jobctl_history BEFORE UPDATE ON {TABLE} FOR EACH ROW WHEN "
    return {
        "no trigger": None,
        "false WHEN, no-op function": head + "(new.jobctl_action IS NOT NULL) "
        "EXECUTE FUNCTION public.bench_noop()",
        "late WHEN, no-op function": head + when + " EXECUTE FUNCTION public.bench_noop()",
        "transitions only, real function": head
        + "((new.status <> 'processing'::text) OR (new.jobctl_action IS NOT NULL)) "
        + f"EXECUTE FUNCTION {function}",
        "late": definition,
        "audit": head.replace("BEFORE UPDATE ON", "BEFORE UPDATE OF jobctl_action ON")
        + "(new.jobctl_action IS NOT NULL) EXECUTE FUNCTION "
        + function.replace("('late'", "('audit'"),
    }


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=400_000)
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.Identifier(TABLE)))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "jobctl",
                "--dsn",
                dsn,
                "--table",
                TABLE,
                "schema",
                "apply",
                "--create",
                "--yes",
                "--history",
                "late",
            ],
            check=True,
            capture_output=True,
        )
        conn.execute(
            f"INSERT INTO {TABLE} (available_at) "
            "SELECT now() - interval '1 hour' FROM generate_series(1, %s)",
            (args.rows,),
        )
        conn.execute(
            "CREATE OR REPLACE FUNCTION public.bench_noop() RETURNS trigger "
            "LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$"
        )
        ddl = variants(conn)
        rates: dict[str, list[float]] = {name: [] for name in ddl}
        print(machine(), file=sys.stderr)
        for round_ in range(1, args.rounds + 1):
            for name, trigger in ddl.items():
                conn.execute(f"DROP TRIGGER IF EXISTS jobctl_history ON {TABLE}")
                if trigger:
                    conn.execute(trigger)
                conn.execute(RESET)
                conn.execute(f"VACUUM {TABLE}")
                conn.execute("TRUNCATE jobctl.attempts, jobctl.events")
                tps, _, _ = pgbench(dsn, args.seconds, "off")
                rates[name].append(tps)
                print(f"  round {round_} {name}: {tps:.0f} cycles/s", file=sys.stderr)
        conn.execute(f"DROP TRIGGER IF EXISTS jobctl_history ON {TABLE}")
        conn.execute(ddl["late"])
    best0, median0 = max(rates["no trigger"]), statistics.median(rates["no trigger"])
    print("| configuration | cycles/s best | median | loss best | loss median |")
    print("|---|---|---|---|---|")
    for name, values in rates.items():
        best, median = max(values), statistics.median(values)
        loss = "-" if name == "no trigger" else f"{1 - best / best0:.1%}"
        loss_m = "-" if name == "no trigger" else f"{1 - median / median0:.1%}"
        print(f"| {name} | {best:.0f} | {median:.0f} | {loss} | {loss_m} |")


if __name__ == "__main__":
    main()

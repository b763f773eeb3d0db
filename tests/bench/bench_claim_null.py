"""The claim on a table whose ready time can be NULL (OCA queue_job's ``eta``): the claim jobctl
renders (the ready time read as ``COALESCE(eta, '-infinity')``, its index as ``schema check``
advises) against the form before it (``eta IS NULL OR eta <= now()``, NULL ordered last, on the
index of the column itself), and both against a floor: the same claim on a ``NOT NULL`` column
whose jobs are all ready, and a bare hand-written ``SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1``.

Each table is a web framework's queue (``state varchar``, ``eta timestamp``, ``priority int``,
``date_started timestamp``, ...; tests/integration/test_naive_times.py's shape and mapping, the
priority mapped) of --rows rows, --pending of them pending, in three priorities:

    scheduled   90 % of the pending jobs scheduled in the future, 10 % NULL (ready now)
    now         99 % NULL, 1 % scheduled
    idle        every pending job scheduled: nothing to claim (a worker's poll)
    reference   NOT NULL eta, every pending job due (the floor)

Printed per table and claim: what one claim reads (EXPLAIN (ANALYZE, BUFFERS): the index, the
rows read and thrown away, buffers, time), then the per-claim latency of --clients processes
claiming and completing for --seconds (median, p95, claims/s; pg_stat_statements' mean where
the server preloads it), configurations interleaved round after round, each on the table reset
to its pending jobs, with the ratio of the median to the floor's.

    python tests/bench/bench_claim_null.py --rounds 3 --seconds 4 --clients 4
"""

from __future__ import annotations

import json
import multiprocessing
import re
import statistics
import subprocess
import sys
import time
import uuid

import psycopg
from common import JOBCTL, arguments, bench_dsn, machine
from psycopg import sql

SHAPE = """
CREATE TABLE {t} (
    id serial PRIMARY KEY,
    state varchar(16) NOT NULL DEFAULT 'pending',
    eta timestamp {null},
    priority integer NOT NULL DEFAULT 10,
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 3,
    worker varchar(64),
    date_started timestamp,
    date_done timestamp,
    date_updated timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    exc_info text,
    channel varchar(32) NOT NULL DEFAULT 'root'
)"""
MAPPING = [
    *("--column", "status=state", "--column", "available_at=eta"),
    *("--column", "reserved_by=worker", "--column", "reserved_at=date_started"),
    *("--column", "finished_at=date_done", "--column", "updated_at=date_updated"),
    *("--column", "last_error=exc_info", "--column", "queue=channel"),
    *("--status", "queued=pending", "--status", "processing=started"),
    *("--column", "priority=priority"),
]
# table: (eta NOT NULL, fraction of the pending jobs NULL, fraction scheduled in the future)
TABLES = {
    "claim_scheduled": (False, 0.10, 0.90),
    "claim_now": (False, 0.99, 0.01),
    "claim_idle": (False, 0.0, 1.0),
    "claim_reference": (True, 0.0, 0.0),
}
FLOOR = ("claim_reference", "jobctl's claim")
BARE = (
    "WITH t AS (SELECT id FROM claim_reference WHERE state = 'pending' "
    "AND eta <= now() AT TIME ZONE 'UTC' ORDER BY priority, eta, id "
    "FOR UPDATE SKIP LOCKED LIMIT 1) "
    "UPDATE claim_reference j SET state = 'started' FROM t WHERE j.id = t.id RETURNING j.id"
)
NOW = "pg_catalog.timezone('UTC'::pg_catalog.text, pg_catalog.now())"
COALESCED = 'COALESCE(j."eta", \'-infinity\'::"pg_catalog"."timestamp")'


def build(dsn: str, table: str, rows: int, pending: int) -> None:
    """The table, applied with the mapping, loaded (triggers off), indexed as schema check
    advises; a nullable one also with the index the form before advised."""
    not_null, null, future = TABLES[table]
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
        c.execute(SHAPE.format(t=table, null="NOT NULL" if not_null else "NULL"))  # type: ignore[arg-type]
    jobctl = [*JOBCTL, "--dsn", dsn, "--table", table]
    subprocess.run([*jobctl, "schema", "apply", "--yes", *MAPPING], check=True, capture_output=True)
    with psycopg.connect(dsn, autocommit=True) as c:
        with c.transaction():
            c.execute("SET LOCAL session_replication_role = replica")
            c.execute(
                sql.SQL("""
                INSERT INTO {t} (state, eta, priority, date_done)
                SELECT CASE WHEN g <= %(p)s THEN 'pending' ELSE 'done' END,
                  CASE WHEN g > %(p)s THEN u - interval '2 days' - (g %% 86400) * interval '1 s'
                       WHEN k < %(null)s THEN NULL
                       WHEN k < %(null)s + %(future)s
                       THEN u + interval '1 hour' + (g %% 86400) * interval '1 s'
                       ELSE u - interval '1 hour' - (g %% 3600) * interval '1 s' END,
                  CASE g %% 10 WHEN 0 THEN 5 WHEN 1 THEN 20 ELSE 10 END,
                  CASE WHEN g > %(p)s THEN u - interval '1 day' END
                FROM (SELECT g, ((g::int8 * 7919) %% %(p)s)::float8 / %(p)s AS k,
                             now() AT TIME ZONE 'UTC' AS u
                      FROM generate_series(1, %(n)s) g) s""").format(t=sql.Identifier(table)),
                {"p": pending, "n": rows, "null": null, "future": future},
            )
    checked = subprocess.run([*jobctl, "schema", "check", "-o", "json"], capture_output=True,
                             text=True, check=False)  # fmt: skip
    (said,) = [c for c in json.loads(checked.stdout) if c["check"].startswith("an index for the")]
    advice = "CREATE INDEX" + said["detail"].split("CREATE INDEX", 1)[1].split(" serves ")[0]
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(advice)  # type: ignore[arg-type]
        if not not_null:
            c.execute(sql.SQL("CREATE INDEX ON {} (priority, eta, id) WHERE state = 'pending'")
                      .format(sql.Identifier(table)))  # fmt: skip
        c.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))
    print(f"  built {table}: {advice}", file=sys.stderr)


def claims(dsn: str) -> dict[tuple[str, str], str]:
    """Each (table, claim): its SQL with $1..$3 left for the parameters."""
    made = {}
    for table, (not_null, _, _) in TABLES.items():
        out = subprocess.run(
            [*JOBCTL, "--dsn", dsn, "--table", table, "schema", "statements", "-o", "json"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        claim = {s["name"]: s["sql"] for s in json.loads(out)}["claim"]
        made[(table, "jobctl's claim")] = claim
        if not_null:
            continue
        assert COALESCED in claim, claim
        either = f'j."eta" IS NULL OR j."eta" OPERATOR(pg_catalog.<=) {NOW}'
        before = claim.replace(f"{COALESCED} OPERATOR(pg_catalog.<=) {NOW}", either)
        made[(table, "before: IS NULL OR, NULL last")] = before.replace(
            f"{COALESCED}, ", 'j."eta", '
        )
    made[("claim_reference", "bare SELECT ... SKIP LOCKED")] = BARE
    return made


def bound(statement: str) -> str:
    return statement.replace("$1", "'bench'").replace("$2", f"'{uuid.uuid4()}'").replace("$3", "60")


def explain(dsn: str, table: str, statement: str) -> dict[str, str]:
    with psycopg.connect(dsn) as c:
        c.execute(bound(statement))  # warm, rolled back
        c.rollback()
        plan = "\n".join(
            r[0]
            for r in c.execute("EXPLAIN (ANALYZE, BUFFERS) " + bound(statement))  # type: ignore[call-overload]
        )
        c.rollback()
    index = re.search(rf"(Index Scan|Seq Scan)(?: using (\S+))? on {table} j_1", plan) or re.search(
        rf"(Index Scan|Seq Scan)(?: using (\S+))? on {table}", plan
    )
    inner = plan.split("Nested Loop")[0]
    removed = re.search(r"Rows Removed by Filter: (\d+)", inner)
    buffers = re.search(r"LockRows.*?Buffers: shared hit=(\d+)(?: read=(\d+))?", plan, re.S)
    return {
        "index": (index[2] or index[1]) if index else "?",
        "sorted": "yes" if "Sort" in inner else "no",
        "thrown away": removed[1] if removed else "0",
        "buffers": str(int(buffers[1]) + int(buffers[2] or 0)) if buffers else "?",
        "EXPLAIN ms": re.search(r"Execution Time: ([\d.]+)", plan)[1],  # type: ignore[index]
    }


def _client(args: tuple[str, str, str, float]) -> list[float]:
    """One worker: claim (timed), complete, for ``seconds``; the claims' latencies in ms."""
    dsn, table, statement, seconds = args
    spent = []
    with psycopg.connect(dsn, autocommit=True, options="-c synchronous_commit=off") as c:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            started = time.perf_counter()
            got = c.execute(bound(statement)).fetchone()  # type: ignore[arg-type]
            spent.append((time.perf_counter() - started) * 1000)
            if got is not None:
                c.execute(
                    sql.SQL("UPDATE {} SET state = 'done' WHERE id = %s").format(
                        sql.Identifier(table)
                    ),
                    (got[0],),
                )
    return spent


def reset(dsn: str, table: str, pending: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            sql.SQL("UPDATE {} SET state = 'pending', worker = NULL, date_started = NULL, "
                    "attempt_token = NULL, lease_expires_at = NULL "
                    "WHERE id <= %s AND state <> 'pending'").format(sql.Identifier(table)),
            (pending,),
        )  # fmt: skip
        c.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))


def statements_mean(dsn: str, reset_first: bool) -> float | None:
    """pg_stat_statements' mean time of the claims (None where it is not preloaded)."""
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            if reset_first:
                c.execute("SELECT pg_stat_statements_reset()")
                return None
            row = c.execute(
                "SELECT sum(total_exec_time) / nullif(sum(calls), 0) FROM pg_stat_statements "
                "WHERE query LIKE 'WITH %% FOR UPDATE SKIP LOCKED%%'"
            ).fetchone()
            return float(row[0]) if row and row[0] is not None else None
    except psycopg.Error:
        return None


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--pending", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rebuild", action="store_true", help="build the tables again")
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    with psycopg.connect(dsn) as c:
        present = {r[0] for r in c.execute("SELECT relname FROM pg_class WHERE relkind = 'r'")}
    for table in TABLES:
        if args.rebuild or table not in present:
            build(dsn, table, args.rows, args.pending)
    made = claims(dsn)
    print(
        f"machine: {machine(args.dsn)}; {args.rows:,} rows, {args.pending:,} pending in three "
        f"priorities; {args.clients} clients claiming and completing for {args.seconds:g} s, "
        f"{args.rounds} interleaved rounds, synchronous_commit=off"
    )
    from tabulate import tabulate

    plans = []
    for (table, label), statement in made.items():
        reset(dsn, table, args.pending)
        plans.append({"table": table, "claim": label, **explain(dsn, table, statement)})
    print("\nOne claim (EXPLAIN (ANALYZE, BUFFERS), warm):\n")
    print(tabulate(plans, headers="keys", tablefmt="github", disable_numparse=True))
    latencies: dict[tuple[str, str], list[float]] = {k: [] for k in made}
    rates: dict[tuple[str, str], list[float]] = {k: [] for k in made}
    means: dict[tuple[str, str], list[float]] = {k: [] for k in made}
    ctx = multiprocessing.get_context("spawn")
    for n in range(args.rounds):
        for key in list(made) if n % 2 == 0 else list(reversed(made)):
            reset(dsn, key[0], args.pending)
            statements_mean(dsn, True)
            with ctx.Pool(args.clients) as pool:
                spent = pool.map(_client, [(dsn, key[0], made[key], args.seconds)] * args.clients)
            mean = statements_mean(dsn, False)
            flat = [s for one in spent for s in one]
            latencies[key].append(statistics.median(flat))
            rates[key].append(len(flat) / args.seconds)
            if mean is not None:
                means[key].append(mean)
            print(f"  round {n + 1} {key[0]} {key[1]}: median {statistics.median(flat):.2f} ms",
                  file=sys.stderr)  # fmt: skip
    floor = statistics.median(latencies[FLOOR])
    rows = []
    for key in made:
        median = statistics.median(latencies[key])
        rows.append({
            "table": key[0],
            "claim": key[1],
            "median ms": f"{median:.3f}",
            "worst round's median ms": f"{max(latencies[key]):.3f}",
            "claims/s": f"{statistics.median(rates[key]):.0f}",
            "pg_stat_statements mean ms": f"{statistics.median(means[key]):.3f}"
            if means[key] else "n/a",
            "x floor": "-" if key == FLOOR else f"{median / floor:.2f}",
        })  # fmt: skip
    print(f"\nPer claim, {args.clients} clients (median of the rounds' medians):\n")
    print(tabulate(rows, headers="keys", tablefmt="github", disable_numparse=True))
    print(
        "\nx floor: the median against jobctl's claim on the NOT NULL reference table, every "
        "pending job due. 'claims/s' counts the polls that found nothing too (the idle table)."
    )


if __name__ == "__main__":
    main()

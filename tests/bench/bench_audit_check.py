"""What believing a declared actor only of jobctl's roles costs jobctl's writes.

The history function asks whether the session's role is jobctl's (history_trusted_at_once
and history_trusted in sql/schema_apply.sql: a superuser, the table's owner, or a role granted
UPDATE of jobctl_action by name) on every change that declares an actor or an action:
jobctl's own writes (reclaim, requeue, fail) and forgeries. A worker's claim, heartbeat,
completion, retry or failure declares nothing and never asks. This times the lease design's
reclaim (jobctl_action and the audit settings set, as jobctl does) of --rows expired rows in
batches of --batch, each its own transaction, with the function as generated and with both
checks replaced by ``true`` (no actor check, in effect), interleaved --rounds
times, as the table's owner (a superuser here) and as an operator role granted by ``schema
grants``: both are told at once (a simple expression, no catalog query).

    python tests/bench/bench_audit_check.py --rows 20000 --batch 500 --rounds 5
"""

from __future__ import annotations

import statistics
import time
import uuid

import psycopg
from bench_reclaim import NAME, reset, restore
from common import arguments, bench_dsn, machine, table
from psycopg import conninfo, sql

from jobctl import db
from jobctl.schema import apply as schema_apply
from jobctl.schema import history
from jobctl.schema import steps as schema_steps
from jobctl.sql import queries

RECLAIM = """
WITH expired AS (
    SELECT id, attempt_token FROM {t}
    WHERE status = 'processing' AND lease_expires_at < now()
    ORDER BY lease_expires_at, id FOR UPDATE SKIP LOCKED LIMIT %(n)s)
UPDATE {t} j
SET status = 'queued', reserved_by = NULL, reserved_at = NULL, heartbeat_at = NULL,
    lease_expires_at = NULL, attempt_token = NULL, reclaim_count = j.reclaim_count + 1,
    last_error = 'lease expired before completion', updated_at = now(),
    jobctl_action = 'reclaimed'
FROM expired WHERE j.id = expired.id AND j.attempt_token = expired.attempt_token
"""


def install(dsn: str, check: bool) -> None:
    """The table's history function as generated, or with the role check replaced by true."""
    settings = db.Settings(dsn=dsn, table=NAME)
    with db.connect(settings) as conn:
        target = history.Target.of(db.resolve_table(conn, NAME))
        fragments = dict(target.fragments)
        fragments["job_table"] = sql.Literal(f"public.{NAME}")
        fragments |= history.kept_texts(fragments)
        if not check:
            fragments["history_trusted_at_once"] = sql.SQL("true")
            fragments["history_trusted"] = sql.SQL("true")
        body = queries.query("history_function_body", **fragments).as_string(conn)
        conn.execute(
            sql.SQL(
                "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql "
                "SECURITY DEFINER AS {}"
            ).format(sql.Identifier("jobctl", target.function), sql.Literal(body))
        )


def per_check(dsn: str, calls: int) -> dict[str, float]:
    """Microseconds per call of each check, in a plpgsql loop on the server (no client, no
    row written): the query (history_trusted), the simple expression (history_trusted_at_once)
    and, as the floor of a plpgsql statement that runs SQL, ``SELECT true``."""
    loop = """
    DO $$
    DECLARE ok boolean; started timestamptz := clock_timestamp();
            rel oid := 'public.{name}'::regclass;
    BEGIN
        FOR i IN 1..{calls} LOOP ok := {check}; END LOOP;
        PERFORM set_config('bench.elapsed',
                           extract(epoch FROM clock_timestamp() - started)::text, false);
    END $$"""
    checks = {
        "catalog query (history_trusted)": queries.blocks()["history_trusted"],
        "at once (history_trusted_at_once)": "("
        + queries.blocks()["history_trusted_at_once"]
        + ")",
        "SELECT true (the floor)": "(SELECT true)",
    }
    result = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for label, check in checks.items():
            text = loop.format(name=NAME, calls=calls, check=check.replace("TG_RELID", "rel"))
            conn.execute(text.encode())
            elapsed = float(conn.execute("SELECT current_setting('bench.elapsed')").fetchone()[0])
            result[label] = elapsed / calls * 1e6
    return result


def reclaim(dsn: str, rows: int, batch: int) -> float:
    statement = sql.SQL(RECLAIM).format(t=sql.Identifier(NAME))
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        done = 0
        while done < rows:
            with conn.transaction():
                conn.execute(
                    "SELECT set_config('jobctl.actor', 'bench@ops', true), "
                    "set_config('jobctl.action', 'reclaimed', true)"
                )
                n = conn.execute(statement, {"n": batch}).rowcount
            if n == 0:
                break
            done += n
        elapsed = time.perf_counter() - started
    assert done == rows, (done, rows)
    return elapsed


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    reset(dsn, 0, args.rows)
    operator = f"bench_op_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(operator)))
    try:
        settings = db.Settings(dsn=dsn, table=NAME)
        with db.connect(settings) as conn:
            schema_steps.apply(
                conn,
                settings,
                schema_apply.plan_grants(conn, NAME, readonly=None, operator=operator),
            )
        as_operator = conninfo.make_conninfo(dsn, user=operator)
        checks: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for label, us in per_check(as_operator, args.rows).items():
                checks.setdefault(label, []).append(us)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for who, login in (("owner", dsn), ("operator", as_operator)):
                for check in (False, True):
                    install(dsn, check)
                    restore(dsn, args.rows)
                    label = (who, "role check" if check else "no check (before)")
                    times.setdefault(label, []).append(reclaim(login, args.rows, args.batch))
        install(dsn, True)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(operator)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(operator)))
    print(
        f"machine: {machine()}; {args.rows:,} rows reclaimed in batches of {args.batch}, "
        f"{args.rounds} interleaved rounds: best (median) seconds, per row"
    )
    out = []
    for (who, variant), runs in times.items():
        best, median = min(runs), statistics.median(runs)
        out.append(
            {
                "as": who,
                "function": variant,
                "s": f"{best:.2f} ({median:.2f})",
                "us/row": f"{best / args.rows * 1e6:.1f} ({median / args.rows * 1e6:.1f})",
            }
        )
    print(table(out, ["as", "function", "s", "us/row"]))
    print(f"\neach check alone, as the operator role, {args.rows:,} calls in a plpgsql loop:")
    print(
        table(
            [
                {"check": k, "us/call": f"{min(v):.1f} ({statistics.median(v):.1f})"}
                for k, v in checks.items()
            ],
            ["check", "us/call"],
        )
    )


if __name__ == "__main__":
    main()

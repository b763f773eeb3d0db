"""What a trigger's WHEN and the lease design's CHECKs cost one worker UPDATE, in µs.

One session, no client in the loop: a procedure updates each of N rows once, committing after
every UPDATE (as the workers autocommit), and reports the mean time per UPDATE. Two
statements, the lease design's heartbeat (its SET names neither the status nor
jobctl_action) and a completion (its SET names the status), on the same table in turn:

* bare: the columns only, no CHECK, no trigger;
* CHECKs: the lease design's two CHECK constraints (recovery_policy, reclaim_count), as every
  table jobctl serves has them: the floor the other benchmarks measure against;
* audit: that, and jobctl's audit trigger (BEFORE UPDATE OF jobctl_action, WHEN a null test);
* transitions: the default's trigger (BEFORE UPDATE OF status, jobctl_action, its WHEN);
* transitions on every UPDATE: the same WHEN without the column list (jobctl before it).

No WHEN here is true for these statements (the trigger calls a function that does nothing,
never reached), so the figures are the WHEN's and the trigger's own cost: PostgreSQL reads a
trigger's WHEN and a table's CHECKs from their node strings and prepares them again for every
statement. Interleaved round after round; printed: the median of the rounds per statement
and configuration, and the difference from the CHECKs floor.

    python tests/bench/bench_statement_cost.py --rounds 5 --rows 50000
"""

from __future__ import annotations

import statistics

import psycopg
from common import arguments, bench_dsn, machine, table

TABLE = "bench_statement_cost"
SETUP = f"""
DROP TABLE IF EXISTS {TABLE};
CREATE TABLE {TABLE} (
    id bigint PRIMARY KEY, status text NOT NULL DEFAULT 'processing',
    attempt_token uuid DEFAULT gen_random_uuid(), heartbeat_at timestamptz,
    lease_expires_at timestamptz, finished_at timestamptz, updated_at timestamptz,
    recovery_policy text NOT NULL DEFAULT 'auto', reclaim_count integer NOT NULL DEFAULT 0,
    jobctl_action text
) WITH (autovacuum_enabled = off);
CREATE OR REPLACE FUNCTION bench_statement_noop() RETURNS trigger LANGUAGE plpgsql
    AS 'BEGIN RETURN NEW; END';
CREATE OR REPLACE PROCEDURE bench_statement_run(statement text, rows integer, INOUT us float8)
LANGUAGE plpgsql AS $$
DECLARE started timestamptz; i integer;
BEGIN
    TRUNCATE {TABLE};
    INSERT INTO {TABLE} (id) SELECT g FROM generate_series(1, rows) g;
    COMMIT;
    started := clock_timestamp();
    FOR i IN 1..rows LOOP
        EXECUTE statement USING i;
        COMMIT;
    END LOOP;
    us := extract(epoch FROM clock_timestamp() - started) * 1e6 / rows;
END $$;
"""
HEARTBEAT = (
    f"UPDATE {TABLE} SET heartbeat_at = now(), lease_expires_at = now() + interval '60 s', "
    "updated_at = now() WHERE id = $1 AND status = 'processing'"
)
COMPLETE = (
    f"UPDATE {TABLE} SET status = 'done', attempt_token = NULL, heartbeat_at = NULL, "
    "lease_expires_at = NULL, finished_at = now(), updated_at = now() "
    "WHERE id = $1 AND status = 'processing'"
)
CHECKS = (
    f"ALTER TABLE {TABLE} ADD CHECK (recovery_policy IN ('auto', 'manual')), "
    "ADD CHECK (reclaim_count >= 0)"
)
TRANSITIONS_WHEN = (
    "NEW.jobctl_action IS NOT NULL OR (NEW.status <> 'processing' AND NEW.status <> 'done')"
)


def trigger(event: str, when: str) -> str:
    return (
        f"CREATE TRIGGER t BEFORE {event} ON {TABLE} FOR EACH ROW WHEN ({when}) "
        "EXECUTE FUNCTION bench_statement_noop()"
    )


# label -> the DDL that makes the configuration from a bare table
CONFIGS = {
    "bare": [],
    "CHECKs (the floor)": [CHECKS],
    "audit": [CHECKS, trigger("UPDATE OF jobctl_action", "NEW.jobctl_action IS NOT NULL")],
    "transitions (default)": [CHECKS, trigger("UPDATE OF status, jobctl_action", TRANSITIONS_WHEN)],
    "transitions on every UPDATE": [CHECKS, trigger("UPDATE", TRANSITIONS_WHEN)],
}
STATEMENTS = {"heartbeat": HEARTBEAT, "completion": COMPLETE}
FLOOR = "CHECKs (the floor)"


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=50_000, help="UPDATEs per measurement")
    args = parser.parse_args()
    dsn = bench_dsn(args.dsn)
    print(
        f"machine: {machine()}; {args.rows:,} UPDATEs per measurement, each committed, "
        f"{args.rounds} interleaved rounds, synchronous_commit=off"
    )
    us: dict[tuple[str, str], list[float]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")  # this benchmark's own connection
        for _ in range(args.rounds):
            for label, ddl in CONFIGS.items():
                conn.execute(SETUP)
                for statement in ddl:
                    conn.execute(statement)
                for name, text in STATEMENTS.items():
                    (took,) = conn.execute(
                        "CALL bench_statement_run(%s, %s, NULL)", (text, args.rows)
                    ).fetchone()
                    us.setdefault((label, name), []).append(took)
        conn.execute(f"DROP TABLE {TABLE}")
    rows = []
    for label in CONFIGS:
        row = {"configuration": label}
        for name in STATEMENTS:
            median = statistics.median(us[label, name])
            floor = statistics.median(us[FLOOR, name])
            row[f"{name} µs"] = f"{median:.2f}"
            row[f"{name} vs floor"] = f"{median - floor:+.2f}" if label != FLOOR else "-"
        rows.append(row)
    print(table(rows, list(rows[0])))
    print(
        "µs: mean time of one UPDATE and its commit inside the server (no client), median of "
        "the rounds; vs floor: the difference from the table with the lease design's CHECKs "
        "and no trigger."
    )


if __name__ == "__main__":
    main()

"""What a write transaction's settings statement carries (its guards) costs a reclaim batch.

Two hardenings put into ``transaction_settings`` (sql/queries.sql) the refusal of a session
whose session_replication_role is not origin (``origin_session``) and the output styles jobctl
parses (``parse_settings``: DateStyle, IntervalStyle, extra_float_digits), and make a pipelined
statement's cursor read dates as ISO (``loaders.reading_iso``); a write by a session stronger
than the table's owner also takes jobctl's operator role there (``role_setting``). This times,
interleaved --rounds times, the statement without them and as jobctl sends it: on the server
alone (a loop of --loops inside one DO block: no round trips), and as a whole pipelined
transaction (BEGIN, the settings, a --rows-row statement of timestamps like a reclaim
batch's, COMMIT), per transaction.

    python tests/bench/bench_session_settings.py --rounds 7
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from common import arguments, machine
from psycopg import sql

from jobctl import db
from jobctl.db import loaders
from jobctl.sql import queries

# (role: the role a stronger session's write runs as, SET LOCAL ROLE; any role the bench's
# superuser may become does: pg_monitor is in every cluster)
PARAMS = {
    "st": "30000",
    "lt": "2000",
    "actor": "bench",
    "action": "reclaimed",
    "reason": "",
    "role": "pg_monitor",
}


def statements() -> dict[str, sql.Composed]:
    """The write's settings statement before and now; and, to see the additions alone, the
    same on a constant search path (the write's reads pg_settings: most of its cost)."""
    constant = sql.SQL("'pg_catalog, pg_temp'")
    empty = sql.SQL("")

    def made(search_path: sql.Composable, **left_out: sql.Composable) -> sql.Composed:
        return queries.query(
            "transaction_settings", read_only=empty, role=empty, search_path=search_path, **left_out
        )

    write_path = queries.query("write_search_path")
    return {
        "write: before": made(write_path, origin_session=empty, parse_settings=empty),
        "write: now": db._settings_statement(False, True),
        "write: now, as the operator role": db._settings_statement(False, True, True),
        "constant path: before": made(constant, origin_session=empty, parse_settings=empty),
        "constant path: + origin_session": made(constant, parse_settings=empty),
        "constant path: + parse_settings too": made(constant),
    }


def on_server(conn: Any, statement: sql.Composed, loops: int) -> float:
    """Microseconds per execution of ``statement`` inside one DO block."""
    text = statement.as_string(conn)
    for name, value in PARAMS.items():
        text = text.replace(f"%({name})s", sql.Literal(value).as_string(conn))
    notices: list[float] = []
    conn.add_notice_handler(lambda d: notices.append(float(d.message_primary)))
    with conn.transaction():
        conn.execute(
            "DO $$DECLARE t0 timestamptz := clock_timestamp(); BEGIN "
            f"FOR i IN 1..{loops} LOOP PERFORM * FROM ({text}) s; END LOOP; "
            "RAISE NOTICE '%', extract(epoch FROM clock_timestamp() - t0); END$$"
        )
    conn._notice_handlers.clear()
    return notices[-1] / loops * 1e6


def pipelined(conn: Any, statement: sql.Composed, iso: bool, rows: int, loops: int) -> float:
    """Microseconds per pipelined transaction of the settings and a ``rows``-row statement."""
    batch = (
        "SELECT g AS id, now() AS lease_expires_at, now() AS reserved_at "
        f"FROM generate_series(1, {rows}) g"
    ).encode()
    started = time.perf_counter()
    for _ in range(loops):
        with conn.pipeline():
            conn.execute("BEGIN")
            conn.execute(statement, PARAMS)
            cursor = loaders.reading_iso(conn.cursor()) if iso else conn.cursor()
            cursor.execute(batch)
            conn.execute("COMMIT")
        cursor.fetchall()
    return (time.perf_counter() - started) / loops * 1e6


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--loops", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=50)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    chosen = statements()
    server: dict[str, list[float]] = {k: [] for k in chosen}
    whole: dict[str, list[float]] = {k: [] for k in chosen if k.startswith("write")}
    with db.connect(db.Settings(dsn=args.dsn)) as conn:
        for _ in range(args.rounds):
            for name, statement in chosen.items():
                server[name].append(on_server(conn, statement, args.loops))
                if name in whole:
                    loops = max(1, args.loops // 10)
                    iso = name.startswith("write: now")
                    whole[name].append(pipelined(conn, statement, iso, args.rows, loops))
    print(f"best of {args.rounds} interleaved rounds (median in brackets), microseconds")
    print("| settings statement | on the server | pipelined transaction |")
    print("|---|---|---|")
    for name in chosen:
        transaction = (
            f"{min(whole[name]):.0f} ({statistics.median(whole[name]):.0f})"
            if name in whole
            else ""
        )
        print(
            f"| {name} | {min(server[name]):.1f} ({statistics.median(server[name]):.1f}) "
            f"| {transaction} |"
        )


if __name__ == "__main__":
    main()

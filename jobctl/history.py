"""jobctl's history: its versioned migrations, the trigger on a jobs table and its modes, and a
job's attempts and events as the history keeps them (stored, plus those derived from them).

The migrations are the files ``sql/history/NNN_name.sql``, applied in order by ``schema
apply``, each in its own transaction with the row that records it in ``jobctl.migrations``.
A database with the unversioned history of jobctl 0.1-0.2 (``jobctl.events`` but no
``jobctl.migrations``) starts at 0: migration 1 is that history, written idempotently.

On each jobs table, one trigger ``jobctl_history`` (BEFORE UPDATE) calls
``jobctl.record_change(mode, version)`` for the statements its WHEN lets through; see
``002_lean_history.sql`` and the README's "History" section.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from jobctl import queries

Row = dict[str, Any]

TRIGGER = "jobctl_history"
TRIGGER_VERSION = "2"  # bumped when the trigger's WHEN or arguments change
OLD_TRIGGERS = ("jobctl_history_insert", "jobctl_history_update")  # version 1
MODES = ("late", "exact", "audit")
DEFAULT_MODE = "late"
# columns of the jobs table the trigger keeps the live attempt's statistics in (nullable, no
# default: added without a rewrite); jobctl_action marks jobctl's own writes and is never stored
COLUMNS = {
    "jobctl_action": "text",
    "jobctl_attempt": "uuid",
    "jobctl_heartbeats": "integer",
    "jobctl_max_gap": "interval",
    "jobctl_lease": "interval",
}
DESCRIBE = {
    "late": "worker history (heartbeats counted when late) and operator audit",
    "exact": "worker history (every heartbeat counted) and operator audit",
    "audit": "operator audit only (no worker history)",
}

_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str


@functools.cache
def migrations() -> tuple[Migration, ...]:
    """Every migration file, in order."""
    folder = resources.files("jobctl").joinpath("sql/history")
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    return tuple(sorted(found, key=lambda m: m.version))


def latest_version() -> int:
    return migrations()[-1].version


def installed_version(conn: psycopg.Connection[Any]) -> int | None:
    """The last migration applied to this database (0: none, or the unversioned history;
    None: this role may not read jobctl.migrations, as granted before version 2)."""
    row = conn.execute(queries.query("history_versioned")).fetchone()
    if row is None:
        return 0
    if not row["readable"]:
        return None
    row = conn.execute(queries.query("history_version")).fetchone()
    return int(row["v"]) if row else 0


def migration_statement(migration: Migration) -> sql.Composed:
    """The migration and the row recording it: run in one transaction."""
    record = queries.query(
        "record_migration",
        version=sql.Literal(migration.version),
        migration=sql.Literal(migration.name),
    )
    return sql.Composed(
        [queries.query("history_bootstrap"), sql.SQL("\n" + migration.text + "\n"), record]
    )


@dataclasses.dataclass(frozen=True)
class TableState:
    """What of the history a jobs table has: its trigger's mode, old triggers, columns."""

    mode: str | None  # late, exact, audit: the current trigger; None: not installed
    version: str | None  # the trigger's version argument
    enabled: bool
    old_triggers: tuple[str, ...]  # version 1's triggers still on the table
    missing_columns: tuple[str, ...]
    wrong_columns: tuple[str, ...]


def table_state(conn: psycopg.Connection[Any], table_oid: int | None) -> TableState:
    if table_oid is None:
        return TableState(None, None, False, (), tuple(COLUMNS), ())
    params = {"oid": table_oid}
    triggers = conn.execute(queries.query("history_triggers"), params).fetchall()
    columns = {
        r["name"]: r["type"]
        for r in conn.execute(queries.query("table_columns"), params).fetchall()
    }
    mode = version = None
    enabled = False
    for t in triggers:
        if t["name"] == TRIGGER:
            args = bytes(t["tgargs"]).split(b"\x00")
            mode = args[0].decode() if args and args[0] else None
            version = args[1].decode() if len(args) > 1 else None
            enabled = bool(t["enabled"])
    return TableState(
        mode,
        version,
        enabled,
        tuple(t["name"] for t in triggers if t["name"] in OLD_TRIGGERS),
        tuple(c for c in COLUMNS if c not in columns),
        tuple(c for c, t in COLUMNS.items() if c in columns and columns[c] != t),
    )


def plan(
    conn: psycopg.Connection[Any],
    table: sql.Identifier,
    table_oid: int | None,
    mode: str | None,
) -> list[tuple[str, sql.Composed]]:
    """The history's steps for one jobs table: the migrations not yet applied, the columns
    missing, and the trigger if it is not the one wanted. ``mode`` None keeps the installed
    mode (``late`` on a first install)."""
    steps: list[tuple[str, sql.Composed]] = []
    current = installed_version(conn) or 0
    for m in migrations():
        if m.version > current:
            steps.append((f"history migration {m.version:03d} ({m.name})", migration_statement(m)))
    state = table_state(conn, table_oid)
    wanted = mode or state.mode or DEFAULT_MODE
    if state.missing_columns:
        steps.append(
            (
                "add the history columns (nullable, no default: no rewrite)",
                queries.query(
                    "add_columns",
                    table,
                    columns=sql.SQL(", ").join(
                        queries.query(
                            "add_column", column=sql.Identifier(c), type=sql.SQL(COLUMNS[c])
                        )
                        for c in state.missing_columns
                    ),
                ),
            )
        )
    if (
        state.mode != wanted
        or state.version != TRIGGER_VERSION
        or not state.enabled
        or state.old_triggers
    ):
        steps.append(
            (f"install the history trigger ({DESCRIBE[wanted]})", trigger_sql(table, wanted))
        )
    return steps


def trigger_sql(table: sql.Identifier, mode: str) -> sql.Composed:
    """Replace version 1's triggers and any other mode's by the trigger for ``mode``."""
    drops = [
        part
        for name in OLD_TRIGGERS
        for part in (
            queries.query("drop_trigger", table, trigger=sql.Identifier(name)),
            sql.SQL(";\n"),
        )
    ]
    create = queries.query(
        "history_trigger",
        table,
        trigger=sql.Identifier(TRIGGER),
        when=queries.query(f"history_when_{mode}"),
        mode=sql.Literal(mode),
        version=sql.Literal(TRIGGER_VERSION),
    )
    return sql.Composed([*drops, create])


# ---------------------------------------------------------------- reading
def live_attempt(job: Row, mode: str | None) -> Row | None:
    """The attempt running now, from the jobs row (None when the job is not processing)."""
    if job.get("status") != "processing" or job.get("attempt_token") is None:
        return None
    mine = job.get("jobctl_attempt") == job["attempt_token"]
    counted = (job.get("jobctl_heartbeats") or 0) if mine else 0
    lease = job.get("jobctl_lease") if mine else None
    if lease is None and job.get("lease_expires_at") is not None:
        start = job.get("heartbeat_at") or job.get("reserved_at")
        lease = job["lease_expires_at"] - start if start else None
    gap = job.get("jobctl_max_gap") if mine else None
    return _attempt(
        {
            "attempt": job.get("attempts"),
            "attempt_token": job["attempt_token"],
            "worker": job.get("reserved_by"),
            "claimed_at": job.get("reserved_at"),
            "heartbeats": counted,
            "last_heartbeat_at": job.get("heartbeat_at"),
            "max_heartbeat_gap_s": gap.total_seconds() if gap is not None else None,
            "ended_at": None,
            "outcome": None,
            "lease_s": lease.total_seconds() if lease is not None else None,
            "lease_expires_at": job.get("lease_expires_at"),
            "heartbeat_stats": {"exact": "exact", "late": "late"}.get(mode or "", "none"),
        }
    )


def _attempt(row: Row) -> Row:
    """An attempt as history shows it: ``heartbeats`` is a count only when every heartbeat
    was counted; in ``late`` mode ``late_heartbeats`` counts those after half the lease."""
    stats = row.get("heartbeat_stats") or "exact"  # version 1 counted every heartbeat
    counted = row.get("heartbeats")
    return row | {
        "heartbeat_stats": stats,
        "heartbeats": counted if stats == "exact" else None,
        "late_heartbeats": counted if stats == "late" else None,
    }


def merge(stored_attempts: list[Row], live: Row | None) -> list[Row]:
    """Ended attempts (one row each) and the live one. An attempt begun under version 1 has
    an open row from then, which its ending row (or the live one) continues."""
    attempts: list[Row] = []
    for row in [*map(_attempt, stored_attempts), *([live] if live else [])]:
        earlier = next(
            (
                i
                for i, a in enumerate(attempts)
                if a["attempt_token"] == row["attempt_token"] and a["ended_at"] is None
            ),
            None,
        )
        if earlier is None:
            attempts.append(row)
        else:
            attempts[earlier] = _continued(attempts[earlier], row)
    return attempts


def _continued(opened: Row, later: Row) -> Row:
    """Version 1's open row of an attempt and what came after it (its end, or the live row):
    version 1 counted every heartbeat; the sum stays exact only in 'exact' mode."""
    gaps = [g for g in (opened["max_heartbeat_gap_s"], later["max_heartbeat_gap_s"]) if g]
    exact = later["heartbeat_stats"] == "exact"
    return later | {
        "claimed_at": opened["claimed_at"] or later["claimed_at"],
        "heartbeats": (opened["heartbeats"] or 0) + (later["heartbeats"] or 0) if exact else None,
        "max_heartbeat_gap_s": max(gaps) if gaps else None,
        "lease_s": later["lease_s"] if later["lease_s"] is not None else opened["lease_s"],
    }


def events(stored: list[Row], attempts: list[Row], limit: int) -> list[Row]:
    """The stored events with the claims and completions derived from the attempts (each
    once: version 1 stored them as events), oldest first, the latest ``limit``."""
    have = {(e["event"], e["attempt_token"]) for e in stored}
    derived = []
    for a in attempts:
        if ("claimed", a["attempt_token"]) not in have and a["claimed_at"] is not None:
            derived.append(_derived(a, "claimed", a["claimed_at"], None, "processing", None))
        if a["outcome"] == "completed" and ("completed", a["attempt_token"]) not in have:
            derived.append(
                _derived(a, "completed", a["ended_at"], "processing", "done", a.get("ended_by"))
            )
    order = {"claimed": 0}
    merged = sorted(
        [*stored, *derived],
        key=lambda e: (e["at"], order.get(e["event"], 1), e.get("event_id") or 0),
    )
    for e in merged:
        e.pop("event_id", None)
    return merged[-limit:] if limit else merged


def _derived(
    attempt: Row, kind: str, at: Any, from_status: str | None, to_status: str, actor: str | None
) -> Row:
    return {
        "at": at,
        "event": kind,
        "from_status": from_status,
        "to_status": to_status,
        "attempt": attempt["attempt"],
        "attempt_token": attempt["attempt_token"],
        "worker": attempt["worker"],
        "actor": actor,
        "reason": None,
        "event_id": None,
    }

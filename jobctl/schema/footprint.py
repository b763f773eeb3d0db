"""What schema apply leaves on a jobs table and in its database, whole, and what each part
costs: printed before apply asks, and at the head of ``--sql``'s script, so that an adopter
sees every column, the checks, the index, the trigger and schema jobctl before saying yes.

The figures quoted are measured by tests/bench (docs/reference/performance.md); what is
listed is checked against the catalog after an apply by tests/integration/test_footprint.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
from psycopg import sql

from jobctl import db
from jobctl.schema import apply, check, history, reclaim_index
from jobctl.table.mapping import TableMapping

# jobctl's tables in schema jobctl, as its migrations make them, and what each holds
TABLES = {
    "events": "one row per transition but claims and completions, with actor and reason",
    "attempts": "one row per attempt that ended (all of them in late and exact)",
    "migrations": "which history migrations ran",
    "tables": "each jobs table's own names for the design's columns and statuses",
    "kind_policies": "the recovery policy set per job kind",
    "kind_policy_events": "who changed a kind's policy, and why",
    "reclaimer_passes": "the reclaimer service's passes",
    "pauses": "the kinds and queues whose claim is paused",
    "pause_events": "who paused or resumed a kind, and why",
}
# reclaim's refusal of a row an application's trigger kept back or changed (history 013)
REFUSE_FUNCTION = "refuse"

LEAST = history.LEAST  # the mode whose trigger no worker statement fires
# what each mode's WHEN lets through to the function (schema.sql's history_when_* blocks)
FIRES_FOR = {
    "transitions": "jobctl's own writes and a move to anything but processing or done",
    "late": "jobctl's own writes, a move out of processing and a late heartbeat",
    "exact": "jobctl's own writes, a move out of processing, every claim and heartbeat",
    "audit": "jobctl's own writes only",
}


@dataclasses.dataclass(frozen=True)
class Footprint:
    """Everything of jobctl's on one jobs table and in its database once apply has run."""

    table: str  # schema.name, as the catalog names it
    lease_columns: dict[str, str]  # the table's name for each lease column -> its type
    jobctl_columns: dict[str, str]  # jobctl_* -> type
    checks: tuple[str, ...]
    index: str  # the reclaim index apply builds, or the valid one of another name it keeps
    trigger: str  # its name
    event: str  # UPDATE, or UPDATE OF some columns
    function: str  # the table's own function, in schema jobctl
    mode: str
    tables: tuple[str, ...]  # in schema jobctl
    functions: tuple[str, ...]  # in schema jobctl

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.lease_columns, *self.jobctl_columns)

    def lines(self) -> list[str]:
        """The footprint as a person reads it before saying yes: one part a line or two."""
        lease = ", ".join(f"{c} {t}" for c, t in self.lease_columns.items())
        action, *statistics = (f"{c} {t}" for c, t in self.jobctl_columns.items())
        least = (
            "this is the least footprint: no worker statement fires the trigger"
            if self.mode == LEAST
            else f"least footprint: --history {LEAST}, whose trigger no worker statement fires "
            f"(jobctl's own writes recorded, no worker history; {check.MODE_COST[LEAST]})"
        )
        return [
            f"What jobctl leaves on {self.table} and in this database (costs measured in "
            "docs/reference/performance.md):",
            f"  {len(self.columns)} columns, no table rewrite (nullable or constant defaults); "
            "every SELECT * and ORM model of the table sees them:",
            f"    the lease design's: {lease}",
            f"    jobctl's: {action} (marks jobctl's own writes, never stored)"
            + (
                f", {', '.join(statistics)} (heartbeat statistics in modes late and exact, "
                "NULL otherwise)"
                if statistics and self.mode != LEAST
                else f"; kept, unused in mode {LEAST}: {', '.join(statistics)} (left from an "
                "earlier mode: dropping a column would fail the application's prepared "
                "SELECT *; schema remove drops them)"
                if statistics
                else f"; mode {LEAST} keeps no heartbeat statistics on the row"
            ),
            f"  {len(self.checks)} checks: {', '.join(self.checks)} (validated without "
            "blocking the workers; 9-13 µs on each worker UPDATE)",
            f"  index {self.index}: reclaim's, partial on processing, built CONCURRENTLY on a "
            "table with rows; updated by claims, heartbeats and completions",
            f"  trigger {self.trigger}, BEFORE {self.event}, calling jobctl.{self.function} "
            f"(plpgsql, SECURITY DEFINER) for {FIRES_FOR[self.mode]}: mode {self.mode}, "
            f"{check.MODE_COST[self.mode]}",
            f"  schema jobctl: tables {', '.join(self.tables)}; functions "
            f"{', '.join(self.functions)} ({REFUSE_FUNCTION} fails a reclaim's batch that a "
            "trigger of yours kept back or changed)",
            f"  {least}",
        ]


def of(
    conn: psycopg.Connection[Any],
    table_name: str,
    *,
    history_mode: str | None = None,
    mapping: TableMapping | None = None,
) -> Footprint:
    """The footprint apply would leave on ``table_name`` (one it creates: --create), in the
    names of ``mapping`` (None: the recorded ones) and the mode it would install."""
    if db.identify(conn, table_name) is None:  # --create: the design's own names
        parts = apply.split_name(table_name)
        if len(parts) == 1:
            parts = (db.creation_schema(conn), *parts)
        ident = sql.Identifier(*parts)
        target = history.Target.new(ident, parts[0], parts[-1])
        kept: list[str] = []
        state = history.table_state(conn, None)
    else:
        table = db.resolve_table(conn, table_name, mapping)
        target = history.Target.of(table)
        indexes = reclaim_index.reclaim_indexes(conn, table.oid, table.mapping)
        kept = [name for name, valid in indexes.items() if valid]
        state = history.table_state(conn, table.oid)
    names = target.mapping
    mode = history.chosen_mode(state, history_mode)
    want = history.wanted(conn, target, mode)
    ours = reclaim_index.index_name(target.name, "_processing_timeout")
    return Footprint(
        table=f"{target.schema}.{target.name}",
        lease_columns={
            names.column(c): t.replace("timestamp with time zone", "timestamptz")
            for c, t in apply.LEASE_COLUMNS.items()
        },
        # the mode's, and those an earlier mode left (apply never drops one)
        jobctl_columns={
            c: t
            for c, t in history.COLUMNS.items()
            if c in history.columns(mode) or c in state.present_columns
        },
        checks=tuple(f"{target.name}_{suffix}"[:63] for suffix in apply.CHECKS),
        index=ours if ours in kept or not kept else kept[0],
        trigger=history.TRIGGER,
        event=want.event,
        function=want.function,
        mode=mode,
        tables=tuple(TABLES),
        functions=(want.function, REFUSE_FUNCTION),
    )

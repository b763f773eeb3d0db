"""Planning schema apply (the lease design's columns, checks, reclaim index; jobctl's history)
and schema grants: the steps, run by ``schema_steps``."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import psycopg
from psycopg import sql

from jobctl import db, errors
from jobctl.schema import history, ownership, reclaim_index, shape, statuses
from jobctl.schema.steps import Step
from jobctl.sql import queries
from jobctl.table import column_types, mapping
from jobctl.table.mapping import TableMapping

LEASE_COLUMNS = {
    "attempt_token": "uuid",
    "lease_expires_at": "timestamp with time zone",
    "heartbeat_at": "timestamp with time zone",
    "recovery_policy": "text",
    "reclaim_count": "integer",
}
BASE_COLUMNS = mapping.EXISTING_COLUMNS  # the table's own columns the design relies on

INSTALL_HISTORY = "install the history trigger"  # history.plan's step for the function

# check constraint name suffix -> the block of sql/schema.sql holding its expression
CHECKS = ("recovery_policy_check", "reclaim_count_check")


def split_name(name: str) -> tuple[str, ...]:
    """'s.t' or '"S"."t"' -> its parts, unquoted; unquoted parts fold to lower case."""
    parts = re.findall(r'"((?:[^"]|"")+)"|([^."]+)', name)
    return tuple(quoted.replace('""', '"') if quoted else bare.lower() for quoted, bare in parts)


def plan_apply(
    conn: psycopg.Connection[Any],
    table_name: str,
    *,
    create: bool,
    history_mode: str | None = None,
    mapping: TableMapping | None = None,
) -> list[Step]:
    """The steps that bring the table and the history up to date (only what is missing).

    ``history_mode`` (transitions, late, exact, audit; see jobctl.history) None keeps the
    installed one.
    ``mapping`` (the table's own names, --column/--status/--park-status) replaces the recorded
    one; None keeps it. A table jobctl cannot serve with it is refused before any step."""
    steps: list[Step] = []
    recorded: TableMapping | None = None
    ownership.refuse_foreign(conn)  # a schema jobctl someone else made is never adopted
    exists = db.identify(conn, table_name)
    if exists is None:
        if not create:
            db.resolve_table(conn, table_name)  # raises TableNotFound, naming it
        parts = split_name(table_name)
        if len(parts) == 1:  # where the session's search_path would create it, named so
            parts = (db.creation_schema(conn), *parts)
        ident = sql.Identifier(*parts)
        steps.append(
            Step(
                "create the reference jobs table",
                queries.query(
                    "reference_table",
                    ident,
                    queued_index=sql.Identifier(reclaim_index.index_name(parts[-1], "_queued")),
                ),
            )
        )
        relname, has_rows, indexes = parts[-1], False, {}
        if mapping is not None and mapping != TableMapping():
            raise errors.UsageError(
                "--create makes a table with the lease design's own names: no --column, "
                "--status or --park-status with it"
            )
        mapping = TableMapping()
        fragments = db.spelling(ident, mapping)
        columns: set[str] = set()
        constraints: dict[str, bool] = {}
        oid = None
        schema_name = parts[0]
        locked = ident.as_string(conn)
    else:
        table = db.resolve_table(conn, table_name)
        recorded = table.mapping
        if mapping is None:
            mapping = recorded
        elif mapping != recorded:  # the id and status columns may be other ones
            table = db.resolve_table(conn, table_name, mapping)
        found = shape.inspect(conn, table.qualified)
        why = shape.refusal(found, mapping)
        if why is not None:
            raise errors.Refused(why)
        missing = [d for d in BASE_COLUMNS if found.column(mapping, d) is None]
        if missing:
            raise errors.Refused(
                f"{table.qualified} has no column for the lease design's "
                + ", ".join(f"{d} ({mapping.column(d)!r})" for d in missing)
                + ": name the table's own with --column DESIGN=ACTUAL; nothing done"
            )
        why = column_types.refusal(table.qualified, mapping, table.types)
        if why is not None:  # the history's function or a statement would fail on it
            raise errors.Refused(why)
        refused = shape.rejected_statuses(conn, found, mapping)
        if refused:
            value, reason = refused[0]
            raise errors.Refused(
                f"{table.qualified}: the status column would refuse {value!r}, a value jobctl "
                f"writes ({reason}); map the statuses to the table's own with --status "
                "DESIGN=ACTUAL (and --park-status); nothing done"
            )
        unmapped = statuses.unmapped(conn, table)  # the values it holds: none of the mapping's
        if unmapped is not None:
            raise errors.Refused(f"{table.qualified}: {unmapped}; nothing done")
        fragments = table.fragments
        ident, relname, schema_name, oid = table.ident, table.name, table.schema, table.oid
        locked = table.qualified
        has_rows = shape.one_row(conn, queries.query("table_has_rows", ident))["e"]
        columns = set(found.columns)
        constraints = {
            r["conname"]: r["convalidated"]
            for r in shape.catalog_rows(conn, "table_constraints", table.oid)
        }
        indexes = reclaim_index.reclaim_indexes(conn, table.oid, mapping)

    lease_columns = {mapping.column(c) for c in LEASE_COLUMNS}
    if not lease_columns <= columns:  # ALTER TABLE locks even when there is nothing to add
        steps.append(
            Step(
                "add the lease columns",
                queries.query("add_lease_columns", **fragments),
                locks=locked,
            )
        )
    for suffix in CHECKS:
        name = f"{relname}_{suffix}"[:63]
        if name not in constraints:  # NOT VALID: a catalog change under the lock, no scan
            steps.append(
                Step(
                    f"add check {name} (not valid yet)",
                    queries.query(
                        "add_check",
                        ident,
                        constraint=sql.Identifier(name),
                        check=queries.query(suffix, **fragments),
                    ),
                    locks=locked,
                )
            )
        if not constraints.get(name):  # the scan, in its own transaction: the workers go on
            steps.append(
                Step(
                    f"validate check {name}",
                    queries.query("validate_check", ident, constraint=sql.Identifier(name)),
                )
            )
    ours = reclaim_index.index_name(relname, "_processing_timeout")
    partitioned = exists is not None and exists["relkind"] == "p"
    if oid is not None and reclaim_index.made_for_other_names(conn, oid, ours, mapping):
        steps.append(
            Step(  # (on a partitioned table, with every partition's index attached to it)
                f"drop the reclaim index {ours}, made for other status or column names",
                queries.query("drop_index", index=sql.Identifier(schema_name, ours)),
                locks=locked,
            )
        )
        indexes.pop(ours, None)
    if partitioned:  # an index ON ONLY the table, then each partition's, attached to it
        steps.extend(reclaim_index.partitioned_index_steps(conn, table, ours))
    if indexes.get(ours) is False and not partitioned:
        steps.append(
            Step(  # an invalid index is never used by queries: dropping it is instant
                "drop the invalid reclaim index (left by a failed concurrent build)",
                queries.query("drop_index", index=sql.Identifier(schema_name, ours)),
                locks=locked,
            )
        )
    if not any(indexes.values()) and not partitioned:  # a valid one of any name will do
        steps.append(
            Step(
                "create the reclaim index" + (" concurrently" if has_rows else ""),
                queries.query(
                    "reclaim_index",
                    **{
                        **fragments,
                        "index": sql.Identifier(ours),
                        "concurrently": sql.SQL("CONCURRENTLY" if has_rows else ""),
                        "only": sql.SQL(""),
                    },
                ),
                outside_transaction=has_rows,
                probe=queries.query("concurrent_lock_probe", ident) if has_rows else None,
            )
        )
    # the history's steps lock the jobs table (columns, trigger) or jobctl's tables, which
    # the trigger writes in the workers' transactions: all are tried with short lock timeouts
    target = (
        history.Target.new(ident, schema_name, relname) if oid is None else history.Target.of(table)
    )
    steps.extend(
        Step(what, statement, locks=locked)
        for what, statement in history.plan(conn, target, history_mode)
    )
    if recorded is not None and mapping != recorded:  # (a table being created has the design's)
        record = queries.query(
            "record_table_mapping",
            job_table=sql.Literal(locked),
            mapping=sql.Literal(mapping.to_json()),
        )
        what = "record the table's names: " + "; ".join(mapping.describe())
        installs = [i for i, st in enumerate(steps) if st.what.startswith(INSTALL_HISTORY)]
        if installs:  # in the transaction that installs the function made for them
            i = installs[-1]
            steps[i] = dataclasses.replace(
                steps[i],
                what=f"{steps[i].what}; {what}",
                statement=sql.Composed([steps[i].statement, sql.SQL(";\n"), record]),
            )
        else:
            steps.append(Step(what, record))
    return steps


OPERATOR_COLUMNS = (
    "status",
    "available_at",
    "reserved_by",
    "reserved_at",
    "heartbeat_at",
    "lease_expires_at",
    "attempt_token",
    "reclaim_count",
    "last_error",
    "finished_at",
    "updated_at",
    "recovery_policy",  # quarantine and policy
    "jobctl_action",  # names jobctl's own write for its audit (see jobctl.history)
)


def plan_grants(
    conn: psycopg.Connection[Any], table_name: str, *, readonly: str | None, operator: str | None
) -> list[Step]:
    """GRANTs for a read-only role (stuck, summary, show, history, reclaim --dry-run) and an
    operator role (those plus reclaim --commit, requeue, fail: UPDATE of the lease columns).

    The history trigger is SECURITY DEFINER and its function not executable by either role, so
    neither can write jobctl's tables but through real changes of the jobs table."""
    table = db.resolve_table(conn, table_name)
    ownership.refuse_foreign(conn)
    steps = []
    for role, columns in ((readonly, ()), (operator, OPERATOR_COLUMNS)):
        if role is None:
            continue
        grants: sql.Composed = queries.query(
            "grant_read",
            table.ident,
            schema=sql.Identifier(table.schema),
            role=sql.Identifier(role),
        )
        what = f"read access for {role}"
        if columns:
            grants = sql.Composed(
                [
                    grants,
                    sql.SQL(";\n"),
                    queries.query(
                        "grant_update",
                        table.ident,
                        columns=sql.SQL(", ").join(
                            # the table's own names for the design's columns
                            sql.Identifier(
                                c if c.startswith("jobctl_") else table.mapping.column(c)
                            )
                            for c in columns
                        ),
                        role=sql.Identifier(role),
                    ),
                ]
            )
            what = f"read access and UPDATE of the lease columns for {role}"
        steps.append(Step(what, grants))
    return steps

"""Planning schema apply (the lease design's columns, checks, reclaim index; jobctl's history)
and schema grants: the steps, run by ``schema_steps``."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import psycopg
from psycopg import sql

from jobctl import db, errors
from jobctl.contract import safe_text
from jobctl.db import locks
from jobctl.schema import history, ownership, reclaim_index, shape, statuses, versions
from jobctl.schema import reclaimer as schema_reclaimer
from jobctl.schema.steps import Step
from jobctl.sql import queries
from jobctl.table import column_types, mapping
from jobctl.table.mapping import Given, TableMapping

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


@dataclasses.dataclass(frozen=True)
class TableFacts:
    """What schema apply finds of the table before planning: its names, what of the lease
    design it already has, and the step that creates it (``create``: --create, none there)."""

    ident: sql.Identifier
    relname: str
    schema_name: str
    locked: str  # the table as a locking step names it
    mapping: TableMapping  # the names the plan is made for
    fragments: dict[str, sql.Composable]  # db.spelling's, in those names
    columns: set[str]
    constraints: dict[str, bool]  # name -> validated
    indexes: dict[str, bool]  # the reclaim indexes, name -> valid
    has_rows: bool
    table: db.JobsTable | None = None  # None: it is being created
    recorded: TableMapping | None = None  # the names recorded for it (None: being created)
    partitioned: bool = False
    create: Step | None = None


def plan_apply(
    conn: psycopg.Connection[Any],
    table_name: str,
    *,
    create: bool,
    history_mode: str | None = None,
    mapping: TableMapping | None = None,
    named: Given | None = None,
) -> list[Step]:
    """The steps that bring the table and the history up to date (only what is missing).

    ``history_mode`` (transitions, late, exact, audit; see jobctl.history) None keeps the
    installed one.
    ``mapping`` (the table's own names, --column/--status/--park-status) replaces the recorded
    one; None keeps it; with ``named`` (the parts the options named) it is merged into the
    recorded one instead (``TableMapping.onto``). A table jobctl cannot serve with it is
    refused before any step."""
    ownership.refuse_foreign(conn)  # a schema jobctl someone else made is never adopted
    exists = db.identify(conn, table_name)
    # a database a newer jobctl installed is never downgraded: refused before any step
    versions.refuse_newer(conn, exists["oid"] if exists else None)
    if exists is None:
        if not create:
            db.resolve_table(conn, table_name)  # raises TableNotFound, naming it
        facts = _new_table(conn, table_name, mapping)
    else:
        facts = _existing_table(conn, table_name, exists, mapping, named)
    steps = [
        *([facts.create] if facts.create else []),
        *_lease_column_steps(facts),
        *_check_steps(facts),
        *_index_steps(conn, facts),
        *_history_steps(conn, facts, history_mode),
    ]
    return _recording_mapping(steps, facts)


# ---------------------------------------------------------------- the table's facts
def _new_table(
    conn: psycopg.Connection[Any], table_name: str, mapping: TableMapping | None
) -> TableFacts:
    """The reference table --create makes, in the lease design's own names."""
    parts = split_name(table_name)
    if len(parts) == 1:  # where the session's search_path would create it, named so
        parts = (db.creation_schema(conn), *parts)
    ident = sql.Identifier(*parts)
    step = Step(
        "create the reference jobs table",
        queries.query(
            "reference_table",
            ident,
            queued_index=sql.Identifier(reclaim_index.index_name(parts[-1], "_queued")),
        ),
    )
    if mapping is not None and mapping != TableMapping():
        raise errors.UsageError(
            "--create makes a table with the lease design's own names: no --column, "
            "--status or --park-status with it"
        )
    mapping = TableMapping()
    return TableFacts(
        ident=ident,
        relname=parts[-1],
        schema_name=parts[0],
        locked=ident.as_string(conn),
        mapping=mapping,
        fragments=db.spelling(ident, mapping),
        columns=set(),
        constraints={},
        indexes={},
        has_rows=False,
        create=step,
    )


def _existing_table(
    conn: psycopg.Connection[Any],
    table_name: str,
    exists: dict[str, Any],
    mapping: TableMapping | None,
    named: Given | None = None,
) -> TableFacts:
    """The table as it is, under ``mapping`` (None: the recorded names; with ``named``,
    merged into them); refused when jobctl cannot serve it so."""
    table = db.resolve_table(conn, table_name)
    recorded = table.mapping
    if mapping is not None and named:  # a partial --column adds to the names, never drops
        mapping = mapping.onto(recorded, named)
    if mapping is None:
        mapping = recorded
    elif mapping != recorded:  # the id and status columns may be other ones
        table = db.resolve_table(conn, table_name, mapping)
    found = shape.inspect(conn, table.qualified)
    _refuse_unserved(conn, table, found, mapping)
    has_rows = db.one(conn, queries.query("table_has_rows", table.ident))["e"]
    constraints = {
        r["conname"]: r["convalidated"]
        for r in db.rows(conn, "table_constraints", {"oid": table.oid})
    }
    return TableFacts(
        ident=table.ident,
        relname=table.name,
        schema_name=table.schema,
        locked=table.qualified,
        mapping=mapping,
        fragments=table.fragments,
        columns=set(found.columns),
        constraints=constraints,
        indexes=reclaim_index.reclaim_indexes(conn, table.oid, mapping),
        has_rows=has_rows,
        table=table,
        recorded=recorded,
        partitioned=exists["relkind"] == "p",
    )


# a design column a table may lack, as the reference table has it: the SQL that adds it
# (a constant or stable default: no table rewrite); id and status are the table's own
ADDABLE = {
    "attempts": "integer NOT NULL DEFAULT 0",
    "max_attempts": "integer NOT NULL DEFAULT 3",
    "available_at": "timestamptz NOT NULL DEFAULT now()",
    "reserved_by": "text",
    "reserved_at": "timestamptz",
    "last_error": "text",
    "finished_at": "timestamptz",
    "updated_at": "timestamptz NOT NULL DEFAULT now()",
}


# the comment the suggested ADD COLUMN leaves on each column it adds: how ``schema remove``
# knows, from the catalog alone, a column of the table's that jobctl asked for (and names it)
SUGGESTED_COMMENT = "added for the lease design of jobctl (jobctl schema remove names it)"


def add_columns_hint(qualified: str, mapping: TableMapping, missing: list[str]) -> str:
    """``, or add it ...: BEGIN; SET LOCAL lock_timeout = '150ms'; ALTER TABLE t ADD COLUMN
    finished_at timestamptz; COMMENT ON COLUMN t.finished_at IS '...'; COMMIT`` for the design
    columns a table lacks that it may simply add (all of ``missing`` but id and status), each
    marked with ``SUGGESTED_COMMENT``."""
    addable = [d for d in missing if d in ADDABLE]
    if not addable:
        return ""
    adds = ", ".join(f"ADD COLUMN {_ident(mapping.column(d))} {ADDABLE[d]}" for d in addable)
    comments = "".join(
        f"COMMENT ON COLUMN {qualified}.{_ident(mapping.column(d))} IS '{SUGGESTED_COMMENT}'; "
        for d in addable
    )
    it = "it" if len(addable) == 1 else "them"
    return f", or add {it} when the table has none (retry on lock timeout): " + bounded(
        f"ALTER TABLE {qualified} {adds}; {comments}".removesuffix("; ")
    )


def bounded(statements: str) -> str:
    """``BEGIN; SET LOCAL lock_timeout = '150ms'; STATEMENTS; COMMIT``: an ALTER TABLE jobctl
    suggests waits for every transaction on the table and the workers queue behind it, so a
    short lock_timeout (as apply's own steps', in the transaction only) bounds their wait."""
    timeout = f"{round(locks.DEFAULT_BACKOFF.max_timeout * 1000)}ms"
    return f"BEGIN; SET LOCAL lock_timeout = '{timeout}'; {statements}; COMMIT"


def _ident(name: str) -> str:
    if re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _zone_refusal(
    conn: psycopg.Connection[Any], table: db.JobsTable, mapping: TableMapping
) -> str | None:
    """Why --time-zone cannot be recorded: a zone the server does not know, or a table with
    no time of the design's kept without a zone (nothing would read it); else None."""
    if mapping.time_zone is None:
        return None
    zone = safe_text.visible(mapping.time_zone)
    if not db.one(conn, queries.query("time_zone_known"), {"zone": mapping.time_zone})["known"]:
        return (
            f"--time-zone {zone}: not a time zone this server knows (a name of "
            "pg_timezone_names: UTC, Europe/Brussels, America/New_York)"
        )
    if not any(column_types.naive(t) for t in table.types.values()):
        return (
            f"--time-zone {zone}: no time column of {table.qualified} the lease design reads is "
            "a timestamp without time zone (a timestamptz is an instant already)"
        )
    return None


def _refuse_unserved(
    conn: psycopg.Connection[Any],
    table: db.JobsTable,
    found: shape.TableShape,
    mapping: TableMapping,
) -> None:
    """Refuse, before any step, a table jobctl cannot serve under ``mapping``."""
    why = shape.refusal(found, mapping)
    if why is not None:
        raise errors.NothingDone(why)
    missing = [d for d in BASE_COLUMNS if found.column(mapping, d) is None]
    if missing:
        raise errors.NothingDone(
            f"{table.qualified} has no column for the lease design's "
            + ", ".join(f"{d} ({mapping.column(d)!r})" for d in missing)
            + ": name the table's own with --column DESIGN=ACTUAL"
            + add_columns_hint(table.qualified, mapping, missing)
        )
    optional = [*mapping.mapped_optional, *(["priority"] if mapping.priority else [])]
    absent = [d for d in optional if mapping.columns[d] not in found.columns]
    if absent:
        raise errors.NothingDone(
            f"{table.qualified} has no column "
            + ", ".join(f"{mapping.columns[d]!r} (--column {d}=...)" for d in absent)
        )
    why = column_types.refusal(table.qualified, mapping, table.types)
    if why is not None:  # the history's function or a statement would fail on it
        raise errors.NothingDone(why)
    why = _zone_refusal(conn, table, mapping)
    if why is not None:
        raise errors.NothingDone(why)
    why = shape.repeated_id(conn, table)  # a job is named by its id alone
    if why is not None:
        raise errors.NothingDone(why)
    # a domain's own constraints, asked as the table's owner (the application's code)
    asker = shape.prober(conn, table.oid)
    domains = shape.rejected_domains(conn, table.types, asker)
    if domains:
        raise errors.NothingDone(f"{table.qualified}: {'; '.join(domains)}")
    refused = shape.rejected_statuses(conn, found, mapping, asker)
    if refused:
        value, reason = refused[0]
        raise errors.NothingDone(
            f"{table.qualified}: the status column would refuse {value!r}, a value jobctl "
            f"writes ({reason}); map the statuses to the table's own with --status "
            "DESIGN=ACTUAL (and --park-status)"
        )
    unmapped = statuses.unmapped(conn, table)  # the values it holds: none of the mapping's
    if unmapped is not None:
        raise errors.NothingDone(f"{table.qualified}: {unmapped}")


# ---------------------------------------------------------------- the steps
def _lease_column_steps(facts: TableFacts) -> list[Step]:
    lease_columns = {facts.mapping.column(c) for c in LEASE_COLUMNS}
    if lease_columns <= facts.columns:  # ALTER TABLE locks even when there is nothing to add
        return []
    return [
        Step(
            "add the lease columns",
            queries.query("add_lease_columns", **facts.fragments),
            locks=facts.locked,
        )
    ]


def _check_steps(facts: TableFacts) -> list[Step]:
    steps = []
    for suffix in CHECKS:
        name = f"{facts.relname}_{suffix}"[:63]
        if name not in facts.constraints:  # NOT VALID: a catalog change under the lock, no scan
            steps.append(
                Step(
                    f"add check {name} (not valid yet)",
                    queries.query(
                        "add_check",
                        facts.ident,
                        constraint=sql.Identifier(name),
                        check=queries.query(suffix, **facts.fragments),
                    ),
                    locks=facts.locked,
                )
            )
        if not facts.constraints.get(name):  # the scan, in its own transaction: workers go on
            steps.append(
                Step(
                    f"validate check {name}",
                    queries.query("validate_check", facts.ident, constraint=sql.Identifier(name)),
                )
            )
    return steps


def _index_steps(conn: psycopg.Connection[Any], facts: TableFacts) -> list[Step]:
    """The reclaim index: one made for other names dropped, an invalid one dropped, and
    built unless a valid one of any name is there (partition by partition on a
    partitioned table)."""
    steps = []
    ours = reclaim_index.index_name(facts.relname, "_processing_timeout")
    drop = queries.query("drop_index", index=sql.Identifier(facts.schema_name, ours))
    indexes = dict(facts.indexes)
    table = facts.table
    if table is not None and reclaim_index.made_for_other_names(
        conn, table.oid, ours, facts.mapping
    ):
        steps.append(
            Step(  # (on a partitioned table, with every partition's index attached to it)
                f"drop the reclaim index {ours}, made for other status or column names",
                drop,
                locks=facts.locked,
            )
        )
        indexes.pop(ours, None)
    if facts.partitioned:  # an index ON ONLY the table, then each partition's, attached to it
        assert table is not None
        return [*steps, *reclaim_index.partitioned_index_steps(conn, table, ours)]
    if indexes.get(ours) is False:
        steps.append(
            Step(  # an invalid index is never used by queries: dropping it is instant
                "drop the invalid reclaim index (left by a failed concurrent build)",
                drop,
                locks=facts.locked,
            )
        )
    if not any(indexes.values()):  # a valid one of any name will do
        steps.append(_create_index_step(facts, ours))
    return steps


def _create_index_step(facts: TableFacts, ours: str) -> Step:
    """CONCURRENTLY on a table with rows, its first lock tried first."""
    has_rows = facts.has_rows
    return Step(
        "create the reclaim index" + (" concurrently" if has_rows else ""),
        queries.query(
            "reclaim_index",
            **{
                **facts.fragments,
                "index": sql.Identifier(ours),
                "concurrently": sql.SQL("CONCURRENTLY" if has_rows else ""),
                "only": sql.SQL(""),
            },
        ),
        outside_transaction=has_rows,
        probe=queries.query("concurrent_lock_probe", facts.ident) if has_rows else None,
    )


def _history_steps(
    conn: psycopg.Connection[Any], facts: TableFacts, history_mode: str | None
) -> list[Step]:
    # the history's steps lock the jobs table (columns, trigger) or jobctl's tables, which
    # the trigger writes in the workers' transactions: all are tried with short lock timeouts
    target = (
        history.Target.new(facts.ident, facts.schema_name, facts.relname)
        if facts.table is None
        else history.Target.of(facts.table)
    )
    return history.plan(conn, target, history_mode, locks=facts.locked)


def _recording_mapping(steps: list[Step], facts: TableFacts) -> list[Step]:
    """The steps, recording the table's new names (when they change) in the transaction that
    installs the history function made for them, else as a step of its own."""
    mapping, recorded = facts.mapping, facts.recorded
    if recorded is None or mapping == recorded:  # (a table being created has the design's)
        return steps
    record = queries.query(
        "record_table_mapping",
        job_table=sql.Literal(facts.locked),
        mapping=sql.Literal(mapping.to_json()),
    )
    what = "record the table's names: " + "; ".join(mapping.describe())
    installs = [i for i, st in enumerate(steps) if st.what.startswith(INSTALL_HISTORY)]
    if not installs:
        return [*steps, Step(what, record)]
    i = installs[-1]
    steps[i] = dataclasses.replace(
        steps[i],
        what=f"{steps[i].what}; {what}",
        statement=sql.Composed([steps[i].statement, sql.SQL(";\n"), record]),
    )
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
    "attempts",  # reclaim --refund-attempt
    "jobctl_action",  # names jobctl's own write for its audit (see jobctl.history)
)


def plan_grants(
    conn: psycopg.Connection[Any],
    table_name: str,
    *,
    readonly: str | None,
    operator: str | None,
    reclaimer: str | None = None,
) -> list[Step]:
    """GRANTs for a read-only role (stuck, summary, show, history, reclaim --dry-run), an
    operator role (those plus reclaim --commit, requeue, fail: UPDATE of the lease columns)
    and a reclaimer role (the reads, and reclaim --commit through the table's reclaimer
    function only: ``schema.reclaimer``).

    The history trigger is SECURITY DEFINER and its function not executable by either role, so
    neither can write jobctl's tables but through real changes of the jobs table."""
    table = db.resolve_table(conn, table_name, reads_rows=False)  # GRANTs plan no query
    ownership.refuse_foreign(conn)
    versions.refuse_newer(conn, table.oid)
    steps = []
    for role, columns in ((readonly, ()), (operator, OPERATOR_COLUMNS), (reclaimer, ())):
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
    if reclaimer is not None:  # after the operator's grants: its function may be that role's
        steps += schema_reclaimer.plan(conn, table, reclaimer, operator)
    return steps

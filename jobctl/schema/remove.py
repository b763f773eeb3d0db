"""schema remove: the way back out of what ``schema apply`` installed on a jobs table.

In three layers, each on request, in this order:

1. the history trigger and the table's own function (always): the workers' statements stop
   paying for the history at once; the lease columns stay, so reclaim, stuck and the manual
   writes still work;
2. ``history``: the table's rows of jobctl's history, and schema ``jobctl`` itself once no
   other table is in it (another table's trigger, mapping or history keeps it, said so);
3. ``columns``: the lease columns (under the design's names: a lease column mapped to a
   column of the table's own is kept), the ``jobctl_*`` columns, jobctl's checks and reclaim
   index (an index on a dropped column goes with it), and the recorded names. Refused while
   any row is processing with a live lease: its worker writes those columns.

Refused too, before any step, when an object jobctl did not make depends on one the steps
would drop (a view over ``jobctl.events`` or over a lease column, a foreign key, a policy...):
a DROP without CASCADE would stop at it half way, after the steps before it had run.

The steps are ``schema_steps.Step``s, run by ``schema_steps.apply`` with the same discipline
as apply: each locking step in short tries until the deadline, the blocker named;
``schema_steps.render_sql`` prints them. A plan with no step: nothing is left to remove.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from jobctl import db, errors
from jobctl.contract import safe_text
from jobctl.schema import apply as schema_apply
from jobctl.schema import history, reclaim_index, versions
from jobctl.schema import reclaimer as schema_reclaimer
from jobctl.schema import steps as schema_steps
from jobctl.sql import queries


@dataclasses.dataclass(frozen=True)
class Removal:
    """What ``schema remove`` would do to one table: its steps (none: nothing left) and what
    it keeps, each with how to remove it too."""

    table: str  # format('%I.%I')
    steps: list[schema_steps.Step]
    kept: list[str]
    events: int = 0  # the table's rows of the history, deleted by the steps
    attempts: int = 0

    @property
    def question(self) -> str:
        return f"Remove from {_shown(self.table)}: " + "; ".join(s.what for s in self.steps) + "?"


@dataclasses.dataclass(frozen=True)
class _History:
    """Schema jobctl as it concerns one table."""

    schema: bool
    events: int
    attempts: int
    mapped: bool  # a row in jobctl.tables
    others: tuple[str, ...]  # other tables in it (a trigger, a mapping or history rows)
    foreign: tuple[str, ...]  # objects in it jobctl did not make


def plan(
    conn: psycopg.Connection[Any],
    table_name: str,
    *,
    history_too: bool,
    columns: bool,
    again: str = "",
) -> Removal:
    """The steps that take jobctl off ``table_name`` (see the module's docstring); the
    commands its words name repeat ``again``, the global options typed."""
    table = db.resolve_table(conn, table_name)
    versions.refuse_newer(conn, table.oid)  # a newer jobctl's install: not this one's to take
    where = _shown(table.qualified)
    found = _history(conn, table)
    # 1. the trigger and the table's function
    trigger, triggers, present = _trigger_step(conn, table, found)
    # 3 is planned before 2 (it decides whether the recorded names are still needed), and
    # runs before schema jobctl, which holds them, is dropped
    column_step, column_kept, drops = (
        _columns_step(conn, table, found, again) if columns else (None, [], None)
    )
    # 2. the history: this table's rows, or schema jobctl when no other table is in it
    mapping_needed = found.mapped and not columns
    keep_schema = bool(found.others or found.foreign or mapping_needed)
    rows_step = schema_step = None
    if history_too and found.schema and keep_schema:
        rows_step = _history_rows_step(table, found)
    if history_too and found.schema and not keep_schema:
        schema_step = _schema_step(conn, table, found, present)
    steps = [s for s in (trigger, rows_step, column_step, schema_step) if s is not None]
    if steps:
        functions = present + (_history_functions(conn) if schema_step else [])
        _refuse_dependents(conn, table, triggers, functions, drops, schema=bool(schema_step))
    kept = _history_kept(found, history_too, keep_schema, mapping_needed, where)
    kept += column_kept
    if columns:
        kept += _suggested_kept(conn, table, drops)
    if not columns and _lease_columns(conn, table):
        kept.append(
            f"kept: the lease columns of {where}, their checks and the reclaim index (the "
            "workers write them; jobctl's stuck, reclaim, requeue and fail still work); "
            "jobctl schema remove --columns drops them once no worker uses them"
        )
    return Removal(table.qualified, steps, kept, found.events, found.attempts)


def _trigger_step(
    conn: psycopg.Connection[Any], table: db.JobsTable, found: _History
) -> tuple[schema_steps.Step | None, list[str], list[str]]:
    """The step that drops the history trigger and the table's function (None: neither is
    there), the triggers and the functions of schema jobctl it drops."""
    state = history.table_state(conn, table.oid)
    triggers = [t for t in (history.TRIGGER, *history.OLD_TRIGGERS) if _has_trigger(state, t)]
    functions = {history.function_name(table.schema, table.name)}
    if (
        state.function
        and state.function[0] == "jobctl"
        and state.function[1] not in history.SHARED_FUNCTIONS
    ):
        functions.add(state.function[1])  # (made under the table's former name)
    present = sorted(_present_functions(conn, functions)) if found.schema else []
    # the table's reclaimer function (schema grants --reclaimer), by its signature
    reclaimer = schema_reclaimer.function_name(table.schema, table.name)
    signatures = (
        [r["signature"] for r in db.rows(conn, "reclaimer_existing", {"name": reclaimer})]
        if found.schema
        else []
    )
    if not (triggers or present or signatures):
        return None, triggers, present
    statements = [
        queries.query("remove_trigger", table.ident, trigger=sql.Identifier(t)) for t in triggers
    ] + [queries.query("remove_function", function=sql.Identifier("jobctl", f)) for f in present]
    statements += [queries.query("reclaimer_drop", signature=sql.SQL(s)) for s in signatures]
    what = "drop the history trigger" if triggers else "drop the history function"
    if present:
        what += " and its function " + ", ".join(f"jobctl.{_shown(f)}" for f in present)
    if signatures:
        what += f" and the reclaimer's function jobctl.{_shown(reclaimer)}"
        present = [*present, reclaimer]  # (what depends on it refuses the removal too)
    return schema_steps.Step(what, _joined(statements), locks=table.qualified), triggers, present


def _history_rows_step(table: db.JobsTable, found: _History) -> schema_steps.Step | None:
    """The step that deletes the table's rows of the history (None: it has none)."""
    if not (found.events or found.attempts):
        return None
    return schema_steps.Step(
        f"delete the history of {_shown(table.qualified)} ({_counts(found)})",
        queries.query("remove_history_rows", job_table=sql.Literal(table.qualified)),
    )


def _schema_step(
    conn: psycopg.Connection[Any], table: db.JobsTable, found: _History, present: list[str]
) -> schema_steps.Step:
    """The step that drops schema jobctl, with the functions the trigger's step leaves."""
    drops = [
        queries.query("remove_function", function=sql.Identifier("jobctl", f))
        for f in _history_functions(conn)
        if f not in present
    ]
    return schema_steps.Step(
        f"drop schema jobctl: the history of {_shown(table.qualified)} ({_counts(found)}), its "
        "record of migrations and of the tables' names",
        queries.query(
            "remove_history_schema",
            functions=sql.Composed([sql.Composed([d, sql.SQL(";\n")]) for d in drops]),
        ),
        locks=table.qualified,
    )


def _history_kept(
    found: _History, history_too: bool, keep_schema: bool, mapping_needed: bool, where: str
) -> list[str]:
    """What of the history stays, and how to remove it too."""
    if history_too and found.schema and keep_schema:
        return [_schema_kept(found, mapping_needed, where)]
    if found.schema and (found.events or found.attempts) and not history_too:
        return [
            f"kept: the history of {where} ({_counts(found)}) in schema jobctl; "
            "jobctl schema remove --history deletes it"
        ]
    return []


def apply(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    removal: Removal,
    **options: Any,
) -> list[str]:
    """Run the removal's steps as schema apply runs its own (``options``: its deadline,
    backoff, on_wait, on_done)."""
    return schema_steps.apply(conn, settings, removal.steps, rerun=schema_steps.REMOVE, **options)


def render_sql(conn: psycopg.Connection[Any], removal: Removal) -> str:
    """The removal as a script for psql (see schema_steps.render_sql), its advice remove's."""
    return schema_steps.render_sql(conn, removal.steps, rerun=schema_steps.REMOVE)


def installed(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[str]:
    """What of jobctl's is on the table: its trigger, the lease and jobctl_* columns, its
    checks and reclaim index (empty: nothing, jobctl is not installed there)."""
    parts = []
    state = history.table_state(conn, table.oid)
    if state.mode is not None or state.old_triggers:
        parts.append("the history trigger")
    if _lease_columns(conn, table):
        parts.append("lease columns")
    if state.present_columns:
        parts.append("jobctl_* columns")
    if _checks(conn, table):
        parts.append("checks")
    if _our_index(conn, table):
        parts.append("the reclaim index")
    return parts


def not_installed(conn: psycopg.Connection[Any], table: db.JobsTable) -> str | None:
    """schema check's detail when nothing of jobctl's is on the table (None when something
    is): after jobctl schema remove --columns, or before any apply."""
    if installed(conn, table):
        return None
    found = _history(conn, table)
    if not found.schema:
        where = "schema jobctl is not in this database"
    elif found.events or found.attempts:
        where = f"schema jobctl still holds its history ({_counts(found)})"
    elif found.others:
        where = "schema jobctl holds other tables' history"
    else:
        where = "schema jobctl is still there"
    return f"nothing of jobctl's on {table.qualified}; {where} (jobctl schema apply installs it)"


# ---------------------------------------------------------------- the columns
@dataclasses.dataclass(frozen=True)
class _Drops:
    """What --columns drops from the table."""

    columns: list[str]  # the lease columns under the design's names, the jobctl_* columns
    checks: list[str]
    index: str | None  # jobctl's reclaim index
    mapping: bool  # the names recorded for it, in jobctl.tables


def _columns_step(
    conn: psycopg.Connection[Any], table: db.JobsTable, found: _History, again: str
) -> tuple[schema_steps.Step | None, list[str], _Drops | None]:
    """The step that drops what jobctl added to the table's columns, what it keeps, and what
    it drops (None: no step)."""
    where = _shown(table.qualified)
    columns = {r["name"] for r in db.rows(conn, "table_columns", {"oid": table.oid})}
    kept = [
        f"kept: {_shown(table.mapping.column(c))}, the table's own column for the lease "
        f"design's {c} (--column {c}=...)"
        for c in schema_apply.LEASE_COLUMNS
        if table.mapping.column(c) != c and table.mapping.column(c) in columns
    ]
    drops = _Drops(
        columns=_lease_columns(conn, table) + [c for c in history.COLUMNS if c in columns],
        checks=_checks(conn, table),
        index=_our_index(conn, table),
        mapping=found.schema and found.mapped,
    )
    if not (drops.columns or drops.checks or drops.index or drops.mapping):
        return None, kept, None
    leased = table.mapping.column("lease_expires_at") in columns
    expired, no_lease = _expired_leases(conn, table) if leased else (0, 0)
    statements = _drop_statements(table, drops, leased)
    what = f"drop from {where} the " + "; the ".join(_dropped(conn, table, drops))
    staying: list[str] = []
    if expired:
        staying.append(
            f"{expired} row(s) still processing with an expired lease stay so, with no lease "
            f"to expire: jobctl {again}reclaim --commit first to requeue them"
        )
    if no_lease:
        staying.append(
            f"{no_lease} row(s) processing with no lease stay so (reclaim never touches them): "
            f"jobctl {again}requeue --no-lease once no old worker runs, or the old workers "
            "take them back after their own timeout"
        )
    if staying:
        what += f" ({'; '.join(staying)})"
    return schema_steps.Step(what, _joined(statements), locks=table.qualified), kept, drops


def _expired_leases(conn: psycopg.Connection[Any], table: db.JobsTable) -> tuple[int, int]:
    """The rows processing with an expired lease, and with none; refused while a lease is
    live."""
    leases = db.one(conn, queries.query("remove_live_leases", **table.fragments))
    if leases["n"]:
        raise errors.NothingDone(
            f"{_shown(table.qualified)}: {leases['n']} row(s) processing with a live lease: "
            "their workers write the lease columns; stop them (or let the leases run out, "
            "then reclaim) before jobctl schema remove --columns"
        )
    return int(leases["expired"]), int(leases["no_lease"])


def _drop_statements(table: db.JobsTable, drops: _Drops, leased: bool) -> list[sql.Composable]:
    """The table locked first, the live-lease guard (``leased``: it has the lease column),
    then the index, the checks and columns, and the recorded names."""
    statements: list[sql.Composable] = []
    if drops.columns or drops.checks or drops.index:
        statements.append(queries.query("remove_lock_table", table.ident))
    if leased:
        statements.append(_guard(table))
    if drops.index:
        statements.append(
            queries.query("drop_index", index=sql.Identifier(table.schema, drops.index))
        )
    if drops.columns or drops.checks:
        dropped = [
            queries.query("remove_drop_constraint", constraint=sql.Identifier(c))
            for c in drops.checks
        ] + [queries.query("remove_drop_column", column=sql.Identifier(c)) for c in drops.columns]
        statements.append(
            queries.query("remove_columns", table.ident, drops=sql.SQL(",\n    ").join(dropped))
        )
    if drops.mapping:
        statements.append(
            queries.query("remove_mapping_row", job_table=sql.Literal(table.qualified))
        )
        if table.kind_policies:  # history 006: its policies go with the names it served
            statements.append(
                queries.query("remove_kind_policies", job_table=sql.Literal(table.qualified))
            )
        if table.pauses:  # history 010: its pauses too
            statements.append(
                queries.query("remove_pauses", job_table=sql.Literal(table.qualified))
            )
    return statements


def _dropped(conn: psycopg.Connection[Any], table: db.JobsTable, drops: _Drops) -> list[str]:
    """What the step drops, for its description: the indexes on a dropped column too."""
    parts = []
    if drops.columns:
        parts.append("columns " + ", ".join(_shown(c) for c in drops.columns))
    if drops.checks:
        parts.append(
            ("checks " if len(drops.checks) > 1 else "check ")
            + ", ".join(map(_shown, drops.checks))
        )
    indexes = {
        r["name"]
        for r in db.rows(conn, "remove_column_indexes", {"oid": table.oid, "names": drops.columns})
    } | ({drops.index} if drops.index else set())
    if indexes:
        parts.append(
            ("indexes " if len(indexes) > 1 else "index ")
            + ", ".join(_shown(i) for i in sorted(indexes))
        )
    if drops.mapping:
        parts.append("recorded names")  # after "the " as the others: "the recorded names"
    return parts


def _guard(table: db.JobsTable) -> sql.Composed:
    """The live-lease refusal as a DO block, its dollar quote one that its body lacks."""
    body = queries.query("remove_live_lease_guard", **table.fragments, tag=sql.SQL("")).as_string(
        None
    )
    tag, n = "$jobctl$", 0
    while tag in body:
        n += 1
        tag = f"$jobctl{n}$"
    return queries.query("remove_live_lease_guard", **table.fragments, tag=sql.SQL(tag))


def _lease_columns(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[str]:
    """The lease columns the table has under the design's own names (those jobctl adds)."""
    columns = {r["name"] for r in db.rows(conn, "table_columns", {"oid": table.oid})}
    return [c for c in schema_apply.LEASE_COLUMNS if table.mapping.column(c) == c and c in columns]


def _checks(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[str]:
    """jobctl's check constraints on the table (named as schema apply names them)."""
    names = {r["conname"] for r in db.rows(conn, "table_constraints", {"oid": table.oid})}
    return [n for s in schema_apply.CHECKS if (n := f"{table.name}_{s}"[:63]) in names]


def _our_index(conn: psycopg.Connection[Any], table: db.JobsTable) -> str | None:
    """jobctl's reclaim index on the table (the partitioned table's own, on one), by name."""
    ours = reclaim_index.index_name(table.name, "_processing_timeout")
    names = {r["relname"] for r in db.rows(conn, "reclaim_index_candidates", {"oid": table.oid})}
    return ours if ours in names else None


def _suggested_kept(
    conn: psycopg.Connection[Any], table: db.JobsTable, drops: _Drops | None
) -> list[str]:
    """The columns schema apply asked the user to add (its suggestion marks each with a
    comment) that stay: the table's own now, which the application may have come to use, so
    named with the statement that drops each, never dropped."""
    dropped = set(drops.columns) if drops else set()
    names = [
        r["name"]
        for r in db.rows(
            conn,
            "remove_suggested_columns",
            {"oid": table.oid, "comment": schema_apply.SUGGESTED_COMMENT},
        )
        if r["name"] not in dropped
    ]
    where = _shown(table.ident.as_string(conn))
    quoted = {name: _shown(sql.Identifier(name).as_string(conn)) for name in names}
    return [
        f"kept: column {_shown(name)} of {_shown(table.qualified)}, which schema apply asked "
        "you to add (the application may use it now); once nothing uses it, drop it yourself "
        "(retry on lock timeout): "
        + schema_apply.bounded(f"ALTER TABLE {where} DROP COLUMN {quoted[name]}")
        for name in names
    ]


# ---------------------------------------------------------------- what depends on it
_NAMED = 10  # the dependents a refusal names


def _refuse_dependents(
    conn: psycopg.Connection[Any],
    table: db.JobsTable,
    triggers: list[str],
    functions: list[str],
    drops: _Drops | None,
    *,
    schema: bool,
) -> None:
    """Refuse, before any step, when an object jobctl did not make depends on one the steps
    drop (``schema``: schema jobctl and its tables too): each named with what it depends on."""
    params = {
        "oid": table.oid,
        "columns": drops.columns if drops else [],
        "checks": drops.checks if drops else [],
        "index": drops.index if drops else None,
        "triggers": triggers,
        "functions": functions,
        "schema": schema,
    }
    found = db.rows(conn, "remove_dependents", params)
    if not found:
        return
    named = [
        f"{_shown(r['kind'])} {_shown(r['name'])} (on "
        + ", ".join(_shown(d) for d in sorted(r["depends_on"]))
        + ")"
        for r in found[:_NAMED]
    ]
    more = f" and {len(found) - _NAMED} more" if found[_NAMED:] else ""
    raise errors.NothingDone(
        f"{_shown(table.qualified)}: objects jobctl did not make depend on what schema remove "
        f"would drop: {', '.join(named)}{more}; drop or change them first"
    )


# ---------------------------------------------------------------- the history
def _history(conn: psycopg.Connection[Any], table: db.JobsTable) -> _History:
    present = db.one(conn, "remove_history_relations")
    if not present["has_schema"]:
        return _History(False, 0, 0, False, (), ())
    params = {"job_table": table.qualified, "oid": table.oid}
    events = attempts = 0
    others: set[str] = set()
    if present["has_events"]:
        events = db.one(conn, "remove_count_events", params)["n"]
        others |= {r["job_table"] for r in db.rows(conn, "remove_others_in_events", params)}
    if present["has_attempts"]:
        attempts = db.one(conn, "remove_count_attempts", params)["n"]
        others |= {r["job_table"] for r in db.rows(conn, "remove_others_in_attempts", params)}
    mapped = False
    if present["has_tables"]:
        mapped = db.one(conn, "remove_has_mapping", params)["e"]
        others |= {r["job_table"] for r in db.rows(conn, "remove_others_mapped", params)}
    others |= {r["job_table"] for r in db.rows(conn, "remove_others_triggered", params)}
    foreign = tuple(r["name"] for r in db.rows(conn, "remove_foreign_objects", {}))
    return _History(True, events, attempts, mapped, tuple(sorted(others)), foreign)


def _schema_kept(found: _History, mapping_needed: bool, where: str) -> str:
    reasons = []
    if found.others:
        shown = ", ".join(_shown(o) for o in found.others[:5])
        more = f" and {len(found.others) - 5} more" if found.others[5:] else ""
        reasons.append(
            f"it serves other tables too ({shown}{more}: run jobctl --table T schema remove "
            "--history on each)"
        )
    if found.foreign:
        reasons.append(
            "it holds objects jobctl did not make ("
            + ", ".join(map(_shown, found.foreign[:5]))
            + ")"
        )
    if mapping_needed:
        reasons.append(
            f"it holds the names recorded for {where}, which jobctl and the workers read while "
            "its lease columns are there (--columns drops them)"
        )
    return "kept: schema jobctl: " + "; ".join(reasons)


def _counts(found: _History) -> str:
    return (
        f"{found.events:,} event{'s' * (found.events != 1)}, "
        f"{found.attempts:,} attempt{'s' * (found.attempts != 1)}"
    )


def _history_functions(conn: psycopg.Connection[Any]) -> list[str]:
    return [r["name"] for r in db.rows(conn, "remove_history_functions", {})]


def _present_functions(conn: psycopg.Connection[Any], names: set[str]) -> set[str]:
    rows = db.rows(conn, "remove_functions_present", {"names": sorted(names)})
    return {r["name"] for r in rows}


def _has_trigger(state: history.TableState, name: str) -> bool:
    return (name == history.TRIGGER and state.mode is not None) or name in state.old_triggers


# ---------------------------------------------------------------- helpers
def _joined(statements: Sequence[sql.Composable]) -> sql.Composed:
    """Statements run in one transaction (one step)."""
    return sql.Composed([sql.SQL(";\n").join(statements)])


def _shown(text: str) -> str:
    """A name from the catalog as it may appear in a message or a script's comment: no
    control character (a newline would end the comment) but as a visible escape."""
    return safe_text.visible(text)

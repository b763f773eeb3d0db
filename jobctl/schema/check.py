"""schema check: the lease design's pre-flight checklist, as far as the database can tell."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
from psycopg import sql

from jobctl import db
from jobctl.contract import safe_text
from jobctl.schema import apply as schema_apply
from jobctl.schema import (
    history,
    ownership,
    reclaim_index,
    remove,
    shape,
    statuses,
    unserved,
    versions,
)
from jobctl.schema import reclaimer as schema_reclaimer
from jobctl.sql import printable, queries
from jobctl.table import column_types

# what each history mode costs the workers, measured by tests/bench/bench_trigger.py and
# tests/bench/bench_pgbench.py (docs/reference/performance.md): loss of worker cycles, best of
# rounds
MODE_COST = {
    "transitions": "about +1-11 % server CPU per worker cycle, 2-6 % fewer cycles (no plpgsql "
    "on the workers' claims, heartbeats and completions; heartbeats skip its WHEN)",
    "late": "about +11-37 % server CPU per worker cycle, 8-25 % fewer cycles (one plpgsql call "
    "and one row per completion)",
    "exact": "about +15-40 % server CPU per worker cycle, 9-25 % fewer cycles (every "
    "heartbeat calls the trigger)",
    "audit": "about +2-7 % server CPU per worker cycle, within the benchmark's noise",
}


@dataclasses.dataclass(frozen=True)
class Check:
    check: str
    ok: bool
    detail: str


def history_check(conn: psycopg.Connection[Any], table: db.JobsTable) -> Check:
    """Which history is installed on the table, at which version, and what it costs; a
    trigger or function made for another mapping, mode or version is out of date."""
    state = history.table_state(conn, table.oid)
    version, latest = history.installed_version(conn), history.latest_version()
    problems = []
    if version is not None and version < latest:
        problems.append(f"history at version {version} of {latest}")
    if versions.trigger_is_newer(state.version):  # a newer jobctl's: not "want" ours
        problems.append(
            f"trigger version {state.version}, newer than this jobctl's {history.TRIGGER_VERSION}"
        )
    elif state.mode in history.MODES:
        want = history.wanted(conn, history.Target.of(table), state.mode)
        problems += history.stale(state, want, state.mode)
    elif state.mode is None:
        problems.append("trigger missing")
    else:
        problems.append(f"trigger in unknown mode {state.mode}")
    if state.missing_columns or state.wrong_columns:
        problems.append(
            "columns missing or of the wrong type: "
            + ", ".join(state.missing_columns + state.wrong_columns)
        )
    if problems:
        return Check("history installed", False, "; ".join(problems) + " (run jobctl schema apply)")
    assert state.mode is not None
    return Check(
        "history installed",
        True,
        f"{history.DESCRIBE[state.mode]}, version {version if version is not None else '?'}, "
        f"function jobctl.{history.function_name(table.schema, table.name)}; "
        f"costs {MODE_COST[state.mode]}"
        + (
            f"; {history.unused_note(state.unused_columns, state.mode)}"
            if state.unused_columns
            else ""
        ),
    )


def installed_check(conn: psycopg.Connection[Any], table: db.JobsTable) -> Check:
    """Which jobctl installed the database (history 012 on: recorded with each migration, and
    in the comment of the table's history function), whether a migration's text changed since
    it was applied, and a newer jobctl's install, failed with apply's refusal."""
    found = versions.installed(conn, table.oid)
    if not found.readable:
        return Check(JOBCTL_VERSION, True, "not known: this role may not read jobctl.migrations")
    newer = found.newer()
    if newer is not None:
        return Check(JOBCTL_VERSION, False, newer)
    if not found.migrations:
        return Check(JOBCTL_VERSION, True, "no history of jobctl's in this database yet")
    said = f"installed by {found.describe()}; migrations {found.checksums()}"
    if found.changed():
        said += (
            " (the recorded checksum is the sha256 of the migration's text when it was applied: "
            "a release edited an applied migration; the database holds what that text did)"
        )
    if found.trigger is not None and found.trigger.isdigit():
        if int(found.trigger) < int(history.TRIGGER_VERSION):
            said += (
                f"; its trigger version {found.trigger} is older than this jobctl's "
                f"{history.TRIGGER_VERSION}: schema apply replaces it (an older jobctl's schema "
                f"apply puts an older one back: {versions.UPGRADING})"
            )
    return Check(JOBCTL_VERSION, not found.changed(), said)


JOBCTL_VERSION = "jobctl version"


def reclaimer_check(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[Check]:
    """The table's reclaimer function (schema grants --reclaimer), where there is one: is its
    body the reclaim the CLI does now? One made for another mapping refuses to run."""
    stale = schema_reclaimer.stale(conn, table)
    if stale is None:
        return []
    name = schema_reclaimer.function_name(table.schema, table.name)
    if not stale:
        return [Check("reclaimer function", True, f"jobctl.{name}: the reclaim the CLI does")]
    return [Check("reclaimer function", False, stale)]


def ownership_check(conn: psycopg.Connection[Any]) -> Check:
    """Who owns schema jobctl, what others may do there, and nothing foreign on its tables."""
    found, owner = ownership.problems(conn)
    if found:
        return Check("jobctl's objects are jobctl's", False, "; ".join(found))
    return Check(
        "jobctl's objects are jobctl's",
        True,
        f"{owner}; others hold only USAGE on the schema and SELECT on its tables; no foreign "
        "trigger, rule or policy",
    )


def ids_check(conn: psycopg.Connection[Any], table: db.JobsTable) -> Check:
    """Each id names one row: jobctl names a job by its id alone (``shape.repeated_id``)."""
    repeated = shape.repeated_id(conn, table)
    if repeated is not None:
        return Check("ids name one job each", False, repeated)
    column = table.mapping.column("id")
    unique = db.row(conn, "id_unique_alone", {"oid": table.oid, "column": column})
    if unique is not None and unique["unique"]:
        return Check("ids name one job each", True, f"a unique index on {column!r} alone")
    return Check(
        "ids name one job each",
        True,
        f"no id repeats now, though no unique index on {column!r} alone says none can (a "
        "partitioned table's key holds its partition key): an id that repeats across "
        "partitions would be refused",
    )


def row_security(conn: psycopg.Connection[Any], table: db.JobsTable) -> Check:
    """Row security on the jobs table: jobctl runs with row_security off, so that no policy
    (the application's code) runs as its role; a role that does not bypass row security is
    then refused by every command. Failed while any role granted on the table (but its
    owner) does not bypass it: those the line names, with the ways out."""
    found = db.row(conn, "table_row_security", {"oid": table.oid})
    assert found is not None
    if not found["enabled"]:
        return Check("row security", True, "off: no policy of the application's runs in jobctl")
    return Check("row security", not found["refused"], row_security_detail(table, found))


def row_security_detail(table: db.JobsTable, found: dict[str, Any]) -> str:
    """What row security on the jobs table means for jobctl's roles (``table_row_security``)."""
    policies = ", ".join(safe_text.visible(p) for p in found["policies"]) or "none"
    said = f"on for {safe_text.visible(table.qualified)} (policies: {policies})"
    if found["forced"]:
        said += ", forced on its owner too"
    said += "; jobctl runs no policy's code: a role that does not bypass it is refused"
    if found["bypassing"]:
        said += "; bypassing it: " + ", ".join(safe_text.visible(r) for r in found["bypassing"])
    if found["refused"]:
        said += (
            "; refused: "
            + ", ".join(safe_text.visible(r) for r in found["refused"])
            + " (jobctl's roles: ALTER ROLE ... BYPASSRLS, as a superuser; or no policy on "
            "the table: ALTER TABLE ... DISABLE ROW LEVEL SECURITY)"
        )
    return said


def grants_row_security(
    conn: psycopg.Connection[Any], table_name: str, roles: list[str]
) -> str | None:
    """After schema grants: a line when row security on the jobs table refuses the roles
    granted (they do not bypass it), naming them and the ways out; None when it does not."""
    table = db.resolve_table(conn, table_name)
    found = db.row(conn, "table_row_security", {"oid": table.oid})
    if found is None or not found["enabled"]:
        return None
    bypassing = {r["role"] for r in db.rows(conn, "roles_bypassing_row_security", {"roles": roles})}
    refused = [r for r in roles if r not in bypassing]
    if not refused:
        return None
    return "row security is " + row_security_detail(
        table, {**found, "refused": refused, "bypassing": sorted(bypassing)}
    )


def check(conn: psycopg.Connection[Any], table_name: str) -> list[Check]:
    """The lease design's pre-flight checklist, as far as the database can tell."""
    table = db.resolve_table(conn, table_name)
    results = _table_checks(conn, table)
    columns = {r["name"]: r["type"] for r in db.rows(conn, "table_columns", {"oid": table.oid})}
    wrong = _wrong_lease_columns(table, columns)
    results += _column_checks(table, columns, wrong)
    results += _constraint_checks(conn, table)
    results += _index_checks(conn, table)
    results += _optional_index_checks(conn, table)
    results += _claim_index_check(conn, table)
    results.append(history_check(conn, table))
    results.append(installed_check(conn, table))
    results += reclaimer_check(conn, table)
    results.append(ownership_check(conn))
    results.append(row_security(conn, table))
    if table.mapping.column("id") in columns:  # a table with no id column yet: said above
        results.append(ids_check(conn, table))
    if table.mapping.column("status") in columns:
        results += _status_checks(conn, table)
    if not wrong:
        results += _lease_row_checks(conn, table)
    return _one_verdict(_newer_install(results))


RUN_APPLY = "(run jobctl schema apply)"


def _newer_install(results: list[Check]) -> list[Check]:
    """A database a newer jobctl installed: apply refuses it, so no check says to run it."""
    newer = any(
        c.check == JOBCTL_VERSION and not c.ok and c.detail.endswith(versions.UPGRADE)
        for c in results
    )
    if not newer:
        return results
    later = f"(upgrade jobctl first: {versions.UPGRADING})"
    return [dataclasses.replace(c, detail=c.detail.replace(RUN_APPLY, later)) for c in results]


def _one_verdict(results: list[Check]) -> list[Check]:
    """One story about what apply would do: while apply refuses the table as it is, the
    other checks do not tell the operator to run it (it would refuse); they say apply adds
    what they miss once the table is accepted."""
    refused = any(c.check == "schema apply" and not c.ok for c in results)
    if not refused:
        return results
    later = "(schema apply adds it once it accepts the table)"
    return [
        dataclasses.replace(
            c,
            detail=c.detail.replace(RUN_APPLY, later).replace(
                "(jobctl schema apply installs it)", later
            ),
        )
        for c in results
    ]


def _table_checks(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[Check]:
    """The table, whether jobctl is on it, its names, and whether schema apply serves it."""
    return [
        Check("table exists", True, table.qualified),
        *[
            Check("jobctl installed", False, gone)
            for gone in [remove.not_installed(conn, table)]
            if gone
        ],
        Check("the table's names", True, "; ".join(table.mapping.describe())),
        Check("schema apply", *unserved.apply_verdict(conn, table)),
    ]


def _wrong_lease_columns(table: db.JobsTable, columns: dict[str, str]) -> list[str]:
    """The lease columns missing or of another type than the design's, each said so."""
    names = table.mapping
    return [
        f"{names.column(c)} ({columns.get(names.column(c), 'missing')}, want {t})"
        for c, t in schema_apply.LEASE_COLUMNS.items()
        if columns.get(names.column(c)) != t
    ]


def _column_checks(table: db.JobsTable, columns: dict[str, str], wrong: list[str]) -> list[Check]:
    """The queue's own columns, the lease columns, and the types jobctl serves."""
    names = table.mapping
    missing = [
        f"{c} ({names.column(c)})"
        for c in schema_apply.BASE_COLUMNS
        if names.column(c) not in columns
    ]
    typed = column_types.problems(names, table.types)
    return [
        Check(
            "queue columns",
            not missing,
            "missing: " + ", ".join(missing) if missing else "all present",
        ),
        Check("lease columns", not wrong, "; ".join(wrong) or "all present, right types"),
        Check("column types", not typed, "; ".join(typed) or "every one served"),
    ]


def _constraint_checks(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[Check]:
    """A validated check constraint on each of recovery_policy and reclaim_count."""
    check_defs = [
        r["definition"]
        for r in db.rows(conn, "table_constraints", {"oid": table.oid})
        if r["kind"] == "c" and r["convalidated"]
    ]
    results = []
    for column in ("recovery_policy", "reclaim_count"):
        found = any(table.mapping.column(column) in d for d in check_defs)
        results.append(
            Check(
                f"check constraint on {column}",
                found,
                "present" if found else "missing (run jobctl schema apply)",
            )
        )
    return results


def _index_checks(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[Check]:
    """The reclaim index (a partitioned table's: ``_partition_checks``)."""
    indexes = reclaim_index.reclaim_indexes(conn, table.oid, table.mapping)
    valid = [name for name, ok in indexes.items() if ok]
    reclaim = Check(
        "reclaim index",
        bool(valid),
        f"{valid[0]} (valid)"
        if valid
        else (
            "present but INVALID: " + ", ".join(indexes)
            if indexes
            else "missing: reclaim and stuck scan the table"
        ),
    )
    identity = db.identify(conn, table.qualified)
    partitioned = identity is not None and identity["relkind"] == "p"
    return _partition_checks(conn, table) if partitioned else [reclaim]


LARGE_TABLE = 1_000_000  # rows: where --kind without an index scans too much


def _optional_index_checks(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[Check]:
    """For each mapped kind or queue column, an index led by it (--kind on a large table):
    missing fails the check only on a table of LARGE_TABLE rows or more."""
    found = []
    for design in table.mapping.mapped_optional:
        column = table.mapping.columns[design]
        row = db.row(conn, "leading_index", {"oid": table.oid, "column": column})
        assert row is not None
        status = table.mapping.column("status")
        create = sql.SQL("CREATE INDEX CONCURRENTLY ON {} ({}, {})").format(
            table.ident, sql.Identifier(column), sql.Identifier(status)
        )
        advice = f"{_pasted(conn, create)} serves --{design} (see docs/your-table.md)"
        if row["index"] is not None:
            found.append(Check(f"an index for --{design}", True, f"{row['index']} (valid)"))
        elif row["rows"] >= LARGE_TABLE:
            found.append(Check(f"an index for --{design}", False, f"missing: {advice}"))
        else:
            found.append(
                Check(
                    f"an index for --{design}",
                    True,
                    f"none; below {LARGE_TABLE:,} rows "
                    f"the reclaim index serves; on a large table: {advice}",
                )
            )
    return found


def _claim_index_check(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[Check]:
    """An index in the claim's order (its ORDER BY: the priority, where mapped, DESC or ASC
    NULLS LAST; the ready time, ``column_types.ready_at``; the id), where the claim needs one
    the table may lack: a mapped priority, or a ready time that can be NULL (read through
    COALESCE, which no index on the column itself serves). Missing fails the check only on a
    table of LARGE_TABLE rows or more."""
    names = table.mapping
    column = names.priority
    found = table.types.get("available_at")
    nullable = found is not None and not found.not_null
    if column is None and not nullable:
        return []
    desc = names.priority_order == "desc"
    ready = sql.Identifier(names.column("available_at"))
    keys, options = [names.column("available_at"), names.column("id")], [0, 0]
    parts: list[sql.Composable] = [ready, sql.Identifier(names.column("id"))]
    if nullable:  # the key as pg_get_indexdef writes it (ordered_index compares it so)
        row = db.row(conn, "coalesced_key", {"oid": table.oid, "column": keys[0]})
        assert row is not None
        keys[0] = row["key"]
        parts[0] = sql.SQL("({})").format(column_types.ready_at(ready, found))
    if column is not None:
        keys, options = [column, *keys], [int(desc), *options]
        parts.insert(0, sql.SQL("{}{}").format(
            sql.Identifier(column), sql.SQL(" DESC NULLS LAST" if desc else "")
        ))  # fmt: skip
    # an index led by the priority alone serves it (the rest sorted among equal priorities);
    # where the ready time can be NULL, it must give that key too: the ready jobs are one
    # range of it only in the COALESCE's order (the index the column's own order, advised
    # before, leaves the claim sorting every job of a priority)
    least = len(keys) - 1 if nullable else 1
    row = db.row(
        conn,
        "ordered_index",
        {"oid": table.oid, "columns": keys, "options": options, "least": least},
    )
    assert row is not None
    create = sql.SQL("CREATE INDEX CONCURRENTLY ON {} ({}) WHERE {} = {}").format(
        table.ident,
        sql.SQL(", ").join(parts),
        sql.Identifier(names.column("status")),
        sql.Literal(names.status("queued")),
    )
    advice = f"{_pasted(conn, create)} serves the claim's order (see docs/your-table.md)"
    what = "an index for the claim's " + ("priority" if column is not None else "order")
    if row["index"] is not None:
        return [Check(what, True, f"{row['index']} (valid)")]
    if row["rows"] >= LARGE_TABLE:
        return [Check(what, False, f"missing: {advice}")]
    return [Check(what, True, f"none; below {LARGE_TABLE:,} rows the claim sorts; {advice}")]


def _pasted(conn: psycopg.Connection[Any], statement: sql.Composable) -> str:
    """A statement advised to paste, its names and values quoted as the server reads them
    (a control character in its escaped form: ``printable``)."""
    return printable.printable(statement).as_string(conn)


def _status_checks(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[Check]:
    """The status values jobctl writes, accepted by the column, and those the table holds."""
    names = table.mapping
    asker = shape.prober(conn, table.oid)
    rejected = shape.rejected_statuses(conn, shape.inspect(conn, table.qualified), names, asker)
    owner = safe_text.visible(asker.owner)
    results = [
        Check(
            "status values jobctl writes",
            not rejected,
            "; ".join(f"{v!r}: {why}" for v, why in rejected)
            or (
                "accepted: " + ", ".join(names.written_statuses())
                if asker.may
                else f"not judged: the column's type and CHECKs are {owner}'s code, which "
                f"jobctl runs only as {owner} or a weaker role; run schema check as {owner} "
                "or a superuser"
            ),
        )
    ]
    held = statuses.status_values(conn, table)
    if held is not None:
        results.append(Check("status values the table holds", *held))
    return results


def _lease_row_checks(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[Check]:
    """Rows reclaim cannot see, and rows whose token disagrees with their status."""
    names = table.mapping
    counts = db.one(conn, queries.query("lease_consistency", **table.fragments))
    return [
        Check(
            "processing rows without lease or token",
            counts["invisible"] == 0,
            f"{counts['invisible']} rows reclaim can never see",
        ),
        Check(
            "a token only on processing or done rows",
            counts["inconsistent"] == 0,
            f"{counts['inconsistent']} rows neither {names.status('processing')!r} nor "
            f"{names.status('done')!r} hold an attempt token",
        ),
    ]


def _partition_checks(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[Check]:
    """A partitioned table's reclaim index: the table's own (valid only once every
    partition's is attached), and the partitions that lack theirs, by name."""
    found = reclaim_index.partition_indexes(
        conn, table.oid, reclaim_index.index_name(table.name, "_processing_timeout"), table.mapping
    )
    lacking = found.lacking()
    count = len(found.partitions)
    if found.valid:
        parent = Check(
            "reclaim index",
            True,
            f"{found.index} (valid, on the partitioned table and its {count} partitions)",
        )
    elif found.index is not None:
        parent = Check(
            "reclaim index",
            False,
            f"{found.index} on the partitioned table is not valid yet: "
            f"{count - len(lacking)} of its {count} partitions have theirs attached "
            "(run jobctl schema apply)",
        )
    else:
        parent = Check("reclaim index", False, "missing: reclaim and stuck scan every partition")
    if not lacking:
        return [
            parent,
            Check("reclaim index on every partition", True, f"all {count} have theirs, attached"),
        ]
    said = {
        "missing": "missing on",
        "invalid": "invalid (an interrupted build) on",
        "not attached": "not attached to the table's index on",
    }
    parts = []
    for state, words in said.items():
        names = [
            p.qualified + ("" if p.leaf else " (partitioned)")
            for p in lacking
            if p.state() == state
        ]
        if names:
            shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if names[10:] else "")
            parts.append(f"{words} {shown}")
    return [
        parent,
        Check(
            "reclaim index on every partition",
            False,
            "; ".join(parts) + " (run jobctl schema apply)",
        ),
    ]

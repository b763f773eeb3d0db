"""The status values a jobs table holds, judged against a mapping's: a bounded sample of the
rows and what ANALYZE saw, never a scan. ``unmapped`` is ``schema apply``'s refusal when none
of the values held is one the mapping reads or writes, or when neither its queued nor its
processing value is held while a value no status names is (the jobs that wait and run are
under other names); ``status_values`` is ``schema check``'s row, failed in the same cases.
Example::

    unmapped(conn, table)                                  # None: the statuses are mapped
    ok, detail = status_values(conn, table) or (True, "")  # None: no status column
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobctl import db
from jobctl.sql import queries
from jobctl.table.mapping import STATUSES, TableMapping

if TYPE_CHECKING:
    import psycopg

SAMPLE_ROWS = 10_000  # rows read at most to see which statuses a table holds
SHOWN = 8  # status values named at most in a message


def present_statuses(conn: psycopg.Connection[Any], table: db.JobsTable) -> set[str]:
    """Status values the table holds: the distinct values among its first SAMPLE_ROWS rows,
    and the most common values ANALYZE saw over the whole table (no scan). The status column
    (under the table's mapping) must exist."""
    status = table.mapping.column("status")
    values = {
        row["value"]
        for row in db.rows(
            conn, queries.query("status_sample", **table.fragments), {"rows": SAMPLE_ROWS}
        )
    }
    common = db.row(
        conn,
        "status_common_values",
        {"schema": table.schema, "name": table.name, "column": status},
    )
    if common is not None and common["vals"]:
        values |= set(common["vals"])
    return values


def mapped_statuses(mapping: TableMapping) -> list[str]:
    """The table's values for the statuses jobctl reads and writes (and the park status)."""
    values = [mapping.status(design) for design in STATUSES]
    return values + ([mapping.parked] if mapping.parked not in values else [])


def unmatched(mapping: TableMapping, present: set[str]) -> bool:
    """Does the table hold status values, none of which is one the mapping reads or writes?"""
    return bool(present) and not present & set(mapped_statuses(mapping))


def unworked(mapping: TableMapping, present: set[str]) -> bool:
    """Does the table hold rows, none of them in the mapping's queued or processing value,
    and a value no status of the mapping names? Then the jobs that wait and run are under
    other names: summary would count none of them, stuck and reclaim see none. A table whose
    every value is named (an idle queue of done and failed jobs) is not: nothing says the
    names are wrong."""
    live = {mapping.status("queued"), mapping.status("processing")}
    return bool(present) and not present & live and bool(present - set(mapped_statuses(mapping)))


def _unworked_reason(mapping: TableMapping, present: set[str]) -> str:
    queued, processing = mapping.status("queued"), mapping.status("processing")
    others = present - set(mapped_statuses(mapping))
    return (
        f"neither the mapping's queued value {queued!r} nor its processing value "
        f"{processing!r} is among the values the table holds ({_listed(present)}; "
        f"{_listed(others)} no status of the mapping names), so jobctl would count no job "
        "queued or running: map the table's own with --status queued=ACTUAL --status "
        "processing=ACTUAL"
    )


def unmapped(conn: psycopg.Connection[Any], table: db.JobsTable) -> str | None:
    """Why the table's statuses are not mapped (it holds values, none of them the mapping's;
    or none its queued or processing value, and some no status names), and the next step;
    None if they are (or the table is empty)."""
    present = present_statuses(conn, table)
    if unmatched(table.mapping, present):
        return (
            f"its statuses are not mapped: the table holds {_listed(present)}, none of "
            f"{_listed(set(mapped_statuses(table.mapping)))}; map the table's own with jobctl "
            "schema apply --status DESIGN=ACTUAL (queued, processing, done, failed) and "
            "--park-status"
        )
    if unworked(table.mapping, present):
        return f"its statuses are not mapped: {_unworked_reason(table.mapping, present)}"
    return None


def _listed(values: set[str]) -> str:
    shown = sorted(values)[:SHOWN]
    return ", ".join(repr(v) for v in shown) + (", ..." if len(values) > SHOWN else "")


def status_values(conn: psycopg.Connection[Any], table: db.JobsTable) -> tuple[bool, str] | None:
    """The mapping's statuses judged against the values the table holds: (ok, detail); None
    when the table has no status column under its mapping."""
    columns = {r["name"] for r in db.rows(conn, "table_columns", {"oid": table.oid})}
    if table.mapping.column("status") not in columns:
        return None
    present = present_statuses(conn, table)
    mapping = table.mapping
    if not present:
        return True, "no rows to judge by"
    if unmatched(mapping, present):
        return False, (
            f"the table holds {_listed(present)}, none of "
            f"{_listed(set(mapped_statuses(mapping)))}: map the table's own with schema apply "
            "--status DESIGN=ACTUAL (queued, processing, done, failed) and --park-status"
        )
    if unworked(mapping, present):
        return False, _unworked_reason(mapping, present).replace(
            "--status", "schema apply --status", 1
        )
    seen = [value for value in mapped_statuses(mapping) if value in present]
    unseen = [value for value in mapped_statuses(mapping) if value not in present]
    # every value held, the mapping's and the others: a value no status names (Kill Bill's
    # REMOVED) is jobs jobctl never reads, counts or writes, which the operator must know
    others = sorted(present - set(mapped_statuses(mapping)))
    return True, (
        f"the table holds {', '.join(map(repr, seen + others))}"
        + (
            f"; {', '.join(map(repr, others))} no status of the mapping names: jobctl "
            "neither reads nor writes those jobs (map one with --status or --park-status if "
            "it should)"
            if others
            else ""
        )
        + (f" (not seen in the rows sampled: {', '.join(map(repr, unseen))})" if unseen else "")
    )

"""The types of the table's columns that the lease design reads or writes: which ones jobctl
serves and how (the SQL that reads each as text and writes into it), and the one line that
refuses the others before ``schema apply`` changes anything.

The id and the status are judged elsewhere (any id type whose values have a text form: ids
travel as text and are cast by the database; status values are probed against the column,
``shape.rejected_statuses``). Every other column of the design falls in a family here::

    t = ColumnType("last_error", "pg_catalog", "jsonb", "jsonb", "b")
    t.family == "json"
    refusal("public.jobs", TableMapping(), {"last_error": t}) is None
    fragments({"last_error": t})["reason_value"]   # to_jsonb(%(reason)s::text): a JSON string

What jobctl writes into a jsonb/json ``last_error`` is a JSON string (``to_jsonb(text)``), and
it reads any JSON value back as text (``#>> '{}'``: a string without its quotes, an object as
its JSON), so the history trigger never mixes text and jsonb. A worker id that is a uuid or
an integer is compared as text in the operator's filters and cast from text in the worker
API's statements. See docs/your-table.md, "Supported column types".
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from jobctl.table.mapping import COLUMNS, PRIORITY, TableMapping

if TYPE_CHECKING:
    from psycopg import sql

# (type schema, typname) of the built-in types jobctl knows -> its family
FAMILIES = {
    "text": "string",
    "varchar": "string",
    "uuid": "uuid",
    "int2": "integer",
    "int4": "integer",
    "int8": "integer",
    "timestamptz": "timestamp",
    "timestamp": "timestamp",
    "jsonb": "json",
    "json": "json",
    "numeric": "number",
    "float8": "number",
}
# a time kept as a number of seconds or milliseconds since the epoch (--column-unit): the
# types that can hold it, by unit (an integer overflows in 2038, or at once in milliseconds)
EPOCH_TYPES = {"s": ("int4", "int8", "numeric", "float8"), "ms": ("int8", "numeric", "float8")}

# the design's columns the application has (id and status aside): the families served, and
# the types named in a refusal (as the database prints them)
SERVED = {
    "attempts": ("integer",),
    "max_attempts": ("integer",),
    "available_at": ("timestamp",),
    "reserved_at": ("timestamp",),
    "finished_at": ("timestamp",),
    "updated_at": ("timestamp", "epoch"),
    "reserved_by": ("string", "uuid", "integer"),
    "last_error": ("string", "json"),
    # the claim orders by it (--column priority=COL): a number, compared as numbers are
    "priority": ("integer", "number"),
}
DESCRIBED = {
    "integer": "smallint, integer, bigint",
    "timestamp": "timestamp with time zone, timestamp without time zone",
    "string": "text, character varying",
    "uuid": "uuid",
    "json": "jsonb, json",
    "number": "numeric, double precision",
    "epoch": "bigint, integer, numeric, double precision in epoch seconds or milliseconds "
    "(--column-unit)",
}
# the lease design's own columns: schema apply adds them with these types; one that exists
# already must have the very type (the history and every statement rely on it)
LEASE_TYPES = {
    "attempt_token": ("uuid", "uuid"),
    "lease_expires_at": ("timestamptz", "timestamp with time zone"),
    "heartbeat_at": ("timestamptz", "timestamp with time zone"),
    "recovery_policy": ("text", "text"),
    "reclaim_count": ("int4", "integer"),
}
# the types a worker id given as text is cast to (a reserved_by of that type), by typname
CAST_FROM_TEXT = ("uuid", "int2", "int4", "int8")
_LENGTH = re.compile(r"\((\d+)\)$")


@dataclasses.dataclass(frozen=True)
class ColumnType:
    """A column's type as the catalog gives it (db's ``column_types`` row)."""

    column: str  # the table's column
    schema: str  # the type's schema
    name: str  # its typname: int8, varchar, jsonb, a domain's or an enum's own name
    display: str  # as the database prints it, with modifiers: character varying(200)
    typtype: str = "b"  # b: base, d: domain, e: enum, c: composite, r: range ...
    # a domain's innermost base type (schema, typname); a base type's own
    base: tuple[str, str] | None = None
    base_display: str | None = None  # a domain's base as declared: character varying(36)
    not_null: bool = False  # NOT NULL (the column's or its domain's): it never holds a NULL

    @property
    def family(self) -> str | None:
        """integer, timestamp, string, uuid, json; None: a type jobctl does not know. A domain
        is its base type's (Kill Bill's ``datetime`` over timestamp is a timestamp): every
        statement compares and writes it as that type; whether its own NOT NULL or CHECK
        accepts what jobctl writes is asked of the database (``shape.rejected_domains``)."""
        schema, name = self.base if self.typtype == "d" and self.base else (self.schema, "")
        if self.typtype == "d" and schema == "pg_catalog":
            return FAMILIES.get(name)
        if self.schema != "pg_catalog" or self.typtype != "b":
            return None  # an enum, an extension's type, one of the application's
        return FAMILIES.get(self.name)

    @property
    def domain(self) -> bool:
        """A domain over a type jobctl serves: its own constraints still to be asked."""
        return self.typtype == "d" and self.family is not None

    @property
    def length(self) -> int | None:
        """A character varying's length limit, if any (a domain's: its base's)."""
        if self.typtype == "d" and self.base is not None:
            display = self.base_display if self.base[1] == "varchar" else None
        else:
            display = self.display if self.name == "varchar" else None
        match = _LENGTH.search(display) if display else None
        return int(match[1]) if match else None


# what jobctl writes into each of the design's columns the application has (reclaim, requeue,
# fail): a domain over a served type must accept each ("null": NULL, "now": the time,
# "text": a reason, "count": an attempt count)
WRITES = {
    "available_at": ("now",),
    "finished_at": ("now", "null"),
    "updated_at": ("now",),
    "reserved_by": ("null",),
    "reserved_at": ("null",),
    "last_error": ("text",),
    "attempts": ("count",),
}


def served(design: str) -> str:
    """The types jobctl serves for the design's column ``design``, for a message."""
    if design in LEASE_TYPES:
        return LEASE_TYPES[design][1]
    return ", ".join(DESCRIBED[f] for f in SERVED[design])


def epoch(found: ColumnType | None, unit: str | None) -> bool:
    """Is this column a time kept as a number, in ``unit``, that jobctl serves?"""
    return (
        found is not None
        and unit in EPOCH_TYPES
        and found.family in ("integer", "number")
        and found.name in EPOCH_TYPES[unit]
    )


def problem(design: str, found: ColumnType, unit: str | None = None) -> str | None:
    """Why jobctl cannot serve this column as the design's ``design`` (None: it can), given
    the unit the mapping says it is kept in (``--column-unit``), if any."""
    kind = {"d": "a domain", "e": "an enum"}.get(found.typtype)
    shown = f"{found.display}{f' ({kind})' if kind else ''}"
    if unit is not None:
        if "epoch" not in SERVED.get(design, ()):
            return (
                f"{shown}, given a unit (--column-unit {design}={unit}): only updated_at takes one"
            )
        if found.family == "timestamp":
            return f"{shown}, not a number: drop --column-unit {design}={unit}"
        return None if epoch(found, unit) else f"{shown}, which cannot hold epoch {unit}"
    if design in LEASE_TYPES:
        ok = found.schema == "pg_catalog" and found.name == LEASE_TYPES[design][0]
    elif design in SERVED:
        ok = found.family in SERVED[design]
        if "epoch" in SERVED[design] and (epoch(found, "s") or epoch(found, "ms")):
            return f"{shown}, a number: give its unit with --column-unit {design}=ms (or =s)"
    else:
        return None  # id and status: judged by their own rules
    return None if ok else shown


def problems(mapping: TableMapping, types: Mapping[str, ColumnType]) -> list[str]:
    """Each column of a type jobctl cannot serve: its name, its type, and what is served.

    ``types``: the design's name -> the type of the table's column playing it (columns the
    table lacks are left out: they are judged, and added, elsewhere)."""
    found_problems = []
    for design in (*COLUMNS, PRIORITY):  # in the design's order, the priority's last
        found = types.get(design)
        why = None if found is None else problem(design, found, mapping.units.get(design))
        if found is None or why is None:
            continue
        named = found.column if found.column == design else f"{found.column} (its {design})"
        served_as = (
            "" if "--column-unit" in why else f" (jobctl serves {design} as {served(design)})"
        )
        found_problems.append(f"column {named} is {why}{served_as}")
    return found_problems


def refusal(table: str, mapping: TableMapping, types: Mapping[str, ColumnType]) -> str | None:
    """The one line that refuses the table for the types of its columns, or None."""
    found = problems(mapping, types)
    return f"{table}: {'; '.join(found)}" if found else None


# ---------------------------------------------------------------- the SQL, per type
def as_text(found: ColumnType | None, column: sql.Composable) -> sql.Composable:
    """``column`` (an expression naming the column) read as text: a JSON string without its
    quotes, any other JSON value as its text; a string column as it is."""
    from psycopg import sql

    if found is not None and found.family == "json":
        return sql.SQL("({} OPERATOR(pg_catalog.#>>) '{{}}'::pg_catalog.text[])").format(column)
    return column


def from_text(found: ColumnType | None, value: sql.Composable) -> sql.Composable:
    """A text ``value`` as the column ``found`` takes it: a JSON string for jsonb/json; cut to
    a character varying's length (an explicit cast), so that jobctl's reason never fails the
    write; a text column's as it is (the statements of the reference table are unchanged)."""
    from psycopg import sql

    if found is None or found.family not in ("json", "string"):
        return value
    if found.family == "json":
        function = "to_jsonb" if found.name == "jsonb" else "to_json"
        return sql.SQL("pg_catalog.{}({}::pg_catalog.text)").format(sql.SQL(function), value)
    if found.length is not None:
        return sql.SQL("CAST({} AS pg_catalog.varchar({}))").format(
            value, sql.SQL(str(found.length))
        )
    return value


def worker_value(found: ColumnType | None, value: sql.Composable) -> sql.Composable:
    """A worker id given as text, as the reserved_by column takes and compares it (a uuid or
    an integer column: cast by the database; a string column: as it is)."""
    from psycopg import sql

    if found is None or found.name not in CAST_FROM_TEXT or found.family is None:
        return value
    return sql.SQL("CAST({}::pg_catalog.text AS {})").format(
        value, sql.Identifier("pg_catalog", found.name)
    )


def naive(found: ColumnType | None) -> bool:
    """Is the column a timestamp without time zone (or a domain over one)? Its values are
    wall-clock times in the mapping's zone (TableMapping.zone), not instants."""
    if found is None:
        return False
    if found.typtype == "d":
        return found.base == ("pg_catalog", "timestamp")
    return found.typtype == "b" and (found.schema, found.name) == ("pg_catalog", "timestamp")


def _in_zone(zone: str, value: sql.Composable) -> sql.Composable:
    """``pg_catalog.timezone(zone, value)``: a timestamptz as the wall-clock time in ``zone``,
    or a timestamp without time zone as the instant it is there (its two overloads)."""
    from psycopg import sql

    return sql.SQL("pg_catalog.timezone({}::pg_catalog.text, {})").format(sql.Literal(zone), value)


def written(found: ColumnType | None, zone: str, value: sql.Composable) -> sql.Composable:
    """A time ``value`` (a timestamptz expression) as the column keeps it: as it is, or, for
    a timestamp without time zone, its wall-clock time in ``zone`` (never the session's:
    an assignment's own cast would read the session's TimeZone)."""
    return _in_zone(zone, value) if naive(found) else value


def now(found: ColumnType | None, unit: str | None, zone: str = "UTC") -> sql.Composable:
    """The time of the transaction as the column keeps it: ``now()`` for a timestamp (a
    timestamp without time zone: the wall-clock time in ``zone``), the epoch's seconds or
    milliseconds cast to the column's type for a number."""
    from psycopg import sql

    if found is None or not epoch(found, unit):
        # the worker API runs under the workers' path
        return written(found, zone, sql.SQL("pg_catalog.now()"))
    seconds = "pg_catalog.date_part('epoch', pg_catalog.now())"
    if unit == "ms":
        seconds += " OPERATOR(pg_catalog.*) 1000"
    return sql.SQL("CAST({} AS {})").format(
        sql.SQL(seconds), sql.Identifier("pg_catalog", found.name)
    )


def ready_at(column: sql.Composable, found: ColumnType | None) -> sql.Composable:
    """A job's ready time (``column``: an expression naming available_at) as the claim
    compares and orders it (the blocks available_now and claim, ``{ready_at}``): the column
    as it is where it cannot hold a NULL; where it can, a NULL (ready now) as the earliest
    time, ``COALESCE(j.eta, '-infinity'::pg_catalog.timestamp)``: the ready jobs of a priority
    are then the first of an index on it, one range, and a claim's scan stops at the first job
    not yet due instead of reading past every one (schema check advises that index; why:
    docs/your-table.md)."""
    from psycopg import sql

    if found is not None and found.not_null:
        return column
    base = "timestamp" if naive(found) else "timestamptz"
    return sql.SQL("COALESCE({}, '-infinity'::{})").format(
        column, sql.Identifier("pg_catalog", base)
    )


def as_time(
    found: ColumnType | None, unit: str | None, column: sql.Composable, zone: str = "UTC"
) -> sql.Composable:
    """``column`` (an expression naming the column) as a timestamptz: a number of seconds or
    milliseconds since the epoch through to_timestamp, a timestamp without time zone as the
    wall-clock time in ``zone`` it is (never the session's), a timestamptz as it is."""
    from psycopg import sql

    if naive(found):
        return _in_zone(zone, column)
    if found is None or not epoch(found, unit):
        return column
    divisor = "1000.0" if unit == "ms" else "1.0"
    return sql.SQL("pg_catalog.to_timestamp({} OPERATOR(pg_catalog./) {})").format(
        column, sql.SQL(divisor)
    )


def fragments(
    types: Mapping[str, ColumnType],
    columns: Mapping[str, sql.Composable],
    reclaim_error: sql.Composable,
    units: Mapping[str, str] | None = None,
    zone: str = "UTC",
) -> dict[str, sql.Composable]:
    """The statements' typed placeholders (sql/queries.sql, sql/schema.sql) for a table whose
    design columns have ``types``, are named ``columns`` (db.spelling's identifiers), keep
    the times given ``units`` as numbers, and their times without a zone in ``zone``."""
    from psycopg import sql

    last_error = types.get("last_error")
    reserved_by = types.get("reserved_by")
    updated_at, unit = types.get("updated_at"), (units or {}).get("updated_at")
    times: dict[str, sql.Composable] = {}
    # each time the design reads or writes, whatever its type: {C_now}, the transaction's
    # time as the column keeps it (what a claim or a completion writes), and {j_C_time} (the
    # jobs row j's), {old_C_time}, {new_C_time} (a trigger's rows'), the column read as the
    # instant it is (a timestamptz). A column is compared, ordered and tested for NULL as it
    # is (its index serves that); wherever it meets another time, it is read as its instant
    for design in ("available_at", "reserved_at", "finished_at"):
        found = types.get(design)
        times[f"{design}_now"] = now(found, None, zone)
        for prefix, row in (("j", "j"), ("old", "OLD"), ("new", "NEW")):
            named = sql.SQL("{}.{}").format(sql.SQL(row), columns[design])
            times[f"{prefix}_{design}_time"] = as_time(found, None, named, zone)
    j_updated_at = sql.SQL("j.{}").format(columns["updated_at"])
    j_updated_at_time = as_time(updated_at, unit, j_updated_at, zone)
    return {
        **times,
        "updated_at_now": now(updated_at, unit, zone),
        "j_updated_at_time": j_updated_at_time,
        # the fence's updated_at as read (manual_read, review) and compared (manual_fence):
        # the column's own value, but a time without a zone as its instant (a session's
        # TimeZone must not decide whether the row changed)
        "j_updated_at_seen": j_updated_at_time if naive(updated_at) else j_updated_at,
        # the fence's updated_at as an operator read it (JSON): the column's own number type,
        # else timestamptz (a time without a zone is read as its instant: j_updated_at_seen)
        "updated_at_seen_type": (
            sql.Identifier("pg_catalog", updated_at.name)
            if updated_at is not None and epoch(updated_at, unit)
            else sql.Identifier("pg_catalog", "timestamptz")
        ),
        "last_error_text": as_text(last_error, columns["last_error"]),
        "new_last_error_text": as_text(last_error, sql.SQL("NEW.{}").format(columns["last_error"])),
        "reclaim_error_value": from_text(last_error, reclaim_error),
        "reclaim_error_text": as_text(last_error, from_text(last_error, reclaim_error)),
        "reason_value": from_text(last_error, sql.Placeholder("reason")),
        "error_value": from_text(last_error, sql.Placeholder("error")),
        "worker_value": worker_value(reserved_by, sql.Placeholder("worker")),
    }

"""The shape of the user's jobs table, read from the catalog: its id and status types, its
partitions, and whether jobctl can serve it at all (the lease design is a retrofit onto the
table the application already has; that table is the real input).

Example::

    shape = inspect(conn, "work.jobs")
    refusal(shape, mapping) is None   # else the one line that says why jobctl cannot serve it
    rejected_statuses(conn, shape, mapping) == []   # every status jobctl writes is accepted
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from jobctl import db, errors
from jobctl.contract import safe_text
from jobctl.sql import queries
from jobctl.table import column_types, libraries
from jobctl.table.mapping import TableMapping

if TYPE_CHECKING:
    import psycopg


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    type: str  # as the database prints it: uuid, bigint, job_status, character varying(20)
    kind: str  # base, enum, domain, domain over enum
    base_type_oid: int  # the enum or base type under a domain
    not_null: bool


@dataclasses.dataclass(frozen=True)
class TableShape:
    """What jobctl needs to know of a table to speak to it in its own terms."""

    schema: str
    name: str
    oid: int
    qualified: str  # format('%I.%I'), as the history records it
    columns: dict[str, Column]
    primary_key: tuple[str, ...]
    partition_strategy: str | None  # list, range, hash; None: not partitioned
    partition_key: tuple[str, ...]
    partitions: tuple[str, ...]  # leaf partitions, as regclass text
    library: libraries.Match | None = None  # a queue library's own table (jobctl.libraries)

    @property
    def partitioned(self) -> bool:
        return self.partition_strategy is not None

    def column(self, mapping: TableMapping, design: str) -> Column | None:
        """The table's column playing the design's ``design``, if it has one."""
        return self.columns.get(mapping.column(design))

    def partitioned_by(self, mapping: TableMapping, design: str) -> bool:
        """Does a change of the design's column ``design`` move the row to another partition?"""
        return mapping.column(design) in self.partition_key


def inspect(conn: psycopg.Connection[Any], name: str) -> TableShape:
    """The table named ``name`` (schema-qualified allowed), read from the catalog."""
    found = db.identify(conn, name)
    if found is None:
        raise db.table_not_found(conn, name)
    if found["relkind"] not in ("r", "p"):
        raise errors.NothingDone(f"{found['qualified']} is not a table (a view or similar)")
    oid = found["oid"]
    columns = {
        row["name"]: Column(
            row["name"], row["type"], row["kind"], row["base_type_oid"], row["not_null"]
        )
        for row in db.rows(conn, "table_columns", {"oid": oid})
    }
    layout = db.row(conn, "table_layout", {"oid": oid})
    assert layout is not None
    return TableShape(
        schema=found["nspname"],
        name=found["relname"],
        oid=oid,
        qualified=found["qualified"],
        columns=columns,
        primary_key=tuple(layout["primary_key"] or ()),
        partition_strategy=layout["partition_strategy"],
        partition_key=tuple(layout["partition_key"] or ()),
        partitions=tuple(layout["partitions"] or ()),
        library=libraries.recognise(describe(conn, oid, found["relname"])),
    )


def describe(conn: psycopg.Connection[Any], oid: int, name: str) -> libraries.TableDescription:
    """What the catalog says of the table ``name`` and its schema, to recognise a queue
    library."""
    columns, labels, enum_types = {}, {}, {}
    for row in db.rows(conn, "library_columns", {"oid": oid}):
        columns[row["name"]] = "enum" if row["is_enum"] else libraries.normal_type(row["type"])
        if row["is_enum"]:
            labels[row["name"]] = tuple(row["labels"] or ())
            enum_types[row["name"]] = row["type_name"]
    neighbours = db.rows(conn, "library_neighbours", {"oid": oid})
    return libraries.TableDescription(
        columns,
        labels,
        tuple(frozenset(row["columns"]) for row in neighbours),
        name=name,
        neighbour_names=frozenset(row["name"] for row in neighbours),
        enum_types=enum_types,
        triggers=frozenset(row["name"] for row in db.rows(conn, "library_triggers", {"oid": oid})),
    )


def refusal(shape: TableShape, mapping: TableMapping) -> str | None:
    """Why jobctl cannot serve this table (one line, before anything changes), or None."""
    if shape.library is not None:
        return shape.library.refusal(shape.qualified)  # (NothingDone: "; nothing done")
    status = mapping.column("status")
    if status not in shape.columns:
        return (
            f"{shape.qualified} has no status column {status!r}: name the table's own with "
            "--column status=ACTUAL; a table whose state is in timestamps (Delayed::Job's "
            "locked_at and failed_at, say) gets one first, see docs/delayed-job.md (one table "
            "per state is never served)"
        )
    identifier = mapping.column("id")
    if identifier not in shape.columns:
        # the catalog knows the primary key: a one-column one is the id to name
        if len(shape.primary_key) == 1:
            return (
                f"{shape.qualified} has no id column {identifier!r}: its primary key is "
                f"{shape.primary_key[0]}, name it with --column id={shape.primary_key[0]}"
            )
        return (
            f"{shape.qualified} has no id column {identifier!r}: name the column that names one "
            "job (a one-column primary key or unique column) with --column id=ACTUAL"
        )
    if shape.primary_key and identifier not in shape.primary_key:
        return (
            f"{shape.qualified}: {identifier!r} is not part of its primary key "
            f"({', '.join(shape.primary_key)}): jobctl needs it to name one job"
        )
    return None


def repeated_id(conn: psycopg.Connection[Any], table: db.JobsTable) -> str | None:
    """Why jobctl refuses a table whose ids repeat (one line), or None. jobctl names a job by
    its id alone: its fences, plans, history, ``events`` and ``top`` key on it. A table keyed
    on the id and its partition key (a partitioned table's unique key must hold the partition
    key) may hold one id in two partitions: refused while it does. Served while no id
    repeats; a unique index on the id alone says none can, without reading the rows."""
    column = table.mapping.column("id")
    unique = db.row(conn, "id_unique_alone", {"oid": table.oid, "column": column})
    if unique is not None and unique["unique"]:
        return None
    found = db.row(conn, queries.query("repeated_id", **table.fragments))
    if found is None:
        return None
    return (
        f"{table.qualified}: id {safe_text.visible(found['id'])} is held by {found['rows']} "
        f"rows (ids repeat across its partitions: no unique index on {column!r} alone), and "
        "jobctl names a job by its id alone (its fences, plans, history, events and top): "
        "give every partition's rows ids from one sequence, and each repeated id a new one"
    )


@dataclasses.dataclass(frozen=True)
class Prober:
    """Who asks the column's type and CHECKs whether they accept a value: running a domain's
    CHECK or a CHECK's function, the application's code, with no more privilege than the
    table's owner. ``role``: the owner, whom the session becomes for each probe (SET LOCAL
    ROLE), or None: the session itself (the owner holds all of its privileges); ``may``:
    False when neither (the session is stronger than the owner and cannot become it), and
    nothing is probed."""

    owner: str
    role: str | None
    may: bool


def prober(conn: psycopg.Connection[Any], oid: int) -> Prober:
    """The ``Prober`` of the table ``oid`` for this session."""
    with db.safe(conn):
        row = db.one(conn, "probe_role", {"oid": oid})
    if row["owner_holds_mine"]:
        return Prober(row["owner"], None, True)
    return Prober(row["owner"], row["owner"], bool(row["may_become"]))


@contextlib.contextmanager
def probing(conn: psycopg.Connection[Any], asker: Prober) -> Iterator[None]:
    """A savepoint (or transaction) whose statements run as ``asker`` says, the session's
    own role back before it ends (an error rolls the role back with the rest)."""
    with conn.transaction():
        if asker.role is not None:
            db.run(conn, queries.query("become_role"), {"role": asker.role})
        yield
        if asker.role is not None:
            db.run(conn, queries.query("become_role"), {"role": "none"})


def rejected_statuses(
    conn: psycopg.Connection[Any],
    shape: TableShape,
    mapping: TableMapping,
    asker: Prober | None = None,
) -> list[tuple[str, str]]:
    """Status values jobctl may write that the column would refuse: (value, why).

    The column's type (enum labels, a domain's checks, a varchar's length) is asked by casting
    each value inside a savepoint; the table's CHECK constraints on the column are evaluated
    on a row holding only that value (a check that needs other columns is not judged here).
    On a table partitioned by status, each value must have a partition to go to: the planner
    is asked which partitions a row of that status could be in (none: refused). Each is asked
    as ``asker`` says (None: the table's ``prober``); nothing when it may not.
    """
    import psycopg
    from psycopg import sql

    status = shape.columns[mapping.column("status")]
    checks = db.rows(conn, "status_checks", {"oid": shape.oid, "column": status.name})
    asker = asker or prober(conn, shape.oid)
    if not asker.may:
        return []  # not judged (the caller asks prober why)
    rejected: list[tuple[str, str]] = []
    for value in mapping.written_statuses():
        try:
            with probing(conn, asker):
                db.run(
                    conn, queries.query("cast_probe", type=sql.SQL(status.type)), {"value": value}
                )
        except (psycopg.DataError, psycopg.IntegrityError) as exc:
            rejected.append((value, f"{status.type} refuses it: {str(exc).splitlines()[0]}"))
            continue
        for check in checks:
            probe = queries.query(
                "check_probe",
                expression=sql.SQL(check["expression"].replace("%", "%%")),
                type=sql.SQL(status.type),
                column=sql.Identifier(status.name),
            )
            try:
                with probing(conn, asker):
                    row = db.row(conn, probe, {"value": value})
            except Exception:
                continue  # the check needs other columns: not judged here
            if row is not None and not row["ok"]:
                rejected.append((value, f"CHECK constraint {check['name']} refuses it"))
        if shape.partitioned_by(mapping, "status"):
            with probing(conn, asker):  # planning may run an index expression's function
                held = _has_partition(conn, shape, status, value)
            if not held:
                rejected.append((value, "no partition of the table holds this status"))
    return rejected


def rejected_domains(
    conn: psycopg.Connection[Any],
    types: Mapping[str, column_types.ColumnType],
    asker: Prober,
) -> list[str]:
    """Each design column of a domain over a served type whose own NOT NULL or CHECK refuses
    a value jobctl writes into it (``column_types.WRITES``): the column, the value, why. Asked
    by casting each value to the domain inside a savepoint (what the write would do), as
    ``asker`` says (nothing asked when it may not)."""
    import datetime as dt

    import psycopg
    from psycopg import sql

    values: dict[str, Any] = {
        "null": None,
        "now": dt.datetime.now(dt.timezone.utc),
        "text": "lease expired before completion",
        "count": 0,
    }
    rejected: list[str] = []
    if not asker.may:
        return rejected  # not judged
    for design, found in types.items():
        if not found.domain:
            continue
        for written in column_types.WRITES.get(design, ()):
            try:
                with probing(conn, asker):
                    db.run(
                        conn,
                        queries.query("cast_probe", type=sql.Identifier(found.schema, found.name)),
                        {"value": values[written]},
                    )
            except (psycopg.DataError, psycopg.IntegrityError) as exc:
                what = "NULL" if written == "null" else f"a {written} value"
                rejected.append(
                    f"column {found.column} (its {design}) is {found.display} (a domain), "
                    f"which refuses {what} jobctl writes there: {str(exc).splitlines()[0]}"
                )
    return rejected


def _has_partition(
    conn: psycopg.Connection[Any], shape: TableShape, status: Column, value: str
) -> bool:
    """Could a row of status ``value`` be stored: does any partition survive pruning?"""
    import json

    from psycopg import sql

    plan = db.row(
        conn,
        queries.query(
            "partition_probe",
            sql.Identifier(shape.schema, shape.name),
            column=sql.Identifier(status.name),
            value=sql.Literal(value),
            type=sql.SQL(status.type),
        ),
    )
    return '"Relation Name"' in json.dumps(plan, default=str)

"""schema apply (the lease design's columns, checks, reclaim index; jobctl's history) and
schema check."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from jobctl import (
    column_types,
    db,
    errors,
    history,
    locks,
    mapping,
    queries,
    safe_text,
    shape,
    sql_text,
    unserved,
)
from jobctl.mapping import TableMapping

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


@dataclasses.dataclass(frozen=True)
class Step:
    """One statement of schema apply; ``outside_transaction`` for CREATE INDEX CONCURRENTLY.

    ``locks`` names the jobs table when the step takes a lock that conflicts with the workers'
    statements (ALTER TABLE, CREATE TRIGGER, DROP INDEX, and the history's ALTER and CREATE
    INDEX on jobctl's tables, which the trigger writes): it is tried with a short lock_timeout
    and retried (``locks.with_lock_retries``), so that workers never queue behind it for long."""

    what: str
    statement: sql.SQL | sql.Composed
    outside_transaction: bool = False
    locks: str | None = None
    probe: sql.Composed | None = None  # CONCURRENTLY: its first lock, tried in a transaction


def index_name(relname: str, suffix: str, *, distinct: bool = False) -> str:
    """idx_<table><suffix> within 63 bytes (the lease design's idx_jobs_processing_timeout).

    A longer table name is cut (never inside a character); ``distinct`` then puts a hash of
    the whole name before the suffix, so that partitions whose names differ only past the cut
    (jobs_2025_01_..._a, ..._b) get distinct index names."""
    name = f"idx_{relname}"
    if len((name + suffix).encode()) <= 63:
        return name + suffix
    tag = "_" + hashlib.sha1(relname.encode()).hexdigest()[:8] if distinct else ""
    room = 63 - len((tag + suffix).encode())
    return name.encode()[:room].decode(errors="ignore") + tag + suffix


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
                    queued_index=sql.Identifier(index_name(parts[-1], "_queued")),
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
        unmapped = unserved.unmapped(conn, table)  # the values it holds: none of the mapping's
        if unmapped is not None:
            raise errors.Refused(f"{table.qualified}: {unmapped}; nothing done")
        fragments = table.fragments
        ident, relname, schema_name, oid = table.ident, table.name, table.schema, table.oid
        locked = table.qualified
        has_rows = _one(conn, queries.query("table_has_rows", ident))["e"]
        columns = set(found.columns)
        constraints = {
            r["conname"]: r["convalidated"] for r in _rows(conn, "table_constraints", table.oid)
        }
        indexes = reclaim_indexes(conn, table.oid, mapping)

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
    ours = index_name(relname, "_processing_timeout")
    partitioned = exists is not None and exists["relkind"] == "p"
    if oid is not None and _made_for_other_names(conn, oid, ours, mapping):
        steps.append(
            Step(  # (on a partitioned table, with every partition's index attached to it)
                f"drop the reclaim index {ours}, made for other status or column names",
                queries.query("drop_index", index=sql.Identifier(schema_name, ours)),
                locks=locked,
            )
        )
        indexes.pop(ours, None)
    if partitioned:  # an index ON ONLY the table, then each partition's, attached to it
        steps.extend(_partitioned_index_steps(conn, table, ours))
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


def reclaim_indexes(
    conn: psycopg.Connection[Any], table_oid: int, mapping: TableMapping | None = None
) -> dict[str, bool]:
    """The table's indexes that can serve reclaim (partial on processing, lease_expires_at
    among the first two keys), whatever their names: name -> valid. On a partitioned table
    these are its partitioned indexes, valid only once every partition's index is attached
    (an index made ON ONLY the table is not valid until then): see partition_indexes."""
    rows = _rows(conn, "reclaim_index_candidates", table_oid)
    return {r["relname"]: bool(r["indisvalid"]) for r in rows if _reclaim_shaped(r, mapping)}


def _reclaim_shaped(index: dict[str, Any], mapping: TableMapping | None) -> bool:
    """Can this index (a catalog row: predicate, keys) serve reclaim? Its predicate names the
    table's processing value as the catalog prints a literal ('run''ning'::task_state)."""
    m = mapping or TableMapping()
    processing = sql.Literal(m.status("processing")).as_string(None)
    return bool(
        index["predicate"]
        and processing in index["predicate"]
        and index["keys"]
        and m.column("lease_expires_at") in index["keys"][:2]
    )


def _made_for_other_names(
    conn: psycopg.Connection[Any], table_oid: int, ours: str, mapping: TableMapping
) -> bool:
    """Is jobctl's reclaim index (``ours``) on the table one made for another mapping (an
    earlier --status or --column)? It then serves nothing, and holds the name."""
    rows = [r for r in _rows(conn, "reclaim_index_candidates", table_oid) if r["relname"] == ours]
    return bool(rows) and not _reclaim_shaped(rows[0], mapping)


# ---------------------------------------------------------------- partitioned tables
# PostgreSQL cannot build an index CONCURRENTLY on a partitioned table, and a plain CREATE
# INDEX on it holds a SHARE lock on every partition for the whole build. So the reclaim index
# is made ON ONLY the table (an empty, invalid shell: a catalog change under a short lock),
# each partition gets its own (CONCURRENTLY when it has rows), attached to its parent's
# with ALTER INDEX ... ATTACH PARTITION (a short lock on that partition's index); once every
# partition's index is attached, PostgreSQL marks the parent's valid, and from then on makes
# the index itself on each partition created or attached later. A partition that is itself
# partitioned gets its own index ON ONLY, attached to its parent's, and so on down.
#
# The rest of schema apply needs nothing of its own on a partitioned table (verified on
# PostgreSQL 15 and 18, tests/integration/test_partitioned.py): ADD COLUMN and ADD CONSTRAINT
# ... CHECK ... NOT VALID are accepted on it and recurse to every partition (each under the
# short lock tries; NOT VALID is refused on partitioned tables only for FOREIGN KEYs, before
# PostgreSQL 18), VALIDATE CONSTRAINT scans each partition under SHARE UPDATE EXCLUSIVE, and
# the history trigger (BEFORE UPDATE FOR EACH ROW) is cloned to every partition, present and
# future (PostgreSQL 13+), CREATE OR REPLACE replacing the clones too.


@dataclasses.dataclass(frozen=True)
class Partition:
    """One partition of a partitioned jobs table (at any level), and its reclaim index."""

    oid: int
    parent_oid: int
    schema: str
    name: str
    qualified: str  # format('%I.%I')
    relkind: str  # r: a table (a leaf), p: partitioned in turn, f: a foreign table
    index: str | None  # its reclaim index attached to its parent's, if any
    index_valid: bool
    unattached: dict[str, bool]  # its other reclaim indexes (attached to none): name -> valid

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    @property
    def leaf(self) -> bool:
        return self.relkind != "p"

    def state(self) -> str:
        """attached, not attached, invalid, missing: what its reclaim index is."""
        if self.index is not None:
            return "attached" if self.index_valid or not self.leaf else "invalid"
        if any(self.unattached.values()):
            return "not attached"
        return "invalid" if self.unattached else "missing"


@dataclasses.dataclass(frozen=True)
class PartitionIndexes:
    """A partitioned table's reclaim index: the table's own (``index``: a valid one of any
    name, else jobctl's if it is there) and each partition's, top down."""

    schema: str
    qualified: str
    index: str | None
    valid: bool
    partitions: tuple[Partition, ...]  # a partition's parent always comes before it

    def lacking(self) -> list[Partition]:
        """The partitions whose reclaim index is missing, invalid or not attached."""
        return [p for p in self.partitions if p.state() != "attached"]


def partition_indexes(
    conn: psycopg.Connection[Any], table_oid: int, ours: str, mapping: TableMapping | None = None
) -> PartitionIndexes:
    """The reclaim index of the partitioned table ``table_oid`` and of each of its partitions
    (found by shape, as reclaim_indexes does; ``ours`` is jobctl's name for the table's)."""
    tree = _rows(conn, "partition_tree", table_oid)
    candidates = _rows(conn, "partition_index_candidates", table_oid)
    shaped = [r for r in candidates if _reclaim_shaped(r, mapping)]
    root = tree[0]
    on_root = {r["relname"]: r for r in shaped if r["table_oid"] == table_oid}
    valid = sorted(n for n, r in on_root.items() if r["indisvalid"])
    # a valid one of any name (jobctl's first); else jobctl's, invalid until all are attached
    chosen = on_root[ours if ours in valid else valid[0]] if valid else on_root.get(ours)
    index_oid: dict[int, int | None] = {table_oid: chosen["oid"] if chosen else None}
    partitions = []
    for node in tree[1:]:
        mine = [r for r in shaped if r["table_oid"] == node["oid"]]
        parent_index = index_oid.get(node["parent_oid"])
        attached = next(
            (r for r in mine if parent_index is not None and r["attached_to"] == parent_index),
            None,
        )
        index_oid[node["oid"]] = attached["oid"] if attached else None
        partitions.append(
            Partition(
                node["oid"],
                node["parent_oid"],
                node["nspname"],
                node["relname"],
                node["qualified"],
                node["relkind"],
                attached["relname"] if attached else None,
                bool(attached and attached["indisvalid"]),
                {r["relname"]: bool(r["indisvalid"]) for r in mine if r["attached_to"] is None},
            )
        )
    return PartitionIndexes(
        root["nspname"],
        root["qualified"],
        chosen["relname"] if chosen else None,
        bool(chosen and chosen["indisvalid"]),
        tuple(partitions),
    )


def _partitioned_index_steps(
    conn: psycopg.Connection[Any], table: db.JobsTable, ours: str
) -> list[Step]:
    """The steps that give a partitioned table its reclaim index without a long lock: the
    index ON ONLY the table; then, depth first, for each partition lacking one attached: an
    invalid leftover of an interrupted build dropped, its own index built (CONCURRENTLY when
    it has rows) and attached to its parent's. A partition partitioned in turn gets an index
    ON ONLY, its partitions' attached to it, and only then is it attached upward: attaching
    it while still invalid would make PostgreSQL take an ACCESS EXCLUSIVE lock on the whole
    table when its last partition's index is attached (to validate the table's index).
    Nothing when the table has a valid reclaim index (of any name): every partition has it."""
    found = partition_indexes(conn, table.oid, ours, table.mapping)
    if found.valid:
        return []
    foreign = [p.qualified for p in found.partitions if p.relkind == "f"]
    if foreign:
        raise errors.Refused(
            f"{table.qualified}: partition {', '.join(foreign)} is a foreign table, which "
            "cannot have an index, so the reclaim index could never be valid; nothing done"
        )
    steps = []
    if found.index is None:
        steps.append(
            Step(
                f"create the reclaim index on {table.qualified} (ON ONLY: each partition's "
                "follows, attached to it)",
                _reclaim_index(table, table.ident, ours, only=True),
                locks=table.qualified,
            )
        )
    names = _partition_index_names(conn, tuple(p for p in found.partitions if p.index is None))
    children: dict[int, list[Partition]] = {}
    for p in found.partitions:
        children.setdefault(p.parent_oid, []).append(p)

    def visit(parent_oid: int, parent_index: sql.Identifier) -> None:
        for p in children.get(parent_oid, []):
            if p.index is not None:  # attached (if invalid, which only a REINDEX can mend:
                if not p.leaf:  # schema check reports it); its partitions may lack theirs
                    visit(p.oid, sql.Identifier(p.schema, p.index))
                continue
            name = names[p.oid]
            steps.extend(_partition_index_steps(conn, table, p, name))
            if not p.leaf:
                visit(p.oid, sql.Identifier(p.schema, name))
            steps.append(
                Step(
                    f"attach the reclaim index of partition {p.qualified}",
                    queries.query(
                        "attach_index",
                        parent_index=parent_index,
                        index=sql.Identifier(p.schema, name),
                    ),
                    locks=p.qualified,
                )
            )

    visit(table.oid, sql.Identifier(table.schema, found.index or ours))
    return steps


def _partition_index_steps(
    conn: psycopg.Connection[Any], table: db.JobsTable, p: Partition, name: str
) -> list[Step]:
    """One partition's own index (an invalid leftover dropped first), not yet attached."""
    mine = p.unattached.get(name)
    if not p.leaf:
        if mine is not None:
            return []
        return [
            Step(
                f"create the reclaim index on partition {p.qualified} (ON ONLY: it is "
                "partitioned in turn)",
                _reclaim_index(table, p.ident, name, only=True),
                locks=p.qualified,
            )
        ]
    if mine:
        return []
    steps = []
    if mine is False:
        steps.append(
            Step(  # never used by queries, attached to nothing: dropping it is instant
                f"drop the invalid reclaim index of partition {p.qualified} (left by an "
                "interrupted concurrent build)",
                queries.query("drop_index", index=sql.Identifier(p.schema, name)),
                locks=p.qualified,
            )
        )
    has_rows = _one(conn, queries.query("table_has_rows", p.ident))["e"]
    steps.append(
        Step(
            f"create the reclaim index on partition {p.qualified}"
            + (" concurrently" if has_rows else " (no rows: a short lock)"),
            _reclaim_index(table, p.ident, name, concurrently=has_rows),
            outside_transaction=has_rows,
            # an empty partition's plain build is over in a moment, but its SHARE lock waits
            # like any: short tries, as for the other locking steps
            locks=None if has_rows else p.qualified,
            probe=queries.query("concurrent_lock_probe", p.ident) if has_rows else None,
        )
    )
    return steps


def _reclaim_index(
    table: db.JobsTable,
    on: sql.Identifier,
    name: str,
    *,
    concurrently: bool = False,
    only: bool = False,
) -> sql.Composed:
    """The reclaim index statement, in the table's own names, on the table or a partition."""
    return queries.query(
        "reclaim_index",
        **{
            **table.fragments,
            "table": on,
            "index": sql.Identifier(name),
            "concurrently": sql.SQL("CONCURRENTLY" if concurrently else ""),
            "only": sql.SQL("ONLY" if only else ""),
        },
    )


def _partition_index_names(
    conn: psycopg.Connection[Any], partitions: tuple[Partition, ...]
) -> dict[int, str]:
    """Each partition's reclaim index name: idx_<partition>_processing_timeout within 63
    bytes, unique in its schema. A name taken by anything but that partition's own reclaim
    index (attached to nothing) gets a hash of the partition's name; if that is taken too,
    Refused (an index of that name would be skipped by IF NOT EXISTS)."""
    suffix = "_processing_timeout"
    first = {p.oid: index_name(p.name, suffix, distinct=True) for p in partitions}
    second = {
        p.oid: index_name(
            f"{p.name}_{hashlib.sha1(p.name.encode()).hexdigest()[:8]}", suffix, distinct=True
        )
        for p in partitions
    }
    wanted = [(p.schema, n) for p in partitions for n in (first[p.oid], second[p.oid])]
    taken = {
        (r["nspname"], r["relname"]): r["table_oid"]
        for r in conn.execute(
            queries.query("relations_named"),
            {"schemas": [s for s, _ in wanted], "names": [n for _, n in wanted]},
        )
    }
    names: dict[int, str] = {}
    planned: set[tuple[str, str]] = set()
    for p in partitions:
        for candidate in (first[p.oid], second[p.oid]):
            key = (p.schema, candidate)
            ours = key in taken and taken[key] == p.oid and candidate in p.unattached
            if key not in planned and (key not in taken or ours):
                names[p.oid] = candidate
                planned.add(key)
                break
        else:
            raise errors.Refused(
                f"{p.qualified}: the names {first[p.oid]} and {second[p.oid]} for its reclaim "
                f"index are taken in schema {p.schema}; nothing done"
            )
    return names


_SCRIPT_HEAD = """\
-- Run with: psql -v ON_ERROR_STOP=1 -f this.sql
-- Steps marked "takes a lock the workers wait for" wait at most {timeout} for it (SET LOCAL
-- lock_timeout), so the workers are never held up longer than that. If such a step fails
-- with "canceling statement due to lock timeout", nothing of it was applied: wait a moment and
-- run it again, with growing pauses, until a gap between long transactions lets it through
-- (jobctl schema apply does this by itself, up to --lock-deadline). Then run the rest.
"""


def render_sql(
    conn: psycopg.Connection[Any], steps: list[Step], backoff: locks.Backoff = locks.DEFAULT_BACKOFF
) -> str:
    """The steps as a SQL script, for review or to run by hand (--sql): each step that takes
    a lock the workers wait for in its own transaction with a short lock_timeout. Every step
    that runs in a transaction sets jobctl's search_path in it, as jobctl's own do (psql runs
    the script under the session's); a comment's text (names from the catalog or the command
    line) is shown escaped, on its one line (``safe_text.visible``), and a name or a text with
    a control character in its escaped SQL form (``sql_text.printable``)."""
    timeout = f"{round(backoff.max_timeout * 1000)}ms"
    path = "SET LOCAL search_path = pg_catalog, pg_temp;"
    parts = []
    for step in steps:
        text = sql_text.printable(step.statement).as_string(conn).strip()
        what = safe_text.visible(step.what)
        if step.outside_transaction:  # CONCURRENTLY: it names every schema itself
            parts.append(f"-- {what}\n{text};")
        elif step.locks:
            parts.append(
                f"-- {what}: takes a lock the workers wait for; retry on lock timeout\n"
                f"BEGIN;\n{path}\nSET LOCAL lock_timeout = '{timeout}';\n{text};\nCOMMIT;"
            )
        else:
            parts.append(f"-- {what}\nBEGIN;\n{path}\n{text};\nCOMMIT;")
    head = _SCRIPT_HEAD.format(timeout=timeout) if any(s.locks for s in steps) else ""
    return head + "\n" + "\n\n".join(parts) + "\n" if head else "\n\n".join(parts) + "\n"


DEFAULT_LOCK_DEADLINE = dt.timedelta(minutes=5)


def apply(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    steps: list[Step],
    *,
    deadline: dt.timedelta = DEFAULT_LOCK_DEADLINE,
    backoff: locks.Backoff = locks.DEFAULT_BACKOFF,
    on_wait: Callable[[locks.Wait], None] = lambda wait: None,
    on_done: Callable[[str], None] = lambda what: None,
) -> list[str]:
    """Run the steps in order, each atomic, never holding the workers up for long.

    A step that ``locks`` the jobs table: short tries in their own transactions (lock_timeout
    from ``backoff``, never above --lock-timeout), retried with jittered sleeps. Any other step
    (VALIDATE, CREATE INDEX CONCURRENTLY, ...) waits in one statement, its lock_timeout the
    time left, while a second connection watches whom it waits for. ``on_wait`` hears why a
    step waits, at most once a second; ``on_done`` each step done. At the deadline:
    ``locks.DeadlineExceeded``, naming the holder; the failed step left nothing behind
    (except a CONCURRENTLY build: its invalid index, which the next apply rebuilds)."""
    if settings.lock_timeout.total_seconds() > 0:  # 0: no lock_timeout, the backoff's cap
        backoff = dataclasses.replace(
            backoff, max_timeout=min(backoff.max_timeout, settings.lock_timeout.total_seconds())
        )
    ends = time.monotonic() + deadline.total_seconds()
    done = []
    for step in steps:
        remaining = ends - time.monotonic()
        if step.locks:
            _with_retries(conn, settings, step, remaining, deadline, backoff, on_wait)
        else:
            _watched(conn, settings, step, remaining, deadline, on_wait)
        done.append(step.what)
        on_done(step.what)
    return done


def _with_retries(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    step: Step,
    remaining: float,
    deadline: dt.timedelta,
    backoff: locks.Backoff,
    on_wait: Callable[[locks.Wait], None],
) -> None:
    """One step that locks the jobs table: short tries until ``remaining`` seconds are up."""
    with db.transaction(conn, settings, read_only=True):
        row = conn.execute(queries.query("lock_target"), {"name": step.locks}).fetchone()
    assert row is not None
    throttle = locks.Throttle()
    seen = locks.Wait(step.what, 0, 0, None)

    def attempt(timeout: float) -> None:
        with db.mapped_errors(settings.resolved_dsn()), db.transaction(conn, settings):
            conn.execute(
                queries.query("local_lock_timeout"),
                {"timeout": f"{max(1, round(timeout * 1000))}ms"},
            )
            conn.execute(step.statement)

    def retry(tries: int, elapsed: float, timeout: float) -> None:
        nonlocal seen
        seen = dataclasses.replace(seen, elapsed=elapsed, attempts=tries)
        if throttle.ready():
            with db.transaction(conn, settings, read_only=True):
                blocker = locks.holders(conn, row["oid"], row["since"])
            seen = dataclasses.replace(seen, blocker=blocker)
            on_wait(seen)

    try:
        locks.with_lock_retries(attempt, deadline=remaining, backoff=backoff, on_retry=retry)
    except locks.DeadlineExceeded:
        with db.transaction(conn, settings, read_only=True):
            blocker = locks.holders(conn, row["oid"], row["since"])
        seen = dataclasses.replace(seen, blocker=blocker or seen.blocker)
        tries = f"{seen.attempts} {'try' if seen.attempts == 1 else 'tries'}"
        raise locks.DeadlineExceeded(
            f"{step.what}: the lock on {step.locks} was not granted within the "
            f"{_span(deadline)} deadline ({tries}, each holding the workers up at most "
            f"{round(backoff.max_timeout * 1000)} ms); held by "
            f"{seen.blocker or 'a session that has finished since'}; nothing of this step was "
            "applied: run jobctl schema apply again (jobctl schema check shows what is missing)",
            seen,
        ) from None


def _watched(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    step: Step,
    remaining: float,
    deadline: dt.timedelta,
    on_wait: Callable[[locks.Wait], None],
) -> None:
    """A step that does not block the workers, in one statement: its lock_timeout is the time
    left; a second connection reports whom it waits for (old transactions, for an index
    build)."""
    throttle = locks.Throttle()
    last: list[locks.Wait] = []
    timeout = f"{max(1, round(remaining * 1000))}ms"

    def report(blocker: str | None, phase: str | None, elapsed: float) -> None:
        last[:] = [locks.Wait(step.what, elapsed, 0, blocker, phase)]
        if throttle.ready():
            on_wait(last[0])

    if remaining <= 0:
        raise locks.DeadlineExceeded(
            f"{step.what}: not started, the {_span(deadline)} deadline has passed; run jobctl "
            "schema apply again",
            None,
        )
    try:
        with (
            db.mapped_errors(settings.resolved_dsn()),
            locks.watching(settings, conn.info.backend_pid, report),
        ):
            if step.outside_transaction:
                # CONCURRENTLY runs outside a transaction block, so no transaction-local
                # lock_timeout; a session-level one would stay on the server connection (behind
                # a pooler, shared with the application). Its first lock (SHARE UPDATE
                # EXCLUSIVE: no worker statement conflicts with it) is tried under the time left
                # in a short transaction; then the build waits for older transactions as long
                # as they last, the watcher saying whom it waits for.
                if step.probe is not None:
                    with db.transaction(conn, settings):
                        conn.execute(queries.query("local_lock_timeout"), {"timeout": timeout})
                        conn.execute(step.probe)
                conn.execute(step.statement)
            else:
                with db.transaction(conn, settings):
                    conn.execute(queries.query("local_lock_timeout"), {"timeout": timeout})
                    conn.execute(step.statement)
    except errors.LockTimeout:
        wait = last[0] if last else None
        left = (
            "; it left an invalid index, which the next jobctl schema apply drops and rebuilds"
            if step.outside_transaction
            else "; nothing of this step was applied"
        )
        raise locks.DeadlineExceeded(
            f"{step.what}: still held up at the {_span(deadline)} deadline"
            + (f" ({wait.phase})" if wait and wait.phase else "")
            + f" by {wait.blocker if wait and wait.blocker else 'another transaction'}"
            + left
            + " (run jobctl schema apply again)",
            wait,
        ) from None


def _span(duration: dt.timedelta) -> str:
    seconds = duration.total_seconds()
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g}s"


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


# what each history mode costs the workers, measured by tests/bench/bench_trigger.py and
# tests/bench/bench_pgbench.py (README, Performance): loss of worker cycles, best of rounds
MODE_COST = {
    "transitions": "about +1-11 % server CPU per worker cycle, 2-6 % fewer cycles (no plpgsql "
    "on the workers' claims, heartbeats and completions; heartbeats skip its WHEN)",
    "late": "about +11-37 % server CPU per worker cycle, 8-25 % fewer cycles (one plpgsql call "
    "and one row per completion)",
    "exact": "about +15-40 % server CPU per worker cycle, 9-25 % fewer cycles (every "
    "heartbeat calls the trigger)",
    "audit": "about +2-7 % server CPU per worker cycle, within the benchmark's noise",
}


# ---------------------------------------------------------------- check
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
    if state.mode in history.MODES:
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
        f"costs {MODE_COST[state.mode]}",
    )


def check(conn: psycopg.Connection[Any], table_name: str) -> list[Check]:
    """The lease design's pre-flight checklist, as far as the database can tell."""
    table = db.resolve_table(conn, table_name)
    names = table.mapping
    from jobctl import remove  # (what schema remove left: nothing of jobctl's, say so)

    results = [
        Check("table exists", True, table.qualified),
        *filter(None, [remove.not_installed(conn, table)]),
        Check("the table's names", True, "; ".join(names.describe())),
        Check("schema apply", *unserved.apply_verdict(conn, table)),
    ]
    columns = {r["name"]: r["type"] for r in _rows(conn, "table_columns", table.oid)}
    missing = [f"{c} ({names.column(c)})" for c in BASE_COLUMNS if names.column(c) not in columns]
    results.append(
        Check(
            "queue columns",
            not missing,
            "missing: " + ", ".join(missing) if missing else "all present",
        )
    )
    wrong = [
        f"{names.column(c)} ({columns.get(names.column(c), 'missing')}, want {t})"
        for c, t in LEASE_COLUMNS.items()
        if columns.get(names.column(c)) != t
    ]
    results.append(
        Check("lease columns", not wrong, "; ".join(wrong) or "all present, right types")
    )
    typed = column_types.problems(names, table.types)
    results.append(Check("column types", not typed, "; ".join(typed) or "every one served"))
    check_defs = [
        r["definition"]
        for r in _rows(conn, "table_constraints", table.oid)
        if r["kind"] == "c" and r["convalidated"]
    ]
    for column in ("recovery_policy", "reclaim_count"):
        found = any(names.column(column) in d for d in check_defs)
        results.append(
            Check(
                f"check constraint on {column}",
                found,
                "present" if found else "missing (run jobctl schema apply)",
            )
        )
    indexes = reclaim_indexes(conn, table.oid, table.mapping)
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
    results.extend(_partition_checks(conn, table) if partitioned else [reclaim])
    results.append(history_check(conn, table))
    if names.column("status") in columns:
        rejected = shape.rejected_statuses(conn, shape.inspect(conn, table.qualified), names)
        results.append(
            Check(
                "status values jobctl writes",
                not rejected,
                "; ".join(f"{v!r}: {why}" for v, why in rejected)
                or "accepted: " + ", ".join(names.written_statuses()),
            )
        )
        held = unserved.status_values(conn, table)
        if held is not None:
            results.append(Check("status values the table holds", *held))
    if not wrong:
        counts = _one(conn, queries.query("lease_consistency", **table.fragments))
        results.append(
            Check(
                "processing rows without lease or token",
                counts["invisible"] == 0,
                f"{counts['invisible']} rows reclaim can never see",
            )
        )
        results.append(
            Check(
                "token iff processing",
                counts["inconsistent"] == 0,
                f"{counts['inconsistent']} rows where ({names.column('status')} = "
                f"{names.status('processing')!r}) <> "
                "(attempt_token IS NOT NULL)",
            )
        )
    return results


def _partition_checks(conn: psycopg.Connection[Any], table: db.JobsTable) -> list[Check]:
    """A partitioned table's reclaim index: the table's own (valid only once every
    partition's is attached), and the partitions that lack theirs, by name."""
    found = partition_indexes(
        conn, table.oid, index_name(table.name, "_processing_timeout"), table.mapping
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


def _one(conn: psycopg.Connection[Any], statement: sql.Composed) -> dict[str, Any]:
    """The one row a statement always returns (an aggregate, EXISTS)."""
    row: dict[str, Any] | None = conn.execute(statement).fetchone()
    if row is None:
        raise AssertionError("the statement returned no row")
    return row


def _rows(conn: psycopg.Connection[Any], name: str, oid: int) -> list[dict[str, Any]]:
    """A catalog statement about the table ``oid``: its rows."""
    return conn.execute(queries.query(name), {"oid": oid}).fetchall()

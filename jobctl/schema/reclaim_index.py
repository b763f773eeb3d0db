"""The reclaim index (partial on processing rows, keyed by lease_expires_at): its name, the
table's indexes that can serve reclaim whatever their names, and, on a partitioned table, the
steps of schema apply that give every partition its own, attached, without a long lock."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import psycopg
from psycopg import sql

from jobctl import db, errors
from jobctl.schema.steps import Step
from jobctl.sql import queries
from jobctl.table.mapping import TableMapping


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


def reclaim_indexes(
    conn: psycopg.Connection[Any], table_oid: int, mapping: TableMapping | None = None
) -> dict[str, bool]:
    """The table's indexes that can serve reclaim (partial on processing, lease_expires_at
    among the first two keys), whatever their names: name -> valid. On a partitioned table
    these are its partitioned indexes, valid only once every partition's index is attached
    (an index made ON ONLY the table is not valid until then): see partition_indexes."""
    rows = db.rows(conn, "reclaim_index_candidates", {"oid": table_oid})
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


def made_for_other_names(
    conn: psycopg.Connection[Any], table_oid: int, ours: str, mapping: TableMapping
) -> bool:
    """Is jobctl's reclaim index (``ours``) on the table one made for another mapping (an
    earlier --status or --column)? It then serves nothing, and holds the name."""
    rows = [
        r
        for r in db.rows(conn, "reclaim_index_candidates", {"oid": table_oid})
        if r["relname"] == ours
    ]
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
    tree = db.rows(conn, "partition_tree", {"oid": table_oid})
    candidates = db.rows(conn, "partition_index_candidates", {"oid": table_oid})
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


def partitioned_index_steps(
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
        raise errors.NothingDone(
            f"{table.qualified}: partition {', '.join(foreign)} is a foreign table, which "
            "cannot have an index, so the reclaim index could never be valid"
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
    has_rows = db.one(conn, queries.query("table_has_rows", p.ident))["e"]
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
        for r in db.rows(
            conn,
            "relations_named",
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
            raise errors.NothingDone(
                f"{p.qualified}: the names {first[p.oid]} and {second[p.oid]} for its reclaim "
                f"index are taken in schema {p.schema}"
            )
    return names

"""A database's catalog as schema apply leaves it, to compare a fresh install with an upgraded
one (tests/integration/test_baseline.py, tests/integration/test_versions.py).

    catalog(conn): every schema but the system's, read from pg_catalog: schemas, relations
                   (kind, options, grants, comments), columns (order, type, collation, not
                   null, default, identity, grants, comments), constraints, indexes (and
                   whether valid), triggers (their definitions), functions (their whole
                   definitions, grants, comments), sequences
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import rows

USER = (
    "n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') "
    "AND n.nspname NOT LIKE 'pg_temp%' AND n.nspname NOT LIKE 'pg_toast_temp%'"
)

QUERIES = {
    "schemas": f"""
        SELECT n.nspname, n.nspowner::regrole::text, n.nspacl::text,
               obj_description(n.oid, 'pg_namespace')
        FROM pg_namespace n WHERE {USER}""",
    "relations": f"""
        SELECT c.oid::regclass::text, c.relkind::text, c.relpersistence::text,
               c.reloptions::text, c.relacl::text, c.relowner::regrole::text,
               obj_description(c.oid, 'pg_class')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {USER}""",
    "columns": f"""
        SELECT a.attrelid::regclass::text,
               row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum),
               a.attname, format_type(a.atttypid, a.atttypmod), co.collname,
               a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attidentity::text,
               a.attgenerated::text, a.attacl::text, col_description(a.attrelid, a.attnum)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation co ON co.oid = a.attcollation
        WHERE {USER} AND a.attnum > 0 AND NOT a.attisdropped""",
    "constraints": f"""
        SELECT c.conrelid::regclass::text, c.conname, c.contype::text,
               pg_get_constraintdef(c.oid), c.convalidated
        FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE {USER}""",
    "indexes": f"""
        SELECT pg_get_indexdef(i.indexrelid), i.indisvalid
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {USER}""",
    "triggers": f"""
        SELECT pg_get_triggerdef(t.oid), t.tgenabled::text
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {USER} AND NOT t.tgisinternal""",
    "functions": f"""
        SELECT p.oid::regprocedure::text, md5(pg_get_functiondef(p.oid)), p.proacl::text,
               p.proowner::regrole::text, obj_description(p.oid, 'pg_proc')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE {USER}""",
    "sequences": f"""
        SELECT s.seqrelid::regclass::text, s.seqtypid::regtype::text, s.seqstart,
               s.seqincrement, s.seqmax, s.seqmin, s.seqcache, s.seqcycle
        FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {USER}""",
}


def catalog(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    """Everything schema apply makes, in every schema but the system's, sorted."""
    with conn.cursor(row_factory=rows.tuple_row) as cur:
        return {
            what: sorted(cur.execute(query).fetchall(), key=repr) for what, query in QUERIES.items()
        }


def differences(fresh: dict[str, list[Any]], other: dict[str, list[Any]]) -> dict[str, Any]:
    """What one catalog has that the other has not, by part: {part: (only fresh, only other)}."""
    found = {}
    for part in fresh:
        mine, theirs = set(fresh[part]), set(other[part])
        if mine != theirs:
            found[part] = (sorted(mine - theirs, key=repr), sorted(theirs - mine, key=repr))
    return found

"""Queue libraries' own tables (tests/queue_libraries.py: made by their installers), as
installed and moved to another schema under another prefix: recognised by what they are,
refused with and without a plausible mapping, the catalog left as it was (pg_dump
--schema-only before and after); the read commands say it is a library's table and where
its own tools are."""

from __future__ import annotations

import psycopg
import pytest
from queue_libraries import LIBS, MOVED_SCHEMA, PRIMARY, install, schema_dump

PLACES = ("as-installed", "moved")
CASES = [(lib, place) for lib in LIBS for place in PLACES]
IDS = [f"{lib.key}-{place}" for lib, place in CASES]


def installed(dsn: str, lib, place: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if place == "moved":
            return install(conn, lib, schema=MOVED_SCHEMA, prefix=True)
        return install(conn, lib)


def refused_as_library(result, lib) -> None:
    assert result.code == 2, (result.code, result.err)
    line = result.err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"is {lib.name}'s jobs table" in line, line
    assert "rescues its own jobs" in line and f"use {lib.name}'s own tools" in line, line
    assert "schema apply" not in line.split("):", 1)[-1], line  # never the refused command


@pytest.mark.parametrize(("lib", "place"), CASES, ids=IDS)
def test_a_library_table_is_refused_with_and_without_a_mapping(empty_dsn, run, lib, place):
    """apply, apply with the plausible mapping, apply --sql: refused, the catalog unchanged;
    stuck, summary, reclaim --dry-run, schema check: it is the library's, its own tools named.
    (A library's other versions and editions: apply, with the mapping, and stuck.)"""
    table = installed(empty_dsn, lib, place)
    before = schema_dump(empty_dsn)
    plain = run("--table", table, "schema", "apply", "--yes", dsn=empty_dsn)
    refused_as_library(plain, lib)
    assert "nothing done" in plain.err
    mapped = run("--table", table, "schema", "apply", "--yes", *lib.mapping, dsn=empty_dsn)
    refused_as_library(mapped, lib)
    reads: tuple[tuple[str, ...], ...] = (("stuck",),)
    if lib in PRIMARY:
        script = run("--table", table, "schema", "apply", "--sql", *lib.mapping, dsn=empty_dsn)
        refused_as_library(script, lib)
        assert script.out == ""
        reads = (("stuck",), ("summary",), ("reclaim", "--dry-run"), ("schema", "check"))
    for command in reads:
        result = run("--table", table, *command, dsn=empty_dsn)
        refused_as_library(result, lib)
        assert "does not exist" not in result.err
    assert schema_dump(empty_dsn) == before


def test_a_library_partition_is_the_library_too(empty_dsn, run):
    """pg-boss keeps each queue's jobs in a partition of its jobs table: one named directly
    is refused as pg-boss's too."""
    from queue_libraries import PGBOSS

    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        install(conn, PGBOSS)
        conn.execute("SELECT pgboss.create_queue('mail', '{}'::json)")
        partition = conn.execute(
            "SELECT inhrelid::regclass::text FROM pg_inherits "
            "WHERE inhparent = 'pgboss.job'::regclass LIMIT 1"
        ).fetchone()[0]
    refused_as_library(run("--table", partition, "schema", "apply", "--yes", dsn=empty_dsn), PGBOSS)


def test_the_issue_oban_for_python_is_refused_as_oban(empty_dsn, run):
    """Oban for Python's table (errors jsonb, oban_leaders/oban_producers) was not
    recognised: schema apply said "no status column", and with the issue's mapping it would
    have installed into Oban's table. Now it is refused as Oban's, the catalog unchanged."""
    from queue_libraries import LIBS

    oban_py = next(lib for lib in LIBS if lib.key == "oban-py-0.7.0")
    table = installed(empty_dsn, oban_py, "as-installed")
    before = schema_dump(empty_dsn)
    plain = run("--table", table, "schema", "apply", "--yes", dsn=empty_dsn)
    refused_as_library(plain, oban_py)
    assert "no status column" not in plain.err
    issue_mapping = (
        "--column status=state --column reserved_by=worker --column last_error=queue "
        "--column attempts=attempt --column available_at=scheduled_at "
        "--column reserved_at=attempted_at --column finished_at=completed_at "
        "--column updated_at=inserted_at --status queued=available "
        "--status processing=executing --status done=completed --status failed=discarded"
    ).split()
    mapped = run("--table", table, "schema", "apply", "--yes", *issue_mapping, dsn=empty_dsn)
    refused_as_library(mapped, oban_py)
    assert schema_dump(empty_dsn) == before


@pytest.mark.parametrize(
    ("key", "prefix", "drifted"),
    [
        ("oban-py-0.7.0", "", "attempted_at"),
        ("pgqueuer-1.6.0", "acme_", "heartbeat"),  # PGQUEUER_PREFIX=acme_: acme_pgqueuer, ...
        ("procrastinate-3.10.0", "", "queueing_lock"),
    ],
)
def test_a_library_whose_columns_drifted_is_known_by_its_name(empty_dsn, run, key, prefix, drifted):
    """A version whose columns drifted from every signature (here: one dropped) is still the
    library's, by its own table name beside its sibling tables and enum type under the same
    prefix, read from the catalog."""
    from queue_libraries import LIBS

    lib = next(lib for lib in LIBS if lib.key == key)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        table = install(conn, lib)
        conn.execute(f"ALTER TABLE {table} DROP COLUMN {drifted} CASCADE")
        if prefix:  # every pgqueuer table and enum type of schema public, renamed
            tables = "SELECT relname::text FROM pg_class WHERE relkind = 'r' AND relname LIKE %s"
            types = "SELECT typname::text FROM pg_type WHERE typtype = 'e' AND typname LIKE %s"
            for kind, names in (("TABLE", tables), ("TYPE", types)):
                for (name,) in conn.execute(names, ("pgqueuer%",)).fetchall():
                    conn.execute(f"ALTER {kind} public.{name} RENAME TO {prefix}{name}")
            table = f"public.{prefix}{lib.table}"
    result = run("--table", table, "schema", "apply", "--yes", *lib.mapping, dsn=empty_dsn)
    refused_as_library(result, lib)
    assert f"its name {prefix}{lib.table}" in result.err, result.err

"""jobctl's history, versioned: its migrations (the files ``sql/history/NNN_name.sql``) and
the baseline a fresh install runs instead of them (``sql/history/baseline.sql``).

Each migration is applied in order by ``schema apply``, in its own transaction with the row
that records it in ``jobctl.migrations`` (from history 012 on with the jobctl version that
applied it and the sha256 of its text, which ``schema.versions`` reads: a newer install is
refused, never downgraded). A migration whose header has the line ``-- jobctl: concurrently``
runs outside a transaction instead: each of its statements on its own (an index built ``CREATE
INDEX CONCURRENTLY``, an invalid one left by an interrupted build dropped first; any other
statement under the steps' short lock tries), then its record in a transaction of its own
(``migration_steps``). A database with the unversioned history of jobctl 0.1-0.2
(``jobctl.events`` but no ``jobctl.migrations``) starts at 0: migration 1 is that history,
written idempotently. A database without schema jobctl runs the baseline (``baseline_step``):
the schema as the migrations up to its header's number leave it, recorded as those migrations
applied; ``history.plan`` puts these steps before the table's trigger.

Example::

    migrations.latest_version()  # 15
    migrations.baseline().version  # 15: what a fresh install is
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from typing import Any

import psycopg
from psycopg import sql

import jobctl
from jobctl import db
from jobctl.schema.steps import Step
from jobctl.sql import queries

_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
# a migration's header line (among the comment lines it begins with): it runs outside a
# transaction, statement by statement (docs/history.md, "Migrations that run outside a
# transaction")
CONCURRENTLY = "-- jobctl: concurrently"
# an index a concurrently migration builds: its name and its table, both named with the schema
_CONCURRENT_INDEX = re.compile(
    r"^\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    r"(\w+)\s+ON\s+(?:ONLY\s+)?(\w+)\.(\w+)",
    re.IGNORECASE,
)


RECORDED_FROM = 12  # history 012 added jobctl_version and checksum to jobctl.migrations
# a fresh install's one step: the schema as the migrations up to its header's number leave it
BASELINE = "history/baseline.sql"
_BASELINE_LINE = re.compile(r"^-- jobctl: baseline (\d{3})$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        """The sha256 of its text, as jobctl.migrations records it (from history 012 on)."""
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def concurrently(self) -> bool:
        """Does its header say it runs outside a transaction (``-- jobctl: concurrently``)?"""
        for line in self.text.splitlines():
            if not line.startswith("--"):
                return False
            if line.rstrip() == CONCURRENTLY:
                return True
        return False

    def statements(self) -> tuple[str, ...]:
        """Its statements, each with the comment lines before it, without the ``;`` that ends
        it (at the end of a line); comment lines after the last are left out."""
        found: list[str] = []
        lines: list[str] = []
        for line in self.text.splitlines():
            lines.append(line)
            if line.rstrip().endswith(";") and not line.lstrip().startswith("--"):
                found.append("\n".join(lines).strip().removesuffix(";"))
                lines = []
        code = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("--")]
        if code:
            found.append("\n".join(lines).strip())
        return tuple(found)


@functools.cache
def migrations() -> tuple[Migration, ...]:
    """Every migration file, in order."""
    found = []
    for name in queries.list_dir("history"):
        match = _FILE.match(name)
        if match:
            found.append(Migration(int(match[1]), match[2], queries.read_text(f"history/{name}")))
    return tuple(sorted(found, key=lambda m: m.version))


def latest_version() -> int:
    return migrations()[-1].version


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The history's schema as migrations 001 to ``version`` leave it (``sql/history/
    baseline.sql``): a fresh install runs it instead of them."""

    version: int
    text: str

    @property
    def stands_for(self) -> tuple[Migration, ...]:
        """The migrations it stands for, recorded as applied by it."""
        return tuple(m for m in migrations() if m.version <= self.version)


@functools.cache
def baseline() -> Baseline:
    text = queries.read_text(BASELINE)
    found = _BASELINE_LINE.search(text)
    assert found is not None, f"{BASELINE} names no version (-- jobctl: baseline NNN)"
    return Baseline(int(found[1]), text)


def baseline_step(locks: str) -> Step:
    """A fresh install's history: schema jobctl made (plainly, as history_schema), the
    baseline, and a row of jobctl.migrations for each migration it stands for, with this
    jobctl's version and the migration's checksum (as their own records hold them: schema
    check reads the install as those migrations applied). One transaction; no table the
    workers write exists yet."""
    base = baseline()
    rows = sql.SQL(",\n").join(
        sql.SQL("({}, {}, {}, {})").format(m.version, m.name, jobctl.__version__, m.checksum)
        for m in base.stands_for
    )
    statement = sql.Composed(
        [
            queries.query("history_schema"),
            sql.SQL("\n" + base.text + "\n"),
            queries.query("record_baseline", rows=rows),
        ]
    )
    what = (
        f"create the history, as migrations 001-{base.version:03d} leave it (the baseline of "
        "a fresh install)"
    )
    return Step(what, statement, locks=locks)


def installed_version(conn: psycopg.Connection[Any]) -> int | None:
    """The last migration applied to this database (0: none, or the unversioned history;
    None: this role may not read jobctl.migrations, as granted before version 2)."""
    row = db.row(conn, "history_versioned")
    if row is None:
        return 0
    if not row["readable"]:
        return None
    row = db.row(conn, "history_version")
    return int(row["v"]) if row else 0


def migration_statement(
    migration: Migration,
    *,
    make_schema: bool | None = None,
    earlier: tuple[Migration, ...] = (),
) -> sql.Composed:
    """The migration and the row recording it (from history 012 on, with this jobctl's version
    and the migration's checksum): run in one transaction. ``make_schema``: it creates schema
    jobctl first (plainly: one made by someone else in the meantime fails the step instead of
    being adopted); None: only the first migration does. ``earlier``: the migrations before
    012 this apply ran, recorded so in 012's transaction."""
    if make_schema is None:
        make_schema = migration.version == 1
    head = [queries.query("history_schema"), sql.SQL("\n")] if make_schema else []
    return sql.Composed(
        [
            *head,
            queries.query("history_bootstrap"),
            sql.SQL("\n" + migration.text + "\n"),
            _record(migration, earlier),
        ]
    )


def _record(migration: Migration, earlier: tuple[Migration, ...]) -> sql.Composed:
    """The row recording ``migration`` (from 012 on, with this jobctl's version and the
    migration's checksum; ``earlier`` recorded so in 012's)."""
    names = {"version": sql.Literal(migration.version), "migration": sql.Literal(migration.name)}
    if migration.version < RECORDED_FROM:
        record = queries.query("record_migration_before_012", **names)
    else:
        version = sql.Literal(jobctl.__version__)
        record = queries.query(
            "record_migration",
            **names,
            jobctl_version=version,
            checksum=sql.Literal(migration.checksum),
        )
        if earlier:
            backfill = queries.query(
                "record_installed_by",
                jobctl_version=version,
                versions=sql.Literal([m.version for m in earlier]),
                checksums=sql.Literal([m.checksum for m in earlier]),
            )
            record = sql.Composed([record, sql.SQL(";\n"), backfill])
    return record


def migration_steps(
    conn: psycopg.Connection[Any],
    migration: Migration,
    *,
    locks: str,
    make_schema: bool | None = None,
    earlier: tuple[Migration, ...] = (),
) -> list[Step]:
    """The steps that apply ``migration`` (``make_schema`` and ``earlier``: as
    migration_statement's). One, in a transaction: the migration and its record
    (migration_statement), tried with the steps' short lock timeouts (``locks``: the table a
    step names when it waits). A migration marked ``-- jobctl: concurrently``: each of its
    statements on its own, outside a transaction (concurrent_steps), then its record in a
    transaction of its own."""
    what = migration_what(conn, migration)
    if migration.concurrently:
        return concurrent_steps(
            conn, migration, what, locks=locks, make_schema=make_schema, earlier=earlier
        )
    statement = migration_statement(migration, make_schema=make_schema, earlier=earlier)
    return [Step(what, statement, locks=locks)]


def concurrent_steps(
    conn: psycopg.Connection[Any],
    migration: Migration,
    what: str,
    *,
    locks: str,
    make_schema: bool | None = None,
    earlier: tuple[Migration, ...] = (),
) -> list[Step]:
    """A migration that runs outside a transaction, statement by statement: an index built
    CONCURRENTLY (no worker statement waits for the build; its first lock tried first, whom it
    waits for watched), an invalid one of that name (left by an interrupted build, which IF
    NOT EXISTS would keep) dropped first under short lock tries; any other statement in a
    transaction of its own under short lock tries. Then its record, in a transaction of its
    own: a migration whose record is missing runs again, and each of its statements finds
    what it made (IF NOT EXISTS)."""
    if make_schema is None:
        make_schema = migration.version == 1
    bootstrap = queries.query("history_bootstrap")
    steps = []
    if make_schema:
        steps.append(
            Step(
                "make schema jobctl and its record of migrations",
                sql.Composed([queries.query("history_schema"), sql.SQL("\n"), bootstrap]),
                locks=locks,
            )
        )
    for text in migration.statements():
        code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--"))
        index = _CONCURRENT_INDEX.match(code)
        if index is None:
            steps.append(Step(what, sql.Composed([sql.SQL(text)]), locks=locks))
            continue
        name, schema, table = index.groups()
        valid = db.row(conn, "index_valid", {"name": f"{schema}.{name}"})
        if valid is not None and not valid["valid"]:
            steps.append(
                Step(  # never used by queries: dropping it is instant, under short lock tries
                    f"drop the invalid index {schema}.{name} (left by an interrupted "
                    f"concurrent build of {what})",
                    queries.query("drop_index", index=sql.Identifier(schema, name)),
                    locks=f"{schema}.{table}",
                )
            )
        steps.append(
            Step(
                f"{what}: build {schema}.{name} concurrently (the workers go on)",
                sql.Composed([sql.SQL(text)]),
                outside_transaction=True,
                probe=queries.query("concurrent_lock_probe", sql.Identifier(schema, table)),
            )
        )
    # jobctl.migrations alone, which no worker statement touches: no lock the workers wait for
    record = sql.Composed([bootstrap, sql.SQL("\n"), _record(migration, earlier)])
    steps.append(Step(f"record {what}", record))
    return steps


def migration_what(conn: psycopg.Connection[Any], migration: Migration) -> str:
    """How schema apply names a migration; 004 says how many rows it rewrites."""
    what = f"history migration {migration.version:03d} ({migration.name})"
    if migration.version == 4:
        row = db.row(conn, "history_rows_estimate")
        rows = int(row["rows"]) if row and row["rows"] is not None else 0
        if rows:
            what += (
                f": rewrites about {rows:,} history rows, during which the workers' "
                "completions wait (see docs/history.md)"
            )
    return what

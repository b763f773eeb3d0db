"""The test databases of one test process: clones of the session's template, lent one to a
test and, when the test changed nothing but rows, emptied and lent again to a later one.

A clone costs the server a copy of the template (about 8 MB through the WAL) and a DROP; on
the two cores of a laptop that is most of a short test. A test that only inserts, claims,
reclaims and reads leaves the catalog as it found it, so its database is given back: every
other session on it is ended, the tables it wrote are truncated (their sequences restarted),
the other sequences set back, the planner's statistics of its tables deleted and its
counters reset — what a fresh clone holds. Anything else makes the database be dropped, as
before: a catalog row added, changed or removed (a table, an index, a grant, a trigger, a
policy, a function, a temporary schema), the database itself altered (``ALTER DATABASE``,
its settings, a comment), a prepared transaction or a replication slot on it, a row of a
table the template fills (``jobctl.migrations``) changed, a truncation refused, a session
that would not end, or a PgBouncer in front of it (``spoil``: its server connections).

A change is seen by the transaction ids of the catalog rows (``xmin``): the server's current
transaction id is noted when the database is lent, and a catalog row written since (created
or updated; a removal shows in the counts) is a change. VACUUM and ANALYZE update
``pg_class`` in place (no new ``xmin``) and only ``pg_statistic`` otherwise, which is
emptied.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import Iterator

import psycopg
from psycopg import conninfo, sql

# statistics, rewritten by ANALYZE (the autovacuum's too): emptied on return, not compared
NOT_COMPARED = ("pg_statistic", "pg_statistic_ext_data")

USER_SCHEMAS = "n.nspname <> 'information_schema' AND n.nspname !~ '^pg_'"

# the database itself changed, or holds what outlives its sessions
ALTERED = """
SELECT (SELECT age(d.xmin) <= age(%(since)s::text::xid))  -- ALTER DATABASE
    OR EXISTS (SELECT FROM pg_db_role_setting s WHERE s.setdatabase = d.oid)
    OR EXISTS (SELECT FROM pg_shdescription s WHERE s.objoid = d.oid)
    OR EXISTS (SELECT FROM pg_prepared_xacts x WHERE x.database = d.datname)
    OR EXISTS (SELECT FROM pg_replication_slots r WHERE r.database = d.datname)
FROM pg_database d WHERE d.datname = %(name)s
"""

WRITTEN_TABLES = f"""
SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND {USER_SCHEMAS}
  AND (pg_relation_size(c.oid) > 0 OR c.relpages <> 0 OR c.reltuples <> -1)
"""

SEQUENCES_CALLED = """
SELECT format('%I.%I', schemaname, sequencename) FROM pg_sequences WHERE last_value IS NOT NULL
"""

# a row written (created or updated) since the transaction id %(since)s
NEW = "age(xmin) <= age(%(since)s::text::xid)"

USER_STATISTICS = f"""
SELECT count(*) FROM pg_statistic s JOIN pg_class c ON c.oid = s.starelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {USER_SCHEMAS}
"""


@dataclasses.dataclass(frozen=True)
class Baseline:
    """What a fresh clone holds, read once from the first one."""

    catalog_rows: dict[str, int]  # catalog -> rows
    filled: dict[str, int]  # user table the template fills -> rows
    called: frozenset[str]  # sequences the template has used (none in the reference one)
    statistics: int  # pg_statistic rows of user tables (none in the reference one)


class Databases:
    def __init__(self, server_dsn: str, template: str) -> None:
        self.server_dsn = server_dsn
        self.template = template
        self.idle: list[str] = []
        self.spoiled: set[str] = set()
        self.baseline: Baseline | None = None
        self.catalogs: list[str] = []
        self.reused = 0
        self._admin: psycopg.Connection | None = None

    def dsn(self, name: str) -> str:
        return conninfo.make_conninfo(self.server_dsn, dbname=name)

    @contextlib.contextmanager
    def lent(self) -> Iterator[str]:
        """A database as a fresh clone of the template, for one test."""
        name = self.idle.pop() if self.idle else self._create()
        since = self.admin().execute("SELECT txid_current() % 4294967296").fetchone()[0]  # type: ignore[index]
        try:
            yield self.dsn(name)
        finally:
            if name not in self.spoiled and self._emptied(name, since):
                self.idle.append(name)
                self.reused += 1
            else:
                self.spoiled.discard(name)
                self._drop(name)

    def spoil(self, dsn: str) -> None:
        """Never lend this test's database again (dropped after the test)."""
        self.spoiled.add(conninfo.conninfo_to_dict(dsn)["dbname"])  # type: ignore[arg-type]

    def close(self) -> None:
        for name in self.idle:
            self._drop(name)
        self.idle.clear()
        if self._admin is not None:
            self._admin.close()

    def admin(self) -> psycopg.Connection:
        """This process's one connection to the server's own database, for making,
        dropping and checking databases: one connection for the session rather than three
        a test (each costs the server a backend). Made again if a test's server restart or
        terminated backends ended it."""
        if self._admin is not None:
            try:
                self._admin.execute("SELECT")
                return self._admin
            except psycopg.OperationalError:
                self._admin.close()
        self._admin = psycopg.connect(self.server_dsn, autocommit=True)
        return self._admin

    # ------------------------------------------------------------ making and dropping
    def _create(self) -> str:
        name = f"jobctl_t_{uuid.uuid4().hex[:12]}"
        self.admin().execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(self.template)
            )
        )
        if self.baseline is None:
            with psycopg.connect(self.dsn(name), autocommit=True) as conn:
                self.baseline = self._read_baseline(conn)
        return name

    def _drop(self, name: str) -> None:
        self.admin().execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def _read_baseline(self, conn: psycopg.Connection) -> Baseline:
        self.catalogs = [
            row[0]
            for row in conn.execute(
                "SELECT relname FROM pg_class WHERE relnamespace = 'pg_catalog'::regnamespace"
                " AND relkind = 'r' AND NOT relisshared AND relname <> ALL(%s) ORDER BY 1",
                (list(NOT_COMPARED),),
            )
        ]
        counts = self._catalog_rows(conn, since=None)
        filled = {table: rows for table, rows in self._table_rows(conn).items() if rows}
        called = frozenset(row[0] for row in conn.execute(SEQUENCES_CALLED))
        statistics = conn.execute(USER_STATISTICS).fetchone()[0]  # type: ignore[index]
        return Baseline({k: v for k, (v, _) in counts.items()}, filled, called, statistics)

    # ------------------------------------------------------------ given back
    def _emptied(self, name: str, since: int) -> bool:
        """Whether the test left the catalog as it found it; if so, its rows are emptied and
        the database is as a fresh clone."""
        base = self.baseline
        assert base is not None
        if base.called or base.statistics:
            return False  # a template with used sequences or statistics: not set back
        try:
            admin = self.admin()
            if not self._alone(admin, name):
                return False
            altered = admin.execute(ALTERED, {"since": since, "name": name}).fetchone()
            if altered is None or altered[0]:
                return False
            with psycopg.connect(self.dsn(name), autocommit=True) as conn:
                counts = self._catalog_rows(conn, since)
                if any(new or rows != base.catalog_rows[c] for c, (rows, new) in counts.items()):
                    return False
                for table, rows in base.filled.items():
                    now = conn.execute(
                        sql.SQL(
                            "SELECT count(*), count(*) FILTER (WHERE {new}) FROM {table}"
                        ).format(
                            new=sql.SQL(NEW),
                            table=sql.SQL(table),  # a regclass text: quoted
                        ),
                        {"since": since},
                    ).fetchone()
                    if now != (rows, 0):
                        return False
                self._empty(conn, base)
            return True
        except psycopg.Error:
            return False

    def _alone(self, admin: psycopg.Connection, name: str) -> bool:
        """End every other session on the database (the test's, a worker's); whether they
        ended within five seconds."""
        deadline = time.monotonic() + 5
        while True:
            left = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchone()[0]  # type: ignore[index]
            if not left:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)

    def _empty(self, conn: psycopg.Connection, base: Baseline) -> None:
        written = [row[0] for row in conn.execute(WRITTEN_TABLES) if row[0] not in base.filled]
        if written:
            conn.execute(
                sql.SQL("TRUNCATE {} RESTART IDENTITY").format(
                    sql.SQL(", ").join(sql.SQL(t) for t in written)  # regclass texts
                )
            )
        conn.execute(
            "SELECT setval(format('%I.%I', schemaname, sequencename)::regclass, start_value, false)"
            " FROM pg_sequences WHERE last_value IS NOT NULL"
        )
        conn.execute(
            "DELETE FROM pg_statistic s USING pg_class c, pg_namespace n"
            f" WHERE c.oid = s.starelid AND n.oid = c.relnamespace AND {USER_SCHEMAS}"
        )
        conn.execute("SELECT pg_stat_reset()")

    def _catalog_rows(
        self, conn: psycopg.Connection, since: int | None
    ) -> dict[str, tuple[int, int]]:
        """Each catalog's rows, and how many were written since ``since`` (a transaction id)."""
        new = sql.SQL("0" if since is None else f"count(*) FILTER (WHERE {NEW})")
        query = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {name}, count(*), {new} FROM pg_catalog.{table}").format(
                name=sql.Literal(c), new=new, table=sql.Identifier(c)
            )
            for c in self.catalogs
        )
        return {row[0]: (row[1], row[2]) for row in conn.execute(query, {"since": since})}

    def _table_rows(self, conn: psycopg.Connection) -> dict[str, int]:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT c.oid::regclass::text FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                f" WHERE c.relkind = 'r' AND {USER_SCHEMAS}"
            )
        ]
        return {
            t: conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(t))).fetchone()[0]  # type: ignore[index]
            for t in tables
        }

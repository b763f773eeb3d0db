"""jobctl's history: the trigger on a jobs table and its modes, and the steps that install it
after the history's migrations or a fresh install's baseline (``schema.migrations``, whose
names this module re-exports) (``ops.attempts`` reads a job's attempts and events from what
they record).

On each jobs table, one trigger ``jobctl_history`` (BEFORE UPDATE; in modes transitions and
audit only of the UPDATEs that name the status or jobctl_action) calls that table's own
function, ``jobctl.record_<table>_<hash>(mode, version, digest)``, for the statements its WHEN
lets through. The function is generated from the table's mapping (its names for the lease
design's columns and statuses: the block ``history_function_body`` of ``sql/schema.sql``); the
digest says what it, the event and the WHEN were made from, so a changed mapping shows as out
of date. See docs/history.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

import jobctl
from jobctl import db
from jobctl.schema import ownership
from jobctl.schema.migrations import BASELINE as BASELINE
from jobctl.schema.migrations import CONCURRENTLY as CONCURRENTLY
from jobctl.schema.migrations import RECORDED_FROM as RECORDED_FROM
from jobctl.schema.migrations import Baseline as Baseline
from jobctl.schema.migrations import Migration as Migration
from jobctl.schema.migrations import baseline as baseline
from jobctl.schema.migrations import baseline_step as baseline_step
from jobctl.schema.migrations import concurrent_steps as concurrent_steps
from jobctl.schema.migrations import installed_version as installed_version
from jobctl.schema.migrations import latest_version as latest_version
from jobctl.schema.migrations import migration_statement as migration_statement
from jobctl.schema.migrations import migration_steps as migration_steps
from jobctl.schema.migrations import migration_what as migration_what
from jobctl.schema.migrations import migrations as migrations
from jobctl.schema.steps import Step
from jobctl.sql import queries
from jobctl.table.mapping import TableMapping

TRIGGER = "jobctl_history"
TRIGGER_VERSION = "6"  # bumped when the trigger's WHEN, arguments or what it stores change
# the characters of a text an application writes (a worker's name, a reason) that the history
# keeps (history 011; the reads' cut too, ops.triage.DISPLAY_CHARS): a longer one is kept cut,
# with its whole length in bytes beside it (worker_bytes, reason_bytes)
KEPT_CHARS = 4096
FUNCTION_PREFIX = "record_"  # jobctl.record_<table>_<hash>: one function per jobs table
OLD_TRIGGERS = ("jobctl_history_insert", "jobctl_history_update")  # version 1
# the functions every table's trigger of versions 1 and 2 called (migrations 001, 002); history
# 015 drops them, and the step replacing such a trigger drops them once no trigger calls them
SHARED_FUNCTIONS = ("record_transition", "record_change")
MODES = ("transitions", "late", "exact", "audit")
DEFAULT_MODE = "transitions"  # a first install's; an installed mode is kept until asked
# columns of the jobs table the trigger keeps the live attempt's statistics in (nullable, no
# default: added without a rewrite); jobctl_action marks jobctl's own writes and is never stored
COLUMNS = {
    "jobctl_action": "text",
    "jobctl_attempt": "uuid",
    "jobctl_heartbeats": "integer",
    "jobctl_max_gap": "interval",
    "jobctl_lease": "interval",
}
ACTION = "jobctl_action"
STATISTICS = tuple(c for c in COLUMNS if c != ACTION)  # the live attempt's, on the jobs row
LEAST = "audit"  # the mode whose table has jobctl_action alone (and no worker fires it)
DESCRIBE = {
    "transitions": "worker history of attempts that did not complete (no heartbeat "
    "statistics, completions not recorded) and operator audit",
    "late": "worker history (heartbeats counted when late) and operator audit",
    "exact": "worker history (every heartbeat counted) and operator audit",
    "audit": "operator audit only (no worker history)",
}


@dataclasses.dataclass(frozen=True)
class Target:
    """A jobs table as the history sees it: where it is and how to name its columns and
    statuses (``db.spelling``'s fragments). ``oid`` None: schema apply is creating it."""

    ident: sql.Identifier
    schema: str
    name: str
    oid: int | None
    fragments: Mapping[str, sql.Composable]
    mapping: TableMapping = dataclasses.field(default_factory=TableMapping)

    @classmethod
    def of(cls, table: db.JobsTable) -> Target:
        """A resolved table, with its recorded mapping and the types of its columns."""
        return cls(table.ident, table.schema, table.name, table.oid, table.fragments, table.mapping)

    @classmethod
    def new(
        cls,
        ident: sql.Identifier,
        schema: str,
        name: str,
        mapping: TableMapping | None = None,
    ) -> Target:
        """A table schema apply --create is making (bigint ids, text statuses)."""
        mapping = mapping or TableMapping()
        return cls(ident, schema, name, None, db.spelling(ident, mapping), mapping)

    @property
    def function(self) -> str:
        """This table's history function, in schema jobctl."""
        return function_name(self.schema, self.name)


def function_name(schema: str, name: str) -> str:
    """record_<table>_<8 hex of schema and table>: deterministic, unique per table, at most
    63 bytes (the table's name is cut on a character boundary when it is long)."""
    digest = hashlib.sha256(f"{schema}\x00{name}".encode()).hexdigest()[:8]
    room = 63 - len(FUNCTION_PREFIX) - 1 - len(digest)
    head = name.encode()[:room].decode("utf-8", errors="ignore")
    return f"{FUNCTION_PREFIX}{head}_{digest}"


@dataclasses.dataclass(frozen=True)
class TableState:
    """What of the history a jobs table has: its trigger's mode, old triggers, columns."""

    mode: str | None  # transitions, late, exact, audit: the current trigger; None: not installed
    version: str | None  # the trigger's version argument
    enabled: bool
    old_triggers: tuple[str, ...]  # version 1's triggers still on the table
    missing_columns: tuple[str, ...]  # of those its mode has (history.columns)
    wrong_columns: tuple[str, ...]
    digest: str | None = None  # the trigger's third argument: what it was made from
    function: tuple[str, str] | None = None  # the function the trigger calls: schema, name
    function_md5: str | None = None  # md5 of that function's body as installed
    present_columns: tuple[str, ...] = ()  # the jobctl_* columns the table has

    @property
    def unused_columns(self) -> tuple[str, ...]:
        """The jobctl_* columns on the table its mode does not use: the statistics columns
        an audit table kept from an earlier mode (or from jobctl 0.2, whose audit added
        them): never dropped but by schema remove (unused_note)."""
        return tuple(c for c in self.present_columns if c not in columns(self.mode))


def columns(mode: str | None) -> dict[str, str]:
    """The jobctl_* columns a fresh install adds in ``mode`` (None: not installed, as a first
    install's): jobctl_action alone in audit, whose trigger keeps no statistics; all in the
    others. A table switched to audit keeps the others (TableState.unused_columns)."""
    return {ACTION: COLUMNS[ACTION]} if mode == LEAST else dict(COLUMNS)


def unused_note(unused: Sequence[str], mode: str) -> str:
    """What schema check and the footprint say of the columns a mode leaves unused."""
    return (
        f"{', '.join(unused)} left from an earlier mode, unused in mode {mode} (kept: dropping "
        "a column would fail the application's prepared SELECT *; schema remove drops them)"
    )


def table_state(conn: psycopg.Connection[Any], table_oid: int | None) -> TableState:
    if table_oid is None:
        return TableState(None, None, False, (), tuple(COLUMNS), ())
    params = {"oid": table_oid}
    triggers = db.rows(conn, "history_triggers", params)
    found = {r["name"]: r["type"] for r in db.rows(conn, "table_columns", params)}
    mode = version = digest = function_md5 = None
    function = None
    enabled = False
    for t in triggers:
        if t["name"] == TRIGGER:
            args = [a.decode() for a in bytes(t["tgargs"]).split(b"\x00")]
            mode = args[0] or None if args else None
            version = args[1] if len(args) > 1 else None
            digest = args[2] if len(args) > 2 and args[2] else None
            enabled = bool(t["enabled"])
            function = (t["function_schema"], t["function_name"])
            function_md5 = t["function_md5"]
    return TableState(
        mode,
        version,
        enabled,
        tuple(t["name"] for t in triggers if t["name"] in OLD_TRIGGERS),
        tuple(c for c in columns(mode) if c not in found),
        tuple(c for c, t in columns(mode).items() if c in found and found[c] != t),
        digest,
        function,
        function_md5,
        tuple(c for c in COLUMNS if c in found),
    )


@dataclasses.dataclass(frozen=True)
class Wanted:
    """The history function and trigger a table should have, for one mode."""

    function: str  # its name in schema jobctl
    body: str  # the function's body, as the database will keep it (pg_proc.prosrc)
    event: str  # what the trigger fires on: UPDATE, or UPDATE OF some columns
    when: str  # the trigger's WHEN, as text
    digest: str  # of the body, the event and the WHEN: the trigger's third argument

    @property
    def body_md5(self) -> str:
        return hashlib.md5(self.body.encode()).hexdigest()


def wanted(conn: psycopg.Connection[Any], target: Target, mode: str) -> Wanted:
    """The function and trigger ``target`` should have in ``mode``, spelled in its names."""
    fragments = dict(target.fragments)
    # the table's name as the history records it (a partition's trigger records its table's)
    named = db.row(conn, "qualified_name", {"schema": target.schema, "name": target.name})
    assert named is not None
    fragments["job_table"] = sql.Literal(named["qualified"])
    fragments |= kept_texts(fragments)
    # the heartbeat statistics kept on the jobs row, by every mode but audit (whose function
    # is the same whether the table has the columns or not: it never writes them)
    fragments["statistics"] = (
        queries.query("history_statistics", **fragments)
        if STATISTICS[0] in columns(mode)
        else sql.SQL("")
    )
    body = queries.query("history_function_body", **fragments).as_string(conn)
    event = queries.query(f"history_on_{mode}", **fragments).as_string(conn)
    when = queries.query(f"history_when_{mode}", **fragments).as_string(conn)
    made_of = f"{TRIGGER_VERSION}\x00{body}\x00{event}\x00{when}"
    digest = hashlib.sha256(made_of.encode()).hexdigest()[:16]
    return Wanted(target.function, body, event, when, digest)


def kept_texts(fragments: Mapping[str, sql.Composable]) -> dict[str, sql.Composable]:
    """The texts the history keeps cut past KEPT_CHARS characters (history_kept), and the
    whole one's length in bytes when it is (history_kept_bytes): ``{kept_worker}`` (the
    ending attempt's worker, whatever the column's type, as text), ``{kept_action_reason}``
    (an operator's declared reason) and ``{kept_event_reason}`` (a transition's:
    history_event_reason), each with its ``..._bytes``."""
    fragments = {**fragments, "kept_chars": sql.Literal(KEPT_CHARS)}
    texts = {
        # ::text of a string column is no call (binary coercible); of a uuid or an integer,
        # their built-in output (no CREATE CAST of the application's reaches those)
        "kept_worker": sql.SQL("OLD.{}::pg_catalog.text").format(fragments["reserved_by"]),
        # the reason the function believed (history_reason, pinned: history_function_body)
        "kept_action_reason": sql.SQL("declared_reason"),
        "kept_event_reason": queries.query("history_event_reason", **fragments),
    }
    kept: dict[str, sql.Composable] = {"kept_chars": fragments["kept_chars"]}
    for name, text in texts.items():
        kept[name] = queries.query("history_kept", **fragments, text=text)
        kept[f"{name}_bytes"] = queries.query("history_kept_bytes", **fragments, text=text)
    return kept


def stale(state: TableState, want: Wanted, mode: str) -> list[str]:
    """What is not as ``want``: empty when the installed trigger and function are current."""
    if state.mode is None:
        return ["trigger missing"]
    problems = []
    if state.mode != mode:
        problems.append(f"trigger in mode {state.mode}")
    if not state.enabled:
        problems.append("trigger disabled")
    if state.version != TRIGGER_VERSION:
        problems.append(f"trigger version {state.version}, want {TRIGGER_VERSION}")
    elif state.function != ("jobctl", want.function):
        problems.append("trigger calls " + ".".join(state.function or ("?",)))
    elif state.digest != want.digest or state.function_md5 != want.body_md5:
        problems.append(
            f"function jobctl.{want.function} out of date (made for another mapping, column "
            "types or jobctl version)"
        )
    if state.old_triggers:
        problems.append("version 1 triggers: " + ", ".join(state.old_triggers))
    return problems


def chosen_mode(state: TableState, asked: str | None) -> str:
    """The mode apply installs: the one asked, else the installed one, else a first
    install's. Version 1 recorded every attempt: its tables upgrade to ``late``, the mode that
    still records completed attempts."""
    return asked or state.mode or ("late" if state.old_triggers else DEFAULT_MODE)


def plan(
    conn: psycopg.Connection[Any],
    target: Target,
    mode: str | None,
    *,
    locks: str,
) -> list[Step]:
    """The history's steps for one jobs table: the migrations not yet applied, the columns
    missing, and the table's function and trigger if they are not the ones wanted (another
    mode, an older version, a function made for another mapping). ``mode`` None keeps the
    installed mode (``transitions`` on a first install, ``late`` over version 1's triggers).
    It never drops a column of the table (only schema remove does): an application's
    statement prepared over ``SELECT *`` or ``RETURNING *`` fails when the table's row type
    changes, so a table switched to audit keeps the statistics columns it has, unused, and
    only a mode that needs a column it lacks adds it (the user's explicit --history). Every
    step that takes a lock is tried with short lock timeouts (the trigger writes jobctl's
    tables in the workers' transactions), naming ``locks`` (the jobs table) when it
    waits."""
    steps: list[Step] = []
    current = installed_version(conn) or 0
    make_schema = not ownership.owned(conn)  # no schema jobctl yet: the first step makes it
    if make_schema:  # a fresh install: the baseline, then only a migration numbered above it
        steps.append(baseline_step(locks))
        current, make_schema = baseline().version, False
    earlier: list[Migration] = []  # this run's before 012: recorded so in 012's step
    for m in migrations():
        if m.version > current:
            steps += migration_steps(
                conn,
                m,
                locks=locks,
                make_schema=make_schema,
                earlier=tuple(earlier) if m.version == RECORDED_FROM else (),
            )
            make_schema = False
            earlier.append(m)
    state = table_state(conn, target.oid)
    chosen = chosen_mode(state, mode)
    missing = [c for c in columns(chosen) if c not in state.present_columns]
    if missing:
        steps.append(
            Step(
                "add the history columns (nullable, no default: no rewrite)",
                queries.query(
                    "add_columns",
                    target.ident,
                    columns=sql.SQL(", ").join(
                        queries.query(
                            "add_column", column=sql.Identifier(c), type=sql.SQL(COLUMNS[c])
                        )
                        for c in missing
                    ),
                ),
                locks=locks,
            )
        )
    want = wanted(conn, target, chosen)
    if stale(state, want, chosen):
        steps.append(
            Step(
                f"install the history trigger and its function jobctl.{want.function} "
                f"({DESCRIBE[chosen]})",
                install_sql(target, chosen, want, calls_shared(state)),
                locks=locks,
            )
        )
    return steps


def calls_shared(state: TableState) -> bool:
    """Whether the table's trigger is one of versions 1 or 2, calling a shared function."""
    shared = state.function is not None and state.function[1] in SHARED_FUNCTIONS
    return bool(state.old_triggers) or shared


def install_sql(target: Target, mode: str, want: Wanted, drop_shared: bool = False) -> sql.Composed:
    """The table's function (created or replaced), then its trigger, replacing version 1's
    triggers and the trigger of any other mode or version (version 2's called the shared
    jobctl.record_change()). ``drop_shared``: then the shared functions of versions 1 and 2,
    each once no trigger calls it (the replaced trigger was of those versions)."""
    function = sql.Identifier("jobctl", want.function)
    drops = [
        part
        for name in OLD_TRIGGERS
        for part in (
            queries.query("drop_trigger", target.ident, trigger=sql.Identifier(name)),
            sql.SQL(";\n"),
        )
    ]
    create_function = queries.query(
        "history_function",
        function=function,
        body=sql.Literal(want.body),
        comment=sql.Literal(
            f"jobctl's history of {target.schema}.{target.name} (mapping: "
            f"{'; '.join(target.mapping.describe())}); generated by jobctl "
            f"{jobctl.__version__} schema apply (trigger version {TRIGGER_VERSION}), do not edit"
        ),
    )
    create_trigger = queries.query(
        "history_trigger",
        target.ident,
        trigger=sql.Identifier(TRIGGER),
        event=sql.SQL(want.event),
        when=sql.SQL(want.when),
        function=function,
        mode=sql.Literal(mode),
        version=sql.Literal(TRIGGER_VERSION),
        digest=sql.Literal(want.digest),
    )
    parts = [*drops, create_function, sql.SQL(";\n"), create_trigger]
    if drop_shared:
        parts += [sql.SQL(";\n"), queries.query("drop_shared_functions")]
    return sql.Composed(parts)

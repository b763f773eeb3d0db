"""Queue libraries recognised by family, not by one version's exact columns.

A library that rescues its own jobs (a rescuer, a lifeline, heartbeats, a ``recover``
command) keeps its jobs in a table of its own, in its own states; jobctl's reclaim on that
table would fight the library's rescuer, and jobctl's history trigger would sit in the
library's own statements. So such a table is refused, whatever ``--column``/``--status``
mapping makes it look plausible.

A library's family is every version and edition of it (Oban in Elixir and in Python, pg-boss
9 to 12, ...), and the names of its tables and schema are the user's to choose (a schema, a
prefix). So a table is the library's by either of two roads, each enough alone:

- its shape: the columns every version has, each of a type *family* (``jsonb``, ``jsonb[]``
  and ``json`` are one; ``smallint`` to ``bigint``; ``text`` and ``varchar``; either
  timestamp), so a version that retypes a column is still recognised, and the labels every
  version's status enum has. A prefix or a schema changes none of that.
- its name: the library's own jobs table name (after any prefix) with, under the same prefix,
  one of its sibling tables or its status enum's type (``oban_jobs`` beside ``oban_leaders`` or
  typed ``oban_job_state``), so a version whose columns drifted is still recognised. Only a
  library whose table name is its own (not ``job`` or ``queue``) has this road.

Pure: ``recognise`` takes a ``TableDescription`` (read from the catalog by ``shape.describe``:
statements ``library_columns``, ``library_neighbours`` and ``library_triggers`` in
sql/catalog.sql) and returns the
library, if any, with what gave it away. Example::

    found = recognise(TableDescription(columns={"func": "text", ...}, ...))
    found.library.name == "chancy"; found.refusal("public.chancy_jobs")
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

# type families: what a column is across the versions of a library (see ``family``)
TS = frozenset({"timestamp"})
JSON = frozenset({"json"})
INT = frozenset({"integer"})
TEXT = frozenset({"text"})
ANY: frozenset[str] = frozenset()

_FAMILIES = {
    "timestamp with time zone": "timestamp",
    "timestamp without time zone": "timestamp",
    "json": "json",
    "jsonb": "json",
    "json[]": "json",  # a list of errors kept as a json array or as an array of json
    "jsonb[]": "json",
    "smallint": "integer",
    "integer": "integer",
    "bigint": "integer",
    "text": "text",
    "character varying": "text",
    "character": "text",
    "text[]": "text[]",
    "character varying[]": "text[]",
}


def family(normal: str) -> str:
    """A column type's family (``normal_type``'s output in): ``jsonb[]`` -> ``json``,
    ``smallint`` -> ``integer``; a type of no family is its own."""
    return _FAMILIES.get(normal, normal)


@dataclasses.dataclass(frozen=True)
class TableDescription:
    """What the catalog says of a table and its schema (no rows)."""

    # column -> type, as format_type prints it with its modifier dropped ("character
    # varying"), schema-qualified names stripped; an enum (or a domain over one) is "enum"
    columns: Mapping[str, str]
    # enum column -> its labels
    labels: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # the column sets of the other tables in the same schema
    neighbours: tuple[frozenset[str], ...] = ()
    # the table's own name, the other tables' names in its schema, and enum column -> the
    # enum type's name (without schema)
    name: str = ""
    neighbour_names: frozenset[str] = frozenset()
    enum_types: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # the names of the table's own triggers (a library's notify trigger gives it away)
    triggers: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class Names:
    """A library's own names, for recognising its table by name (after any prefix)."""

    table: str  # its jobs table's name, e.g. "oban_jobs"
    siblings: frozenset[str]  # the tables it installs beside it
    enums: frozenset[str] = frozenset()  # its status enum's type name(s)
    triggers: frozenset[str] = frozenset()  # the trigger(s) it puts on its jobs table


@dataclasses.dataclass(frozen=True)
class Library:
    """A queue library that rescues its own jobs, and what its jobs table is across versions."""

    name: str
    rescues: str  # how it rescues its own jobs
    tools: str  # where its own tools are
    # required columns, those every version has: "name" or "name|other_name" (versions
    # renamed it) -> accepted type families (empty: any type)
    columns: Mapping[str, frozenset[str]]
    # the status column ("a|b" alternatives) and the labels every version's enum has, if any
    states: tuple[str, frozenset[str]] | None = None
    # column sets of tables the library installs beside its jobs table (evidence, not needed:
    # a jobs table moved alone to another schema is still the library's)
    companions: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    names: Names | None = None
    # what it would take for jobctl's fence to hold beside it, when that can be said
    would_take: str = ""


@dataclasses.dataclass(frozen=True)
class Match:
    library: Library
    evidence: tuple[str, ...]  # what gave it away, for the refusal

    def refusal(self, qualified: str) -> str:
        """Why jobctl refuses the table (exit 2): a command that would have changed it adds
        that nothing was done (``errors.NothingDone``)."""
        lib = self.library
        return (
            f"{qualified} is {lib.name}'s jobs table ({'; '.join(self.evidence)}): {lib.name} "
            f"rescues its own jobs ({lib.rescues}) and jobctl would fight it, with any "
            f"--column/--status mapping; use {lib.name}'s own tools: {lib.tools}"
            + (f" ({lib.would_take})" if lib.would_take else "")
        )


def _cols(spec: str, types: frozenset[str] = ANY) -> dict[str, frozenset[str]]:
    return {name: types for name in spec.split()}


def _names(table: str, siblings: str, enums: str = "", triggers: str = "") -> Names:
    return Names(
        table, frozenset(siblings.split()), frozenset(enums.split()), frozenset(triggers.split())
    )


LIBRARIES: tuple[Library, ...] = (
    Library(
        "River",
        "its JobRescuer, run by the elected leader, moves jobs running longer than "
        "RescueStuckJobsAfter back to retryable or discards them",
        "the river CLI, River UI, and the Client's JobRetry/JobCancel",
        {
            **_cols("kind", TEXT),
            **_cols("attempt max_attempts", INT),
            "attempted_by": frozenset({"text[]"}),
            "errors": JSON,
            **_cols("scheduled_at finalized_at attempted_at", TS),
        },
        ("state", frozenset({"available", "running", "retryable", "discarded", "completed"})),
        {
            "river_leader": frozenset({"elected_at", "expires_at", "leader_id", "name"}),
            "river_queue": frozenset({"name", "paused_at", "metadata", "updated_at"}),
            "river_migration": frozenset({"version", "created_at"}),
        },
        _names(
            "river_job", "river_leader river_queue river_migration river_client", "river_job_state"
        ),
    ),
    Library(
        "Oban",
        "its Lifeline plugin rescues orphaned executing jobs",
        "Oban Web, Oban.retry_job/2 and Oban.cancel_job/2",
        {
            **_cols("worker", TEXT),
            "args": JSON,
            "errors": JSON,  # jsonb[] in Elixir's Oban, jsonb in Oban for Python
            **_cols("attempt max_attempts", INT),
            **_cols("inserted_at scheduled_at attempted_at", TS),
        },
        ("state", frozenset({"available", "scheduled", "executing", "retryable", "completed"})),
        {
            "oban_peers": frozenset({"name", "node", "started_at", "expires_at"}),
            "oban_leaders": frozenset({"name", "node", "elected_at", "expires_at"}),
            "oban_producers": frozenset({"uuid", "name", "node", "queue", "started_at"}),
        },
        _names("oban_jobs", "oban_peers oban_leaders oban_producers", "oban_job_state"),
    ),
    Library(
        "pg-boss",
        "its maintenance fails or retries active jobs past their expiration",
        "pg-boss's API: retry, cancel, resume, getJobById",
        {
            "name": TEXT,
            "data": JSON,
            "retry_limit|retrylimit": INT,
            "retry_count|retrycount": INT,
            "start_after|startafter": TS,
            # an interval until 10, seconds from 11
            "expire_in|expirein|expire_seconds": frozenset({"interval", "integer"}),
        },
        ("state", frozenset({"created", "retry", "active", "completed", "failed"})),
        {
            "version": frozenset({"version"}),
            "schedule": frozenset({"name", "cron", "timezone"}),
            "queue": frozenset({"name", "policy"}),
        },
    ),
    Library(
        "procrastinate",
        "its workers heartbeat, and the jobs of a worker whose heartbeat stalled are retried",
        "the procrastinate CLI (shell, healthchecks) and its Django admin",
        {
            **_cols("queue_name task_name", TEXT),
            **_cols("lock queueing_lock", TEXT),
            "args": JSON,
            "attempts": INT,
        },
        ("status", frozenset({"todo", "doing", "succeeded", "failed"})),
        {
            "procrastinate_workers": frozenset({"id", "last_heartbeat"}),
            "procrastinate_events": frozenset({"job_id", "type", "at"}),
            "procrastinate_periodic_defers": frozenset({"task_name", "defer_timestamp"}),
        },
        _names(
            "procrastinate_jobs",
            "procrastinate_workers procrastinate_events procrastinate_periodic_defers",
            "procrastinate_job_status",
        ),
    ),
    Library(
        "Graphile Worker",
        "a job locked for 4 hours is unlocked and run again; "
        "graphile_worker.force_unlock_workers frees a crashed worker's jobs at once",
        "its SQL functions in its schema: add_job, complete_jobs, permanently_fail_jobs, "
        "reschedule_jobs, force_unlock_workers",
        {
            "task_identifier|task_id": ANY,
            "payload": JSON,
            "run_at": TS,
            **_cols("attempts max_attempts", INT),
            "last_error": TEXT,
            "locked_at": TS,
            "locked_by": TEXT,
        },
        None,
        {
            "_private_job_queues": frozenset({"queue_name", "locked_at", "locked_by"}),
            "_private_tasks": frozenset({"id", "identifier"}),
            "_private_known_crontabs": frozenset({"identifier", "known_since"}),
            "migrations": frozenset({"id", "ts"}),
        },
        _names("_private_jobs", "_private_job_queues _private_tasks _private_known_crontabs"),
    ),
    Library(
        "pgqueuer",
        "its workers heartbeat each picked job, and a job whose heartbeat is older than the "
        "retry timer is picked again",
        "the pgq CLI: pgq stale, pgq failed, pgq requeue, pgq dashboard",
        {
            "entrypoint": TEXT,
            "heartbeat": TS,
            "execute_after": TS,
            "priority": INT,
        },
        ("status", frozenset({"queued", "picked"})),  # the others moved to its log in 0.19
        {
            "statistics": frozenset({"count", "priority", "status", "entrypoint"}),
            "schedules": frozenset({"expression", "entrypoint", "next_run", "last_run"}),
            "log": frozenset({"job_id", "status", "entrypoint"}),
        },
        _names(
            "pgqueuer", "pgqueuer_statistics pgqueuer_schedules pgqueuer_log", "pgqueuer_status"
        ),
    ),
    Library(
        "chancy",
        "its Recovery plugin puts running jobs whose worker stopped heartbeating back to pending",
        "the chancy CLI and the dashboard of its Api plugin",
        {
            **_cols("func queue", TEXT),
            **_cols("kwargs limits meta errors", JSON),
            "state": TEXT,
            "taken_by": TEXT,
            **_cols("attempts max_attempts", INT),
            "scheduled_at": TS,
        },
        None,
        {
            "workers": frozenset({"worker_id", "last_seen", "expires_at"}),
            "leader": frozenset({"worker_id", "expires_at"}),
            "queues": frozenset({"name", "state", "concurrency", "executor"}),
        },
        _names("chancy_jobs", "chancy_workers chancy_leader chancy_queues chancy_schema_version"),
    ),
    Library(
        "dramatiq-pg",
        "its recover command (dramatiq-pg recover) puts messages consumed too long ago back "
        "to queued",
        "the dramatiq-pg CLI: recover, purge, flush, stats",
        {
            "message_id": frozenset({"uuid"}),
            "queue_name": TEXT,
            "mtime": TS,
            "message": JSON,
        },
        ("state", frozenset({"queued", "consumed", "rejected", "done"})),
    ),
    Library(
        "que",
        "each job is held by its worker's session advisory lock: a dead worker's lock goes "
        "with its connection, and the job is worked again",
        "que-web and Que's Ruby API (Que::Job)",
        {
            "job_class": TEXT,
            "error_count": INT,
            "last_error_message": TEXT,
            "run_at": TS,
            "priority": INT,
        },
        None,
        {
            "que_lockers": frozenset({"pid", "worker_count", "worker_priorities"}),
            "que_values": frozenset({"key", "value"}),
        },
        _names("que_jobs", "que_lockers que_values"),
    ),
    Library(
        "PGMQ",
        "a message read but neither deleted nor archived is visible again once its "
        "visibility timeout (vt) passes",
        "its SQL functions in its schema: pgmq.read, pgmq.set_vt, pgmq.archive, pgmq.delete, "
        "pgmq.metrics",
        {
            "msg_id": INT,
            "read_ct": INT,
            "enqueued_at": TS,
            "vt": TS,
            "message": JSON,
        },
        None,
        {"meta": frozenset({"queue_name", "is_partitioned", "is_unlogged"})},
    ),
    Library(
        "Solid Queue",
        "its processes heartbeat, and the jobs a process claimed are released back to ready "
        "when its heartbeat stops",
        "Mission Control - Jobs, and Solid Queue's Ruby API (its failed executions' retry)",
        {
            **_cols("queue_name class_name arguments active_job_id concurrency_key", TEXT),
            **_cols("scheduled_at finished_at", TS),
        },
        None,
        {
            "solid_queue_processes": frozenset({"kind", "last_heartbeat_at", "pid"}),
            "solid_queue_claimed_executions": frozenset({"job_id", "process_id"}),
        },
        _names(
            "solid_queue_jobs",
            "solid_queue_processes solid_queue_claimed_executions "
            "solid_queue_ready_executions solid_queue_failed_executions",
        ),
    ),
    Library(
        "GoodJob",
        "each job is held by its process's advisory lock or lock row, the processes "
        "heartbeating: a crashed process's jobs are unlocked and run again",
        "the GoodJob Dashboard and its Ruby API (GoodJob::Job#retry_job, #discard_job)",
        {
            "queue_name": TEXT,
            "serialized_params": JSON,
            "active_job_id": ANY,
            **_cols("scheduled_at performed_at finished_at", TS),
        },
        None,
        {
            "good_job_processes": frozenset({"state", "created_at"}),
            "good_job_executions": frozenset({"active_job_id", "process_id"}),
            "good_job_settings": frozenset({"key", "value"}),
        },
        _names("good_jobs", "good_job_processes good_job_executions good_job_settings"),
    ),
    Library(
        # Odoo's OCA queue_job (10.0 to 18.0): an ORM model's table, its state a varchar (an
        # Odoo Selection: no enum, no CHECK), so its shape is its columns, as chancy's
        "OCA queue_job",
        "its job runner resets a job it could not start from enqueued to pending, its "
        "/queue_job/runjob controller requeues a job that asks to be retried, and its Jobs "
        "Garbage Collector cron (requeue_stuck_jobs) puts jobs enqueued or started too long "
        "back to pending: each writes the table by uuid and state, without a token, so "
        "jobctl's fence cannot hold beside them",
        "Odoo's Queue > Jobs views (Requeue, Set to Done, Cancel) and queue.job's requeue()",
        {
            **_cols("uuid state channel exc_info model_name method_name", TEXT),
            **_cols("date_created date_enqueued date_started eta", TS),
            **_cols("retry max_retries", INT),
        },
        None,
        {
            "queue_job_channel": frozenset({"name", "complete_name", "parent_id"}),
            "queue_job_function": frozenset({"name", "channel_id", "channel"}),
        },
        _names("queue_job", "queue_job_channel queue_job_function", triggers="queue_job_notify"),
        would_take="the fence would hold only with the module's job runner and that cron "
        "stopped, which is queue_job no longer running its jobs",
    ),
)


def normal_type(printed: str) -> str:
    """A type as format_type prints it, without its modifier or its schema: ``character
    varying(25)`` -> ``character varying``, ``public.foo[]`` -> ``foo[]``."""
    bare = re.sub(r"\([^)]*\)", "", printed).strip()
    return re.sub(r'^(?:"[^"]*"|[^".\s]+)\.', "", bare)


def _column(description: TableDescription, spec: str) -> str | None:
    """The table's column named ``spec`` (or one of its ``a|b`` alternatives)."""
    return next((name for name in spec.split("|") if name in description.columns), None)


def _by_shape(description: TableDescription, library: Library) -> list[str] | None:
    """What of ``library``'s shape the table has, or None when it is not the library's: every
    required column, of its type family, and the status enum's labels."""
    for spec, families in library.columns.items():
        name = _column(description, spec)
        if name is None:
            return None
        if families and family(description.columns[name]) not in families:
            return None
    names = [_column(description, spec) or spec for spec in library.columns]
    evidence = [f"its columns {', '.join(names[:4])}{', ...' if len(names) > 4 else ''}"]
    if library.states is not None:
        spec, wanted = library.states
        name = _column(description, spec)
        labels = set(description.labels.get(name, ())) if name is not None else set()
        if not wanted <= labels:
            return None
        evidence.append(f"its {name} enum's labels")
    return evidence


def _by_name(description: TableDescription, library: Library) -> list[str] | None:
    """The library's own table name (after any prefix) with, under the same prefix, one of its
    sibling tables or its status enum's type; None when not."""
    own = library.names
    if own is None or not description.name.endswith(own.table):
        return None
    prefix = description.name[: len(description.name) - len(own.table)]
    siblings = sorted(prefix + s for s in own.siblings if prefix + s in description.neighbour_names)
    enums = sorted({prefix + e for e in own.enums} & set(description.enum_types.values()))
    triggers = sorted(own.triggers & description.triggers)
    if not siblings and not enums and not triggers:
        return None
    evidence = [f"its name {description.name}"]
    if enums:
        evidence.append(f"its enum type {', '.join(enums)}")
    if triggers:
        evidence.append(f"its trigger {', '.join(triggers)}")
    if siblings:
        evidence.append(f"beside its {', '.join(siblings)}")
    return evidence


def _companions(description: TableDescription, library: Library) -> list[str]:
    """The library's companion tables, by their columns, in the table's schema."""
    found = [
        role
        for role, columns in library.companions.items()
        if any(columns <= neighbour for neighbour in description.neighbours)
    ]
    return [f"beside its {', '.join(found)}"] if found else []


def recognise(description: TableDescription) -> Match | None:
    """The self-rescuing queue library whose jobs table this is, if it is one: by its shape
    or by its name (either enough), what gave it away from both."""
    for library in LIBRARIES:
        shape = _by_shape(description, library)
        name = _by_name(description, library)
        if shape is None and name is None:
            continue
        evidence = (name or []) + (shape or [])
        triggers = sorted(library.names.triggers & description.triggers) if library.names else []
        if triggers and not any(e.startswith("its trigger") for e in evidence):
            evidence.append(f"its trigger {', '.join(triggers)}")
        if not any(e.startswith("beside") for e in evidence):
            evidence += _companions(description, library)
        return Match(library, tuple(evidence))
    return None

"""Queue libraries recognised by what their tables are, not by what they are called.

A library that rescues its own jobs (a rescuer, a lifeline, heartbeats, a ``recover``
command) keeps its jobs in a table of its own, in its own states; jobctl's reclaim on that
table would fight the library's rescuer, and jobctl's history trigger would sit in the
library's own statements. So such a table is refused, whatever ``--column``/``--status``
mapping makes it look plausible. The names of the tables and their schema are the user's to
choose (Oban's and River's schema, pg-boss's and Graphile Worker's schema, chancy's,
pgqueuer's and dramatiq-pg's prefix), so the recognition reads what does not move with a
prefix: the table's columns and their types, the labels of its status enum, and the
companion tables the library installs beside it (by their columns too).

Pure: ``recognise`` takes a ``TableDescription`` (read from the catalog by ``shape.describe``:
statements ``library_columns`` and ``library_neighbours`` in sql/catalog.sql) and returns the
library, if any, with what gave it away. Example::

    found = recognise(TableDescription(columns={"func": "text", ...}, ...))
    found.library.name == "chancy"; found.refusal("public.chancy_jobs")
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

TS = frozenset({"timestamp with time zone", "timestamp without time zone"})
JSON = frozenset({"json", "jsonb"})
INT = frozenset({"smallint", "integer", "bigint"})
TEXT = frozenset({"text", "character varying"})
ANY: frozenset[str] = frozenset()


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


@dataclasses.dataclass(frozen=True)
class Library:
    """A queue library that rescues its own jobs, and the shape of its jobs table."""

    name: str
    rescues: str  # how it rescues its own jobs
    tools: str  # where its own tools are
    # required columns: "name" or "name|other_name" (versions renamed it) -> accepted types
    # (empty: any type)
    columns: Mapping[str, frozenset[str]]
    # the status column ("a|b" alternatives) and labels its enum must all have, if any
    states: tuple[str, frozenset[str]] | None = None
    # column sets of tables the library installs beside its jobs table (evidence, not needed:
    # a jobs table moved alone to another schema is still the library's)
    companions: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Match:
    library: Library
    evidence: tuple[str, ...]  # what gave it away, for the refusal

    def refusal(self, qualified: str) -> str:
        """The one line that refuses the table (exit 2, nothing done)."""
        lib = self.library
        return (
            f"{qualified} is {lib.name}'s jobs table ({'; '.join(self.evidence)}): {lib.name} "
            f"rescues its own jobs ({lib.rescues}) and jobctl would fight it, with any "
            f"--column/--status mapping; use {lib.name}'s own tools: {lib.tools}; nothing done"
        )


def _cols(spec: str, types: frozenset[str] = ANY) -> dict[str, frozenset[str]]:
    return {name: types for name in spec.split()}


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
            "errors": frozenset({"jsonb[]"}),
            **_cols("scheduled_at finalized_at attempted_at", TS),
        },
        ("state", frozenset({"available", "running", "retryable", "discarded", "completed"})),
        {
            "river_leader": frozenset({"elected_at", "expires_at", "leader_id", "name"}),
            "river_queue": frozenset({"name", "paused_at", "metadata", "updated_at"}),
            "river_migration": frozenset({"version", "created_at"}),
        },
    ),
    Library(
        "Oban",
        "its Lifeline plugin rescues orphaned executing jobs",
        "Oban Web, Oban.retry_job/2 and Oban.cancel_job/2",
        {
            **_cols("worker", TEXT),
            "args": JSON,
            "errors": frozenset({"jsonb[]"}),
            **_cols("attempt max_attempts", INT),
            **_cols("inserted_at scheduled_at attempted_at", TS),
        },
        ("state", frozenset({"available", "scheduled", "executing", "retryable", "completed"})),
        {"oban_peers": frozenset({"name", "node", "started_at", "expires_at"})},
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
            "expire_in|expirein": frozenset({"interval"}),
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
        ("status", frozenset({"queued", "picked", "successful", "exception"})),
        {
            "statistics": frozenset({"count", "priority", "status", "entrypoint"}),
            "schedules": frozenset({"expression", "entrypoint", "next_run", "last_run"}),
            "log": frozenset({"job_id", "status", "entrypoint"}),
        },
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


def _matches(description: TableDescription, library: Library) -> tuple[str, ...] | None:
    """What of ``library``'s shape the table has, or None when it is not the library's."""
    for spec, types in library.columns.items():
        name = _column(description, spec)
        if name is None:
            return None
        if types and description.columns[name] not in types:
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
    companions = [
        role
        for role, columns in library.companions.items()
        if any(columns <= neighbour for neighbour in description.neighbours)
    ]
    if companions:
        evidence.append(f"beside its {', '.join(companions)}")
    return tuple(evidence)


def recognise(description: TableDescription) -> Match | None:
    """The self-rescuing queue library whose jobs table this is, if it is one."""
    for library in LIBRARIES:
        evidence = _matches(description, library)
        if evidence is not None:
            return Match(library, evidence)
    return None

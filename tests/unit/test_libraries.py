"""Queue libraries recognised by the shape of their tables (jobctl.libraries), no database:
each library's jobs table as its installer makes it (tests/fixtures/libraries), under any name;
tables that only look alike are not."""

from __future__ import annotations

import dataclasses

import pytest

from jobctl import errors
from jobctl.table import libraries
from jobctl.table.libraries import TableDescription, recognise

T, TS, J = "text", "timestamp with time zone", "jsonb"

# the jobs tables of tests/fixtures/libraries/*.sql, as the catalog describes them
RIVER = TableDescription(
    {"id": "bigint", "state": "enum", "attempt": "smallint", "max_attempts": "smallint",
     "attempted_at": TS, "created_at": TS, "finalized_at": TS, "scheduled_at": TS,
     "priority": "smallint", "args": J, "attempted_by": "text[]", "errors": "jsonb[]",
     "kind": T, "metadata": J, "queue": T, "tags": "character varying[]",
     "unique_key": "bytea", "unique_states": "bit"},
    {"state": ("available", "cancelled", "completed", "discarded", "pending", "retryable",
               "running", "scheduled")},
    (frozenset({"elected_at", "expires_at", "leader_id", "name"}),),
)  # fmt: skip
OBAN = TableDescription(
    {"id": "bigint", "state": "enum", "queue": T, "worker": T, "args": J, "errors": "jsonb[]",
     "attempt": "integer", "max_attempts": "integer", "inserted_at": "timestamp without time zone",
     "scheduled_at": "timestamp without time zone", "attempted_at": "timestamp without time zone",
     "completed_at": "timestamp without time zone", "attempted_by": "text[]"},
    {"state": ("available", "suspended", "scheduled", "executing", "retryable", "completed",
               "discarded", "cancelled")},
)  # fmt: skip
PGBOSS = TableDescription(
    {"id": "uuid", "name": T, "priority": "integer", "data": J, "state": "enum",
     "retry_limit": "integer", "retry_count": "integer", "retry_delay": "integer",
     "start_after": TS, "started_on": TS, "expire_in": "interval", "created_on": TS,
     "completed_on": TS, "output": J},
    {"state": ("created", "retry", "active", "completed", "cancelled", "failed")},
)  # fmt: skip
OBAN_PY = TableDescription(  # Oban for Python (oban-py-0.7.0.sql): errors jsonb, smallints
    {"id": "bigint", "state": "enum", "queue": T, "worker": T, "attempt": "smallint",
     "max_attempts": "smallint", "priority": "smallint", "args": J, "meta": J,
     "tags": "text[]", "errors": J, "attempted_by": "text[]",
     "inserted_at": "timestamp without time zone",
     "scheduled_at": "timestamp without time zone",
     "attempted_at": "timestamp without time zone"},
    {"state": ("available", "scheduled", "suspended", "executing", "retryable", "completed",
               "discarded", "cancelled")},
    (frozenset({"name", "node", "elected_at", "expires_at"}),
     frozenset({"uuid", "name", "node", "queue", "meta", "started_at", "updated_at"})),
)  # fmt: skip
PGBOSS_12 = TableDescription(  # from 11: expire_seconds integer instead of expire_in interval
    {"id": "uuid", "name": T, "data": J, "state": "enum", "retry_limit": "integer",
     "retry_count": "integer", "start_after": TS, "expire_seconds": "integer"},
    {"state": ("created", "retry", "active", "completed", "cancelled", "failed")},
)  # fmt: skip
PGQUEUER_018 = TableDescription(  # before 0.19 the status enum had only queued and picked
    {"id": "integer", "priority": "integer", "queue_manager_id": "uuid", "heartbeat": TS,
     "execute_after": TS, "status": "enum", "entrypoint": T, "payload": "bytea"},
    {"status": ("queued", "picked")},
)  # fmt: skip
PGBOSS_9 = TableDescription(  # before version 10: the same columns without underscores
    {"id": "uuid", "name": T, "data": J, "state": "enum", "retrylimit": "integer",
     "retrycount": "integer", "startafter": TS, "expirein": "interval"},
    {"state": ("created", "retry", "active", "completed", "expired", "cancelled", "failed")},
)  # fmt: skip
PROCRASTINATE = TableDescription(
    {"id": "bigint", "queue_name": "character varying", "task_name": "character varying",
     "priority": "integer", "lock": T, "queueing_lock": T, "args": J, "status": "enum",
     "scheduled_at": TS, "attempts": "integer", "abort_requested": "boolean",
     "worker_id": "bigint"},
    {"status": ("todo", "doing", "succeeded", "failed", "cancelled", "aborting", "aborted")},
)  # fmt: skip
GRAPHILE = TableDescription(
    {"id": "bigint", "job_queue_id": "integer", "task_id": "integer", "payload": "json",
     "priority": "smallint", "run_at": TS, "attempts": "smallint", "max_attempts": "smallint",
     "last_error": T, "created_at": TS, "updated_at": TS, "key": T, "locked_at": TS,
     "locked_by": T, "revision": "integer", "flags": J, "is_available": "boolean"},
)  # fmt: skip
GRAPHILE_OLD = TableDescription(  # graphile_worker.jobs, a table before 0.14
    {"id": "bigint", "queue_name": T, "task_identifier": T, "payload": "json",
     "priority": "integer", "run_at": TS, "attempts": "integer", "max_attempts": "integer",
     "last_error": T, "created_at": TS, "updated_at": TS, "key": T, "locked_at": TS,
     "locked_by": T},
)  # fmt: skip
PGQUEUER = TableDescription(
    {"id": "bigint", "priority": "integer", "queue_manager_id": "uuid", "created": TS,
     "updated": TS, "heartbeat": TS, "execute_after": TS, "status": "enum", "entrypoint": T,
     "dedupe_key": T, "payload": "bytea", "headers": J, "attempts": "integer"},
    {"status": ("queued", "picked", "successful", "exception", "canceled", "deleted", "failed")},
)  # fmt: skip
CHANCY = TableDescription(
    {"id": "uuid", "queue": T, "func": T, "kwargs": J, "limits": J, "meta": J,
     "state": "character varying", "priority": "integer", "attempts": "integer",
     "max_attempts": "integer", "taken_by": T, "created_at": TS, "started_at": TS,
     "completed_at": TS, "scheduled_at": TS, "unique_key": T, "errors": J},
)  # fmt: skip
DRAMATIQ = TableDescription(
    {"message_id": "uuid", "queue_name": T, "state": "enum", "mtime": TS, "message": J,
     "result": J, "result_ttl": TS},
    {"state": ("queued", "consumed", "rejected", "done")},
)  # fmt: skip

QUE = TableDescription(
    {"priority": "smallint", "run_at": TS, "id": "bigint", "job_class": T,
     "error_count": "integer", "last_error_message": T, "queue": T, "last_error_backtrace": T,
     "finished_at": TS, "expired_at": TS, "args": J, "data": J,
     "job_schema_version": "integer", "kwargs": J},
)  # fmt: skip
PGMQ = TableDescription(
    {"msg_id": "bigint", "read_ct": "integer", "enqueued_at": TS, "vt": TS, "message": J,
     "headers": J},
)  # fmt: skip
RAILS_TS = "timestamp without time zone"
SOLID_QUEUE = TableDescription(
    {"id": "bigint", "queue_name": "character varying", "class_name": "character varying",
     "arguments": T, "priority": "integer", "active_job_id": "character varying",
     "scheduled_at": RAILS_TS, "finished_at": RAILS_TS,
     "concurrency_key": "character varying", "created_at": RAILS_TS, "updated_at": RAILS_TS},
)  # fmt: skip
GOOD_JOB = TableDescription(
    {"id": "uuid", "queue_name": T, "priority": "integer", "serialized_params": J,
     "scheduled_at": RAILS_TS, "performed_at": RAILS_TS, "finished_at": RAILS_TS, "error": T,
     "created_at": RAILS_TS, "updated_at": RAILS_TS, "active_job_id": "uuid",
     "concurrency_key": T, "job_class": T, "executions_count": "integer",
     "locked_by_id": "uuid", "locked_at": RAILS_TS},
)  # fmt: skip
ODOO_TS, V = "timestamp without time zone", "character varying"
OCA_QUEUE_JOB = TableDescription(  # Odoo 16's queue_job (oca-queue-job-16.sql): all varchar
    {"id": "integer", "uuid": V, "graph_uuid": V, "user_id": "integer",
     "company_id": "integer", "name": V, "model_name": V, "method_name": V, "records": T,
     "dependencies": T, "args": T, "kwargs": T, "func_string": V, "state": V,
     "priority": "integer", "exc_name": V, "exc_message": V, "exc_info": T, "result": T,
     "date_created": ODOO_TS, "date_started": ODOO_TS, "date_enqueued": ODOO_TS,
     "date_done": ODOO_TS, "exec_time": "double precision", "date_cancelled": ODOO_TS,
     "eta": ODOO_TS, "retry": "integer", "max_retries": "integer",
     "channel_method_name": V, "job_function_id": "integer", "channel": V,
     "identity_key": V, "worker_pid": "integer", "message_main_attachment_id": "integer"},
    {},
    (frozenset({"id", "name", "complete_name", "parent_id", "removal_interval"}),),
    triggers=frozenset({"queue_job_notify"}),
)  # fmt: skip

KNOWN = {
    "River": RIVER, "Oban": OBAN, "Oban for Python": OBAN_PY, "pg-boss": PGBOSS,
    "pg-boss 9": PGBOSS_9, "pg-boss 12": PGBOSS_12, "pgqueuer 0.18": PGQUEUER_018,
    "procrastinate": PROCRASTINATE, "Graphile Worker": GRAPHILE,
    "Graphile Worker old": GRAPHILE_OLD, "pgqueuer": PGQUEUER, "chancy": CHANCY,
    "dramatiq-pg": DRAMATIQ, "que": QUE, "PGMQ": PGMQ, "Solid Queue": SOLID_QUEUE,
    "GoodJob": GOOD_JOB, "OCA queue_job": OCA_QUEUE_JOB,
}  # fmt: skip

# the lease design's reference table, and tables of applications that look like queues
REFERENCE = TableDescription(
    {"id": "bigint", "status": T, "attempts": "integer", "max_attempts": "integer",
     "available_at": TS, "reserved_by": T, "reserved_at": TS, "last_error": T,
     "finished_at": TS, "updated_at": TS, "payload": J, "attempt_token": "uuid",
     "lease_expires_at": TS, "heartbeat_at": TS, "recovery_policy": T,
     "reclaim_count": "integer"},
)  # fmt: skip
DJANGO_TASKS = TableDescription(
    {"id": "uuid", "status": "character varying", "enqueued_at": TS, "started_at": TS,
     "finished_at": TS, "args_kwargs": J, "priority": "integer", "task_path": T,
     "queue_name": "character varying", "backend_name": "character varying",
     "run_after": TS, "return_value": J, "exception_class_path": T, "traceback": T,
     "worker_ids": J, "last_attempted_at": TS},
)  # fmt: skip


@pytest.mark.parametrize("name", KNOWN)
def test_each_library_is_recognised_by_its_shape(name):
    found = recognise(KNOWN[name])
    assert found is not None and name.startswith(found.library.name)
    line = found.refusal("acme.acme_jobs")
    assert "\n" not in line and line.startswith("acme.acme_jobs is ")
    assert found.library.rescues in line and found.library.tools in line
    assert "nothing done" not in line  # the refusing command says so (errors.NothingDone)
    last = f"({found.library.would_take})" if found.library.would_take else found.library.tools
    assert errors.NothingDone(line).message.endswith(f"{last}; nothing done")


@pytest.mark.parametrize("name", KNOWN)
def test_a_required_column_gone_or_retyped_is_not_the_library(name):
    """Each column of the signature counts: without it (or of another type) it is not."""
    description = KNOWN[name]
    library = recognise(description)
    assert library is not None
    for spec, types in library.library.columns.items():
        column = next(c for c in spec.split("|") if c in description.columns)
        without = dict(description.columns)
        del without[column]
        assert recognise(dataclasses.replace(description, columns=without)) is None, column
        if types:
            retyped = {**description.columns, column: "point"}
            assert recognise(dataclasses.replace(description, columns=retyped)) is None


@pytest.mark.parametrize("name", [n for n in KNOWN if KNOWN[n].labels])
def test_the_status_labels_count(name):
    """A table with the columns but a status of other labels is not the library's."""
    description = KNOWN[name]
    other = {column: ("a", "b") for column in description.labels}
    assert recognise(dataclasses.replace(description, labels=other)) is None


def test_the_issue_oban_for_python_is_oban():
    """Oban's table as the Python edition creates it (errors jsonb, oban_leaders and
    oban_producers beside it) was refused as "no status column" and installable with a
    mapping; it is Oban's, by its shape alone and by its name alone."""
    found = recognise(OBAN_PY)
    assert found is not None and found.library.name == "Oban"
    assert any("oban_leaders" in e for e in found.evidence)
    by_name = TableDescription(
        {"id": "bigint", "state": "enum"}, {"state": ("whatever",)},
        name="oban_jobs", neighbour_names=frozenset({"oban_producers"}),
        enum_types={"state": "oban_job_state"},
    )  # fmt: skip
    named = recognise(by_name)
    assert named is not None and named.library.name == "Oban"
    assert "its name oban_jobs" in named.evidence


@pytest.mark.parametrize(
    ("name", "siblings", "enums", "library"),
    [
        ("oban_jobs", {"oban_leaders"}, {}, "Oban"),
        ("oban_jobs", set(), {"state": "oban_job_state"}, "Oban"),
        ("acme_pgqueuer", {"acme_pgqueuer_log"}, {}, "pgqueuer"),  # PGQUEUER_PREFIX=acme_
        ("acme_pgqueuer", set(), {"status": "acme_pgqueuer_status"}, "pgqueuer"),
        ("river_job", {"river_leader"}, {}, "River"),
        ("procrastinate_jobs", {"procrastinate_events"}, {}, "procrastinate"),
        ("_private_jobs", {"_private_tasks"}, {}, "Graphile Worker"),
        ("chancy_jobs", {"chancy_workers"}, {}, "chancy"),
        # the name without a sibling or enum of the same prefix is not enough
        ("oban_jobs", set(), {}, None),
        ("oban_jobs", {"acme_oban_leaders"}, {"state": "acme_oban_job_state"}, None),
        ("acme_pgqueuer", {"pgqueuer_log"}, {"status": "pgqueuer_status"}, None),
        ("jobs", {"oban_leaders"}, {"state": "oban_job_state"}, None),
    ],
)
def test_a_library_is_recognised_by_its_name_and_siblings(name, siblings, enums, library):
    """Columns that drifted (here: none of the signature's) do not hide a library whose own
    table name sits beside its own sibling tables or enum type, under any prefix."""
    description = TableDescription(
        {"id": "bigint", "status": T, "state": T}, {}, (), name=name,
        neighbour_names=frozenset(siblings), enum_types=enums,
    )  # fmt: skip
    found = recognise(description)
    assert (found.library.name if found else None) == library


def test_odoo_queue_job_is_refused_with_what_it_would_take():
    """OCA queue_job's table (its state a free varchar, as chancy's): recognised by its
    columns, its queue_job_notify trigger named; the refusal says why the fence cannot hold
    (its runner, controller and cron write without a token) and what it would take."""
    found = recognise(OCA_QUEUE_JOB)
    assert found is not None and found.library.name == "OCA queue_job"
    assert "its trigger queue_job_notify" in found.evidence
    assert "beside its queue_job_channel" in found.evidence
    line = found.refusal("public.queue_job")
    for words in ("runner", "controller", "requeue_stuck_jobs", "Jobs Garbage Collector",
                  "without a token", "fence cannot hold", "cron stopped"):  # fmt: skip
        assert words in line, words
    # its name, beside its trigger or a sibling, is enough when the columns drifted
    drifted = {"id": "integer", "state": V}
    for road in ({"triggers": frozenset({"queue_job_notify"})},
                 {"neighbour_names": frozenset({"queue_job_function"})}):  # fmt: skip
        named = recognise(TableDescription(drifted, name="queue_job", **road))  # type: ignore[arg-type]
        assert named is not None and named.library.name == "OCA queue_job", road
    # the trigger alone on another table, or the name alone, is not
    notify = frozenset({"queue_job_notify"})
    assert recognise(TableDescription(drifted, name="jobs", triggers=notify)) is None
    assert recognise(TableDescription(drifted, name="queue_job")) is None


@pytest.mark.parametrize(
    ("types", "family"),
    [
        (("json", "jsonb", "json[]", "jsonb[]"), "json"),
        (("smallint", "integer", "bigint"), "integer"),
        (("text", "character varying", "character"), "text"),
        (("timestamp with time zone", "timestamp without time zone"), "timestamp"),
        (("text[]", "character varying[]"), "text[]"),
        (("point",), "point"),
    ],
)
def test_column_types_are_compared_by_family(types, family):
    assert {libraries.family(t) for t in types} == {family}


def test_every_fixture_is_loaded_by_the_integration_tests():
    """Each installer's schema in tests/fixtures/libraries is one of the libraries the
    integration tests install (tests/queue_libraries.LIBS), as its library."""
    from queue_libraries import FIXTURES, LIBS

    assert {path.stem for path in FIXTURES.glob("*.sql")} == {lib.key for lib in LIBS}
    names = {library.name for library in libraries.LIBRARIES}
    assert {lib.name for lib in LIBS} <= names


def test_companion_tables_are_named_as_evidence():
    found = recognise(RIVER)
    assert found is not None and any("river_leader" in e for e in found.evidence)
    alone = recognise(dataclasses.replace(RIVER, neighbours=()))
    assert alone is not None and not any("river_leader" in e for e in alone.evidence)


@pytest.mark.parametrize("description", [REFERENCE, DJANGO_TASKS], ids=["reference", "django"])
def test_tables_that_only_look_like_queues_are_not_libraries(description):
    assert recognise(description) is None


def test_every_library_is_listed_once():
    names = [library.name for library in libraries.LIBRARIES]
    assert len(names) == len(set(names))
    assert {"River", "Oban", "pg-boss", "procrastinate", "Graphile Worker", "pgqueuer",
            "chancy", "dramatiq-pg"} <= set(names)  # fmt: skip


@pytest.mark.parametrize(
    ("printed", "normal"),
    [
        ("character varying(25)", "character varying"),
        ("public.oban_job_state", "oban_job_state"),
        ('"My Schema".t[]', "t[]"),
        ("timestamp(6) without time zone", "timestamp without time zone"),
        ("jsonb[]", "jsonb[]"),
    ],
)
def test_types_are_compared_without_modifier_or_schema(printed, normal):
    assert libraries.normal_type(printed) == normal

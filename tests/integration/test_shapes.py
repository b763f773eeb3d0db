"""The tables people have (tests/shapes.py), read from the catalog: ids, statuses, partitions,
and the shapes jobctl refuses before changing anything."""

from __future__ import annotations

import dataclasses

import psycopg
import pytest
from psycopg import rows
from shapes import (
    LIST_BY_QUEUE,
    LIST_BY_STATUS,
    OWN_NAMES_PARKED,
    PARTITIONED,
    REFUSED,
    SHAPES,
    UUID_TEXT_CHECK,
)

from jobctl.schema import shape
from jobctl.table import mapping


def made(dsn: str, ddl: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=True, row_factory=rows.dict_row)
    conn.execute(ddl)
    return conn


def mapping_of(s) -> mapping.TableMapping:
    return mapping.TableMapping.parse(
        columns=s.columns, statuses=s.statuses, park_status=s.park_status
    )


@pytest.mark.parametrize("s", SHAPES, ids=[s.name for s in SHAPES])
def test_each_shape_is_read_and_served(empty_dsn, s):
    with made(empty_dsn, s.ddl) as conn:
        found = shape.inspect(conn, s.table)
        m = mapping_of(s)
        assert shape.refusal(found, m) is None
        assert found.column(m, "status").name == s.status_column
        assert shape.rejected_statuses(conn, found, m) == []


def test_partitions_and_composite_keys(empty_dsn):
    with made(empty_dsn, LIST_BY_QUEUE.ddl) as conn:
        by_queue = shape.inspect(conn, "jobs")
    assert by_queue.partition_strategy == "list" and by_queue.partition_key == ("queue",)
    assert by_queue.primary_key == ("id", "queue")
    assert by_queue.partitions == ("jobs_default", "jobs_mail", "jobs_other")
    assert not by_queue.partitioned_by(mapping.TableMapping(), "status")


def test_a_table_partitioned_by_status_is_known_as_such(empty_dsn):
    with made(empty_dsn, LIST_BY_STATUS.ddl) as conn:
        by_status = shape.inspect(conn, "jobs")
    assert by_status.partitioned_by(mapping.TableMapping(), "status")


def test_an_enum_without_the_park_status_is_caught(empty_dsn):
    with made(empty_dsn, OWN_NAMES_PARKED.ddl) as conn:
        found = shape.inspect(conn, "tasks")
        m = mapping.TableMapping.parse(
            columns=OWN_NAMES_PARKED.columns,
            statuses=OWN_NAMES_PARKED.statuses,
            park_status="needs_human",
        )
        rejected = shape.rejected_statuses(conn, found, m)
    assert [value for value, _ in rejected] == ["needs_human"]
    assert "task_state refuses it" in rejected[0][1]


def test_a_check_constraint_and_a_varchar_length_are_caught(empty_dsn):
    ddl = (
        "CREATE TABLE jobs (id bigserial PRIMARY KEY, status varchar(10) NOT NULL "
        "CHECK (status IN ('queued', 'processing', 'done', 'failed', 'review')))"
    )
    with made(empty_dsn, ddl) as conn:
        found = shape.inspect(conn, "jobs")
        long = mapping.TableMapping.parse(park_status="manual_review")
        assert [v for v, _ in shape.rejected_statuses(conn, found, long)] == ["manual_review"]
        other = mapping.TableMapping.parse(park_status="parked")
        (why,) = shape.rejected_statuses(conn, found, other)
        assert why[0] == "parked" and "CHECK constraint jobs_status_check" in why[1]
        assert (
            shape.rejected_statuses(conn, found, mapping.TableMapping.parse(park_status="review"))
            == []
        )


@pytest.mark.parametrize(("ddl", "table", "says"), REFUSED, ids=[r[1] for r in REFUSED])
def test_shapes_jobctl_cannot_serve_are_refused(empty_dsn, ddl, table, says):
    with made(empty_dsn, ddl) as conn:
        why = shape.refusal(shape.inspect(conn, table), mapping.TableMapping())
    assert why is not None and says in why and "nothing done" not in why  # apply says it


def test_an_id_outside_the_primary_key_is_refused(empty_dsn):
    ddl = "CREATE TABLE jobs (job_key text PRIMARY KEY, id int, status text)"
    with made(empty_dsn, ddl) as conn:
        why = shape.refusal(shape.inspect(conn, "jobs"), mapping.TableMapping())
    assert why is not None and "not part of its primary key (job_key)" in why


def columns_of(conn, table: str) -> list[tuple[str, str]]:
    return [
        (r["attname"], r["type"])
        for r in conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0 ORDER BY attnum",
            (table,),
        )
    ]


BAD_MAPPINGS = [
    # (shape, the options given, what the refusal says)
    (
        OWN_NAMES_PARKED,
        [a for c in OWN_NAMES_PARKED.columns for a in ("--column", c)],
        "would refuse 'queued'",
    ),  # an ENUM of its own labels, no --status
    (OWN_NAMES_PARKED, ["--column", "status=state"], "has no column for the lease design's"),
    (UUID_TEXT_CHECK, ["--park-status", "manual_review"], "would refuse 'manual_review'"),
    (LIST_BY_STATUS, ["--park-status", "review"], "no partition of the table holds this status"),
    (
        dataclasses.replace(
            UUID_TEXT_CHECK, ddl=UUID_TEXT_CHECK.ddl + "; ALTER TABLE jobs ADD lock_token text"
        ),
        ["--column", "attempt_token=lock_token"],
        "column lock_token (its attempt_token) is text (jobctl serves attempt_token as uuid)",
    ),
]


@pytest.mark.parametrize(
    ("s", "options", "says"),
    BAD_MAPPINGS,
    ids=["enum", "names", "check", "no-partition", "lease-type"],
)
def test_a_mapping_the_table_cannot_take_is_refused_and_changes_nothing(
    empty_dsn, s, options, says, run
):
    with made(empty_dsn, s.ddl) as conn:
        before = columns_of(conn, s.table)
        result = run("--table", s.table, "schema", "apply", "--yes", *options, dsn=empty_dsn)
        assert result.code == 2, result.err
        assert result.err.count("\n") == 1 and "nothing done" in result.err
        assert says in result.err, result.err
        assert columns_of(conn, s.table) == before
        assert conn.execute("SELECT to_regnamespace('jobctl') AS s").fetchone()["s"] is None
        job = conn.execute(s.new_job).fetchone()  # the application's own insert still works
        assert job is not None


@pytest.mark.parametrize(("ddl", "table", "says"), REFUSED, ids=[r[1] for r in REFUSED])
def test_schema_apply_refuses_shapes_it_will_never_serve(empty_dsn, ddl, table, says, run):
    with made(empty_dsn, ddl):
        result = run("--table", table, "schema", "apply", "--yes", dsn=empty_dsn)
    assert result.code == 2 and says in result.err and "nothing done" in result.err


SERVED_PARTITIONED = (*PARTITIONED, LIST_BY_STATUS)


@pytest.mark.parametrize("s", SERVED_PARTITIONED, ids=[s.name for s in SERVED_PARTITIONED])
def test_schema_apply_serves_partitioned_tables(empty_dsn, s, run):
    """No longer refused: the reclaim index is built partition by partition (see
    test_partitioned.py), and the application's own insert still works after."""
    with made(empty_dsn, s.ddl) as conn:
        result = run("--table", s.table, "schema", "apply", "--yes", dsn=empty_dsn)
        assert result.code == 0, result.err
        assert run("--table", s.table, "schema", "check", dsn=empty_dsn).code == 0
        assert conn.execute(s.new_job).fetchone() is not None

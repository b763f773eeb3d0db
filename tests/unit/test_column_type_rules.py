"""The type rules (jobctl.column_types): which types of the design's columns jobctl serves, the
one line refusing the others, and the SQL that reads and writes each type."""

from __future__ import annotations

import pytest
from psycopg import sql

from jobctl import db
from jobctl.table import column_types
from jobctl.table.column_types import ColumnType
from jobctl.table.mapping import TableMapping


def typed(design: str, name: str, display: str | None = None, **kw: str) -> ColumnType:
    return ColumnType(
        design, kw.get("schema", "pg_catalog"), name, display or name, kw.get("t", "b")
    )


def text(composable: sql.Composable) -> str:
    return composable.as_string(None)


@pytest.mark.parametrize(
    ("design", "name", "display"),
    [
        ("attempts", "int2", "smallint"),
        ("attempts", "int8", "bigint"),
        ("max_attempts", "int4", "integer"),
        ("reserved_by", "uuid", "uuid"),
        ("reserved_by", "int8", "bigint"),
        ("reserved_by", "varchar", "character varying(100)"),
        ("last_error", "jsonb", "jsonb"),
        ("last_error", "json", "json"),
        ("last_error", "varchar", "character varying(20)"),
        ("updated_at", "timestamp", "timestamp without time zone"),
        ("attempt_token", "uuid", "uuid"),
    ],
)
def test_served_types(design, name, display):
    assert column_types.problem(design, typed(design, name, display)) is None


@pytest.mark.parametrize(
    ("design", "found", "says"),
    [
        ("last_error", typed("last_error", "xml"), "is xml ("),
        ("attempts", typed("attempts", "numeric"), "is numeric ("),
        ("reserved_at", typed("reserved_at", "text"), "is text ("),
        ("reserved_by", typed("reserved_by", "bpchar", "character(8)"), "is character(8) ("),
        ("updated_at", typed("updated_at", "text"), "is text ("),
        ("updated_at", typed("updated_at", "int2", "smallint"), "is smallint ("),
        ("updated_at", typed("updated_at", "int8", "public.int8", schema="public"), "public"),
        ("last_error", typed("last_error", "err", "err", schema="public", t="d"), "(a domain)"),
        ("reserved_by", typed("reserved_by", "uuid", "public.uuid", schema="public"), "public"),
        ("attempt_token", typed("attempt_token", "text"), "as uuid)"),
    ],
)
def test_refused_types_name_the_column_its_type_and_what_is_served(design, found, says):
    line = column_types.refusal("public.jobs", TableMapping(), {design: found})
    assert line is not None and "\n" not in line
    assert line.startswith(f"public.jobs: column {design} is ") and says in line
    assert f"(jobctl serves {design} as {column_types.served(design)})" in line
    assert not line.endswith("; nothing done")  # apply's NothingDone says it, once


def test_a_refusal_names_the_tables_own_column_and_the_part_it_plays():
    line = column_types.refusal(
        "public.tasks", TableMapping(), {"last_error": typed("errors", "xml")}
    )
    assert line is not None and "column errors (its last_error) is xml" in line


def test_the_reference_tables_statements_are_unchanged():
    """Text and timestamptz columns: the typed placeholders are the plain column and value."""
    fragments = db.spelling(sql.Identifier("jobs"), TableMapping())
    assert text(fragments["last_error_text"]) == '"last_error"'
    assert text(fragments["new_last_error_text"]) == 'NEW."last_error"'
    assert text(fragments["reason_value"]) == "%(reason)s"
    assert text(fragments["worker_value"]) == "%(worker)s"
    assert text(fragments["reclaim_error_value"]) == "'lease expired before completion'"


def test_json_is_written_as_a_json_string_and_read_back_as_text():
    types = {"last_error": typed("errors", "jsonb")}
    fragments = db.spelling(sql.Identifier("tasks"), TableMapping(), types=types)
    assert text(fragments["reason_value"]) == "pg_catalog.to_jsonb(%(reason)s::pg_catalog.text)"
    assert (
        text(fragments["new_last_error_text"])
        == "(NEW.\"last_error\" OPERATOR(pg_catalog.#>>) '{}'::pg_catalog.text[])"
    )
    json_types = {"last_error": typed("errors", "json")}
    json_fragments = db.spelling(sql.Identifier("t"), TableMapping(), types=json_types)
    assert text(json_fragments["error_value"]).startswith("pg_catalog.to_json(%(error)s")


def test_a_varchar_takes_jobctls_reason_cut_to_its_length():
    types = {"last_error": typed("last_error", "varchar", "character varying(20)")}
    fragments = db.spelling(sql.Identifier("jobs"), TableMapping(), types=types)
    assert text(fragments["reason_value"]) == "CAST(%(reason)s AS pg_catalog.varchar(20))"


@pytest.mark.parametrize("name", ["uuid", "int2", "int4", "int8"])
def test_a_worker_id_is_cast_from_text_to_the_columns_type(name):
    types = {"reserved_by": typed("reserved_by", name)}
    fragments = db.spelling(sql.Identifier("jobs"), TableMapping(), types=types)
    assert text(fragments["worker_value"]) == (
        f'CAST(%(worker)s::pg_catalog.text AS "pg_catalog"."{name}")'
    )


def test_a_time_kept_as_a_number_needs_its_unit():
    bigint = typed("updated_at", "int8", "bigint")
    assert "give its unit with --column-unit updated_at=ms" in column_types.problem(
        "updated_at", bigint
    )
    assert column_types.problem("updated_at", bigint, "ms") is None
    assert column_types.problem("updated_at", typed("updated_at", "int4", "integer"), "s") is None
    assert "cannot hold epoch ms" in column_types.problem(
        "updated_at", typed("updated_at", "int4", "integer"), "ms"
    )
    assert "not a number" in column_types.problem(
        "updated_at", typed("updated_at", "timestamptz"), "ms"
    )
    assert "only updated_at takes one" in column_types.problem(
        "finished_at", typed("finished_at", "int8"), "ms"
    )


@pytest.mark.parametrize(
    ("unit", "sql_text"),
    [
        ("ms", "CAST(pg_catalog.date_part('epoch', pg_catalog.now()) OPERATOR(pg_catalog.*) 1000"),
        ("s", "CAST(pg_catalog.date_part('epoch', pg_catalog.now()) AS"),
    ],
)
def test_jobctl_writes_now_in_the_columns_unit(unit, sql_text):
    mapping = TableMapping.parse(units=[f"updated_at={unit}"])
    types = {"updated_at": typed("updated_at", "int8", "bigint")}
    fragments = db.spelling(sql.Identifier("jobs"), mapping, types=types)
    assert text(fragments["updated_at_now"]).startswith(sql_text)
    assert text(fragments["updated_at_seen_type"]) == '"pg_catalog"."int8"'
    plain = db.spelling(sql.Identifier("jobs"), TableMapping())
    assert text(plain["updated_at_now"]) == "pg_catalog.now()"
    assert text(plain["updated_at_seen_type"]) == '"pg_catalog"."timestamptz"'


def test_units_are_recorded_with_the_mapping_and_absent_when_none():
    mapping = TableMapping.parse(columns=["updated_at=modified"], units=["updated_at=ms"])
    assert TableMapping.from_json(mapping.to_json()) == mapping
    assert "updated_at in epoch milliseconds" in mapping.describe()
    assert "units" not in TableMapping.parse(columns=["status=state"]).to_json()
    with pytest.raises(Exception, match="the unit is s or ms"):
        TableMapping.parse(units=["updated_at=us"])
    with pytest.raises(Exception, match="give DESIGN=UNIT"):
        TableMapping.parse(units=["updated_at"])


def test_every_column_jobctl_cannot_serve_is_named_in_the_one_line():
    types = {
        "last_error": typed("last_error", "xml"),
        "updated_at": typed("updated_at", "int8", "bigint"),
        "attempts": typed("attempts", "int4", "integer"),
    }
    line = column_types.refusal("public.jobs", TableMapping(), types)
    assert line == (
        "public.jobs: column last_error is xml (jobctl serves last_error as text, character "
        "varying, jsonb, json); column updated_at is bigint, a number: give its unit with "
        "--column-unit updated_at=ms (or =s)"
    )


def test_a_domain_over_a_served_type_is_served_as_its_base():
    # Kill Bill's datetime (a domain over timestamp): its base type's family
    datetime = ColumnType(
        "processing_available_date", "public", "datetime", "datetime", "d",
        ("pg_catalog", "timestamp"),
    )  # fmt: skip
    assert datetime.family == "timestamp" and datetime.domain
    assert column_types.problem("available_at", datetime) is None
    # a domain over varchar(36) cuts jobctl's reason to 36, as the varchar itself would
    token = ColumnType(
        "err", "public", "token", "token", "d", ("pg_catalog", "varchar"), "character varying(36)"
    )
    assert token.length == 36
    assert "36" in text(column_types.from_text(token, sql.Placeholder("reason")))
    # a domain over a type jobctl does not serve, or over one of the application's: refused
    over_xml = ColumnType("err", "public", "doc", "doc", "d", ("pg_catalog", "xml"))
    assert "(a domain)" in (column_types.problem("last_error", over_xml) or "")
    over_own = ColumnType("err", "public", "doc", "doc", "d", ("public", "text"))
    assert column_types.problem("last_error", over_own) is not None

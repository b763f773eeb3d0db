"""The named statements of jobctl/sql: every block loads and composes, names are unique."""

from __future__ import annotations

import re

import pytest
from psycopg import sql

from jobctl import db
from jobctl.sql import queries
from jobctl.table.mapping import TableMapping

TABLE = sql.Identifier("queue", "Work Items")
# a table with its own names: every design column and status placeholder must be resolved
SPELLING = db.spelling(
    TABLE,
    TableMapping.parse(
        columns=["status=state", "id=job_id", "reserved_by=locked_by"],
        statuses=["queued=pending", "processing=running", "done=completed"],
        park_status="manual_review",
    ),
    ("pg_catalog", "uuid"),
    ("public", "job_state"),
)


def test_blocks_are_found_and_not_empty():
    blocks = queries.blocks()
    assert len(blocks) > 30
    assert all(text.strip() for text in blocks.values())
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", name) for name in blocks)


# what callers supply to the DDL blocks: identifiers and keywords, never values
FRAGMENTS = {
    "queued_index": sql.Identifier("idx_q"),
    "job_table": sql.Literal("queue.jobs"),
    "mapping": sql.Literal("{}"),
    "constraint": sql.Identifier("c"),
    "index": sql.Identifier("idx"),
    "concurrently": sql.SQL("CONCURRENTLY"),
    "check": sql.SQL("reclaim_count >= 0"),
    "schema": sql.Identifier("queue"),
    "role": sql.Identifier("oncall"),
    "columns": sql.SQL(", ").join([sql.Identifier("status")]),
    "trigger": sql.Identifier("jobctl_history"),
    "event": sql.SQL("UPDATE"),
    "when": sql.SQL("true"),
    "mode": sql.Literal("late"),
    "version": sql.Literal(2),
    "migration": sql.Literal("lean_history"),
    # a migration's record (history 012 on: history.migration_statement)
    "jobctl_version": sql.Literal("0.2.0"),
    "checksum": sql.Literal("0" * 64),
    "versions": sql.Literal([1, 2]),
    "checksums": sql.Literal(["0" * 64, "1" * 64]),
    # the end of a history function in a mode with statistics columns (history.wanted)
    "statistics": sql.SQL("NULL;"),
    # the migrations a fresh install's baseline stands for (history.baseline_step)
    "rows": sql.SQL("(1, 'events_attempts', '0.2.0', {})").format("0" * 64),
    "database": sql.Identifier("jobctl_demo"),
    "read_only": sql.SQL(""),
    "search_path": sql.SQL("'pg_catalog, pg_temp'"),
    "column": sql.Identifier("status"),
    # a display's cut of a long column (triage._shown_columns)
    "shown_columns": sql.SQL(", ").join([sql.Identifier("j", "status")]),
    "column_name": sql.Identifier("last_error"),
    "cut_name": sql.Identifier("jobctl_cut:last_error"),
    "text": sql.SQL("e.reason"),
    "shown_worker": sql.SQL("e.worker"),
    "shown_actor": sql.SQL("e.actor"),
    "shown_reason": sql.SQL("e.reason"),
    "shown_value": sql.SQL("e.value"),  # a pause's kind or queue (events.pause_events)
    "order": sql.SQL("DESC"),
    "shown_group": sql.SQL("j.queue"),  # summary_groups' group as shown (triage.summary_by)
    # the history's kept texts (history.kept_texts, triage.shown_texts)
    "bytes": sql.SQL("e.reason_bytes"),
    "bytes_worker": sql.SQL("e.worker_bytes"),
    "bytes_reason": sql.SQL("e.reason_bytes"),
    "kept_chars": sql.Literal(4096),
    "kept_worker": sql.SQL("OLD.reserved_by"),
    "kept_worker_bytes": sql.SQL("NULL"),
    "kept_action_reason": sql.SQL("NULL"),
    "kept_action_reason_bytes": sql.SQL("NULL"),
    "kept_event_reason": sql.SQL("NULL"),
    "kept_event_reason_bytes": sql.SQL("NULL"),
    "type": sql.SQL("text"),
    "expression": sql.SQL("status <> ''"),
    # the history function's DDL
    "function": sql.Identifier("jobctl", "record_work_items_0123abcd"),
    "body": sql.Literal("BEGIN RETURN NEW; END"),
    "comment": sql.Literal("jobctl's history"),
    "digest": sql.Literal("0123456789abcdef"),
    "only": sql.SQL("ONLY"),
    "value": sql.Literal("running"),
    "parent_index": sql.Identifier("queue", "idx_parent"),
    # schema remove's
    "drops": sql.SQL("DROP COLUMN IF EXISTS attempt_token"),
    "functions": sql.SQL(""),
    "tag": sql.SQL("$jobctl$"),
    "group_key": sql.SQL("j.kind"),
    # the reclaimer's function (schema.reclaimer)
    "arguments": sql.SQL("p_limit pg_catalog.int8"),
    "argument_types": sql.SQL("pg_catalog.int8"),
    "give": sql.SQL(""),
    "owner": sql.Identifier("jobctl_rw"),
    "signature": sql.SQL("jobctl.reclaim_work_items_0123abcd(bigint)"),
    "reclaimer_function": sql.Identifier("jobctl", "reclaim_work_items_0123abcd"),
    "reclaimer_arguments": sql.SQL("%(limit)s::pg_catalog.int8"),
}


@pytest.mark.parametrize("name", sorted(queries.blocks()))
def test_every_block_composes_for_any_table(name):
    text = queries.query(name, **SPELLING, **FRAGMENTS).as_string(None)
    assert "{" not in text.replace("'{", "")  # every include resolved
    if "{table}" in queries.blocks()[name]:
        assert '"queue"."Work Items"' in text


def test_no_block_is_named_like_a_placeholder_of_the_table():
    """A block named "status" would be shadowed by the table's status column."""
    assert not set(queries.blocks()) & set(SPELLING)


@pytest.mark.parametrize("name", ["reclaim_batch", "manual_requeue", "claim", "worker_fail"])
def test_the_table_is_spoken_to_in_its_own_terms(name):
    text = queries.query(name, **SPELLING).as_string(None)
    assert '"state"' in text and '"job_id"' in text
    assert not re.search(r'\bj\.(status|id|reserved_by)\b|"status"|"reserved_by"', text)
    assert "'queued'" not in text and "'processing'" not in text
    assert '\'pending\'::"public"."job_state"' in text  # every one of them writes queued
    if name == "reclaim_batch":  # what reclaim would fail goes to the park status, typed
        assert '\'manual_review\'::"public"."job_state"' in text
        assert '\'running\'::"public"."job_state"' in text


def test_an_include_is_the_included_block():
    stuck = queries.query("stuck", **SPELLING).as_string(None)
    assert queries.query("expired_filter", **SPELLING).as_string(None) in stuck


def test_each_decision_is_written_once():
    """The reclaim decision and the lease state live in one block each, included elsewhere."""
    blocks = queries.blocks()
    decision = "THEN 'requeue'::pg_catalog.text ELSE 'fail'"
    assert sum(decision in text for text in blocks.values()) == 1
    assert sum("THEN 'expired'::pg_catalog.text" in text for text in blocks.values()) == 1
    # the other judgements of a job: its effective policy, whether it awaits a human and why
    for judgement in ("'auto'::pg_catalog.text AND NOT {kind_manual}", "{reclaim_error_text}"):
        assert [n for n, text in blocks.items() if judgement in text] in (
            ["effective_policy"],
            ["awaiting_review"],
        )
    assert sum("'attempts_exhausted'" in text for text in blocks.values()) == 1


@pytest.mark.parametrize(
    "name",
    [
        "stuck",
        "review",
        "review_count",
        "summary_groups",
        "metrics_leases",
        "report_review",
        "job_row_shown",
    ],
)
def test_every_reader_includes_the_judgements(name):
    """Every statement that shows or counts policies, leases or the review queue includes the
    one block of each judgement, never a copy of its test."""
    text = queries.blocks()[name]
    assert "recovery_policy} = 'manual'" not in text and "recovery_policy} = 'auto'" not in text
    assert "{lease_expires_at} < now()" not in text


def test_an_ordinary_comment_never_starts_a_block():
    text = (
        "-- name: first\n-- what the first does\n-- over two lines\nSELECT 1\n"
        "-- note: a comment inside the statement, not a block\nFROM t\n\n"
        "-- name: second\n-- what the second does\nSELECT 2\n"
    )
    assert queries.parse(text) == {
        "first": "SELECT 1\n-- note: a comment inside the statement, not a block\nFROM t",
        "second": "SELECT 2",
    }


def test_a_block_needs_a_description_and_a_unique_name():
    with pytest.raises(ValueError, match="description"):
        queries.parse("-- name: bare\nSELECT 1\n")
    with pytest.raises(ValueError, match="twice"):
        queries.parse("-- name: a\n-- one\nSELECT 1\n-- name: a\n-- two\nSELECT 2\n")


def test_the_history_keeps_what_the_reads_show():
    """The history keeps a long text cut where every read cuts (history 011): what a read
    shows without --full is what the history has."""
    from jobctl.ops import triage
    from jobctl.schema import history

    assert history.KEPT_CHARS == triage.DISPLAY_CHARS


def test_expiring_soon_is_judged_in_one_block():
    """A live lease is expiring soon where lease_expiring_soon says so: every statement that
    tells expiring leases (summary, top, metrics, show, stuck's at_risk) reads that block, and
    none restates its comparison with the window."""
    readers = [
        name
        for name, text in queries.blocks().items()
        if "{lease_soon_window}" in re.sub(r"--[^\n]*", "", text)
    ]
    assert readers == ["lease_expiring_soon"]
    assert "{lease_expiring_soon}" in queries.blocks()["at_risk"]

"""Which errors of a reclaim batch the row-by-row retry isolates (a row's), which ended the
statement (the connection, the server, the operator), which it tries again: judged by
SQLSTATE and, for a cancel or a lock timeout, by the server function that raised it (a
trigger may RAISE any SQLSTATE). The errors are the fields the rules read of psycopg's
(``sqlstate``, ``diag.source_function``); tests/integration/test_reclaim.py raises them for real."""

from __future__ import annotations

import types

import pytest

from jobctl.ops.reclaim import row_errors


class Raised(Exception):
    """An error as the rules read it: its SQLSTATE and the server function that raised it
    (what psycopg's ``sqlstate`` and ``diag.source_function`` give)."""

    def __init__(self, sqlstate: str | None, source_function: str) -> None:
        super().__init__("nope")
        self.sqlstate = sqlstate
        self.diag = types.SimpleNamespace(source_function=source_function)


@pytest.mark.parametrize(
    "sqlstate", ["42501", "40P01", "40001", "57014", "55P03", "P0001", "23505", "22003", "XX000"]
)
def test_a_triggers_raise_of_any_sqlstate_is_a_rows(sqlstate):
    assert row_errors.isolated(Raised(sqlstate, "exec_stmt_raise"))


@pytest.mark.parametrize("sqlstate", [None, "08006", "08003", "53100", "53200", "57P01", "57P02"])
def test_the_connection_the_server_or_the_operator_ending_it_is_the_statements(sqlstate):
    assert not row_errors.isolated(Raised(sqlstate, "ProcessInterrupts"))


@pytest.mark.parametrize("sqlstate", ["57014", "55P03"])
def test_a_cancel_or_lock_timeout_the_server_raised_is_the_statements(sqlstate):
    assert not row_errors.isolated(Raised(sqlstate, "ProcessInterrupts"))


@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])
def test_a_deadlock_or_serialization_failure_is_tried_again(sqlstate):
    assert row_errors.transient(Raised(sqlstate, "DeadLockReport"))
    assert not row_errors.transient(Raised("42501", "exec_stmt_raise"))


def test_a_skipped_row_says_its_error_and_sqlstate():
    said = row_errors.skipped(Raised("42501", "exec_stmt_raise"), 1)
    assert said.startswith("error: nope (SQLSTATE 42501)") and "tried" not in said
    assert "tried 4 times" in row_errors.skipped(Raised("40P01", "DeadLockReport"), 4)
    assert row_errors.raised({"id": 1, "skipped": said})
    assert not row_errors.raised({"id": 1, "skipped": "locked by pid 7"})


def test_the_rows_left_are_named_once_in_one_line():
    left = row_errors.LeftAlone()
    batches = [[{"id": 3, "skipped": "error: x"}, {"id": 4, "skipped": None}], []]
    assert list(left.watch(iter(batches))) == batches
    assert (
        left.ids == ["3"]
        and left.line() is not None
        and left.line().endswith(": 3; the others reclaimed")
    )
    assert row_errors.LeftAlone().line() is None

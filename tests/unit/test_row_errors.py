"""Which errors of a reclaim batch the row-by-row retry isolates (a row's), which ended the
statement (the connection, the server, the operator), which it tries again: judged by
SQLSTATE and, for a cancel or a lock timeout, by the server function that raised it (a
trigger may RAISE any SQLSTATE). The errors are the fields the rules read of psycopg's
(``sqlstate``, ``diag.source_function``); tests/integration/test_reclaim.py raises them for real."""

from __future__ import annotations

import datetime as dt
import types

import pytest

from jobctl import db
from jobctl.ops.reclaim import row_errors


class Raised(Exception):
    """An error as the rules read it: its SQLSTATE and the server function that raised it
    (what psycopg's ``sqlstate`` and ``diag.source_function`` give)."""

    def __init__(
        self,
        sqlstate: str | None,
        source_function: str,
        message: str = "",
        context: str = "",
        detail: str | None = None,
    ) -> None:
        super().__init__("nope")
        self.sqlstate = sqlstate
        self.diag = types.SimpleNamespace(
            source_function=source_function,
            message_primary=message,
            context=context,
            message_detail=detail,
        )


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


SETTINGS = db.Settings(
    statement_timeout=dt.timedelta(seconds=1), lock_timeout=dt.timedelta(milliseconds=300)
)
IN_TRIGGER = 'SQL statement "SELECT pg_sleep(5)"\nPL/pgSQL function slow() line 3 at PERFORM'


def test_a_statement_the_server_cancelled_at_its_timeout_was_held_by_a_row():
    timed_out = Raised("57014", "ProcessInterrupts", "due to statement timeout", IN_TRIGGER)
    assert row_errors.held(timed_out, 1.2, SETTINGS)
    assert row_errors.held(
        Raised("57014", "ProcessInterrupts", "wegen Zeitüberschreitung"), 1.0, SETTINGS
    )
    said = row_errors.held_skipped(timed_out, SETTINGS)
    assert said.startswith("error: the statement was cancelled after 1s: an application trigger")
    assert "(SQLSTATE 57014)" in said and row_errors.raised({"id": 1, "skipped": said})


def test_a_cancel_request_before_the_timeout_is_the_statements():
    """A cancel request (jobctl's own, anyone's pg_cancel_backend) comes before the timeout;
    in English its message says so, whenever it comes."""
    assert not row_errors.held(Raised("57014", "ProcessInterrupts", "", IN_TRIGGER), 0.5, SETTINGS)
    user = Raised("57014", "ProcessInterrupts", "canceling statement due to user request")
    assert not row_errors.held(user, 2.0, SETTINGS)
    assert not row_errors.held(Raised("57014", "exec_stmt_raise"), 2.0, SETTINGS)  # isolated's
    assert not row_errors.held(Raised("42501", "ProcessInterrupts"), 2.0, SETTINGS)


def test_a_lock_timeout_inside_a_trigger_was_held_by_a_row_one_of_the_statements_not():
    in_trigger = Raised("55P03", "ProcessInterrupts", "due to lock timeout", IN_TRIGGER)
    assert row_errors.held(in_trigger, 0.3, SETTINGS)
    assert "cancelled after 300ms" in row_errors.held_skipped(in_trigger, SETTINGS)
    assert not row_errors.held(Raised("55P03", "ProcessInterrupts"), 5.0, SETTINGS)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_rows_passed_over_are_tried_again_once_their_time_is_up():
    clock = Clock()
    over = row_errors.PassedOver(for_=dt.timedelta(minutes=10), clock=clock)
    over.add(["1", "2"])
    clock.now = 300
    over.add(["3", "1"])  # 1 skipped again: passed over from now again
    assert over.ids() == ["2", "3", "1"] and "2" in over
    clock.now = 600
    assert over.ids() == ["3", "1"] and "2" not in over
    clock.now = 900
    assert over.ids() == []


def test_the_rows_passed_over_are_bounded_the_oldest_tried_again_first():
    over = row_errors.PassedOver(cap=3, clock=Clock())
    over.add(str(n) for n in range(5))
    assert over.ids() == ["2", "3", "4"]
    assert row_errors.PassedOver().cap == 10_000


# what reclaim_batch's refusal (jobctl.refuse, history 013) says of a row a trigger kept back
KEPT_BACK = (
    '{"written_row":false,"written_status":null,"written_token_cleared":null,'
    '"written_reclaim_count":null,"read_reclaim_count":0}'
)


def test_a_row_not_written_as_meant_is_a_rows_and_says_what_was_written():
    """The statement's refusal of a row an application trigger kept back or changed (SQLSTATE
    JC001): isolated, so the batch is tried row by row, where its DETAIL says what was
    written for ``tally.as_written`` to judge."""
    refused = Raised(row_errors.NOT_AS_MEANT, "exec_stmt_raise", detail=KEPT_BACK)
    assert row_errors.isolated(refused) and not row_errors.transient(refused)
    assert row_errors.not_as_meant(refused) == {
        "written_row": False,
        "written_status": None,
        "written_token_cleared": None,
        "written_reclaim_count": None,
        "read_reclaim_count": 0,
    }


@pytest.mark.parametrize(
    ("sqlstate", "detail"),
    [
        ("P0001", KEPT_BACK),  # another SQLSTATE: not the refusal
        ("JC001", None),  # a trigger's RAISE of jobctl's SQLSTATE, without its DETAIL
        ("JC001", "not json"),
        ("JC001", "[1, 2]"),
        ("JC001", '{"written_row": false}'),  # not what reclaim_written returns
    ],
)
def test_anything_else_is_not_the_refusal(sqlstate, detail):
    assert row_errors.not_as_meant(Raised(sqlstate, "exec_stmt_raise", detail=detail)) is None

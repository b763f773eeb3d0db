"""The totals line of an operator write: whenever anything was not
written, one line on stderr counting every outcome and saying why for what was not."""

from __future__ import annotations

import pytest

from jobctl.ops import manual
from jobctl.table.mapping import TableMapping

REVIEWED = "now processing (changed since the review); nothing written"


def test_a_conflict_is_said_in_words():
    line = manual.totals(["requeued", "requeued", "conflict"], ["", "", REVIEWED])
    assert line == "2 requeued, 1 conflict (changed since the review; nothing written for it)"


def test_only_conflicts_still_one_line():
    line = manual.totals(
        ["conflict"] * 3, ["the row changed since the review; nothing written"] * 3
    )
    assert line == "3 conflicts (changed since the review; nothing written for them)"


def test_refusals_locks_and_missing_jobs_are_counted():
    line = manual.totals(
        ["failed", "refused", "locked", "not_found"],
        ["", "job is already failed", "row locked by pid 7; nothing written", "job 9 not found"],
    )
    assert line == (
        "1 failed, 1 refused (job is already failed; nothing written for it), "
        "1 locked (row locked by another session; nothing written for it), "
        "1 not found (no such job; nothing written for it)"
    )


def test_nothing_to_say_when_every_job_was_done():
    assert manual.totals(["requeued", "requeued"], ["", ""]) is None
    assert manual.Report([]).totals() is None


SEEN = {
    "attempt_token": None,
    "lease_state": "none",
    "awaiting_review": False,
    "reserved_by": None,
    "lease_expires_at": None,
}
PENDING = TableMapping(statuses={"queued": "pending", "failed": "errored", "done": "completed"})


@pytest.mark.parametrize(
    ("action", "status", "says"),
    [
        ("requeue", "pending", "job is already pending"),  # not "already queued"
        ("fail", "errored", "job is already errored"),
        ("requeue", "completed", "job is done (completed)"),
    ],
)
def test_a_refusal_names_the_tables_own_status(action, status, says):
    """``requeue 7`` on a ``pending`` row answered "already queued"."""
    outcome, detail = manual.refusal(
        {**SEEN, "status": status}, action, force=False, expect_token=None, mapping=PENDING
    )
    assert (outcome, detail) == ("refused", says)

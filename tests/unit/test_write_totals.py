"""An operator write's report and refusals in the table's own words (the totals line
itself: test_outcomes.py)."""

from __future__ import annotations

import pytest

from jobctl.ops import manual
from jobctl.render import write_lines
from jobctl.table.mapping import TableMapping


def test_a_report_with_nothing_to_say_has_no_totals_line():
    assert write_lines.report_totals(manual.Report([]).results, said_apart=False) is None


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

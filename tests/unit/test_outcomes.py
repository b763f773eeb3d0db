"""The totals line of an operator write (jobctl/render/write_lines.py, each outcome's exit
code jobctl/ops/outcomes.py): whenever anything was not written, one line on stderr counting
every outcome and saying why for what was not."""

from __future__ import annotations

import pytest

from jobctl import errors
from jobctl.ops import outcomes
from jobctl.render import write_lines

REVIEWED = "now processing (changed since the review); nothing written"


def test_a_conflict_is_said_in_words():
    line = write_lines.totals(["requeued", "requeued", "conflict"], ["", "", REVIEWED])
    assert line == "2 requeued, 1 conflict (changed since the review; nothing written for it)"


def test_only_conflicts_still_one_line():
    line = write_lines.totals(
        ["conflict"] * 3, ["the row changed since the review; nothing written"] * 3
    )
    assert line == "3 conflicts (changed since the review; nothing written for them)"


def test_refusals_locks_and_missing_jobs_are_counted():
    line = write_lines.totals(
        ["failed", "refused", "locked", "not_found"],
        ["", "job is already failed", "row locked by pid 7; nothing written", "job 9 not found"],
    )
    assert line == (
        "1 failed, 1 refused (job is already failed; nothing written for it), "
        "1 locked (row locked by another session; nothing written for it), "
        "1 not found (no such job; nothing written for it)"
    )


def test_nothing_to_say_when_every_job_was_done():
    assert write_lines.totals(["requeued", "requeued"], ["", ""]) is None


def test_a_stale_token_is_said_as_such_and_other_changes_as_changes():
    stale = write_lines.totals(["conflict"], ["attempt token is 5f0e..., not 9a1b..."])
    assert stale == "1 conflict (not the attempt token expected; nothing written for it)"
    moved = write_lines.totals(["conflict"], ["now done; nothing written"])
    assert moved == "1 conflict (changed since it was read; nothing written for it)"


def test_refusals_for_several_reasons_point_at_each_rows_detail():
    line = write_lines.totals(
        ["refused", "refused"], ["job is already failed", "job is done (done)"]
    )
    assert line == "2 refused (see each row's detail; nothing written for them)"


def test_a_refusal_is_named_by_its_reason_without_its_detail():
    line = write_lines.totals(["refused"], ["job is done (completed): requeue --force to retry"])
    assert line == "1 refused (job is done; nothing written for it)"


def test_policy_changes_are_counted_in_the_plural_of_their_words():
    line = write_lines.totals(["policy_changed", "policy_changed", "locked"], ["", "", ""])
    assert line is not None and line.startswith("2 policies changed, 1 locked (")


@pytest.mark.parametrize("outcome", sorted(outcomes.OUTCOME_EXIT))
def test_every_outcome_has_its_exit_code_and_its_words(outcome):
    """A written outcome alone needs no line; beside a job not written it is counted first."""
    code = outcomes.OUTCOME_EXIT[outcome]
    assert code in (errors.EXIT_OK, errors.EXIT_USAGE, errors.EXIT_CONFLICT, errors.EXIT_ERROR)
    alone = write_lines.totals([outcome], ["job is already failed"])
    assert (alone is None) == (code == errors.EXIT_OK)
    other = "not_found" if outcome == "locked" else "locked"
    beside = write_lines.totals([outcome, other], ["job is already failed", "no job"])
    assert beside is not None and beside.startswith("1 ") and ", 1 " in beside

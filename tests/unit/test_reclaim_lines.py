"""reclaim's lines (jobctl/render/reclaim_lines.py): the summary of a dry run or a commit,
where the jobs it did not retry went, and the next step it names (no database)."""

from __future__ import annotations

import collections

from jobctl.render import reclaim_lines
from jobctl.table.mapping import TableMapping


def test_summary_line():
    counts = collections.Counter({"requeue": 3, "fail": 1, "skipped": 2})
    why = " (nothing written for them: each row's skipped says why)"
    assert (
        reclaim_lines.summary_line(counts, True)
        == f"reclaimed: 3 requeued, 1 failed, 2 skipped{why}"
    )
    assert reclaim_lines.summary_line(counts, False) == (
        f"dry run: 3 would be requeued, 1 failed, 2 skipped{why}; nothing changed"
    )
    assert reclaim_lines.summary_line(collections.Counter(), False).endswith("; nothing to reclaim")


def test_summary_line_names_the_park_status():
    counts = collections.Counter({"requeue": 1, "fail": 2})
    assert reclaim_lines.summary_line(counts, True, park_status="manual_review") == (
        "reclaimed: 1 requeued, 2 parked in manual_review, 0 skipped"
    )


def test_the_summary_line_names_where_jobs_not_retried_go():
    counts = collections.Counter({"requeue": 2, "fail": 1})
    assert reclaim_lines.summary_line(counts, True) == "reclaimed: 2 requeued, 1 failed, 0 skipped"
    assert reclaim_lines.summary_line(counts, True, park_status="parked") == (
        "reclaimed: 2 requeued, 1 parked in parked, 0 skipped"
    )
    # a total across targets, some of which park: both, as each target's line says its own
    assert reclaim_lines.summary_line(counts, False, some_parked=True) == (
        "dry run: 2 would be requeued, 1 failed or parked, 0 skipped; nothing changed"
    )


def test_a_commit_that_failed_or_parked_jobs_names_the_next_step():
    """The line "reclaimed: 7 requeued, 4 failed" said nothing of the 4 waiting."""
    counts = collections.Counter({"requeue": 7, "fail": 4})
    step = reclaim_lines.next_step(counts, True)
    assert (
        step is not None and "4 job(s) failed by this reclaim" in step and "jobctl review" in step
    )
    parked = reclaim_lines.next_step(counts, True, park_status="errored")
    assert parked is not None and "parked in errored" in parked
    assert reclaim_lines.next_step(counts, False) is None  # a dry run did nothing
    assert reclaim_lines.next_step(collections.Counter({"requeue": 3}), True) is None


def test_the_commit_names_the_tables_own_failed_status_as_the_report_does():
    """failed mapped to errored: the commit said "4 failed", the report "parked in errored"."""
    assert TableMapping().named_park is None
    assert TableMapping(statuses={"failed": "errored"}).named_park == "errored"
    assert TableMapping(park_status="manual_review").named_park == "manual_review"
    counts = collections.Counter({"fail": 4})
    line = reclaim_lines.summary_line(counts, True, park_status="errored")
    assert "4 parked in errored" in line


def test_the_question_before_a_commit_in_its_four_forms():
    asked = reclaim_lines.asked
    Q = reclaim_lines.Question
    one = asked(Q(5, requeue=3))
    assert (one.before, one.question) == (None, "Reclaim 5 expired job(s): 3 requeue, 2 fail?")
    assert one.title == "about to reclaim (the dry run, now)"
    plan = asked(Q(7, plan="p.json"))
    assert (plan.before, plan.question, plan.title) == (
        None,
        "Apply plan p.json: reclaim up to 7 job(s)?",
        "",
    )
    across = asked(Q(3, by_target=(("a", 2, 1), ("b", 1, 0)), not_on=("c",)))
    assert across.before == "by target: a 2 (1 requeue, 1 fail), b 1 (0 requeue, 1 fail)"
    assert across.question == "Reclaim 3 expired job(s) on 2 target(s), not on c (failed)?"
    plans = asked(Q(4, plan="p.json", by_target=(("a", 3, None), ("b", 1, None))))
    assert plans.before == "by target: a 3, b 1"
    assert plans.question == "Apply plan p.json: reclaim up to 4 job(s) on 2 target(s)?"


def test_what_one_database_did_in_its_lines_in_order():
    counts = collections.Counter({"requeue": 2, "fail": 1})
    done = reclaim_lines.OneDatabase(counts, True, expired_after=4, left_alone=("9",))
    said = reclaim_lines.said(done)
    assert said[0] == "reclaimed: 2 requeued, 1 failed, 0 skipped"
    assert said[1].startswith("next: 1 job(s) failed")
    assert said[2] == ("4 more lease(s) expired after the preview, left: jobctl reclaim --dry-run")
    assert said[3].startswith("partial: 1 job(s) left as they were") and len(said) == 4
    across = reclaim_lines.AcrossTargets({"a": counts}, {"a": None}, committed=False)
    assert reclaim_lines.said(across) == [
        "target a: dry run: 2 would be requeued, 1 failed, 0 skipped; nothing changed"
    ]

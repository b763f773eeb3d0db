"""reclaim's option rules, plans read from disk, and its summary line (no database)."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from jobctl import errors
from jobctl.ops.reclaim import plans, request
from jobctl.ops.triage import ExpiredFilter
from jobctl.render import reclaim_lines

REQUEST = request.Request()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"batch_size": 0}, "--batch-size must be between 1 and 10000"),
        ({"batch_size": 10_001}, "--batch-size"),
        ({"every": dt.timedelta(seconds=5)}, "needs --commit --yes"),
        ({"every": dt.timedelta(seconds=5), "commit": True}, "needs --commit --yes"),
        ({"plan": Path("p.json")}, "--plan applies a saved plan: it needs --commit"),
        ({"save_plan": Path("p.json"), "commit": True}, "cannot go with --commit"),
        (
            {"plan": Path("p.json"), "commit": True, "expired": ExpiredFilter(worker="w1")},
            "no filters with it",
        ),
    ],
)
def test_option_rules(changes, message):
    with pytest.raises(errors.UsageError, match=message):
        dataclasses.replace(REQUEST, **changes).check()


def test_the_service_and_a_plan_commit_are_allowed():
    dataclasses.replace(REQUEST, every=dt.timedelta(1), commit=True, yes=True).check()
    dataclasses.replace(REQUEST, plan=Path("p.json"), commit=True).check()


HERE = {"system_identifier": "7", "database": "app", "table": "public.jobs"}
ROW = {
    "id": 1,
    "attempt_token": str(uuid.UUID(int=1)),
    "lease_expires_at": "2026-11-30T03:00:00+00:00",
    "action": "requeue",
}


def test_a_saved_plan_loads_back(tmp_path):
    path = tmp_path / "plan.json"
    plans.save_plan(path, HERE, [ROW])  # type: ignore[list-item]
    assert plans.load_plan(path, HERE) == [ROW]


@pytest.mark.parametrize(
    ("content", "error", "message"),
    [
        ("not json", errors.UsageError, "not a jobctl plan"),
        ('{"format": "other"}', errors.UsageError, "not a jobctl plan"),
        (
            json.dumps({"format": plans.PLAN_FORMAT, "where": HERE, "rows": [{"id": 1}]}),
            errors.UsageError,
            "malformed plan rows",
        ),
        (
            json.dumps(
                {"format": plans.PLAN_FORMAT, "where": {**HERE, "database": "b"}, "rows": []}
            ),
            errors.Refused,
            "made for database 'b'",
        ),
    ],
)
def test_bad_plans_are_refused(tmp_path, content, error, message):
    path = tmp_path / "plan.json"
    path.write_text(content)
    with pytest.raises(error, match=message):
        plans.load_plan(path, HERE)


def test_a_missing_plan_is_one_line(tmp_path):
    with pytest.raises(errors.UsageError, match="cannot read plan"):
        plans.load_plan(tmp_path / "absent.json", HERE)


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


def test_the_table_keeps_the_first_rows_and_the_skipped_ones():
    from jobctl.cli import terminal
    from jobctl.ops.reclaim.tally import Tally
    from jobctl.render import views

    first = terminal.TABLE_ROWS

    def batches(skipped: set[int], size: int, count: int) -> list[list[dict]]:
        rows = [
            {"id": i, "action": "requeue", "skipped": "locked" if i in skipped else None}
            for i in range(count)
        ]
        return [rows[i : i + size] for i in range(0, count, size)]

    def drained(skipped: set[int], size: int = 7, count: int = 100) -> list[int]:
        tally = Tally(shown=first)
        for _ in tally.counted(batches(skipped, size, count)):  # type: ignore[arg-type]
            pass
        assert tally.total == count
        assert tally.counts["skipped"] == len(skipped & set(range(count)))
        return [r["id"] for r in tally.kept]

    assert drained(set()) == list(range(first))
    assert drained({3, first + 5, 99}) == [*range(first), first + 5, 99]
    many = set(range(50, 100))  # more skipped rows than the table shows: the first of them
    assert drained(many) == [*range(first), *range(50, 50 + first)]
    assert drained(set(), count=5) == list(range(5))
    doc = views.some_rows([{"id": 1}], 30)
    assert doc.sections[0].title.startswith("1 of 30 rows shown")
    assert "-o jsonl" in doc.sections[0].title
    assert views.some_rows([{"id": 1}], 1).sections[0].title is None


def test_a_tally_across_targets_keeps_each_targets_first_rows_under_its_name():
    """A dry run across targets: each target's table rows (its first ones, then its skipped
    ones), target after target, and the counts of all."""
    from jobctl.ops.reclaim.tally import Tally

    def found(count: int, skipped: set[int]) -> list[dict]:
        return [
            {"id": i, "action": "fail" if i % 3 else "requeue", "skipped": None}
            | ({"skipped": "locked"} if i in skipped else {})
            for i in range(count)
        ]

    a = Tally.of(found(30, {25}), shown=20)  # type: ignore[arg-type]
    b = Tally.of(found(3, set()), shown=20)  # type: ignore[arg-type]
    joined = Tally.across({"a": a, "b": b})
    assert [(r["target"], r["id"]) for r in joined.kept] == [
        *(("a", i) for i in [*range(20), 25]),
        *(("b", i) for i in range(3)),
    ]
    assert joined.total == 33 and joined.counts == a.counts + b.counts
    assert a.counts == {"requeue": 10, "fail": 19, "skipped": 1}


def test_the_summary_line_names_where_jobs_not_retried_go():
    import collections

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
    from jobctl.table.mapping import TableMapping

    assert TableMapping().named_park is None
    assert TableMapping(statuses={"failed": "errored"}).named_park == "errored"
    assert TableMapping(park_status="manual_review").named_park == "manual_review"
    counts = collections.Counter({"fail": 4})
    line = reclaim_lines.summary_line(counts, True, park_status="errored")
    assert "4 parked in errored" in line

"""review's pure parts: ids from stdin, review plans read from disk, the fail rule."""

from __future__ import annotations

import json

import pytest

from jobctl import errors
from jobctl.ops import manual, review


def test_ids_one_per_line_or_json_lines():
    assert review.read_ids("3\n\n 4 \n") == ["3", "4"]
    assert review.read_ids('{"id": 7, "why": "manual_policy"}\n{"id": "a-b"}\n') == ["7", "a-b"]
    assert review.read_ids('5\n{"id": 6}\n') == ["5", "6"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no job ids"),
        ("\n \n", "no job ids"),
        ("{not json\n", "line 1: not valid JSON"),
        ('1\n{"job": 2}\n', "line 2: a JSON line needs an 'id'"),
        ("[1, 2]\n", None),  # not an object: taken as an id, refused by the database later
    ],
)
def test_bad_stdin(text, message):
    if message is None:
        assert review.read_ids(text) == ["[1, 2]"]
        return
    with pytest.raises(errors.UsageError, match=message):
        review.read_ids(text)


def plan(tmp_path, **changes):
    made = {
        "format": review.PLAN_FORMAT,
        "where": {"database": "app", "table": "public.jobs", "system_identifier": "1"},
        "rows": [
            {
                "id": 1,
                "status": "failed",
                "attempt_token": None,
                "updated_at": "2026-12-01T00:00:00+00:00",
                "row_version": "9",
            }
        ],
    } | changes
    path = tmp_path / "p.json"
    path.write_text(json.dumps(made))
    return path


HERE = {"database": "app", "table": "public.jobs", "system_identifier": "1"}


def test_a_review_plan_is_read_back(tmp_path):
    assert review.load_plan(plan(tmp_path), HERE)[0]["row_version"] == "9"


def test_a_plan_for_another_place_or_of_another_kind_is_refused(tmp_path):
    with pytest.raises(errors.Refused, match="database 'app', this is 'other'"):
        review.load_plan(plan(tmp_path), HERE | {"database": "other"})
    with pytest.raises(errors.UsageError, match="not a review plan"):
        review.load_plan(plan(tmp_path, format="jobctl-reclaim-plan/1"), HERE)
    with pytest.raises(errors.UsageError, match="malformed plan rows"):
        review.load_plan(plan(tmp_path, rows=[{"id": 1}]), HERE)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(errors.UsageError, match="not JSON"):
        review.load_plan(broken, HERE)


def test_fail_of_a_failed_job_only_while_it_awaits_review():
    seen = {"status": "failed", "attempt_token": None, "lease_state": "none"}
    assert manual.refusal(seen, "fail", force=False, expect_token=None)[0] == "refused"
    waiting = seen | {"awaiting_review": True}
    assert manual.refusal(waiting, "fail", force=False, expect_token=None) == (None, "")
    assert manual.refusal(waiting, "requeue", force=False, expect_token=None) == (None, "")


def test_a_plan_row_is_the_job_only_at_its_very_row_version():
    """A planned row is decided on the job as read (manual.decide), and
    only while the job is still the row the plan names (since_review)."""
    import uuid

    token = uuid.uuid4()
    now = {"row_version": "812", "status": "failed", "attempt_token": token}
    now["awaiting_review"] = True
    planned = {"row_version": "812", "status": "failed", "attempt_token": str(token)}
    assert manual.since_review(planned, now) is None  # the token as JSON text: the same
    assert manual.since_review(planned, None) == "job no longer exists; nothing written"
    assert "now queued (changed since the review)" in str(
        manual.since_review(planned, {**now, "status": "queued"})
    )
    moved = {**now, "row_version": "813"}
    assert manual.since_review(planned, moved) == (
        "the row changed since the review; nothing written"
    )
    assert "no longer awaiting review" in str(
        manual.since_review(planned, {**moved, "awaiting_review": False})
    )
    assert manual.since_review({**planned, "attempt_token": None}, now) is not None
    assert manual.since_review({**planned, "row_version": 812}, now) is None  # JSON number

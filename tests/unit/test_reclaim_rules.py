"""reclaim's option rules and plans read from disk (no database; its lines:
test_reclaim_lines.py, its counting: test_tally.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from jobctl import errors
from jobctl.ops.reclaim import plans, request
from jobctl.ops.triage import ExpiredFilter

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

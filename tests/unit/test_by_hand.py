"""requeue's, fail's and cancel's option rules (``ops.by_hand.Request``), checked as the
request is made, before anything is read (no database)."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from pathlib import Path

import pytest

from jobctl import errors
from jobctl.ops.bulk import BulkFilter
from jobctl.ops.by_hand import Request
from jobctl.ops.slices import Slice

KIND = BulkFilter(Slice(kinds=("send_email",)))
TOKEN = uuid.UUID(int=7)


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        # ids (or a plan) and a filter: one or the other
        ({"action": "requeue", "job_ids": ("1",), "which": KIND}, "not both"),
        ({"action": "fail", "plan": Path("p.json"), "which": KIND}, "not both"),
        ({"action": "requeue", "expect_token": TOKEN, "which": KIND}, "not both"),
        # a filter's plan is saved, or its jobs written: not both
        (
            {"action": "requeue", "which": KIND, "save_plan": Path("p"), "yes": True},
            "--save-plan lists and saves, --yes writes",
        ),
        ({"action": "fail", "which": KIND, "yes": True}, "fail needs --reason"),
        ({"action": "cancel", "which": KIND, "yes": True, "reason": " "}, "cancel needs --reason"),
        ({"action": "requeue"}, r"requeue needs job ids, - \(stdin\), --plan FILE or a filter"),
        ({"action": "requeue", "which": BulkFilter(statuses=("done",))}, "--status 'done'"),
        (
            {"action": "requeue", "which": BulkFilter(statuses=("failed",), no_lease=True)},
            "--no-lease: jobs with no lease are processing ones",
        ),
        # ids or a plan
        (
            {"action": "requeue", "job_ids": ("1",), "save_plan": Path("p")},
            "--save-plan saves the jobs a filter lists",
        ),
        ({"action": "fail", "plan": Path("p"), "job_ids": ("1",)}, "no ids with it"),
        ({"action": "fail", "plan": Path("p"), "expect_token": TOKEN}, "no ids with it"),
        ({"action": "requeue", "job_ids": ("-", "3")}, "give no other id with it"),
        ({"action": "fail", "job_ids": ("1",)}, "fail needs --reason"),
        ({"action": "cancel", "plan": Path("p")}, "cancel needs --reason"),
        (
            {"action": "requeue", "job_ids": ("1", "2"), "expect_token": TOKEN},
            "--expect-token names one attempt",
        ),
    ],
)
def test_rules_between_the_options(asked, message):
    with pytest.raises(errors.UsageError, match=message):
        Request(**asked)


def test_what_the_rules_let_through():
    assert Request("requeue", ("1", "2"), delay=dt.timedelta(seconds=5)).on_filter is False
    assert Request("requeue", ("-",)).from_stdin
    assert Request("fail", plan=Path("p"), reason="r").on_filter is False
    listed = Request("requeue", which=KIND, save_plan=Path("p"))
    assert listed.on_filter and not listed.yes
    assert Request("cancel", ("1",), reason="r").forced  # a live lease is a cancel's point
    assert not Request("fail", ("1",), reason="r").forced
    assert Request("requeue", ("1",), expect_token=TOKEN).expect_token == TOKEN


def test_the_rules_name_every_filter_requeues_help_lists():
    """A rule's message names the filter options as requeue's --help lists them, all of them."""
    from jobctl.cli.commands import writes
    from jobctl.ops.by_hand import FILTER_OPTIONS

    listed = re.search(r"A filter\s+\(([^)]*)\)", writes.requeue.__doc__ or "")
    assert listed is not None
    assert FILTER_OPTIONS == " ".join(listed.group(1).split())
    with pytest.raises(errors.UsageError, match="--older-than, --no-lease"):
        Request("requeue")

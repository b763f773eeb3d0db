"""``jobctl policy``'s option rules (``ops.policy.Request``), checked as the request is
made, before anything is read (no database)."""

from __future__ import annotations

import pytest

from jobctl import errors
from jobctl.ops.policy import Request


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        ({"job_ids": ("1",)}, "say which policy: --auto or --manual"),
        ({"kind": "k"}, "say which policy"),  # no default: never turned auto unasked
        ({"job_ids": ("1",), "policy": "auto", "kind": "k"}, "not both"),
        ({"job_ids": ("1",), "listing": True}, "not both"),
        ({"kind": "k", "queue": "q", "policy": "manual"}, "one at a time"),
        ({"kind": "k", "queue": "q", "remove": True}, "one at a time"),
        ({"remove": True, "job_ids": ("1",)}, "--remove removes a policy per kind"),
        ({"policy": "auto"}, "give job ids, or --kind K / --queue Q, or --list"),
    ],
)
def test_rules_between_the_options(asked, message):
    with pytest.raises(errors.UsageError, match=message):
        Request(**asked)


def test_what_the_rules_let_through():
    assert Request(listing=True).listing
    assert Request(listing=True, kind="k", queue="q").listing  # --list wins
    assert Request(kind="k", remove=True).dimension == ("kind", "k")
    assert Request(queue="q", policy="manual").dimension == ("queue", "q")
    assert Request(("1", "2"), "auto").job_ids == ("1", "2")

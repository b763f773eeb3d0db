"""The words for the database's judgements about a job (jobctl/render/judgements.py): one
wording for every screen and sentence; the judging itself is SQL's (test_agreement.py)."""

from __future__ import annotations

import pytest

from jobctl.render import judgements


@pytest.mark.parametrize(
    ("row", "shown"),
    [
        ({"effective_policy": "auto", "policy_from": "row"}, "auto"),
        ({"effective_policy": "manual", "policy_from": "row"}, "manual"),
        ({"effective_policy": "manual", "policy_from": "kind"}, "manual (kind)"),
        ({"effective_policy": "manual", "policy_from": "queue"}, "manual (queue)"),
        # a kind's recorded auto does not say where it came from: auto is auto
        ({"effective_policy": "auto", "policy_from": "kind"}, "auto"),
        # an older server's reply, without the judgement: the row's own policy
        ({"recovery_policy": "manual"}, "manual"),
    ],
)
def test_the_effective_policy_and_where_it_came_from(row, shown):
    assert judgements.policy(row) == shown


@pytest.mark.parametrize(
    ("row", "long", "short"),
    [
        ({"review_why": "manual_policy", "policy_from": "row"}, "manual_policy", "manual"),
        ({"review_why": "manual_policy", "policy_from": "kind"}, "manual (kind)", "manual (kind)"),
        ({"why": "attempts_exhausted"}, "attempts_exhausted", "attempts"),
        ({"why": "parked"}, "parked", "parked"),
        ({"why": "something_newer"}, "something_newer", "something_newer"),
        ({}, "", ""),
    ],
)
def test_why_a_job_awaits_a_human_in_a_column(row, long, short):
    assert judgements.why(row) == long
    assert judgements.why(row, short=True) == short


def test_why_in_a_sentence_names_the_kind_or_queue_that_made_it_manual():
    assert judgements.why_phrase({"why": "manual_policy", "policy_from": "queue"}) == (
        "its queue's recorded policy is manual"
    )
    assert judgements.why_phrase({"why": "manual_policy"}) == "its policy is manual"
    assert judgements.why_phrase({"review_why": "attempts_exhausted"}) == (
        "it used all its attempts"
    )
    assert "--park-older-than" in judgements.why_phrase({"why": "parked"})


def test_every_reason_has_a_word_and_a_phrase():
    assert judgements.WHY_WORDS.keys() == judgements.WHY_PHRASES.keys()

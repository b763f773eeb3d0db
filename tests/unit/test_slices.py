"""What the operator narrows by (jobctl/ops/slices.py): --kind, --queue and --error as the
parameters of the block mapped_filter, the error text as an ILIKE pattern of only itself."""

from __future__ import annotations

import re

import pytest

from jobctl import errors
from jobctl.ops.slices import EVERY, Slice, error_pattern
from jobctl.table.mapping import TableMapping


def test_no_narrowing_is_every_job_and_no_parameter():
    assert not EVERY and not Slice(kinds=(), queues=(), error="")
    assert EVERY.params() == {"kinds": None, "queues": None, "error": None}


def test_the_parameters_of_a_slice():
    narrowed = Slice(kinds=("send_email", "resize"), queues=("mail",), error="smtp")
    assert narrowed
    assert narrowed.params() == {
        "kinds": ["send_email", "resize"],
        "queues": ["mail"],
        "error": "%smtp%",
    }


def test_a_queue_without_the_mapping_says_how_to_map_it():
    with pytest.raises(errors.UsageError, match="--queue needs the table's queue column"):
        Slice(queues=("mail",)).check(TableMapping())
    Slice(queues=("mail",)).check(TableMapping.parse(columns=["queue=queue_name"]))


def test_kind_without_the_mapping_says_how_to_map_it():
    with pytest.raises(errors.UsageError, match="--column kind=COLUMN"):
        Slice(kinds=("x",)).check(TableMapping())
    Slice(error="x").check(TableMapping())  # --error needs no mapping


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("smtp", "%smtp%"),
        ("100%", "%100\\%%"),
        ("quota_used", "%quota\\_used%"),
        ("a\\b", "%a\\\\b%"),
        ("", None),
        (None, None),
    ],
)
def test_error_text_matches_only_itself(text, pattern):
    assert error_pattern(text) == pattern


def _ilike(pattern: str, text: str) -> bool:
    """PostgreSQL's ILIKE with its default escape character, for the pattern's own test."""
    regex = ""
    chars = iter(pattern)
    for c in chars:
        if c == "\\":
            regex += re.escape(next(chars))
        elif c == "%":
            regex += ".*"
        elif c == "_":
            regex += "."
        else:
            regex += re.escape(c)
    return re.fullmatch(regex, text, re.IGNORECASE | re.DOTALL) is not None


@pytest.mark.parametrize(
    ("text", "matches", "not_matches"),
    [
        ("100%", "disk 100% full", "disk 1000 full"),
        ("quota_used", "QUOTA_USED exceeded", "quotaXused exceeded"),
        ("a\\b", "path a\\b", "path ab"),
    ],
)
def test_the_pattern_matches_the_text_anywhere_and_nothing_else(text, matches, not_matches):
    pattern = error_pattern(text)
    assert pattern is not None
    assert _ilike(pattern, matches) and not _ilike(pattern, not_matches)

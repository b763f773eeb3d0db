"""Every command's --help reads as a person types: metavars as words
(N, DURATION, NAME, TEXT, a choice's values), never typer's ``<int>``, ``<int range>`` or
``<str>``, and defaults as values (``[default: 30s]``, never ``[default: (30s)]``)."""

from __future__ import annotations

import re

import pytest
from test_docs import command_names, help_text

pytestmark = pytest.mark.help_look  # all of it: how the help reads

TYPER_METAVAR = re.compile(r"<[a-z| ]+>")


@pytest.mark.parametrize("name", command_names())
def test_help_shows_metavars_a_person_reads(name):
    text = help_text(name)
    assert not TYPER_METAVAR.search(text), TYPER_METAVAR.findall(text)
    assert "[default: (" not in text
    assert "(dynamic)" not in text


def test_the_metavars_and_defaults_of_the_issue():
    reclaim = " ".join(help_text("reclaim").split())
    assert "--batch-size N" in reclaim and "--limit N" in reclaim
    assert "[default: 0s]" in reclaim
    top = " ".join(help_text("").split())
    assert "--actor NAME" in top and "[default: 30s]" in top
    assert "-o, --output table|wide|json|jsonl|csv|tsv" in " ".join(help_text("stuck").split())

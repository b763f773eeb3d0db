"""A confirmation's question wrapped at spaces to the terminal (cli/terminal.asked), room left
for click's " [y/N]: " on its last line; off a terminal, as it is."""

from __future__ import annotations

import pytest

from jobctl.cli import terminal

QUESTION = (
    "Remove from public.delayed_jobs: drop the history trigger and its function "
    "jobctl.record_delayed_jobs_5c0f3e1a; drop from public.delayed_jobs the columns "
    "attempt_token, lease_expires_at, heartbeat_at, recovery_policy, reclaim_count; the index "
    "idx_delayed_jobs_processing_timeout; the recorded names?"
)


@pytest.mark.parametrize("width", [40, 80, 120])
def test_wrapped_at_spaces_with_room_for_the_prompt(width):
    asked = terminal.asked(QUESTION, width)
    lines = asked.split("\n")
    assert len(lines) > 1
    assert all(len(line) <= width - 1 for line in lines)
    assert len(lines[-1] + terminal.PROMPT + " ") <= width  # the answer's prompt fits too
    assert asked.split() == QUESTION.split()  # every word whole, none lost or added


def test_short_or_off_a_terminal_as_it_is():
    assert terminal.asked("Requeue 3 job(s)?", 80) == "Requeue 3 job(s)?"
    assert terminal.asked(QUESTION, None) == QUESTION


def test_the_prompt_alone_on_the_last_line():
    """A question whose last line has no room for the prompt leaves it a line of its own."""
    question = "x" * 70 + " " + "y" * 70
    asked = terminal.asked(question, 75)
    assert asked == "x" * 70 + "\n  " + "y" * 70 + "\n "  # click writes " [y/N]: " after it

"""Each command's terminal columns at a width are decided by their priority, not by the data
``events`` showed ROLE but not ACTOR on the demo, ACTOR but not ROLE on
a person's table; at 120 columns a long REASON needed -o wide."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobctl.render import output, screen, views

VIEWS = {
    name: value
    for name, value in vars(views).items()
    if name.endswith("_VIEW") and isinstance(value, list)
}
NOW = dt.datetime.now(dt.timezone.utc)


def event(actor: str, role: str, reason: str) -> dict:
    return {
        "at": NOW,
        "event": "requeued",
        "to_status": "queued",
        "attempt": 1,
        "worker": "web-3",
        "actor": actor,
        "db_role": role,
        "claimed": None,
        "reason": reason,
        "attempt_token": uuid.UUID(int=1),
    }


def shown(view, rows, width):
    return [c.header for c in screen.layout(view, rows, width, output.cell).columns]


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_the_priority_is_written_once_per_command(name):
    """No two optional columns of a view share a priority: the order is the view's own."""
    ranks = [c.priority for c in VIEWS[name] if c.priority > 0]
    assert len(ranks) == len(set(ranks)), name


def test_events_shows_actor_before_role_whatever_the_data():
    demo = [event("demo-oncall@example", "postgres", "")]
    person = [event("alice.longname@payments.example.com", "app_owner_role", "x" * 60)]
    for rows in (demo, person):
        headers = shown(views.EVENT_VIEW, rows, 80)
        assert "ROLE" not in headers or "ACTOR" in headers, headers
    assert "REASON" in shown(views.EVENT_VIEW, person, 120)  # cut to fit, not hidden


TEXT = st.text(alphabet="abcdefghij@.-_ ", max_size=60)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(TEXT, TEXT, TEXT), min_size=1, max_size=5), st.sampled_from([80, 120]))
def test_the_columns_shown_are_the_first_by_priority(values, width):
    rows = [event(*v) for v in values]
    grid = screen.layout(views.EVENT_VIEW, rows, width, output.cell)
    optional = sorted((c for c in views.EVENT_VIEW if c.priority > 0), key=lambda c: c.priority)
    picked = [c in grid.columns for c in optional]
    assert picked == sorted(picked, reverse=True), [c.header for c in grid.columns]
    assert all(len(text) <= width for text, _ in grid.lines())

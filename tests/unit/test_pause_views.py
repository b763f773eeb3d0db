"""How a pause reads on a terminal: jobctl events names the kind or queue a pause or resume
was of (an event of no job), in the column every width shows."""

from __future__ import annotations

from jobctl.render import pause_views, views


def test_a_pause_event_says_which_kind_or_queue():
    became = next(c for c in views.JOB_EVENT_VIEW if c.header == "BECAME")
    assert became.priority == 0 and became.value is not None
    pause = {"id": None, "event": "paused", "kind": "charge_card", "queue": None}
    assert became.value(pause) == "kind charge_card"
    assert became.value({**pause, "event": "resumed", "kind": None, "queue": "main"}) == (
        "queue main"
    )
    job = {"id": 7, "event": "reclaimed", "kind": "charge_card", "to_status": "queued"}
    assert became.value(job) == "queued"


def test_the_pause_list_shows_what_for_how_long_by_whom_and_why_at_any_width():
    always = [c.key for c in pause_views.PAUSE_VIEW if c.priority == 0]
    assert always == ["dimension", "value", "paused_s", "actor", "reason"]

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


def test_the_claims_since_a_pause_read_as_a_count_or_not_seen():
    pause = {"dimension": "kind", "value": "charge_card", "claims_running": 2}
    seen = {**pause, "claims_since": 12, "claims_seen": "all"}
    assert pause_views.claims_cell(seen) == 12
    assert pause_views.claims_line(seen) == (
        "12 claim(s) of kind charge_card since the pause: some workers do not read pauses "
        "(an older lease.Worker, one started before schema apply, or a claim of their own)"
    )
    partly = {**seen, "claims_seen": "not_completed"}
    assert "completed are not counted" in (pause_views.claims_line(partly) or "")
    assert pause_views.claims_line({**seen, "claims_since": 0}) is None
    unseen = {**pause, "claims_since": None, "claims_seen": "running"}
    assert pause_views.claims_cell(unseen) == pause_views.UNSEEN
    said = pause_views.claims_line(unseen) or ""
    assert "cannot be seen" in said and "2 running now were claimed after it" in said

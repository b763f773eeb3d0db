"""The notifications of pauses (ops.notify.Watch.pauses_seen): the pauses read each pass
diffed with the last read, a new one told ``paused`` (who, why, the jobs it holds back), a
gone one ``resumed``; the run's first read tells nothing; PagerDuty takes both as Change
Events (paging nobody), Slack's text is inert, jobctl's JSON carries the pause."""

from __future__ import annotations

import datetime as dt
import json

from test_notify import AT, watched

from jobctl.render import notifications

SINCE = AT - dt.timedelta(minutes=62)


def paused(value="charge_card", dimension="kind", *, at=SINCE, waiting=40, reason="down"):
    return {
        "dimension": dimension,
        "value": value,
        "reason": reason,
        "actor": "alice",
        "db_role": "ops",
        "paused_at": at,
        "paused_s": (AT - at).total_seconds(),
        "waiting": waiting,
    }


def test_the_first_read_tells_nothing_then_each_change_once():
    watch, sent, _ = watched()
    old = paused("send_email")
    watch.pauses_seen([old])  # paused before this run started: not news
    assert sent == []
    watch.pauses_seen([old])
    assert sent == []
    new = paused(at=AT - dt.timedelta(seconds=5))
    watch.pass_done(pauses=lambda: [old, new])
    (told,) = sent
    assert told.event == "paused" and told.severity == "info"
    assert told.summary == (
        "public.jobs (search): kind charge_card paused by alice: down (40 queued job(s) wait)"
    )
    assert told.counts == {"waiting": 40}
    assert told.next == [
        "jobctl --target search pause --list",
        "jobctl --target search resume --kind=charge_card --reason TEXT",
    ]
    payload = notifications.as_json(told)
    assert payload["pause"] == {
        "dimension": "kind",
        "value": "charge_card",
        "reason": "down",
        "actor": "alice",
        "db_role": "ops",
        "paused_at": "2026-12-02T19:59:55+00:00",
        "paused_s": 5.0,
        "waiting": 40,
    }
    watch.pauses_seen([old, new])  # no change: nothing
    assert len(sent) == 1
    watch.pauses_seen([new])  # send_email resumed
    assert [n.event for n in sent] == ["paused", "resumed"]
    assert sent[1].summary == (
        "public.jobs (search): kind send_email resumed after 1h2m (paused by alice: down)"
    )
    assert sent[1].counts == {} and sent[1].pause["value"] == "send_email"
    # lifted and set again between two reads: both told, the resume first
    again = paused(at=AT - dt.timedelta(seconds=1), reason="down again")
    watch.pauses_seen([again])
    assert [n.event for n in sent[2:]] == ["resumed", "paused"]
    assert "down again" in sent[3].summary


def test_pause_notices_are_never_rate_limited_and_a_failed_read_changes_nothing():
    from jobctl import errors

    watch, sent, _ = watched(interval_s=3600)
    watch.pauses_seen([])
    for n in range(3):
        watch.pauses_seen([paused(f"k{n}")])
    assert [n.event for n in sent] == ["paused", "resumed", "paused", "resumed", "paused"]

    def broken():
        raise errors.DatabaseError("gone")

    watch.pass_done(pauses=broken)
    watch.pauses_seen([paused("k2")])
    assert len(sent) == 5  # the last read still stands


def test_pagerduty_change_events_and_inert_slack():
    watch, sent, _ = watched()
    watch.pauses_seen([])
    hostile = paused("<!channel> `x`\x1b[2J", reason="<https://evil|click> & run")
    watch.pauses_seen([hostile])
    watch.pauses_seen([])
    for n in sent:
        assert notifications.is_change(n)
        pd = notifications.as_pagerduty(n, "R0UT1NG")
        assert "event_action" not in pd and "dedup_key" not in pd
        assert pd["payload"]["custom_details"]["event"] == n.event
        slack = notifications.as_slack(n)["blocks"][0]["text"]["text"]
        assert "<!channel>" not in slack and "<https" not in slack and "\x1b" not in slack
        json.loads(notifications.body(n, "json"))
    assert "\x1b" not in sent[0].summary and "\x1b" not in " ".join(sent[0].next)

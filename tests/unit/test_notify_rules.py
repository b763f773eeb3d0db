"""Notifications without a database: each event's payload in the three formats, the watch's
conditions, rate limit and resolved (a clock by hand), and delivery to a real local HTTP
server that answers 200, 500 or never (tests/webhooks.py)."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from webhooks import webhook

from jobctl import errors
from jobctl.cli.commands import monitoring
from jobctl.ops import notify
from jobctl.render import notifications

AT = dt.datetime(2026, 12, 2, 20, 0, tzinfo=dt.timezone.utc)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def watched(**kw):
    sent: list[notifications.Notice] = []
    clock = Clock()
    watch = notify.Watch(
        sent.append,
        table="public.jobs",
        target="search",
        command="reclaim --every",
        host="reclaimer-1",
        clock=clock,
        now=lambda: AT,
        **kw,
    )
    return watch, sent, clock


def rows(n, action="requeue", start=1):
    return [{"id": i, "action": action, "applied": True} for i in range(start, start + n)]


def test_reclaimed_and_parked_are_gathered_and_rate_limited():
    watch, sent, clock = watched(interval_s=300)
    watch.reclaimed(rows(3))
    watch.reclaimed(rows(2, "fail", start=10), "manual_review")
    watch.pass_done()
    assert [(n.event, n.counts, n.ids) for n in sent] == [
        ("reclaimed", {"jobs": 3}, ["1", "2", "3"]),
        ("parked", {"jobs": 2}, ["10", "11"]),
    ]
    assert sent[1].summary == (
        "public.jobs (search): 2 job(s) with an expired lease parked as manual_review for a human"
    )
    assert sent[1].next == ["jobctl --target search review"]
    watch.reclaimed(rows(4, start=20))
    watch.pass_done()
    assert len(sent) == 2  # within the interval: held, gathered
    clock.t += 301
    watch.reclaimed(rows(1, start=30))
    watch.pass_done()
    assert sent[-1].event == "reclaimed" and sent[-1].counts == {"jobs": 5}
    assert sent[-1].ids == ["20", "21", "22", "23", "30"]


def test_a_condition_fires_once_and_resolves():
    watch, sent, _ = watched(burst=5)
    watch.reclaimed(rows(6))
    watch.pass_done()
    assert [n.event for n in sent] == ["expiry_burst", "reclaimed"]
    watch.reclaimed(rows(7, start=10))
    watch.pass_done()  # still bursting: no second expiry_burst
    assert [n.event for n in sent].count("expiry_burst") == 1
    watch.pass_done()  # a quiet pass: resolved
    resolved = [n for n in sent if n.event == "resolved"]
    assert len(resolved) == 1 and resolved[0].condition == "expiry_burst"
    assert resolved[0].dedup_key == sent[0].dedup_key == "jobctl/search/public.jobs/expiry_burst"


def test_down_then_up_and_review_waiting_then_none():
    watch, sent, clock = watched()
    watch.down_seen("connection refused")
    watch.down_seen("connection refused")
    watch.pass_done(review=lambda: 2)
    clock.t += notify.REVIEW_EVERY_S
    watch.pass_done(review=lambda: 0)
    assert [(n.event, n.condition) for n in sent] == [
        ("target_down", "target_down"),
        ("resolved", "target_down"),
        ("review_waiting", "review_waiting"),
        ("resolved", "review_waiting"),
    ]
    assert sent[0].next == ["jobctl --target search targets --check"]
    assert sent[2].counts == {"awaiting_review": 2}


def test_a_flapping_condition_is_told_at_most_once_per_interval():
    watch, sent, clock = watched(interval_s=300)
    for _ in range(5):
        watch.down_seen("refused")
        watch.down_seen(None)
    assert [n.event for n in sent] == ["target_down", "resolved"]
    clock.t += 301
    watch.down_seen("refused")
    assert sent[-1].event == "target_down" and sent[-1].suppressed == 4


def notice(event="reclaimed", **kw):
    base = {
        "event": event,
        "condition": kw.pop("condition", event),
        "summary": "public.jobs (search): 3 job(s) requeued",
        "table": "public.jobs",
        "target": "search",
        "at": AT,
        "host": "reclaimer-1",
        "command": "reclaim --every",
        "counts": {"jobs": 3},
        "ids": ["1", "2", "3"],
        "next": ["jobctl --target search events --since 10m"],
    }
    return notifications.Notice(**(base | kw))


@pytest.mark.parametrize("event", notifications.EVENTS)
def test_every_event_in_every_format(event):
    n = notice(event, condition="target_down" if event == "resolved" else event)
    payload = json.loads(notifications.body(n, "json"))
    assert payload["schema"] == "jobctl.notification/1" and payload["event"] == event
    assert payload["status"] == ("resolved" if event == "resolved" else "firing")
    assert payload["dedup_key"].startswith("jobctl/search/public.jobs/")
    assert payload["at"] == "2026-12-02T20:00:00+00:00"
    slack = json.loads(notifications.body(n, "slack"))
    assert slack["text"] and slack["blocks"][0]["text"]["type"] == "mrkdwn"
    pd = json.loads(notifications.body(n, "pagerduty", routing_key="R0UT1NG"))
    assert pd["routing_key"] == "R0UT1NG" and pd["dedup_key"] == payload["dedup_key"]
    assert pd["event_action"] == ("resolve" if event == "resolved" else "trigger")
    if event != "resolved":
        assert pd["payload"]["severity"] in ("info", "warning", "critical")


def test_ids_are_bounded_and_slack_text_is_inert():
    many = [str(i) for i in range(50)]
    n = notice(ids=many, summary="<!channel> & <https://evil|click> \x1b[2J")
    payload = notifications.as_json(n)
    assert len(payload["ids"]) == notifications.MAX_IDS and payload["ids_truncated"]
    text = notifications.as_slack(n)["blocks"][0]["text"]["text"]
    assert "<" not in text and "&lt;!channel&gt; &amp;" in text and "\x1b" not in text
    assert "and 30 more" in text


def test_urls_are_checked_and_logged_without_their_path():
    with pytest.raises(errors.UsageError):
        notify.check_url("file:///etc/passwd")
    with pytest.raises(errors.UsageError):
        notify.check_url("https://")
    assert notify.shown("https://hooks.slack.com/services/T0/B0/SECRET") == (
        "https://hooks.slack.com/…"
    )
    assert monitoring.BURST == notify.BURST


def test_delivery_posts_each_notice():
    logged: list[str] = []
    with webhook("ok") as hook:
        sender = notify.Sender([hook.url], "json", log=logged.append)
        sender.send(notice())
        sender.close(wait_s=5)
    assert [p["event"] for p in hook.received] == ["reclaimed"] and sender.sent == 1
    assert logged == []


def test_a_500_is_retried_with_backoff_then_said_once():
    logged: list[str] = []
    with webhook("500") as hook:
        sender = notify.Sender([hook.url], "json", log=logged.append, backoff_s=0.05)
        started = time.monotonic()
        sender.send(notice())
        assert time.monotonic() - started < 0.05  # send never waits on the webhook
        deadline = time.monotonic() + 5
        while not logged and time.monotonic() < deadline:
            time.sleep(0.02)
        sender.close(wait_s=1)
    assert hook.attempts == 1 + notify.RETRIES and sender.delivery() == (0, 1)
    assert len(logged) == 1 and "HTTP 500" in logged[0] and "SECRET" not in logged[0]


def test_a_hanging_webhook_never_blocks_send_and_a_full_queue_drops():
    logged: list[str] = []
    with webhook("hang") as hook:
        sender = notify.Sender(
            [hook.url], "json", log=logged.append, timeout_s=0.3, retries=0, queue_size=2
        )
        started = time.monotonic()
        for _ in range(10):
            sender.send(notice())
        assert time.monotonic() - started < 0.1
        assert sender.dropped >= 7 and any("queue full" in line for line in logged)
        closing = time.monotonic()
        sender.close(wait_s=0.5)
        assert time.monotonic() - closing < 1.5  # bounded, whatever the webhook does
    assert any("no answer within 0.3s" in line for line in logged)

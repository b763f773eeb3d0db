"""Notifications without a database: each event's payload in the three formats, the watch's
conditions, rate limit and resolved (a clock by hand), and delivery to a real local HTTP
server that answers 200, 500 or never (tests/webhooks.py)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time

import pytest
from webhooks import webhook

from jobctl import errors
from jobctl.cli.commands import monitoring
from jobctl.ops import notify, notify_send, notify_urls
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
    watch, sent, clock = watched(after_s=0)  # told at once (--notify-after 0s)
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
    watch, sent, clock = watched(interval_s=300, after_s=0)
    for _ in range(5):
        watch.down_seen("refused")
        watch.down_seen(None)
    assert [n.event for n in sent] == ["target_down", "resolved"]
    clock.t += 301
    watch.down_seen("refused")
    assert sent[-1].event == "target_down" and sent[-1].suppressed == 4


# ---------------------------------------------------------------- --notify-after
def timed(after_s=60.0, **kw):
    """A watch whose clock and wall time move together, its log kept; each notice it sends
    delivered at once."""
    sent: list[notifications.Notice] = []
    logged: list[str] = []
    clock = Clock()

    def send(notice, delivered=None):
        sent.append(notice)
        if delivered is not None:
            delivered(True)

    watch = notify.Watch(
        send,
        table="public.jobs",
        target=None,
        command="reclaim --every",
        host="reclaimer-1",
        clock=clock,
        now=lambda: AT + dt.timedelta(seconds=clock.t - 1000),
        after_s=after_s,
        log=logged.append,
        **kw,
    )
    return watch, sent, clock, logged


def test_a_restart_shorter_than_notify_after_is_told_nothing():
    """A 5-7 s pg_ctl stop/start sent a critical target_down and its resolve in the same
    second: a page for a restart. Now nothing is sent, neither trigger nor resolve; the
    watch counts it (quiet) and says it in the log."""
    watch, sent, clock, logged = timed(close_stale=True)
    watch.pass_done()  # the first judgement: clear (PagerDuty's stale resolve, as before)
    del sent[:]
    for wait in (0.5, 1, 2, 3):  # the service's retries while the server restarts
        watch.down_seen("connection refused")
        assert watch.due_in() == 60 - (clock.t - 1000)
        clock.t += wait
    watch.tick()
    watch.pass_done()  # back after 6.5 s
    assert sent == []
    assert watch.quiet == 1 and watch.due_in() is None
    assert logged == [
        "notify: target_down cleared after 6.5s, before --notify-after 1m: not told (1 so far)"
    ]


def test_a_run_started_during_an_outage_closes_what_an_earlier_run_opened():
    """An earlier run told target_down and was restarted while the database was still down;
    the new run's first judgement is "down", and the database was back before its
    --notify-after: its first clear judgement resolves target_down (the incident an earlier
    run may have left open), once; the others, first judged clear, are resolved as before."""
    watch, sent, clock, logged = timed(close_stale=True)
    watch.down_seen("connection refused")  # the new run's first judgement: down
    clock.t += 32
    watch.tick()
    watch.pass_done(review=lambda: 0)  # back 32 s later, before --notify-after
    assert sorted(n.condition for n in sent if n.event == "resolved") == [
        "expiry_burst",
        "review_waiting",
        "target_down",
    ]
    assert [n.event for n in sent] == ["resolved"] * 3
    del sent[:]
    watch.down_seen("connection refused")  # a later short blip: nothing, not even a resolve
    clock.t += 5
    watch.pass_done(review=lambda: 0)
    assert sent == []
    assert logged[-1].startswith("notify: target_down cleared after 5s")


# ---------------------------------------------------------------- what is open, across restarts
def restarted(directory, **kw):
    """A PagerDuty reclaimer's watch (close_stale, as the CLI makes it) keeping its state in
    ``directory``, its log kept."""
    logged: list[str] = []
    opened = notify.Opened(directory, table="public.jobs", target=None, log=logged.append)
    watch, sent, clock, log = timed(close_stale=True, opened=opened, **kw)
    log[:0], opened.log = logged, log.append  # one log, in order
    return watch, sent, clock, log, opened


def test_a_restart_with_nothing_open_sends_nothing(tmp_path):
    first, sent, _, logged, opened = restarted(tmp_path)
    first.pass_done(review=lambda: 0)  # no record yet: today's stale resolves, then known
    assert [n.event for n in sent] == ["resolved"] * 3
    assert logged == [f"notify: {opened.path} does not exist yet: {notify.UNKNOWN}"]
    assert json.loads(opened.path.read_text()) == {"schema": notify.STATE_SCHEMA, "open": {}}
    assert opened.path.stat().st_mode & 0o777 == 0o600
    assert opened.path.name == "notify--+public.jobs.json"
    again, sent2, _, logged2, _ = restarted(tmp_path)
    again.pass_done(review=lambda: 0)
    again.down_seen("connection refused")  # a short blip: nothing either
    again.pass_done(review=lambda: 0)
    assert sent2 == []
    assert [line.split(" after ")[0] for line in logged2] == ["notify: target_down cleared"]


def down_a_minute(directory):
    """A run (``restarted`` in ``directory``) whose database went down over a minute ago: its
    target_down triggered and recorded open. Its sent notifications and its state file."""
    first, sent, clock, _, opened = restarted(directory)
    first.pass_done(review=lambda: 0)
    first.down_seen("connection refused")
    clock.t += 61
    first.tick()
    return sent, opened


def test_a_restart_resolves_only_what_the_earlier_run_left_open(tmp_path):
    sent, opened = down_a_minute(tmp_path)
    assert sent[-1].event == "target_down"
    assert json.loads(opened.path.read_text())["open"] == {
        "jobctl/-/public.jobs/target_down": "2026-12-02T20:01:01+00:00"
    }
    # stopped while the database was down; started again once it was back
    later, sent2, _, logged, _ = restarted(tmp_path)
    assert logged == [
        f"notify: an earlier run left open target_down ({opened.path}): "
        "each resolved when this run finds it clear"
    ]
    later.pass_done(review=lambda: 0)
    assert [(n.event, n.condition, n.dedup_key) for n in sent2] == [
        ("resolved", "target_down", "jobctl/-/public.jobs/target_down")
    ]
    assert json.loads(opened.path.read_text())["open"] == {}
    text = opened.path.read_text()
    assert "http" not in text and "routing" not in text


def test_a_restart_during_an_outage_keeps_one_incident_and_resolves_it_after(tmp_path):
    sent, _ = down_a_minute(tmp_path)
    assert [n.event for n in sent[3:]] == ["target_down"]
    later, sent2, clock2, _, _ = restarted(tmp_path)
    for _ in range(5):  # still down, well past --notify-after: no second trigger
        later.down_seen("connection refused")
        clock2.t += 30
        later.tick()
    assert sent2 == []
    later.pass_done(review=lambda: 0)  # back: the one incident resolved, nothing else
    assert [(n.event, n.condition) for n in sent2] == [("resolved", "target_down")]
    third, sent3, _, _, _ = restarted(tmp_path)
    third.pass_done(review=lambda: 0)
    assert sent3 == []


def test_an_unreadable_state_file_falls_back_to_resolving_each_condition(tmp_path):
    (tmp_path / "notify--+public.jobs.json").write_text('{"open": ["not', encoding="utf-8")
    watch, sent, _, logged, opened = restarted(tmp_path)
    assert logged == [
        f"notify: {opened.path} is not a {notify.STATE_SCHEMA} file: {notify.UNKNOWN}"
    ]
    watch.pass_done(review=lambda: 0)
    assert sorted(n.condition for n in sent if n.event == "resolved") == [
        "expiry_burst",
        "review_waiting",
        "target_down",
    ]
    assert json.loads(opened.path.read_text())["open"] == {}  # known again, rewritten
    # a state directory that cannot be written: said, never an error
    blocked = tmp_path / "file"
    blocked.write_text("")
    watch, sent, _, logged, opened = restarted(blocked)
    watch.pass_done(review=lambda: 0)
    assert len(sent) == 3 and logged[0].startswith(f"notify: cannot read {opened.path}: ")
    assert logged[-1].startswith(f"notify: cannot write {opened.path}: ")


def test_the_state_file_is_per_target_and_table(tmp_path):
    a = notify.Opened(tmp_path, table="public.jobs", target="search", log=print)
    b = notify.Opened(tmp_path, table="jobs/x", target="se+arch", log=print)
    assert a.path != b.path and b.path.parent == tmp_path
    assert b.path.name == "notify-se%2Barch+jobs%2Fx.json"


def test_a_condition_that_lasts_is_told_at_its_minimum_with_when_it_began():
    watch, sent, clock, _ = timed()
    watch.down_seen("connection refused")
    began = AT
    clock.t += 16
    watch.down_seen("connection refused again")
    assert watch.due_in() == 44
    clock.t += 43.9
    watch.tick()
    assert sent == []  # not yet
    clock.t += 0.1
    watch.tick()  # the service ticks while it waits out its backoff: told at the minimum
    (down,) = sent
    assert down.event == "target_down" and down.since == began
    assert down.at == began + dt.timedelta(seconds=60)
    assert down.summary.endswith("connection refused again")  # its latest words
    clock.t += 30
    watch.down_seen("connection refused")
    watch.tick()
    assert len(sent) == 1  # told once
    watch.pass_done()
    assert [(n.event, n.condition, n.since) for n in sent[1:]] == [
        ("resolved", "target_down", None)
    ]
    body = notifications.as_json(down)
    assert body["since"] == "2026-12-02T20:00:00+00:00"
    assert body["at"] == "2026-12-02T20:01:00+00:00"
    pd = notifications.as_pagerduty(down, "K")
    assert pd["payload"]["timestamp"] == "2026-12-02T20:00:00+00:00"  # when it began
    slack = notifications.as_slack(down)["blocks"][0]["text"]["text"]
    assert "since 2026-12-02T20:00:00+00:00 (for 1m)" in slack


def test_review_waiting_waits_its_minimum_and_a_burst_is_told_at_once():
    watch, sent, clock, _ = timed()
    watch.reclaimed(rows(25))
    watch.pass_done(review=lambda: 2)
    assert [n.event for n in sent] == ["expiry_burst", "reclaimed"]  # no review_waiting yet
    assert sent[0].since == AT
    clock.t += 30
    watch.pass_done(review=lambda: 2)  # not read again within REVIEW_EVERY_S
    clock.t += 30
    watch.pass_done(review=lambda: 3)
    assert sent[-1].event == "review_waiting" and sent[-1].counts == {"awaiting_review": 3}
    assert sent[-1].since == AT
    # a review decided within the minute: told nothing
    quick, told, clock2, _ = timed()
    quick.pass_done(review=lambda: 1)
    clock2.t += 60
    quick.pass_done(review=lambda: 0)
    assert told == [] and quick.quiet == 1


def test_notify_after_zero_tells_at_once():
    watch, sent, _, _ = timed(after_s=0)
    watch.down_seen("refused")
    assert [n.event for n in sent] == ["target_down"] and sent[0].since == AT
    assert monitoring.AFTER.total_seconds() == notify.NOTIFY_AFTER_S


def test_the_service_tells_a_condition_due_while_it_waits():
    """The reclaimer's backoff (up to 30 s) does not delay a due condition to the next
    retry: its wait ticks the watch."""
    import threading

    from jobctl.ops.reclaim import service

    sent: list[notifications.Notice] = []
    watch = notify.Watch(
        sent.append, table="jobs", target=None, command="reclaim --every", after_s=0.2
    )
    watch.down_seen("refused")
    started = time.monotonic()
    service._wait(threading.Event(), 0.6, watch)
    took = time.monotonic() - started
    assert [n.event for n in sent] == ["target_down"]
    assert 0.55 < took < 1.0


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
    assert pd["routing_key"] == "R0UT1NG"
    if event in notifications.ONE_OFF:  # a Change Event: nothing opened, nothing to resolve
        assert "event_action" not in pd and "dedup_key" not in pd
        assert pd["payload"]["summary"] and pd["payload"]["source"] == "reclaimer-1"
        return
    assert pd["dedup_key"] == payload["dedup_key"]
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
        notify_urls.check_url("file:///etc/passwd")
    with pytest.raises(errors.UsageError):
        notify_urls.check_url("https://")
    assert notify_urls.shown("https://hooks.slack.com/services/T0/B0/SECRET") == (
        "https://hooks.slack.com/…"
    )
    assert monitoring.BURST == notify.BURST


def test_delivery_posts_each_notice():
    logged: list[str] = []
    with webhook("ok") as hook:
        sender = notify_send.Sender([hook.url], "json", log=logged.append)
        sender.send(notice())
        sender.close(wait_s=5)
    assert [p["event"] for p in hook.received] == ["reclaimed"] and sender.sent == 1
    assert logged == []


def test_a_500_is_retried_with_backoff_then_said_once():
    logged: list[str] = []
    with webhook("500") as hook:
        sender = notify_send.Sender([hook.url], "json", log=logged.append, backoff_s=0.05)
        started = time.monotonic()
        sender.send(notice())
        assert time.monotonic() - started < 0.05  # send never waits on the webhook
        deadline = time.monotonic() + 5
        while not logged and time.monotonic() < deadline:
            time.sleep(0.02)
        sender.close(wait_s=1)
    assert hook.attempts == 1 + notify_send.RETRIES and sender.delivery() == (0, 1)
    assert len(logged) == 1 and "HTTP 500" in logged[0] and "SECRET" not in logged[0]


def test_a_hanging_webhook_never_blocks_send_and_a_full_queue_drops():
    logged: list[str] = []
    with webhook("hang") as hook:
        sender = notify_send.Sender(
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
    assert any("no complete answer within 0.3s" in line for line in logged), logged


# ---------------------------------------------------------------- a webhook that drips
def wait_for(condition, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - started


def test_a_post_has_one_deadline_for_the_whole_answer():
    """A receiver that drips its answer (a byte every 0.1 s, so no read
    waits long) held the POST until it was done; the deadline covers the whole exchange."""
    with webhook("drip", drip_s=0.1) as hook:
        started = time.monotonic()
        why = notify_send.post(hook.url, b"{}", 0.5, notify_send.HEADERS)
        took = time.monotonic() - started
    assert why == "no complete answer within 0.5s" and took < 0.9, (why, took)


def test_a_dripping_webhook_fails_at_its_deadline_and_never_delays_another():
    """The dripping receiver first in the list: the healthy one gets the notice at once, the
    dripping one's failure is said and counted at its deadline (not retried: it held the
    POST), and close() is bounded."""
    logged: list[str] = []
    with webhook("drip", drip_s=0.2) as drip, webhook("ok") as ok:
        sender = notify_send.Sender(
            [drip.url, ok.url], "json", log=logged.append, timeout_s=1.0, backoff_s=0.05
        )
        sender.send(notice())
        healthy = wait_for(lambda: ok.received, 0.8, "the healthy webhook's notice")
        failed = wait_for(lambda: logged, 2.0, "the dripping webhook's failure")
        assert sender.delivery() == (1, 1)
        sender.close(wait_s=1)
    assert healthy < 0.5 and failed < 1.6, (healthy, failed)
    assert drip.attempts == 1  # a receiver that held its POST is not asked again for it
    (line,) = logged
    assert "failed after 1 attempt(s): no complete answer within 1s" in line
    assert "SECRET" not in line and line.startswith("notify: reclaimed to http://127.0.0.1:")


def test_every_post_of_a_receiver_is_bounded_by_the_deadline():
    with webhook("drip", drip_s=0.05) as drip:
        logged: list[str] = []
        sender = notify_send.Sender([drip.url], "json", log=logged.append, timeout_s=0.3)
        started = time.monotonic()
        for _ in range(3):
            sender.send(notice())
        wait_for(lambda: sender.failed == 3, 2.5, "three failures")
        sender.close(wait_s=1)
    assert time.monotonic() - started < 2.5 and len(logged) == 3


# ---------------------------------------------------------------- PagerDuty
def pd_watched(sender: notify_send.Sender, close_stale: bool = True, **kw: object) -> notify.Watch:
    return notify.Watch(
        sender.send,
        table="public.jobs",
        target=None,
        command="reclaim --every",
        host="reclaimer-1",
        burst=3,
        now=lambda: AT,
        close_stale=close_stale,
        after_s=0,
        **kw,
    )


def test_pagerduty_resolves_every_trigger_and_opens_nothing_for_routine_events():
    """Reclaimed and parked were triggers with a fixed dedup key, never
    resolved. Conditions now trigger and resolve by their key; one-off events are Change
    Events; the fake PagerDuty keeps incidents by dedup_key and none is left open."""
    logged: list[str] = []
    with webhook("pagerduty") as pd:
        sender = notify_send.Sender([pd.url], "pagerduty", log=logged.append, routing_key="R0UT1NG")
        watch = pd_watched(sender)
        watch.reclaimed(rows(3))  # a pass that reclaims 3: a burst
        watch.reclaimed(rows(1, "fail", start=9), "failed")
        watch.pass_done(review=lambda: 1)
        wait_for(lambda: len(pd.open_incidents()) == 2, 3, "burst and review triggered")
        watch.pass_done()  # nothing expired: the burst clears
        watch.down_seen("connection refused")
        watch.review_seen(0)  # a human decided
        watch.pass_done()  # the database answers again
        watch.stopped("table missing")
        sender.close(wait_s=3)
    assert pd.refused == [] and logged == []
    assert pd.open_incidents() == [], pd.alerts
    triggered = {key for action, key, _ in pd.alerts if action == "trigger"}
    assert triggered == {
        "jobctl/-/public.jobs/expiry_burst",
        "jobctl/-/public.jobs/review_waiting",
        "jobctl/-/public.jobs/target_down",
    }
    assert {c["payload"]["custom_details"]["event"] for c in pd.changes} == {
        "reclaimed",
        "parked",
        "reclaimer_error",
    }


def test_pagerduty_closes_an_incident_an_earlier_run_left_open():
    """A run that stopped with a condition open could not resolve it: the next run's first
    judgement of that condition, clear, resolves it."""
    with webhook("pagerduty") as pd:
        earlier = notify_send.Sender([pd.url], "pagerduty", log=print, routing_key="R0UT1NG")
        first = pd_watched(earlier)
        first.reclaimed(rows(5))
        first.pass_done()
        earlier.close(wait_s=3)
        assert pd.open_incidents() == ["jobctl/-/public.jobs/expiry_burst"]
        later = notify_send.Sender([pd.url], "pagerduty", log=print, routing_key="R0UT1NG")
        pd_watched(later).pass_done()
        later.close(wait_s=3)
    assert pd.open_incidents() == []


BURST_KEY = "jobctl/-/public.jobs/expiry_burst"


def kept(sender: notify_send.Sender, directory, log, fmt="pagerduty"):
    """A reclaimer's watch sending through ``sender``, keeping its state in ``directory``."""
    opened = notify.Opened(directory, table="public.jobs", target=None, log=log)
    return pd_watched(sender, fmt == "pagerduty", log=log, opened=opened), opened


def listed(opened: notify.Opened) -> list[str]:
    return sorted(json.loads(opened.path.read_text())["open"])


def test_a_resolve_pagerduty_never_took_stays_listed_and_the_next_run_resolves_it(tmp_path):
    """PagerDuty answers 500 to the resolve through every retry: the key stays in the state
    file (the incident is still open there), and the next run resolves it at its first clear
    judgement."""
    logged: list[str] = []
    with webhook("pagerduty") as pd:
        sender = notify_send.Sender(
            [pd.url], "pagerduty", log=logged.append, routing_key="R0UT1NG", backoff_s=0.01
        )
        first, opened = kept(sender, tmp_path, logged.append)
        first.pass_done(review=lambda: 0)  # no file yet: today's catch-up resolves, then known
        first.burst_seen(5, [1, 2, 3, 4, 5])
        wait_for(lambda: sender.sent == 4, 3, "3 catch-up resolves and the trigger")
        assert pd.open_incidents() == [BURST_KEY] and listed(opened) == [BURST_KEY]
        pd.behaviour = "500"
        first.burst_seen(0)  # clear: its resolve is refused 1 + RETRIES times
        wait_for(lambda: sender.failed == 1, 3, "the resolve given up")
        first.tick()  # the watch learns it at its next judgement or tick
        sender.close(wait_s=1)
        first.settle()
        assert listed(opened) == [BURST_KEY] and pd.attempts == 4 + 1 + notify_send.RETRIES
        assert logged[-1] == (
            "notify: the resolve of expiry_burst was not delivered: the state file keeps it "
            "open, the next run resolves it"
        )
        pd.behaviour = "pagerduty"
        told = len(pd.alerts)
        later_sender = notify_send.Sender([pd.url], "pagerduty", log=print, routing_key="R0UT1NG")
        later, _ = kept(later_sender, tmp_path, logged.append)
        later.pass_done(review=lambda: 0)  # its first clear judgement of each
        later_sender.close(wait_s=3)
        later.settle()
    assert pd.alerts[told:] == [("resolve", BURST_KEY, "")]  # that one, nothing else
    assert pd.open_incidents() == [] and listed(opened) == []


def test_a_delivered_resolve_leaves_the_state_file(tmp_path):
    with webhook("pagerduty") as pd:
        sender = notify_send.Sender([pd.url], "pagerduty", log=print, routing_key="R0UT1NG")
        watch, opened = kept(sender, tmp_path, print)
        watch.pass_done(review=lambda: 0)
        watch.burst_seen(5)
        watch.burst_seen(0)
        assert listed(opened) == [BURST_KEY]  # queued, not known delivered yet
        wait_for(lambda: sender.sent == 5, 3, "the trigger and its resolve")
        watch.tick()
        assert listed(opened) == [] and pd.open_incidents() == []
        sender.close(wait_s=1)


@pytest.mark.parametrize("lost", ["dropped on a full queue", "undelivered at close"])
def test_a_resolve_dropped_or_undelivered_at_close_stays_listed(tmp_path, lost):
    """The webhook holds the trigger's POST: the resolve waits in its queue (one place),
    where it is dropped when another notice holds that place, or still waits at close."""
    logged: list[str] = []
    with webhook("hang") as hook:
        sender = notify_send.Sender(
            [hook.url], "json", log=logged.append, timeout_s=0.5, retries=0, queue_size=1
        )
        watch, opened = kept(sender, tmp_path, logged.append, fmt="json")
        watch.pass_done(review=lambda: 0)  # json: no catch-up resolve; the file is known
        watch.burst_seen(5)
        wait_for(lambda: hook.attempts == 1, 2, "the trigger being posted")
        if lost == "dropped on a full queue":
            sender.send(notice())
        watch.burst_seen(0)
        assert sender.dropped == (lost == "dropped on a full queue")
        sender.close(wait_s=0.2)
        watch.settle()
        assert listed(opened) == [BURST_KEY]
    if lost == "dropped on a full queue":
        assert any("the resolve of expiry_burst was not delivered" in line for line in logged)


def test_a_stale_resolve_is_for_pagerduty_only():
    watch, sent, _ = watched()
    watch.pass_done()
    assert sent == []  # json and Slack receivers are not told of what nobody raised


def test_change_events_go_beside_the_events_url():
    assert notifications.change_url("https://events.pagerduty.com/v2/enqueue") == (
        "https://events.pagerduty.com/v2/change/enqueue"
    )
    assert notifications.change_url("http://relay:8080/pd/v2/enqueue?x=1") == (
        "http://relay:8080/pd/v2/change/enqueue?x=1"
    )
    assert notifications.change_url("https://relay.example/hook") is None
    logged: list[str] = []
    sender = notify_send.Sender(["https://relay.example/hook"], "pagerduty", log=logged.append)
    sender.close(wait_s=0)
    assert len(logged) == 1 and "not sent, only its alerts" in logged[0]


# ---------------------------------------------------------------- URLs
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:T0SECRETTOKEN/x",
        "http://127.0.0.1:99999/T0SECRETTOKEN",
        "http://[::1/T0SECRETTOKEN",
        "https://hooks.example/T0SECRETTOKEN x",
        "https://hooks.example/T0SECRETTOKEN\n",
        "T0SECRETTOKEN://hooks.example/x",
        "https:///T0SECRETTOKEN",
        "https://hooks.example/T0SECRETTOKEN\u202e",
    ],
)
def test_a_malformed_url_is_refused_without_echoing_it(url):
    with pytest.raises(errors.UsageError) as refused:
        notify_urls.check_url(url, "--notify #1")
    message = str(refused.value)
    assert "T0SECRET" not in message and "\n" not in message
    assert message.startswith("--notify #1: ")


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("https://hooks.slack.com/services/T0123ABCD/B0123ABCD/abcdefghijklmnopqrstuvwx", True),
        ("https://user:pass@alerts.example/hook", True),
        ("https://alerts.example/hook?token=abc", True),
        ("https://discord.com/api/webhooks/1234567890/abcdefghijklmnopqrstuvwxyz", True),
        ("https://events.pagerduty.com/v2/enqueue", False),
        ("http://127.0.0.1:9000/hooks/jobctl", False),
        ("http://alertmanager:9093/api/v2/alerts", False),
    ],
)
def test_a_url_that_looks_like_it_holds_a_secret(url, secret):
    assert notify_urls.holds_secret(url) is secret


def test_urls_in_a_file_or_variable():
    text = (
        "# the team's channels\nhttps://a.example/x\n\n  https://b.example/y https://c.example/z\n"
    )
    assert notify_urls.urls_in(text, "--notify-file f") == [
        "https://a.example/x",
        "https://b.example/y",
        "https://c.example/z",
    ]
    with pytest.raises(errors.UsageError, match=r"^\$JOBCTL_NOTIFY line 2: not an http"):
        notify_urls.urls_in("https://a.example/x\nftp://T0SECRET/y", "$JOBCTL_NOTIFY")


def test_a_post_goes_through_the_proxy_and_sends_its_user(monkeypatch):
    """urlopen honoured http_proxy and the deadline's own client must too; a user in the URL
    is HTTP basic authentication (never logged)."""
    with webhook("ok") as proxy:
        port = proxy.url.split(":")[2].split("/")[0]
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{port}")
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        why = notify_send.post(
            "http://al%40ice:s3cret@hooks.invalid/x?y=1", b"{}", 2, notify_send.HEADERS
        )
    assert why is None
    ((target, authorization),) = proxy.requests
    assert target == "http://al%40ice:s3cret@hooks.invalid/x?y=1".replace("al%40ice:s3cret@", "")
    assert authorization == "Basic " + base64.b64encode(b"al@ice:s3cret").decode()


def test_the_next_commands_name_a_table_other_than_the_default_and_quote_it():
    """A notice's ``next`` commands run as printed: on a table other than ``jobs`` they name
    it (``--table``), a target's name or a table's is quoted for a shell."""
    sent: list[notifications.Notice] = []
    watch = notify.Watch(
        sent.append, table="public.delayed_jobs", target=None, command="reclaim --every",
        host="h", after_s=0,
    )  # fmt: skip
    watch.review_seen(2)
    assert sent[0].next == ["jobctl --table public.delayed_jobs review"]
    odd = notify.Watch(
        sent.append, table="public.jobs", target="eu west", command="reclaim --every",
        host="h", after_s=0,
    )  # fmt: skip
    odd.review_seen(2)
    assert sent[1].next == ["jobctl --target 'eu west' review"]

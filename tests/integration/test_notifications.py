"""Notifications from the reclaimer service, a real process, to a real local HTTP server:
the payloads it posts, and a webhook that hangs or answers 500 never delaying a reclaim
(the notices wait in their own queue and thread; the failure is one line in the log)."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time

import prometheus
import pytest
from helpers import add_jobs, claim_all, wait_until
from webhooks import webhook


def service(
    dsn: str, *args: str, hook_url: str = "", env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "JOBCTL_DSN": dsn,
        "JOBCTL_ACTOR": "tester@ci",
        "HOOK_URL": hook_url,
        **(env or {}),
    }
    command = ["reclaim", "--commit", "--yes", "--every", "0.2s", "-o", "jsonl", *args]
    notify = ["--notify-env", "HOOK_URL"] if hook_url else []
    return subprocess.Popen(
        [sys.executable, "-m", "jobctl", *command, *notify],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )


def processing(conn) -> int:
    return conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'processing'").fetchone()[
        "n"
    ]


def stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=20)
    finally:
        proc.kill()


def test_the_reclaimer_posts_reclaimed_and_parked(conn, dsn):
    with webhook("ok") as hook:
        proc = service(dsn, "--notify-after", "0s", hook_url=hook.url)  # review_waiting at once
        try:
            add_jobs(conn, 3)
            add_jobs(conn, 2, policy="manual")
            claim_all(dsn, 5, lease_seconds=-60)
            wait_until(lambda: len(hook.received) >= 3, timeout=20, what="three notifications")
        finally:
            _, err = stop(proc)
    by_event = {p["event"]: p for p in hook.received}
    assert set(by_event) >= {"reclaimed", "parked", "review_waiting"}, err
    assert "retrying" not in err, err  # every pass, its record and its review count: clean
    assert by_event["review_waiting"]["counts"] == {"awaiting_review": 2}
    reclaimed, parked = by_event["reclaimed"], by_event["parked"]
    assert reclaimed["schema"] == "jobctl.notification/1" and reclaimed["table"] == "jobs"
    assert reclaimed["counts"] == {"jobs": 3} and sorted(reclaimed["ids"]) == ["1", "2", "3"]
    assert parked["counts"] == {"jobs": 2} and parked["next"] == ["jobctl review"]
    assert reclaimed["dedup_key"] == "jobctl/-/jobs/reclaimed"
    assert "notify: json notifications to http://127.0.0.1:" in err
    assert "SECRET-PATH" not in err  # a webhook's path is its secret: never logged


@pytest.mark.parametrize("behaviour", ["hang", "500"])
def test_a_webhook_that_hangs_or_fails_never_delays_a_reclaim(conn, dsn, behaviour):
    with webhook(behaviour) as hook:
        proc = service(dsn, hook_url=hook.url)
        try:
            add_jobs(conn, 6)
            claim_all(dsn, 3, lease_seconds=-60)
            wait_until(lambda: processing(conn) == 0, timeout=20, what="the first reclaim")
            wait_until(lambda: hook.attempts >= 1, timeout=10, what="a first POST")
            # the webhook is now holding (or failing) the first notice: expire three more
            claim_all(dsn, 3, lease_seconds=-60)
            expired_at = time.monotonic()
            wait_until(lambda: processing(conn) == 0, timeout=10, what="the second reclaim")
            took = time.monotonic() - expired_at
        finally:
            stopping = time.monotonic()
            _, err = stop(proc)
            stopped_in = time.monotonic() - stopping
    assert took < 1.5, f"the reclaim waited on the webhook: {took:.2f}s"
    assert stopped_in < 8, stopped_in  # shutdown waits for the queue a bounded time
    assert proc.returncode == 0, err
    if behaviour == "hang":  # still holding the first POST when it stopped, or given up
        assert (
            "notice(s) undelivered: http://127.0.0.1:" in err
            or "failed after 1 attempt(s): no complete answer within 5s" in err
        ), err
    else:
        assert "notify: reclaimed to http://127.0.0.1:" in err and "HTTP 500" in err, err


def test_stuck_watch_tells_of_an_expiry_burst(conn, dsn, run):
    add_jobs(conn, 4)
    claim_all(dsn, 4, lease_seconds=-60)
    with webhook("ok") as hook:
        result = run(
            "stuck",
            "--watch",
            "--count",
            "1",
            "-o",
            "jsonl",
            "--notify",
            hook.url,
            "--notify-burst",
            "3",
        )
        assert result.code == 0, result.err
    (burst,) = hook.received
    assert burst["event"] == "expiry_burst" and burst["counts"] == {"expired": 4, "threshold": 3}
    assert burst["source"]["command"] == "stuck --watch"
    assert sorted(burst["ids"]) == ["1", "2", "3", "4"]


def test_notify_needs_a_service_or_a_watch_and_a_real_url(run):
    refused = run("reclaim", "--commit", "--yes", "--notify", "http://127.0.0.1:9/x")
    assert refused.code == 2 and "--notify" in refused.err
    assert run("stuck", "--notify", "http://127.0.0.1:9/x").code == 2
    bad = run("stuck", "--watch", "--count", "1", "--notify", "ftp://x/y")
    assert bad.code == 2 and "http(s)" in bad.err
    pd = run(
        "stuck", "--watch", "--count", "1", "--notify", "http://x/y", "--notify-format", "pagerduty"
    )
    assert pd.code == 2 and "JOBCTL_PAGERDUTY_ROUTING_KEY" in pd.err


# ----------------------------------------------------------------
def failed_total(run) -> float:
    samples = prometheus.samples(run("metrics").out)
    return samples.get(("jobctl_notifications_failed_total", (("table", "public.jobs"),)), 0)


def test_a_dripping_webhook_beside_a_healthy_one(conn, dsn, run):
    """A receiver that drips its answer one byte a second held the POST for the whole run,
    logged nothing and delayed the healthy one past 15 s. Now the healthy one has the notice
    at once, and the dripping one's failure is logged, counted (the alert's series) and said
    within its 5 s deadline. The dripping one's URL, secret-looking, is on the command line:
    warned about."""
    with webhook("drip", drip_s=1.0) as drip, webhook("ok") as ok:
        secret_url = drip.url.replace("SECRET-PATH", "services/T0123ABCD/B0123ABCD")
        proc = service(dsn, "--notify", secret_url, hook_url=ok.url)  # the dripping one first
        try:
            add_jobs(conn, 3)
            claim_all(dsn, 3, lease_seconds=-60)
            wait_until(lambda: processing(conn) == 0, timeout=20, what="the reclaim")
            reclaimed_at = time.monotonic()
            wait_until(lambda: ok.received, timeout=3, what="the healthy webhook's notice")
            healthy_in = time.monotonic() - reclaimed_at
            wait_until(lambda: failed_total(run) >= 1, timeout=12, what="the failure counted")
            counted_in = time.monotonic() - reclaimed_at
        finally:
            _, err = stop(proc)
    assert healthy_in < 2, healthy_in
    assert counted_in < 9, counted_in  # 5 s deadline, then the next pass's record
    assert "failed after 1 attempt(s): no complete answer within 5s" in err, err
    assert drip.attempts == 1 and "T0123ABCD" not in err
    assert "warning: a --notify URL looks like it holds a secret" in err


# ----------------------------------------------------------------
def test_pagerduty_incidents_close_and_reclaims_page_nobody(conn, dsn):
    """The reclaimer against a fake PagerDuty that keeps incidents by dedup_key: a burst of
    expired leases opens one incident, resolved at the next pass; the reclaims themselves
    are Change Events; nothing is left open after the condition clears."""
    with webhook("pagerduty") as pd:
        proc = service(
            dsn,
            "--notify-burst",
            "3",
            "--notify-format",
            "pagerduty",
            hook_url=pd.url,
            env={"JOBCTL_PAGERDUTY_ROUTING_KEY": "R0UT1NGKEY"},
        )
        try:
            add_jobs(conn, 4)
            claim_all(dsn, 4, lease_seconds=-60)
            wait_until(lambda: processing(conn) == 0, timeout=20, what="the reclaim")
            burst = "jobctl/-/jobs/expiry_burst"
            wait_until(
                lambda: pd.incidents.get(burst) == "resolved", timeout=10, what="burst resolved"
            )
            # the condition cleared: no incident may be left open (a reclaim opened one)
            assert pd.open_incidents() == [], pd.alerts
            wait_until(lambda: pd.changes, timeout=10, what="the reclaims' change event")
        finally:
            _, err = stop(proc)
    assert pd.refused == [], pd.refused
    assert pd.open_incidents() == [], (pd.alerts, err)
    assert [key for action, key, _ in pd.alerts if action == "trigger"] == [burst]
    (change,) = pd.changes
    assert change["payload"]["custom_details"]["event"] == "reclaimed"
    assert change["payload"]["custom_details"]["counts"] == {"jobs": 4}


def passes(conn, proc: subprocess.Popen[str]) -> int:
    """The passes the reclaimer ``proc`` recorded (jobctl.reclaimer_passes)."""
    row = conn.execute(
        "SELECT passes FROM jobctl.reclaimer_passes WHERE pid = %s", (proc.pid,)
    ).fetchone()
    return int(row["passes"]) if row else 0


def test_a_restart_with_its_state_directory_resolves_nothing_never_opened(conn, dsn, tmp_path):
    """Each start of a PagerDuty reclaimer sent a resolve of every condition (3 POSTs, 3
    failures with a receiver down). Given systemd's $STATE_DIRECTORY, the first start, with
    no record yet, resolves them as before and writes which are open (none); the restart
    reads that and sends nothing through several passes."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    env = {"JOBCTL_PAGERDUTY_ROUTING_KEY": "R0UT1NGKEY", "STATE_DIRECTORY": str(state)}
    kept = state / "notify--+jobs.json"
    with webhook("pagerduty") as pd:
        first = service(dsn, "--notify-format", "pagerduty", hook_url=pd.url, env=env)
        try:
            wait_until(lambda: len(pd.alerts) >= 3 and kept.exists(), timeout=20, what="a pass")
        finally:
            _, first_err = stop(first)
        assert [action for action, _, _ in pd.alerts] == ["resolve"] * 3, pd.alerts
        assert f"notify: {kept} does not exist yet: what an earlier run left open" in first_err
        again = service(dsn, "--notify-format", "pagerduty", hook_url=pd.url, env=env)
        try:
            wait_until(lambda: passes(conn, again) >= 3, timeout=20, what="three passes")
        finally:
            _, again_err = stop(again)
    assert len(pd.alerts) == 3, pd.alerts  # the restart: no resolve of what was never open
    assert pd.refused == [] and "not known" not in again_err, again_err
    assert kept.stat().st_mode & 0o777 == 0o600
    assert json.loads(kept.read_text()) == {"schema": "jobctl.notify-state/1", "open": {}}


# ----------------------------------------------------------------
BAD = "http://127.0.0.1:T0SECRETTOKEN/x"


def test_a_malformed_url_is_refused_in_one_line_that_does_not_echo_it(run, monkeypatch):
    for args in (
        ["stuck", "--watch", "--count", "1", "--notify", BAD],
        ["reclaim", "--commit", "--yes", "--every", "1s", "--notify", BAD],
    ):
        result = run(*args)
        assert result.code == 2, result
        assert "T0SECRET" not in result.err and "Traceback" not in result.err
        assert result.err.strip().count("\n") == 0 and "--notify #1:" in result.err
    monkeypatch.setenv("JOBCTL_NOTIFY", f"http://ok.example/ {BAD}")
    result = run("reclaim", "--commit", "--yes", "--every", "1s")
    assert result.code == 2 and "$JOBCTL_NOTIFY line 1:" in result.err
    assert "T0SECRET" not in result.err
    assert run("stuck").code == 0  # the environment's URLs only serve a watch or the service


def test_urls_from_a_file_and_the_format_from_the_environment(
    conn, dsn, run, tmp_path, monkeypatch
):
    add_jobs(conn, 2)
    claim_all(dsn, 2, lease_seconds=-60)
    urls = tmp_path / "notify"
    with webhook("ok") as hook:
        urls.write_text(f"# the team's channel\n{hook.url}\n")
        urls.chmod(0o600)
        monkeypatch.setenv("JOBCTL_NOTIFY_FORMAT", "slack")
        result = run(
            "stuck",
            "--watch",
            "--count",
            "1",
            "-o",
            "jsonl",
            "--notify-file",
            str(urls),
            "--notify-burst",
            "2",
        )
        assert result.code == 0, result.err
        assert "warning" not in result.err and "SECRET-PATH" not in result.err
        (slack,) = hook.received
        assert (
            slack["blocks"][0]["type"] == "section"
            and "expiry_burst" in slack["blocks"][0]["text"]["text"]
        )
        monkeypatch.delenv("JOBCTL_NOTIFY_FORMAT")
        monkeypatch.setenv("JOBCTL_NOTIFY_FILE", str(urls))
        again = run("stuck", "--watch", "--count", "1", "-o", "jsonl", "--notify-burst", "2")
        assert again.code == 0, again.err
        assert hook.received[-1]["schema"] == "jobctl.notification/1"
        monkeypatch.delenv("JOBCTL_NOTIFY_FILE")
        monkeypatch.setenv("JOBCTL_NOTIFY", f" {hook.url}\n")
        third = run("stuck", "--watch", "--count", "1", "-o", "jsonl", "--notify-burst", "2")
        assert third.code == 0 and len(hook.received) == 3, third.err
    urls.chmod(0o620)
    refused = run("stuck", "--watch", "--count", "1", "--notify-file", str(urls))
    assert refused.code == 2 and "other users" in refused.err
    missing = run("stuck", "--watch", "--count", "1", "--notify-file", str(tmp_path / "none"))
    assert missing.code == 2 and "cannot read" in missing.err


# ---------------------------------------------------------------- a server restarted
def test_a_restart_pages_nobody_and_an_outage_is_told_with_when_it_began(own_server):
    """A 5-7 s pg_ctl stop/start made the reclaimer send a critical target_down and its
    resolve in the same second: a page for a restart. Two reclaimers on one server through
    one stop/start of about 6 s: the one with the default --notify-after (60s), to a fake
    PagerDuty, sends nothing, neither trigger nor resolve, and says so in its log; the one
    with --notify-after 2s tells the outage once it has lasted 2 s, with when it began, and
    its resolve once the server is back."""
    server, dsn = own_server
    with webhook("pagerduty") as pd, webhook("ok") as short:
        key = {"JOBCTL_PAGERDUTY_ROUTING_KEY": "R0UT1NGKEY"}
        default = service(dsn, "--notify-format", "pagerduty", hook_url=pd.url, env=key)
        brief = service(dsn, "--notify-after", "2s", hook_url=short.url)
        try:
            # the first pass of each: PagerDuty's stale resolves (3), and a pass record
            wait_until(lambda: len(pd.alerts) >= 3, timeout=20, what="the first pass")
            time.sleep(1)  # the other started with it: passing too
            before = len(pd.alerts)
            stopped_at = time.time()
            server.stop("fast")
            time.sleep(5)
            server.start()
            wait_until(
                lambda: [p["event"] for p in short.received] == ["target_down", "resolved"],
                timeout=40,
                what="the outage told and resolved",
            )
            time.sleep(1)
        finally:
            _, quiet_err = stop(default)
            _, short_err = stop(brief)
    assert pd.alerts[before:] == [], pd.alerts  # nothing: no trigger, no resolve
    assert pd.open_incidents() == [] and pd.refused == []
    assert "notify: target_down cleared after " in quiet_err, quiet_err
    assert "before --notify-after 1m: not told (1 so far)" in quiet_err, quiet_err
    down, resolved = short.received
    assert down["severity"] == "critical" and resolved["condition"] == "target_down"
    since = dt.datetime.fromisoformat(down["since"]).timestamp()
    at = dt.datetime.fromisoformat(down["at"]).timestamp()
    assert stopped_at - 1 < since < stopped_at + 2, (stopped_at, down)
    assert 2 <= at - since < 3, down  # told at its minimum, not at the next retry
    assert resolved["since"] is None
    assert "retrying in" in short_err and "reconnected to" in short_err, short_err

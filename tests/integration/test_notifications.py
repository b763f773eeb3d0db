"""Notifications from the reclaimer service, a real process, to a real local HTTP server:
the payloads it posts, and a webhook that hangs or answers 500 never delaying a reclaim
(the notices wait in their own queue and thread; the failure is one line in the log)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import add_jobs, claim_all, wait_until
from webhooks import webhook


def service(dsn: str, *args: str, hook_url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "JOBCTL_DSN": dsn, "JOBCTL_ACTOR": "tester@ci", "HOOK_URL": hook_url}
    command = ["reclaim", "--commit", "--yes", "--every", "0.2s", "-o", "jsonl", *args]
    return subprocess.Popen(
        [sys.executable, "-m", "jobctl", *command, "--notify-env", "HOOK_URL"],
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
        proc = service(dsn, hook_url=hook.url)
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
    if behaviour == "hang":  # still holding the first POST when the service stopped
        assert "notice(s) undelivered: http://127.0.0.1:" in err, err
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

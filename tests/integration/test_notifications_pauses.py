"""A pause told by the reclaimer (a real process) and by stuck --watch to a real local HTTP
server (tests/webhooks.py): ``paused`` when one appears (who, why, the jobs it holds back),
``resumed`` when it goes; a pause made before the run started is not told; PagerDuty gets
Change Events and no incident, Slack a notice."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from helpers import wait_until
from test_notifications import service, stop
from webhooks import webhook


def kinded(conn, run) -> None:
    """kind and queue mapped; 3 queued charge_card jobs (queue payments), 2 send_email."""
    conn.execute("ALTER TABLE jobs ADD COLUMN kind text")
    applied = run("schema", "apply", "--column", "kind=kind", "--column", "queue=queue", "--yes")
    assert applied.code == 0, applied.err
    for kind, queue, n in (("charge_card", "payments", 3), ("send_email", "main", 2)):
        conn.execute(
            "INSERT INTO jobs (kind, queue) SELECT %s, %s FROM generate_series(1, %s)",
            (kind, queue, n),
        )


def passes(conn) -> int:
    found = conn.execute("SELECT max(passes) AS n FROM jobctl.reclaimer_passes").fetchone()
    return int(found["n"] or 0)


def events(hook) -> list[str]:
    return [p.get("event") or p["payload"]["custom_details"]["event"] for p in hook.received]


def test_the_reclaimer_tells_a_pause_and_its_resume(conn, dsn, run):
    kinded(conn, run)
    assert run("pause", "--kind", "send_email", "--reason", "before the run").code == 0
    with webhook("ok") as hook:
        proc = service(dsn, hook_url=hook.url)
        try:
            wait_until(lambda: passes(conn) >= 2, timeout=20, what="two passes")
            assert hook.received == []  # the pause it found at its start is not news
            assert run("pause", "--kind", "charge_card", "--reason", "provider down").code == 0
            wait_until(lambda: "paused" in events(hook), timeout=20, what="paused told")
            assert run("resume", "--kind", "charge_card", "--reason", "back").code == 0
            wait_until(lambda: "resumed" in events(hook), timeout=20, what="resumed told")
        finally:
            _, err = stop(proc)
    assert events(hook) == ["paused", "resumed"], err
    told, gone = hook.received
    assert told["summary"] == (
        "jobs: kind charge_card paused by tester@ci: provider down (3 queued job(s) wait)"
    )
    assert told["severity"] == "info" and told["counts"] == {"waiting": 3}
    assert told["pause"]["value"] == "charge_card" and told["pause"]["reason"] == "provider down"
    assert told["pause"]["actor"] == "tester@ci" and told["pause"]["db_role"]
    assert told["next"][1] == "jobctl resume --kind=charge_card --reason TEXT"
    assert gone["summary"].startswith("jobs: kind charge_card resumed after ")
    assert gone["summary"].endswith("(paused by tester@ci: provider down)")
    assert gone["source"]["command"] == "reclaim --every"


def test_pagerduty_takes_pauses_as_change_events(conn, dsn, run):
    kinded(conn, run)
    with webhook("pagerduty") as pd:
        proc = service(
            dsn,
            "--notify-format",
            "pagerduty",
            hook_url=pd.url,
            env={"JOBCTL_PAGERDUTY_ROUTING_KEY": "R0UT1NGKEY"},
        )
        try:
            wait_until(lambda: passes(conn) >= 2, timeout=20, what="two passes")
            assert run("pause", "--queue", "main", "--reason", "deploy").code == 0
            wait_until(lambda: len(pd.changes) >= 1, timeout=20, what="the pause's change")
            assert run("resume", "--queue", "main").code == 0
            wait_until(lambda: len(pd.changes) >= 2, timeout=20, what="the resume's change")
        finally:
            stop(proc)
    assert pd.refused == [] and pd.open_incidents() == []
    assert [a for a in pd.alerts if a[0] == "trigger"] == []  # (the stale resolves: no-ops)
    details = [c["payload"]["custom_details"] for c in pd.changes]
    assert [d["event"] for d in details] == ["paused", "resumed"]
    assert details[0]["pause"]["dimension"] == "queue" and details[0]["counts"] == {"waiting": 2}


def test_stuck_watch_tells_a_pause_to_slack(conn, dsn, run, tmp_path):
    kinded(conn, run)
    env = {**os.environ, "JOBCTL_DSN": dsn, "JOBCTL_ACTOR": "tester@ci"}
    with webhook("ok") as hook:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "jobctl", "stuck", "--watch", "--every", "0.2s"),
                *("--notify", hook.url, "--notify-format", "slack"),
            ],
            env=env,
            text=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        try:
            # its first refresh read the pauses (none): wait for it, then pause
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name "
                        "LIKE 'jobctl%%' AND datname = current_database()"
                    ).fetchone()["n"]
                    > 0
                ),
                timeout=20,
                what="the watch connected",
            )
            time.sleep(1.0)  # (refreshed every 0.2s: its first read is done)
            assert run("pause", "--kind", "charge_card", "--reason", "<!channel> down").code == 0
            wait_until(lambda: hook.received, timeout=20, what="the pause told")
        finally:
            stop(proc)
    (told,) = hook.received
    text = told["blocks"][0]["text"]["text"]
    assert told["text"].startswith(":information_source: jobs: kind charge_card paused by")
    assert "<!channel>" not in text and "&lt;!channel&gt; down" in text
    assert "paused in `jobs`" in text and "waiting: 3" in text

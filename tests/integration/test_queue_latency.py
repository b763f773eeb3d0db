"""Queue latency: the oldest ready job in summary and metrics, and stuck's mention of it."""

from __future__ import annotations

import json

from helpers import add_jobs, claim_all
from prometheus_client.parser import text_string_to_metric_families


def gauge(text: str, name: str) -> float:
    (value,) = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]
    return value


def test_ready_jobs_waiting_show_in_summary_metrics_and_stuck(conn, dsn, run):
    # nothing ready: no age, no mention
    empty = json.loads(run("summary", "-o", "json").out)
    assert (empty["ready"], empty["oldest_ready_s"], empty["awaiting_review"]) == (0, None, 0)
    assert gauge(run("metrics").out, "jobctl_oldest_ready_job_seconds") == 0.0
    quiet = run("stuck", "--ready-after", "1s")
    assert quiet.code == 0 and "ready to run" not in quiet.err

    ready = add_jobs(conn, 3)
    later = add_jobs(conn, 2)
    conn.execute(
        "UPDATE jobs SET available_at = now() - interval '40 minutes' WHERE id = %s", (ready[0],)
    )
    conn.execute(
        "UPDATE jobs SET available_at = now() + interval '1 hour' WHERE id = ANY(%s)", (later,)
    )
    summary = json.loads(run("summary", "-o", "json").out)
    assert summary["ready"] == 3  # not the two available only later
    assert 2400 <= summary["oldest_ready_s"] < 2460
    assert "oldest_ready_s" in run("summary").out
    text = run("metrics").out
    assert 2400 <= gauge(text, "jobctl_oldest_ready_job_seconds") < 2460
    assert gauge(text, "jobctl_ready_jobs") == 3
    assert gauge(text, "jobctl_awaiting_review_jobs") == 0

    said = run("stuck", "--ready-after", "30m")
    assert said.code == 0 and "(none)" in said.out
    assert "nothing stuck, but 3 job(s) ready to run have waited longer than 30m" in said.err
    assert "ready to run" not in run("stuck", "--ready-after", "1h").err
    # when something is stuck, stuck is about that
    claim_all(dsn, 1, lease_seconds=-60)
    busy = run("stuck", "--ready-after", "1s", "-o", "json")
    assert len(json.loads(busy.out)) == 1 and "ready to run" not in busy.err


def test_awaiting_review_gauge(conn, dsn, run):
    add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 2, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    assert gauge(run("metrics").out, "jobctl_awaiting_review_jobs") == 2

"""A pause seen everywhere a person looks: summary (a section, and JSON), stuck (a line under
its list), report (its section and the window's pauses and resumes) — each reading the one
listing of pauses (``pause_waiting``), and its count of waiting jobs equal to what real
workers' claims leave behind."""

from __future__ import annotations

import json

import psycopg
from test_pause import kinded

from jobctl import lease


def drained(dsn: str) -> int:
    """Claim and complete every job a worker's claim will take; how many it took."""
    taken = 0
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "drain", lease_seconds=30)
        while (job := worker.claim()) is not None:
            worker.complete(job)
            taken += 1
    return taken


def test_summary_stuck_and_report_show_a_pause_and_agree_with_the_claim(conn, dsn, run):
    ids = kinded(conn, run, per_kind=4)
    assert run("pause", "--kind", "charge_card", "--reason", "provider down").code == 0

    summary = json.loads(run("summary", "-o", "json").out)
    [paused] = summary["paused"]
    assert (paused["dimension"], paused["value"], paused["reason"], paused["actor"]) == (
        "kind",
        "charge_card",
        "provider down",
        "tester@ci",
    )
    assert paused["waiting"] == 4
    # what the workers' claim passes over is what summary says waits
    assert drained(dsn) == 8
    left = conn.execute("SELECT kind FROM jobs WHERE status = 'queued'").fetchall()
    assert [r["kind"] for r in left] == ["charge_card"] * paused["waiting"]

    screen = run("summary").out
    assert "paused (their queued jobs wait" in screen
    assert "charge_card" in screen and "provider down" in screen

    # an expired job of another kind: stuck lists it and says the pause under the list
    conn.execute(
        "UPDATE jobs SET status = 'processing', attempt_token = gen_random_uuid(), "
        "reserved_by = 'w9', reserved_at = now() - interval '5 minutes', "
        "lease_expires_at = now() - interval '1 minute' WHERE id = %s",
        (ids["send_email"][0],),
    )
    stuck = run("stuck")
    assert stuck.code == 0, stuck.err
    assert "kind charge_card is paused" in stuck.err
    assert "4 queued job(s) of it wait" in stuck.err
    assert "jobctl resume --kind=charge_card lifts it" in stuck.err

    found = json.loads(run("report", "--since", "1h", "-o", "json").out)
    assert [p["value"] for p in found["pauses"]["now"]] == ["charge_card"]
    assert [e["event"] for e in found["pauses"]["events"]] == ["paused"]
    page = run("report", "--since", "1h").out
    assert "## Paused kinds and queues" in page
    assert "is paused" in page and "4 queued job(s) of it wait" in page
    assert "`jobctl resume --kind=charge_card`" in page

    assert run("resume", "--kind", "charge_card", "--reason", "provider back").code == 0
    assert json.loads(run("summary", "-o", "json").out)["paused"] == []
    assert "paused" not in run("stuck").err
    after = json.loads(run("report", "--since", "1h", "-o", "json").out)["pauses"]
    assert after["now"] == []
    assert [(e["event"], e["reason"]) for e in after["events"]] == [
        ("paused", "provider down"),
        ("resumed", "provider back"),
    ]
    assert "| resumed |" in run("report", "--since", "1h").out
    assert drained(dsn) == 4  # resumed: claimed again


def test_a_pause_value_is_quoted_for_the_shell_and_made_visible(conn, dsn, run):
    kinded(conn, run, per_kind=1)
    hostile = "x; rm -rf ~\x1b[2J"
    conn.execute("UPDATE jobs SET kind = %s WHERE kind = 'charge_card'", (hostile,))
    assert run("pause", "--kind", hostile, "--reason", "r").code == 0
    said = run("stuck").err
    assert "\x1b" not in said
    assert "jobctl resume --kind='x; rm -rf ~\\x1b[2J' lifts it" in said

"""Quarantine (crash loops to manual) and per-job recovery policy: fenced and audited."""

from __future__ import annotations

import json

import psycopg
from helpers import add_jobs, claim_all, reclaim_times, snapshot

from jobctl import lease


def test_quarantine_dry_run_commit_and_undo(conn, dsn, run):
    ids = add_jobs(conn, 3, max_attempts=10)
    reclaim_times(conn, dsn, run, 3, ids)
    conn.execute("UPDATE jobs SET reclaim_count = 1 WHERE id = %s", (ids[2],))
    before = snapshot(conn)
    dry = run("quarantine", "--min-reclaims", "3", "-o", "json")
    assert dry.code == 0 and sorted(r["id"] for r in json.loads(dry.out)) == ids[:2]
    assert snapshot(conn) == before and "nothing changed" in dry.err
    assert run("quarantine", "--min-reclaims", "3", "--commit").code == 2  # no --yes
    done = run("quarantine", "--min-reclaims", "3", "--commit", "--yes", "-o", "json")
    assert [r["outcome"] for r in json.loads(done.out)] == ["quarantined", "quarantined"]
    policies = {r["id"]: r["recovery_policy"] for r in conn.execute("SELECT * FROM jobs")}
    assert policies == {ids[0]: "manual", ids[1]: "manual", ids[2]: "auto"}
    event = conn.execute(
        "SELECT * FROM jobctl.events WHERE event = 'quarantined' ORDER BY event_id LIMIT 1"
    ).fetchone()
    assert event["actor"] == "tester@ci" and event["reason"] == "reclaimed 3 times"
    undo = run("policy", str(ids[0]), "--auto", "--reason", "fixed in 2.3.1", "--yes", "-o", "json")
    assert json.loads(undo.out)[0]["outcome"] == "policy_changed"
    again = run("policy", str(ids[0]), "--auto", "--yes", "-o", "json")
    assert again.code == 2 and json.loads(again.out)[0]["outcome"] == "refused"


def test_policy_change_is_fenced(conn, dsn):
    from jobctl import db
    from jobctl.db import session
    from jobctl.ops import manual

    add_jobs(conn, 1)
    (job,) = claim_all(dsn, 1, lease_seconds=60)
    s = session.connect(db.Settings(dsn=dsn, actor="tester@ci"))
    with s.conn:
        decision = manual.decide_policy(s, job.id, "manual")
        with psycopg.connect(dsn, autocommit=True) as w:
            lease.Worker(w, "w1").heartbeat(job)  # the row changes between read and write
        result = manual.set_policy(s, decision, "manual", event="policy_changed", reason=None)
    assert result.outcome == "conflict"
    assert conn.execute("SELECT recovery_policy FROM jobs").fetchone()["recovery_policy"] == "auto"

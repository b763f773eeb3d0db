"""Beyond the peers: quarantine, policy, explain, metrics."""

from __future__ import annotations

import json

import psycopg
from helpers import add_jobs, claim_all, snapshot
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from jobctl import lease


def reclaim_times(conn, dsn, run, times: int, job_ids: list[int]) -> None:
    """Claim and let the leases of ``job_ids`` expire, then reclaim, ``times`` times."""
    for _ in range(times):
        claim_all(dsn, len(job_ids))
        assert run("reclaim", "--commit", "--yes").code == 0


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
    from jobctl import db, manual, session

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


def test_explain_tells_the_story_and_warns_of_short_leases(conn, dsn, run):
    add_jobs(conn, 1)
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "slowpoke", lease_seconds=1)
        job = worker.claim()
        assert job is not None
        c.execute(
            "UPDATE jobs SET heartbeat_at = reserved_at + interval '0.9 s', "
            "lease_expires_at = reserved_at + interval '1.9 s'"
        )  # a late heartbeat
    conn.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 s'")
    assert run("reclaim", "--commit", "--yes").code == 0
    assert (
        run("--actor", "bob@ops", "fail", "1", "--reason", "customer cancelled", "--yes").code == 0
    )
    text = run("explain", "1").out
    assert "worker slowpoke claimed it (attempt 1)" in text
    assert "reclaimed it and it became queued" in text
    assert 'bob@ops failed it by hand: "customer cancelled"' in text
    assert "Warning: attempt 1's largest heartbeat gap (0.9s)" in text
    facts = json.loads(run("explain", "1", "-o", "json").out)
    assert facts["lease_too_short"] is True
    assert facts["attempts"][0]["lease_s"] == 1.0
    assert facts["attempts"][0]["max_heartbeat_gap_s"] == 0.9


def test_metrics_parse_as_openmetrics_and_thresholds(conn, dsn, run):
    add_jobs(conn, 4)
    add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 3, lease_seconds=-120)
    claim_all(dsn, 1, lease_seconds=10)
    result = run("metrics")
    assert result.code == 0, result.err
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(result.out)
        for s in family.samples
    }
    table = ("table", "public.jobs")
    assert samples[("jobctl_stuck_jobs", (("policy", "auto"), table))] == 3
    assert samples[("jobctl_stuck_jobs", (("policy", "manual"), table))] == 0
    assert samples[("jobctl_oldest_expired_lease_seconds", (table,))] >= 120
    assert samples[("jobctl_expiring_soon_jobs", (table, ("within_seconds", "30")))] == 1
    breached = run("metrics", "--max-stuck", "2", "--max-overdue", "1m")
    assert breached.code == 4 and breached.err.count("CRITICAL") == 2
    assert run("metrics", "--max-stuck", "3", "--max-overdue", "1h").code == 0
    assert run("reclaim", "--commit", "--yes").code == 0
    after = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(run("metrics").out)
        for s in family.samples
    }
    assert after[("jobctl_recent_reclaims", (table, ("window_seconds", "300")))] == 3
    assert after[("jobctl_oldest_expired_lease_seconds", (table,))] == 0

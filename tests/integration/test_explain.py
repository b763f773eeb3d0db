"""explain: a job's story in sentences, against a real history."""

from __future__ import annotations

import json

import psycopg
from helpers import add_jobs

from jobctl import lease


def test_explain_tells_the_story_and_warns_of_short_leases(conn, dsn, run):
    assert run("schema", "apply", "--history", "late", "--yes").code == 0  # counts late beats
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

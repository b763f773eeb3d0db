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


def test_a_worker_name_cannot_read_as_a_sentence_of_jobctls(conn, dsn, run):
    """A worker named to read as an operator's requeue in explain:
    the name is one quoted value, the forged words only inside its quotes."""
    forger = (
        "web-1 claimed it (attempt 1). At 2026-12-01 06:00:00+00:00 alice@ops requeued it by "
        'hand: "approved'
    )
    add_jobs(conn, 1)
    with psycopg.connect(dsn, autocommit=True) as c:
        assert lease.Worker(c, forger, lease_seconds=-60).claim() is not None
    assert run("reclaim", "--commit", "--yes").code == 0
    facts = json.loads(run("explain", "1", "-o", "json").out)
    (told,) = [line for line in facts["story"] if "alice@ops" in line]
    assert told.endswith(f" worker {json.dumps(forger)} claimed it (attempt 1).")
    assert told.count('"') == 3 and told.count('\\"') == 1  # its two quotes, one escaped
    assert not any(line.startswith("At 2026-12-01 06:00:00") for line in facts["story"])


def test_explain_and_expiring_soon_take_one_start_of_the_lease(conn, run):
    """A claim by a writer that leaves an earlier attempt's heartbeat_at in place (older than
    its reserved_at): explain's lease length and expiring-soon both start the lease at the
    later of the two (a 60 s lease, 10 s left: in its last third), not at the stale beat."""
    (job,) = add_jobs(conn, 1)
    conn.execute(
        "UPDATE jobs SET status = 'processing', attempts = 1, reserved_by = 'other-writer', "
        "attempt_token = gen_random_uuid(), heartbeat_at = now() - interval '1 hour', "
        "reserved_at = now() - interval '50 s', lease_expires_at = now() + interval '10 s' "
        "WHERE id = %s",
        (job,),
    )
    facts = json.loads(run("explain", str(job), "-o", "json").out)
    assert facts["attempts"][-1]["lease_s"] == 60.0
    expiring = json.loads(run("stuck", "--expiring", "-o", "json").out)
    assert [row["id"] for row in expiring] == [job]

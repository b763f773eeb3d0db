"""A pause that some workers do not honour is seen: a real worker process whose
claim has no pause check (an older release's, or one of its own) claims a paused kind beside
a lease.Worker that passes it over; pause --list, summary and metrics report the same count
of claims since the pause (the block claims_since_pause), counted from what the database
holds: the claims running since the pause, and the ended attempts the history recorded as
claimed after it. Under --history audit it cannot be seen, and they say so."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql
from test_pause import WORKER, kinded

from jobctl import db
from jobctl.sql import queries

# a worker of its own: the lease design's plain claim, no pause check. It claims one job
# before the pause and retries one (both before: not counted), then, once told to go on,
# claims every queued job it can, in turn completing one, retrying one (a transition the
# history records) and keeping one running; prints what it did after the pause (JSON)
ROGUE = """
import json, sys, time
from pathlib import Path
import psycopg
dsn, go, stop = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
CLAIM = '''
UPDATE jobs j SET status = 'processing', reserved_by = 'rogue', reserved_at = now(),
       lease_expires_at = now() + interval '10 minutes', attempt_token = gen_random_uuid(),
       attempts = j.attempts + 1, updated_at = now()
WHERE j.id = (SELECT id FROM jobs WHERE status = 'queued' AND available_at <= now()
              AND kind = 'charge_card' ORDER BY available_at, id FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING j.id, j.attempt_token'''
DONE = '''UPDATE jobs SET status = 'done', finished_at = now(), reserved_by = NULL,
    reserved_at = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE id = %s AND attempt_token = %s AND status = 'processing' '''
RETRY = '''UPDATE jobs SET status = 'queued', available_at = now() + interval '1 hour',
    last_error = 'boom', reserved_by = NULL, reserved_at = NULL, lease_expires_at = NULL,
    attempt_token = NULL, updated_at = now()
    WHERE id = %s AND attempt_token = %s AND status = 'processing' '''
did = {"completed": 0, "retried": 0, "running": 0}
with psycopg.connect(dsn, autocommit=True) as c:
    kept = c.execute(CLAIM).fetchone()  # before the pause, left running
    again = c.execute(CLAIM).fetchone()  # before the pause, retried
    c.execute(RETRY, again)
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.01)
    n = 0
    while (got := c.execute(CLAIM).fetchone()) is not None:
        action = ("completed", "retried", "running")[n % 3]
        if action != "running":
            c.execute(DONE if action == "completed" else RETRY, got)
        did[action] += 1
        n += 1
        time.sleep(0.002)
    while not stop.exists():
        time.sleep(0.01)
print(json.dumps(did), flush=True)
"""


def _paused(conn, dsn, run, tmp_path: Path, history: str) -> tuple[dict[str, int], list[int]]:
    """charge_card paused while a lease.Worker and the rogue run: what the rogue did since the
    pause, and what the lease.Worker claimed (never charge_card)."""
    kinded(conn, run, per_kind=12)
    applied = run("schema", "apply", "--history", history, "--yes")
    assert applied.code == 0, applied.err
    go, stop = tmp_path / "go", tmp_path / "stop"
    rogue = subprocess.Popen(
        [sys.executable, "-c", ROGUE, dsn, str(go), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert rogue.stdout is not None and rogue.stdout.readline().strip() == "ready"
    time.sleep(0.05)  # the pause begins after the rogue's claims before it
    assert run("pause", "--kind", "charge_card", "--reason", "provider down").code == 0
    honest = subprocess.Popen(
        [sys.executable, "-c", WORKER, dsn, f"w-{uuid.uuid4().hex[:6]}", str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    go.touch()  # both claim at once: the rogue the paused kind, the worker the others
    deadline = time.monotonic() + 30
    while (
        conn.execute(
            "SELECT count(*) AS n FROM jobs WHERE status = 'queued' AND available_at <= now() "
            "AND kind <> 'charge_card'"
        ).fetchone()["n"]
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    time.sleep(0.3)
    stop.touch()
    did = json.loads(rogue.communicate(timeout=30)[0].strip().splitlines()[-1])
    claimed = json.loads(honest.communicate(timeout=30)[0])
    return did, claimed


def _agree(run) -> tuple[list, dict, str, str]:
    listed = run("pause", "--list", "-o", "json")
    assert listed.code == 0, listed.err
    summary = run("summary", "-o", "json")
    assert summary.code == 0, summary.err
    metrics = run("metrics")
    return json.loads(listed.out), json.loads(summary.out), metrics.out, listed.err


@pytest.mark.parametrize("history", ["transitions", "late"])
def test_claims_of_a_paused_kind_by_a_worker_that_ignores_pauses_agree(
    conn, dsn, run, tmp_path, history
):
    did, claimed = _paused(conn, dsn, run, tmp_path, history)
    kinds = conn.execute("SELECT DISTINCT kind FROM jobs WHERE id = ANY(%s)", (claimed,)).fetchall()
    assert claimed and "charge_card" not in {r["kind"] for r in kinds}  # it honours the pause
    assert did["running"] and did["retried"] and did["completed"]
    # transitions records the attempts that did not complete; late every one
    seen = "not_completed" if history == "transitions" else "all"
    counted = did["running"] + did["retried"] + (did["completed"] if seen == "all" else 0)

    listed, summary, metrics, said = _agree(run)
    [pause] = listed
    [paused] = summary["paused"]
    for row in (pause, paused):
        assert (row["claims_since"], row["claims_running"], row["claims_seen"]) == (
            counted,
            did["running"],
            seen,
        )
    series = re.findall(r'^jobctl_pause_claims\{.*value="charge_card"\} (\d+)$', metrics, re.M)
    assert series == [str(counted)]
    assert f"{counted} claim(s) of kind charge_card since the pause: some workers do not " in (said)
    assert ("completed are not counted" in said) == (history == "transitions")
    # the line under stuck says it too, and the table shows the count
    assert f"{counted} claim(s) of kind charge_card since the pause" in run("stuck").err
    assert str(counted) in run("pause", "--list").out

    assert run("resume", "--kind", "charge_card", "--reason", "fixed").code == 0
    assert "jobctl_pause_claims" not in run("metrics").out


def test_under_the_audit_history_the_claims_since_a_pause_cannot_be_seen(conn, dsn, run, tmp_path):
    did, _ = _paused(conn, dsn, run, tmp_path, "audit")
    assert did["running"]
    listed, summary, metrics, said = _agree(run)
    [pause] = listed
    [paused] = summary["paused"]
    for row in (pause, paused):
        assert (row["claims_since"], row["claims_running"], row["claims_seen"]) == (
            None,
            did["running"],
            "running",
        )
    assert "jobctl_pause_claims" not in metrics and "jobctl_pause_seconds{" in metrics
    assert "claims of kind charge_card since the pause cannot be seen" in said
    assert f"{did['running']} running now were claimed after it" in said


def test_the_claims_since_a_pause_are_found_by_an_index_not_a_scan(conn):
    """On a history of 100,000 ended attempts (ANALYZE'd), the claims recorded since the pause
    are read through attempts_claimed_idx (history 014), never a scan of jobctl.attempts: the
    count every view reads while something is paused, once a minute from metrics."""
    # ids as the database gives them (a reused test database's sequence starts anywhere): the
    # queue by the id's parity, each attempt's job the first id plus g mod 1000, so that of
    # the 100 attempts since the pause exactly half are of queue q1 whatever the first id
    conn.execute("INSERT INTO jobs (queue) SELECT 'q' FROM generate_series(1, 1000)")
    conn.execute("UPDATE jobs SET queue = 'q' || (id % 2)")
    (first,) = conn.execute("SELECT min(id) FROM jobs").fetchone().values()
    # One clock for both inserts: the 100,000 rows can take over a second on a busy machine,
    # and a pause placed by a later now() would then miss the first claims after it.
    (start,) = conn.execute("SELECT now()").fetchone().values()  # (a dict row: its value)
    conn.execute(
        """
        INSERT INTO jobctl.attempts (attempt_token, job_table, job_id, claimed_at, ended_at)
        SELECT gen_random_uuid(), 'public.jobs', (%(first)s::bigint + g %% 1000)::text, at, at
        FROM generate_series(1, 100000) g,
             LATERAL (SELECT %(start)s::timestamptz - (100000 - g) * interval '1 s') AS c (at)
        """,
        {"start": start, "first": first},
    )
    conn.execute(  # half a second from the nearest claim, so the boundary is never a tie
        "INSERT INTO jobctl.pauses (job_table, dimension, value, reason, paused_at) "
        "VALUES ('public.jobs', 'queue', 'q1', 'r', %s::timestamptz - interval '99.5 s')",
        (start,),
    )
    conn.execute(
        "INSERT INTO jobctl.tables (job_table, mapping) VALUES ('public.jobs', %s)",
        (json.dumps({"columns": {"queue": "queue"}, "statuses": {}, "park_status": None}),),
    )
    conn.execute("ANALYZE jobctl.attempts")
    conn.execute("ANALYZE jobs")
    table = db.resolve_table(conn, "jobs")
    statement = queries.query("pause_waiting", **table.fragments)
    with conn.transaction():
        conn.execute("SET LOCAL jit = off")  # as jobctl's transactions run it
        (plan,) = (
            conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) {}").format(statement))
            .fetchone()
            .values()
        )
        (row,) = conn.execute(statement).fetchall()
    nodes = list(_nodes(plan[0]["Plan"]))
    on_attempts = [n for n in nodes if n.get("Relation Name") == "attempts"]
    assert [n["Node Type"] for n in on_attempts] == ["Index Scan"]
    assert on_attempts[0]["Index Name"] == "attempts_claimed_idx"
    assert on_attempts[0]["Actual Rows"] == 50  # of the 100 claimed since, half of queue q1
    assert row["claims_since"] == 50


def _nodes(node: dict) -> Iterator[dict]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)

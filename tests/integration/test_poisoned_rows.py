"""One row with an infinite (or out-of-calendar) lease time stops no
command. ``heartbeat_at = 'infinity'``, ``reserved_at = 'infinity'``, ``lease_expires_at =
'-infinity'`` or a year past 9999 on one stuck row: stuck, summary, show, history, explain,
metrics and the reclaim's dry run work, and show the row (stuck and the dry run as skipped,
naming the column); the commit and the reclaimer service reclaim the others and leave it
for a human, saying so by id."""

from __future__ import annotations

import datetime as dt
import json
import threading

import psycopg
import pytest
from helpers import add_jobs, claim_all

from jobctl import db
from jobctl.ops.reclaim import service
from jobctl.ops.triage import ExpiredFilter

POISONS = {
    "heartbeat_at infinity": ("heartbeat_at", "infinity"),
    "reserved_at infinity": ("reserved_at", "infinity"),
    "lease_expires_at -infinity": ("lease_expires_at", "-infinity"),
    "heartbeat_at past year 9999": ("heartbeat_at", "12000-01-01 00:00:00+00"),
    "reserved_at before year 1": ("reserved_at", "0044-03-15 00:00:00+00 BC"),
}


@pytest.fixture(params=list(POISONS))
def poisoned(request, conn, dsn):
    """Four stuck jobs, the first poisoned: (its id, the others, the column, the value)."""
    column, value = POISONS[request.param]
    ids = add_jobs(conn, 4)
    claim_all(dsn, 4)
    conn.execute(f"UPDATE jobs SET {column} = %s WHERE id = %s", (value, ids[0]))
    return ids[0], ids[1:], column, value


def statuses(conn) -> dict[int, str]:
    return {r["id"]: r["status"] for r in conn.execute("SELECT id, status FROM jobs")}


def test_every_read_survives_a_poisoned_row(poisoned, run):
    bad, others, column, value = poisoned
    for args in (
        ["stuck"],
        ["stuck", "--expiring-within", "1m"],
        ["summary"],
        ["summary", "-o", "json"],
        ["show", str(bad)],
        ["show", str(bad), "-o", "json"],
        ["history", str(bad)],
        ["explain", str(bad)],
        ["metrics"],
        ["reclaim", "--dry-run"],
    ):
        result = run(*args)
        assert result.code == 0, (args, result.err)
    # the row is there, skipped, naming the column: a script sees it stuck, not reclaimable
    found = json.loads(run("stuck", "-o", "json").out)
    assert sorted(r["id"] for r in found) == sorted([bad, *others])
    (row,) = [r for r in found if r["id"] == bad]
    assert row["skipped"].startswith("lease times out of range") and column in row["skipped"]
    assert all(r["skipped"] is None for r in found if r["id"] != bad)
    dry = json.loads(run("reclaim", "--dry-run", "-o", "json").out)
    assert [r["id"] for r in dry if r["skipped"]] == [bad]
    shown = json.loads(run("show", str(bad), "-o", "json").out)
    # show reads the row as it is: the value as the server writes it
    assert value.split()[0] in str(shown[column]), shown


def test_the_commit_reclaims_the_others_and_leaves_the_poisoned_row(poisoned, conn, run):
    bad, others, column, _ = poisoned
    result = run("reclaim", "--commit", "--yes", "-o", "json")
    assert result.code == 0, result.err
    rows = json.loads(result.out)
    assert sorted(r["id"] for r in rows if r["applied"]) == sorted(others)
    (left,) = [r for r in rows if not r["applied"]]
    assert left["id"] == bad and column in left["skipped"]
    assert "3 requeued, 0 failed, 1 skipped" in result.err
    now = statuses(conn)
    assert now[bad] == "processing" and all(now[i] == "queued" for i in others)


def test_a_reviewed_plan_applies_the_others_and_says_why_not_the_poisoned_row(
    poisoned, conn, run, tmp_path
):
    bad, others, column, _ = poisoned
    plan = tmp_path / "plan.json"
    assert run("reclaim", "--save-plan", str(plan)).code == 0
    result = run("reclaim", "--commit", "--yes", "--plan", str(plan), "-o", "json")
    assert result.code in (0, 3), result.err
    rows = json.loads(result.out)
    assert sorted(r["id"] for r in rows if r["applied"]) == sorted(others)
    (left,) = [r for r in rows if not r["applied"]]
    assert left["id"] == bad and column in left["skipped"], left
    assert statuses(conn)[bad] == "processing"


def test_the_service_reclaims_the_others_and_names_the_poisoned_job(poisoned, conn, dsn):
    bad, others, column, _ = poisoned
    stop, lines = threading.Event(), []

    def log(line: str) -> None:
        lines.append(line)
        if "connected" in line:
            stop.set()  # the pass in hand still runs, then the service stops

    settings = db.Settings(dsn=dsn, actor="service@ci")
    batches = list(
        service.serve(
            settings,
            ExpiredFilter(),
            batch_size=10,
            every=dt.timedelta(seconds=1),
            stop=stop,
            log=log,
        )
    )
    assert not any("retrying" in line for line in lines), lines
    assert sorted(r["id"] for batch, _ in batches for r in batch if r["applied"]) == sorted(others)
    told = [line for line in lines if f"job {bad}:" in line]
    assert len(told) == 1 and column in told[0] and "left for a human" in told[0], lines
    assert statuses(conn)[bad] == "processing"


def test_a_live_lease_with_a_poisoned_heartbeat_is_at_risk_not_an_error(conn, dsn, run):
    """stuck --expiring-within: a live lease whose heartbeat is infinite (the worker's lag)."""
    ids = add_jobs(conn, 2)
    claim_all(dsn, 2, lease_seconds=20)
    conn.execute("UPDATE jobs SET heartbeat_at = 'infinity' WHERE id = %s", (ids[0],))
    result = run("stuck", "--expiring-within", "1m", "-o", "json")
    assert result.code == 0, result.err
    found = {r["id"]: r for r in json.loads(result.out)}
    assert set(found) == set(ids)
    assert found[ids[0]]["heartbeat_at"] is None and "heartbeat_at" in found[ids[0]]["skipped"]


def test_stuck_is_not_read_as_nothing_stuck_when_it_fails(conn, dsn, run):
    """A command that fails once its JSON began prints no valid document: stuck waits for a
    lock on the table past lock_timeout (exit 1); stdout is not ``[]`` ("nothing stuck")."""
    add_jobs(conn, 1)
    claim_all(dsn, 1)
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        result = run("--lock-timeout", "200ms", "stuck", "-o", "json")
    assert result.code == 1, (result.out, result.err)
    assert "lock" in result.err
    assert result.out.strip() != "[]"
    if result.out.strip():
        with pytest.raises(json.JSONDecodeError):
            json.loads(result.out)


def test_a_queued_job_available_since_minus_infinity_stops_no_summary(conn, run):
    """summary (and stuck's "ready but unclaimed" check) measure the oldest ready job: one
    available since -infinity is counted, not subtracted."""
    ids = add_jobs(conn, 2)
    conn.execute("UPDATE jobs SET available_at = '-infinity' WHERE id = %s", (ids[0],))
    for args in (["summary"], ["stuck"], ["metrics"]):
        result = run(*args)
        assert result.code == 0, (args, result.err)
    assert json.loads(run("summary", "-o", "json").out)["ready"] == 2

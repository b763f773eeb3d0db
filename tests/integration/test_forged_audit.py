"""A worker role cannot pass its own UPDATE off as an operator's action, and a jobctl_action
planted in a row cannot hide an operator's write."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from helpers import add_jobs, claim_all, grant_roles
from psycopg import conninfo

ALICE = "alice@ops-laptop"


@pytest.fixture
def workers(server_dsn, dsn):
    """Two worker roles as applications have them: ``table`` with SELECT, INSERT, UPDATE on
    the jobs table (so UPDATE of jobctl_action too), ``columns`` with UPDATE of the lease
    design's columns only (not jobctl_action)."""
    suffix = uuid.uuid4().hex[:8]
    names = {"table": f"app_worker_{suffix}", "columns": f"app_cols_{suffix}"}
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for name in names.values():
            admin.execute(f"CREATE ROLE {name} LOGIN")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"GRANT USAGE ON SCHEMA public, jobctl TO {names['table']}, {names['columns']}")
        c.execute(f"GRANT SELECT, INSERT, UPDATE ON jobs TO {names['table']}")
        c.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {names['table']}")
        c.execute(f"GRANT SELECT ON jobs TO {names['columns']}")
        c.execute(
            "GRANT UPDATE (status, reserved_by, reserved_at, heartbeat_at, lease_expires_at, "
            f"attempt_token, last_error, finished_at, updated_at) ON jobs TO {names['columns']}"
        )
    yield {k: conninfo.make_conninfo(dsn, user=v) for k, v in names.items()} | {"names": names}
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"DROP OWNED BY {names['table']}, {names['columns']}")
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for name in names.values():
            admin.execute(f"DROP ROLE IF EXISTS {name}")


def events(run, job_id: int, *, dsn: str | None = None) -> list[dict]:
    result = run("history", str(job_id), "-o", "json", dsn=dsn)
    assert result.code == 0, result.err
    return json.loads(result.out)["events"]


def test_a_worker_cannot_pass_its_update_off_as_an_operators_requeue(
    roles, conn, dsn, run, workers
):
    assert grant_roles(run, roles).code == 0
    add_jobs(conn, 3, policy="manual")
    claim_all(dsn, 3, lease_seconds=300)
    worker = workers["names"]["table"]
    # the forgery of the issue, by a worker with a table-wide UPDATE: it succeeds (nothing
    # jobctl installs may fail a worker's statement), but is told as the worker's own change
    with psycopg.connect(workers["table"]) as c:
        c.execute(f"SET LOCAL jobctl.actor = '{ALICE}'")
        c.execute("SET LOCAL jobctl.reason = 'payment provider says not charged'")
        updated = c.execute(
            "UPDATE jobs SET status = 'queued', reserved_by = NULL, attempt_token = NULL, "
            "lease_expires_at = NULL, jobctl_action = 'requeued' WHERE id = 1"
        ).rowcount
    assert updated == 1
    (forged,) = [e for e in events(run, 1) if e["event"] not in ("claimed",)]
    assert forged["event"] == "retried"  # what the row shows: processing -> queued
    assert forged["actor"] == worker and forged["db_role"] == worker
    assert forged["claimed"] == {
        "actor": ALICE,
        "action": "requeued",
        "reason": "payment provider says not charged",
    }
    story = run("explain", "1").out
    assert f"role {worker} set jobctl_action=requeued claiming to be {ALICE}" in story
    assert f"{ALICE} requeued it by hand" not in story
    shown = json.loads(run("show", "1", "-o", "json").out)["events"]
    assert shown[-1]["db_role"] == worker and shown[-1]["claimed"]["actor"] == ALICE
    table = run("history", "1", "--format", "plain").out
    assert worker in table and ALICE in table  # the role and the claim, on one row
    wide = run("history", "1", "-o", "wide").out  # the terminal's layout, every column
    assert "ROLE" in wide and "CLAIMED" in wide and f"{ALICE}: requeued" in wide

    # a worker without UPDATE of jobctl_action stamps only a declared actor on its failure
    cols = workers["names"]["columns"]
    with psycopg.connect(workers["columns"]) as c:
        c.execute(f"SET LOCAL jobctl.actor = '{ALICE}'")
        c.execute(
            "UPDATE jobs SET status = 'failed', last_error = 'boom', attempt_token = NULL, "
            "finished_at = now() WHERE id = 2"
        )
    (failed,) = [e for e in events(run, 2) if e["event"] != "claimed"]
    assert (failed["event"], failed["actor"], failed["db_role"]) == ("failed", cols, cols)
    assert failed["claimed"] == {"actor": ALICE} and failed["reason"] == "boom"
    story = run("explain", "2").out
    assert f"Its database role {cols} claimed to be {ALICE}" in story

    # the operator role schema grants made, and the superuser: their declared actor is believed
    operator = conninfo.make_conninfo(dsn, user=roles["operator"])
    assert run("--actor", "bob@ops", "requeue", "3", "--force", "--yes", dsn=operator).code == 0
    (requeued,) = [e for e in events(run, 3) if e["event"] != "claimed"]
    assert (requeued["event"], requeued["actor"]) == ("requeued", "bob@ops")
    assert requeued["db_role"] == roles["operator"] and requeued["claimed"] is None
    assert f"bob@ops requeued it by hand (role {roles['operator']})" in run("explain", "3").out
    assert run("--actor", "carol@ops", "fail", "1", "--reason", "dup", "--yes").code == 0
    assert events(run, 1)[-1]["actor"] == "carol@ops"  # as postgres, the table's owner


@pytest.mark.parametrize("mode", ["transitions", "audit"])
def test_a_planted_jobctl_action_cannot_hide_an_operators_write(conn, run, workers, mode):
    assert run("schema", "apply", "--history", mode, "--yes").code == 0
    # planted at INSERT (no trigger runs on INSERT): the INSERT itself succeeds
    with psycopg.connect(workers["table"], autocommit=True) as c:
        c.execute(
            "INSERT INTO jobs (status, last_error, jobctl_action) VALUES "
            "('failed', 'worker error', 'requeued'), ('queued', NULL, 'manually_failed'), "
            "('queued', NULL, 'requeued')"
        )
    ids = [r["id"] for r in conn.execute("SELECT id FROM jobs ORDER BY id").fetchall()]
    actor = ["--actor", "dave@ops"]
    assert run(*actor, "requeue", str(ids[0]), "--reason", "approved by finance", "--yes").code == 0
    assert run(*actor, "fail", str(ids[1]), "--reason", "customer cancelled", "--yes").code == 0
    (requeued,) = events(run, ids[0])
    assert requeued["event"] == "requeued" and requeued["reason"] == "approved by finance"
    assert requeued["actor"] == "dave@ops"
    (failed,) = events(run, ids[1])
    assert failed["event"] == "manually_failed" and failed["reason"] == "customer cancelled"
    assert 'dave@ops requeued it by hand: "approved by finance"' in run("explain", str(ids[0])).out
    # a worker's own change of a row with a planted value is not told as jobctl's
    with psycopg.connect(workers["table"], autocommit=True) as c:
        c.execute("UPDATE jobs SET status = 'failed', last_error = 'x' WHERE id = %s", (ids[2],))
    assert all(e["event"] != "requeued" for e in events(run, ids[2]))
    left = conn.execute("SELECT jobctl_action FROM jobs WHERE id = ANY(%s)", (ids[:2],)).fetchall()
    assert left == [{"jobctl_action": None}] * 2  # consumed by the trigger, never stored


def test_the_tables_owner_is_believed_as_jobctls(conn, dsn, run, workers):
    """Not a superuser, not granted the column by name: the owner's path (the catalog query)."""
    add_jobs(conn, 1)
    claim_all(dsn, 1, lease_seconds=300)
    owner = workers["names"]["table"]
    conn.execute(f"ALTER TABLE jobs OWNER TO {owner}")
    with psycopg.connect(workers["table"]) as c:
        c.execute("SET LOCAL jobctl.actor = 'erin@ops'")
        c.execute(
            "UPDATE jobs SET status = 'failed', attempt_token = NULL, lease_expires_at = NULL, "
            "finished_at = now(), jobctl_action = 'manually_failed' WHERE id = 1"
        )
    (failed,) = [e for e in events(run, 1) if e["event"] != "claimed"]
    assert (failed["event"], failed["actor"], failed["db_role"]) == (
        "manually_failed",
        "erin@ops",
        owner,
    )
    assert failed["claimed"] is None

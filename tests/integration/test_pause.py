"""jobctl pause / resume: a kind or queue whose claim stops, recorded with who and why by
schema jobctl's owner; real worker processes (lease.Worker) never claim a paused kind while
the others flow, and claim it again once resumed; the claim rendered for another language
(schema statements, PREPAREd) honours it too; reclaim requeues an expired job of a paused
kind, which then waits."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
from helpers import grant_roles
from psycopg import conninfo, rows

from jobctl import lease

KINDS = ("send_email", "charge_card", "resize_image")

# a worker process: claim, "work" a little, complete, until the stop file appears; prints the
# ids it claimed (JSON) when it stops
WORKER = """
import json, sys, time
from pathlib import Path
import psycopg
from jobctl import lease
dsn, name, stop = sys.argv[1], sys.argv[2], Path(sys.argv[3])
claimed = []
with psycopg.connect(dsn, autocommit=True) as conn:
    worker = lease.Worker(conn, name, lease_seconds=30)
    while not stop.exists():
        job = worker.claim()
        if job is None:
            time.sleep(0.01)
            continue
        claimed.append(job.id)
        time.sleep(0.002)
        worker.complete(job)
print(json.dumps(claimed))
"""


def kinded(conn, run, per_kind: int = 3) -> dict[str, list[int]]:
    """A kind column mapped with the table's queue column; ``per_kind`` queued jobs of each
    kind (charge_card in queue payments, the rest in queue main)."""
    conn.execute("ALTER TABLE jobs ADD COLUMN kind text")
    applied = run("schema", "apply", "--column", "kind=kind", "--column", "queue=queue", "--yes")
    assert applied.code == 0, applied.err
    ids: dict[str, list[int]] = {}
    for kind in KINDS:
        found = conn.execute(
            "INSERT INTO jobs (kind, queue, recovery_policy) SELECT %s, %s, 'auto' "
            "FROM generate_series(1, %s) RETURNING id",
            (kind, "payments" if kind == "charge_card" else "main", per_kind),
        ).fetchall()
        ids[kind] = [r["id"] for r in found]
    return ids


def by_kind(conn) -> dict[tuple[str, str], int]:
    got = conn.execute("SELECT kind, status, count(*) AS n FROM jobs GROUP BY 1, 2").fetchall()
    return {(r["kind"], r["status"]): r["n"] for r in got}


def test_pause_list_resume_and_their_record(conn, dsn, run):
    kinded(conn, run)
    paused = run("pause", "--kind", "charge_card", "--reason", "provider down")
    assert paused.code == 0, paused.err
    assert "kind charge_card paused" in paused.err
    listed = json.loads(run("pause", "--list", "-o", "json").out)
    assert [(p["dimension"], p["value"], p["reason"], p["actor"]) for p in listed] == [
        ("kind", "charge_card", "provider down", "tester@ci")
    ]
    assert listed[0]["db_role"] and listed[0]["paused_at"]
    table = run("pause", "--list").out
    assert "charge_card" in table and "provider down" in table
    tsv = run("pause", "--list", "-o", "tsv").out.splitlines()
    assert tsv[0].split("\t")[:3] == ["dimension", "value", "reason"]
    # a second pause changes nothing: the first one's reason and time stay
    again = run("pause", "--kind", "charge_card", "--reason", "still down")
    assert again.code == 0 and "already paused" in again.err and "provider down" in again.err
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w1")
        claimed = [worker.claim() for _ in range(9)]
    got = [j.id for j in claimed if j is not None]
    assert len(got) == 6
    assert by_kind(conn)[("charge_card", "queued")] == 3
    resumed = run("resume", "--kind", "charge_card", "--reason", "provider back")
    assert resumed.code == 0 and "resumed" in resumed.err
    assert json.loads(run("pause", "--list", "-o", "json").out) == []
    not_paused = run("resume", "--kind", "charge_card")
    assert not_paused.code == 0 and "not paused" in not_paused.err
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w1")
        assert all(worker.claim() is not None for _ in range(3))
    assert by_kind(conn).get(("charge_card", "queued")) is None
    history = conn.execute(
        "SELECT dimension, value, event, reason, actor, db_role FROM jobctl.pause_events "
        "ORDER BY event_id"
    ).fetchall()
    assert [(h["value"], h["event"], h["reason"], h["actor"]) for h in history] == [
        ("charge_card", "paused", "provider down", "tester@ci"),
        ("charge_card", "resumed", "provider back", "tester@ci"),
    ]
    assert all(h["db_role"] for h in history)


def test_a_paused_queue(conn, dsn, run):
    kinded(conn, run)
    assert run("pause", "--queue", "main", "--reason", "deploy").code == 0
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w1")
        got = [worker.claim() for _ in range(9)]
    assert sum(j is not None for j in got) == 3
    assert by_kind(conn)[("charge_card", "processing")] == 3


def test_refusals_are_one_line_with_exit_2(roles, conn, dsn, run):
    unmapped = run("pause", "--kind", "charge_card", "--reason", "x")
    assert unmapped.code == 2 and len(unmapped.err.strip().splitlines()) == 1
    assert "--column kind=COLUMN" in unmapped.err
    kinded(conn, run)
    for args in (
        ["pause", "--kind", "charge_card"],  # no reason
        ["pause", "--kind", "charge_card", "--reason", "  "],
        ["pause", "--kind", "a", "--queue", "b", "--reason", "x"],
        ["pause", "--reason", "x"],
        ["pause", "--list", "--kind", "a"],
        ["resume"],
    ):
        result = run(*args)
        assert result.code == 2, (args, result.err)
        assert len(result.err.strip().splitlines()) == 1, result.err
    assert grant_roles(run, roles).code == 0
    operator = conninfo.make_conninfo(dsn, user=roles["operator"])
    refused = run("pause", "--kind", "charge_card", "--reason", "x", dsn=operator)
    assert refused.code == 2, refused.err
    assert "only its owner writes" in refused.err and "nothing changed" in refused.err
    assert conn.execute("SELECT count(*) AS n FROM jobctl.pauses").fetchone()["n"] == 0
    assert run("pause", "--kind", "charge_card", "--reason", "x").code == 0
    assert run("resume", "--kind", "charge_card", dsn=operator).code == 2
    assert run("pause", "--list", dsn=operator).code == 0  # every role reads them
    reader = conninfo.make_conninfo(dsn, user=roles["readonly"])
    assert "charge_card" in run("pause", "--list", "-o", "json", dsn=reader).out


def workers(dsn: str, count: int, stop: Path) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, dsn, f"w{n}", str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]


def wait_for(check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_concurrent_worker_processes_never_claim_a_paused_kind(conn, dsn, run, tmp_path):
    """Four worker processes on their own connections: while charge_card is paused they
    claim every other job and none of it; paused while they run, no claim of it starts after
    the pause committed; resumed, they claim it all."""
    ids = kinded(conn, run, per_kind=150)
    assert run("pause", "--kind", "charge_card", "--reason", "provider down").code == 0
    stop = tmp_path / "stop"
    procs = workers(dsn, 4, stop)
    try:
        wait_for(lambda: by_kind(conn).get(("send_email", "done")) == 150)
        wait_for(lambda: by_kind(conn).get(("resize_image", "done")) == 150)
        time.sleep(0.3)  # the workers keep polling: still nothing of the paused kind
        assert by_kind(conn)[("charge_card", "queued")] == 150
        # pause another kind while they run: what is claimed after the pause commits is none
        more = conn.execute(
            "INSERT INTO jobs (kind, queue, recovery_policy) SELECT 'send_email', 'main', "
            "'auto' FROM generate_series(1, 2000) RETURNING id"
        ).fetchall()
        wait_for(lambda: by_kind(conn).get(("send_email", "done"), 0) > 200)
        assert run("pause", "--kind", "send_email", "--reason", "mid-flight").code == 0
        # a claim already running when the pause committed read the pauses before it (its
        # statement's snapshot) and may still take one: let those end, then count
        time.sleep(0.3)
        taken = conn.execute(
            "SELECT count(*) AS n FROM jobs WHERE kind = 'send_email' AND status <> 'queued'"
        ).fetchone()["n"]
        time.sleep(0.5)
        assert (
            conn.execute(
                "SELECT count(*) AS n FROM jobs WHERE kind = 'send_email' AND status <> 'queued'"
            ).fetchone()["n"]
            == taken
        )
        assert taken < 150 + len(more)  # some wait
        assert run("resume", "--kind", "charge_card", "--reason", "provider back").code == 0
        assert run("resume", "--kind", "send_email").code == 0
        wait_for(lambda: set(by_kind(conn)) == {(k, "done") for k in KINDS})
    finally:
        stop.touch()
        outs = [p.communicate(timeout=30) for p in procs]
    claimed = [i for out, err in outs for i in json.loads(out or "null") or []]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert len(claimed) == len(set(claimed)) == 450 + len(more)  # each job once
    assert set(ids["charge_card"]) <= set(claimed)


def test_a_worker_reads_the_pauses_once_a_second_and_claims_by_them(conn, dsn, run):
    """lease.Worker reads the table's pauses at most once every PAUSES_READ_EVERY seconds
    (not once per claim) and claims by its copy, given as a parameter; a pause written
    behind its back is honoured from its next read on; jobctl pause returns only after
    that, so when it says so no Worker claims the kind."""
    kinded(conn, run, per_kind=200)
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w-cached")
        ran: list[str] = []
        run_statement = worker._run

        def counted(name, params):
            ran.append(name)
            return run_statement(name, params)

        worker._run = counted  # type: ignore[method-assign]
        started = time.monotonic()
        for _ in range(50):
            assert worker.claim() is not None
        if time.monotonic() - started < lease.PAUSES_READ_EVERY:  # (a slow machine: skip)
            assert ran.count("pause_keys_read") == 1
        assert set(ran) == {"pause_keys_read", "claim_by_pauses_read"}

        # a pause recorded behind the Worker's back (not by jobctl pause, which waits)
        conn.execute(
            "INSERT INTO jobctl.pauses (job_table, dimension, value, reason) "
            "VALUES (%s, 'kind', 'charge_card', 'by hand')",
            (worker.table.qualified,),
        )
        time.sleep(lease.PAUSES_READ_EVERY)
        ran.clear()
        claimed = [worker.claim() for _ in range(600)]
        assert ran.count("pause_keys_read") >= 1
        kinds = conn.execute(
            "SELECT kind FROM jobs WHERE id = ANY(%s)", ([j.id for j in claimed if j],)
        ).fetchall()
        assert {r["kind"] for r in kinds} == {"send_email", "resize_image"}
        assert by_kind(conn)[("charge_card", "queued")] == 200

        # resumed by hand: claimed again once the Worker reads the pauses again
        conn.execute("DELETE FROM jobctl.pauses")
        time.sleep(lease.PAUSES_READ_EVERY)
        job = worker.claim()
        assert job is not None
        assert conn.execute("SELECT kind FROM jobs WHERE id = %s", (job.id,)).fetchone() == {
            "kind": "charge_card"
        }

        # jobctl pause waits out the Workers' copies: its next claim passes the kind over
        assert worker.claim() is not None  # (its copy: nothing paused, read just now)
        assert run("pause", "--kind", "charge_card", "--reason", "provider down").code == 0
        assert worker.claim() is None


def test_the_rendered_claim_prepared_honours_the_pause(conn, dsn, run):
    """The claim as schema statements renders it for a worker in another language, PREPAREd
    and EXECUTEd with text parameters (and sent through libpq with $n): it passes over the
    paused kind; resumed, it claims it."""
    kinded(conn, run)
    statements = {s["name"]: s for s in json.loads(run("schema", "statements", "-o", "json").out)}
    claim = statements["claim"]
    assert "jobctl.pauses" in claim["sql"] and claim["params"] == [
        "worker",
        "token",
        "lease_seconds",
    ]
    assert run("pause", "--kind", "charge_card", "--reason", "provider down").code == 0
    with psycopg.connect(dsn, autocommit=True, row_factory=rows.dict_row) as c:
        c.execute(f"PREPARE claim AS {claim['sql']}")
        got = []
        with psycopg.ClientCursor(c, row_factory=rows.dict_row) as cur:
            for _ in range(5):
                cur.execute("EXECUTE claim(%s, %s, %s)", ("w-go", str(uuid.uuid4()), 30))
                got += cur.fetchall()
        assert len(got) == 5
        result = c.pgconn.exec_params(
            claim["sql"].encode(), [b"w-go", str(uuid.uuid4()).encode(), b"30"]
        )
        assert result.ntuples == 1  # the sixth and last unpaused job
        result = c.pgconn.exec_params(
            claim["sql"].encode(), [b"w-go", str(uuid.uuid4()).encode(), b"30"]
        )
        assert result.ntuples == 0  # only the paused kind is left
        assert by_kind(conn)[("charge_card", "queued")] == 3
        assert run("resume", "--kind", "charge_card").code == 0
        with psycopg.ClientCursor(c, row_factory=rows.dict_row) as cur:
            cur.execute("EXECUTE claim(%s, %s, %s)", ("w-go", str(uuid.uuid4()), 30))
            assert len(cur.fetchall()) == 1
    assert by_kind(conn)[("charge_card", "processing")] == 1


def test_reclaim_requeues_an_expired_job_of_a_paused_kind_to_wait(conn, dsn, run):
    """Expired while its kind is paused: reclaim requeues it as usual (no attempt burnt on a
    claim); it waits, unclaimed, until resume."""
    ids = kinded(conn, run, per_kind=1)
    with psycopg.connect(dsn, autocommit=True) as c:
        zombie = lease.Worker(c, "w-dead", lease_seconds=-60)
        assert all(zombie.claim() is not None for _ in range(3))
    assert run("pause", "--kind", "charge_card", "--reason", "provider down").code == 0
    done = json.loads(run("reclaim", "--commit", "--yes", "-o", "json").out)
    assert {r["action"] for r in done} == {"requeue"} and len(done) == 3
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w2")
        got = [worker.claim() for _ in range(3)]
    assert sorted(j.id for j in got if j is not None) == sorted(
        ids["send_email"] + ids["resize_image"]
    )
    row = conn.execute(
        "SELECT status, attempts FROM jobs WHERE id = %s", (ids["charge_card"][0],)
    ).fetchone()
    assert (row["status"], row["attempts"]) == ("queued", 1)


def test_pause_and_resume_in_events_with_actor_and_reason(conn, dsn, run):
    ids = kinded(conn, run, per_kind=1)
    with psycopg.connect(dsn, autocommit=True) as c:
        zombie = lease.Worker(c, "w-dead", lease_seconds=-60)
        assert zombie.claim() is not None
    assert run("pause", "--kind", "charge_card", "--reason", "provider down").code == 0
    assert run("reclaim", "--commit", "--yes").code == 0
    assert run("pause", "--queue", "main", "--reason", "deploy").code == 0
    assert run("resume", "--kind", "charge_card", "--reason", "provider back").code == 0
    found = json.loads(run("events", "-o", "json").out)
    expired = "lease expired before completion"
    assert [(e["event"], e["id"], e["kind"], e["queue"], e["reason"]) for e in found] == [
        ("resumed", None, "charge_card", None, "provider back"),
        ("paused", None, None, "main", "deploy"),
        ("reclaimed", ids["send_email"][0], "send_email", "main", expired),
        ("paused", None, "charge_card", None, "provider down"),
    ]
    assert {e["actor"] for e in found} == {"tester@ci"} and all(e["db_role"] for e in found)
    oldest = json.loads(run("events", "--oldest-first", "--limit", "2", "-o", "json").out)
    assert [e["event"] for e in oldest] == ["paused", "reclaimed"]
    only = json.loads(run("events", "--event", "paused", "-o", "json").out)
    assert [e["reason"] for e in only] == ["deploy", "provider down"]
    kind = json.loads(run("events", "--kind", "charge_card", "-o", "json").out)
    assert [e["event"] for e in kind] == ["resumed", "paused"]
    assert json.loads(run("events", "--worker", "w-dead", "-o", "json").out)[0]["event"] == (
        "reclaimed"
    )
    assert len(json.loads(run("events", "--worker", "w-dead", "-o", "json").out)) == 1
    table = run("events").out
    assert "provider down" in table and "paused" in table


def test_schema_remove_columns_takes_the_tables_pauses_with_it(conn, dsn, run):
    """A table's pauses go with its recorded names: the lease design applied anew starts with
    none (no worker's claim stops unseen), each recorded as resumed; another table's stay."""
    kinded(conn, run)
    conn.execute("CREATE TABLE other (LIKE jobs INCLUDING ALL)")
    result = run("--table", "other", "schema", "apply", "--column", "kind=kind", "--yes")
    assert result.code == 0, result.err
    for table in ("jobs", "other"):
        paused = run("--table", table, "pause", "--kind", "charge_card", "--reason", "x")
        assert paused.code == 0, paused.err
    removed = run("schema", "remove", "--columns", "--yes")
    assert removed.code == 0, removed.err
    left = conn.execute("SELECT job_table FROM jobctl.pauses ORDER BY 1").fetchall()
    assert [r["job_table"] for r in left] == ["public.other"]
    last = conn.execute(
        "SELECT value, event, reason FROM jobctl.pause_events"
        " WHERE job_table = 'public.jobs' ORDER BY event_id DESC LIMIT 1"
    ).fetchone()
    assert last == {"value": "charge_card", "event": "resumed", "reason": "jobctl schema remove"}
    again = run("schema", "apply", "--column", "kind=kind", "--yes")
    assert again.code == 0, again.err
    assert json.loads(run("pause", "--list", "-o", "json").out) == []
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w1")
        assert sum(worker.claim() is not None for _ in range(9)) == 9

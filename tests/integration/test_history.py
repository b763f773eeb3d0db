"""The history's modes, jobctl's own audit, forgery, and the migration from version 1."""

from __future__ import annotations

import hashlib
import json
import uuid
from importlib import resources

import psycopg
import pytest
from helpers import add_jobs, claim_all, grant_roles
from psycopg import conninfo

from jobctl import db, lease
from jobctl.schema import history
from jobctl.schema import steps as schema_steps
from jobctl.sql import queries

OPERATOR_ACTIONS = ("reclaimed", "requeued", "manually_failed", "quarantined", "policy_changed")


def events(conn, *kinds: str) -> list[dict]:
    return conn.execute(
        "SELECT * FROM jobctl.events WHERE %s::text[] IS NULL OR event = ANY(%s::text[]) "
        "ORDER BY event_id",
        (list(kinds) or None, list(kinds) or None),
    ).fetchall()


def operator_actions(conn, dsn, run) -> dict[str, int]:
    """Each of jobctl's writes once, on its own job: event -> job id."""
    ids = add_jobs(conn, 4, max_attempts=5)
    claim_all(dsn, 3, lease_seconds=-60)  # jobs 1-3 expired
    assert run("reclaim", "--commit", "--yes", "--id", str(ids[0])).code == 0
    assert run("requeue", str(ids[1]), "--reason", "retry it", "--yes").code == 0
    assert run("fail", str(ids[2]), "--reason", "give up", "--yes").code == 0
    conn.execute("UPDATE jobs SET reclaim_count = 3 WHERE id = %s", (ids[3],))
    quarantine = run("quarantine", "--min-reclaims", "3", "--commit", "--yes", "-o", "json")
    assert [r["id"] for r in json.loads(quarantine.out)] == [ids[3]]
    assert run("policy", str(ids[3]), "--auto", "--reason", "fixed", "--yes").code == 0
    return dict(zip(OPERATOR_ACTIONS, [ids[0], ids[1], ids[2], ids[3], ids[3]], strict=True))


def plpgsql_calls(c: psycopg.Connection) -> int:
    """The calls of jobctl's functions in ``c``'s transaction (track_functions = 'pl')."""
    row = c.execute(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
        "WHERE schemaname = 'jobctl'"
    ).fetchone()
    return int(row[0])


def worker_cycle(dsn: str, heartbeats: int = 2) -> lease.Claim:
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w1", lease_seconds=60)
        job = worker.claim()
        assert job is not None
        for _ in range(heartbeats):
            job = worker.heartbeat(job)
        worker.complete(job)
    return job


def test_manual_actions_audited_without_worker_history(conn, dsn, run):
    applied = run("schema", "apply", "--no-worker-history", "--yes")
    assert applied.code == 0, applied.err
    check = {c["check"]: c for c in json.loads(run("schema", "check", "-o", "json").out)}
    assert check["history installed"]["ok"]
    assert "operator audit only" in check["history installed"]["detail"]
    add_jobs(conn, 1)
    worker_cycle(dsn)  # the workers' statements record nothing
    assert events(conn) == []
    assert conn.execute("SELECT count(*) AS n FROM jobctl.attempts").fetchone()["n"] == 0
    tokens = {
        r["id"]: r["attempt_token"] for r in conn.execute("SELECT id, attempt_token FROM jobs")
    }
    done = operator_actions(conn, dsn, run)
    recorded = events(conn)
    assert [e["event"] for e in recorded] == list(OPERATOR_ACTIONS)
    for e in recorded:
        assert e["job_id"] == str(done[e["event"]]) and e["actor"] == "tester@ci"
        assert e["db_role"] == "postgres"
    by_kind = {e["event"]: e for e in recorded}
    assert by_kind["requeued"]["reason"] == "retry it"
    assert by_kind["manually_failed"]["reason"] == "give up"
    assert (by_kind["reclaimed"]["from_status"], by_kind["reclaimed"]["to_status"]) == (
        "processing",
        "queued",
    )
    assert by_kind["requeued"]["attempt_token"] is not None
    assert by_kind["quarantined"]["from_status"] == by_kind["quarantined"]["to_status"]
    assert tokens  # read before the actions
    story = json.loads(run("history", str(done["requeued"]), "-o", "json").out)
    assert [e["event"] for e in story["events"]] == ["requeued"]
    assert story["events"][0]["actor"] == "tester@ci"


@pytest.mark.parametrize("mode", ["transitions", "late", "exact"])
def test_no_double_events_with_the_worker_history(conn, dsn, run, mode):
    assert run("schema", "apply", "--history", mode, "--yes").code == 0
    done = operator_actions(conn, dsn, run)
    recorded = events(conn)
    assert [e["event"] for e in recorded] == list(OPERATOR_ACTIONS)
    assert [e["job_id"] for e in recorded] == [str(done[k]) for k in OPERATOR_ACTIONS]
    ended = conn.execute(
        "SELECT job_id, outcome FROM jobctl.attempts ORDER BY job_id::bigint"
    ).fetchall()
    assert [(a["job_id"], a["outcome"]) for a in ended] == [
        (str(done["reclaimed"]), "reclaimed"),
        (str(done["requeued"]), "requeued"),
        (str(done["manually_failed"]), "manually_failed"),
    ]
    story = json.loads(run("history", str(done["requeued"]), "-o", "json").out)
    assert [e["event"] for e in story["events"]] == ["claimed", "requeued"]


def test_routine_statements_never_call_the_trigger(conn, dsn, run):
    """Late mode: a claim and on-time heartbeats run no plpgsql; a late heartbeat and the
    completion do, once each (counted by the server, in the worker's own transaction)."""
    assert run("schema", "apply", "--history", "late", "--yes").code == 0
    add_jobs(conn, 1)
    jobs = db.resolve_table(conn, "jobs").fragments
    with psycopg.connect(dsn) as c:  # one transaction: now() stands still, heartbeats on time
        c.execute("SET LOCAL track_functions = 'pl'")
        params = {"worker": "w1", "lease": "60 s", "attempt_token": uuid.uuid4()}
        (job_id, *_) = c.execute(queries.query("claim", **jobs), params).fetchone()
        for _ in range(3):
            assert c.execute(queries.query("heartbeat", **jobs), params | {"id": job_id}).rowcount

        assert plpgsql_calls(c) == 0
        c.execute(  # 40 s after the last heartbeat, of a 60 s lease: late
            "UPDATE jobs SET heartbeat_at = heartbeat_at + interval '40 s', "
            "lease_expires_at = heartbeat_at + interval '100 s'"
        )
        assert plpgsql_calls(c) == 1
        assert c.execute(queries.query("complete", **jobs), params | {"id": job_id}).rowcount
        assert plpgsql_calls(c) == 2
    (attempt,) = conn.execute("SELECT * FROM jobctl.attempts").fetchall()
    assert attempt["heartbeats"] == 1 and attempt["heartbeat_stats"] == "late"
    assert attempt["max_heartbeat_gap"].total_seconds() == 40
    assert attempt["outcome"] == "completed" and attempt["last_heartbeat_at"] is not None
    row = conn.execute("SELECT jobctl_attempt, jobctl_heartbeats, jobctl_action FROM jobs")
    assert row.fetchone() == {
        "jobctl_attempt": None,
        "jobctl_heartbeats": None,
        "jobctl_action": None,
    }


def test_the_default_mode_calls_no_plpgsql_on_the_workers_cycle(conn, dsn, run):
    """transitions (a first install's mode): a claim, heartbeats on time or late and the
    completion call nothing; a worker's retry does, once, and records the attempt it ended."""
    assert history.table_state(conn, db.resolve_table(conn, "jobs").oid).mode == "transitions"
    add_jobs(conn, 2)
    jobs = db.resolve_table(conn, "jobs").fragments
    with psycopg.connect(dsn) as c:
        c.execute("SET LOCAL track_functions = 'pl'")

        for outcome in ("complete", "worker_fail"):
            params = {"worker": "w1", "lease": "60 s", "attempt_token": uuid.uuid4()}
            (job_id, *_) = c.execute(queries.query("claim", **jobs), params).fetchone()
            params |= {"id": job_id, "error": "boom", "retry_delay": "0 s"}
            for _ in range(2):
                assert c.execute(queries.query("heartbeat", **jobs), params).rowcount
            c.execute(  # 40 s after the last heartbeat, of a 60 s lease: late
                "UPDATE jobs SET heartbeat_at = heartbeat_at + interval '40 s', "
                "lease_expires_at = heartbeat_at + interval '100 s' WHERE id = %s",
                (job_id,),
            )
            assert plpgsql_calls(c) == 0
            assert c.execute(queries.query(outcome, **jobs), params).rowcount
        assert plpgsql_calls(c) == 1  # the retry
    (ended,) = conn.execute("SELECT * FROM jobctl.attempts").fetchall()
    assert (ended["outcome"], ended["worker"], ended["heartbeat_stats"]) == (
        "retried",
        "w1",
        "transitions",
    )
    assert ended["last_heartbeat_at"] is not None and ended["job_id"] == "2"
    (retried,) = events(conn)
    assert (retried["event"], retried["reason"]) == ("retried", "boom")


def test_the_default_mode_tells_a_completion_from_the_row(conn, dsn, run):
    """A completion is not recorded in transitions mode: history and explain show the
    attempt the row says completed, without inventing who ran it."""
    add_jobs(conn, 1)
    worker_cycle(dsn)
    assert conn.execute("SELECT count(*) AS n FROM jobctl.attempts").fetchone()["n"] == 0
    story = json.loads(run("history", "1", "-o", "json").out)
    (attempt,) = story["attempts"]
    assert (attempt["outcome"], attempt["attempt"], attempt["worker"]) == ("completed", 1, None)
    assert attempt["ended_at"] is not None
    assert [e["event"] for e in story["events"]] == ["completed"]
    text = run("explain", "1").out
    assert "it completed (attempt 1; the default history does not record" in text
    assert "schema apply --history late" in text
    assert run("schema", "apply", "--history", "late", "--yes").code == 0
    add_jobs(conn, 1)
    worker_cycle(dsn)  # job 2, now recorded: worker and claim shown
    story = json.loads(run("history", "2", "-o", "json").out)
    assert [e["event"] for e in story["events"]] == ["claimed", "completed"]
    assert story["attempts"][0]["worker"] == "w1"


@pytest.mark.parametrize("mode", ["exact", "late"])
def test_a_mode_switch_does_not_rewrite_the_past(conn, dsn, run, mode):
    """A job completed under the default mode keeps its completed event in history and
    explain after a switch to a mode that records completions; a job completed after the
    switch has its recorded one, once."""
    add_jobs(conn, 1)
    worker_cycle(dsn)
    before = json.loads(run("history", "1", "-o", "json").out)
    assert [e["event"] for e in before["events"]] == ["completed"]
    assert run("schema", "apply", "--history", mode, "--yes").code == 0
    after = json.loads(run("history", "1", "-o", "json").out)
    assert after["events"] == before["events"] and after["attempts"] == before["attempts"]
    assert "it completed (attempt 1" in run("explain", "1").out
    add_jobs(conn, 1)
    worker_cycle(dsn)
    story = json.loads(run("history", "2", "-o", "json").out)
    assert [e["event"] for e in story["events"]] == ["claimed", "completed"]
    assert [a["worker"] for a in story["attempts"]] == ["w1"]
    # and back to the default: job 2's recorded completion stays, not doubled
    assert run("schema", "apply", "--history", "transitions", "--yes").code == 0
    again = json.loads(run("history", "2", "-o", "json").out)
    assert [e["event"] for e in again["events"]] == ["claimed", "completed"]


def test_schema_apply_keeps_the_installed_mode(conn, run):
    def mode() -> str | None:
        return history.table_state(conn, db.resolve_table(conn, "jobs").oid).mode

    assert mode() == "transitions"
    assert run("schema", "apply", "--history", "late", "--yes").code == 0
    assert run("schema", "apply", "--yes").code == 0
    assert mode() == "late"
    assert history.DESCRIBE["late"] in run("schema", "check", "-o", "json").out
    assert run("schema", "apply", "--history", "transitions", "--yes").code == 0
    assert mode() == "transitions"
    assert history.DESCRIBE["transitions"] in run("schema", "check", "-o", "json").out


def trigger_columns(conn) -> list[str]:
    """The columns the history trigger is limited to (UPDATE OF ...); [] for every UPDATE."""
    return [
        r["attname"]
        for r in conn.execute(
            "SELECT a.attname::text FROM pg_trigger t, unnest(t.tgattr) AS k(attnum) "
            "JOIN pg_attribute a ON a.attnum = k.attnum "
            "WHERE t.tgname = 'jobctl_history' AND t.tgrelid = 'jobs'::regclass "
            "AND a.attrelid = 'jobs'::regclass ORDER BY a.attname"
        )
    ]


def test_the_default_trigger_fires_only_on_updates_naming_the_status(conn, dsn, run):
    """transitions and audit are limited to UPDATEs whose SET names the status or
    jobctl_action (a heartbeat never evaluates the WHEN); late and exact see every UPDATE.
    A trigger made before the limit is out of date, and apply replaces it."""
    assert trigger_columns(conn) == ["jobctl_action", "status"]
    assert run("schema", "apply", "--history", "audit", "--yes").code == 0
    assert trigger_columns(conn) == ["jobctl_action"]
    assert run("schema", "apply", "--history", "late", "--yes").code == 0
    assert trigger_columns(conn) == []
    assert run("schema", "apply", "--history", "transitions", "--yes").code == 0

    # an application's own status change names the status: recorded
    (job_id,) = add_jobs(conn, 1)
    conn.execute("UPDATE jobs SET status = 'failed' WHERE id = %s", (job_id,))
    (event,) = events(conn, "status_changed")
    assert (event["job_id"], event["to_status"]) == (str(job_id), "failed")

    # the trigger as the previous release made it: every UPDATE, its digest made of the
    # version, the body and the WHEN
    made = conn.execute(
        "SELECT pg_get_triggerdef(oid) AS made FROM pg_trigger WHERE tgname = 'jobctl_history'"
    ).fetchone()["made"]
    target = history.Target.of(db.resolve_table(conn, "jobs"))
    want = history.wanted(conn, target, "transitions")
    made_of = f"{history.TRIGGER_VERSION}\x00{want.body}\x00{want.when}"
    previous = hashlib.sha256(made_of.encode()).hexdigest()[:16]
    old = made.replace("UPDATE OF status, jobctl_action ON", "UPDATE ON", 1)
    old = old.replace("CREATE TRIGGER", "CREATE OR REPLACE TRIGGER", 1)
    conn.execute(old.replace(want.digest, previous, 1))
    assert trigger_columns(conn) == []
    check = {c["check"]: c for c in json.loads(run("schema", "check", "-o", "json").out)}
    assert not check["history installed"]["ok"]
    assert run("schema", "apply", "--yes").code == 0
    assert trigger_columns(conn) == ["jobctl_action", "status"]


FORGERIES = [
    "INSERT INTO jobctl.events (job_table, job_id, event) VALUES ('public.jobs', 1, 'requeued')",
    "UPDATE jobctl.events SET actor = 'someone else'",
    "DELETE FROM jobctl.events",
    "TRUNCATE jobctl.events",
    "INSERT INTO jobctl.attempts (attempt_token, job_table, job_id, claimed_at) "
    "VALUES (gen_random_uuid(), 'public.jobs', 1, now())",
    "DELETE FROM jobctl.attempts",
    "INSERT INTO jobctl.migrations VALUES (99, 'x')",
    # attaching the table's trigger function to a table of one's own
    "CREATE TEMP TABLE fake (LIKE jobs); CREATE TRIGGER t BEFORE UPDATE ON fake FOR EACH ROW "
    f"EXECUTE FUNCTION jobctl.{history.function_name('public', 'jobs')}('late', '3', 'x')",
    f"SELECT jobctl.{history.function_name('public', 'jobs')}()",
    # jobctl_action describing a change that is not happening
    "UPDATE jobs SET jobctl_action = 'requeued' WHERE id = 1",
    "UPDATE jobs SET jobctl_action = 'reclaimed', status = 'queued' WHERE id = 2",
    "UPDATE jobs SET jobctl_action = 'quarantined', updated_at = now() WHERE id = 3",
]


def test_nothing_can_forge_an_event(roles, conn, dsn, run):
    add_jobs(conn, 3)
    claim_all(dsn, 3, lease_seconds=-60)
    granted = run(
        "schema", "grants", "--readonly", roles["readonly"], "--operator", roles["operator"]
    )
    assert granted.code == 2  # no --yes
    granted = grant_roles(run, roles)
    assert granted.code == 0, granted.err

    def rows():
        return (
            conn.execute("SELECT * FROM jobctl.events ORDER BY event_id").fetchall(),
            conn.execute("SELECT * FROM jobctl.attempts ORDER BY attempt_token").fetchall(),
        )

    before = rows()
    for role in roles.values():
        as_role = conninfo.make_conninfo(dsn, user=role)
        for statement in FORGERIES:
            with psycopg.connect(as_role, autocommit=True) as c, pytest.raises(psycopg.Error):
                c.execute(statement)
    assert rows() == before

    # what the operator can do: a real change, recorded as it happened, under its own role
    operator = conninfo.make_conninfo(dsn, user=roles["operator"])
    with psycopg.connect(operator) as c:
        c.execute("SELECT set_config('jobctl.actor', 'not me', true)")
        c.execute(
            "UPDATE jobs SET status = 'queued', attempt_token = NULL, lease_expires_at = NULL, "
            "jobctl_action = 'requeued' WHERE id = 1"
        )
    (event,) = events(conn, "requeued")
    assert (event["from_status"], event["to_status"]) == ("processing", "queued")
    assert event["actor"] == "not me" and event["db_role"] == roles["operator"]
    assert event["attempt_token"] is not None
    assert conn.execute("SELECT jobctl_action FROM jobs WHERE id = 1").fetchone() == {
        "jobctl_action": None
    }


# version 1's triggers, as jobctl 0.2 installed them
V1_TRIGGERS = """
CREATE OR REPLACE TRIGGER jobctl_history_insert AFTER INSERT ON jobs
    FOR EACH ROW WHEN (NEW.status = 'processing')
    EXECUTE FUNCTION jobctl.record_transition();
CREATE OR REPLACE TRIGGER jobctl_history_update AFTER UPDATE ON jobs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       OR OLD.attempt_token IS DISTINCT FROM NEW.attempt_token
                       OR OLD.heartbeat_at IS DISTINCT FROM NEW.heartbeat_at
                       OR coalesce(current_setting('jobctl.action', true), '') <> '')
    EXECUTE FUNCTION jobctl.record_transition()
"""
V1_RECLAIM = """
UPDATE jobs SET status = 'queued', reserved_by = NULL, reserved_at = NULL,
    heartbeat_at = NULL, lease_expires_at = NULL, attempt_token = NULL,
    reclaim_count = reclaim_count + 1, last_error = 'lease expired before completion'
WHERE status = 'processing' AND lease_expires_at < now()
"""


def install_version_1(conn) -> None:
    """Today's database of a jobctl 0.2 user: the unversioned history, its two triggers."""
    conn.execute("DROP TRIGGER jobctl_history ON jobs")
    conn.execute("DROP SCHEMA jobctl CASCADE")
    conn.execute("ALTER TABLE jobs " + ", ".join(f"DROP COLUMN {c}" for c in history.COLUMNS))
    v1 = resources.files("jobctl").joinpath("sql/history/001_events_attempts.sql")
    conn.execute(v1.read_text(encoding="utf-8"))
    conn.execute(V1_TRIGGERS)


def test_migration_from_version_1_keeps_the_history(conn, dsn, run):
    install_version_1(conn)
    add_jobs(conn, 4)
    completed = worker_cycle(dsn, heartbeats=2)  # job 1: claimed, 2 heartbeats, completed
    claim_all(dsn, 1, lease_seconds=-60)  # job 2: reclaimed, then requeued by hand (0.2's way)
    conn.execute(V1_RECLAIM)
    with conn.transaction():
        conn.execute("SELECT set_config('jobctl.action', 'fail', true)")
        conn.execute("UPDATE jobs SET status = 'failed' WHERE id = 2")
    with psycopg.connect(dsn, autocommit=True) as c:  # job 3: live across the migration
        worker = lease.Worker(c, "w3", lease_seconds=60)
        live = worker.claim()
        assert live is not None
        for _ in range(2):
            live = worker.heartbeat(live)
    old_events = conn.execute("SELECT * FROM jobctl.events ORDER BY event_id").fetchall()
    old_attempts = conn.execute("SELECT * FROM jobctl.attempts ORDER BY claimed_at").fetchall()
    assert [e["event"] for e in old_events] == [
        "claimed",
        "completed",
        "claimed",
        "reclaimed",
        "manually_failed",
        "claimed",
    ]
    assert run("schema", "check").code == 4  # version 1: apply migrates it

    plan = run("schema", "apply", "--sql").out
    assert "history migration 001" in plan and "history migration 002" in plan
    applied = run("schema", "apply", "--yes")
    assert applied.code == 0, applied.err
    assert run("schema", "check").code == 0
    versions = conn.execute("SELECT version FROM jobctl.migrations ORDER BY 1").fetchall()
    assert [v["version"] for v in versions] == [m.version for m in history.migrations()]
    assert "history" not in run("schema", "apply", "--sql").out  # nothing left to do
    shared = "SELECT proname FROM pg_proc WHERE proname IN ('record_transition', 'record_change')"
    assert conn.execute(shared).fetchall() == []  # the replaced triggers' functions dropped

    kept = conn.execute("SELECT * FROM jobctl.events ORDER BY event_id").fetchall()
    added = ("db_role", "claimed", "worker_bytes", "reason_bytes")  # by versions 2, 5 and 9
    assert [{k: v for k, v in e.items() if k not in added} for e in kept] == [
        e | {"job_id": str(e["job_id"])}
        for e in old_events  # ids are text since version 4
    ]
    attempts = conn.execute("SELECT * FROM jobctl.attempts ORDER BY claimed_at").fetchall()
    assert [a["attempt_token"] for a in attempts] == [a["attempt_token"] for a in old_attempts]

    # job 1: its stored claim and completion, not twice
    story = json.loads(run("history", "1", "-o", "json").out)
    assert [e["event"] for e in story["events"]] == ["claimed", "completed"]
    assert story["attempts"][0]["heartbeats"] == 2
    assert story["attempts"][0]["attempt_token"] == str(completed.attempt_token)

    # job 3 carries on under the new trigger: its attempt keeps version 1's counts
    shown = json.loads(run("history", "3", "-o", "json").out)
    (running,) = shown["attempts"]
    assert running["ended_at"] is None and running["worker"] == "w3"
    assert [e["event"] for e in shown["events"]] == ["claimed"]
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w3", lease_seconds=60)
        live = worker.heartbeat(live)
        worker.complete(live)
    rows = conn.execute(
        "SELECT * FROM jobctl.attempts WHERE attempt_token = %s ORDER BY ended_at NULLS FIRST",
        (live.attempt_token,),
    ).fetchall()  # version 1's open row (2 heartbeats), and the row of its end
    assert [(r["heartbeats"], r["outcome"]) for r in rows] == [(2, None), (0, "completed")]
    shown = json.loads(run("history", "3", "-o", "json").out)
    (ended,) = shown["attempts"]
    assert ended["outcome"] == "completed" and ended["ended_at"] is not None
    assert ended["claimed_at"] == running["claimed_at"] and ended["heartbeat_stats"] == "late"
    assert [e["event"] for e in shown["events"]] == ["claimed", "completed"]

    # and jobctl's own writes are audited by the new trigger
    claim_all(dsn, 1, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    assert [e["event"] for e in events(conn, "reclaimed")] == ["reclaimed", "reclaimed"]


def test_migration_008_builds_its_index_concurrently_and_an_invalid_one_again(empty_dsn, run):
    """History 008 runs outside a transaction (its header line ``-- jobctl: concurrently``):
    its index built CONCURRENTLY, then its record in a transaction of its own; the --sql script
    prints it so. An invalid index of its name, left by an interrupted build (which IF NOT
    EXISTS would keep), is dropped and built again."""
    assert [m.version for m in history.migrations() if m.concurrently] == [8, 14]
    settings = db.Settings(dsn=empty_dsn)
    with db.connect(settings) as c:  # a database at history 007, as 0.1.0 left it
        for m in history.migrations():
            if m.version <= 7:
                steps = history.migration_steps(c, m, locks="jobctl.events")
                schema_steps.apply(c, settings, steps)
        c.execute(
            "INSERT INTO jobctl.events (job_table, job_id, event) "
            "VALUES ('public.jobs', '1', 'reclaimed'), ('public.jobs', '2', 'reclaimed')"
        )
        with pytest.raises(psycopg.errors.UniqueViolation):  # an interrupted build
            c.execute(
                "CREATE UNIQUE INDEX CONCURRENTLY events_reclaimed_idx ON jobctl.events (job_table)"
            )

        script = run("schema", "apply", "--create", "--sql").out
        what = "history migration 008 (reclaimed_index)"
        assert (
            f"-- drop the invalid index jobctl.events_reclaimed_idx (left by an interrupted "
            f"concurrent build of {what}): takes a lock the workers wait for; retry on lock "
            "timeout\nBEGIN;\nSET LOCAL search_path = pg_catalog, pg_temp;\n"
            "SET LOCAL lock_timeout = '150ms';\n"
            'DROP INDEX IF EXISTS "jobctl"."events_reclaimed_idx";\nCOMMIT;\n\n'
            f"-- {what}: build jobctl.events_reclaimed_idx concurrently (the workers go on)\n"
            "-- jobctl: concurrently\n"
        ) in script
        build = script.split(f"-- {what}: build")[1].split("\n\n-- ")[0]
        assert "BEGIN" not in build and "COMMIT" not in build
        assert build.endswith(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS events_reclaimed_idx\n"
            "    ON jobctl.events (job_table, to_status, job_id) INCLUDE (at)\n"
            "    WHERE event OPERATOR(pg_catalog.=) 'reclaimed';"
        )
        assert (
            f"\n\n-- record {what}\nBEGIN;\nSET LOCAL search_path = pg_catalog, pg_temp;\n"
            "CREATE TABLE IF NOT EXISTS jobctl.migrations ("
        ) in script

        applied = run("schema", "apply", "--create", "--yes")
        assert applied.code == 0, applied.err
        for done in (
            "drop the invalid index jobctl.events_reclaimed_idx",
            f"{what}: build jobctl.events_reclaimed_idx concurrently",
            f"record {what}",
        ):
            assert f"done: {done}" in applied.err
        index = c.execute(
            "SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) AS def FROM pg_index i "
            "WHERE i.indexrelid = 'jobctl.events_reclaimed_idx'::regclass"
        ).fetchone()
        assert index is not None and index["indisvalid"]
        assert index["def"].endswith(
            "USING btree (job_table, to_status, job_id) INCLUDE (at) "
            "WHERE (event = 'reclaimed'::text)"
        )
        recorded = c.execute("SELECT version, checksum FROM jobctl.migrations").fetchall()
        (eighth,) = [m for m in history.migrations() if m.version == 8]
        assert {"version": 8, "checksum": eighth.checksum} in recorded
        assert run("schema", "check").code == 0
        assert "history" not in run("schema", "apply", "--sql").out  # nothing left to do

"""The reclaimer role (``schema grants --reclaimer``): it reclaims expired leases through the
table's reclaimer function, and the database refuses it every other write.

The jobs table is owned by a non-superuser application role with a trigger of its own that
records whom each UPDATE of it ran as: during the reclaimer's reclaim, never a superuser."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from helpers import RECORD_ROLE, add_jobs
from psycopg import conninfo, sql


def as_role(dsn: str, role: str) -> str:
    return conninfo.make_conninfo(dsn, user=role)


@pytest.fixture
def app_owned(dsn: str, roles: dict[str, str], run) -> Iterator[dict[str, str]]:
    """The jobs table owned by an application role with a recording trigger; the operator
    role and a reclaimer role granted as a superuser installer grants them."""
    suffix = uuid.uuid4().hex[:8]
    app, reclaimer = f"jobctl_app_{suffix}", f"jobctl_rc_{suffix}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        for name in (app, reclaimer):
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        admin.execute("ALTER TABLE jobs ADD COLUMN kind text;" + RECORD_ROLE)
        owner = sql.Identifier(app)
        admin.execute(sql.SQL("ALTER FUNCTION public.record_role() OWNER TO {}").format(owner))
        admin.execute(sql.SQL("ALTER TABLE jobs OWNER TO {}").format(owner))
    assert run("schema", "apply", "--column", "kind=kind", "--yes").code == 0
    granted = run(
        "schema", "grants", "--operator", roles["operator"], "--reclaimer", reclaimer, "--yes"
    )
    assert granted.code == 0, granted
    yield {"app": app, "reclaimer": reclaimer, "operator": roles["operator"]}
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP TABLE public.ran_as")
        for name in (app, reclaimer):
            admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(roles["operator"])))


def expire(conn: psycopg.Connection, n: int, *, manual: int = 0) -> list[int]:
    ids = add_jobs(conn, n) + add_jobs(conn, manual, policy="manual")
    conn.execute(
        "UPDATE jobs SET status = 'processing', attempt_token = gen_random_uuid(), kind = 'k',"
        " attempts = 1, reserved_by = 'w1', reserved_at = now() - interval '2 minutes',"
        " lease_expires_at = now() - interval '1 minute'"
    )
    conn.execute("DELETE FROM public.ran_as")
    return ids


def test_the_reclaimer_reclaims_expired_leases_as_the_cli_would(conn, run, dsn, app_owned):
    expire(conn, 3, manual=1)
    conn.execute("UPDATE jobs SET lease_expires_at = now() + interval '1 hour' WHERE id = 1")
    conn.execute("DELETE FROM public.ran_as")
    result = run(
        "reclaim", "--commit", "--yes", "-o", "json", dsn=as_role(dsn, app_owned["reclaimer"])
    )
    assert result.code == 0, result
    states = {r["id"]: r["status"] for r in conn.execute("SELECT id, status FROM jobs")}
    # the live lease is left; the expired auto jobs requeued, the manual one failed for review
    assert states == {1: "processing", 2: "queued", 3: "queued", 4: "failed"}
    events = conn.execute(
        "SELECT job_id, event, actor, db_role FROM jobctl.events ORDER BY job_id"
    ).fetchall()
    login = app_owned["reclaimer"]
    assert events == [
        {"job_id": str(i), "event": "reclaimed", "actor": login, "db_role": login}
        for i in (2, 3, 4)
    ]
    # the application's trigger ran as jobctl's operator role, never as a superuser
    ran = conn.execute("SELECT DISTINCT who, superuser, login FROM public.ran_as").fetchall()
    assert ran == [{"who": app_owned["operator"], "superuser": False, "login": login}]


def test_the_reclaimers_function_refuses_rows_a_trigger_kept_back_and_records_none(
    conn, run, dsn, app_owned
):
    """The function's body is reclaim_batch as installed, its refusal of a row not written as
    meant too (history 013; jobctl.refuse called as the function's owner, the operator role):
    a row the application's trigger kept back and one it put back are skipped, nothing of
    them recorded, the others reclaimed by the reclaimer."""
    expire(conn, 4)
    conn.execute("""
        CREATE FUNCTION zz_evil() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.id = 2 THEN RETURN NULL; END IF;
            IF NEW.id = 3 THEN RETURN OLD; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER zz_evil BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION zz_evil();
    """)
    before = {r["id"]: r for r in conn.execute("SELECT * FROM jobs").fetchall()}
    result = run(
        "reclaim", "--commit", "--yes", "-o", "json", dsn=as_role(dsn, app_owned["reclaimer"])
    )
    assert result.code == 1, result
    out = {r["id"]: r for r in json.loads(result.out)}
    assert "kept it back" in out[2]["skipped"] and "changed it" in out[3]["skipped"], out
    assert out[1]["applied"] and out[4]["applied"], out
    after = {r["id"]: r for r in conn.execute("SELECT * FROM jobs").fetchall()}
    assert after[2] == before[2] and after[3] == before[3]
    events = conn.execute("SELECT job_id, event FROM jobctl.events ORDER BY job_id").fetchall()
    assert events == [{"job_id": i, "event": "reclaimed"} for i in ("1", "4")]


def test_the_reclaimer_role_holds_no_update_and_the_database_refuses_the_rest(
    conn, run, dsn, app_owned
):
    expire(conn, 2)
    conn.execute("UPDATE jobs SET status = 'failed', attempt_token = NULL WHERE id = 2")
    conn.execute("UPDATE jobs SET reclaim_count = 2")  # quarantine's candidates
    conn.execute("DELETE FROM public.ran_as")
    before = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    reclaimer = as_role(dsn, app_owned["reclaimer"])
    # a write of the jobs table: the database's refusal, one line, exit 1; a policy or pause
    # per kind (schema jobctl, which only its owner writes): refused before it is tried, exit 2
    for args, code, said in (
        (["requeue", "2", "--yes", "--reason", "x"], 1, "permission denied"),
        (["fail", "1", "--force", "--yes", "--reason", "x"], 1, "permission denied"),
        (["cancel", "1", "--yes", "--reason", "x"], 1, "permission denied"),
        (["policy", "1", "--manual", "--yes", "--reason", "x"], 1, "permission denied"),
        (["quarantine", "--min-reclaims", "1", "--commit", "--yes"], 1, "permission denied"),
        (["policy", "--kind", "k", "--manual", "--yes", "--reason", "x"], 2, "schema jobctl"),
        (["pause", "--kind", "k", "--reason", "x"], 2, "schema jobctl"),
    ):
        result = run(*args, dsn=reclaimer)
        assert result.code == code, (args, result)
        line = result.err.strip()
        assert len(line.splitlines()) == 1 and said in line, (args, line)
    # the direct UPDATE too: the role holds no UPDATE of any column
    with psycopg.connect(reclaimer) as direct, pytest.raises(psycopg.errors.InsufficientPrivilege):
        direct.execute("UPDATE jobs SET status = 'queued' WHERE id = 1")
    # nor can it choose another reclaim: --park-older-than and the others are refused
    result = run("reclaim", "--commit", "--yes", "--park-older-than", "1s", dsn=reclaimer)
    assert result.code == 2 and "reclaimer role" in result.err, result
    assert conn.execute("SELECT * FROM jobs ORDER BY id").fetchall() == before
    assert conn.execute("SELECT count(*) AS n FROM public.ran_as").fetchone()["n"] == 0


def test_the_function_is_the_operators_only_the_reclaimer_executes_it_and_remove_drops_it(
    conn, run, app_owned
):
    row = conn.execute(
        "SELECT p.proname, pg_get_userbyid(p.proowner) AS owner, p.prosecdef,"
        " has_function_privilege(%s, p.oid, 'EXECUTE') AS reclaimer,"
        " has_function_privilege(%s, p.oid, 'EXECUTE') AS app"
        " FROM pg_proc p WHERE p.pronamespace = 'jobctl'::regnamespace"
        " AND p.proname LIKE 'reclaim\\_%%'",
        (app_owned["reclaimer"], app_owned["app"]),
    ).fetchone()
    assert row["owner"] == app_owned["operator"] and row["prosecdef"]
    assert row["reclaimer"] and not row["app"]
    # schema check counts it jobctl's; the superuser's commands are not refused over it
    check = run("schema", "check", "-o", "json")
    assert check.code in (0, 4), check
    ours = [c for c in json.loads(check.out) if c["check"] == "jobctl's objects are jobctl's"]
    assert ours and ours[0]["ok"], ours
    assert run("stuck").code == 0
    removed = run("schema", "remove", "--yes")
    assert removed.code == 0, removed
    assert (
        conn.execute(
            "SELECT count(*) AS n FROM pg_proc WHERE proname = %s", (row["proname"],)
        ).fetchone()["n"]
        == 0
    )


def test_no_operator_role_to_own_it_is_refused(conn, run, dsn):
    name = f"jobctl_rc_{uuid.uuid4().hex[:8]}"
    app = f"jobctl_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        for r in (name, app):
            admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(r)))
        admin.execute(sql.SQL("ALTER TABLE jobs OWNER TO {}").format(sql.Identifier(app)))
    try:
        result = run("schema", "grants", "--reclaimer", name, "--yes")
        assert result.code == 2 and "--operator ROLE" in result.err, result
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("ALTER TABLE jobs OWNER TO CURRENT_USER")
            for r in (name, app):
                admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(r)))
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(r)))


def test_a_mapping_changed_after_the_grant_is_not_reclaimed_by_the_old_function(
    conn, run, dsn, app_owned
):
    """The function's body is reclaim_batch as composed when it was granted: after schema
    apply records another mapping (a max_attempts that means no limit), the dry run says
    requeue, so the reclaimer must not fail the job by the old body. schema check names the
    stale function; granting it again makes it the reclaim the CLI would do."""
    applied = run(
        "schema", "apply", "--column", "kind=kind", "--unlimited-max-attempts", "0", "--yes"
    )
    assert applied.code == 0, applied
    expire(conn, 1)
    conn.execute("UPDATE jobs SET max_attempts = 0, attempts = 3")
    (planned,) = json.loads(run("reclaim", "--dry-run", "-o", "json").out)
    assert planned["action"] == "requeue"
    reclaimer = as_role(dsn, app_owned["reclaimer"])
    result = run("reclaim", "--commit", "--yes", "-o", "json", dsn=reclaimer)
    assert result.code == 2 and "schema grants --reclaimer" in result.err, result
    assert conn.execute("SELECT status FROM jobs").fetchone() == {"status": "processing"}
    checked = {c["check"]: c for c in json.loads(run("schema", "check", "-o", "json").out)}
    stale = checked["reclaimer function"]
    assert not stale["ok"] and "schema grants --reclaimer" in stale["detail"], stale
    granted = run(
        "schema",
        "grants",
        "--operator",
        app_owned["operator"],
        "--reclaimer",
        app_owned["reclaimer"],
        "--yes",
    )
    assert granted.code == 0, granted
    checked = {c["check"]: c for c in json.loads(run("schema", "check", "-o", "json").out)}
    assert checked["reclaimer function"]["ok"], checked["reclaimer function"]
    result = run("reclaim", "--commit", "--yes", "-o", "json", dsn=reclaimer)
    assert result.code == 0, result
    assert conn.execute("SELECT status FROM jobs").fetchone() == {"status": "queued"}

"""jobctl doctor on a PostgreSQL with pg_stat_statements preloaded, which the test
session starts itself from the run's server binaries (tests/cluster.py, as the replica tests
do): the application's statements driven through it — good ones (the worker API, jobctl's
own) and each bad kind — on the reference table and a Rails-style one, and the findings
asserted. Each test has a database of its own (the statistics are read per database)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Iterator

import cluster
import psycopg
import pytest
from shapes import BACKGROUND_TASKS, QUEUE_JOB

from jobctl import lease


@pytest.fixture(scope="session")
def statistics_server(server_dsn: str) -> Iterator[cluster.Server]:
    """A primary of the run's major version with pg_stat_statements preloaded."""
    with psycopg.connect(server_dsn) as c:
        major = int(c.execute("SHOW server_version_num").fetchone()[0]) // 10_000  # type: ignore[index]
    bindir = cluster.bindir_for(major)
    if bindir is None:
        reason = f"no PostgreSQL {major} server binaries here"
        if os.environ.get("JOBCTL_REQUIRE_REPLICA") == "1":
            pytest.fail(f"{reason}, and JOBCTL_REQUIRE_REPLICA=1")
        pytest.skip(reason)
    with cluster.replicated(bindir) as made:
        server = made.primary
        with server.connect() as c:
            available = c.execute(
                "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_stat_statements'"
            ).fetchone()[0]  # type: ignore[index]
        if not available:  # preloading a library that is not there stops the server
            reason = f"the PostgreSQL {major} binaries in {bindir} ship no pg_stat_statements"
            if os.environ.get("JOBCTL_REQUIRE_REPLICA") == "1":
                pytest.fail(f"{reason}, and JOBCTL_REQUIRE_REPLICA=1")
            pytest.skip(reason)
        server.conf(
            "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track = 'all'\n"
        )
        server.stop()
        server.start()
        with server.connect() as c:
            preloaded = c.execute("SHOW shared_preload_libraries").fetchone()[0]  # type: ignore[index]
        if "pg_stat_statements" not in preloaded:
            pytest.skip("pg_stat_statements did not load")
        yield server


_databases = iter(range(1, 10_000))


def database(server: cluster.Server, *, extension: bool = True) -> str:
    name = f"app{next(_databases)}"
    with server.connect() as c:
        c.execute(f"CREATE DATABASE {name}")
    dsn = f"host=127.0.0.1 port={server.port} user=postgres dbname={name}"
    if extension:
        with psycopg.connect(dsn, autocommit=True) as c:
            try:
                c.execute("CREATE EXTENSION pg_stat_statements")
            except psycopg.errors.UndefinedFile:
                pytest.skip("the server binaries have no pg_stat_statements")
    return dsn


def report(jobctl, dsn: str, *table: str) -> dict:
    code, out, err = jobctl(dsn, *table, "doctor", "-o", "json")
    assert code == 0, err
    return {c["check"]: c for c in json.loads(out)["checks"]}


def kinds(checks: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for check in checks.values():
        for f in check["findings"]:
            if "kind" in f and "statement" in f and "rejected" not in f:
                found.setdefault(f["kind"], []).append(f)
    return found


def good_traffic(dsn: str, table: str, jobctl) -> None:
    """The design's own statements: the worker API's claim, heartbeat, complete and fail,
    a stale heartbeat the fence refuses, jobctl's reclaim and requeue."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        worker = lease.Worker(conn, "w-good", lease_seconds=30, table=table)
        job = worker.claim()
        assert job is not None
        worker.heartbeat(job)
        worker.complete(job)
        job = worker.claim()
        assert job is not None
        worker.fail(job, "boom", retry_delay=0)
        stale = lease.Worker(conn, "w-zombie", lease_seconds=-1, table=table)
        gone = stale.claim()
        assert gone is not None
    code, _, err = jobctl(dsn, "--table", table, "reclaim", "--commit", "--yes")
    assert code == 0, err
    with psycopg.connect(dsn, autocommit=True) as conn:
        zombie = lease.Worker(conn, "w-zombie", lease_seconds=30, table=table)
        for _ in range(3):  # the zombie's heartbeats, refused by the fence
            with pytest.raises(lease.LeaseLost):
                zombie.heartbeat(gone)


BAD = {
    "unfenced_update": "UPDATE {t} SET {status} = '{done}' WHERE id = {id}",
    "sweeper_by_age": (
        "UPDATE {t} SET {status} = '{queued}', {reserved_by} = NULL WHERE {status} = "
        "'{processing}' AND {reserved_at} < now() - interval '5 minutes'"
    ),
    "delete_processing": (
        "DELETE FROM {t} WHERE {status} = '{processing}' "
        "AND {reserved_at} < now() - interval '1 hour'"
    ),
    "hand_requeue": (
        "UPDATE {t} SET {status} = '{queued}', attempt_token = NULL, lease_expires_at = NULL "
        "WHERE id = {id}"
    ),
    "claim_without_skip_locked": (
        "UPDATE {t} SET {status} = '{processing}', {reserved_by} = 'old-code', "
        "{reserved_at} = now() "
        "WHERE id = (SELECT id FROM {t} WHERE {status} = '{queued}' ORDER BY id LIMIT 1)"
    ),
}


def bad_traffic(dsn: str, names: dict[str, str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in BAD.values():
            conn.execute(statement.format(**names, id=1))  # type: ignore[arg-type]


REFERENCE = {
    "t": "jobs",
    "status": "status",
    "reserved_by": "reserved_by",
    "reserved_at": "reserved_at",
    "queued": "queued",
    "processing": "processing",
    "done": "done",
}
RAILS = {
    "t": "background_tasks",
    "status": "state",
    "reserved_by": "locked_by",
    "reserved_at": "locked_at",
    "queued": "pending",
    "processing": "running",
    "done": "succeeded",
}


def reference_database(server, jobctl) -> str:
    dsn = database(server)
    code, _, err = jobctl(dsn, "schema", "apply", "--create", "--yes")
    assert code == 0, err
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("INSERT INTO jobs (recovery_policy) SELECT 'auto' FROM generate_series(1, 20)")
    return dsn


def rails_database(server, jobctl) -> str:
    dsn = database(server)
    s = BACKGROUND_TASKS
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(s.ddl)
        c.execute("INSERT INTO background_tasks SELECT FROM generate_series(1, 20)")
    code, _, err = jobctl(dsn, "--table", s.table, "schema", "apply", "--yes", *s.mapping_args())
    assert code == 0, err
    return dsn


def test_only_good_statements_are_not_findings(statistics_server, jobctl):
    dsn = reference_database(statistics_server, jobctl)
    good_traffic(dsn, "jobs", jobctl)
    checks = report(jobctl, dsn)
    assert kinds(checks) == {}, kinds(checks)
    assert checks["timeout_by_lease"]["status"] == "ok"
    assert checks["fenced_writes"]["status"] == "ok"
    rejections = checks["fence_rejections"]
    assert rejections["status"] == "warn" and "3 heartbeat(s)" in rejections["evidence"]
    assert "since the statistics' reset" in rejections["evidence"]
    (refused,) = rejections["findings"]
    assert refused["kind"] == "heartbeat" and refused["rejected"] == 3 and refused["queryid"]
    code, _, _ = jobctl(dsn, "doctor", "--exit-code")
    assert code == 0


@pytest.mark.parametrize("shape", ["reference", "rails"])
def test_each_bad_kind_is_found(statistics_server, jobctl, shape):
    if shape == "reference":
        dsn, names, table = reference_database(statistics_server, jobctl), REFERENCE, ()
    else:
        dsn, names, table = (
            rails_database(statistics_server, jobctl),
            RAILS,
            ("--table", RAILS["t"]),
        )
    good_traffic(dsn, names["t"], jobctl)
    bad_traffic(dsn, names)
    checks = report(jobctl, dsn, *table)
    found = kinds(checks)
    assert set(found) == {*BAD, "claim_without_lease"}, found
    for kind, statement in BAD.items():
        (f,) = found[kind]
        assert f["role"] == "postgres" and f["calls"] >= 1 and f["queryid"] is not None
        assert f["statement"].split()[0] == statement.split()[0]
        assert f["fix"] and f["wrong"]
    assert "$1" in found["unfenced_update"][0]["statement"]  # normalized, as the statistics hold it
    assert "FOR UPDATE SKIP LOCKED" in found["claim_without_skip_locked"][0]["fix_sql"]
    assert f'"{names["status"]}"' in found["claim_without_lease"][0]["fix_sql"]
    assert checks["timeout_by_lease"]["status"] == "fail"
    assert checks["fenced_writes"]["status"] == "fail"
    assert (
        "(jobctl stuck -o wide lists them as no lease)" in found["claim_without_lease"][0]["wrong"]
    )
    # the claim without a lease left a processing job with none: named where stuck lists
    # every one (its terminal table collapses many of them into one line)
    (claimed,) = [
        f for f in checks["fenced_writes"]["findings"] if f.get("kind") == "claimed_without_lease"
    ]
    assert "(jobctl stuck -o wide lists them, reclaim never touches them)" in claimed["wrong"]
    code, out, _ = jobctl(dsn, *table, "doctor", "--exit-code")
    assert code == 4
    assert "FAIL     1. the timeout is judged by lease_expires_at alone" in out
    assert "sweeper_by_age: queryid" in out


def test_without_pg_stat_statements(statistics_server, jobctl):
    dsn = database(statistics_server, extension=False)
    jobctl(dsn, "schema", "apply", "--create", "--yes")
    code, out, err = jobctl(dsn, "doctor")
    assert code == 0
    assert "UNKNOWN  1. the timeout" in out and "4. jobs not reclaimed" in out  # the rest ran
    how = " ".join(out.split())  # said once, in the first check (not again on stderr)
    assert how.count("shared_preload_libraries = 'pg_stat_statements'") == 1 and err == ""
    assert "CREATE EXTENSION pg_stat_statements" in how and "pg_read_all_stats" in how
    code, out, err = jobctl(dsn, "doctor", "-o", "json")  # machine output: the line on stderr
    assert code == 0 and json.loads(out)["checks"][0]["status"] == "unknown"
    assert err.count("shared_preload_libraries = 'pg_stat_statements'") == 1


def test_cannot_read_is_one_line_and_exit_1(statistics_server, jobctl):
    dsn = database(statistics_server)
    code, out, err = jobctl(dsn, "doctor")  # no jobs table here
    assert code != 0 and out == "" and len(err.strip().splitlines()) == 1


def test_extension_created_but_not_preloaded(conn, dsn, jobctl):
    """On the run's own server (no preload there): CREATE EXTENSION alone is not enough; the
    statement checks say unknown, the line says how, the other checks run."""
    if (
        "pg_stat_statements"
        in conn.execute("SHOW shared_preload_libraries").fetchone()["shared_preload_libraries"]
    ):
        pytest.skip("this server preloads pg_stat_statements")
    try:
        conn.execute("CREATE EXTENSION pg_stat_statements")
    except (psycopg.errors.UndefinedFile, psycopg.errors.FeatureNotSupported):
        pytest.skip("no pg_stat_statements here")
    code, out, err = jobctl(dsn, "doctor", "--exit-code")
    assert code == 0, err
    assert "shared_preload_libraries" in out and "UNKNOWN  1. the timeout" in out
    assert "ok       3. jobs reclaimed automatically" in out


def test_lease_advice_reruns_and_review_from_the_history(conn, dsn, jobctl):
    """Checks 3 and 4 and the lease advice, from the history (no statistics needed)."""
    from helpers import add_jobs, claim_all

    add_jobs(conn, 2, policy="auto")
    add_jobs(conn, 1, policy="manual")
    claim_all(dsn, 3)  # expired at once
    code, _, err = jobctl(dsn, "reclaim", "--commit", "--yes")
    assert code == 0, err
    # an attempt whose largest heartbeat gap came within 80 % of its lease, another outlived it
    conn.execute(
        "INSERT INTO jobctl.attempts (attempt_token, job_table, job_id, attempt, worker, "
        "claimed_at, heartbeats, max_heartbeat_gap, ended_at, outcome, lease, "
        "lease_expires_at) VALUES "
        "(gen_random_uuid(), 'public.jobs', '900', 1, 'w-slow', now() - interval '1 hour', 9, "
        "interval '28 seconds', now() - interval '50 minutes', 'completed', "
        "interval '30 seconds', now() - interval '51 minutes')"
    )
    # reclaimed 40 s after its last heartbeat on a 30 s lease: its worker was likely alive
    conn.execute(
        "INSERT INTO jobctl.attempts (attempt_token, job_table, job_id, attempt, worker, "
        "claimed_at, heartbeats, last_heartbeat_at, max_heartbeat_gap, ended_at, outcome, "
        "lease, lease_expires_at) VALUES "
        "(gen_random_uuid(), 'public.jobs', '901', 1, 'w-slow', now() - interval '40 minutes', "
        "3, now() - interval '30 minutes 40 seconds', interval '10 seconds', "
        "now() - interval '30 minutes', 'reclaimed', interval '30 seconds', "
        "now() - interval '30 minutes 10 seconds')"
    )
    code, out, err = jobctl(dsn, "doctor", "-o", "json")
    assert code == 0, err
    checks = {c["check"]: c for c in json.loads(out)["checks"]}
    lease_check = checks["lease_length"]
    assert lease_check["status"] == "warn"
    (slow,) = [f for f in lease_check["findings"] if f["worker"] == "w-slow"]
    assert slow["advice"] == [
        "lease 30 s, p99 gap 28 s: raise the lease or heartbeat more often",
        "1 attempt(s) ended after their lease ran out",
        "1 attempt(s) reclaimed within two leases of their last heartbeat: the worker was "
        "likely alive",
    ]
    reruns = checks["auto_reruns"]
    assert reruns["status"] == "warn" and "2 auto-policy job(s)" in reruns["evidence"]
    assert "second email or charge" in reruns["evidence"]
    review = checks["manual_review"]
    assert review["status"] == "warn" and "1 job(s) awaiting review" in review["evidence"]
    assert "no person has acted" in review["evidence"]
    (parked,) = json.loads(jobctl(dsn, "review", "-o", "json")[1])
    code, _, err = jobctl(dsn, "fail", str(parked["id"]), "--reason", "refunded", "--yes")
    assert code == 0, err
    code, out, _ = jobctl(dsn, "doctor", "-o", "json")
    review = {c["check"]: c for c in json.loads(out)["checks"]}["manual_review"]
    assert review["status"] == "ok" and "a person last acted at" in review["evidence"]


# The application's evasions, each run for real so that it lands in
# pg_stat_statements, then found by its queryid (the server's own, from EXPLAIN VERBOSE).
# name -> (setup, the statement, the finding's kind, the check's status)
EVASIONS = {
    "token_equal_to_itself": (
        None,
        "UPDATE jobs SET status = 'done' WHERE id = 1 AND attempt_token = attempt_token",
        "unfenced_update",
        "fail",
    ),
    "operator_of_another_schema": (
        "CREATE SCHEMA app; "
        "CREATE FUNCTION app.always(uuid, uuid) RETURNS boolean LANGUAGE sql AS 'SELECT true'; "
        "CREATE OPERATOR app.= (leftarg = uuid, rightarg = uuid, function = app.always)",
        "UPDATE jobs SET status = 'done' WHERE id = 1 "
        "AND attempt_token OPERATOR(app.=) '00000000-0000-0000-0000-000000000000'",
        "unfenced_update",
        "fail",
    ),
    "a_grammar_the_parser_refuses": (
        None,  # SYSTEM_USER is reserved from PostgreSQL 16 on: a 15 server runs this
        "UPDATE jobs AS system_user SET status = 'done' WHERE system_user.id = 1",
        "unparsed",
        "fail",
    ),
    "unicode_escaped_name": (
        None,
        "UPDATE U&\"\\006Aobs\" SET status = 'done' WHERE id = 1",
        "unfenced_update",
        "fail",
    ),
    "a_view_of_the_table": (
        "CREATE SCHEMA app; CREATE VIEW app.work_items AS SELECT * FROM jobs",
        "UPDATE app.work_items SET status = 'done' WHERE id = 1",
        "unfenced_update",
        "fail",
    ),
    "a_cast_that_truncates_the_token": (
        None,
        "UPDATE jobs SET status = 'done' WHERE id = 1 "
        "AND attempt_token::text::varchar(1) = '0'::varchar(1)",
        "fence_cast",
        "fail",
    ),
    "the_rows_own_token_through_a_cte": (
        None,
        "WITH t AS (SELECT id, attempt_token FROM jobs WHERE id = 1) "
        "UPDATE jobs SET status = 'queued', reserved_by = NULL, attempt_token = NULL, "
        "lease_expires_at = NULL FROM t "
        "WHERE jobs.id = t.id AND jobs.attempt_token = t.attempt_token",
        "hand_requeue",
        "fail",
    ),
    "delete_of_a_status_the_statistics_hide": (
        None,
        "DELETE FROM jobs WHERE status = 'processing' AND id = 1",
        "delete_status_unknown",
        "warn",
    ),
    "nested_deeper_than_python_decodes": (
        None,
        "UPDATE jobs SET status = 'done' WHERE id = " + "+".join(["1"] * 500),
        "unparsed",
        "fail",
    ),
}


def queryid_of(dsn: str, statement: str) -> int:
    """The queryid the server gives a statement (EXPLAIN VERBOSE: planned, never run)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        plan = c.execute(f"EXPLAIN (VERBOSE, FORMAT JSON) {statement}").fetchone()[0]  # type: ignore[index]
    return int(plan[0]["Query Identifier"])


@pytest.mark.parametrize("evasion", list(EVASIONS))
def test_each_evasion_is_a_finding(statistics_server, jobctl, evasion):
    setup, statement, kind, status = EVASIONS[evasion]
    dsn = reference_database(statistics_server, jobctl)
    with psycopg.connect(dsn, autocommit=True) as c:
        major = c.info.server_version // 10_000
        if evasion == "a_grammar_the_parser_refuses" and major >= 16:
            pytest.skip(f"PostgreSQL {major} refuses it too: nothing for doctor to miss")
        if setup:
            c.execute(setup)
        c.execute(statement)
    checks = report(jobctl, dsn)
    found = kinds(checks).get(kind, [])
    queryid = queryid_of(dsn, statement)
    assert [f["queryid"] for f in found] == [queryid], kinds(checks)
    assert checks["fenced_writes"]["status"] == status
    assert "every write fenced" not in checks["fenced_writes"]["evidence"]
    code, out, _ = jobctl(dsn, "doctor", "--exit-code")
    assert code == (4 if status == "fail" else 0), out
    assert f"{kind}: queryid {queryid}" in out


def test_only_a_fenced_statement_counts_the_fences_refusals(statistics_server, jobctl):
    """An UPDATE of an id that does not exist, 'fenced' on the row's own token: its calls -
    rows are no refusals of the fence (there are no zombie workers), and it is unfenced."""
    dsn = reference_database(statistics_server, jobctl)
    statement = (
        "UPDATE jobs SET status = 'done' WHERE id = 999 AND attempt_token = jobs.attempt_token"
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        for _ in range(3):
            c.execute(statement)
    checks = report(jobctl, dsn)
    rejections = checks["fence_rejections"]
    assert rejections["status"] == "ok" and rejections["findings"] == []
    assert "0 heartbeat(s) and 0 completion(s)" in rejections["evidence"]
    (found,) = kinds(checks)["unfenced_update"]
    assert found["queryid"] == queryid_of(dsn, statement)


HUGE_COMMENT = 20_000_000  # characters of one statement's comment (four of them)
RSS_LIMIT_MB = 150


def test_huge_statements_are_cut_on_the_server_and_found(statistics_server, jobctl):
    """Four statements with a 20 MB comment each: doctor reads only their start, says each is
    to be checked by hand, and its peak RSS (measured in a process of its own: VmHWM, which a
    new program starts afresh, unlike getrusage's maximum) stays under RSS_LIMIT_MB."""
    import subprocess
    import sys

    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc here to read the peak RSS from")
    dsn = reference_database(statistics_server, jobctl)
    comment = "/* " + "x" * HUGE_COMMENT + " */"
    statements = [
        f"UPDATE jobs SET {column} = {column} WHERE id = 1 {comment}"
        for column in ("status", "attempts", "available_at", "reserved_by")
    ]
    with psycopg.connect(dsn, autocommit=True) as c:
        for statement in statements:
            c.execute(statement)
    script = (
        "import sys\n"
        "from jobctl.cli import main\n"
        "code = main.main(sys.argv[1:])\n"
        "peak = [x for x in open('/proc/self/status') if x.startswith('VmHWM:')]\n"
        "sys.stderr.write(f'peak_rss_kb={peak[0].split()[1]}')\n"
        "sys.exit(code)\n"
    )
    env = {**os.environ, "JOBCTL_ACTOR": "tester@ci"}
    for name in ("JOBCTL_DSN", "DATABASE_URL", "JOBCTL_TABLE"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", script, "--dsn", dsn, "doctor", "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    peak_mb = int(done.stderr.rsplit("peak_rss_kb=", 1)[1]) / 1024
    print(f"doctor's peak RSS with 4 x 20 MB comments: {peak_mb:.0f} MB")
    checks = {c["check"]: c for c in json.loads(done.stdout)["checks"]}
    cut = [f for f in kinds(checks).get("unparsed", []) if f.get("statement_chars")]
    assert len(cut) == 4, kinds(checks)
    for f in cut:
        assert f["statement_chars"] > HUGE_COMMENT and len(f["statement"]) <= 4096
        assert f["why"].startswith("cut: ")
    assert checks["fenced_writes"]["status"] == "fail"
    assert peak_mb <= RSS_LIMIT_MB


def test_a_plpgsql_functions_statements(statistics_server, jobctl):
    """With track = 'all' the statistics hold a function's statements with its variables
    by name: a fence on a variable is one (no finding), the row's own column is none."""
    dsn = reference_database(statistics_server, jobctl)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "CREATE FUNCTION complete(p_id bigint, p_token uuid) RETURNS void "
            "LANGUAGE plpgsql AS $$ BEGIN "
            "UPDATE jobs SET status = 'done', finished_at = now() "
            "WHERE id = p_id AND status = 'processing' AND attempt_token = p_token; END $$"
        )
        c.execute(
            "CREATE FUNCTION finish(p_id bigint) RETURNS void LANGUAGE plpgsql AS $$ BEGIN "
            "UPDATE jobs SET status = 'done' WHERE id = p_id "
            "AND attempt_token = attempt_token; END $$"
        )
        c.execute("SELECT complete(1, gen_random_uuid())")  # refused by the fence: 0 rows
        c.execute("SELECT finish(1)")
    checks = report(jobctl, dsn)
    (found,) = kinds(checks)["unfenced_update"]
    assert "attempt_token = attempt_token" in found["statement"]
    (refused,) = checks["fence_rejections"]["findings"]
    assert "attempt_token = p_token" in refused["statement"] and refused["rejected"] == 1


OLD_CLAIM = (
    "WITH target AS (SELECT id FROM jobs WHERE status = 'queued' AND available_at <= now() "
    "ORDER BY available_at, id FOR UPDATE SKIP LOCKED LIMIT 1) "
    "UPDATE jobs AS j SET status = 'processing', reserved_by = 'w-old', reserved_at = now(), "
    "lease_expires_at = now() + interval '30 seconds', attempt_token = gen_random_uuid(), "
    "attempts = j.attempts + 1 FROM target WHERE j.id = target.id RETURNING j.id"
)


def test_a_claim_that_ignores_pauses_is_found_and_pause_warns(statistics_server, jobctl):
    """Once a kind can be paused, a claim that does not read jobctl.pauses (a worker's own,
    or one rendered before pauses) is a finding, with the rendered claim as its fix; the
    worker API's claim is not; pause warns that such claims run."""
    dsn = reference_database(statistics_server, jobctl)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(OLD_CLAIM)  # before a kind is mapped: the design's claim, no finding
    assert kinds(report(jobctl, dsn)) == {}
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("ALTER TABLE jobs ADD COLUMN kind text")
    code, _, err = jobctl(dsn, "schema", "apply", "--column", "kind=kind", "--yes")
    assert code == 0, err
    code, _, err = jobctl(dsn, "pause", "--kind", "charge_card", "--reason", "provider down")
    assert code == 0 and "warning: 1 claim statement(s)" in err, err
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w-new", lease_seconds=30)
        assert worker.claim() is not None
    found = kinds(report(jobctl, dsn))
    assert set(found) == {"claim_ignores_pauses"}, found
    (f,) = found["claim_ignores_pauses"]
    assert "w-old" not in f["statement"] and "jobctl.pauses" not in f["statement"]
    assert "jobctl.pauses" in f["fix_sql"]
    code, _, err = jobctl(dsn, "resume", "--kind", "charge_card")
    assert code == 0, err
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_stat_statements_reset()")
        worker = lease.Worker(c, "w-new", lease_seconds=30)
        assert worker.claim() is not None
    code, _, err = jobctl(dsn, "pause", "--kind", "charge_card", "--reason", "again")
    assert code == 0 and "warning" not in err, err


def test_a_fence_through_a_domain_with_an_equal_of_its_own(statistics_server, jobctl):
    """A domain over uuid whose = (first on the search_path) is always true: the fence lets
    any token through, and doctor names the cast."""
    dsn = reference_database(statistics_server, jobctl)
    statement = (
        "UPDATE jobs SET status = 'done' WHERE id = 1 "
        "AND attempt_token::app.tok = '00000000-0000-0000-0000-000000000000'::app.tok"
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "CREATE SCHEMA app; CREATE DOMAIN app.tok AS uuid; "
            "CREATE FUNCTION app.always(app.tok, app.tok) RETURNS boolean LANGUAGE sql "
            "AS 'SELECT true'; "
            "CREATE OPERATOR app.= (leftarg = app.tok, rightarg = app.tok, function = app.always)"
        )
        c.execute("SET search_path = app, public")
        assert c.execute(statement).rowcount == 1  # job 1 has no token at all: it passed
    checks = report(jobctl, dsn)
    (f,) = kinds(checks)["fence_cast"]
    assert "a cast to app.tok on the fence" in f["wrong"] and "::app.tok" in f["statement"]
    assert "OPERATOR(pg_catalog.=)" in f["fix"]
    assert checks["fenced_writes"]["status"] == "fail"


def test_a_view_whose_attempt_token_is_another_column(statistics_server, jobctl):
    """A write through a view is judged on the table's columns it shows: a view (and a view
    of it) whose attempt_token is reserved_by fences nothing; a view showing the real token
    under another name fences on it."""
    dsn = reference_database(statistics_server, jobctl)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "CREATE SCHEMA app; "
            "CREATE VIEW app.jv AS SELECT id, status, reserved_by AS attempt_token FROM jobs; "
            "CREATE VIEW app.jv2 AS SELECT * FROM app.jv; "
            "CREATE VIEW app.honest AS SELECT id, status, attempt_token AS token FROM jobs"
        )
        c.execute("UPDATE app.jv SET status = 'done' WHERE id = 1 AND attempt_token = 'w-1'")
        c.execute("UPDATE app.jv2 SET status = 'done' WHERE id = 2 AND attempt_token = 'w-1'")
        c.execute(
            "UPDATE app.honest SET status = 'done' WHERE id = 3 "
            "AND token = '00000000-0000-0000-0000-000000000000'"
        )
    checks = report(jobctl, dsn)
    found = kinds(checks)
    assert set(found) == {"unfenced_update"}, found
    words = sorted(f["wrong"].split(" (", 1)[1] for f in found["unfenced_update"])
    assert words == [
        "through the view app.jv, whose attempt_token is the table's reserved_by)",
        "through the view app.jv2, whose attempt_token is the table's reserved_by)",
    ]


HOOKS = """
CREATE SCHEMA app;
CREATE TABLE app.done_log (job_id bigint, token uuid);
CREATE RULE completes AS ON INSERT TO app.done_log
    DO ALSO UPDATE public.jobs SET status = 'done' WHERE id = NEW.job_id;
CREATE TABLE app.beats (job_id bigint, token uuid);
CREATE FUNCTION app.beat() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE public.jobs SET lease_expires_at = now() + interval '1 hour' WHERE id = NEW.job_id;
    RETURN NEW;
END $$;
CREATE TRIGGER beats AFTER INSERT ON app.beats FOR EACH ROW EXECUTE FUNCTION app.beat();
CREATE TABLE app.finished (job_id bigint, token uuid);
CREATE FUNCTION app.finish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE public.jobs SET status = 'done', finished_at = now()
    WHERE id = NEW.job_id AND attempt_token = NEW.token;
    RETURN NEW;
END $$;
CREATE TRIGGER finished AFTER INSERT ON app.finished FOR EACH ROW EXECUTE FUNCTION app.finish();
CREATE RULE finishes AS ON INSERT TO app.finished
    DO ALSO UPDATE public.jobs SET status = 'done' WHERE id = NEW.job_id
    AND attempt_token = NEW.token;
"""


def test_rules_and_triggers_that_write_the_jobs_table(statistics_server, jobctl):
    """A rule's action and a trigger's statements reach pg_stat_statements only as the
    statement that fired them: doctor reads them from the catalog and names them; the ones
    fenced on NEW's token (the firing statement's value) are not findings."""
    dsn = reference_database(statistics_server, jobctl)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(HOOKS)
        c.execute("INSERT INTO app.done_log VALUES (5, NULL)")  # completes job 5, unfenced
        assert c.execute("SELECT status FROM jobs WHERE id = 5").fetchone() == ("done",)
    checks = report(jobctl, dsn)
    found = [f for f in checks["fenced_writes"]["findings"] if "source" in f]
    named = sorted((f["kind"], f["source"], f["name"], f["relation"]) for f in found)
    assert named == [
        ("unfenced_update", "rule", "completes", "app.done_log"),
        ("unfenced_update", "trigger", "beats", "app.beats"),
    ], found
    (beat,) = [f for f in found if f["source"] == "trigger"]
    assert beat["function"] == "app.beat" and "NEW.job_id" in beat["statement"]
    assert checks["fenced_writes"]["status"] == "fail"
    assert "2 in rules or triggers" in checks["fenced_writes"]["evidence"]
    code, out, _ = jobctl(dsn, "doctor", "--exit-code")
    assert code == 4
    assert "unfenced_update: rule completes on app.done_log" in out
    assert "unfenced_update: trigger beats on app.beats, function app.beat" in out


def test_an_equal_between_uuids_first_on_the_search_path(statistics_server, jobctl):
    """app.=(uuid, uuid), always true, first on the role's search path: the plain = on the
    fence is it. Doctor finds it; the design's statements (OPERATOR(pg_catalog.=)) pass."""
    dsn = reference_database(statistics_server, jobctl)
    statement = (
        "UPDATE jobs SET status = 'done' WHERE id = 1 "
        "AND attempt_token = '00000000-0000-0000-0000-000000000000'"
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "CREATE SCHEMA app; "
            "CREATE FUNCTION app.always(uuid, uuid) RETURNS boolean LANGUAGE sql "
            "AS 'SELECT true'; "
            "CREATE OPERATOR app.= (leftarg = uuid, rightarg = uuid, function = app.always)"
        )
        c.execute("SET search_path = app, pg_catalog, public")
        assert c.execute(statement).rowcount == 1  # job 1 has no token at all: it passed
    good_traffic(dsn, "jobs", jobctl)
    checks = report(jobctl, dsn)
    found = kinds(checks)
    assert set(found) == {"unfenced_update"}, found
    (f,) = found["unfenced_update"]
    assert "an unqualified =, which may be app.=" in f["wrong"]


# delayed_job_active_record's own table (its generator's migration template), with the columns
# an adopter adds (status, max_attempts, finished_at) before ``schema apply`` maps the gem's
# names and adds the lease's
DELAYED_JOBS = """
CREATE TABLE delayed_jobs (
    id bigserial PRIMARY KEY,
    priority integer NOT NULL DEFAULT 0,
    attempts integer NOT NULL DEFAULT 0,
    handler text NOT NULL,
    last_error text,
    run_at timestamp,
    locked_at timestamp,
    failed_at timestamp,
    locked_by varchar,
    queue varchar,
    created_at timestamp,
    updated_at timestamp
);
CREATE INDEX delayed_jobs_priority ON delayed_jobs (priority, run_at);
ALTER TABLE delayed_jobs ADD COLUMN status text NOT NULL DEFAULT 'queued',
    ADD COLUMN max_attempts integer NOT NULL DEFAULT 25, ADD COLUMN finished_at timestamptz
"""
# the gem's claim (Delayed::Backend::ActiveRecord::Job.reserve_with_scope, PostgreSQL),
# as its prepared statement sends it
DELAYED_JOB_CLAIM = (
    "UPDATE delayed_jobs SET locked_at = $1, locked_by = $2 WHERE id IN (SELECT id FROM "
    "delayed_jobs WHERE ((run_at <= $3 AND (locked_at IS NULL OR locked_at < $4) OR "
    "locked_by = $5) AND failed_at IS NULL) ORDER BY priority ASC, run_at ASC LIMIT $6 "
    "FOR UPDATE) RETURNING *"
)


def test_delayed_jobs_claim_by_lock_age_fails_the_timeout_check(statistics_server, jobctl):
    """The gem's real claim takes back jobs locked longer than max_run_time ago: check 1
    fails with the design's fix, the FOR UPDATE without SKIP LOCKED is named, and the
    statement is a claim, never an unfenced completion or heartbeat."""
    dsn = database(statistics_server)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(DELAYED_JOBS)
        c.execute(
            "INSERT INTO delayed_jobs (handler, run_at, created_at, updated_at) "
            "SELECT '--- !ruby/object:Job {}', now(), now(), now() FROM generate_series(1, 5)"
        )
    table = ("--table", "delayed_jobs")
    mapping = ("--column", "reserved_by=locked_by", "--column", "reserved_at=locked_at")
    mapping += ("--column", "available_at=run_at", "--column", "queue=queue")
    code, _, err = jobctl(dsn, *table, "schema", "apply", "--yes", *mapping)
    assert code == 0, err
    worker = "delayed_job.4 host:web-old-3 pid:17012"
    now = dt.datetime.now()
    with psycopg.connect(dsn, autocommit=True) as c:  # the gem's worker, twice, as it sends it
        for _ in range(2):  # $n as psycopg's %s: the server gets the text above
            c.execute(
                re.sub(r"\$\d", "%s", DELAYED_JOB_CLAIM),
                (now, worker, now, now - dt.timedelta(hours=4), worker, 1),
                prepare=True,
            )
    checks = report(jobctl, dsn, *table)
    found = kinds(checks)
    (claim,) = found["claim_by_age"]
    assert claim["statement"].startswith("UPDATE delayed_jobs SET locked_at = $1")
    assert claim["calls"] == 2 and "locked_at < $4" in claim["why"]
    assert "jobctl reclaim" in claim["fix"] and "lease_expires_at" in claim["fix"]
    assert '"lease_expires_at"' in claim["fix_sql"] and "SKIP LOCKED" in claim["fix_sql"]
    (waits,) = found["claim_without_skip_locked"]
    assert "FOR UPDATE without SKIP LOCKED" in waits["why"]
    assert "unfenced_update" not in found and "claim_without_lease" in found
    timeout = checks["timeout_by_lease"]
    assert timeout["status"] == "fail"
    assert "1 claim(s) taking jobs back by age" in timeout["evidence"]
    code, out, _ = jobctl(dsn, *table, "doctor", "--exit-code")
    assert code == 4
    said = " ".join(out.split())
    assert "FAIL 1. the timeout is judged by lease_expires_at alone" in said
    assert "- claim_by_age: queryid" in said and "(it tests locked_at < $4)" in said
    assert "fix: complete / heartbeat / fail" not in said


# sweepers as applications run them, on a table of OCA queue_job's semantics: its requeue of
# dead jobs (by the age of a time the mapping does not name, counting a retry) and the generic
# one, its age a parameter
OCA_REQUEUE = (
    "UPDATE job_queue SET state = 'pending', retry = (CASE WHEN max_retries = 0 OR "
    "retry < max_retries THEN retry + 1 ELSE retry END) WHERE state IN ('enqueued', 'started') "
    "AND date_enqueued < (now() AT TIME ZONE 'utc' - INTERVAL '10 minutes')"
)
GENERIC_SWEEPER = (
    "UPDATE job_queue SET state = 'pending', worker_pid = NULL WHERE state = 'started' "
    "AND date_started < now() - %s"
)


@pytest.mark.parametrize("sweeper", ["oca", "generic"])
def test_a_sweeper_by_any_age_fails_the_timeout_check(statistics_server, jobctl, sweeper):
    """A statement that sets processing jobs back by age fails check 1, whichever time it
    tests (one the mapping names or not) and whether it counts a retry as it does, with the
    lease design's fix in the line; never judged a claim."""
    dsn = database(statistics_server)
    table = ("--table", QUEUE_JOB.table)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(QUEUE_JOB.ddl)
        c.execute("INSERT INTO job_queue DEFAULT VALUES")
    code, _, err = jobctl(dsn, *table, "schema", "apply", "--yes", *QUEUE_JOB.mapping_args())
    assert code == 0, err
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "UPDATE job_queue SET state = 'started', date_enqueued = now() - interval '1 hour', "
            "date_started = now() - interval '1 hour'"
        )
        c.execute("SELECT pg_stat_statements_reset()")  # that claim by hand is no finding here
        if sweeper == "oca":
            assert c.execute(OCA_REQUEUE).rowcount == 1
        else:
            assert c.execute(GENERIC_SWEEPER, (dt.timedelta(minutes=5),)).rowcount == 1
    checks = report(jobctl, dsn, *table)
    found = kinds(checks)
    (swept,) = found["sweeper_by_age"]
    assert "claim_by_age" not in found and "claim_without_skip_locked" not in found, found
    tested = "date_enqueued" if sweeper == "oca" else "date_started"
    assert f"it tests {tested} <" in swept["why"]
    assert (
        "jobctl reclaim --commit --yes --every 30s" in swept["fix"]
        and "lease_expires_at" in swept["fix"]
    )
    timeout = checks["timeout_by_lease"]
    assert timeout["status"] == "fail" and "1 sweeper(s) by age" in timeout["evidence"]
    code, out, _ = jobctl(dsn, *table, "doctor", "--exit-code")
    assert code == 4
    said = " ".join(out.split())
    assert "FAIL 1. the timeout is judged by lease_expires_at alone" in said
    assert "- sweeper_by_age: queryid" in said and "fix: stop it: jobctl reclaim --commit" in said

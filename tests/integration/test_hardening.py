"""Bounded waits (finding 6), private plan files (7), secrets (8) and SQL smuggled
into a generated script (2), each tried as the issue's attacker did."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time

import psycopg
import pytest
from helpers import add_jobs, claim_all, snapshot
from psycopg import conninfo

from jobctl.ops.reclaim import plans

WAIT = 20  # seconds a refused command may take at most (it takes well under one)


def jobctl(dsn: str, *args: str, timeout: float = WAIT) -> subprocess.CompletedProcess[str]:
    """jobctl as a real process; a hang is a failure (TimeoutExpired), not a stuck suite."""
    env = {**os.environ, "JOBCTL_DSN": dsn, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "jobctl", *args],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


# ---------------------------------------------------------------- finding 6: bounded waits
@pytest.mark.parametrize(
    "option", [["--lock-timeout", "0.0004s"], ["--lock-timeout", "0"], ["--statement-timeout", "0"]]
)
def test_a_timeout_that_would_be_no_timeout_is_refused(conn, dsn, option):
    """0 ms is PostgreSQL's 'no timeout': the issue's `fail` waited on a row lock until killed."""
    (job,) = add_jobs(conn, 1)
    with psycopg.connect(dsn) as holder:  # a worker holds the row
        holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job,))
        done = jobctl(dsn, *option, "fail", str(job), "--reason", "x", "--yes")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "1ms" in done.stderr, done.stderr
    assert conn.execute("SELECT status FROM jobs WHERE id = %s", (job,)).fetchone() == {
        "status": "queued"
    }


def test_a_lock_timeout_of_one_millisecond_is_a_bound(conn, dsn):
    (job,) = add_jobs(conn, 1)
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job,))
        done = jobctl(dsn, "--lock-timeout", "1ms", "fail", str(job), "--reason", "x", "--yes")
    assert done.returncode == 1 and "locked" in done.stderr, done.stderr


def test_the_reclaimer_service_does_not_busy_loop(conn, dsn):
    """`reclaim --every 0s` ran 1,764 transactions in 3 s: below 100ms it is refused."""
    add_jobs(conn, 2)
    claim_all(dsn, 2)
    for every in ("0s", "0.05s"):
        done = jobctl(dsn, "reclaim", "--every", every, "--commit", "--yes")
        assert done.returncode == 2 and "100ms" in done.stderr, done.stderr
    done = jobctl(dsn, "stuck", "--watch", "--every", "0s", "--count", "2")
    assert done.returncode == 2 and "100ms" in done.stderr, done.stderr


# ---------------------------------------------------------------- finding 7: plan files
def test_a_saved_plan_is_private_and_written_whole(conn, dsn, run, tmp_path):
    add_jobs(conn, 2)
    claim_all(dsn, 2)
    path = tmp_path / "plan.json"
    path.write_text("an older file of mine\n")
    path.chmod(0o666)  # an existing world-writable file keeps no mode of its own
    assert run("reclaim", "--save-plan", str(path)).code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["format"] == plans.PLAN_FORMAT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # no temporary left


def test_a_plan_is_never_written_through_a_link_nor_into_anothers_file(conn, dsn, run, tmp_path):
    add_jobs(conn, 1)
    claim_all(dsn, 1)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "plan.json"
    link.symlink_to(victim)
    result = run("reclaim", "--save-plan", str(link))
    assert result.code == 2 and "symbolic link" in result.err, result.err
    assert victim.read_text() == "precious\n" and link.is_symlink()
    if os.geteuid() != 0:  # only root can give a file to another user
        return
    theirs = tmp_path / "theirs.json"
    theirs.write_text("theirs\n")
    os.chown(theirs, 54321, 54321)
    result = run("reclaim", "--save-plan", str(theirs))
    assert result.code == 2 and "another user" in result.err, result.err
    assert theirs.read_text() == "theirs\n"


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (None, "does not say where it was made"),
        ("str", "does not say where it was made"),
        ({"database": "x"}, "does not say where it was made"),
        ({"system_identifier": "1", "database": "x", "table": "public.jobs"}, "made for"),
    ],
)
def test_a_plan_without_its_origin_is_refused(conn, dsn, run, tmp_path, where, message):
    add_jobs(conn, 1)
    claim_all(dsn, 1)
    path = tmp_path / "plan.json"
    assert run("reclaim", "--save-plan", str(path)).code == 0
    plan = json.loads(path.read_text())
    if where is None:
        del plan["where"]
    else:
        plan["where"] = where
    path.write_text(json.dumps(plan))
    path.chmod(0o600)
    before = snapshot(conn)
    result = run("reclaim", "--commit", "--yes", "--plan", str(path))
    assert result.code == 2, result.err
    assert len(result.err.strip().splitlines()) == 1 and message in result.err, result.err
    assert "Traceback" not in result.err and "internal error" not in result.err
    assert snapshot(conn) == before


def test_a_plan_others_could_change_is_refused(conn, dsn, run, tmp_path):
    add_jobs(conn, 1)
    claim_all(dsn, 1)
    path = tmp_path / "plan.json"
    assert run("reclaim", "--save-plan", str(path)).code == 0
    path.chmod(0o666)
    result = run("reclaim", "--commit", "--yes", "--plan", str(path))
    assert result.code == 2 and "another user" in result.err, result.err


# ---------------------------------------------------------------- finding 8: secrets
def test_a_password_on_the_command_line_of_a_service_is_warned_about(conn, dsn):
    add_jobs(conn, 1)
    secret = conninfo.make_conninfo(dsn, password="S3cret")  # the test server trusts us
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("JOBCTL_DSN", None)
    args = ["--dsn", secret, "reclaim", "--every", "0.2s", "--commit", "--yes"]
    service = subprocess.Popen(
        [sys.executable, "-m", "jobctl", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        time.sleep(2)
    finally:
        service.terminate()
        _, err = service.communicate(timeout=WAIT)
    first = err.splitlines()[0]
    assert "warning" in first and "JOBCTL_DSN" in first and "PGPASSFILE" in first, err
    assert "S3cret" not in err
    watch = jobctl(dsn, "--dsn", secret, "stuck", "--watch", "--count", "1", "--every", "1s")
    assert watch.returncode == 0 and "PGPASSFILE" in watch.stderr, watch.stderr
    once = jobctl(dsn, "--dsn", secret, "stuck")  # a command that ends at once: no warning
    assert once.returncode == 0 and once.stderr == "", once.stderr


@pytest.mark.parametrize(
    "bad",
    [
        "postgresql://op:S3c@ret@127.0.0.1/db",
        "postgresql://op:S3c@ret@/db?host=/nowhere",
        "host=127.0.0.1 password=S3c ret",
        "host=127.0.0.1 password='S3c ret",
    ],
)
def test_a_malformed_dsn_echoes_no_part_of_the_password(dsn, bad):
    done = jobctl(dsn, "--dsn", bad, "stuck")
    assert done.returncode in (1, 2), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "S3c" not in done.stderr and "ret" not in done.stderr.replace("redact", ""), done.stderr


# ---------------------------------------------------------------- finding 2: the --sql script
HOSTILE_PARTITIONS = """
CREATE TABLE canary (x int);
CREATE TABLE canary2 (x int);
CREATE TABLE jobs (
    id bigint GENERATED BY DEFAULT AS IDENTITY,
    queue text NOT NULL DEFAULT 'default',
    status text NOT NULL DEFAULT 'queued',
    attempts int NOT NULL DEFAULT 0,
    max_attempts int NOT NULL DEFAULT 3,
    available_at timestamptz NOT NULL DEFAULT now(),
    reserved_by text, reserved_at timestamptz, last_error text,
    finished_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, queue)
) PARTITION BY LIST (queue);
CREATE TABLE jobs_default PARTITION OF jobs FOR VALUES IN ('default');
CREATE TABLE "jobs_a
DROP TABLE canary; --" PARTITION OF jobs FOR VALUES IN ('a');
CREATE TABLE "jobs_b\r\x1b[2J\u2028DROP TABLE canary; --" PARTITION OF jobs DEFAULT;
INSERT INTO jobs (queue)
SELECT (ARRAY['default', 'a', 'b'])[1 + g % 3] FROM generate_series(1, 30) g;
"""


@pytest.mark.skipif(shutil.which("psql") is None, reason="needs psql")
def test_no_sql_is_smuggled_into_the_reviewed_script(empty_dsn, run):
    """A partition named 'jobs_a<newline>DROP TABLE canary; --' and a --status value with a
    newline put SQL on a line of its own in the script's comments: psql ran it."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(HOSTILE_PARTITIONS)
        status = "processing=run\nDROP TABLE canary2; --"
        result = run("schema", "apply", "--sql", "--status", status, dsn=empty_dsn)
        assert result.code == 0, result.err
        script = result.out
        comments = [line for line in script.splitlines() if line.startswith("-- ")]
        assert any("jobs_a\\nDROP TABLE canary; --" in line for line in comments), script
        assert any("run\\nDROP TABLE canary2" in line for line in comments), script
        # no control character anywhere: comments escaped, names as U&"...", texts as E'...'
        assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", script), script
        assert 'U&"jobs_b\\000D\\001B[2J\\2028DROP TABLE canary; --"' in script, script
        done = subprocess.run(
            ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", empty_dsn, "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT relname FROM pg_class WHERE relname IN ('canary', 'canary2')"
            )
        }
        assert tables == {"canary", "canary2"}
        # and the script did its work: the table's names recorded as typed, newline and all
        mapping = conn.execute("SELECT mapping FROM jobctl.tables").fetchone()[0]
        assert mapping["statuses"]["processing"] == "run\nDROP TABLE canary2; --"

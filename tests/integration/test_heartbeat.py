"""The reclaimer's heartbeat: each pass of reclaim --every recorded in jobctl.reclaimer_passes
(history migration 007); metrics export the passes and the last one's time; summary says
when no reclaimer has run for several intervals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import prometheus
from helpers import add_jobs, claim_all, wait_until


def passes(conn) -> list[dict]:
    return conn.execute("SELECT * FROM jobctl.reclaimer_passes").fetchall()


def test_each_pass_is_recorded_and_exported(conn, dsn, run):
    before = prometheus.samples(run("metrics").out)
    table = (("table", "public.jobs"),)
    assert before[("jobctl_reclaimer_passes_total", table)] == 0  # never: 0, and no time
    assert ("jobctl_reclaimer_last_pass_timestamp_seconds", table) not in before
    assert "reclaimer" not in run("summary").err  # no service ever ran here: nothing said
    add_jobs(conn, 3)
    add_jobs(conn, 1, policy="manual")
    claim_all(dsn, 4, lease_seconds=-60)
    env = {**os.environ, "JOBCTL_DSN": dsn, "JOBCTL_ACTOR": "reclaimer@ci"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "reclaim", "--commit", "--yes", "--every", "0.2s"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: passes(conn) and passes(conn)[0]["passes"] >= 3, timeout=20)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    (row,) = passes(conn)
    assert row["reclaimer"] == "reclaimer@ci" and row["job_table"] == "public.jobs"
    assert row["requeued_total"] == 3 and row["parked_total"] == 1 and row["every_s"] == 0.2
    assert row["pid"] == proc.pid and row["db_role"] == "postgres", err
    after = prometheus.samples(run("metrics").out)
    assert after[("jobctl_reclaimer_passes_total", table)] == row["passes"]
    assert after[("jobctl_notifications_failed_total", table)] == 0  # none asked for
    assert abs(after[("jobctl_reclaimer_last_pass_timestamp_seconds", table)] - time.time()) < 30
    assert run("summary").err == ""  # it ran a moment ago
    conn.execute("UPDATE jobctl.reclaimer_passes SET last_pass_at = now() - interval '10 min'")
    said = run("summary").err
    assert "no reclaimer pass for 600s (its interval: 0.2s)" in said, said


def test_a_role_that_may_not_record_says_so_once_and_reclaims(conn, dsn):
    """Without INSERT on jobctl.reclaimer_passes the service says it once and goes on."""
    conn.execute("REVOKE INSERT, UPDATE ON jobctl.reclaimer_passes FROM PUBLIC")
    conn.execute("DROP ROLE IF EXISTS i37_reclaimer")
    conn.execute("CREATE ROLE i37_reclaimer LOGIN")
    conn.execute("GRANT USAGE ON SCHEMA jobctl TO i37_reclaimer")
    conn.execute("GRANT SELECT, UPDATE ON jobs TO i37_reclaimer")
    conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA jobctl TO i37_reclaimer")
    add_jobs(conn, 2)
    claim_all(dsn, 2, lease_seconds=-60)
    role_dsn = f"{dsn} user=i37_reclaimer"
    env = {**os.environ, "JOBCTL_DSN": role_dsn}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "reclaim", "--commit", "--yes", "--every", "0.2s"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: (
                conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'queued'").fetchone()[
                    "n"
                ]
                == 2
            ),
            timeout=20,
        )
        time.sleep(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        conn.execute("REASSIGN OWNED BY i37_reclaimer TO postgres")
        conn.execute("DROP OWNED BY i37_reclaimer")
        conn.execute("DROP ROLE i37_reclaimer")
    assert err.count("its passes are not recorded") == 1, err
    assert "permission denied" in err and passes(conn) == []

"""schema remove on a busy table: workers never queue behind it for more than one short try,
it gets through once a long report ends, and at its deadline it stops with nothing half-done.

Real processes (tests/busy.py): three workers claiming and completing as fast as they can,
timing each statement, a report holding the table, and jobctl itself.
"""

from __future__ import annotations

import json
import time

import busy
import psycopg
import pytest
from helpers import jobctl_process
from test_apply_busy import BOUND_MS, catalog


def checks(dsn: str, table: str) -> dict[str, dict[str, object]]:
    result = jobctl_process(dsn, "--table", table, "schema", "check", "-o", "json")
    return {c["check"]: c for c in json.loads(result.stdout)}


@pytest.mark.slow
def test_workers_never_queue_behind_remove_and_it_lands_after_the_report(conn, dsn):
    busy.make_queue(conn, "q", queued=40_000, done=20_000)
    applied = jobctl_process(dsn, "--table", "q", "schema", "apply", "--yes")
    assert applied.returncode == 0, applied.stderr
    workers = busy.start_workers(dsn, "q", 3, seconds=60)  # stopped once the removes are done
    time.sleep(1)  # the workers are up and claiming
    report, report_pid = busy.start_report(dsn, "q", 5)  # (jobctl takes a while to start)
    started = time.time()
    trigger = jobctl_process(
        dsn, "--table", "q", "schema", "remove", "--yes", "--lock-deadline", "30s"
    )
    ended = time.time()
    report.communicate(timeout=30)
    # the rest, the workers still running (they never write the lease columns)
    rest_started = time.time()
    rest = jobctl_process(
        dsn, "--table", "q", "schema", "remove", "--history", "--columns", "--yes"
    )
    rest_ended = time.time()
    busy.stop(workers)
    result = busy.collect(workers)

    assert trigger.returncode == 0, trigger.stderr
    assert "drop the history trigger and its function jobctl.record_q_" in trigger.stderr
    assert f": lock held by pid {report_pid} (" in trigger.stderr
    assert rest.returncode == 0, rest.stderr
    assert "done: drop from public.q the columns attempt_token" in rest.stderr
    # (the template's reference table, public.jobs, is in schema jobctl too)
    assert "kept: schema jobctl: it serves other tables too (public.jobs" in rest.stderr
    assert not result["errors"], result["errors"][:3]
    meanwhile = busy.during(result, started, ended) + busy.during(result, rest_started, rest_ended)
    assert len(meanwhile) > 100, "the workers were not running during the removes"
    figures = busy.figures(meanwhile)
    assert figures["worst_ms"] < BOUND_MS, figures
    found = checks(dsn, "q")
    assert found["jobctl installed"]["ok"] is False


@pytest.mark.slow
def test_at_the_deadline_remove_names_the_blocker_and_leaves_the_table_as_it_was(conn, dsn):
    busy.make_queue(conn, "q", queued=1000)
    assert jobctl_process(dsn, "--table", "q", "schema", "apply", "--yes").returncode == 0
    before = catalog(conn, "q")
    report, report_pid = busy.start_report(dsn, "q", 5)
    remove = jobctl_process(
        dsn, "--table", "q", "schema", "remove", "--yes", "--lock-deadline", "1s"
    )
    assert remove.returncode == 1
    last = remove.stderr.splitlines()[-1]
    assert last.startswith("jobctl: error: drop the history trigger and its function jobctl.")
    assert "the lock on public.q was not granted within the 1s deadline" in last
    assert f"held by pid {report_pid} (active, transaction open " in last
    assert "nothing of this step was applied: run jobctl schema remove again" in last
    assert "schema apply" not in last
    assert catalog(conn, "q") == before
    report.communicate(timeout=30)
    assert checks(dsn, "q")["history installed"]["ok"] is True  # still installed
    again = jobctl_process(dsn, "--table", "q", "schema", "remove", "--yes")
    assert again.returncode == 0, again.stderr
    assert "trigger missing" in str(checks(dsn, "q")["history installed"]["detail"])


@pytest.mark.slow
def test_on_a_terminal_the_question_names_the_history_rows_and_no_changes_nothing(conn, dsn):
    from test_terminal import on_terminal

    from jobctl import lease

    conn.execute("INSERT INTO jobs (payload) SELECT '{}' FROM generate_series(1, 3)")
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w1", lease_seconds=30)
        worker.fail(worker.claim(), "boom", retry_delay=0)
    before = catalog(conn, "jobs")
    code, screen = on_terminal(dsn, ["schema", "remove", "--history"], "n")

    assert code == 2, screen
    assert "drop schema jobctl: the history of public.jobs (1 event, 1 attempt)" in screen
    assert "[y/N]" in screen and "cancelled; nothing changed" in screen
    assert catalog(conn, "jobs") == before

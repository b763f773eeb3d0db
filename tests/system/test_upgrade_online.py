"""Upgrading from 0.1.0 while the workers run: no worker statement waits more than 150 ms for
any migration (docs/history.md), on a history of many events.

jobctl 0.1.0 (its own venv: tests/releases.py) installs history 001-007 and its trigger;
jobctl.events is filled with N events (JOBCTL_UPGRADE_EVENTS: a scale test, run by its own
step of .ci/run at 1,000,000 and skipped by `make test` without it; 500,000 is enough for the
in-transaction build of 0.2.0's first 008 to hold a worker's failure 231 ms); four
``lease.Worker`` processes claim, heartbeat, complete and fail (each failure a retry or a
failure the history records: an event inserted), every statement timed (tests/busy.py);
then this jobctl's ``schema apply --yes`` runs 008 (the index of reclaims, built
CONCURRENTLY), 010, 011, 012, 013 and replaces the trigger.

    JOBCTL_UPGRADE_EVENTS=1000000 pytest -n0 -s tests/system/test_upgrade_online.py
"""

from __future__ import annotations

import os
import time

import busy
import psycopg
import pytest
from helpers import jobctl_process
from psycopg import rows
from releases import old

BOUND_MS = 150  # docs/history.md: no worker statement waits longer for any migration
EVENTS = int(os.environ.get("JOBCTL_UPGRADE_EVENTS", "0"))
WORKERS = 4

FILL = """
INSERT INTO jobctl.events (job_table, job_id, at, event, from_status, to_status, attempt,
                           attempt_token, worker, actor, reason)
SELECT 'public.jobs', (g %% 50000)::text, now() - (%(n)s - g) * interval '10 ms',
       CASE WHEN g %% 20 = 0 THEN 'reclaimed' ELSE 'retried' END, 'processing',
       CASE WHEN g %% 40 = 0 THEN 'failed' ELSE 'queued' END, 1, gen_random_uuid(),
       'seed-worker', 'seed', 'seeded'
FROM generate_series(1, %(n)s) g
"""


def counts(conn: psycopg.Connection) -> dict[str, int]:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE actor = 'seed') AS seeded, "
        "       count(*) FILTER (WHERE worker LIKE 'w_' AND event IN ('retried', 'failed')) "
        "         AS workers "
        "FROM jobctl.events"
    ).fetchone()
    assert row is not None
    return dict(row)


@pytest.mark.slow
@pytest.mark.skipif(
    not EVENTS, reason="a scale test: set JOBCTL_UPGRADE_EVENTS (.ci/run's own step does)"
)
def test_an_upgrade_from_0_1_0_never_holds_the_workers_up(empty_dsn, jobctl_0_1_0):
    installed = old(jobctl_0_1_0, empty_dsn, "schema", "apply", "--create", "--yes")
    assert installed.returncode == 0, installed.stderr
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        conn.execute(FILL, {"n": EVENTS})
        conn.execute(
            "INSERT INTO jobs (queue, payload) SELECT 'default', '{}' "
            "FROM generate_series(1, 30000)"
        )
        conn.execute("VACUUM ANALYZE jobctl.events")
        conn.execute("VACUUM ANALYZE jobs")
        before = counts(conn)
        assert before["seeded"] == EVENTS

        workers = busy.start_lease_workers(empty_dsn, "jobs", WORKERS, seconds=600)
        time.sleep(2)  # the workers are up, claiming and failing
        started = time.time()
        applied = jobctl_process(empty_dsn, "schema", "apply", "--yes")
        ended = time.time()
        time.sleep(1)  # and go on under the new trigger
        busy.stop(workers)
        result = busy.collect(workers)

        assert applied.returncode == 0, applied.stderr
        assert "done: history migration 008 (reclaimed_index)" in applied.stderr
        assert not result["errors"], result["errors"][:5]
        during = [
            (op, lat * 1000)
            for at, lat, op in zip(result["at"], result["latencies"], result["ops"], strict=True)
            if started <= at <= ended
        ]
        fails = [ms for op, ms in during if op == "fail"]
        assert len(fails) > 20, "the workers were not failing jobs during the apply"
        figures = busy.figures([ms / 1000 for _, ms in during])
        worst = max(during, key=lambda d: d[1])
        assert worst[1] <= BOUND_MS, (
            f"{EVENTS:,} events: the worst worker statement during schema apply "
            f"({ended - started:.1f} s) waited {worst[1]:.0f} ms (a {worst[0]}); worst fail "
            f"{max(fails):.0f} ms of {len(fails)}; all: {figures}"
        )
        after = counts(conn)
        assert after["seeded"] == before["seeded"]  # every event kept
        # every failure the workers made is recorded, under the old trigger and the new one
        assert after["workers"] == sum(result["failed"])
        index = conn.execute(
            "SELECT i.indisvalid FROM pg_index i "
            "WHERE i.indexrelid = to_regclass('jobctl.events_reclaimed_idx')"
        ).fetchone()
        assert index is not None and index["indisvalid"]
        print(
            f"\n{EVENTS:,} events: schema apply {ended - started:.1f} s; worker statements "
            f"during it {figures}; fails {len(fails)}, worst {max(fails):.0f} ms"
        )

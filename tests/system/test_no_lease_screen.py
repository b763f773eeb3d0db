"""``stuck`` on a pseudo-terminal of 80x24 and 120x40 when jobs claimed with no lease sit
beside expired leases (a Delayed::Job table's incident: 4 leases of a dead host expired, old
lock-only rows of another): the expired leases stay on the screen, many lock-only rows are
one line that names the command listing them, and at 120 columns the mapped queue and the
attempts show, never a cut skip reason in their place."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import psycopg
import pytest
from conftest import scratch_database
from rich.cells import cell_len
from screens import on_terminal, scrolled

from jobctl import lease

pytest.importorskip("pyte")

DEAD = "delayed_job.4 host:web-old-3 pid:17012"


@pytest.fixture(scope="module", params=[40, 8], ids=["swamped", "few"])
def incident(request, server_dsn, template):
    """4 expired leases of DEAD (queue mailers), 2 live leases of 10 minutes, then ``param``
    jobs claimed with no lease 5 hours ago (queue default); the table's queue column mapped."""
    with scratch_database(server_dsn, "jobctl_nolease", template) as dsn:
        subprocess.run(
            [sys.executable, "-m", "jobctl", "schema", "apply", "--yes", "--column", "queue=queue"],
            env={**os.environ, "JOBCTL_DSN": dsn},
            capture_output=True,
            check=True,
        )
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("INSERT INTO jobs (queue) SELECT 'mailers' FROM generate_series(1, 4)")
            worker = lease.Worker(c, DEAD, lease_seconds=-300)
            assert all(worker.claim() for _ in range(4))
            c.execute("INSERT INTO jobs (queue) SELECT 'mailers' FROM generate_series(1, 2)")
            live = lease.Worker(c, "web-live-1", lease_seconds=600)  # 2 live leases
            assert all(live.claim() for _ in range(2))
            c.execute(
                "INSERT INTO jobs (status, reserved_by, reserved_at, attempts) "
                "SELECT 'processing', 'delayed_job host:web-old-3 pid:' || (17000 + g), "
                "now() - interval '5 hours', 1 FROM generate_series(1, %s) g",
                (request.param,),
            )
        yield dsn, request.param


def fits(shot, columns: int) -> None:
    wide = [line for line in shot.written_lines() if cell_len(line) > columns]
    assert not wide, f"lines wider than {columns} columns: {wide}"


@pytest.mark.parametrize(("columns", "rows"), [(80, 24), (120, 40)])
def test_expired_leases_stay_on_the_screen(incident, columns, rows):
    dsn, lockless = incident
    shot = on_terminal(["stuck"], columns=columns, rows=rows, dsn=dsn)
    assert shot.code == 0
    fits(shot, columns)
    expired = [line for line in shot.lines if DEAD in line]
    assert len(expired) == 4 and all("requeue" in line for line in expired)
    assert shot.lines[0].startswith("ID ")  # the header: nothing scrolled away
    listed = [
        line for line in shot.lines if re.match(r"\d+\s+(default\s+)?delayed_job host:", line)
    ]
    said = " ".join(shot.text.split())
    if lockless > 10:
        assert listed == []
        assert f"{lockless} processing job(s) have no lease, not listed beside the leases" in said
        assert "jobctl stuck -o wide lists them" in said
    else:
        assert len(listed) == lockless and all("no lease" in line for line in listed)
        assert f"{lockless} processing job(s) have no lease (claimed by" in said
    # the hint counts what reclaim acts on: the 4 expired leases, not the lease-less jobs
    assert "4 job(s); preview the reclaim with: jobctl reclaim --dry-run" in said
    if columns == 120:  # the mapped queue and the attempts before optional detail
        header = shot.lines[0].split()
        assert header[:5] == ["ID", "QUEUE", "WORKER", "POLICY", "ATTEMPTS"]
        assert "SKIPPED" not in header and "reclai…" not in shot.text


def test_wide_lists_every_job_with_no_lease(incident):
    dsn, lockless = incident
    shot = scrolled(["stuck", "-o", "wide"], columns=120, rows=40, dsn=dsn)
    assert shot.code == 0
    listed = [line for line in shot.lines if re.match(r"\d+\s+\S+\s+delayed_job host:", line)]
    assert len(listed) == lockless
    assert "not listed" not in shot.text


def test_the_reclaim_hint_counts_expired_leases_alone(incident):
    """Beside the 2 live leases ``--expiring-within`` lists and the jobs with no lease, the
    hint counts the 4 expired leases reclaim acts on."""
    dsn, _ = incident
    shot = on_terminal(["stuck", "--expiring-within", "1h"], columns=120, rows=60, dsn=dsn)
    said = " ".join(shot.text.split())
    assert sum("web-live-1" in line for line in shot.lines) == 2
    assert "4 job(s); preview the reclaim with: jobctl reclaim --dry-run" in said

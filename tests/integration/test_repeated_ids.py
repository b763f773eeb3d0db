"""One id held by two rows (a partitioned table keyed on (id, queue): the same id in two
partitions, inserted after schema apply). jobctl names a job by its id alone, so every command
leaves that id out and names it, and serves every other job: stuck, reclaim (dry run, a
plan's commit, a commit), show/history/explain, requeue/fail/cancel ID and their bulk forms,
top. Both rows of the id stay as they were, and the history records nothing of it.

Real PostgreSQL, real rows (tests/shapes.py's LIST_BY_QUEUE).
"""

from __future__ import annotations

import datetime as dt
import json

import psycopg
from psycopg import rows
from shapes import LIST_BY_QUEUE

from jobctl import db, lease

# the job's copy in another partition: the same id, its own attempt, as expired as the first
REPEAT = (
    "INSERT INTO jobs (id, queue, status, attempt_token, reserved_by, reserved_at,"
    " lease_expires_at) SELECT id, CASE WHEN queue = 'mail' THEN 'default' ELSE 'mail' END,"
    " status, gen_random_uuid(), reserved_by, reserved_at, lease_expires_at"
    " FROM jobs WHERE id = %s"
)
BOTH_ROWS = (
    "SELECT tableoid::regclass::text AS partition, xmin::text AS version, to_jsonb(j) AS row"
    " FROM jobs j WHERE id = %s ORDER BY 1"
)


def expired_claims(dsn: str, n: int) -> list[int]:
    """``n`` queued jobs claimed with leases already expired; their ids."""
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w1", lease_seconds=-60)
        claimed = [worker.claim() for _ in range(n)]
    return sorted(j.id for j in claimed if j is not None)


def named(err: str, job: int) -> bool:
    """stderr names the id once, as held by 2 rows, pointing at the docs."""
    line = f"job id {job} is held by 2 rows (partitions "
    return err.count(line) == 1 and "docs/your-table.md" in err


def test_one_repeated_id_is_left_out_and_named_by_every_command(empty_dsn, run, tmp_path):
    conn = psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row)
    conn.execute(LIST_BY_QUEUE.ddl)
    conn.execute(LIST_BY_QUEUE.fill, {"n": 40})
    assert run("schema", "apply", "--yes", "--column", "queue=queue", dsn=empty_dsn).code == 0
    claimed = expired_claims(empty_dsn, 3)
    job, others = claimed[0], claimed[1:]
    plan = tmp_path / "plan.json"  # reviewed before the id repeated: all three
    saved = run("reclaim", "--dry-run", "--save-plan", str(plan), dsn=empty_dsn)
    assert saved.code == 0, saved.err
    conn.execute(REPEAT, (job,))
    before = conn.execute(BOTH_ROWS, (job,)).fetchall()
    assert len(before) == 2 and before[0]["partition"] != before[1]["partition"]
    last_event = conn.execute("SELECT coalesce(max(event_id), 0) AS n FROM jobctl.events")
    since = last_event.fetchone()["n"]

    # the reads: the other jobs listed, the id named once, exit 1 (a partial picture)
    for args in (("stuck",), ("stuck", "--expiring-within", "30s"), ("reclaim", "--dry-run")):
        result = run(*args, "-o", "json", dsn=empty_dsn)
        assert result.code == 1, (args, result.err)
        assert sorted(r["id"] for r in json.loads(result.out)) == others, args
        assert named(result.err, job), (args, result.err)

    # one id's commands: refused in one line, exit 2; another job served
    for args in (
        ("show", str(job)),
        ("history", str(job)),
        ("explain", str(job)),
        ("requeue", str(job), "--yes"),
        ("fail", str(job), "--reason", "stuck", "--yes"),
        ("cancel", str(job), "--reason", "stuck", "--yes"),
    ):
        result = run(*args, dsn=empty_dsn)
        assert result.code == 2, (args, result.out, result.err)
        assert f"job id {job} is held by 2 rows (partitions " in result.err, (args, result.err)
        assert "Traceback" not in result.err
    shown = run("show", str(others[0]), "-o", "json", dsn=empty_dsn)
    assert shown.code == 0 and json.loads(shown.out)["id"] == others[0]

    # a bulk form, listed only: the others, the id named
    listed = run("requeue", "--status", "processing", "-o", "json", dsn=empty_dsn)
    assert listed.code == 1, listed.err
    assert sorted(r["id"] for r in json.loads(listed.out)) == others
    assert named(listed.err, job), listed.err

    # top: every other job on screen, the id named on the status line
    from jobctl.cli.top.data import Source
    from jobctl.ops import console, sessions

    settings = db.Settings(dsn=empty_dsn, actor="tester@ci")
    access = sessions.Access("top")
    with sessions.open(settings, access, say=lambda _: None) as (s, standing):
        ask = console.Ask(dt.timedelta(seconds=30), limit=500)
        source = Source.one(s, standing, ask, writes=False)
        snap = source.refresh("stuck")
    assert sorted(r["id"] for r in snap.stuck) == others
    assert len(source.notes) == 1 and named(source.notes[0], job), source.notes

    # the plan reviewed before: the others reclaimed as reviewed, the id left out, named
    done = run("reclaim", "--plan", str(plan), "--commit", "--yes", dsn=empty_dsn)
    assert done.code == 1 and "2 requeued" in done.err and named(done.err, job), done.err

    # a commit: what is expired when it runs, the id left out, named
    again = expired_claims(empty_dsn, 2)
    done = run("reclaim", "--commit", "--yes", "-o", "json", dsn=empty_dsn)
    assert done.code == 1 and named(done.err, job), done.err
    assert sorted(r["id"] for r in json.loads(done.out)) == again

    # a bulk write: the others failed, the id left out, named
    third = expired_claims(empty_dsn, 2)
    failed = run(
        "fail", "--status", "processing", "--reason", "r", "--yes", "-o", "json", dsn=empty_dsn
    )
    assert failed.code == 1 and named(failed.err, job), failed.err
    assert sorted(r["id"] for r in json.loads(failed.out)) == third

    # both of the id's rows as they were, and no event of it since it repeated
    assert conn.execute(BOTH_ROWS, (job,)).fetchall() == before
    events = conn.execute(
        "SELECT count(*) AS n FROM jobctl.events WHERE job_id = %s AND event_id > %s",
        (str(job), since),
    )
    assert events.fetchone()["n"] == 0
    conn.close()

"""schema apply and schema check on partitioned jobs tables (LIST, RANGE, HASH, two levels):
the reclaim index ON ONLY the table, each partition's built and attached, never a long lock.

Real PostgreSQL, real rows; the tables are those of tests/shapes.py (PARTITIONED).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

import busy
import psycopg
import pytest
from helpers import jobctl_process, wait_until
from psycopg import rows
from shapes import (
    HASH_BY_ID,
    LIST_BY_QUEUE,
    LIST_BY_STATUS,
    LIST_THEN_HASH,
    PARTITIONED,
    RANGE_BY_CREATED,
    Shape,
)

from jobctl import db, lease
from jobctl.ops import triage
from jobctl.schema import apply as schema_apply
from jobctl.schema import steps as schema_steps
from jobctl.sql import queries

ROOT_INDEX = "idx_jobs_processing_timeout"


def made(dsn: str, s: Shape, n: int = 0) -> psycopg.Connection[Any]:
    """The shape's table in ``dsn``, with ``n`` jobs spread over its partitions."""
    conn = psycopg.connect(dsn, autocommit=True, row_factory=rows.dict_row)
    conn.execute(s.ddl)
    if n:
        conn.execute(s.fill, {"n": n})
    return conn


def leaf_indexes(conn: psycopg.Connection[Any], table: str = "jobs") -> dict[str, Any]:
    """Each leaf partition -> (its index in the tree of the table's reclaim index, valid), or
    None when it has none there."""
    found = conn.execute(
        "SELECT t.relid::regclass::text AS leaf, x.relid::regclass::text AS index, i.indisvalid "
        "FROM pg_partition_tree(%(t)s::regclass) t "
        "LEFT JOIN pg_partition_tree(to_regclass(%(i)s)) x "
        "     ON x.relid IN (SELECT indexrelid FROM pg_index WHERE indrelid = t.relid) "
        "LEFT JOIN pg_index i ON i.indexrelid = x.relid "
        "WHERE t.isleaf ORDER BY 1",
        {"t": table, "i": ROOT_INDEX},
    ).fetchall()
    return {r["leaf"]: (r["index"], r["indisvalid"]) if r["index"] else None for r in found}


def root_index_valid(conn: psycopg.Connection[Any]) -> bool | None:
    row = conn.execute(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (ROOT_INDEX,)
    ).fetchone()
    return None if row is None else row["indisvalid"]


def checks(run, dsn: str) -> tuple[int, dict[str, dict[str, Any]]]:
    result = run("schema", "check", "-o", "json", dsn=dsn)
    return result.code, {c["check"]: c for c in json.loads(result.out)}


def plan(dsn: str) -> list[schema_steps.Step]:
    with db.connect(db.Settings(dsn=dsn)) as c:
        return schema_apply.plan_apply(c, "jobs", create=False)


def catalog(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Every index, constraint and trigger of the table and its partitions."""
    return conn.execute(
        "SELECT (SELECT array_agg(indexrelid::regclass::text || ' ' || indisvalid ORDER BY 1) "
        "        FROM pg_index "
        "        WHERE indrelid IN (SELECT relid FROM pg_partition_tree('jobs'))) AS idx,"
        " (SELECT array_agg(conrelid::regclass::text || ' ' || conname || ' ' || convalidated "
        "                   ORDER BY 1) FROM pg_constraint "
        "        WHERE conrelid IN (SELECT relid FROM pg_partition_tree('jobs'))) AS cons,"
        " (SELECT array_agg(tgrelid::regclass::text || ' ' || tgname ORDER BY 1) FROM pg_trigger"
        "        WHERE tgrelid IN (SELECT relid FROM pg_partition_tree('jobs'))) AS trg"
    ).fetchone()


@pytest.mark.parametrize("s", PARTITIONED, ids=[s.name for s in PARTITIONED])
def test_apply_on_a_partitioned_table_with_rows(empty_dsn, run, s):
    with made(empty_dsn, s, 2000) as conn:
        code, before = checks(run, empty_dsn)
        assert code == 4 and not before["reclaim index on every partition"]["ok"]
        first = run("schema", "apply", "--yes", dsn=empty_dsn)
        assert first.code == 0, first.err
        assert "create the reclaim index on public.jobs (ON ONLY" in first.err
        assert "concurrently" in first.err  # the partitions have rows
        code, after = checks(run, empty_dsn)
        assert code == 0, after
        assert after["reclaim index"]["detail"].startswith(f"{ROOT_INDEX} (valid, on the")
        leaves = leaf_indexes(conn)
        assert len(leaves) >= 2 and all(v is not None and v[1] for v in leaves.values()), leaves
        assert root_index_valid(conn) is True
        # the checks (NOT VALID, then validated) and the trigger are on every partition too
        state = catalog(conn)
        for leaf in leaves:
            assert f"{leaf} jobs_reclaim_count_check true" in state["cons"]
            assert f"{leaf} jobctl_history" in state["trg"]
        # idempotent: a second run plans nothing and changes nothing
        assert plan(empty_dsn) == []
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        assert catalog(conn) == state
        assert conn.execute(s.new_job).fetchone() is not None


def test_stuck_reads_each_partitions_index(empty_dsn, run):
    with made(empty_dsn, LIST_BY_QUEUE, 30_000) as conn:
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        conn.execute(
            "UPDATE jobs SET status = 'processing', attempt_token = gen_random_uuid(), "
            "reserved_by = 'w', reserved_at = now() - interval '2 min', "
            "lease_expires_at = now() - interval '1 min' WHERE id % 1000 = 0"
        )
        conn.execute("ANALYZE jobs")
        with db.connect(db.Settings(dsn=empty_dsn)) as c:
            table = db.resolve_table(c, "jobs")
            stuck = queries.query("stuck", **table.fragments)
            params = {**triage.ExpiredFilter().params(), "limit": 50, "no_lease": True}
            explained = c.execute(sql_explain(stuck), params).fetchone()
        text = json.dumps(explained)
        for leaf, (index, _) in leaf_indexes(conn).items():
            assert f'"Index Name": "{index.split(".")[-1]}"' in text, (leaf, text)
        assert "Seq Scan" not in text
        found = json.loads(run("stuck", "-o", "json", dsn=empty_dsn).out)
        assert len(found) == 30


def sql_explain(statement):
    from psycopg import sql

    return sql.Composed([sql.SQL("EXPLAIN (FORMAT JSON) "), statement])


def test_a_partition_added_after_apply_gets_the_index(empty_dsn, run):
    with made(empty_dsn, LIST_BY_QUEUE, 300) as conn:
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        conn.execute("CREATE TABLE jobs_billing PARTITION OF jobs FOR VALUES IN ('billing')")
        # a table with rows attached as a partition: made LIKE the jobs table, with its
        # checks (ATTACH PARTITION refuses a table that lacks the parent's CHECK constraints)
        conn.execute(
            "CREATE TABLE jobs_search (LIKE jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
        conn.execute(
            "INSERT INTO jobs_search (id, queue) "
            "SELECT 100000 + g, 'search' FROM generate_series(1, 50) g"
        )
        conn.execute("ALTER TABLE jobs DETACH PARTITION jobs_other")  # the DEFAULT partition
        conn.execute("ALTER TABLE jobs ATTACH PARTITION jobs_search FOR VALUES IN ('search')")
        conn.execute("ALTER TABLE jobs ATTACH PARTITION jobs_other DEFAULT")
        leaves = leaf_indexes(conn)
        assert set(leaves) >= {"jobs_billing", "jobs_search", "jobs_other"}
        assert all(v is not None and v[1] for v in leaves.values()), leaves
        assert root_index_valid(conn) is True
        assert checks(run, empty_dsn)[0] == 0
        assert plan(empty_dsn) == []


def test_a_partition_lacking_its_index_is_named_and_apply_builds_it(empty_dsn, run):
    """A leaf's attached index cannot be dropped alone (PostgreSQL refuses); a partition
    lacks it after an interrupted apply, which the next apply finishes."""
    with made(empty_dsn, LIST_BY_QUEUE, 300) as conn:
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        with pytest.raises(psycopg.errors.DependentObjectsStillExist):
            conn.execute("DROP INDEX idx_jobs_mail_processing_timeout")
        conn.execute(f"DROP INDEX {ROOT_INDEX}")  # and with it every partition's
        steps = plan(empty_dsn)
        assert [s.what for s in steps] == [
            "create the reclaim index on public.jobs (ON ONLY: each partition's follows, "
            "attached to it)",
            "create the reclaim index on partition public.jobs_default concurrently",
            "attach the reclaim index of partition public.jobs_default",
            "create the reclaim index on partition public.jobs_mail concurrently",
            "attach the reclaim index of partition public.jobs_mail",
            "create the reclaim index on partition public.jobs_other concurrently",
            "attach the reclaim index of partition public.jobs_other",
        ]
        assert all(s.locks for s in steps if "attach" in s.what or "ON ONLY" in s.what)
        settings = db.Settings(dsn=empty_dsn)
        with db.connect(settings) as c:  # interrupted: the mail partition's index not attached
            schema_steps.apply(c, settings, steps[:4])
        code, found = checks(run, empty_dsn)
        assert code == 4
        assert found["reclaim index"]["detail"] == (
            f"{ROOT_INDEX} on the partitioned table is not valid yet: 1 of its 3 partitions "
            "have theirs attached (run jobctl schema apply)"
        )
        assert found["reclaim index on every partition"]["detail"] == (
            "missing on public.jobs_other; not attached to the table's index on "
            "public.jobs_mail (run jobctl schema apply)"
        )
        assert [s.what for s in plan(empty_dsn)] == [
            "attach the reclaim index of partition public.jobs_mail",
            "create the reclaim index on partition public.jobs_other concurrently",
            "attach the reclaim index of partition public.jobs_other",
        ]
        again = run("schema", "apply", "--yes", dsn=empty_dsn)
        assert again.code == 0, again.err
        assert checks(run, empty_dsn)[0] == 0
        assert root_index_valid(conn) is True and plan(empty_dsn) == []


@pytest.mark.slow
def test_an_interrupted_concurrent_build_is_dropped_and_rebuilt(empty_dsn, run):
    with made(empty_dsn, LIST_THEN_HASH, 1000) as conn:
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        conn.execute(f"DROP INDEX {ROOT_INDEX}")
        report, report_pid = busy.start_report(empty_dsn, "jobs", 30)  # an old snapshot
        apply = subprocess.Popen(
            [sys.executable, "-m", "jobctl", "--dsn", empty_dsn, "schema", "apply", "--yes"],
            stderr=subprocess.PIPE,
            text=True,
        )
        # the first partition's concurrent build waits for the report's snapshot: stopped
        # there (as by Ctrl-C or a statement timeout), it leaves an invalid index behind
        building = (  # (this test's database: the other tests' builds run beside it)
            "SELECT pid FROM pg_stat_progress_create_index"
            " WHERE phase LIKE 'waiting%' AND datname = current_database()"
        )
        wait_until(lambda: conn.execute(building).fetchone() is not None, what="the build")
        conn.execute(f"SELECT pg_cancel_backend(({building}))")
        _, err = apply.communicate(timeout=30)
        conn.execute("SELECT pg_cancel_backend(%s)", (report_pid,))  # the report ends
        report.communicate(timeout=30)
        assert apply.returncode == 1, err
        assert "canceling statement due to user request" in err.splitlines()[-1]
        code, found = checks(run, empty_dsn)
        assert code == 4
        assert found["reclaim index on every partition"]["detail"] == (
            "missing on public.jobs_default, public.jobs_mail (partitioned), "
            "public.jobs_mail_0, public.jobs_mail_1; invalid (an interrupted build) on "
            "archive.jobs_other (run jobctl schema apply)"
        )
        again = run("schema", "apply", "--yes", dsn=empty_dsn)
        assert again.code == 0, again.err
        assert "done: drop the invalid reclaim index of partition archive.jobs_other" in again.err
        assert checks(run, empty_dsn)[0] == 0
        assert all(v is not None and v[1] for v in leaf_indexes(conn).values())


def test_index_names_fit_and_stay_unique_in_their_schema(empty_dsn, run):
    long = "jobs_partition_for_the_queue_with_a_rather_long_name_number"
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        conn.execute(LIST_BY_QUEUE.ddl.split(";")[0])
        conn.execute(f"CREATE TABLE {long}_1 PARTITION OF jobs FOR VALUES IN ('one')")
        conn.execute(f"CREATE TABLE {long}_2 PARTITION OF jobs FOR VALUES IN ('two')")
        conn.execute('CREATE TABLE "jobs_ünïcödé_ünïcödé_ünïcödé_ü" PARTITION OF jobs DEFAULT')
        # the first-choice name of a partition's index, taken by something else
        conn.execute("CREATE TABLE jobs_mail PARTITION OF jobs FOR VALUES IN ('mail')")
        conn.execute("CREATE SEQUENCE idx_jobs_mail_processing_timeout")
        conn.execute("INSERT INTO jobs (queue) VALUES ('one'), ('two'), ('mail'), ('x')")
        result = run("schema", "apply", "--yes", dsn=empty_dsn)
        assert result.code == 0, result.err
        names = [
            index.split(".")[-1].strip('"') for index, _ in leaf_indexes(conn, "jobs").values()
        ]
    assert len(names) == 4 and len(set(names)) == 4
    assert all(len(n.encode()) <= 63 for n in names), names
    assert "idx_jobs_mail_processing_timeout" not in names
    assert checks(run, empty_dsn)[0] == 0 and plan(empty_dsn) == []


def test_a_table_partitioned_by_status_gets_the_index_on_every_partition(empty_dsn, run):
    """Every partition, even those whose bound cannot hold 'processing' (an empty partial
    index there): the parent's index is valid only when every partition has one."""
    with made(empty_dsn, LIST_BY_STATUS) as conn:
        conn.execute("INSERT INTO jobs (status) SELECT 'done' FROM generate_series(1, 100)")
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        leaves = leaf_indexes(conn)
        assert set(leaves) == {"jobs_queued", "jobs_processing", "jobs_finished"}
        assert all(v is not None and v[1] for v in leaves.values())
        assert checks(run, empty_dsn)[0] == 0


def test_stuck_and_reclaim_on_a_table_partitioned_by_queue(empty_dsn, run):
    with made(empty_dsn, LIST_BY_QUEUE, 30) as conn:
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        with psycopg.connect(empty_dsn, autocommit=True) as c:
            worker = lease.Worker(c, "w1", lease_seconds=-60)  # leases already expired
            claimed = [worker.claim() for _ in range(3)]
        ids = sorted(j.id for j in claimed if j is not None)
        assert len(ids) == 3
        stuck = json.loads(run("stuck", "-o", "json", dsn=empty_dsn).out)
        assert sorted(r["id"] for r in stuck) == ids
        assert {r["action"] for r in stuck} == {"requeue"}
        dry = run("reclaim", "--dry-run", dsn=empty_dsn)
        assert dry.code == 0 and "3 would be requeued" in dry.err
        processing = "SELECT count(*) AS n FROM jobs WHERE status = 'processing'"
        assert conn.execute(processing).fetchone()["n"] == 3  # a dry run changes nothing
        done = run("reclaim", "--commit", "--yes", dsn=empty_dsn)
        assert done.code == 0 and "3 requeued" in done.err
        after = conn.execute(
            "SELECT id, status, reclaim_count, attempt_token FROM jobs WHERE id = ANY(%s)", (ids,)
        ).fetchall()
        assert all(
            r["status"] == "queued" and r["reclaim_count"] == 1 and r["attempt_token"] is None
            for r in after
        )
        assert json.loads(run("stuck", "-o", "json", dsn=empty_dsn).out) == []


def test_the_history_of_a_job_in_a_partitioned_table(empty_dsn, run):
    """The trigger fires on the partition; the history records the table's name."""
    with made(empty_dsn, LIST_BY_QUEUE, 8):  # every fourth job queued
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        with psycopg.connect(empty_dsn, autocommit=True) as c:
            job = lease.Worker(c, "w1", lease_seconds=-60).claim()
        assert job is not None
        assert run("reclaim", "--commit", "--yes", dsn=empty_dsn).code == 0
        shown = json.loads(run("history", str(job.id), "-o", "json", dsn=empty_dsn).out)
        assert [e["event"] for e in shown["events"]][-1] == "reclaimed"


@pytest.mark.skipif(shutil.which("psql") is None, reason="needs psql")
def test_the_sql_script_runs_in_psql(empty_dsn, run):
    with made(empty_dsn, LIST_THEN_HASH, 1000) as conn:
        script = run("schema", "apply", "--sql", dsn=empty_dsn).out
        assert "ON ONLY" in script and "ATTACH PARTITION" in script
        assert "CREATE INDEX CONCURRENTLY" in script
        # the sub-partitioned partition's index is attached upward only once it is valid
        # (its own partitions' attached first): attached while invalid, the attach of its last
        # partition's index would take an ACCESS EXCLUSIVE lock on the whole jobs table
        attach_mail = script.index('ATTACH PARTITION "public"."idx_jobs_mail_processing_timeout"')
        assert script.index('ATTACH PARTITION "public"."idx_jobs_mail_1_') < attach_mail
        done = subprocess.run(
            ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", empty_dsn, "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        assert checks(run, empty_dsn)[0] == 0
        assert root_index_valid(conn) is True and plan(empty_dsn) == []


# ---------------------------------------------------------------- a busy partitioned table
LEASE_COLUMNS = """
ALTER TABLE jobs ADD COLUMN attempt_token uuid, ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN heartbeat_at timestamptz,
    ADD COLUMN recovery_policy text NOT NULL DEFAULT 'auto',
    ADD COLUMN reclaim_count integer NOT NULL DEFAULT 0
"""


def work(dsn: str, name: str, stop: threading.Event, out: dict[str, list[Any]]) -> None:
    """A worker: claim, heartbeat, complete, as fast as it can, timing each statement."""
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, name, lease_seconds=30)
        while not stop.is_set():
            try:
                started = time.time()
                job = worker.claim()
                out["at"].append(started)
                out["latencies"].append(time.time() - started)
                if job is None:
                    time.sleep(0.01)
                    continue
                for step in (worker.heartbeat, worker.complete):
                    started = time.time()
                    step(job)
                    out["at"].append(started)
                    out["latencies"].append(time.time() - started)
            except Exception as exc:  # any failure of a worker statement fails the test
                out["errors"].append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")


@pytest.mark.slow
def test_workers_keep_working_while_apply_runs_on_a_partitioned_table(empty_dsn):
    with made(empty_dsn, LIST_THEN_HASH, 60_000) as conn:
        conn.execute(LEASE_COLUMNS)  # the workers speak the lease design already
        conn.execute("VACUUM ANALYZE jobs")
        stop = threading.Event()
        results = [{"at": [], "latencies": [], "errors": []} for _ in range(4)]
        threads = [
            threading.Thread(target=work, args=(empty_dsn, f"w{i}", stop, out))
            for i, out in enumerate(results)
        ]
        for t in threads:
            t.start()
        time.sleep(0.5)
        started = time.time()
        applied = jobctl_process(empty_dsn, "schema", "apply", "--yes")
        ended = time.time()
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert applied.returncode == 0, applied.stderr
        assert "attach the reclaim index of partition archive.jobs_other" in applied.stderr
        errors = [e for r in results for e in r["errors"]]
        assert errors == []
        meanwhile = [
            lat
            for r in results
            for at, lat in zip(r["at"], r["latencies"], strict=True)
            if started <= at <= ended
        ]
        assert len(meanwhile) > 100, "the workers were not running during the apply"
        figures = busy.figures(meanwhile)
        print(f"\nworker statements during apply ({ended - started:.1f}s): {figures}")
        assert figures["worst_ms"] < 1000, figures  # one short lock try (150 ms) and the work
        assert root_index_valid(conn) is True
        done = conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'done'").fetchone()
        assert done["n"] > 45_000  # the fill's, and what the workers completed


def test_apply_through_a_pooler_in_transaction_mode(empty_dsn, pgbouncer, run):
    """No session state: each partition's concurrent build and each short try may land on
    another server connection of PgBouncer (transaction mode)."""
    from psycopg import conninfo

    pooled = conninfo.make_conninfo(
        pgbouncer, dbname=conninfo.conninfo_to_dict(empty_dsn)["dbname"]
    )
    with made(empty_dsn, LIST_THEN_HASH, 1000) as conn:
        result = run("schema", "apply", "--yes", dsn=pooled)
        assert result.code == 0, result.err
        assert run("schema", "check", dsn=pooled).code == 0
        assert root_index_valid(conn) is True


# ---------------------------------------------------------------- ids that repeat
# A partitioned table keyed on (id, partition key) may hold one id in two
# partitions. jobctl names a job by its id alone (fences, plans, history, events, top): such
# a table is refused by schema apply and failed by schema check, in one line naming the id;
# one whose ids come to repeat after apply: events refuses it in one line, and every command
# that selects jobs (top's status line too) leaves the id out and names it, serving the rest
# (tests/integration/test_repeated_ids.py).
REPEAT = (
    "INSERT INTO jobs (id, queue, status, attempt_token, reserved_by, reserved_at,"
    " lease_expires_at) SELECT id, 'reports', status, gen_random_uuid(), reserved_by,"
    " reserved_at, lease_expires_at FROM jobs WHERE id = %s"
)


def test_schema_apply_and_check_refuse_ids_that_repeat_across_partitions(empty_dsn, run):
    with made(empty_dsn, RANGE_BY_CREATED) as conn:
        conn.execute("INSERT INTO jobs (id, created_at) VALUES (7, '2019-06-01'), (7, now())")
        result = run("schema", "apply", "--yes", dsn=empty_dsn)
        assert result.code == 2, result.err
        line = result.err.strip()
        assert "\n" not in line and "id 7 is held by 2 rows" in line, line
        assert "Traceback" not in line and line.endswith("nothing done"), line
        code, found = checks(run, empty_dsn)
        assert code == 4
        assert not found["ids name one job each"]["ok"]
        assert "id 7 is held by 2 rows" in found["ids name one job each"]["detail"]
        conn.execute("UPDATE jobs SET id = 8 WHERE created_at < '2020-01-01'")
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        code, found = checks(run, empty_dsn)
        unique = found["ids name one job each"]
        assert unique["ok"] and "no id repeats now" in unique["detail"], unique


def test_a_unique_index_on_the_id_alone_needs_no_read(empty_dsn, run):
    with made(empty_dsn, HASH_BY_ID, 10):
        assert run("schema", "apply", "--yes", dsn=empty_dsn).code == 0
        _, found = checks(run, empty_dsn)
        unique = found["ids name one job each"]
        assert unique["ok"] and "a unique index on 'id' alone" in unique["detail"], unique


def repeated_after_apply(empty_dsn: str, run) -> tuple[psycopg.Connection[Any], int]:
    """LIST_BY_QUEUE served (its queue mapped), two expired leases reclaimed and claimed
    again; then one job's id repeated in another partition, its copy claimed too."""
    conn = made(empty_dsn, LIST_BY_QUEUE, 8)
    assert run("schema", "apply", "--yes", "--column", "queue=queue", dsn=empty_dsn).code == 0
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w1", lease_seconds=-60)
        claimed = [worker.claim() for _ in range(2)]
    job = min(j.id for j in claimed if j is not None)
    assert run("reclaim", "--commit", "--yes", dsn=empty_dsn).code == 0  # events: reclaimed
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        worker = lease.Worker(c, "w1", lease_seconds=-60)
        [worker.claim() for _ in range(2)]
    conn.execute(REPEAT, (job,))
    return conn, job


def test_events_refuses_ids_that_repeat_in_one_line(empty_dsn, run):
    conn, _ = repeated_after_apply(empty_dsn, run)
    with conn:
        result = run("events", "-o", "json", dsn=empty_dsn)
        assert result.code == 1, result.err
        line = result.err.strip()
        assert "\n" not in line and "ids repeat across the table's partitions" in line, line


def test_top_says_ids_repeat_and_does_not_crash(empty_dsn, run):
    pytest.importorskip("textual")
    import asyncio

    from textual.widgets import Static

    from jobctl.cli.top.app import TopApp
    from jobctl.cli.top.data import Source
    from jobctl.ops import console, sessions

    conn, job = repeated_after_apply(empty_dsn, run)
    settings = db.Settings(dsn=empty_dsn, actor="tester@ci")
    said: list[str] = []
    with conn, sessions.open(settings, sessions.Access("top"), say=said.append) as (s, standing):
        ask = console.Ask(dt.timedelta(seconds=30), limit=500)
        app = TopApp(Source.one(s, standing, ask, writes=False), dt.timedelta(hours=1))

        async def go() -> str:
            async with app.run_test(size=(120, 30)) as pilot:
                await pilot.pause()
                return " ".join(str(w.render()) for w in app.query(Static))

        screen = asyncio.run(go())
    assert f"job id {job} is held by 2 rows" in screen, screen
    assert "refresh failed" not in screen, screen

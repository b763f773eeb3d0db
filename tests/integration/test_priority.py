"""The job's priority in the claim (--column priority=COL, --priority-order): the rendered
claim PREPAREd as a worker in another language runs it and lease.Worker take the lowest
first (or the highest), the mapping is recorded and read back, stuck's rows carry it, and a
column the claim cannot order by is refused in one line before anything changes."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from psycopg import rows
from test_statements import execute, prepared, rendered

from jobctl import lease

PRIORITIES = [10, -10, 0]  # inserted in this order: the oldest has the highest value


@pytest.fixture
def prioritised(conn, run):
    """The reference table with a priority column mapped, three ready jobs of PRIORITIES,
    the one of 10 available first; their ids by priority."""
    conn.execute("ALTER TABLE jobs ADD COLUMN priority integer NOT NULL DEFAULT 0")
    applied = run("schema", "apply", "--yes", "--column", "priority=priority")
    assert applied.code == 0, applied.err
    ids = {}
    for n, value in enumerate(PRIORITIES):
        ids[value] = conn.execute(
            "INSERT INTO jobs (priority, available_at) "
            "VALUES (%s, now() - make_interval(mins => %s)) RETURNING id",
            (value, 10 - n),
        ).fetchone()["id"]
    return ids


def claimed_in_order(conn, statements) -> list[int]:
    prepared(conn, statements)
    taken = []
    while found := execute(conn, "claim", "w-go", str(uuid.uuid4()), 30):
        taken.append(found[0]["id"])
    conn.execute("DEALLOCATE ALL")
    return taken


def test_the_prepared_claim_takes_the_lowest_priority_first(conn, run, prioritised):
    statements = rendered(run)
    assert (
        'ORDER BY j."priority" ASC NULLS LAST, j."available_at", "id"'
        in (statements["claim"]["sql"])
    )
    assert claimed_in_order(conn, statements) == [prioritised[v] for v in (-10, 0, 10)]


def test_desc_takes_the_highest_first(conn, run, prioritised):
    applied = run("schema", "apply", "--yes", "--priority-order", "desc")
    assert applied.code == 0, applied.err
    assert claimed_in_order(conn, rendered(run)) == [prioritised[v] for v in (10, 0, -10)]


def test_lease_worker_claims_by_priority(dsn, prioritised):
    with psycopg.connect(dsn, autocommit=True, row_factory=rows.dict_row) as c:
        worker = lease.Worker(c, "w1", lease_seconds=30)
        taken = [job.id for job in iter(worker.claim, None)]
    assert taken == [prioritised[v] for v in (-10, 0, 10)]


def test_the_mapping_is_recorded_and_read_back(conn, run, prioritised):
    recorded = conn.execute("SELECT mapping FROM jobctl.tables").fetchone()["mapping"]
    assert recorded["columns"]["priority"] == "priority" and "priority_order" not in recorded
    # --priority-order alone keeps the column; --column alone keeps the order
    assert run("schema", "apply", "--yes", "--priority-order", "desc").code == 0
    assert run("schema", "apply", "--yes", "--column", "priority=priority").code == 0
    recorded = conn.execute("SELECT mapping FROM jobctl.tables").fetchone()["mapping"]
    assert recorded["columns"]["priority"] == "priority" and recorded["priority_order"] == "desc"
    checked = run("schema", "check")
    assert "priority = priority (highest claimed first)" in checked.out
    assert "an index for the claim's priority" in checked.out
    assert (
        '("priority" DESC NULLS LAST, "available_at", "id") WHERE "status" = \'queued\''
        in checked.out
    )


def priority_check(run) -> str:
    """What schema check says of the index for the claim's priority."""
    checked = run("schema", "check", "-o", "json")
    assert checked.code in (0, 4), checked.err
    (found,) = [c for c in json.loads(checked.out) if c["check"] == PRIORITY_CHECK]
    return str(found["detail"])


PRIORITY_CHECK = "an index for the claim's priority"


def test_the_priority_index_advised_runs_as_printed(conn, run):
    """A column whose name needs quotes (Priority) and a queued status with a quote in it:
    the advised statement runs as printed, and check then counts the index it built."""
    conn.execute('ALTER TABLE jobs ADD COLUMN "Priority" integer NOT NULL DEFAULT 0')
    conn.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_status_check")  # any status text
    args = ["--column", "priority=Priority", "--priority-order", "desc"]
    applied = run("schema", "apply", "--yes", *args, "--status", "queued=it's queued")
    assert applied.code == 0, applied.err
    said = priority_check(run)
    advice = "CREATE INDEX" + said.split("CREATE INDEX", 1)[1].split(" serves ")[0]
    assert '"Priority" DESC NULLS LAST' in advice and "= 'it''s queued'" in advice, advice
    conn.execute(advice)
    assert priority_check(run) == "jobs_Priority_available_at_id_idx (valid)"


@pytest.mark.parametrize(
    ("keys", "serves"),
    [
        # forward: the claim's own order
        ("priority DESC NULLS LAST, available_at, id", True),
        # backward: every key reversed, NULLS too
        ("priority ASC NULLS FIRST, available_at DESC, id DESC", True),
        # a plain ascending index backward is priority DESC NULLS FIRST, available_at DESC
        ("priority, available_at, id", False),
        ("priority ASC NULLS LAST", False),
        # the priority alone, or with available_at: the rest sorted among equal priorities
        ("priority DESC NULLS LAST", True),
        ("priority ASC NULLS FIRST, available_at DESC", True),
        # the priority forward, available_at backward: the priority given, the rest sorted
        ("priority DESC NULLS LAST, available_at DESC", True),
    ],
)
def test_a_priority_index_counts_when_it_scans_in_the_claims_order(conn, run, keys, serves):
    """With --priority-order desc (the claim orders by priority DESC NULLS LAST,
    available_at, id) an index counts only when a scan of it, forward or backward, gives
    that order whole: the planner then reads it instead of sorting."""
    conn.execute("ALTER TABLE jobs ADD COLUMN priority integer")
    args = ["--column", "priority=priority", "--priority-order", "desc"]
    assert run("schema", "apply", "--yes", *args).code == 0
    conn.execute(f"CREATE INDEX jobs_claim_order ON jobs ({keys}) WHERE status = 'queued'")
    checked = run("schema", "check").out
    assert ("jobs_claim_order (valid)" in checked) is serves, checked
    conn.execute("SET enable_sort = off")  # a plan with a sort costs more than any index
    plan = conn.execute(
        "EXPLAIN SELECT id FROM jobs WHERE status = 'queued' "
        "ORDER BY priority DESC NULLS LAST, available_at, id LIMIT 1"
    ).fetchall()
    text = "\n".join(r["QUERY PLAN"] for r in plan)
    full_sort = any(r["QUERY PLAN"].lstrip(" ->").startswith("Sort  (") for r in plan)
    assert (not full_sort and "jobs_claim_order" in text) is serves, text
    conn.execute("RESET enable_sort")


def test_stuck_carries_the_priority_when_mapped(conn, run, prioritised):
    header = run("stuck", "-o", "csv").out.splitlines()[0].split(",")
    assert header[:3] == ["id", "priority", "status"]  # with no row too
    conn.execute(
        "UPDATE jobs SET status = 'processing', attempt_token = gen_random_uuid(), "
        "reserved_by = 'w9', reserved_at = now() - interval '2 min', "
        "lease_expires_at = now() - interval '1 min' WHERE priority = -10"
    )
    (row,) = json.loads(run("stuck", "-o", "json").out)
    assert row["priority"] == -10 and list(row)[:3] == ["id", "priority", "status"]
    assert run("stuck", "-o", "csv").out.splitlines()[0].split(",") == header
    shown = json.loads(run("show", str(row["id"]), "-o", "json").out)
    assert shown["priority"] == -10


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--column", "priority=nope"], "has no column 'nope' (--column priority=...)"),
        (["--column", "priority=payload"], "column payload (its priority) is jsonb"),
        (["--priority-order", "desc"], "--priority-order needs the table's priority column"),
        (["--priority-order", "first"], "--priority-order first: asc"),
    ],
)
def test_a_priority_the_claim_cannot_order_by_is_refused(conn, run, args, said):
    before = conn.execute("SELECT mapping FROM jobctl.tables").fetchall()
    refused = run("schema", "apply", "--yes", *args)
    assert refused.code == 2 and said in refused.err
    assert len(refused.err.strip().splitlines()) == 1
    assert conn.execute("SELECT mapping FROM jobctl.tables").fetchall() == before


def test_a_nullable_ready_time_is_claimed_first_of_its_priority_through_its_own_index(conn, run):
    """Where available_at can be NULL (ready now) the claim orders it as the earliest time,
    COALESCE(available_at, '-infinity'): within a priority the NULL jobs first, then those
    due, never one not yet due. The index for the column's own order no longer counts (the
    claim would sort every job of a priority); the one advised, pasted, does, and the claim
    then reads it with the ready time as an index condition: no job not yet due is read."""
    conn.execute("ALTER TABLE jobs ALTER available_at DROP NOT NULL")
    conn.execute("ALTER TABLE jobs ADD COLUMN priority integer NOT NULL DEFAULT 0")
    assert run("schema", "apply", "--yes", "--column", "priority=priority").code == 0
    conn.execute("CREATE INDEX jobs_plain_order ON jobs (priority, available_at, id) "
                 "WHERE status = 'queued'")  # fmt: skip
    said = priority_check(run)
    advice = "CREATE INDEX" + said.split("CREATE INDEX", 1)[1].split(" serves ")[0]
    assert said.startswith("none;") and "jobs_plain_order" not in said, said
    assert '("priority", (COALESCE("available_at", \'-infinity\'::' in advice, advice
    conn.execute(advice)
    assert priority_check(run).endswith("(valid)") and "coalesce" in priority_check(run)
    ids = {}
    jobs = [("later", 0, "1 hour"), ("due", 1, "-1 minute"), ("null", 1, None),
            ("null2", 2, None), ("due2", 2, "-2 hours")]  # fmt: skip
    for name, priority, due in jobs:
        ids[name] = conn.execute(
            "INSERT INTO jobs (priority, available_at) VALUES (%s, now() + %s::interval) "
            "RETURNING id",
            (priority, due),
        ).fetchone()["id"]
    conn.execute("INSERT INTO jobs (priority, available_at) SELECT 0, now() + interval '1 day' "
                 "FROM generate_series(1, 3000)")  # fmt: skip
    conn.execute("ANALYZE jobs")
    statements = rendered(run)
    claim = statements["claim"]["sql"]
    assert 'COALESCE(j."available_at", \'-infinity\'::"pg_catalog"."timestamptz")' in claim
    inner = claim.split("WITH target AS (", 1)[1].split("FOR UPDATE", 1)[0]
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL enable_seqscan = off")  # a tiny table: the plan a big one gets
        plan = "\n".join(
            r["QUERY PLAN"]
            for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + inner + " LIMIT 1")
        )
    assert "Index Cond: (COALESCE(available_at" in plan and "Sort" not in plan, plan
    assert "Rows Removed by Filter" not in plan, plan  # the 3,001 not yet due never read
    assert claimed_in_order(conn, statements) == [ids[n] for n in ("null", "due", "null2", "due2")]

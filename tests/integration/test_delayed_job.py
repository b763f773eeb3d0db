"""docs/delayed-job.md, run: every SQL block and jobctl command of the page, in its order, on
delayed_job_active_record's own table with jobs in every state, while the gem's workers (its
real claim, success, retry and fail statements) run throughout, `lease.Worker` beside them
from `schema apply` to the way back, and the application enqueues. No job runs twice, no
finished job is ever taken again (before, during and after the way back), and the table ends
the gem's again, column for column. The one test of the page's online/mixed-fleet claim:
about 3 seconds."""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from jobctl import lease

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "delayed-job.md"

# lib/generators/delayed_job/templates/migration.rb of delayed_job_active_record, as Rails
# makes it on PostgreSQL (t.timestamps: created_at/updated_at timestamp(6) NOT NULL)
GEM_TABLE = """
CREATE TABLE delayed_jobs (
    id bigserial PRIMARY KEY,
    priority integer DEFAULT 0 NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    handler text NOT NULL,
    last_error text,
    run_at timestamp,
    locked_at timestamp,
    failed_at timestamp,
    locked_by character varying,
    queue character varying,
    created_at timestamp(6) NOT NULL,
    updated_at timestamp(6) NOT NULL
);
CREATE INDEX delayed_jobs_priority ON delayed_jobs (priority, run_at);
"""

# the gem's statements, as ActiveRecord sends them (reserve_with_scope_using_optimized_sql
# for PostgreSQL; destroy on success; reschedule; fail!; enqueue)
CLAIM = (
    "UPDATE delayed_jobs SET locked_at = $1, locked_by = $2 WHERE id IN (SELECT id FROM "
    "delayed_jobs WHERE ((run_at <= $3 AND (locked_at IS NULL OR locked_at < $4) OR locked_by "
    "= $5) AND failed_at IS NULL) ORDER BY priority ASC, run_at ASC LIMIT $6 FOR UPDATE) "
    "RETURNING *"
)
DESTROY = 'DELETE FROM "delayed_jobs" WHERE "delayed_jobs"."id" = $1'
RESCHEDULE = (
    'UPDATE "delayed_jobs" SET "attempts" = $1, "last_error" = $2, "run_at" = $3, '
    '"locked_at" = $4, "locked_by" = $5, "updated_at" = $6 WHERE "delayed_jobs"."id" = $7'
)
FAIL = (
    'UPDATE "delayed_jobs" SET "attempts" = $1, "last_error" = $2, "failed_at" = $3, '
    '"updated_at" = $4 WHERE "delayed_jobs"."id" = $5'
)
ENQUEUE = (
    'INSERT INTO "delayed_jobs" ("priority", "handler", "run_at", "queue", "created_at", '
    '"updated_at") VALUES ($1, $2, $3, $4, $5, $6) RETURNING "id"'
)
MAX_RUN_TIME = dt.timedelta(hours=4)

ACTIVE_JOB = (
    "--- !ruby/object:ActiveJob::QueueAdapters::DelayedJobAdapter::JobWrapper\n"
    "job_data:\n  job_class: {kind}\n  job_id: 0f3c6c1e-{n:04d}\n  queue_name: default\n"
    "  arguments:\n  - {n}\n"
)
PERFORMABLE = (
    "--- !ruby/object:Delayed::PerformableMethod\n"
    "object: !ruby/ActiveRecord:User\n  attributes:\n    id: {n}\n"
    "method_name: :send_welcome\nargs: []\n"
)
STRUCT = "--- !ruby/struct:NewsletterJob\nissue_id: {n}\n"
POISON = "--- !ruby/struct:PoisonJob\nrecord_id: {n}\n"  # fails every run
KINDS = {"SendInvoiceJob", "FlakyJob", "User#send_welcome", "NewsletterJob", "PoisonJob"}


def handler(n: int) -> str:
    if n % 7 == 0:
        return PERFORMABLE.format(n=n)
    if n % 11 == 0:
        return STRUCT.format(n=n)
    return ACTIVE_JOB.format(kind="FlakyJob" if n % 5 == 0 else "SendInvoiceJob", n=n)


def utc_now() -> dt.datetime:
    """The gem's db_time_now with default_timezone :utc: a naive UTC time."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def page_steps() -> list[tuple[str, str]]:
    """The page's SQL blocks and jobctl command lines, in its order: ("sql", text) or
    ("jobctl", line). Fences may be indented (inside a list)."""
    steps: list[tuple[str, str]] = []
    for lang, body in re.findall(r"^ *```(sql|sh)\n(.*?)^ *```", PAGE.read_text(), re.M | re.S):
        if lang == "sql":
            steps.append(("sql", body))
            continue
        joined = re.sub(r"\\\n\s*", "", body)
        steps += [("jobctl", ln.strip()) for ln in joined.splitlines() if ln.strip()]
    return steps


def statements(block: str) -> list[str]:
    """A block's statements, one by one, as psql sends them (a DO that commits must not run
    inside a multi-statement string's implicit transaction): split at the semicolons outside
    quotes, dollar quotes and comments."""
    found, start, i, quoted, dollar = [], 0, 0, False, False
    while i < len(block):
        if not quoted and block.startswith("$$", i):
            dollar, i = not dollar, i + 2
            continue
        c = block[i]
        if not dollar and c == "'":
            quoted = not quoted
        elif not dollar and not quoted and block.startswith("--", i):
            i = block.index("\n", i)
        elif not dollar and not quoted and c == ";":
            found.append(block[start:i].strip())
            start = i + 1
        i += 1
    rest = block[start:].strip()
    return [s for s in [*found, rest] if s]


def connect(dsn: str) -> psycopg.Connection[Any]:
    """As Rails connects: autocommit, the session's zone UTC. Nothing prepared: the gem's
    claim is find_by_sql with its values inlined (pg_stat_statements shows them as $n), and
    a plan psycopg prepared with RETURNING * would fail once the page adds columns."""
    return psycopg.connect(dsn, autocommit=True, options="-c timezone=UTC", prepare_threshold=None)


class Fleet:
    """Every job's runs, by whom, and whether one ever started twice at once or after it was
    finished: the assertions' record."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: dict[int, list[str]] = {}
        self.running: set[int] = set()
        self.finished: set[int] = set()
        self.given_back: dict[int, int] = {}  # runs that ended without finishing the job
        self.wrong: list[str] = []
        self.stop = threading.Event()
        self.errors: list[BaseException] = []

    def start(self, job_id: int, who: str) -> None:
        with self.lock:
            if job_id in self.running:
                self.wrong.append(f"{who} ran job {job_id} while another ran it")
            if job_id in self.finished:
                self.wrong.append(f"{who} ran job {job_id}, already finished")
            self.running.add(job_id)
            self.runs.setdefault(job_id, []).append(who)

    def end(self, job_id: int, finished: bool) -> None:
        with self.lock:
            self.running.discard(job_id)
            if finished:
                self.finished.add(job_id)
            else:
                self.given_back[job_id] = self.given_back.get(job_id, 0) + 1

    def flaky_first(self, job_id: int) -> bool:
        """FlakyJob fails its first run and succeeds its second."""
        with self.lock:
            return len(self.runs[job_id]) == 1

    def guard(self, body: Any) -> Any:
        def run() -> None:
            try:
                body()
            except BaseException as e:  # the test reads them after the threads end
                self.errors.append(e)

        return threading.Thread(target=run, daemon=True)


def gem(statement: str) -> str:
    """The gem's statement for psycopg: $n as %(pn)s (psycopg sends them back as $n)."""
    return re.sub(r"\$(\d)", r"%(p\1)s", statement)


def params(*values: Any) -> dict[str, Any]:
    return {f"p{n}": v for n, v in enumerate(values, 1)}


def old_worker(dsn: str, fleet: Fleet, name: str) -> None:
    """Delayed::Worker#work_off, one job at a time, with the gem's own statements."""
    with connect(dsn) as conn:
        while not fleet.stop.is_set():
            now = utc_now()
            job = conn.execute(
                gem(CLAIM), params(now, name, now, now - MAX_RUN_TIME, name, 1)
            ).fetchone()
            if job is None:
                time.sleep(0.005)
                continue
            job_id, attempts, source = job[0], job[2], job[3]
            fleet.start(job_id, name)
            time.sleep(0.002)
            if "PoisonJob" in source and attempts + 1 >= 25:  # the gem's max_attempts
                fleet.end(job_id, finished=True)
                now = utc_now()
                conn.execute(gem(FAIL), params(attempts + 1, "PoisonError", now, now, job_id))
            elif "FlakyJob" in source and fleet.flaky_first(job_id):
                fleet.end(job_id, finished=False)
                now = utc_now()
                conn.execute(
                    gem(RESCHEDULE),
                    params(attempts + 1, "RuntimeError: flaky", now, None, None, now, job_id),
                )
            else:
                fleet.end(job_id, finished=True)
                conn.execute(gem(DESTROY), params(job_id))


def new_worker(dsn: str, fleet: Fleet, name: str, stop: threading.Event) -> None:
    with connect(dsn) as conn:
        worker = lease.Worker(conn, name, lease_seconds=30, table="delayed_jobs")
        while not stop.is_set():
            job = worker.claim()
            if job is None:
                time.sleep(0.005)
                continue
            fleet.start(job.id, name)
            time.sleep(0.002)
            source = conn.execute(
                "SELECT handler FROM delayed_jobs WHERE id = %s", (job.id,)
            ).fetchone()
            assert source is not None
            if "PoisonJob" in source[0]:
                assert worker.fail(job, "PoisonError") == "failed"  # its last attempt
                fleet.end(job.id, finished=True)
            elif "FlakyJob" in source[0] and fleet.flaky_first(job.id):
                fleet.end(job.id, finished=False)
                worker.fail(job, "RuntimeError: flaky")
            else:
                fleet.end(job.id, finished=True)
                worker.complete(job)


def enqueuer(dsn: str, fleet: Fleet, first: int) -> None:
    """The application: Delayed::Job.enqueue, one job every few milliseconds."""
    with connect(dsn) as conn:
        n = first
        while not fleet.stop.is_set():
            now = utc_now()
            conn.execute(gem(ENQUEUE), params(n % 3 - 1, handler(n), now, "default", now, now))
            n += 1
            time.sleep(0.004)


# the jobs there before the page: (state, how many, run_at from now, attempts, last_error,
# failed_at from now, locked_at from now, locked_by)
H, M = dt.timedelta(hours=1), dt.timedelta(minutes=1)
SEEDS = (
    ("ready", 120, -5 * M, 0, None, None, None, None),
    ("scheduled", 10, H, 0, None, None, None, None),
    ("retrying", 10, -M, 2, "Net::ReadTimeout", None, None, None),
    ("failed", 10, -24 * H, 25, "ActiveRecord::RecordNotFound", -20 * H, None, None),
    ("last_try", 6, -3 * M, 24, "PoisonError", None, None, None),  # its 25th run fails it
    ("dead_host", 6, -6 * H, 0, None, None, -5 * H, "host:web-old-3 pid:17012"),
    ("live_host", 4, -2 * M, 0, None, None, -M, "host:web-live-1 pid:4242"),
)


def seed(conn: psycopg.Connection[Any]) -> dict[str, list[int]]:
    """SEEDS, with the gem's handlers, priorities from -10 to 10 and two queues: the ids of
    each state."""
    now = utc_now()
    ids: dict[str, list[int]] = {}
    n = 0
    for state, count, run_at, attempts, error, failed_at, locked_at, locked_by in SEEDS:
        for _ in range(count):
            n += 1
            got = conn.execute(
                "INSERT INTO delayed_jobs (priority, attempts, handler, last_error, run_at, "
                "failed_at, locked_at, locked_by, queue, created_at, updated_at) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (
                    *(n % 21 - 10, attempts),
                    POISON.format(n=n) if state == "last_try" else handler(n),
                    *(error, now + run_at, failed_at and now + failed_at),
                    *(locked_at and now + locked_at, locked_by),
                    *("mailers" if n % 4 == 0 else "default", now, now),
                ),
            ).fetchone()
            assert got is not None
            ids.setdefault(state, []).append(got[0])
    return ids


def columns(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute "
        "WHERE attrelid = 'delayed_jobs'::regclass AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum"
    ).fetchall()


def test_the_page_shows_the_gems_own_claim():
    text = " ".join(PAGE.read_text().split())
    assert CLAIM in text


def test_check_and_apply_on_the_gems_table_name_the_page(empty_dsn, run):
    with connect(empty_dsn) as conn:
        conn.execute(GEM_TABLE)
    said = json.loads(run("--table", "delayed_jobs", "schema", "check", "-o", "json").out)
    apply = next(c for c in said if c["check"] == "schema apply")
    assert apply["ok"] is False and "docs/delayed-job.md" in apply["detail"], apply
    refused = run("--table", "delayed_jobs", "schema", "apply", "--yes")
    assert refused.code == 2 and refused.out == "", refused
    assert refused.err.count("\n") == 1 and "docs/delayed-job.md" in refused.err, refused.err


class Scenario:
    """The page run step by step, what the test does around its steps: the fleet of the
    gem's workers and the application from the start, `lease.Worker`s after `schema apply`
    until the way back, and what each step must have left."""

    def __init__(self, dsn: str, run: Any, conn: psycopg.Connection[Any]) -> None:
        self.dsn, self.run, self.conn = dsn, run, conn
        self.seeded = seed(conn)
        self.fleet = Fleet()
        self.fleet.finished.update(self.seeded["failed"])
        self.threads = [
            self.fleet.guard(lambda i=i: old_worker(dsn, self.fleet, f"host:web-{i} pid:{i}"))
            for i in (1, 2)
        ]
        self.threads.append(self.fleet.guard(lambda: enqueuer(dsn, self.fleet, 10_000)))
        self.new_stop = threading.Event()
        self.new_threads: list[threading.Thread] = []
        self.other = connect(dsn)  # the long and the abandoned attempts'
        self.long: tuple[lease.Worker, lease.Claim] | None = None

    def count(self, query: str, *args: Any) -> int:
        found = self.conn.execute(f"SELECT count(*) FROM delayed_jobs WHERE {query}", args)
        return int(found.fetchone()[0])  # type: ignore[index]

    def sql(self, block: str) -> None:
        if "interval '1 hour'" in block:  # the done rows' deletion
            self.delete_done(block)
            return
        if "DROP COLUMN status" in block:  # the way back's last block
            time.sleep(0.3)  # the gem's workers alone a while first
        for statement in statements(block):
            self.conn.execute(statement)

    def jobctl(self, line: str) -> None:
        args = shlex.split(line)[1:]
        if "reclaim" in args:  # the way back: the new workers stop first
            self.stop_new_workers()
        result = self.run(*args, *([] if "--yes" in args else ["--yes"]))
        assert result.code == 0, (line, result)
        if args[2:4] == ["schema", "apply"]:
            self.after_apply()
        if "remove" in args:
            assert self.count("status = 'done'") > 0  # the way back's SQL deletes them
            # every job jobctl finished is out of the gem's claim's sight already
            assert self.count("status IN ('done', 'failed') AND failed_at IS NULL") == 0

    def after_apply(self) -> None:
        """The backfill held (the trigger keeping it since), then both kinds of worker."""
        seeded, fleet = self.seeded, self.fleet
        held = dict(self.conn.execute("SELECT id, status FROM delayed_jobs").fetchall())
        assert {held[i] for i in seeded["failed"]} == {"failed"}
        assert {held[i] for i in seeded["live_host"]} == {"processing"}
        assert {held[i] for i in seeded["scheduled"]} == {"queued"}
        assert {k for (k,) in self.conn.execute("SELECT kind FROM delayed_jobs")} == KINDS
        # an operator fails three queued jobs, then their time comes: finished, never run
        for job_id in seeded["scheduled"][:3]:
            failed = self.run(
                "--table", "delayed_jobs", "fail", str(job_id), "--reason", "gone", "--yes"
            )
            assert failed.code == 0, failed
            fleet.finished.add(job_id)
        self.conn.execute(
            "UPDATE delayed_jobs SET run_at = run_at - interval '2 hours' WHERE id = ANY(%s)",
            (seeded["scheduled"][:3],),
        )
        self.takeover_by_age_refused()
        # an attempt whose worker dies: its lease runs out, reclaim gives it back
        dying = lease.Worker(self.other, "dies", lease_seconds=0.5, table="delayed_jobs")
        lost = dying.claim()
        assert lost is not None
        fleet.start(lost.id, "dies")
        fleet.end(lost.id, finished=False)
        self.new_threads = [
            fleet.guard(lambda i=i: new_worker(self.dsn, fleet, f"lease-{i}", self.new_stop))
            for i in (1, 2)
        ]
        for t in self.new_threads:
            t.start()
        time.sleep(1.0)  # both kinds of worker, side by side

    def takeover_by_age_refused(self) -> None:
        """A lease.Worker attempt older than the gem's max_run_time (its lock backdated 5
        hours, past the trigger): the gem's claim narrowed to it matches it, takes nothing."""
        worker = lease.Worker(self.other, "long-runner", table="delayed_jobs")
        claimed = worker.claim()
        assert claimed is not None
        self.fleet.start(claimed.id, "long-runner")
        self.long = (worker, claimed)
        with self.conn.transaction():
            self.conn.execute("SET LOCAL session_replication_role = replica")
            self.conn.execute(
                "UPDATE delayed_jobs SET locked_at = locked_at - interval '5 hours', "
                "priority = 100 WHERE id = %s",
                (claimed.id,),
            )
        now, name = utc_now(), "host:web-9 pid:9"
        ready_to_the_gem = (
            "id = %s AND (run_at <= %s AND (locked_at IS NULL OR locked_at < %s)) "
            "AND failed_at IS NULL"
        )
        assert self.count(ready_to_the_gem, claimed.id, now, now - MAX_RUN_TIME) == 1
        takeover = gem(CLAIM.replace("WHERE ((", "WHERE id = $7 AND (("))
        taken = self.conn.execute(
            takeover, params(now, name, now, now - MAX_RUN_TIME, name, 1, claimed.id)
        )
        assert taken.fetchall() == []

    def stop_new_workers(self) -> None:
        self.new_stop.set()
        for t in self.new_threads:
            t.join(timeout=10)
        assert self.long is not None
        self.long[0].complete(self.long[1])
        self.fleet.end(self.long[1].id, finished=True)
        time.sleep(0.6)  # the abandoned attempt's lease (0.5 s) runs out

    def delete_done(self, block: str) -> None:
        """Those finished over an hour ago go, the recent ones stay."""
        old = self.conn.execute(
            "UPDATE delayed_jobs SET failed_at = failed_at - interval '2 hours' WHERE id IN "
            "(SELECT id FROM delayed_jobs WHERE status = 'done' ORDER BY id LIMIT 5) RETURNING id"
        ).fetchall()
        assert len(old) == 5
        for statement in statements(block):
            self.conn.execute(statement)
        assert self.count("id = ANY(%s)", [i for (i,) in old]) == 0
        assert self.count("status = 'done'") > 0

    def end(self) -> None:
        self.other.close()
        time.sleep(0.2)
        self.fleet.stop.set()
        for t in self.threads:
            t.join(timeout=10)


GAVE_UP = "id = ANY(%s) AND failed_at IS NOT NULL AND attempts = 25"  # a last try, run


def test_the_page_on_the_gems_table_with_both_kinds_of_worker(empty_dsn, run, monkeypatch):
    monkeypatch.setenv("PGTZ", "UTC")  # the page: jobctl's sessions in UTC, as Rails'
    steps = page_steps()
    assert next(s for k, s in steps if k == "jobctl").split()[3:5] == ["schema", "apply"]
    with connect(empty_dsn) as conn:
        conn.execute(GEM_TABLE)
        before = columns(conn)
        scenario = Scenario(empty_dsn, run, conn)
        for t in scenario.threads:
            t.start()
        try:
            for kind, step in steps:
                if kind == "sql":
                    scenario.sql(step)
                else:
                    scenario.jobctl(step)
            # the gem's workers go on until they have run the last tries and the dead
            # host's jobs (a loaded machine may not have reached every one by the page's end)
            deadline = time.monotonic() + 30
            seeded = scenario.seeded
            while time.monotonic() < deadline and (
                scenario.count(GAVE_UP, seeded["last_try"]) < len(seeded["last_try"])
                or any(i not in scenario.fleet.runs for i in seeded["dead_host"])
            ):
                time.sleep(0.1)
        finally:
            scenario.end()
        fleet, seeded = scenario.fleet, scenario.seeded
        assert not fleet.errors, fleet.errors
        assert not fleet.wrong, fleet.wrong
        assert columns(conn) == before  # the gem's table again, column for column
        triggers = conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'delayed_jobs'::regclass "
            "AND NOT tgisinternal"
        ).fetchone()
        assert triggers == (0,)
        # the last tries failed for good, by whichever kind ran them
        assert scenario.count(GAVE_UP, seeded["last_try"]) == len(seeded["last_try"])
        still = dict(conn.execute("SELECT id, locked_by FROM delayed_jobs").fetchall())
    ran = fleet.runs
    # the dead host's jobs: taken back by the gem's own claim, after max_run_time
    assert all(ran[i][0].startswith("host:web-") for i in seeded["dead_host"])
    # a live worker of the gem's holds its jobs throughout: nobody took them
    assert all(i not in ran and still[i] == "host:web-live-1 pid:4242" for i in seeded["live_host"])
    assert all(i not in ran for i in seeded["failed"] + seeded["scheduled"][:3])
    assert all(len(ran[i]) == 1 for i in seeded["last_try"])
    # both kinds ran jobs; each job once more only after a run that gave it back (FlakyJob's
    # first, the abandoned attempt)
    assert any(who.startswith("lease-") for runs in ran.values() for who in runs)
    assert any(who.startswith("host:") for runs in ran.values() for who in runs)
    again = {i: r for i, r in ran.items() if len(r) > 1 + fleet.given_back.get(i, 0)}
    assert not again, again


def test_explain_tells_a_lease_on_the_gems_timestamp_columns(empty_dsn, run, monkeypatch):
    """The page's steps up to `schema apply`, then a `lease.Worker` claim with no heartbeat:
    explain gives the lease's length although the gem's `locked_at` (reserved_at) is a
    timestamp and the lease expiry a timestamptz, and tells kinds alike, a PerformableMethod's
    `User#send_welcome` as a job class's."""
    monkeypatch.setenv("PGTZ", "UTC")
    with connect(empty_dsn) as conn:
        conn.execute(GEM_TABLE)
        now = utc_now()
        for n in (7, 1):  # User#send_welcome, then SendInvoiceJob
            conn.execute(gem(ENQUEUE), params(0, handler(n), now, "default", now, now))
        for kind, step in page_steps():
            if kind == "jobctl":
                assert run(*shlex.split(step)[1:]).code == 0  # (the page's --yes)
                break
            for statement in statements(step):
                conn.execute(statement)
        worker = lease.Worker(conn, "lease-1", lease_seconds=15, table="delayed_jobs")
        claimed = [worker.claim(), worker.claim()]
    told = {}
    for job in claimed:
        assert job is not None
        result = run("--table", "delayed_jobs", "explain", str(job.id), "-o", "json")
        assert result.code == 0, result
        told[job.id] = json.loads(result.out)["story"]
    first, second = (told[j.id] for j in claimed if j is not None)
    assert first[0].startswith(f"Job {claimed[0].id} (kind User#send_welcome, queue default)")
    assert second[0].startswith(f"Job {claimed[1].id} (kind SendInvoiceJob, queue default)")
    assert "(no heartbeat, lease 15s; the default history" in " ".join(first)

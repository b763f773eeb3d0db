"""Every read costs what the incident costs: no command's statement scans the jobs table.

A table with realistic statistics (200,000 rows, ANALYZE'd: a few hundred processing and ready,
a few dozen parked by a real reclaim, the rest done or failed by their workers). Each command
runs in-process as an operator runs it, every statement it sends recorded by name with its
parameters; each is then planned again with EXPLAIN (FORMAT JSON) on the same database, and no
plan may hold a sequential scan of the jobs table but those of the statements documented as
full counts (docs/performance.md, "Awaiting review without a scan").

Then what the history cannot tell: a job parked with reclaim's words whose reclaim the history
no longer holds is found only by summary --exact, which says so; and without the history every
command still counts the jobs awaiting review (by a scan: the only way without it).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from helpers import add_jobs, claim_all
from psycopg import sql

from jobctl import db
from jobctl.db import gateway
from jobctl.db.session import Session
from jobctl.ops import console, sessions

ROWS = 200_000
PARKED = 30  # manual jobs a reclaim parks
# the statements documented as full counts: summary's counts by status on a table under a
# million rows, with --exact or narrowed by kind (triage.summary); summary --exact's count of
# the jobs awaiting review, the ones the history misses too
FULL_COUNTS = {"summary_status", "review_count_scan"}


def _incident(conn: Any, dsn: str, run: Any) -> None:
    """The table: kind and queue mapped; PARKED manual jobs parked by jobctl's reclaim (the
    history records it) and 20 auto ones it requeued; then 10 expired claims left for the next
    reclaim and 150 live ones (the requeued jobs claimed first), 200 ready jobs, 2,000 a
    worker failed, the rest done. ANALYZE'd."""
    conn.execute("ALTER TABLE jobs ADD COLUMN kind text")
    applied = run("schema", "apply", "--column", "kind=kind", "--column", "queue=queue", "--yes")
    assert applied.code == 0, applied.err
    add_jobs(conn, PARKED, policy="manual")
    add_jobs(conn, 20, policy="auto")
    claim_all(dsn, PARKED + 20, lease_seconds=-60)
    committed = run("reclaim", "--commit", "--yes")
    assert committed.code == 0, committed.err
    add_jobs(conn, 10)
    claim_all(dsn, 10, lease_seconds=-60)
    add_jobs(conn, 150)
    claim_all(dsn, 150, lease_seconds=3600)
    conn.execute(
        """
        INSERT INTO jobs (kind, queue, status, attempts, finished_at, last_error, available_at)
        SELECT CASE WHEN g %% 3 = 0 THEN 'charge_card' ELSE 'send_email' END,
               CASE WHEN g %% 2 = 0 THEN 'payments' ELSE 'mail' END,
               CASE WHEN g <= 200 THEN 'queued' WHEN g <= 2200 THEN 'failed' ELSE 'done' END,
               CASE WHEN g <= 200 THEN 0 ELSE 1 END,
               CASE WHEN g > 200 THEN now() - interval '1 day' END,
               CASE WHEN g > 200 AND g <= 2200 THEN 'boom' END,
               now() - interval '1 minute'
        FROM generate_series(1, %(n)s) g
        """,
        {"n": ROWS - PARKED - 20 - 160},
    )
    conn.execute("ANALYZE jobs")
    conn.execute("ANALYZE jobctl.events")


Recorded = list[tuple[str, Any, Any]]


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorded]:
    """Every statement a command sends through a session: its block's name, the composed
    statement and its parameters (the statements run as they are: nothing is replaced)."""
    found: Recorded = []
    named: dict[int, str] = {}
    query = Session.query

    def naming(self: Session, name: str, **fragments: sql.Composable) -> sql.Composed:
        composed = query(self, name, **fragments)
        named[id(composed)] = name
        return composed

    def spying(real: Any) -> Any:
        def spy(conn: Any, statement: Any, params: Any = None, *args: Any, **kw: Any) -> Any:
            if id(statement) in named:
                found.append((named[id(statement)], statement, params))
            return real(conn, statement, params, *args, **kw)

        return spy

    monkeypatch.setattr(Session, "query", naming)
    for name in ("rows", "row", "run", "stream"):
        monkeypatch.setattr(gateway, name, spying(getattr(gateway, name)))
    yield found


def _scans(plan: Any) -> Iterator[str]:
    """The relations a plan reads by a sequential scan."""
    if isinstance(plan, dict):
        if plan.get("Node Type") == "Seq Scan":
            yield plan.get("Relation Name", "")
        for value in plan.values():
            yield from _scans(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from _scans(value)


def _scanning(dsn: str, statements: Recorded) -> dict[str, list[str]]:
    """Each recorded statement that reads the jobs table by a sequential scan, by name."""
    found: dict[str, list[str]] = {}
    with psycopg.connect(dsn) as c:
        for name, statement, params in statements:
            explain = sql.SQL("EXPLAIN (FORMAT JSON) {}").format(statement)
            try:
                ((plan,),) = c.execute(explain, params or None).fetchall()
            except psycopg.errors.SyntaxError:  # a SET, a utility statement: not a read
                c.rollback()
                continue
            if "jobs" in _scans(plan):
                found.setdefault(name, []).append(json.dumps(plan)[:2000])
    return found


def _top(dsn: str, view: str) -> None:
    settings = db.Settings(dsn=dsn, actor="tester@ci")
    with sessions.open(settings, sessions.Access("top"), say=lambda line: None) as (
        s,
        standing,
    ):
        console.refresh(s, standing, console.Ask(dt.timedelta(seconds=30), limit=500, view=view))


COMMANDS = (
    ("review",),
    ("review", "--policy", "manual", "--kind", "charge_card"),
    ("summary",),
    ("summary", "--by", "kind"),
    ("summary", "--by", "queue"),
    ("summary", "--by", "worker"),
    ("metrics",),
    ("metrics", "--kind", "charge_card"),
    ("report", "--since", "1h"),
    ("stuck",),
    ("doctor",),
    ("reclaim", "--dry-run"),
    ("explain", "1"),
    ("show", "1"),
)


def test_no_command_scans_the_jobs_table(conn, dsn, run, recorded):
    _incident(conn, dsn, run)
    recorded.clear()
    for command in COMMANDS:
        result = run(*command)
        assert result.code in (0, 4), (command, result.err)
    _top(dsn, "review")
    _top(dsn, "stuck")
    names = {name for name, _, _ in recorded}
    # the statements that read "awaits a human" ran, and the grouped summary
    assert {"review", "review_count", "summary_groups", "report_review", "report_by_group"} <= names
    scanning = _scanning(dsn, recorded)
    assert set(scanning) <= FULL_COUNTS, {
        k: v[0] for k, v in scanning.items() if k not in FULL_COUNTS
    }
    # and they found what awaits a human, as review lists it
    assert len(json.loads(run("review", "-o", "json").out)) == PARKED
    assert json.loads(run("summary", "-o", "json").out)["awaiting_review"] == PARKED


def test_summary_exact_counts_what_the_history_does_not_hold(conn, dsn, run):
    """A parked job whose reclaim the history no longer holds (purged by time, say): the
    reads through the history do not see it, summary --exact counts it and says so."""
    (manual, other) = add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 2, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    conn.execute("DELETE FROM jobctl.events WHERE job_id = %s", (str(manual),))
    assert [r["id"] for r in json.loads(run("review", "-o", "json").out)] == [other]
    summary = json.loads(run("summary", "-o", "json").out)
    assert summary["awaiting_review"] == 1 and "awaiting_review_unrecorded" not in summary
    exact = json.loads(run("summary", "--exact", "-o", "json").out)
    assert exact["awaiting_review"] == 2 and exact["awaiting_review_unrecorded"] == 1
    assert "awaiting_review_unrecorded" in run("summary", "--exact").out


def test_without_the_history_the_jobs_awaiting_review_are_still_counted(conn, dsn, run):
    """No history (removed, or not readable by the role): "awaits a human" is read by a scan
    of the table, the one definition still deciding."""
    add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 2, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    removed = run("schema", "remove", "--history", "--yes")
    assert removed.code == 0, removed.err
    assert conn.execute("SELECT to_regclass('jobctl.events') AS t").fetchone()["t"] is None
    summary = json.loads(run("summary", "-o", "json").out)
    assert summary["awaiting_review"] == 2
    by = json.loads(run("summary", "--by", "worker", "-o", "json").out)
    assert sum(g["awaiting_review"] for g in by["groups"]) == 2


def _nodes(plan: Any) -> Iterator[dict[str, Any]]:
    if isinstance(plan, dict):
        yield plan
        for value in plan.values():
            yield from _nodes(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from _nodes(value)


def test_jobs_people_acted_on_are_not_read_again(conn, dsn, run, recorded):
    """A parked job a person requeued (and a worker then finished) stays in the history as a
    reclaim to the park status; the reads pass over it by the history's later event instead of
    reading its row on every call: the jobs table is read for the jobs still waiting only."""
    parked = add_jobs(conn, 6, policy="manual")
    claim_all(dsn, 6, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    acted = [str(i) for i in parked[:4]]
    assert run("requeue", *acted, "--yes").code == 0
    claim_all(dsn, 4, lease_seconds=3600)
    conn.execute("UPDATE jobs SET status = 'done' WHERE id = ANY(%s)", (parked[:4],))
    conn.execute("INSERT INTO jobs (status) SELECT 'done' FROM generate_series(1, 50000)")
    conn.execute("ANALYZE jobs")
    conn.execute("ANALYZE jobctl.events")
    recorded.clear()
    summary = json.loads(run("summary", "-o", "json").out)
    assert summary["awaiting_review"] == 2
    ((_, statement, params),) = [r for r in recorded if r[0] == "review_count"]
    explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) {}").format(statement)
    plan = conn.execute(explain, params).fetchone()["QUERY PLAN"]
    (read,) = [n for n in _nodes(plan) if n.get("Relation Name") == "jobs"]
    assert read["Node Type"] == "Index Scan"
    assert read["Actual Rows"] + read.get("Rows Removed by Filter", 0) == 2

"""jobctl events: the history across jobs, its filters, its order, its formats, its index."""

from __future__ import annotations

import csv
import io
import json

from helpers import add_jobs, claim_all

from jobctl import db
from jobctl.db import session
from jobctl.ops import events, triage


def incident(conn, dsn, run) -> dict[str, list[int]]:
    """Two workers die; reclaim; an operator requeues one manual job with a reason."""
    auto = add_jobs(conn, 2)
    manual = add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 2, worker="web-2", lease_seconds=-60)
    claim_all(dsn, 2, worker="web-3", lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    assert (
        run("--actor", "bob@ops", "requeue", str(manual[0]), "--reason", "safe", "--yes").code == 0
    )
    return {"auto": auto, "manual": manual}


def as_json(result) -> list[dict]:
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_events_across_jobs_filters_and_order(conn, dsn, run):
    jobs = incident(conn, dsn, run)
    # an older event of this table, and one of another table: only the window's, only ours
    conn.execute(
        "INSERT INTO jobctl.events (job_table, job_id, at, event, worker, actor) VALUES "
        "('public.jobs', %s, now() - interval '3 hours', 'reclaimed', 'web-1', 'cron'), "
        "('public.other', '99', now(), 'reclaimed', 'web-2', 'cron')",
        (str(jobs["auto"][0]),),
    )
    newest = as_json(run("events", "-o", "json"))
    assert [e["event"] for e in newest] == ["requeued", *["reclaimed"] * 5]
    assert newest[0] | {"at": None, "db_role": None} == {
        "at": None,
        "id": jobs["manual"][0],
        "event": "requeued",
        "from_status": "failed",
        "to_status": "queued",
        "attempt": 1,
        "attempt_token": None,
        "worker": None,
        "actor": "bob@ops",
        "db_role": None,
        "reason": "safe",
    }
    assert newest[0]["db_role"] == "postgres"
    ats = [e["at"] for e in newest]
    assert ats == sorted(ats, reverse=True)
    oldest = as_json(run("events", "--oldest-first", "-o", "json"))
    assert oldest == newest[::-1]
    # the window: durations and timestamps
    assert len(as_json(run("events", "--since", "1h", "-o", "json"))) == 5
    assert [e["worker"] for e in as_json(run("events", "--until", "1h", "-o", "json"))] == ["web-1"]
    start = newest[-1]["at"]
    assert as_json(run("events", "--since", start, "--until", "4h", "-o", "json")) == []
    assert len(as_json(run("events", "--since", "2000-01-01T00:00:00", "-o", "json"))) == 6
    # the filters
    assert {e["event"] for e in as_json(run("events", "--event", "requeued", "-o", "json"))} == {
        "requeued"
    }
    both = as_json(run("events", "--event", "requeued", "--event", "reclaimed", "-o", "json"))
    assert len(both) == 6
    assert [e["id"] for e in as_json(run("events", "--actor", "bob@ops", "-o", "json"))] == [
        jobs["manual"][0]
    ]
    web3 = as_json(run("events", "--worker", "web-3", "-o", "json"))
    assert len(web3) == 2 and {e["worker"] for e in web3} == {"web-3"}
    one = as_json(run("events", "--id", str(jobs["manual"][0]), "-o", "json"))
    assert [e["event"] for e in one] == ["requeued", "reclaimed"]
    assert len(as_json(run("events", "--limit", "2", "-o", "json"))) == 2
    # every format
    table = list(csv.reader(io.StringIO(run("events", "-o", "csv").out)))
    assert table[0] == list(as_json(run("events", "-o", "json"))[0]) and len(table) == 7
    assert len(run("events", "-o", "jsonl").out.splitlines()) == 6
    assert run("events", "-o", "tsv").out.count("\n") == 7
    assert "requeued" in run("events").out
    # bad input: one line, exit 2
    bad = run("events", "--since", "yesterday")
    assert bad.code == 2 and "neither a duration" in bad.err and "Traceback" not in bad.err
    assert run("events", "--id", "not-a-number").code == 2


def test_events_read_the_event_times_index(conn, dsn):
    """The window is read in the order of events_at_idx, not sorted after a scan."""
    conn.execute(
        "INSERT INTO jobctl.events (job_table, job_id, at, event) "
        "SELECT 'public.jobs', g::text, now() - g * interval '1 second', 'reclaimed' "
        "FROM generate_series(1, 20000) g"
    )
    conn.execute("ANALYZE jobctl.events")
    s = session.connect(db.Settings(dsn=dsn))
    try:
        window = events.Window(since=events.bound("1h"))
        for name in ("events_newest", "events_oldest"):
            params = {**window.params(), "job_table": "public.jobs", "limit": None, "cut": 4096}
            statement = s.query(name, **triage.shown_texts("e", "worker", "actor", "reason"))
            plan = s.conn.execute(
                b"EXPLAIN (FORMAT JSON) " + statement.as_bytes(s.conn), params
            ).fetchone()
            text = json.dumps(plan, default=str)
            assert "events_at_idx" in text, text
            assert '"Node Type": "Sort"' not in text, text
    finally:
        s.conn.close()

"""A table whose times are `timestamp without time zone` holding UTC (Django without USE_TZ,
Odoo, Rails, most ORMs), served as what they are: every time is read and written in the
mapping's zone (UTC unless `schema apply --time-zone` names another), whatever a session's
TimeZone. Here jobctl runs under PGTZ=Pacific/Kiritimati (UTC+14) and the workers under
America/Adak (UTC-10), the two ends of the clock; every age jobctl says is the one a UTC
session computes. And a NULL ready time (`eta`) means ready now, in the claim and in every
count of ready jobs."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from jobctl import lease

FAR_EAST, FAR_WEST = "Pacific/Kiritimati", "America/Adak"
TABLE = "task_queue"
# a web framework's job table: naive UTC times, a nullable eta ("now" when NULL), no lease
SHAPE = f"""
CREATE TABLE {TABLE} (
    id serial PRIMARY KEY,
    state varchar(16) NOT NULL DEFAULT 'pending',
    eta timestamp NULL,
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 3,
    worker varchar(64),
    date_started timestamp,
    date_done timestamp,
    date_updated timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    exc_info text,
    channel varchar(32) NOT NULL DEFAULT 'root'
)
"""
MAPPING = [
    *("--column", "status=state", "--column", "available_at=eta"),
    *("--column", "reserved_by=worker", "--column", "reserved_at=date_started"),
    *("--column", "finished_at=date_done", "--column", "updated_at=date_updated"),
    *("--column", "last_error=exc_info", "--column", "queue=channel"),
    *("--status", "queued=pending", "--status", "processing=started"),
]


def _utc(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row, options="-c TimeZone=UTC")


@pytest.fixture
def table(dsn: str, run: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """The table, applied, with jobctl's own sessions (in-process, libpq's PGTZ) at UTC+14."""
    with _utc(dsn) as c:
        c.execute(SHAPE)
        c.execute(f"INSERT INTO {TABLE} (eta) SELECT NULL FROM generate_series(1, 6)")
        # one not due for an hour (UTC wall-clock), one due a minute ago
        c.execute(
            f"INSERT INTO {TABLE} (eta) VALUES (now() AT TIME ZONE 'UTC' + interval '1 hour'), "
            "(now() AT TIME ZONE 'UTC' - interval '1 minute')"
        )
    code, _, err = run("--table", TABLE, "schema", "apply", "--yes", *MAPPING)
    assert code == 0, err
    monkeypatch.setenv("PGTZ", FAR_EAST)
    return TABLE


@pytest.fixture
def worker(dsn: str) -> Iterator[Callable[..., lease.Worker]]:
    """A lease.Worker on a connection of its own whose session is at UTC-10."""
    opened: list[psycopg.Connection[Any]] = []

    def make(name: str = "w-adak", lease_seconds: float = 60) -> lease.Worker:
        conn = psycopg.connect(dsn, autocommit=True, options=f"-c TimeZone={FAR_WEST}")
        opened.append(conn)
        return lease.Worker(conn, name, table=TABLE, lease_seconds=lease_seconds)

    yield make
    for conn in opened:
        conn.close()


def _json(run: Any, *args: str) -> Any:
    code, out, err = run("--table", TABLE, *args, "-o", "json")
    assert code == 0, (args, err)
    return json.loads(out)


def test_the_workers_write_utc_and_claim_null_ready_times_too(table, dsn, run, worker):
    """The claim (rendered for the table, run in a session at UTC-10) writes the claim time
    as UTC wall-clock and takes the NULL-eta jobs (ready now) and the one due a minute ago,
    never the one due in an hour."""
    w = worker()
    claimed = [w.claim() for _ in range(8)]
    got = [c for c in claimed if c is not None]
    assert len(got) == 7  # six NULL etas and the one due a minute ago
    with _utc(dsn) as c:
        rows = c.execute(
            f"SELECT id, eta, date_started, (now() AT TIME ZONE 'UTC') AS utc_now "
            f"FROM {TABLE} WHERE state = 'started'"
        ).fetchall()
        assert len(rows) == 7
        for row in rows:
            assert abs((row["utc_now"] - row["date_started"]).total_seconds()) < 5, row
        (later,) = c.execute(f"SELECT state FROM {TABLE} WHERE eta > now() AT TIME ZONE 'UTC'")
        assert later["state"] == "pending"
    for job in got[:2]:
        w.complete(job)
    with _utc(dsn) as c:
        done = c.execute(
            f"SELECT date_done, date_updated, now() AT TIME ZONE 'UTC' AS utc_now FROM {TABLE} "
            "WHERE state = 'done'"
        ).fetchall()
    assert len(done) == 2
    for row in done:
        assert abs((row["utc_now"] - row["date_done"]).total_seconds()) < 5
        assert abs((row["utc_now"] - row["date_updated"]).total_seconds()) < 5


def test_every_command_tells_the_ages_a_utc_session_computes(table, dsn, run, worker):
    """A job claimed 600 s ago (UTC wall-clock) whose lease expired: stuck, show, explain,
    history, summary, review, reclaim and the manual writes, all under UTC+14, say 600 s,
    not 600 s plus 14 hours; and a job the application completed after a reclaim is shown."""
    w = worker()
    first, second, third = w.claim(), w.claim(), w.claim()
    assert first and second and third
    with _utc(dsn) as c:
        c.execute(
            f"UPDATE {TABLE} SET date_started = now() AT TIME ZONE 'UTC' - interval '600 s', "
            "lease_expires_at = now() - interval '30 s' WHERE id = ANY(%s)",
            ([first.id, second.id, third.id],),
        )
    stuck = _json(run, "stuck")
    ages = {r["id"]: r["claimed_age_s"] for r in stuck}
    assert set(ages) == {first.id, second.id, third.id}
    for age in ages.values():
        assert 595 <= age <= 640, stuck
    shown = _json(run, "show", str(first.id))
    claimed_at = dt.datetime.fromisoformat(shown["reserved_at"])
    assert claimed_at.tzinfo is not None
    age = (dt.datetime.now(dt.timezone.utc) - claimed_at).total_seconds()
    assert 595 <= age <= 640, shown
    summary = _json(run, "summary")
    assert summary["ready"] == 4, summary  # the pending NULL etas and the one due a minute ago
    assert summary["oldest_ready_s"] is not None and summary["oldest_ready_s"] < 120, summary

    # the reclaim: dry run, then exactly that; the requeued jobs are ready at once (UTC)
    plan = _json(run, "reclaim", "--dry-run")
    assert {r["id"] for r in plan} == {first.id, second.id, third.id}
    code, _, err = run("--table", TABLE, "reclaim", "--commit", "--yes")
    assert code == 0, err
    with _utc(dsn) as c:
        rows = c.execute(
            f"SELECT id, state, eta, now() AT TIME ZONE 'UTC' AS utc_now FROM {TABLE} "
            "WHERE id = ANY(%s)",
            ([first.id, second.id, third.id],),
        ).fetchall()
    for row in rows:
        assert row["state"] == "pending"
        assert abs((row["utc_now"] - row["eta"]).total_seconds()) < 5, row

    # the application's worker completes a job after the reclaim: the job an on-call
    # looks at first (show, history and explain crashed on it, comparing naive and aware)
    again = w.claim()
    assert again is not None
    w.complete(again)
    for command in ("show", "history", "explain"):
        code, out, err = run("--table", TABLE, command, str(again.id))
        assert code == 0 and not err and "completed" in out, (command, err)
        _json(run, command, str(again.id))

    # the manual writes' fence reads date_updated as the instant it is: no false conflict
    stale = w.claim()
    assert stale is not None
    with _utc(dsn) as c:
        c.execute(
            f"UPDATE {TABLE} SET lease_expires_at = now() - interval '1 s' WHERE id = %s",
            (stale.id,),
        )
    code, _, err = run("--table", TABLE, "fail", str(stale.id), "--reason", "by hand", "--yes")
    assert code == 0, err
    with _utc(dsn) as c:
        (row,) = c.execute(
            f"SELECT state, date_done, now() AT TIME ZONE 'UTC' AS utc_now FROM {TABLE} "
            "WHERE id = %s",
            (stale.id,),
        )
    assert row["state"] == "failed"
    assert abs((row["utc_now"] - row["date_done"]).total_seconds()) < 5


def test_a_zone_named_at_apply_is_the_one_every_statement_uses(dsn, run, monkeypatch, worker):
    """--time-zone Europe/Brussels: the columns hold Brussels wall-clock time; the claim
    writes it and stuck reads it so, under the far zones; recorded, shown by schema check."""
    with _utc(dsn) as c:
        c.execute(SHAPE)
        c.execute(f"INSERT INTO {TABLE} (eta) VALUES (NULL)")
    code, _, err = run(
        "--table", TABLE, "schema", "apply", "--yes", *MAPPING, "--time-zone", "Europe/Brussels"
    )
    assert code == 0, err
    monkeypatch.setenv("PGTZ", FAR_EAST)
    job = worker().claim()
    assert job is not None
    with _utc(dsn) as c:
        (row,) = c.execute(
            f"SELECT date_started, now() AT TIME ZONE 'Europe/Brussels' AS local_now "
            f"FROM {TABLE} WHERE id = %s",
            (job.id,),
        )
    assert abs((row["local_now"] - row["date_started"]).total_seconds()) < 5
    with _utc(dsn) as c:
        c.execute(f"UPDATE {TABLE} SET lease_expires_at = now() - interval '1 s'")
    (found,) = _json(run, "stuck")
    assert found["claimed_age_s"] < 60, found
    code, out, _ = run("--table", TABLE, "schema", "check")
    assert "times without a zone are in Europe/Brussels" in out


def test_a_zone_the_server_does_not_know_is_refused_before_anything_changes(dsn, run):
    with _utc(dsn) as c:
        c.execute(SHAPE)
    code, out, err = run(
        "--table", TABLE, "schema", "apply", "--yes", *MAPPING, "--time-zone", "Mars/Olympus"
    )
    assert code == 2, (out, err)
    assert "Mars/Olympus" in err and len(err.strip().splitlines()) == 1
    with _utc(dsn) as c:
        (row,) = c.execute(
            "SELECT count(*) AS n FROM information_schema.columns "
            "WHERE table_name = %s AND column_name = 'attempt_token'",
            (TABLE,),
        )
    assert row["n"] == 0


def test_the_claims_index_on_a_nullable_eta_is_advised_on_its_coalesce(table, dsn, run):
    """No priority mapped, a nullable eta: schema check advises the index the claim reads
    (its ready time, COALESCE(eta, '-infinity'::timestamp), then the id, on the queued rows),
    counts none on the column itself, and counts the advised one once it is built."""
    with _utc(dsn) as c:
        c.execute(f"CREATE INDEX task_queue_eta ON {TABLE} (eta, id) WHERE state = 'pending'")
    checks = {c["check"]: c for c in _json(run, "schema", "check")}
    said = checks["an index for the claim's order"]
    advice = "CREATE INDEX" + said["detail"].split("CREATE INDEX", 1)[1].split(" serves ")[0]
    assert said["detail"].startswith("none;") and "task_queue_eta" not in said["detail"]
    expected = '(COALESCE("eta", \'-infinity\'::"pg_catalog"."timestamp")), "id")'
    assert expected in advice and "WHERE \"state\" = 'pending'" in advice, advice
    with _utc(dsn) as c:
        c.execute(advice)
    checks = {c["check"]: c for c in _json(run, "schema", "check")}
    assert checks["an index for the claim's order"]["detail"].endswith("(valid)"), checks

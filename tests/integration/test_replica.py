"""A primary and hot standbys the test session makes itself (initdb, ``pg_basebackup -R``, free
local ports, the server binaries of the run's major version), torn down after: reads on a
lagging standby, writes refused there, multi-host DSNs, a failover in the middle of a reclaim
of 5,000 rows, requeue losing its server, and the reclaimer service through a failover.

Skipped when no server binaries of the run's version are on the machine; failed instead when
JOBCTL_REQUIRE_REPLICA=1 (CI sets it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import cluster
import psycopg
import pytest

from jobctl import lease
from jobctl.cli import main as cli

APP = "app"
EXPIRED, LIVE = 5_000, 500
LOSS_AT = 1_000  # reclaimed when the primary is killed
MANY = 1_000  # ids one requeue is given when it loses its server


# ---------------------------------------------------------------- the clusters
@pytest.fixture(scope="module")
def bindir(server_dsn: str) -> str:
    """Server binaries of the version the run tests (PostgreSQL 15, 16, 18 ...)."""
    with psycopg.connect(server_dsn) as c:
        major = int(c.execute("SHOW server_version_num").fetchone()[0]) // 10_000  # type: ignore[index]
    found = cluster.bindir_for(major)
    if found is None:
        reason = f"no PostgreSQL {major} server binaries (initdb, pg_ctl, pg_basebackup) here"
        if os.environ.get("JOBCTL_REQUIRE_REPLICA") == "1":
            pytest.fail(f"{reason}, and JOBCTL_REQUIRE_REPLICA=1")
        pytest.skip(reason)
    return found


def install(server: cluster.Server) -> str:
    """The app database with the reference jobs table and jobctl's history; its DSN."""
    with server.connect() as c:
        c.execute(f"CREATE DATABASE {APP}")
    dsn = at(server)
    code = cli.main(["--dsn", dsn, "schema", "apply", "--create", "--yes"])
    assert code == 0
    return dsn


def at(*servers: cluster.Server, extra: str = "") -> str:
    """A DSN of the app database on ``servers`` (several: a multi-host DSN, in that order)."""
    hosts = ",".join("127.0.0.1" for _ in servers)
    ports = ",".join(str(s.port) for s in servers)
    return f"host={hosts} port={ports} user=postgres dbname={APP} connect_timeout=3 {extra}"


@pytest.fixture(scope="module")
def trio(bindir: str) -> Iterator[cluster.Replicated]:
    """A primary, a synchronous standby and an asynchronous one, the jobs table installed."""
    with cluster.replicated(bindir) as made:
        made.make_standby("sync1", synchronous=True)
        made.make_standby("async1", synchronous=False)
        install(made.primary)
        yield made


@pytest.fixture(scope="module")
def lone_server(bindir: str) -> Iterator[cluster.Server]:
    """A primary without standbys, for the tests that kill it and start it again."""
    with cluster.replicated(bindir) as made:
        yield made.primary


@pytest.fixture
def alone(lone_server: cluster.Server) -> cluster.Server:
    """The module's lone primary, running, without the app database a test before made."""
    if not lone_server.running():  # a test before failed while it was down
        lone_server.start()
    with lone_server.connect() as c:
        c.execute(f"DROP DATABASE IF EXISTS {APP} WITH (FORCE)")
    return lone_server


@pytest.fixture
def pair(bindir: str) -> Iterator[cluster.Replicated]:
    """A fresh primary and synchronous standby for one test that kills its primary."""
    with cluster.replicated(bindir) as made:
        made.make_standby("sync1", synchronous=True)
        install(made.primary)
        yield made


def fresh_jobs(dsn: str, expired: int, live: int, worker: str = "w1") -> list[lease.Claim]:
    """Empty the table, then ``expired`` jobs claimed with leases that ran out a minute ago
    and ``live`` ones with a 10-minute lease; the claims (tokens) of all."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("TRUNCATE jobs RESTART IDENTITY")
        c.execute(
            "INSERT INTO jobs (recovery_policy) SELECT 'auto' FROM generate_series(1, %s)",
            (expired + live,),
        )
        c.execute(
            "UPDATE jobs SET status = 'processing', reserved_by = %s, reserved_at = now(), "
            "heartbeat_at = now(), attempt_token = gen_random_uuid(), attempts = 1, "
            "lease_expires_at = now() + CASE WHEN id <= %s THEN interval '-1 minute' "
            "ELSE interval '10 minutes' END",
            (worker, expired),
        )
        found = c.execute(
            "SELECT id, attempt_token, attempts, lease_expires_at FROM jobs ORDER BY id"
        ).fetchall()
    return [lease.Claim(*row) for row in found]


def leases(dsn: str) -> dict[int, tuple[Any, ...]]:
    with psycopg.connect(dsn) as c:
        found = c.execute(
            "SELECT id, status, attempt_token, lease_expires_at, reclaim_count FROM jobs"
        ).fetchall()
    return {row[0]: row[1:] for row in found}


# ---------------------------------------------------------------- reads on a standby
def test_a_lagging_standby_says_so_and_does_not_call_extended_leases_expired(trio, jobctl):
    primary, standby = trio.primary, trio.standby("async1")
    # ten leases of 3 s, on the standby too; then replay stops there
    fresh_jobs(at(primary), 0, 0)
    with psycopg.connect(at(primary), autocommit=True) as c:
        c.execute("INSERT INTO jobs (recovery_policy) SELECT 'auto' FROM generate_series(1, 10)")
        c.execute(
            "UPDATE jobs SET status = 'processing', reserved_by = 'w1', reserved_at = now(), "
            "heartbeat_at = now(), attempt_token = gen_random_uuid(), attempts = 1, "
            "lease_expires_at = now() + interval '3 seconds'"
        )
        ids = [r[0] for r in c.execute("SELECT id FROM jobs ORDER BY id")]
    cluster.wait_replayed(primary, standby)
    with standby.connect(APP) as c:
        c.execute("SELECT pg_wal_replay_pause()")
    try:
        time.sleep(3.5)  # the leases ran out; the workers of five extend theirs on the primary
        with psycopg.connect(at(primary), autocommit=True) as c:
            c.execute(
                "UPDATE jobs SET lease_expires_at = now() + interval '1 minute', "
                "heartbeat_at = now() WHERE id = ANY(%s)",
                (ids[:5],),
            )
        # the primary: five expired, no notice
        code, out, err = jobctl(at(primary), "stuck", "-o", "json")
        assert code == 0 and err == ""
        assert sorted(r["id"] for r in json.loads(out)) == ids[5:]
        assert all("replica" not in r for r in json.loads(out))

        # the standby: not one called expired, and it says why
        code, out, err = jobctl(at(standby), "stuck", "-o", "json")
        assert code == 0 and json.loads(out) == []
        lines = err.splitlines()
        assert len(lines) == 2, err
        assert f"reading standby 127.0.0.1:{standby.port} (replay paused, " in lines[0]
        assert "may have been extended on the primary" in lines[0]
        assert "10 lease(s) expired less than" in lines[1] and "are not listed" in lines[1]

        # the same leases as expiring, with --expiring-within
        code, out, err = jobctl(at(standby), "stuck", "--expiring-within", "1m", "-o", "json")
        found = json.loads(out)
        assert sorted(r["id"] for r in found) == ids
        assert {r["lease_state"] for r in found} == {"expiring"}
        assert {r["replica"]["replay_paused"] for r in found} == {True}
        assert all(r["replica"]["lag_s"] >= 3.0 for r in found)

        # --trust-replica: as the standby has them (all ten), still saying where it reads
        code, out, err = jobctl(at(standby), "stuck", "--trust-replica", "-o", "json")
        assert sorted(r["id"] for r in json.loads(out)) == ids
        assert "reading standby" in err and "not listed" not in err

        # the dry run: nothing to reclaim here, and where the commit must run
        code, out, err = jobctl(at(standby), "reclaim", "-o", "json")
        assert code == 0 and json.loads(out) == []
        assert "the commit must run on the primary" in err
        assert "target_session_attrs=read-write" in err

        # every read command says so; JSON objects carry the field
        for args in (("summary",), ("show", str(ids[0])), ("history", str(ids[0]))):
            code, out, err = jobctl(at(standby), *args, "-o", "json")
            assert code == 0, err
            assert json.loads(out)["replica"]["server"] == f"127.0.0.1:{standby.port}"
            assert err.startswith("jobctl: reading standby")
        code, out, err = jobctl(at(standby), "explain", str(ids[0]))
        assert code == 0 and "reading standby" in err
        code, out, err = jobctl(at(standby), "schema", "check")
        assert code == 0 and err.startswith("jobctl: reading standby"), err

        # metrics: the lag, 0 on the primary
        code, out, _ = jobctl(at(standby), "metrics")
        lag = [line for line in out.splitlines() if line.startswith("jobctl_replica_lag")]
        assert len(lag) == 1 and float(lag[0].split()[-1]) >= 3.0
        assert 'jobctl_server_standby{table="public.jobs"} 1' in out.splitlines()
        code, out, _ = jobctl(at(primary), "metrics")
        lag = [line for line in out.splitlines() if line.startswith("jobctl_replica_lag")]
        assert lag == ['jobctl_replica_lag_seconds{table="public.jobs"} 0.0']
        assert 'jobctl_server_standby{table="public.jobs"} 0' in out.splitlines()
    finally:
        with standby.connect(APP) as c:
            c.execute("SELECT pg_wal_replay_resume()")


def test_a_caught_up_standby_judges_as_its_primary(trio, jobctl):
    """Replay running and caught up: an idle primary is why the last replayed transaction
    ages, not a stale standby; the lag is 0 and leases are judged as they are."""
    primary, standby = trio.primary, trio.standby("sync1")
    fresh_jobs(at(primary), 7, 3)
    cluster.wait_replayed(primary, standby)
    time.sleep(1.5)  # nothing written meanwhile
    code, out, err = jobctl(at(standby), "stuck", "-o", "json")
    assert code == 0 and len(json.loads(out)) == 7, err
    assert "caught up with the WAL it received" in err and "not listed" not in err
    assert json.loads(out)[0]["replica"]["lag_s"] == 0


# ---------------------------------------------------------------- writes on a standby
@pytest.mark.parametrize(
    "args",
    [
        ("requeue", "1"),
        ("fail", "1", "--reason", "gone"),
        ("policy", "1", "--manual"),
        ("reclaim", "--commit"),
        ("quarantine", "--commit"),
        ("schema", "apply"),
        ("schema", "grants", "--readonly", "postgres"),
        ("schema", "remove"),
        ("cancel", "1", "--reason", "gone"),
        ("pause", "--kind", "k", "--reason", "down"),
        ("resume", "--kind", "k"),
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_writes_on_a_standby_are_refused_before_any_prompt(trio, jobctl, args):
    primary, standby = trio.primary, trio.standby("sync1")
    fresh_jobs(at(primary), 3, 0)
    cluster.wait_replayed(primary, standby)
    before = leases(at(primary))
    # no --yes and no terminal: a prompt would fail differently
    code, out, err = jobctl(at(standby), *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    assert f"127.0.0.1:{standby.port} is a standby" in err
    assert "target_session_attrs=read-write" in err and "nothing changed" in err
    assert leases(at(primary)) == before


def test_the_lists_of_writing_commands_are_served_by_a_standby(trio, jobctl):
    """pause --list and policy --list only read: a standby serves them as any read."""
    standby = trio.standby("sync1")
    for args in (("pause", "--list", "-o", "json"), ("policy", "--list", "-o", "json")):
        code, out, err = jobctl(at(standby), *args)
        assert code == 0 and "is a standby" not in err, (args, err)
        assert isinstance(json.loads(out), list)


def test_a_multi_host_dsn_finds_the_primary_or_reads_the_standby(trio, jobctl):
    primary, standby = trio.primary, trio.standby("sync1")
    (job, *_) = fresh_jobs(at(primary), 1, 0)
    cluster.wait_replayed(primary, standby)
    # the standby first: read-write skips it
    first_standby = at(standby, primary, extra="target_session_attrs=read-write")
    code, _, err = jobctl(first_standby, "requeue", str(job.id), "--yes", "--reason", "test")
    assert code == 0, err
    assert leases(at(primary))[job.id][0] == "queued"
    # without it the first host answers: a standby, refused with what to add
    code, _, err = jobctl(at(standby, primary), "fail", str(job.id), "--reason", "x", "--yes")
    assert code == 2 and "target_session_attrs=read-write" in err
    # reads may prefer the standby, and say so
    prefer = at(primary, standby, extra="target_session_attrs=prefer-standby")
    code, _, err = jobctl(prefer, "stuck")
    assert code == 0 and f"reading standby 127.0.0.1:{standby.port}" in err


# ---------------------------------------------------------------- losing the server
class Spawned:
    """jobctl in its own process, its output to files (a pipe nobody reads would block it)."""

    def __init__(self, dsn: str, *args: str) -> None:
        env = {**os.environ, "JOBCTL_ACTOR": "tester@ci"}
        env.pop("JOBCTL_DSN", None)
        self.out, self.err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobctl", "--dsn", dsn, *args],
            stdout=self.out,
            stderr=self.err,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )

    def running(self) -> bool:
        return self.proc.poll() is None

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        """Wait for it; (exit code, stdout, stderr)."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        with self.out, self.err:
            self.out.seek(0)
            self.err.seek(0)
            return code, self.out.read(), self.err.read()


def count_reclaimed(dsn: str) -> int:
    with contextlib.suppress(psycopg.OperationalError), psycopg.connect(dsn) as c:
        return int(c.execute("SELECT count(*) FROM jobs WHERE reclaim_count > 0").fetchone()[0])  # type: ignore[index]
    return -1


def test_a_failover_in_the_middle_of_a_reclaim(pair, jobctl):
    """5,000 expired jobs and 500 live ones; the primary killed (pg_ctl -m immediate) while
    reclaim --commit runs; the synchronous standby promoted; the same command run again."""
    primary, standby = pair.primary, pair.standby("sync1")
    claims = fresh_jobs(at(primary), EXPIRED, LIVE)
    live_before = {k: v for k, v in leases(at(primary)).items() if k > EXPIRED}
    both = at(primary, standby, extra="target_session_attrs=read-write")
    command = ("reclaim", "--commit", "--yes", "--batch-size", "20", "-o", "jsonl")
    proc = Spawned(both, *command)
    started = time.monotonic()
    while count_reclaimed(at(primary)) < LOSS_AT:
        assert proc.running(), proc.finish()
        assert time.monotonic() - started < 120
        time.sleep(0.02)
    primary.stop("immediate")
    code, out, err = proc.finish()
    assert code == 1, err
    line = err.strip()
    assert "\n" not in line and "Traceback" not in err
    assert line.startswith("jobctl: error: database unavailable")
    said = int(line.split("before the loss: ")[1].split()[0])
    assert "re-running the same command is safe" in line
    reported = [json.loads(row) for row in out.splitlines()]
    assert all(r["applied"] for r in reported)
    assert LOSS_AT <= len(reported) <= said < EXPIRED

    standby.promote()
    code, out, err = jobctl(both, *command)
    assert code == 0, err
    again = [json.loads(row) for row in out.splitlines()]
    after = leases(at(standby))
    # every row reported applied is still applied; the rest came in the second run; none twice
    assert all(after[r["id"]][0] == "queued" and after[r["id"]][3] == 1 for r in reported)
    assert {r["id"] for r in reported}.isdisjoint(r["id"] for r in again)
    # the batch in flight at the loss (at most --batch-size rows) may have committed on the
    # primary, and reached the synchronous standby, without its COMMIT being acknowledged
    assert EXPIRED - said - 20 <= len(again) <= EXPIRED - said
    assert all(after[i][0] == "queued" and after[i][3] == 1 for i in range(1, EXPIRED + 1))
    with psycopg.connect(at(standby)) as c:
        events = c.execute(
            "SELECT count(*), count(DISTINCT job_id) FROM jobctl.events WHERE event = 'reclaimed'"
        ).fetchone()
    assert events == (EXPIRED, EXPIRED)
    # live leases untouched
    assert {k: v for k, v in after.items() if k > EXPIRED} == live_before
    # the fence holds: a reclaimed attempt's late completion changes nothing
    with psycopg.connect(at(standby), autocommit=True) as c:
        worker = lease.Worker(c, "w1", lease_seconds=60)
        with pytest.raises(lease.LeaseLost):
            worker.complete(claims[0])
    assert leases(at(standby))[claims[0].id][0] == "queued"
    print(
        f"\nfailover mid-reclaim: {said} of {EXPIRED} reclaimed before the loss "
        f"({len(reported)} printed), {len(again)} after promotion; {LIVE} live untouched\n"
        f"{line}\n{err}"
    )


def test_requeue_of_many_ids_losing_its_server_says_what_it_did(alone, jobctl):
    install(alone)
    dsn = at(alone)
    fresh_jobs(dsn, MANY, 0)
    ids = [str(i) for i in range(1, MANY + 1)]
    proc = Spawned(dsn, "requeue", *ids, "--yes", "--reason", "replay", "-o", "jsonl")
    started = time.monotonic()
    while True:
        with psycopg.connect(dsn) as c:
            done = c.execute("SELECT count(*) FROM jobs WHERE status = 'queued'").fetchone()
        if done and done[0] >= 100:
            break
        assert proc.running(), proc.finish()
        assert time.monotonic() - started < 120
        time.sleep(0.02)
    alone.stop("immediate")
    code, _, err = proc.finish()
    assert code == 1 and err.count("\n") == 1, err
    said = int(err.split("before the loss: ")[1].split()[0])
    assert f"of {MANY} job(s) written (requeue) and committed" in err
    assert "re-running the same command is safe" in err
    alone.start()
    requeued = sum(1 for v in leases(dsn).values() if v[0] == "queued")
    assert said <= requeued <= said + 1  # the write in flight may have committed
    code, out, err = jobctl(dsn, "requeue", *ids, "--yes", "--reason", "replay", "-o", "json")
    outcomes = [r["outcome"] for r in json.loads(out)]
    assert outcomes.count("requeued") == MANY - requeued
    assert outcomes.count("refused") == requeued and code == 2
    assert all(v[0] == "queued" for v in leases(dsn).values())


def test_the_reclaimer_service_rides_through_a_failover(pair):
    """reclaim --every with a multi-host DSN: reclaims on the primary, loses it, reconnects
    to the promoted standby (and says so), reclaims there; none twice."""
    primary, standby = pair.primary, pair.standby("sync1")
    fresh_jobs(at(primary), 200, 50)
    both = at(primary, standby, extra="target_session_attrs=read-write")
    proc = Spawned(both, "reclaim", "--commit", "--yes", "--every", "0.2s", "-o", "jsonl")
    try:
        wait_for(lambda: count_reclaimed(at(primary)) == 200, "the first 200 reclaimed")
        primary.stop("immediate")
        time.sleep(1)
        standby.promote()
        with psycopg.connect(at(standby), autocommit=True) as c:
            c.execute(
                "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id > 200 "
                "AND id <= 230"
            )
        wait_for(lambda: count_reclaimed(at(standby)) == 230, "30 more after the failover")
    finally:
        proc.proc.send_signal(signal.SIGTERM)
        code, out, err = proc.finish()
    assert code == 0, err
    assert f"reclaimer: connected to 127.0.0.1:{primary.port} (primary)" in err
    assert f"reclaimer: reconnected to 127.0.0.1:{standby.port} (primary)" in err
    assert "database unavailable" in err or "cannot connect" in err
    assert "Traceback" not in err
    ids = [json.loads(row)["id"] for row in out.splitlines()]
    assert len(ids) == len(set(ids)) == 230
    print(f"\nthe service through a failover:\n{err}")
    assert all(v[3] == 1 for k, v in leases(at(standby)).items() if k <= 230)


def wait_for(condition: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_schema_apply_losing_its_server_says_which_steps_were_applied(alone, jobctl):
    """A plain queue table of 1,000,000 rows: the server killed while apply builds the reclaim
    index (or validates a constraint); the steps before it stay applied, a re-run finishes."""
    with alone.connect() as c:
        c.execute(f"CREATE DATABASE {APP}")
    dsn = at(alone)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "CREATE TABLE q (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT "
            "'queued', attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 5,"
            " available_at timestamptz NOT NULL DEFAULT now(), reserved_by text, "
            "reserved_at timestamptz, last_error text, finished_at timestamptz, "
            "updated_at timestamptz NOT NULL DEFAULT now())"
        )
        c.execute("INSERT INTO q (status) SELECT 'done' FROM generate_series(1, 1000000)")
    proc = Spawned(dsn, "--table", "q", "schema", "apply", "--yes")
    slow = "CREATE INDEX%%' OR query ILIKE 'ALTER TABLE%%VALIDATE%%"
    started = time.monotonic()
    while True:
        with psycopg.connect(dsn, autocommit=True) as c:
            busy = c.execute(
                f"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jobctl' "
                f"AND state = 'active' AND (query ILIKE '{slow}')"
            ).fetchone()
        if busy and busy[0]:
            break
        assert proc.running(), proc.finish()
        assert time.monotonic() - started < 120
        time.sleep(0.01)
    alone.stop("immediate")
    code, _, err = proc.finish()
    *done, last = err.splitlines()  # a line per step applied, then the loss
    assert code == 1 and "Traceback" not in err, err
    assert all(line.startswith("done: ") for line in done)
    assert last.startswith("jobctl: error: database unavailable")
    applied = int(last.split("before the loss: ")[1].split()[0])
    assert applied == len(done) >= 1 and "step(s) applied and committed" in last
    assert "re-running the same command is safe" in last
    alone.start()
    code, _, err = jobctl(dsn, "--table", "q", "schema", "apply", "--yes")
    assert code == 0, err
    code, out, _ = jobctl(dsn, "--table", "q", "schema", "check", "-o", "json")
    assert code == 0 and all(c["ok"] for c in json.loads(out)), out

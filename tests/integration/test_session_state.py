"""What a session brings with it from its DSN, role or database: a session_replication_role
under which no trigger fires, and output styles psycopg cannot read
(finding 11). Each is met inside jobctl's own transactions, so a pooler that hands over
another server connection between two transactions changes nothing."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from helpers import POOL_SIZE, add_jobs, claim_all, snapshot
from psycopg import conninfo

REFUSED = "session_replication_role is {role}, not origin"


def with_role(dsn: str, role: str = "replica") -> str:
    """``dsn`` with the option that turns every ordinary trigger off for its sessions."""
    return conninfo.make_conninfo(dsn, options=f"-c session_replication_role={role}")


def events(conn) -> int:
    return conn.execute("SELECT count(*) AS n FROM jobctl.events").fetchone()["n"]


def assert_refused(result, role: str = "replica") -> None:
    assert result.code == 2, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert REFUSED.format(role=role) in lines[0] and "nothing written" in lines[0], lines[0]
    assert "Traceback" not in result.err and "internal error" not in result.err


def staged(conn, dsn) -> dict[str, int]:
    """An expired manual job, an expired auto job reclaimed before (quarantine's), and
    another expired one for reclaim."""
    manual, auto, other = add_jobs(conn, 1, policy="manual") + add_jobs(conn, 2)
    claim_all(dsn, 3, lease_seconds=-60)
    conn.execute("UPDATE jobs SET reclaim_count = 3 WHERE id = %s", (auto,))
    return {"manual": manual, "auto": auto, "other": other}


# ---------------------------------------------------------------- finding 7: replication role
WRITES = {
    "requeue": lambda jobs: ["requeue", str(jobs["manual"]), "--yes"],
    "fail": lambda jobs: ["fail", str(jobs["manual"]), "--reason", "charged", "--yes"],
    "policy": lambda jobs: ["policy", str(jobs["auto"]), "--manual", "--yes"],
    "quarantine": lambda jobs: ["quarantine", "--min-reclaims", "2", "--commit", "--yes"],
    "reclaim": lambda jobs: ["reclaim", "--commit", "--yes"],
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_no_write_in_a_session_whose_triggers_would_not_fire(conn, dsn, run, write):
    """options='-c session_replication_role=replica': the write went ahead and the history
    recorded nothing. Now refused, nothing written; the same command without it is audited."""
    jobs = staged(conn, dsn)
    before, recorded = snapshot(conn), events(conn)
    assert_refused(run(*WRITES[write](jobs), dsn=with_role(dsn)))
    assert snapshot(conn) == before
    done = run(*WRITES[write](jobs))
    assert done.code == 0, done.err
    assert events(conn) > recorded  # the same write, in an ordinary session: recorded


def test_a_local_replication_role_is_refused_too(conn, dsn, run):
    jobs = staged(conn, dsn)
    before = snapshot(conn)
    assert_refused(run(*WRITES["requeue"](jobs), dsn=with_role(dsn, "local")), "local")
    assert snapshot(conn) == before


def test_the_config_files_dsn_is_held_to_the_same(conn, dsn, run, tmp_path, monkeypatch):
    jobs = staged(conn, dsn)
    config = tmp_path / "config.toml"
    config.write_text(f"[targets.orders]\ndsn = {json.dumps(with_role(dsn))}\n")
    config.chmod(0o600)
    monkeypatch.setenv("JOBCTL_CONFIG", str(config))
    before = snapshot(conn)
    assert_refused(run("--target", "orders", *WRITES["requeue"](jobs)))
    assert_refused(run("--target", "orders", *WRITES["reclaim"](jobs)))
    assert snapshot(conn) == before


def test_the_reclaimer_service_stops_in_such_a_session(conn, dsn):
    staged(conn, dsn)
    before = snapshot(conn)
    env = {**os.environ, "JOBCTL_DSN": with_role(dsn), "NO_COLOR": "1"}
    service = subprocess.run(
        [sys.executable, "-m", "jobctl", "reclaim", "--every", "0.2s", "--commit", "--yes"],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert service.returncode == 2, service.stderr  # refused, not retried
    said = [line for line in service.stderr.splitlines() if REFUSED.format(role="replica") in line]
    assert len(said) == 1 and "Traceback" not in service.stderr, service.stderr
    assert snapshot(conn) == before


def test_an_audit_trigger_that_would_not_fire_is_refused(conn, dsn, run):
    """ENABLE REPLICA: the trigger fires only where session_replication_role is replica, so
    never in jobctl's sessions; ENABLE ALWAYS fires in every session."""
    jobs = staged(conn, dsn)
    conn.execute("ALTER TABLE jobs ENABLE REPLICA TRIGGER jobctl_history")
    before = snapshot(conn)
    result = run(*WRITES["requeue"](jobs))
    assert result.code == 1 and "audit trigger is not installed or disabled" in result.err
    assert snapshot(conn) == before
    conn.execute("ALTER TABLE jobs ENABLE ALWAYS TRIGGER jobctl_history")
    recorded = events(conn)
    assert run(*WRITES["requeue"](jobs)).code == 0
    assert events(conn) == recorded + 1


@contextlib.contextmanager
def every_server_connection(pooled_dsn: str):
    """A client of the pool on each of its server connections, each inside a transaction
    (so each its own server connection)."""
    with contextlib.ExitStack() as stack:
        clients = [
            stack.enter_context(
                psycopg.connect(
                    pooled_dsn, prepare_threshold=None, row_factory=psycopg.rows.dict_row
                )
            )
            for _ in range(POOL_SIZE)
        ]
        pids = {c.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"] for c in clients}
        assert len(pids) == POOL_SIZE, "every server connection of the pool"
        yield clients


def test_a_pooled_server_connection_left_in_replica_is_refused(conn, dsn, pooled_dsn, run):
    """Another client of the pool left session_replication_role=replica on the server
    connections (a session SET survives in transaction mode): jobctl's client session never
    set it, the server connection its write lands on has it. Checked in the write's own
    transaction, the write is refused there."""
    jobs = staged(conn, dsn)
    with every_server_connection(pooled_dsn) as clients:
        for client in clients:
            client.execute("SET session_replication_role = replica")
            client.commit()
    before = snapshot(conn)
    assert_refused(run(*WRITES["requeue"](jobs), dsn=pooled_dsn))
    assert_refused(run(*WRITES["reclaim"](jobs), dsn=pooled_dsn))
    assert snapshot(conn) == before


# ---------------------------------------------------------------- finding 11: output styles
STYLES = {
    "DateStyle": "German, DMY",
    "IntervalStyle": "sql_standard",
    "extra_float_digits": "-15",
}
READS = (
    ["stuck"],
    ["stuck", "--expiring-within", "1m"],
    ["summary"],
    ["show", "{manual}"],
    ["history", "{manual}"],
    ["explain", "{manual}"],
    ["reclaim", "--dry-run"],
    ["quarantine", "--min-reclaims", "1"],
    ["review"],
    ["events"],
    ["report", "--since", "1h"],
    ["schema", "check"],
)
IN_WORDS = ("explain", "report")  # sentences with times in the database's zone: not compared
TIME_DEPENDENT = ("waited_s", "overdue", "age", "lag", "oldest", "until")


def styled_data(conn, dsn, run) -> dict[str, int]:
    """Jobs with a history: reclaimed ones awaiting review, one requeued by hand, expired ones
    (one 1234.5 s ago), and an application column of type interval and one of float8."""
    conn.execute(
        "ALTER TABLE jobs ADD COLUMN retry_in interval DEFAULT '-1 day 02:03:04.5', "
        "ADD COLUMN weight float8 DEFAULT 0.123456789012345"
    )
    manual = add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 2, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    assert run("requeue", str(manual[1]), "--reason", "looked", "--yes").code == 0
    (old,) = add_jobs(conn, 1)
    conn.execute("UPDATE jobs SET available_at = now() + interval '1 day' WHERE id <> %s", (old,))
    claim_all(dsn, 1, lease_seconds=-1234.5)
    return {"manual": manual[0], "old": old}


def restyle(conn, dsn, timezone: str) -> None:
    database = conninfo.conninfo_to_dict(dsn)["dbname"]
    for name, value in {**STYLES, "TimeZone": timezone}.items():
        conn.execute(f"ALTER DATABASE {database} SET {name} = '{value}'")
    with psycopg.connect(dsn) as fresh:  # a new session has them
        assert fresh.execute("SHOW DateStyle").fetchone() == ("German, DMY",)


def instants(value: Any) -> Any:
    """``value`` (a command's JSON) with every ISO timestamp as an instant in UTC, and what
    changes with the clock left out."""
    if isinstance(value, dict):
        return {
            k: instants(v)
            for k, v in value.items()
            if not any(part in k for part in TIME_DEPENDENT)
        }
    if isinstance(value, list):
        return [instants(v) for v in value]
    if isinstance(value, str) and len(value) >= 25 and value[4] == "-" and "T" in value:
        with contextlib.suppress(ValueError):
            return dt.datetime.fromisoformat(value).astimezone(dt.timezone.utc).isoformat()
    return value


@pytest.mark.parametrize("timezone", ["Asia/Kathmandu", "XYZ-3:30"])  # Python knows one
def test_every_read_under_a_databases_own_output_styles(conn, dsn, run, timezone):
    """ALTER DATABASE ... SET DateStyle = 'German, DMY' (the owner's right): every command
    that read a timestamp failed with 'internal error: NotImplementedError'. Each now sets
    the styles it parses in its transactions: the same values as under the defaults."""
    jobs = styled_data(conn, dsn, run)
    reads = [[part.format(**jobs) for part in command] for command in READS]
    plain = {
        " ".join(command): json.loads(run(*command, "-o", "json").out)
        for command in reads
        if command[0] not in IN_WORDS
    }
    restyle(conn, dsn, timezone)
    for command in reads:
        for shape in ([], ["-o", "json"]):
            result = run(*command, *shape)
            assert result.code == 0, (command, shape, result.err)
            assert "error" not in result.err and "timezone" not in result.err, result.err
            if shape and command[0] not in IN_WORDS:
                found = instants(json.loads(result.out))
                assert found == instants(plain[" ".join(command)]), command
    shown = json.loads(run("show", str(jobs["manual"]), "-o", "json").out)
    assert shown["weight"] == 0.123456789012345  # all its digits (extra_float_digits)
    assert shown["retry_in"] == plain[f"show {jobs['manual']}"]["retry_in"]
    (stuck,) = json.loads(run("stuck", "-o", "json").out)
    overdue = conn.execute(
        "SELECT extract(epoch FROM now() - lease_expires_at)::float8 AS s FROM jobs WHERE id = %s",
        (jobs["old"],),
    ).fetchone()["s"]
    assert overdue - 10 < stuck["lease_overdue_s"] <= overdue  # not rounded to 1000


def test_the_styles_stay_in_jobctls_transactions(conn, dsn, pooled_dsn, run):
    """Set transaction-locally, like the timeouts: the server connections of the pool keep
    the database's own styles after jobctl's reads and writes through it."""
    jobs = styled_data(conn, dsn, run)
    restyle(conn, dsn, "Asia/Kathmandu")
    for command in (
        ["show", str(jobs["manual"]), "-o", "json"],
        ["history", str(jobs["manual"]), "-o", "json"],
        ["review", "-o", "json"],
        ["reclaim", "--commit", "--yes", "-o", "json"],
        ["requeue", str(jobs["manual"]), "--yes", "-o", "json"],
    ):
        result = run(*command, dsn=pooled_dsn)
        assert result.code == 0, (command, result.err)
        with every_server_connection(pooled_dsn) as clients:
            for client in clients:
                row = client.execute(
                    "SELECT current_setting('DateStyle') AS d, current_setting('IntervalStyle') "
                    "AS i, current_setting('extra_float_digits') AS f, "
                    "current_setting('TimeZone') AS tz"
                ).fetchone()
                assert row == {
                    "d": "German, DMY",
                    "i": "sql_standard",
                    "f": "-15",
                    "tz": "Asia/Kathmandu",
                }, command


def test_the_styles_are_the_transactions_own_on_a_direct_connection(conn, dsn):
    """The same on one direct connection (a pooler hides a leaked DateStyle: it sets its
    clients' own again): ISO inside each kind of transaction jobctl opens, the database's
    own after it, on the same connection."""
    from jobctl import db

    restyle(conn, dsn, "Asia/Kathmandu")
    settings = db.Settings(dsn=dsn)
    show = "SELECT current_setting('DateStyle') AS d, current_setting('IntervalStyle') AS i"
    with db.connect(settings) as c:
        for opened in (
            lambda: db.transaction(c, settings, read_only=True),
            lambda: db.transaction(c, settings, action="requeued"),
            lambda: db.safe(c),
        ):
            with opened():
                assert c.execute(show).fetchone() == {"d": "ISO, MDY", "i": "postgres"}
            assert c.execute(show).fetchone() == {"d": "German, DMY", "i": "sql_standard"}
        (row,) = db.pipelined(c, settings, show.encode(), {}, action="requeued")
        assert row == {"d": "ISO, MDY", "i": "postgres"}
        assert c.execute(show).fetchone() == {"d": "German, DMY", "i": "sql_standard"}


def test_reads_across_targets_and_metrics_under_the_databases_styles(
    conn, dsn, run, tmp_path, monkeypatch
):
    """The reads across targets (each target's connection of its own, at once), the targets'
    check (the standby probe, db.safe's catalog read) and metrics, under German styles."""
    jobs = styled_data(conn, dsn, run)
    config = tmp_path / "config.toml"
    config.write_text(
        f"[targets.a]\ndsn = {json.dumps(dsn)}\n[targets.b]\ndsn = {json.dumps(dsn)}\n"
    )
    config.chmod(0o600)
    monkeypatch.setenv("JOBCTL_CONFIG", str(config))
    plain = json.loads(run("--all-targets", "stuck", "-o", "json").out)
    restyle(conn, dsn, "XYZ-3:30")
    for command in (
        ["--all-targets", "stuck", "-o", "json"],
        ["--all-targets", "summary", "-o", "json"],
        ["--all-targets", "review", "-o", "json"],
        ["--all-targets", "metrics"],
        ["--all-targets", "stuck", "--watch", "--every", "0.1s", "--count", "2", "-o", "jsonl"],
        ["targets", "--check", "-o", "json"],
        ["metrics"],
        ["stuck", "--watch", "--every", "0.1s", "--count", "2"],
    ):
        result = run(*command)
        assert result.code == 0, (command, result.err)
        assert "error" not in result.err and "timezone" not in result.err, result.err
    assert instants(json.loads(run("--all-targets", "stuck", "-o", "json").out)) == instants(plain)
    checked = json.loads(run("targets", "--check", "-o", "json").out)
    assert [t["reachable"] for t in checked] == [True, True], checked
    assert str(jobs["old"]) in run("stuck").out

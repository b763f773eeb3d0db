"""The read path against a real database: stuck, summary, show, history, read-only."""

from __future__ import annotations

import json

import psycopg
import pytest
from helpers import READ_COMMANDS, add_jobs, claim_all, snapshot

from jobctl import db, lease

STUCK_KEYS = {
    "id",
    "status",
    "reserved_by",
    "attempt_token",
    "attempts",
    "max_attempts",
    "reclaim_count",
    "recovery_policy",
    "reserved_at",
    "heartbeat_at",
    "lease_expires_at",
    "lease_overdue_s",
    "heartbeat_age_s",
    "action",
}


def test_stuck_lists_expired_leases_only_oldest_first(conn, dsn, run):
    add_jobs(conn, 3)
    add_jobs(conn, 2, policy="manual")
    expired = claim_all(dsn, 2, worker="dead", lease_seconds=-120)
    claim_all(dsn, 1, worker="slow", lease_seconds=600)  # live: slow, not stuck
    manual = claim_all(dsn, 2, worker="dead-manual", lease_seconds=-30)

    result = run("stuck", "-o", "json")
    assert result.code == 0, result.err
    rows = json.loads(result.out)
    assert [r["id"] for r in rows] == [c.id for c in expired + manual]
    assert STUCK_KEYS <= set(rows[0])
    assert rows[0]["attempt_token"] == str(expired[0].attempt_token)
    assert [r["action"] for r in rows] == ["requeue", "requeue", "fail", "fail"]
    assert all(r["lease_overdue_s"] > 0 for r in rows)
    assert rows[0]["lease_expires_at"][-6] in "+-"  # ISO 8601 with an offset


def test_stuck_action_follows_policy_and_attempts(conn, dsn, run):
    add_jobs(conn, 1, max_attempts=1)
    add_jobs(conn, 1, policy="manual")
    add_jobs(conn, 1, max_attempts=5)
    claim_all(dsn, 3)
    rows = {r["id"]: r for r in json.loads(run("stuck", "-o", "json").out)}
    actions = [rows[i]["action"] for i in sorted(rows)]
    assert actions == ["fail", "fail", "requeue"]  # out of attempts, manual, auto with attempts


def test_stuck_filters_grace_and_exit_code(conn, dsn, run):
    add_jobs(conn, 4)
    claim_all(dsn, 2, worker="a", lease_seconds=-300)
    claim_all(dsn, 2, worker="b", lease_seconds=-5)
    assert {
        r["reserved_by"] for r in json.loads(run("stuck", "--worker", "a", "-o", "json").out)
    } == {"a"}
    assert len(json.loads(run("stuck", "--grace", "1m", "-o", "json").out)) == 2
    assert len(json.loads(run("stuck", "--limit", "3", "-o", "json").out)) == 3
    assert json.loads(run("stuck", "--policy", "manual", "-o", "json").out) == []
    assert run("stuck", "--exit-code").code == 4
    assert run("stuck", "--exit-code", "--grace", "1h").code == 0


def test_stuck_formats(conn, dsn, run):
    add_jobs(conn, 2)
    claim_all(dsn, 2, worker='w,"x"\tq')
    plain = run("stuck")
    assert plain.code == 0 and "\x1b[" not in plain.out and "requeue" in plain.out
    keys = list(json.loads(run("stuck", "-o", "json").out)[0])
    csv_out = run("stuck", "-o", "csv").out.splitlines()
    assert csv_out[0] == ",".join(keys) and '"w,""x""' in csv_out[1]  # every JSON key, in order
    tsv_out = run("stuck", "-o", "tsv").out.splitlines()
    assert tsv_out[0] == "\t".join(keys)
    assert '\tw,"x"\\tq\t' in tsv_out[1]  # a tab inside a value is \t (COPY's text format)
    assert {len(line.split("\t")) for line in tsv_out} == {len(keys)}
    refused = run("stuck", "-o", "json", "--format", "github")
    assert refused.code == 2 and "--format github is for -o table" in refused.err
    jsonl = run("stuck", "-o", "jsonl").out.splitlines()
    assert len(jsonl) == 2 and json.loads(jsonl[0])["reserved_by"] == 'w,"x"\tq'
    github = run("stuck", "--format", "github").out
    assert github.splitlines()[1].startswith("|--")


def test_summary_counts_and_bursts(conn, dsn, run):
    add_jobs(conn, 10)
    claim_all(dsn, 3, worker="killed-in-deploy", lease_seconds=-60)
    claim_all(dsn, 2, worker="alive", lease_seconds=600)
    claim_all(dsn, 1, worker="dying", lease_seconds=10)
    result = json.loads(run("summary", "--expiring-within", "30s", "-o", "json").out)
    assert result["status"] == {"queued": 4, "processing": 6, "done": 0, "failed": 0}
    assert result["processing"] == {"live": 2, "expiring_soon": 1, "expired": 3, "no_lease": 0}
    workers = {w["worker"]: w for w in result["workers"]}
    assert result["workers"][0]["worker"] == "killed-in-deploy"
    assert (workers["killed-in-deploy"]["expired"], workers["alive"]["expired"]) == (3, 0)
    assert workers["dying"]["expiring_soon"] == 1 and workers["alive"]["processing"] == 2
    assert result["estimated"] == []


def test_summary_estimates_finished_jobs_on_large_tables(conn, dsn, run, monkeypatch):
    from jobctl.ops import triage

    add_jobs(conn, 30)
    claim_all(dsn, 5)
    conn.execute("UPDATE jobs SET status = 'done' WHERE id > 20")
    conn.execute("ANALYZE jobs")
    monkeypatch.setattr(triage, "EXACT_COUNT_LIMIT", 10)  # as if the table were large
    estimated = json.loads(run("summary", "-o", "json").out)
    assert estimated["estimated"] == ["done", "failed"]
    assert estimated["status"]["processing"] == 5 and estimated["status"]["queued"] == 15
    assert estimated["status"]["done"] == 10  # the statistics of a freshly analyzed table
    exact = json.loads(run("summary", "--exact", "-o", "json").out)
    assert exact["estimated"] == [] and exact["status"]["done"] == 10
    assert "estimate" in run("summary").out


def test_at_risk_shows_expiring_leases_and_worker_lag(conn, dsn, run):
    add_jobs(conn, 6)
    claim_all(dsn, 2, worker="dead", lease_seconds=-30)
    claim_all(dsn, 2, worker="dying", lease_seconds=20)
    claim_all(dsn, 2, worker="healthy", lease_seconds=600)
    conn.execute(
        "UPDATE jobs SET reserved_at = now() - interval '40 seconds' WHERE reserved_by = 'dying'"
    )
    rows = json.loads(run("stuck", "--expiring-within", "1m", "-o", "json").out)
    assert [(r["reserved_by"], r["lease_state"]) for r in rows] == [
        ("dead", "expired"),
        ("dead", "expired"),
        ("dying", "expiring"),
        ("dying", "expiring"),
    ]
    assert rows[2]["worker_heartbeat_lag_s"] >= 40 and rows[2]["lease_overdue_s"] < 0
    assert len(json.loads(run("stuck", "-o", "json").out)) == 2  # the default: expired only
    assert run("stuck", "--expiring-within", "1m", "--grace", "1s").code == 2


@pytest.mark.parametrize("command", ["stuck", "summary"])
def test_watch_prints_one_timestamped_line_per_refresh(conn, dsn, run, command):
    add_jobs(conn, 2)
    claim_all(dsn, 2)
    result = run(command, "--watch", "--every", "0.1s", "--count", "3")
    assert result.code == 0, result.err
    lines = [json.loads(line) for line in result.out.splitlines()]
    assert len(lines) == 3 and lines[0]["at"] < lines[1]["at"] < lines[2]["at"]
    data = lines[-1]["data"]
    assert (len(data) == 2) if command == "stuck" else (data["processing"]["expired"] == 2)


def test_show_lease_states_and_events(conn, dsn, run):
    add_jobs(conn, 3)
    (expired,) = claim_all(dsn, 1, lease_seconds=-1)
    (live,) = claim_all(dsn, 1, lease_seconds=300)
    shown = json.loads(run("show", str(expired.id), "-o", "json").out)
    assert shown["lease_state"] == "expired" and shown["status"] == "processing"
    assert shown["events"][-1]["event"] == "claimed"
    assert json.loads(run("show", str(live.id), "-o", "json").out)["lease_state"] == "live"
    assert json.loads(run("show", "3", "-o", "json").out)["lease_state"] == "none"
    table = run("show", str(expired.id))
    assert "lease_state" in table.out and "latest events" in table.out


@pytest.mark.parametrize("mode", ["exact", "late", "transitions", "audit"])
def test_history_attempts_heartbeats_and_reclaims(conn, dsn, run, mode):
    """Every mode keeps the attempt's token, worker and the reclaim with its actor; 'exact'
    counts every heartbeat, 'late' only those after half the lease (none here), 'transitions'
    none, 'audit' keeps only jobctl's own writes."""
    assert run("schema", "apply", "--history", mode, "--yes").code == 0
    add_jobs(conn, 1)
    with psycopg.connect(dsn, autocommit=True) as c:
        worker = lease.Worker(c, "hb", lease_seconds=60)
        job = worker.claim()
        assert job is not None
        for _ in range(3):
            job = worker.heartbeat(job)
    live = json.loads(run("history", "1", "-o", "json").out)
    (running,) = live["attempts"]  # the live attempt, read from the jobs row
    assert running["ended_at"] is None and running["attempt_token"] == str(job.attempt_token)
    assert running["worker"] == "hb" and running["lease_s"] == 60.0
    conn.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 minute'")
    assert run("reclaim", "--commit", "--yes").code == 0
    history = json.loads(run("history", "1", "-o", "json").out)
    if mode == "audit":
        assert history["attempts"] == []
        assert [e["event"] for e in history["events"]] == ["reclaimed"]
    else:
        (attempt,) = history["attempts"]
        assert attempt["outcome"] == "reclaimed" and attempt["heartbeat_stats"] == mode
        assert attempt["heartbeats"] == (3 if mode == "exact" else None)
        assert attempt["late_heartbeats"] == (0 if mode == "late" else None)
        assert attempt["last_heartbeat_at"] is not None
        assert attempt["attempt_token"] == str(job.attempt_token)
        if mode == "exact":  # the lease as of the last heartbeat (late: as the row ended it)
            assert attempt["max_heartbeat_gap_s"] >= 0 and attempt["lease_s"] == 60.0
        assert [e["event"] for e in history["events"]] == ["claimed", "reclaimed"]
    reclaimed = history["events"][-1]
    assert reclaimed["actor"] == "tester@ci" and reclaimed["worker"] == "hb"
    assert reclaimed["attempt_token"] == str(job.attempt_token)
    assert set(history["events"][0]) >= {
        "at",
        "event",
        "from_status",
        "to_status",
        "attempt",
        "attempt_token",
        "worker",
        "actor",
        "reason",
    }


def test_read_commands_run_read_only(conn, dsn):
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as c:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            with db.transaction(c, settings, read_only=True):
                c.execute("INSERT INTO public.jobs DEFAULT VALUES")
        with db.transaction(c, settings, read_only=True):
            row = c.execute(
                "SELECT current_setting('transaction_read_only') AS ro, "
                "current_setting('statement_timeout') AS st, "
                "current_setting('application_name') AS app"
            ).fetchone()
        assert row == {"ro": "on", "st": "30s", "app": "jobctl"}


def test_read_commands_change_nothing(conn, dsn, run):
    add_jobs(conn, 5)
    claim_all(dsn, 3)
    before = snapshot(conn)
    for args in READ_COMMANDS:
        assert run(*args).code in (0, 4), args
    assert snapshot(conn) == before


def test_the_dsn_option_wins_over_jobctl_dsn(conn, dsn, empty_dsn, run):
    """--dsn, not JOBCTL_DSN, names the database (the tests on a table users bring export
    their own database as JOBCTL_DSN: this is where the two differ)."""
    add_jobs(conn, 2)
    claim_all(dsn, 2)
    code, out, err = run("stuck", "-o", "json")  # JOBCTL_DSN: this test's jobs table
    assert code == 0 and len(json.loads(out)) == 2, err
    code, out, err = run("stuck", "-o", "json", dsn=empty_dsn)  # no jobs table there
    assert code == 1 and out == "" and "does not exist" in err, err


def test_application_name_from_dsn_wins(dsn):
    with db.connect(db.Settings(dsn=f"{dsn} application_name=mine")) as c:
        assert c.execute("SHOW application_name").fetchone()["application_name"] == "mine"


def test_typer_cli_runner(conn, dsn, env):
    """The app also runs under typer's CliRunner (exceptions then reach the runner)."""
    from typer.testing import CliRunner

    from jobctl.cli import main as cli

    add_jobs(conn, 2)
    claim_all(dsn, 1)
    result = CliRunner().invoke(cli.app, ["stuck", "-o", "json"])
    assert result.exit_code == 0 and json.loads(result.stdout)[0]["id"] == 1
    result = CliRunner().invoke(cli.app, ["stuck", "--exit-code"])
    assert result.exit_code == 4

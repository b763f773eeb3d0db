"""jobctl review and the decisions made on it: exactly the jobs that wait for a human, bulk
requeue/fail from a saved plan fenced on what was reviewed, ids from stdin."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import psycopg
import pytest
from helpers import add_jobs, claim_all

from jobctl import lease


def staged(conn, dsn, run) -> dict[str, int]:
    """A reclaim after a deploy: manual jobs and an exhausted auto job failed by reclaim, an
    auto job requeued, one a worker failed itself, one still queued."""
    manual = add_jobs(conn, 2, policy="manual")
    (exhausted,) = add_jobs(conn, 1, policy="auto", max_attempts=1)
    (retried,) = add_jobs(conn, 1, policy="auto", max_attempts=3)
    (worker_failed,) = add_jobs(conn, 1, policy="manual", max_attempts=1)
    claims = claim_all(dsn, 5, worker="deploy-7", lease_seconds=-60)
    assert len(claims) == 5
    with psycopg.connect(dsn, autocommit=True) as c:
        w = lease.Worker(c, "deploy-7")
        (mine,) = [k for k in claims if k.id == worker_failed]
        assert w.fail(mine, "boom") == "failed"
    assert run("reclaim", "--commit", "--yes").code == 0
    (queued,) = add_jobs(conn, 1)
    return {
        "manual_a": manual[0],
        "manual_b": manual[1],
        "exhausted": exhausted,
        "retried": retried,
        "worker_failed": worker_failed,
        "queued": queued,
    }


def review_json(run, *args: str) -> list[dict]:
    result = run("review", "-o", "json", *args)
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_review_lists_exactly_the_jobs_awaiting_a_human(conn, dsn, run):
    jobs = staged(conn, dsn, run)
    found = review_json(run)
    assert [r["id"] for r in found] == sorted(
        [jobs["manual_a"], jobs["manual_b"], jobs["exhausted"]],
        key=lambda i: next(r["reclaimed_at"] for r in found if r["id"] == i),
    )
    by_id = {r["id"]: r for r in found}
    assert by_id[jobs["manual_a"]]["why"] == "manual_policy"
    assert by_id[jobs["exhausted"]]["why"] == "attempts_exhausted"
    for r in found:
        assert r["last_worker"] == "deploy-7"
        assert r["status"] == "failed" and r["reclaim_count"] == 1 and r["attempts"] == 1
        assert r["last_error"] == "lease expired before completion"
        assert r["reclaimed_at"] is not None and r["waited_s"] >= 0
    # filters
    assert {r["id"] for r in review_json(run, "--policy", "auto")} == {jobs["exhausted"]}
    assert review_json(run, "--worker", "someone-else") == []
    assert len(review_json(run, "--worker", "deploy-7", "--since", "1h")) == 3
    assert review_json(run, "--older-than", "1h") == []
    assert len(review_json(run, "--limit", "1")) == 1
    # --exit-code, the table's columns, every format
    assert run("review", "--exit-code").code == 4
    table = run("review", "-o", "csv")
    parsed = list(csv.reader(io.StringIO(table.out)))
    assert parsed[0] == list(found[0]) and len(parsed) == 4  # every key JSON has, in order
    lines = run("review", "-o", "jsonl").out.splitlines()
    assert [json.loads(line)["id"] for line in lines] == [r["id"] for r in found]
    assert run("review", "-o", "tsv").out.count("\n") == 4
    assert "manual_policy" in run("review").out
    # summary counts them, metrics too
    summary = json.loads(run("summary", "-o", "json").out)
    assert summary["awaiting_review"] == 3


def test_acting_on_a_job_ends_its_wait(conn, dsn, run):
    jobs = staged(conn, dsn, run)
    assert run("requeue", str(jobs["manual_a"]), "--yes").code == 0
    # the application moves one itself
    conn.execute("UPDATE jobs SET status = 'queued' WHERE id = %s", (jobs["exhausted"],))
    remaining = review_json(run)
    assert [r["id"] for r in remaining] == [jobs["manual_b"]]
    # failing it for good, with a reason: allowed on a job awaiting review, audited
    result = run("fail", str(jobs["manual_b"]), "--reason", "refunded", "--yes", "-o", "json")
    assert result.code == 0, result.err
    assert json.loads(result.out)[0]["outcome"] == "failed"
    assert review_json(run) == []
    assert run("review", "--exit-code").code == 0
    event = conn.execute(
        "SELECT event, from_status, to_status, reason, actor FROM jobctl.events "
        "WHERE job_id = %s ORDER BY event_id DESC LIMIT 1",
        (str(jobs["manual_b"]),),
    ).fetchone()
    assert event == {
        "event": "manually_failed",
        "from_status": "failed",
        "to_status": "failed",
        "reason": "refunded",
        "actor": "tester@ci",
    }
    # a failed job that does not await review is still refused
    again = run("fail", str(jobs["worker_failed"]), "--reason", "x", "--yes", "-o", "json")
    assert again.code == 2 and json.loads(again.out)[0]["outcome"] == "refused"


def test_park_status_on_a_mapped_table(conn, dsn, run):
    conn.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_status_check")
    assert run("schema", "apply", "--park-status", "manual_review", "--yes").code == 0
    (manual,) = add_jobs(conn, 1, policy="manual")
    (auto,) = add_jobs(conn, 1, policy="auto")
    claim_all(dsn, 2, lease_seconds=-60)
    committed = run("reclaim", "--commit", "--yes")
    assert committed.code == 0
    # the next step named
    assert "reclaimed: 1 requeued, 1 parked in manual_review, 0 skipped" in committed.err
    assert (
        "next: 1 job(s) parked in manual_review by this reclaim await a human: "
        "jobctl review lists them" in committed.err
    )
    (row,) = review_json(run)
    assert row["id"] == manual and row["status"] == "manual_review"
    assert row["why"] == "manual_policy"
    # failing it moves it to failed: no longer waiting
    assert run("fail", str(manual), "--reason", "gave up", "--yes").code == 0
    assert review_json(run) == [] and auto != manual


# ---------------------------------------------------------------- plans
def test_bulk_requeue_from_a_plan_writes_only_untouched_rows(conn, dsn, run, tmp_path):
    jobs = staged(conn, dsn, run)
    extra = add_jobs(conn, 2, policy="manual")
    conn.execute("UPDATE jobs SET available_at = now() + interval '1 day' WHERE status = 'queued'")
    conn.execute("UPDATE jobs SET available_at = now() WHERE id = ANY(%s)", (extra,))
    claim_all(dsn, 2, worker="deploy-8", lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    plan = tmp_path / "review.json"
    saved = run("review", "--save-plan", str(plan))
    assert saved.code == 0 and "plan of 5 job(s) saved" in saved.err
    reviewed = json.loads(plan.read_text())
    assert reviewed["format"] == "jobctl-review-plan/1" and len(reviewed["rows"]) == 5

    # after the review: the application changes one, another operator requeues one, and a
    # worker claims the one that operator requeued; one row is rewritten in place
    conn.execute(
        "UPDATE jobs SET last_error = 'retried by the app', status = 'queued' WHERE id = %s",
        (jobs["manual_a"],),
    )
    assert run("requeue", str(extra[0]), "--yes").code == 0
    conn.execute(
        "UPDATE jobs SET available_at = now() - interval '1 day' WHERE id = %s", (extra[0],)
    )
    (claimed,) = claim_all(dsn, 1, worker="w9", lease_seconds=600)
    assert claimed.id == extra[0]
    conn.execute("UPDATE jobs SET payload = '{\"x\": 1}' WHERE id = %s", (extra[1],))
    before = {
        r["id"]: r for r in conn.execute("SELECT id, status, xmin::text AS v FROM jobs").fetchall()
    }

    result = run("requeue", "--plan", str(plan), "--reason", "deploy fixed", "--yes", "-o", "json")
    assert result.code == 3, result.err
    # the totals line on stderr: what was and was not written
    assert result.err.strip().splitlines()[-1] == (
        "2 requeued, 3 conflicts (changed since the review; nothing written for them)"
    )
    outcome = {r["id"]: r for r in json.loads(result.out)}
    assert {i: r["outcome"] for i, r in outcome.items()} == {
        jobs["manual_a"]: "conflict",
        jobs["manual_b"]: "requeued",
        jobs["exhausted"]: "requeued",
        extra[0]: "conflict",
        extra[1]: "conflict",
    }
    assert "now queued" in outcome[jobs["manual_a"]]["detail"]
    assert "now processing" in outcome[extra[0]]["detail"]
    after = {
        r["id"]: r for r in conn.execute("SELECT id, status, xmin::text AS v FROM jobs").fetchall()
    }
    for conflicted in (jobs["manual_a"], extra[0], extra[1]):
        assert after[conflicted] == before[conflicted]  # nothing written for it
    assert after[jobs["manual_b"]]["status"] == "queued"
    reasons = conn.execute(
        "SELECT job_id, reason FROM jobctl.events WHERE event = 'requeued' AND actor = 'tester@ci'"
        " AND reason = 'deploy fixed'"
    ).fetchall()
    assert {r["job_id"] for r in reasons} == {str(jobs["manual_b"]), str(jobs["exhausted"])}
    # applying the plan again: every row is a conflict now, nothing written
    again = run("requeue", "--plan", str(plan), "--yes", "-o", "json")
    assert again.code == 3
    assert {r["outcome"] for r in json.loads(again.out)} == {"conflict"}
    assert "5 conflicts (changed since the review; nothing written for them)" in again.err


def test_bulk_fail_from_a_plan(conn, dsn, run, tmp_path):
    jobs = staged(conn, dsn, run)
    plan = tmp_path / "p.json"
    assert run("review", "--policy", "manual", "--save-plan", str(plan)).code == 0
    assert run("fail", "--plan", str(plan), "--yes").code == 2  # needs --reason
    refused = run("fail", "--plan", str(plan), "--reason", "x")  # no terminal, no --yes
    assert refused.code == 2 and "--yes" in refused.err
    done = run("fail", "--plan", str(plan), "--reason", "charged twice", "--yes", "-o", "json")
    assert done.code == 0, done.err
    assert sorted(r["id"] for r in json.loads(done.out)) == [jobs["manual_a"], jobs["manual_b"]]
    assert [r["id"] for r in review_json(run)] == [jobs["exhausted"]]
    errors = conn.execute(
        "SELECT last_error FROM jobs WHERE id = ANY(%s)", ([jobs["manual_a"], jobs["manual_b"]],)
    ).fetchall()
    assert {r["last_error"] for r in errors} == {"charged twice"}


def test_a_plan_made_elsewhere_is_refused(conn, dsn, run, tmp_path):
    staged(conn, dsn, run)
    plan = tmp_path / "p.json"
    assert run("review", "--save-plan", str(plan)).code == 0
    made = json.loads(plan.read_text())
    made["where"]["database"] = "another_db"
    plan.write_text(json.dumps(made))
    before = conn.execute("SELECT id, xmin::text FROM jobs ORDER BY id").fetchall()
    result = run("requeue", "--plan", str(plan), "--yes")
    assert result.code == 2 and "another_db" in result.err
    assert conn.execute("SELECT id, xmin::text FROM jobs ORDER BY id").fetchall() == before
    # a reclaim plan is not a review plan, and ids do not go with --plan
    made["format"] = "jobctl-reclaim-plan/1"
    plan.write_text(json.dumps(made))
    assert run("requeue", "--plan", str(plan), "--yes").code == 2
    assert run("requeue", "1", "--plan", str(plan), "--yes").code == 2
    assert run("requeue", "--yes").code == 2


@pytest.mark.parametrize("form", ["lines", "jsonl"])
def test_ids_from_stdin(conn, dsn, run, monkeypatch, form):
    jobs = staged(conn, dsn, run)
    if form == "lines":
        text = f"{jobs['manual_a']}\n\n{jobs['exhausted']}\n"
    else:
        text = run("review", "-o", "jsonl").out
    real = sys.stdin
    try:
        monkeypatch.setattr("jobctl.cli.commands.writes.sys.stdin", io.StringIO(text))
        from jobctl.cli import main as cli

        code = cli.main(["requeue", "-", "--yes", "-o", "json"])
    finally:
        monkeypatch.setattr("jobctl.cli.commands.writes.sys.stdin", real)
    assert code == 0
    waiting = {r["id"] for r in review_json(run)}
    if form == "lines":
        assert waiting == {jobs["manual_b"]}
    else:
        assert waiting == set()


def test_two_operators_apply_the_same_plan_at_once(conn, dsn, run, tmp_path):
    """Two processes apply one plan concurrently: each job is written exactly once, by one of
    them; the other reports a conflict for it and writes nothing."""
    ids = add_jobs(conn, 30, policy="manual")
    claim_all(dsn, 30, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    plan = tmp_path / "p.json"
    assert run("review", "--save-plan", str(plan)).code == 0
    env = {**os.environ, "JOBCTL_DSN": dsn, "NO_COLOR": "1"}
    argv = [sys.executable, "-m", "jobctl", "requeue", "--plan", str(plan), "--yes", "-o", "json"]
    procs = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    outcomes: dict[int, list[str]] = {}
    for out, _ in results:
        for row in json.loads(out):
            outcomes.setdefault(row["id"], []).append(row["outcome"])
    assert set(outcomes) == set(ids)
    assert all(
        sorted(o) in (["conflict", "requeued"], ["locked", "requeued"]) for o in outcomes.values()
    ), outcomes
    requeues = conn.execute(
        "SELECT job_id, count(*) AS n FROM jobctl.events WHERE event = 'requeued' GROUP BY 1"
    ).fetchall()
    assert {int(r["job_id"]): r["n"] for r in requeues} == {i: 1 for i in ids}


def test_a_locked_row_is_reported_and_the_others_written(conn, dsn, run, tmp_path):
    ids = add_jobs(conn, 3, policy="manual")
    claim_all(dsn, 3, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    plan = tmp_path / "p.json"
    assert run("review", "--save-plan", str(plan)).code == 0
    with psycopg.connect(dsn) as holder:  # another session holds one row, uncommitted
        holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (ids[1],))
        result = run(
            "--lock-timeout", "200ms", "requeue", "--plan", str(plan), "--yes", "-o", "json"
        )
        holder.rollback()
    assert result.code == 1, result.err
    outcome = {r["id"]: r["outcome"] for r in json.loads(result.out)}
    assert outcome == {ids[0]: "requeued", ids[1]: "locked", ids[2]: "requeued"}
    assert "locked by pid" in result.err
    assert [r["id"] for r in review_json(run)] == [ids[1]]


# ---------------------------------------------------------------- edited plans
def as_in_the_table(conn, job_id: int) -> dict:
    """A plan row naming ``job_id`` exactly as the table has it now (its true version)."""
    row = conn.execute(
        "SELECT id, status, attempt_token::text AS attempt_token, updated_at, "
        "xmin::text AS row_version FROM jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    return {**row, "updated_at": row["updated_at"].isoformat()}


def job_in(conn, dsn, state: str) -> int:
    """One job in ``state``: done, queued, live (a worker holds its lease), or paused (a
    status of the application's own, none of the lease design's)."""
    (job_id,) = add_jobs(conn, 1, policy="manual")
    if state in ("queued", "paused"):
        if state == "paused":
            conn.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_status_check")
            conn.execute("UPDATE jobs SET status = 'paused' WHERE id = %s", (job_id,))
        return job_id
    (claim,) = claim_all(dsn, 1, worker="w7", lease_seconds=600)
    assert claim.id == job_id
    if state == "done":
        with psycopg.connect(dsn, autocommit=True) as c:
            lease.Worker(c, "w7").complete(claim)
    return job_id


EDITED = [
    # action, the planted job's state, what the refusal says (as a direct command's)
    ("requeue", "done", "job is done"),
    ("fail", "done", "job is done"),
    ("requeue", "queued", "job is already queued"),
    ("requeue", "paused", "the application's own"),
    ("fail", "paused", "the application's own"),
    ("requeue", "live", "lease is live"),
    ("fail", "live", "lease is live"),
]


@pytest.mark.parametrize(("action", "state", "says"), EDITED)
def test_an_edited_plans_row_meets_the_rules_of_a_direct_command(
    conn, dsn, run, tmp_path, action, state, says
):
    """A plan edited to name a done job with its true version requeued it (done -> queued,
    exit 0) where a direct requeue is refused even with --force. Each planned row is now
    decided by the direct command's rules: refused, nothing written for it, the rest go on."""
    (reviewed,) = add_jobs(conn, 1, policy="manual")
    claim_all(dsn, 1, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    planted = job_in(conn, dsn, state)
    plan = tmp_path / "p.json"
    assert run("review", "--save-plan", str(plan)).code == 0
    made = json.loads(plan.read_text())
    made["rows"].append({**made["rows"][0], **as_in_the_table(conn, planted)})
    plan.write_text(json.dumps(made))
    before = as_in_the_table(conn, planted)
    result = run(action, "--plan", str(plan), "--reason", "edited", "--yes", "-o", "json")
    assert result.code == 2, result.err  # refused: the worst outcome
    outcome = {r["id"]: r for r in json.loads(result.out)}
    assert outcome[planted]["outcome"] == "refused" and says in outcome[planted]["detail"]
    assert outcome[reviewed]["outcome"] == ("requeued" if action == "requeue" else "failed")
    assert as_in_the_table(conn, planted) == before  # nothing written for it
    direct = run(action, str(planted), "--reason", "edited", "--yes", "-o", "json")
    assert direct.code == 2 and says in json.loads(direct.out)[0]["detail"]  # the same rule
    if state == "live":  # --force overrides a live lease, for a plan as for an id
        forced = run(action, "--plan", str(plan), "--reason", "x", "--force", "--yes", "-o", "json")
        assert {r["id"]: r["outcome"] for r in json.loads(forced.out)}[planted] in (
            "requeued",
            "failed",
        ), forced.out


def test_a_plan_row_whose_job_changed_is_a_conflict_whatever_the_plan_says(
    conn, dsn, run, tmp_path
):
    """The plan names the row; the job is judged as it is: a row version that is not the
    job's is a conflict even where the plan's other fields were edited to match."""
    ids = add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 2, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    plan = tmp_path / "p.json"
    assert run("review", "--save-plan", str(plan)).code == 0
    made = json.loads(plan.read_text())
    made["rows"][0]["row_version"] = str(int(made["rows"][0]["row_version"]) + 1000)
    made["rows"][1]["status"] = "queued"  # its true version, another status
    plan.write_text(json.dumps(made))
    result = run("requeue", "--plan", str(plan), "--yes", "-o", "json")
    assert result.code == 3, result.err
    outcome = {r["id"]: r for r in json.loads(result.out)}
    assert {i: r["outcome"] for i, r in outcome.items()} == {ids[0]: "conflict", ids[1]: "conflict"}
    assert "now failed" in outcome[ids[1]]["detail"]
    assert [r["id"] for r in review_json(run)] == ids  # nothing written

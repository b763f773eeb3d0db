"""Jobs claimed without a lease: code that claims with no lease and no token leaves
processing rows reclaim can never see. stuck lists them (lease_state none), --exit-code counts
them, explain says what they are and what to do, summary/metrics/report name them, reclaim
never touches them, and requeue/fail work on them fenced on the row's version, but refuse one
claimed within the hour (or at no known time) without --force, as they refuse a live lease."""

from __future__ import annotations

import json
import re

import psycopg
import pytest
from helpers import add_jobs, claim_all
from psycopg import rows
from shapes import BACKGROUND_TASKS


def unleased(
    conn, ids, *, table="jobs", status="processing", columns=None, ago="20 minutes"
) -> None:
    """Claim ``ids`` as old code does: processing, a worker and a claim time, no lease, no
    token (the claim ``ago``: 20 minutes, within the hour its worker may still run it)."""
    c = columns or {"status": "status", "reserved_by": "reserved_by", "reserved_at": "reserved_at"}
    conn.execute(
        psycopg.sql.SQL(
            "UPDATE {t} SET {s} = %s, {w} = 'legacy-1', {r} = now() - %s::interval "
            "WHERE id = ANY(%s)"
        ).format(
            t=psycopg.sql.Identifier(table),
            s=psycopg.sql.Identifier(c["status"]),
            w=psycopg.sql.Identifier(c["reserved_by"]),
            r=psycopg.sql.Identifier(c["reserved_at"]),
        ),
        (status, ago, list(ids)),
    )


def row_of(conn, job_id, table="jobs"):
    return conn.execute(
        psycopg.sql.SQL("SELECT j.*, j.xmin::text AS v FROM {} j WHERE id = %s").format(
            psycopg.sql.Identifier(table)
        ),
        (job_id,),
    ).fetchone()


def test_stuck_lists_jobs_with_no_lease(conn, dsn, run):
    ids = add_jobs(conn, 4)
    unleased(conn, ids[:2])
    (expired,) = claim_all(dsn, 1)  # one expired lease, claimed by the worker API
    found = json.loads(run("stuck", "-o", "json").out)
    by_id = {r["id"]: r for r in found}
    assert found[0]["id"] == expired.id and by_id[expired.id]["lease_state"] == "expired"
    for job_id in ids[:2]:
        row = by_id[job_id]
        assert row["lease_state"] == "none" and row["action"] == "none"
        assert row["lease_expires_at"] is None and row["attempt_token"] is None
        assert 1190 < row["claimed_age_s"] < 1300
        assert "reclaim never touches it" in row["skipped"]
    table = run("stuck")
    # without a terminal: every column (a terminal's STATE column says "no lease")
    assert table.code == 0 and "claimed_age_s" in table.out and "no lease:" in table.out
    assert "2 processing job(s) have no lease" in table.err
    at_risk = json.loads(run("stuck", "--expiring-within", "1m", "-o", "json").out)
    assert sorted(r["lease_state"] for r in at_risk) == ["expired", "none", "none"]
    # narrowed by the operator's filters like the rest
    assert json.loads(run("stuck", "--worker", "legacy-1", "-o", "json").out)[0]["id"] in ids
    assert json.loads(run("stuck", "--worker", "nobody", "-o", "json").out) == []


def test_only_unleased_jobs_are_never_nothing_stuck(conn, run):
    ids = add_jobs(conn, 2)
    unleased(conn, ids[:1])
    result = run("stuck", "--exit-code")
    assert result.code == 4, result
    assert "nothing stuck" not in result.err and "no lease" in result.out
    # a token but no lease expiry is the same: reclaim's fence needs both
    conn.execute("UPDATE jobs SET attempt_token = gen_random_uuid() WHERE id = %s", (ids[0],))
    assert json.loads(run("stuck", "-o", "json").out)[0]["lease_state"] == "none"
    conn.execute("UPDATE jobs SET status = 'queued', attempt_token = NULL")
    assert run("stuck", "--exit-code").code == 0


def test_reclaim_never_touches_them(conn, dsn, run):
    ids = add_jobs(conn, 3, policy="auto")
    unleased(conn, ids[:2])
    # a lease that expired but no token: reclaim's fence cannot hold it either
    conn.execute(
        "UPDATE jobs SET status = 'processing', lease_expires_at = now() - interval '1 minute' "
        "WHERE id = %s",
        (ids[2],),
    )
    before = [row_of(conn, i) for i in ids]
    dry = json.loads(run("reclaim", "--dry-run", "-o", "json").out)
    assert dry == [] or all(r["id"] not in ids for r in dry)
    assert run("reclaim", "--commit", "--yes").code == 0
    assert [row_of(conn, i) for i in ids] == before
    found = json.loads(run("stuck", "-o", "json").out)
    assert sorted(r["id"] for r in found) == sorted(ids)  # each listed once, as no lease
    assert {r["lease_state"] for r in found} == {"none"}


def test_explain_says_what_they_are_and_what_to_do(conn, run):
    (job_id,) = add_jobs(conn, 1)
    unleased(conn, [job_id])
    story = run("explain", str(job_id)).out
    assert "processing with no lease expiry" in story
    assert "reclaim never touches it" in story and "cannot tell a slow worker" in story
    assert "jobctl doctor" in story
    # claimed 20 minutes ago: its worker may still run it, so the commands carry --force
    assert "claimed within the last hour: its worker may still be running it" in story
    assert f"jobctl requeue {job_id} --force --reason" in story
    assert f"jobctl fail {job_id} --force --reason" in story
    assert "fenced on the row's version" in story
    assert json.loads(run("show", str(job_id), "-o", "json").out)["lease_less_recent"] is True
    unleased(conn, [job_id], ago="2 hours")
    story = run("explain", str(job_id)).out
    assert "claimed over an hour ago" in story
    assert (
        f"jobctl requeue {job_id} --reason" in story and f"jobctl fail {job_id} --reason" in story
    )
    assert json.loads(run("show", str(job_id), "-o", "json").out)["lease_less_recent"] is False


def test_summary_metrics_report_name_them(conn, dsn, run):
    ids = add_jobs(conn, 3)
    unleased(conn, ids[:2])
    claim_all(dsn, 1)
    summary = json.loads(run("summary", "-o", "json").out)
    assert summary["processing"]["no_lease"] == 2 and summary["processing"]["expired"] == 1
    assert "2 processing job(s) have no lease" in run("summary").err
    metrics = run("metrics").out
    assert 'jobctl_processing_jobs{table="public.jobs",lease="none"} 2' in metrics
    assert 'jobctl_processing_jobs{table="public.jobs",lease="expired"} 1' in metrics
    oldest = [x for x in metrics.splitlines() if x.startswith("jobctl_oldest_no_lease_claim")]
    assert oldest and 1190 < float(oldest[0].split()[-1]) < 1300
    report = run("report", "--since", "1h")
    assert report.code == 0 and "2 processing job(s) with no lease" in report.out
    assert json.loads(run("report", "--since", "1h", "-o", "json").out)["no_lease"] == 2
    checked = json.loads(run("schema", "check", "-o", "json").out)
    assert any("2 rows reclaim can never see" in str(c["detail"]) for c in checked)


@pytest.mark.parametrize("action, status", [("requeue", "queued"), ("fail", "failed")])
def test_requeue_and_fail_fenced_on_the_version(conn, run, action, status):
    ids = add_jobs(conn, 1)
    unleased(conn, ids, ago="2 hours")  # claimed over the hour ago: taken without --force
    result = run(action, str(ids[0]), "--reason", "legacy claim, worker gone", "--yes")
    assert result.code == 0, result
    assert row_of(conn, ids[0])["status"] == status


def test_on_a_rails_style_table(empty_dsn, run):
    s = BACKGROUND_TASKS
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        conn.execute(s.ddl)
        ids = [conn.execute(s.new_job).fetchone()["id"] for _ in range(9)]
        applied = run(
            "--table", s.table, "schema", "apply", "--yes", *s.mapping_args(), dsn=empty_dsn
        )
        assert applied.code == 0, applied.err
        columns = {"status": "state", "reserved_by": "locked_by", "reserved_at": "locked_at"}
        unleased(conn, ids[:8], table=s.table, status="running", columns=columns, ago="2 hours")

        def jobctl(*args):
            return run("--table", s.table, *args, dsn=empty_dsn)

        found = json.loads(jobctl("stuck", "-o", "json").out)
        assert len(found) == 8 and {r["lease_state"] for r in found} == {"none"}
        assert jobctl("stuck", "--exit-code").code == 4
        assert "code that sets no lease" in jobctl("explain", str(ids[0])).out
        done = jobctl("requeue", str(ids[0]), "--reason", "legacy", "--yes")
        assert done.code == 0, done
        assert row_of(conn, ids[0], s.table)["state"] == "pending"


def test_a_change_between_read_and_write_is_a_conflict(conn, dsn):
    """No token to fence on: the row's version as read is the fence. A legacy worker that
    touches the row meanwhile (status and token as they were: both fences but the version
    would let it through) wins; the operator's requeue writes nothing."""
    import datetime as dt

    from jobctl import db
    from jobctl.db import session
    from jobctl.ops import manual

    ids = add_jobs(conn, 1)
    unleased(conn, ids, ago="2 hours")
    s = session.connect(db.Settings(dsn=dsn, actor="tester@ci"))
    with s.conn:
        decision = manual.decide(s, ids[0], "requeue", force=False, expect_token=None)
        assert decision.outcome is None  # no live lease: not refused
        conn.execute("UPDATE jobs SET reserved_by = 'legacy-2' WHERE id = %s", (ids[0],))
        before = row_of(conn, ids[0])
        result = manual.apply(s, decision, "requeue", reason="x", delay=dt.timedelta(0))
    assert result.outcome == "conflict"
    assert row_of(conn, ids[0]) == before


def test_a_reviewed_plan_of_the_jobs_with_no_lease_requeues_them_fenced(conn, dsn, run, tmp_path):
    """``requeue --no-lease --save-plan`` lists the claims with no lease (never a live lease
    or another status), saves them as a plan, and ``requeue --plan`` requeues exactly those,
    fenced on the row's version: the one that changed after the review is a conflict."""
    ids = add_jobs(conn, 5)
    unleased(conn, ids[:3], ago="2 hours")
    claim_all(dsn, 1, lease_seconds=300)  # a live lease: not a claim without one
    plan = tmp_path / "no-lease.json"
    listed = run("requeue", "--no-lease", "--save-plan", str(plan), "-o", "json")
    assert listed.code == 0, listed.err
    assert sorted(r["id"] for r in json.loads(listed.out)) == sorted(ids[:3])
    conn.execute("UPDATE jobs SET reserved_by = 'legacy-2' WHERE id = %s", (ids[0],))
    applied = run("requeue", "--plan", str(plan), "--reason", "legacy claims", "--yes")
    assert applied.code == 3, applied.err  # one conflict
    assert "2 requeued, 1 conflict" in applied.err
    assert row_of(conn, ids[0])["status"] == "processing"  # changed since: nothing written
    assert [row_of(conn, i)["status"] for i in ids[1:3]] == ["queued", "queued"]
    assert run("requeue", "--no-lease", "--status", "failed").code == 2  # not processing ones


@pytest.mark.parametrize("action, status", [("requeue", "queued"), ("fail", "failed")])
def test_a_claim_with_no_lease_a_second_old_is_refused_as_a_live_lease(conn, run, action, status):
    """An old worker claimed it a second ago (no lease): its worker may be running it, so it
    is refused as a live lease is (exit 2, nothing written) unless --force; a claim at no
    time jobctl can read is refused the same; one claimed 2 hours ago is taken."""
    ids = add_jobs(conn, 3)
    unleased(conn, ids[:1], ago="1 second")
    conn.execute(
        "UPDATE jobs SET status = 'processing', reserved_by = 'legacy-1' WHERE id = %s", (ids[1],)
    )
    unleased(conn, ids[2:], ago="2 hours")
    before = [row_of(conn, i) for i in ids[:2]]
    refused = run(action, str(ids[0]), str(ids[1]), "--reason", "r", "--yes", "-o", "json")
    assert refused.code == 2, refused
    assert [row_of(conn, i) for i in ids[:2]] == before  # nothing written
    details = [r["detail"] for r in json.loads(refused.out)]
    assert [r["outcome"] for r in json.loads(refused.out)] == ["refused", "refused"]
    assert re.match(r"no lease, claimed 1(\.\d)?s ago by legacy-1: ", details[0]), details
    assert details[0].endswith("its worker may still be running it (--force overrides)")
    assert details[1].startswith("no lease, no claim time jobctl can read by legacy-1")
    assert run(action, str(ids[2]), "--reason", "r", "--yes").code == 0  # 2 hours old
    forced = run(action, str(ids[0]), str(ids[1]), "--reason", "r", "--force", "--yes")
    assert forced.code == 0, forced
    assert [row_of(conn, i)["status"] for i in ids] == [status] * 3


def test_requeue_no_lease_leaves_the_recent_claims_to_force(conn, run, tmp_path):
    """The filter path and a reviewed plan judge a recent claim with no lease as a direct
    command does: left out, counted in one line, unless --force."""
    ids = add_jobs(conn, 3)
    unleased(conn, ids[:1], ago="1 second")
    unleased(conn, ids[1:2], ago="2 hours")
    before = row_of(conn, ids[0])
    done = run("requeue", "--no-lease", "--reason", "legacy", "--yes", "-o", "json")
    assert done.code == 0, done
    assert [r["id"] for r in json.loads(done.out)] == [ids[1]]
    assert "1 matching job(s) left out: the rules refuse them" in done.err, done.err
    assert "its worker may still be running it" in done.err
    assert row_of(conn, ids[0]) == before and row_of(conn, ids[1])["status"] == "queued"
    plan = tmp_path / "forced.json"
    assert run("requeue", "--no-lease", "--force", "--save-plan", str(plan)).code == 0
    applied = run("requeue", "--plan", str(plan), "--reason", "legacy", "--yes")
    assert applied.code == 2 and "may still be running it" in applied.out + applied.err
    assert row_of(conn, ids[0]) == before
    forced = run("requeue", "--plan", str(plan), "--reason", "legacy", "--force", "--yes")
    assert forced.code == 0, forced
    assert row_of(conn, ids[0])["status"] == "queued"


def test_a_filter_matching_only_refused_claims_says_none_is_left(conn, run):
    """`requeue --no-lease --yes` when the only lease-less job was claimed a second ago: the
    job is left out in one line, nothing written, exit 0, and the last line says every match
    was left out (not that none matched)."""
    (job,) = add_jobs(conn, 1)
    unleased(conn, [job], ago="1 second")
    before = row_of(conn, job)
    done = run("requeue", "--no-lease", "--reason", "legacy", "--yes")
    assert done.code == 0, done
    lines = done.err.splitlines()
    assert lines[0].startswith("1 matching job(s) left out: the rules refuse them (job "), lines
    assert lines[1:] == ["no job left to requeue: every job the filter matches is left out"]
    assert row_of(conn, job) == before

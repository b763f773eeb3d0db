"""What the job is. The table's kind and queue columns mapped by schema apply, shown
by the reads and narrowed on by --kind, --queue and --error, in the one SQL that the dry run
and the commit share."""

from __future__ import annotations

import json

import psycopg
import pytest
from helpers import claim_all


def kinded(conn, run, *, kinds=("send_email", "charge_card"), per_kind=3) -> dict[str, list[int]]:
    """A kind column mapped with the table's queue column, and ``per_kind`` expired jobs of
    each kind (the first kind in queue mail, the rest in payments), claimed by w1."""
    conn.execute("ALTER TABLE jobs ADD COLUMN kind text")
    result = run("schema", "apply", "--column", "kind=kind", "--column", "queue=queue", "--yes")
    assert result.code == 0, result.err
    ids: dict[str, list[int]] = {}
    for n, kind in enumerate(kinds):
        queue = "mail" if n == 0 else "payments"
        found = conn.execute(
            "INSERT INTO jobs (kind, queue) SELECT %s, %s FROM generate_series(1, %s) RETURNING id",
            (kind, queue, per_kind),
        ).fetchall()
        ids[kind] = [r["id"] for r in found]
    return ids


def expire_all(dsn: str, count: int, worker: str = "w1") -> None:
    assert len(claim_all(dsn, count, worker=worker, lease_seconds=-60)) == count


def test_schema_check_shows_the_mapped_columns(conn, run):
    kinded(conn, run)
    result = run("schema", "check")
    assert "kind = kind" in result.out and "queue = queue" in result.out
    assert "an index for --kind" in result.out and '("kind", "status")' in result.out
    conn.execute("CREATE INDEX jobs_kind_status ON jobs (kind, status)")
    assert "jobs_kind_status (valid)" in run("schema", "check").out


def test_a_mapped_column_the_table_lacks_is_refused(conn, run):
    result = run("schema", "apply", "--column", "kind=job_kind", "--yes")
    assert result.code == 2
    assert "job_kind" in result.err and "nothing done" in result.err


def test_kind_without_the_mapping_says_how_to_map_it(conn, run):
    for command in (
        ["stuck", "--kind", "x"],
        ["summary", "--kind", "x"],
        ["review", "--kind", "x"],
        ["reclaim", "--kind", "x"],
        ["reclaim", "--commit", "--yes", "--queue", "x"],
    ):
        result = run(*command)
        assert result.code == 2, command
        lines = result.err.strip().splitlines()
        assert len(lines) == 1, lines
        assert "jobctl schema apply --column" in lines[0] and "=COLUMN" in lines[0]


def test_stuck_shows_and_narrows_by_kind_and_queue(conn, dsn, run):
    ids = kinded(conn, run)
    expire_all(dsn, 6)
    found = json.loads(run("stuck", "-o", "json").out)
    assert {r["kind"] for r in found} == {"send_email", "charge_card"}
    assert {r["queue"] for r in found} == {"mail", "payments"}
    only = json.loads(run("stuck", "--kind", "charge_card", "-o", "json").out)
    assert sorted(r["id"] for r in only) == ids["charge_card"]
    both = run("stuck", "--kind", "charge_card", "--kind", "send_email", "-o", "json")
    assert len(json.loads(both.out)) == 6
    assert json.loads(run("stuck", "--queue", "mail", "-o", "json").out)[0]["kind"] == "send_email"
    assert json.loads(run("stuck", "--kind", "nope", "-o", "json").out) == []
    table = run("stuck", "-o", "wide").out
    assert "KIND" in table and "QUEUE" in table and "charge_card" in table
    piped = run("stuck", "-o", "tsv").out.splitlines()[0].split("\t")
    assert piped[:3] == ["id", "kind", "queue"]


def test_error_is_a_substring_of_the_last_error_any_case_with_wildcards_escaped(conn, dsn, run):
    ids = kinded(conn, run)
    expire_all(dsn, 6)
    a, b, c = ids["send_email"]
    conn.execute("UPDATE jobs SET last_error = 'SMTP timeout after 30s' WHERE id = %s", (a,))
    conn.execute("UPDATE jobs SET last_error = '100%% of quota_used' WHERE id = %s", (b,))
    conn.execute("UPDATE jobs SET last_error = '100 of quotaXused' WHERE id = %s", (c,))
    assert [r["id"] for r in json.loads(run("stuck", "--error", "smtp", "-o", "json").out)] == [a]
    pct = json.loads(run("stuck", "--error", "100%", "-o", "json").out)
    assert [r["id"] for r in pct] == [b]
    under = json.loads(run("stuck", "--error", "quota_used", "-o", "json").out)
    assert [r["id"] for r in under] == [b]


def test_reclaim_dry_run_equals_commit_on_a_kind(conn, dsn, run):
    ids = kinded(conn, run)
    expire_all(dsn, 6)
    dry = json.loads(run("reclaim", "--kind", "send_email", "-o", "json").out)
    assert sorted(r["id"] for r in dry) == ids["send_email"]
    assert {r["kind"] for r in dry} == {"send_email"}
    done = run("reclaim", "--commit", "--yes", "--kind", "send_email", "-o", "json")
    assert done.code == 0, done.err
    committed = json.loads(done.out)
    assert sorted(r["id"] for r in committed) == sorted(r["id"] for r in dry)
    assert [(r["id"], r["action"]) for r in sorted(committed, key=lambda r: r["id"])] == [
        (r["id"], r["action"]) for r in sorted(dry, key=lambda r: r["id"])
    ]
    still = conn.execute(
        "SELECT kind, count(*) AS n FROM jobs WHERE status = 'processing' GROUP BY kind"
    ).fetchall()
    assert [(r["kind"], r["n"]) for r in still] == [("charge_card", 3)]


def test_reclaim_plan_on_a_kind_applies_only_it(conn, dsn, run, tmp_path):
    ids = kinded(conn, run)
    expire_all(dsn, 6)
    plan = tmp_path / "p.json"
    assert run("reclaim", "--queue", "payments", "--save-plan", str(plan)).code == 0
    done = run("reclaim", "--commit", "--yes", "--plan", str(plan), "-o", "json")
    assert sorted(r["id"] for r in json.loads(done.out)) == ids["charge_card"]


def test_summary_narrowed_by_kind(conn, dsn, run):
    kinded(conn, run)
    expire_all(dsn, 4)  # the 3 send_email and one charge_card
    whole = json.loads(run("summary", "-o", "json").out)
    assert whole["processing"]["expired"] == 4
    narrowed = json.loads(run("summary", "--kind", "charge_card", "-o", "json").out)
    assert narrowed["processing"]["expired"] == 1
    assert narrowed["status"]["queued"] == 2
    assert [w["expired"] for w in narrowed["workers"]] == [1]
    by_error = json.loads(run("summary", "--error", "no such error", "-o", "json").out)
    assert by_error["processing"]["expired"] == 0


def test_review_shows_and_narrows_by_kind(conn, dsn, run):
    conn.execute("UPDATE jobs SET recovery_policy = 'manual'")  # none yet: the default below
    conn.execute("ALTER TABLE jobs ALTER COLUMN recovery_policy SET DEFAULT 'manual'")
    ids = kinded(conn, run)
    expire_all(dsn, 6)
    assert run("reclaim", "--commit", "--yes").code == 0
    found = json.loads(run("review", "-o", "json").out)
    assert len(found) == 6 and {r["kind"] for r in found} == {"send_email", "charge_card"}
    only = json.loads(run("review", "--kind", "charge_card", "-o", "json").out)
    assert sorted(r["id"] for r in only) == ids["charge_card"]
    assert "KIND" in run("review", "-o", "wide").out


def test_history_and_show_name_the_kind(conn, dsn, run):
    conn.execute("ALTER TABLE jobs ADD COLUMN job_kind text")
    assert run("schema", "apply", "--column", "kind=job_kind", "--yes").code == 0
    (row,) = conn.execute("INSERT INTO jobs (job_kind) VALUES ('resize') RETURNING id").fetchall()
    shown = json.loads(run("show", str(row["id"]), "-o", "json").out)
    assert shown["kind"] == "resize" and "job_kind" not in shown
    assert shown["queue"] == "default"  # the table's own column, not mapped: as it is
    head = run("history", str(row["id"]), "-o", "wide").out
    assert "KIND" in head and "resize" in head


@pytest.mark.parametrize("kind_type", ["varchar(40)", "kind_enum"])
def test_a_kind_of_another_type(conn, dsn, run, kind_type):
    if kind_type == "kind_enum":
        conn.execute("CREATE TYPE kind_enum AS ENUM ('a', 'b')")
    conn.execute(f"ALTER TABLE jobs ADD COLUMN kind {kind_type}")
    assert run("schema", "apply", "--column", "kind=kind", "--yes").code == 0
    conn.execute("INSERT INTO jobs (kind) VALUES ('a'), ('b')")
    expire_all(dsn, 2)
    found = json.loads(run("stuck", "--kind", "b", "-o", "json").out)
    assert [r["kind"] for r in found] == ["b"]
    assert run("reclaim", "--commit", "--yes", "--kind", "a").code == 0
    with psycopg.connect(dsn) as c:
        left = c.execute("SELECT kind::text FROM jobs WHERE status = 'processing'").fetchall()
    assert left == [("b",)]


def test_summary_by_kind_queue_and_worker(conn, dsn, run):
    kinded(conn, run)
    expire_all(dsn, 4)  # the 3 send_email (mail) and one charge_card (payments), by w1
    conn.execute("UPDATE jobs SET available_at = now() - interval '1 hour' WHERE status = 'queued'")
    by_kind = json.loads(run("summary", "--by", "kind", "-o", "json").out)
    groups = {g["kind"]: g for g in by_kind["groups"]}
    assert [g["kind"] for g in by_kind["groups"]] == ["send_email", "charge_card"]  # most stuck
    assert groups["send_email"]["stuck"] == 3 and groups["send_email"]["ready"] == 0
    assert groups["charge_card"]["stuck"] == 1 and groups["charge_card"]["ready"] == 2
    assert groups["charge_card"]["oldest_ready_s"] >= 3600
    by_queue = json.loads(
        run("summary", "--by", "queue", "--kind", "charge_card", "-o", "json").out
    )
    assert [(g["queue"], g["processing"]) for g in by_queue["groups"]] == [("payments", 1)]
    by_worker = json.loads(run("summary", "--by", "worker", "-o", "json").out)
    assert [(g["worker"], g["stuck"]) for g in by_worker["groups"]] == [("w1", 4), (None, 0)]
    table = run("summary", "--by", "kind", "-o", "wide").out
    assert "KIND" in table and "STUCK" in table and "send_email" in table


def test_summary_by_error_normalizes_numbers_and_ids(conn, dsn, run):
    kinded(conn, run)
    expire_all(dsn, 6)
    errors_ = [
        "SMTP timeout after 30s on job 812\nTraceback ...",
        "SMTP timeout after 31s on job 977",
        "card 2f1c9a3e-8b7d-4c1e-9f0a-1b2c3d4e5f60 declined",
        "card 9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b declined",
        "payload deadbeef42 unreadable",
    ]
    for job_id, text in zip(range(1, 6), errors_, strict=True):
        conn.execute("UPDATE jobs SET last_error = %s WHERE id = %s", (text, job_id))
    found = json.loads(run("summary", "--by", "error", "-o", "json").out)["groups"]
    counts = {g["error"]: g["processing"] for g in found}
    assert counts == {
        "SMTP timeout after Ns on job N": 2,
        "card <id> declined": 2,
        "payload N unreadable": 1,
        None: 1,
    }


def test_summary_by_kind_without_the_mapping(run):
    result = run("summary", "--by", "kind")
    assert result.code == 2 and "--column kind=COLUMN" in result.err
    assert run("summary", "--by", "colour").code == 2


# ---------------------------------------------------------------- requeue / fail on a filter
def failed_by_kind(conn, dsn, run) -> dict[str, list[int]]:
    """The kinds of ``kinded``, every job failed by reclaim (manual policy), awaiting review."""
    conn.execute("ALTER TABLE jobs ALTER COLUMN recovery_policy SET DEFAULT 'manual'")
    ids = kinded(conn, run)
    expire_all(dsn, 6)
    assert run("reclaim", "--commit", "--yes").code == 0
    return ids


def statuses(conn) -> dict[int, str]:
    return {r["id"]: r["status"] for r in conn.execute("SELECT id, status FROM jobs")}


def test_requeue_on_a_filter_lists_and_changes_nothing_without_yes(conn, dsn, run):
    ids = failed_by_kind(conn, dsn, run)
    before = statuses(conn)
    result = run("requeue", "--kind", "send_email", "-o", "json")
    assert result.code == 0, result.err
    assert sorted(r["id"] for r in json.loads(result.out)) == ids["send_email"]
    assert "3 job(s) match; nothing changed" in result.err
    assert statuses(conn) == before
    old = run("requeue", "--kind", "send_email", "--older-than", "1h", "--yes")
    assert old.code == 0 and "no job matches the filter" in old.err
    assert run("requeue", "--status", "done").code == 2


def test_requeue_on_a_filter_with_yes_writes_exactly_those(conn, dsn, run):
    ids = failed_by_kind(conn, dsn, run)
    result = run("requeue", "--kind", "send_email", "--reason", "smtp back", "--yes", "-o", "json")
    assert result.code == 0, result.err
    assert {r["outcome"] for r in json.loads(result.out)} == {"requeued"}
    now = statuses(conn)
    assert {now[i] for i in ids["send_email"]} == {"queued"}
    assert {now[i] for i in ids["charge_card"]} == {"failed"}
    reasons = conn.execute(
        "SELECT DISTINCT reason FROM jobctl.events WHERE event = 'requeued'"
    ).fetchall()
    assert [r["reason"] for r in reasons] == ["smtp back"]


def test_fail_on_an_error_text_and_a_limit(conn, dsn, run):
    ids = failed_by_kind(conn, dsn, run)
    first, second, _ = ids["charge_card"]
    conn.execute(
        "UPDATE jobs SET last_error = 'Card_Declined 51', status = 'queued' WHERE id = ANY(%s)",
        ([first, second],),
    )
    result = run(
        "fail", "--status", "queued", "--error", "card_declined", "--limit", "1",
        "--reason", "declined for good", "--yes",
    )  # fmt: skip
    assert result.code == 0, result.err
    now = statuses(conn)
    assert (now[first], now[second]) == ("failed", "queued")
    assert run("fail", "--error", "x", "--yes").code == 2  # no reason


def test_a_filter_matching_nothing_says_so(conn, dsn, run):
    failed_by_kind(conn, dsn, run)
    result = run("requeue", "--kind", "nope", "--yes")
    assert result.code == 0
    assert "no job matches the filter" in result.err


def test_no_filter_and_no_id_is_an_error(run):
    for command in (["requeue"], ["fail", "--reason", "x"]):
        result = run(*command)
        assert result.code == 2
        assert "filter" in result.err
    assert run("requeue", "1", "--kind", "x").code == 2
    assert run("requeue", "1", "--save-plan", "p.json").code == 2


def test_a_slice_saved_as_a_plan_is_applied_fenced_per_row(conn, dsn, run, tmp_path):
    ids = failed_by_kind(conn, dsn, run)
    plan = tmp_path / "slice.json"
    listed = run("requeue", "--queue", "payments", "--save-plan", str(plan), "-o", "json")
    assert listed.code == 0, listed.err
    assert sorted(r["id"] for r in json.loads(listed.out)) == ids["charge_card"]
    assert statuses(conn)[ids["charge_card"][0]] == "failed"  # nothing written yet
    changed = ids["charge_card"][1]
    conn.execute("UPDATE jobs SET last_error = 'looked at by hand' WHERE id = %s", (changed,))
    applied = run("requeue", "--plan", str(plan), "--yes", "-o", "json")
    assert applied.code == 3
    outcomes = {r["id"]: r["outcome"] for r in json.loads(applied.out)}
    assert outcomes.pop(changed) == "conflict"
    assert set(outcomes.values()) == {"requeued"}
    assert statuses(conn)[changed] == "failed"


def test_a_row_changed_between_listing_and_commit_is_not_written(conn, dsn, run):
    """Real concurrency: another session holds one listed row locked and changes it; the bulk
    --yes requeue listed it as it was, waits on it, and then finds it changed: a conflict for
    that row (exit 3), nothing written for it, the others requeued."""
    import os
    import subprocess
    import sys

    from helpers import blocked_by, wait_until

    ids = failed_by_kind(conn, dsn, run)
    first, changed, last = ids["send_email"]
    other = psycopg.connect(dsn)
    other.execute("UPDATE jobs SET last_error = 'being fixed' WHERE id = %s", (changed,))
    pid = other.info.backend_pid
    env = {**os.environ, "JOBCTL_DSN": dsn, "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "--lock-timeout", "30s", "requeue", "--kind",
         "send_email", "--yes", "-o", "json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: blocked_by(conn, pid), timeout=30, what="the requeue to wait")
        other.commit()
        out, err = proc.communicate(timeout=60)
    finally:
        other.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    outcomes = {r["id"]: r["outcome"] for r in json.loads(out)}
    assert outcomes == {first: "requeued", changed: "conflict", last: "requeued"}
    now = statuses(conn)
    assert (now[first], now[changed], now[last]) == ("queued", "failed", "queued")
    row = conn.execute("SELECT last_error FROM jobs WHERE id = %s", (changed,)).fetchone()
    assert row["last_error"] == "being fixed"


# ---------------------------------------------------------------- paced return
def test_reclaim_spread_paces_the_return_in_the_fenced_statement(conn, dsn, run):
    kinded(conn, run, per_kind=10)
    expire_all(dsn, 20)
    dry = run("reclaim", "--spread", "10m")
    assert "20 requeued job(s) would return spread evenly over the next 600s" in dry.err
    done = run("reclaim", "--commit", "--yes", "--spread", "10m", "--batch-size", "20")
    assert done.code == 0, done.err
    row = conn.execute(
        "SELECT min(available_at - now()) AS lo, max(available_at - now()) AS hi, "
        "count(DISTINCT available_at) AS n FROM jobs WHERE status = 'queued' "
        "AND reclaim_count = 1"
    ).fetchone()
    assert row["n"] == 20
    assert row["lo"].total_seconds() >= -5 and row["lo"].total_seconds() < 60
    assert row["hi"].total_seconds() > 480 and row["hi"].total_seconds() <= 600
    # evenly: each of the ten minutes after the reclaim (its transaction's now(), which its
    # history event keeps; not this later now(), which would shift rows across minutes)
    minutes = conn.execute(
        "SELECT floor(extract(epoch FROM j.available_at - e.at) / 60) AS m, count(*) AS n "
        "FROM jobs j JOIN jobctl.events e ON e.job_id = j.id::text AND e.event = 'reclaimed' "
        "WHERE j.reclaim_count = 1 GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert [r["n"] for r in minutes] == [2] * 10


def test_requeue_spread_on_a_filter(conn, dsn, run):
    ids = failed_by_kind(conn, dsn, run)
    assert run("requeue", "--kind", "send_email", "--spread", "1h", "--yes").code == 0
    found = conn.execute(
        "SELECT extract(epoch FROM available_at - now()) AS s FROM jobs WHERE id = ANY(%s) "
        "ORDER BY 1",
        (ids["send_email"],),
    ).fetchall()
    slots = [r["s"] // 1200 for r in found]  # a third of an hour each
    assert slots == [0, 1, 2]


# ---------------------------------------------------------------- a deploy's orphans
def test_refund_attempt_gives_the_killed_attempt_back_and_records_why(conn, dsn, run):
    kinded(conn, run, per_kind=2)
    conn.execute("UPDATE jobs SET attempts = 0")
    expire_all(dsn, 4)  # attempts 1 each now
    conn.execute("UPDATE jobs SET attempts = 0 WHERE kind = 'charge_card'")  # never below 0
    done = run("reclaim", "--commit", "--yes", "--refund-attempt")
    assert done.code == 0, done.err
    found = conn.execute("SELECT kind, attempts, status FROM jobs ORDER BY id").fetchall()
    assert [(r["kind"], r["attempts"], r["status"]) for r in found] == [
        ("send_email", 0, "queued"),
        ("send_email", 0, "queued"),
        ("charge_card", 0, "queued"),
        ("charge_card", 0, "queued"),
    ]
    reasons = conn.execute(
        "SELECT reason FROM jobctl.events WHERE event = 'reclaimed' ORDER BY event_id"
    ).fetchall()
    assert len(reasons) == 4 and all("attempt refunded" in r["reason"] for r in reasons)
    # without it: the attempt counts, as before
    expire_all(dsn, 4)
    assert run("reclaim", "--commit", "--yes").code == 0
    assert {r["attempts"] for r in conn.execute("SELECT attempts FROM jobs")} == {1}


def test_park_older_than_parks_old_orphans_in_the_dry_run_and_the_commit(conn, dsn, run):
    ids = kinded(conn, run, per_kind=2)
    expire_all(dsn, 4)
    old = ids["send_email"]
    conn.execute(
        "UPDATE jobs SET reserved_at = now() - interval '40 days' WHERE id = ANY(%s)", (old,)
    )
    dry = json.loads(run("reclaim", "--park-older-than", "30d", "-o", "json").out)
    actions = {r["id"]: r["action"] for r in dry}
    assert {actions[i] for i in old} == {"fail"}
    assert {actions[i] for i in ids["charge_card"]} == {"requeue"}
    done = run("reclaim", "--commit", "--yes", "--park-older-than", "30d", "-o", "json")
    assert {r["id"]: r["action"] for r in json.loads(done.out)} == actions
    assert {statuses(conn)[i] for i in old} == {"failed"}
    # parked for a human: review lists them (auto, attempts left: reclaim parked them for age)
    waiting = json.loads(run("review", "-o", "json").out)
    assert sorted(r["id"] for r in waiting) == sorted(old)
    assert {r["why"] for r in waiting} == {"parked"}


# ---------------------------------------------------------------- events, report, metrics
def stuck_jobs(exposition: str) -> float:
    """The sum of jobctl_stuck_jobs over its policies, from metrics' text."""
    values = [
        float(line.split()[-1])
        for line in exposition.splitlines()
        if line.startswith("jobctl_stuck_jobs{")
    ]
    assert values, exposition
    return sum(values)


def test_events_report_and_metrics_narrowed_by_kind(conn, dsn, run):
    ids = kinded(conn, run)
    expire_all(dsn, 6)
    assert run("reclaim", "--commit", "--yes").code == 0
    events = json.loads(run("events", "--kind", "charge_card", "-o", "json").out)
    assert {e["id"] for e in events} == set(ids["charge_card"])
    assert {e["event"] for e in events} == {"reclaimed"}
    everything = json.loads(run("events", "-o", "json").out)
    assert len(everything) == 6
    report = json.loads(run("report", "--queue", "mail", "-o", "json").out)
    assert report["expired_totals"]["jobs"] == 3
    whole = json.loads(run("report", "-o", "json").out)
    assert whole["expired_totals"]["jobs"] == 6
    expire_all(dsn, 6)
    assert stuck_jobs(run("metrics", "--kind", "send_email").out) == 3
    assert stuck_jobs(run("metrics").out) == 6
    assert run("events", "--kind", "x", dsn=dsn).code == 0
    conn.execute("UPDATE jobctl.tables SET mapping = '{}'::jsonb")
    for command in (
        ["events", "--kind", "x"],
        ["report", "--kind", "x"],
        ["metrics", "--kind", "x"],
    ):
        assert run(*command).code == 2, command


def test_metrics_label_job_counts_by_kind_bounded(conn, dsn, run):
    kinded(conn, run, kinds=("a", "b", "c", "d"), per_kind=2)
    conn.execute("UPDATE jobs SET kind = 'a' WHERE id IN (3, 5)")  # a: 4, b: 1, c: 1, d: 2
    expire_all(dsn, 8)
    text = run("metrics", "--label-top", "2").out
    samples = {
        line.split()[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("jobctl_jobs_by_kind{")
    }
    kinds = {key.split('kind="')[1].split('"')[0] for key in samples}
    assert kinds == {"a", "d", "other"}
    stuck = {
        key.split('kind="')[1].split('"')[0]: value
        for key, value in samples.items()
        if 'state="stuck"' in key
    }
    assert stuck == {"a": 4, "d": 2, "other": 2}
    assert "jobctl_jobs_by_queue{" in text
    assert text.endswith("# EOF\n")


# ---------------------------------------------------------------- a policy per kind
def test_a_policy_per_kind_steers_reclaim_and_stuck_says_so(conn, dsn, run):
    ids = kinded(conn, run)
    expire_all(dsn, 6)
    set_ = run("policy", "--kind", "send_email", "--manual", "--reason", "double sends")
    assert set_.code == 0, set_.err
    result = run("stuck", "-o", "json")
    assert result.code == 0, result.err
    by_id = {r["id"]: r for r in json.loads(result.out)}
    assert {by_id[i]["action"] for i in ids["send_email"]} == {"fail"}
    assert {by_id[i]["policy_from"] for i in ids["send_email"]} == {"kind"}
    assert {by_id[i]["action"] for i in ids["charge_card"]} == {"requeue"}
    assert {by_id[i]["policy_from"] for i in ids["charge_card"]} == {"row"}
    assert "manual (kind)" in run("stuck", "-o", "wide").out
    listed = json.loads(run("policy", "--list", "-o", "json").out)
    assert [(p["dimension"], p["value"], p["policy"], p["reason"]) for p in listed] == [
        ("kind", "send_email", "manual", "double sends")
    ]
    dry = json.loads(run("reclaim", "-o", "json").out)
    done = json.loads(run("reclaim", "--commit", "--yes", "-o", "json").out)
    assert sorted((r["id"], r["action"]) for r in done) == sorted(
        (r["id"], r["action"]) for r in dry
    )
    now = statuses(conn)
    assert {now[i] for i in ids["send_email"]} == {"failed"}
    assert {now[i] for i in ids["charge_card"]} == {"queued"}
    # removed: the rows decide again; every change in the history
    assert run("policy", "--kind", "send_email", "--remove", "--reason", "fixed").code == 0
    assert json.loads(run("policy", "--list", "-o", "json").out) == []
    history = conn.execute(
        "SELECT value, policy, reason, actor FROM jobctl.kind_policy_events ORDER BY event_id"
    ).fetchall()
    assert [(h["value"], h["policy"], h["reason"]) for h in history] == [
        ("send_email", "manual", "double sends"),
        ("send_email", None, "fixed"),
    ]
    assert history[0]["actor"] == "tester@ci"
    assert run("policy", "--kind", "x", "1").code == 2


def test_a_policy_per_queue_and_without_the_mapping(conn, dsn, run):
    assert run("policy", "--kind", "x", "--manual").code == 2  # no kind column mapped
    ids = kinded(conn, run)
    expire_all(dsn, 6)
    assert run("policy", "--queue", "payments", "--manual").code == 0
    found = {r["id"]: r for r in json.loads(run("stuck", "-o", "json").out)}
    assert {found[i]["policy_from"] for i in ids["charge_card"]} == {"queue"}
    assert {found[i]["action"] for i in ids["charge_card"]} == {"fail"}


def test_only_jobctls_owner_records_a_policy_per_kind(roles, conn, dsn, run):
    from helpers import grant_roles
    from psycopg import conninfo

    kinded(conn, run)
    assert grant_roles(run, roles).code == 0
    operator = conninfo.make_conninfo(dsn, user=roles["operator"])
    refused = run("policy", "--kind", "send_email", "--manual", dsn=operator)
    assert refused.code == 2, refused.err
    assert "only its owner writes" in refused.err
    assert run("policy", "--list", dsn=operator).code == 0  # everyone reads them
    assert run("stuck", dsn=conninfo.make_conninfo(dsn, user=roles["readonly"])).code == 0


def test_report_breaks_the_incident_down_by_kind_and_queue(conn, dsn, run):
    conn.execute("ALTER TABLE jobs ALTER COLUMN recovery_policy SET DEFAULT 'manual'")
    ids = kinded(conn, run)
    conn.execute(
        "UPDATE jobs SET recovery_policy = 'auto' WHERE id = ANY(%s)", (ids["send_email"],)
    )
    expire_all(dsn, 6)
    assert run("reclaim", "--commit", "--yes").code == 0
    found = json.loads(run("report", "-o", "json").out)
    by_kind = {g["kind"]: g for g in found["by_kind"]}
    assert by_kind["send_email"]["expired_jobs"] == 3 and by_kind["send_email"]["requeued"] == 3
    assert by_kind["charge_card"]["parked"] == 3
    assert by_kind["charge_card"]["awaiting_review"] == 3
    assert {g["queue"] for g in found["by_queue"]} == {"mail", "payments"}
    page = run("report").out
    assert "## By kind" in page and "## By queue" in page and "charge_card" in page
    narrowed = json.loads(run("report", "--kind", "send_email", "-o", "json").out)
    assert [g["kind"] for g in narrowed["by_kind"]] == ["send_email"]


def test_events_and_explain_name_the_kind(conn, dsn, run):
    ids = kinded(conn, run)
    expire_all(dsn, 6)
    assert run("reclaim", "--commit", "--yes").code == 0
    found = json.loads(run("events", "-o", "json").out)
    assert {(e["id"], e["kind"], e["queue"]) for e in found} >= {
        (ids["send_email"][0], "send_email", "mail")
    }
    piped = run("events", "-o", "tsv").out.splitlines()[0].split("\t")
    assert piped[:4] == ["at", "id", "kind", "queue"]
    assert "KIND" in run("events", "-o", "wide").out
    story = run("explain", str(ids["charge_card"][0])).out
    assert f"Job {ids['charge_card'][0]} (kind charge_card, queue payments) is" in story


def test_the_service_takes_the_filters_and_says_how_to_map_kind(conn, dsn, run):
    result = run("reclaim", "--commit", "--yes", "--every", "1s", "--kind", "x")
    assert result.code == 2 and "--column kind=COLUMN" in result.err


def test_schema_remove_columns_takes_the_tables_kind_policies_with_it(conn, dsn, run):
    """A table's policies per kind go with its recorded names (schema remove --columns): the
    lease design applied to it anew starts with none, the removal is the last event, and
    another table's policies stay."""
    kinded(conn, run)
    conn.execute("CREATE TABLE other (LIKE jobs INCLUDING ALL)")
    result = run("--table", "other", "schema", "apply", "--column", "kind=kind", "--yes")
    assert result.code == 0, result.err
    for table in ("jobs", "other"):
        set_ = run("--table", table, "policy", "--kind", "send_email", "--manual", "--reason", "x")
        assert set_.code == 0, set_.err

    removed = run("schema", "remove", "--columns", "--yes")
    assert removed.code == 0, removed.err
    left = conn.execute("SELECT job_table FROM jobctl.kind_policies ORDER BY 1").fetchall()
    assert [r["job_table"] for r in left] == ["public.other"]
    last = conn.execute(
        "SELECT value, policy, reason FROM jobctl.kind_policy_events"
        " WHERE job_table = 'public.jobs' ORDER BY event_id DESC LIMIT 1"
    ).fetchone()
    assert last == {"value": "send_email", "policy": None, "reason": "jobctl schema remove"}

    again = run("schema", "apply", "--column", "kind=kind", "--yes")
    assert again.code == 0, again.err
    assert json.loads(run("policy", "--list", "-o", "json").out) == []
    expire_all(dsn, 2)
    stuck = json.loads(run("stuck", "-o", "json").out)
    assert {row["action"] for row in stuck} == {"requeue"}  # the rows' own auto policy

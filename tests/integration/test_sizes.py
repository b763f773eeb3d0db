"""Hostile sizes: long text is cut on the server
for display, the full value only where asked (--full); the dry run and its saved plan are
streamed, never held. Every text a row holds (worker, kind, last_error) comes back cut from
every command that shows rows (stuck, reclaim's dry run, plan and commit, summary, metrics,
review, report, the operator writes, top), filtered and grouped by the whole value.

Behaviour is pinned, not timing: the cut value and its note, every byte with --full, the dry
run's output and plan as before for small sets, and the server-side cursor the dry run reads
through while it is drained (a structural check that cannot flake). Peak RSS is measured by
tests/bench/bench_memory.py (docs/reference/performance.md).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import add_jobs, claim_all

from jobctl import db
from jobctl.db import session
from jobctl.ops import console, metrics, notify, plans, triage
from jobctl.ops.reclaim import one_database
from jobctl.ops.reclaim.plans import PLAN_FORMAT
from jobctl.ops.reclaim.request import Request
from jobctl.ops.reclaim.steps import Run
from jobctl.render import output, reclaim_lines

BIG = 5_000_000  # a 5 MB last_error: far past the display's cut
CUT = triage.DISPLAY_CHARS
NOTE = "more bytes; --full shows all)"


def big_text(size: int = BIG) -> str:
    return "".join(f"{n:09d}\n" for n in range(size // 10))[:size]


def shown(text: str, cut: int = CUT) -> str:
    """What a display shows of ``text``: its first ``cut`` characters and the note."""
    head = text[:cut]
    more = len(text.encode()) - len(head.encode())
    return f"{head}… ({more} {NOTE}"


def kept(text: str, cut: int = CUT) -> str:
    """What a display shows of ``text`` as the history keeps it (history 011): its first
    ``cut`` characters and a note of the bytes the history did not keep, with or without
    --full."""
    head = text[:cut]
    more = len(text.encode()) - len(head.encode())
    return f"{head}… ({more} more bytes not kept by the history)"


def test_show_cuts_a_long_last_error_on_the_server_and_full_shows_every_byte(conn, run):
    (job_id,) = add_jobs(conn, 1)
    error = big_text()
    conn.execute("UPDATE jobs SET last_error = %s WHERE id = %s", (error, job_id))

    cut = run("show", str(job_id), "-o", "json")
    assert cut.code == 0, cut.err
    assert json.loads(cut.out)["last_error"] == shown(error)
    assert len(cut.out) < 50_000  # not 5 MB: cut before it crossed the wire

    table = run("show", str(job_id))
    assert table.code == 0, table.err
    assert f"({BIG - CUT} {NOTE}" in table.out and len(table.out) < 50_000

    full = run("show", str(job_id), "--full", "-o", "json")
    assert full.code == 0, full.err
    assert json.loads(full.out)["last_error"] == error


def test_the_cut_counts_characters_and_keeps_short_values_and_their_types(conn, run):
    """4096 two-byte characters are not cut (8192 bytes); one more is, by its 2 bytes. A short
    value keeps its type (jsonb stays an object); a long jsonb is shown as cut text."""
    (short_id, long_id) = add_jobs(conn, 2)
    conn.execute(
        "UPDATE jobs SET last_error = %s, payload = %s WHERE id = %s",
        ("é" * CUT, psycopg.types.json.Jsonb({"a": [1, 2]}), short_id),
    )
    conn.execute(
        "UPDATE jobs SET last_error = %s, payload = %s WHERE id = %s",
        ("é" * (CUT + 1), psycopg.types.json.Jsonb({"k": "x" * BIG}), long_id),
    )
    short = json.loads(run("show", str(short_id), "-o", "json").out)
    assert short["last_error"] == "é" * CUT and short["payload"] == {"a": [1, 2]}
    long = json.loads(run("show", str(long_id), "-o", "json").out)
    assert long["last_error"] == f"{'é' * CUT}… (2 {NOTE}"
    assert long["payload"] == shown(json.dumps({"k": "x" * BIG}))
    full = json.loads(run("show", str(long_id), "--full", "-o", "json").out)
    assert full["payload"] == {"k": "x" * BIG}


def test_history_events_and_explain_cut_the_history_texts(conn, dsn, run):
    """A worker's 5 MB failure reason and a 5 MB worker name, as the history recorded them:
    kept up to the reads' cut, and a longer one cut with its whole length in bytes, which
    every read shows as a note (--full has no more of it to show)."""
    (job_id,) = add_jobs(conn, 1)
    worker = "w" * BIG
    (claimed,) = claim_all(dsn, 1, worker=worker, lease_seconds=600)
    error = big_text()
    with psycopg.connect(dsn, autocommit=True) as c:
        from jobctl import lease

        lease.Worker(c, worker, lease_seconds=600).fail(claimed, error)
    stored = conn.execute(
        "SELECT 'event' AS what, worker, worker_bytes, reason, reason_bytes FROM jobctl.events "
        "WHERE reason IS NOT NULL UNION ALL SELECT 'attempt', worker, worker_bytes, NULL, NULL "
        "FROM jobctl.attempts ORDER BY 1"
    ).fetchall()
    assert [(r["what"], r["worker"], r["worker_bytes"]) for r in stored] == [
        ("attempt", worker[:CUT], BIG),
        ("event", worker[:CUT], BIG),
    ]  # the history keeps the first CUT characters of each, and their whole length
    assert (stored[1]["reason"], stored[1]["reason_bytes"]) == (error[:CUT], BIG)

    history = run("history", str(job_id), "-o", "json")
    assert history.code == 0, history.err
    assert len(history.out) < 100_000
    found = json.loads(history.out)
    assert found["job"]["last_error"] == shown(error)  # the row itself: every byte there
    assert {a["worker"] for a in found["attempts"]} == {kept(worker)}
    assert kept(error) in {e["reason"] for e in found["events"]}
    full = json.loads(run("history", str(job_id), "--full", "-o", "json").out)
    assert full["job"]["last_error"] == error
    assert kept(error) in {e["reason"] for e in full["events"]}  # no more kept to show
    assert {a["worker"] for a in full["attempts"]} == {kept(worker)}

    events = run("events", "-o", "json")
    assert events.code == 0, events.err
    assert len(events.out) < 100_000
    assert kept(error) in {e["reason"] for e in json.loads(events.out)}
    table = run("events")
    assert table.code == 0 and "not kept by the history)" in table.out
    assert len(table.out) < 100_000
    full_events = json.loads(run("events", "--full", "-o", "json").out)
    assert kept(error) in {e["reason"] for e in full_events}

    story = run("explain", str(job_id), "-o", "json")
    assert story.code == 0, story.err
    assert len(story.out) < 100_000


# ---------------------------------------------------------------- the dry run, streamed
def expired_jobs(conn, count: int) -> None:
    """``count`` auto jobs and a fifth as many manual ones, claimed by a dead worker (as the
    worker API claims: status, token, lease), their leases expired a minute ago."""
    add_jobs(conn, count)
    add_jobs(conn, count // 5, policy="manual")
    conn.execute(
        "UPDATE jobs SET status = 'processing', attempts = attempts + 1, reserved_by = 'dead', "
        "reserved_at = now() - interval '2 minutes', attempt_token = gen_random_uuid(), "
        "lease_expires_at = now() - interval '1 minute' - id * interval '1 ms'"
    )


MOVING = (
    "lease_overdue_s",
    "heartbeat_age_s",
    "claimed_age_s",
)  # seconds since now(): differ between reads


def steady(found: list[dict]) -> list[dict]:
    """Rows as JSON gives them, without the figures that move with the clock."""
    return [{k: v for k, v in row.items() if k not in MOVING} for row in found]


def expected_rows(dsn: str) -> list[dict]:
    """The dry run's rows as the whole-list code read them: triage.stuck, applied false."""
    with session.open(db.Settings(dsn=dsn)) as s, s.transaction(read_only=True):
        found = [{**r, "applied": False} for r in triage.stuck(s, triage.ExpiredFilter(), None)]
    return steady(json.loads(output.to_json(found)))


def started(steps: Generator[Any, None, Run]) -> Run:
    """A dry run's ``Run``: ``one_database.start`` returns it, asking nothing."""
    with pytest.raises(StopIteration) as done:
        next(steps)
    return done.value.value


def test_the_dry_run_reads_through_a_server_side_cursor_while_it_is_drained(conn, dsn):
    """The first batch of a dry run comes before the last row was read: a named cursor is
    open on the server (pg_cursors) and the batch is a chunk, not every row."""
    expired_jobs(conn, session.STREAM_CHUNK * 2 + 5)
    rows_ = session.STREAM_CHUNK * 2 + 5 + (session.STREAM_CHUNK * 2 + 5) // 5
    settings = db.Settings(dsn=dsn)
    with session.open(settings) as s:
        run_ = started(one_database.start(s, Request()))
        first = next(run_.batches)
        cursors = s.conn.execute("SELECT name FROM pg_cursors").fetchall()
        rest = [row for batch in run_.batches for row in batch]
    assert [c["name"] for c in cursors] == ["jobctl_stream"]
    assert len(first) <= session.STREAM_CHUNK
    assert len(first) + len(rest) == rows_
    assert run_.total is None  # not counted ahead: that would be holding every row


def test_the_dry_run_prints_what_it_printed_before(conn, dsn, run):
    """Each format of a dry run (more rows than a chunk) is the rows of ``triage.stuck`` as
    the whole-list renderer wrote them: JSON an array, JSON lines, CSV under one header."""
    expired_jobs(conn, session.STREAM_CHUNK + 300)
    expected = expected_rows(dsn)
    as_json = run("reclaim", "-o", "json")
    assert as_json.code == 0, as_json.err
    assert as_json.out.startswith("[\n  {") and as_json.out.endswith("}\n]\n")
    assert steady(json.loads(as_json.out)) == expected
    lines = run("reclaim", "-o", "jsonl").out.splitlines()
    assert steady([json.loads(line) for line in lines]) == expected
    csv_lines = run("reclaim", "-o", "csv").out.splitlines()
    assert len(csv_lines) == len(expected) + 1 and csv_lines[0].startswith("id,")
    table = run("reclaim")
    assert f"20 of {len(expected)} rows shown" in table.out
    requeue = sum(r["action"] == "requeue" for r in expected)
    assert f"dry run: {requeue} would be requeued, {len(expected) - requeue} failed" in table.err


def test_a_saved_plan_is_what_the_whole_document_writer_made(conn, dsn, run, tmp_path: Path):
    """Written as the rows come, the plan is byte for byte the document plans.write made of
    the whole list (its made_at and clock figures aside), and applies as before."""
    expired_jobs(conn, session.STREAM_CHUNK + 300)
    path = tmp_path / "plan.json"
    saved = run("reclaim", "--save-plan", str(path), "-o", "jsonl")
    assert saved.code == 0, saved.err
    assert f"plan saved to {path}" in saved.err
    text = path.read_text()
    document = json.loads(text)
    assert list(document) == ["format", "made_at", "where", "rows"]
    assert text == output.to_json(document) + "\n"  # the whole-document writer's bytes
    with session.open(db.Settings(dsn=dsn)) as s:
        assert document["where"] == s.origin()
    assert document["format"] == PLAN_FORMAT
    assert steady(document["rows"]) == expected_rows(dsn)
    assert len(document["rows"]) > session.STREAM_CHUNK
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary file left
    applied = run("reclaim", "--commit", "--plan", str(path), "--yes", "-o", "jsonl")
    assert applied.code == 0, applied.err
    outcome = [json.loads(line) for line in applied.out.splitlines()]
    assert sum(r["applied"] for r in outcome) == len(document["rows"])


def test_a_dry_run_that_fails_midway_leaves_no_plan(conn, dsn, tmp_path: Path):
    """The plan is renamed into place only when every row was written: a dry run stopped
    after its first batch leaves neither the plan nor a temporary file."""
    expired_jobs(conn, session.STREAM_CHUNK + 300)
    path = tmp_path / "plan.json"
    with session.open(db.Settings(dsn=dsn)) as s:
        run_ = started(one_database.start(s, Request(save_plan=path)))
        next(run_.batches)
        with pytest.raises(RuntimeError):
            run_.batches.throw(RuntimeError("stopped"))
    assert list(tmp_path.iterdir()) == []


def test_plans_written_incrementally_match_the_whole_writer(tmp_path: Path):
    rows_ = [{"id": n, "note": "é\u202e"} for n in range(5)]
    where = {"database": "d", "system_identifier": "1", "table": "public.jobs"}
    with plans.writing_rows(tmp_path / "a.json", "f/1", where) as write:
        write(rows_[:2])
        write([])
        write(rows_[2:])
    text = (tmp_path / "a.json").read_text()
    made_at = json.loads(text)["made_at"]
    assert (
        text
        == output.to_json({"format": "f/1", "made_at": made_at, "where": where, "rows": rows_})
        + "\n"
    )
    with plans.writing_rows(tmp_path / "b.json", "f/1", where):
        pass
    assert json.loads((tmp_path / "b.json").read_text())["rows"] == []


def test_a_commits_question_holds_its_first_rows_and_counts_the_rest(conn, dsn):
    """A commit without --yes shows its dry run first: the first rows and the counts of
    every row (total, by action, by worker), never a list of them all."""
    expired_jobs(conn, session.STREAM_CHUNK + 300)
    with session.open(db.Settings(dsn=dsn)) as s:
        steps = one_database.start(s, Request(commit=True))
        asked = next(steps)
        steps.close()  # the question refused: nothing written
    question, about = reclaim_lines.asked(asked.question).question, asked.rows
    expected = expected_rows(dsn)
    requeue = sum(r["action"] == "requeue" for r in expected)
    assert question == (
        f"Reclaim {len(expected)} expired job(s): {requeue} requeue, "
        f"{len(expected) - requeue} fail?"
    )
    assert isinstance(about, list) and len(about) == one_database.PREVIEW_ROWS
    assert steady(json.loads(output.to_json(about))) == expected[: one_database.PREVIEW_ROWS]
    assert about.total == len(expected)
    assert dict(about.workers) == {"dead": len(expected)}
    assert conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'processing'").fetchone()[
        "n"
    ] == len(expected)  # nothing changed


# ---------------------------------------------------------------- every text a row holds
HOSTILE = 3  # expired jobs whose worker name, kind and last_error are each BIG
SMALL = 100_000  # what any command's output stays under, whatever those texts' size


def hostile(conn, run, count: int = HOSTILE, *, policy: str = "auto") -> list[str]:
    """``count`` expired jobs (a kind column mapped) whose worker name, kind and last_error
    are each BIG characters: the same first BIG - 9 characters, then the job's id (so that
    every cut of them reads the same, and only the whole value tells them apart). Their
    worker names, in the jobs' order."""
    conn.execute("ALTER TABLE jobs ADD COLUMN kind text")
    assert run("schema", "apply", "--column", "kind=kind", "--yes").code == 0
    add_jobs(conn, count, policy=policy)
    conn.execute(
        "UPDATE jobs SET status = 'processing', attempts = 1, reserved_by = t.v, kind = t.v, "
        "last_error = t.v, reserved_at = now() - interval '2 minutes', "
        "attempt_token = gen_random_uuid(), lease_expires_at = now() - interval '1 minute' "
        "FROM (SELECT id, repeat('w', %s) || lpad(id::text, 9, '0') AS v FROM jobs) t "
        "WHERE t.id = jobs.id",
        (BIG - 9,),
    )
    return [
        r["reserved_by"]
        for r in conn.execute("SELECT reserved_by FROM jobs ORDER BY id").fetchall()
    ]


def test_stuck_cuts_each_text_a_row_holds_and_filters_by_the_whole_name(conn, run):
    workers = hostile(conn, run)
    cut = shown(workers[0])
    assert {shown(w) for w in workers} == {cut}  # every cut reads the same
    for args in (["stuck"], ["stuck", "--expiring-within", "1m"]):
        found = run(*args, "-o", "json")
        assert found.code == 0, found.err
        assert len(found.out) < SMALL  # not 3 x 5 MB: cut before it crossed the wire
        rows_ = json.loads(found.out)
        assert [(r["reserved_by"], r["kind"]) for r in rows_] == [(cut, cut)] * HOSTILE
    table = run("stuck")
    assert table.code == 0 and NOTE in table.out and len(table.out) < SMALL
    csv_out = run("stuck", "-o", "csv")
    assert csv_out.code == 0 and len(csv_out.out) < SMALL
    only = json.loads(run("stuck", "--worker", workers[1], "-o", "json").out)
    assert len(only) == 1 and only[0]["reserved_by"] == cut  # compared whole, shown cut
    assert json.loads(run("stuck", "--worker", cut, "-o", "json").out) == []  # not a name
    full = json.loads(run("stuck", "--full", "-o", "json").out)
    assert [(r["reserved_by"], r["kind"]) for r in full] == [(w, w) for w in workers]


def test_the_dry_run_its_plan_and_the_commit_return_the_rows_cut(conn, run, tmp_path: Path):
    """The reclaim statement returns the rows as lease_columns shows them: a commit of rows
    whose worker name is 5 MB sends back 4 KB each, and reclaims every one."""
    workers = hostile(conn, run)
    cut = shown(workers[0])
    dry = run("reclaim", "-o", "json")
    assert dry.code == 0, dry.err
    assert len(dry.out) < SMALL
    assert [r["reserved_by"] for r in json.loads(dry.out)] == [cut] * HOSTILE
    assert [r["reserved_by"] for r in json.loads(run("reclaim", "--full", "-o", "json").out)] == (
        workers
    )
    path = tmp_path / "plan.json"
    assert run("reclaim", "--save-plan", str(path), "-o", "jsonl").code == 0
    assert path.stat().st_size < SMALL
    done = run("reclaim", "--commit", "--plan", str(path), "--yes", "-o", "json")
    assert done.code == 0, done.err
    assert len(done.out) < SMALL
    applied = json.loads(done.out)
    assert [(r["reserved_by"], r["kind"], r["applied"]) for r in applied] == (
        [(cut, cut, True)] * HOSTILE
    )
    left = conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'processing'").fetchone()
    assert left["n"] == 0


def test_a_commit_with_full_returns_every_byte(conn, run):
    workers = hostile(conn, run, 2)
    done = run("reclaim", "--commit", "--yes", "--full", "-o", "json")
    assert done.code == 0, done.err
    assert [r["reserved_by"] for r in json.loads(done.out)] == workers


def test_summary_groups_by_the_whole_name_and_shows_it_cut(conn, run):
    """Three workers whose names differ only past the cut are three groups, each shown cut."""
    workers = hostile(conn, run)
    cut = shown(workers[0])
    found = run("summary", "-o", "json")
    assert found.code == 0, found.err
    assert len(found.out) < SMALL
    assert [(w["worker"], w["processing"]) for w in json.loads(found.out)["workers"]] == (
        [(cut, 1)] * HOSTILE
    )
    table = run("summary")
    assert table.code == 0 and len(table.out) < SMALL
    for by in ("worker", "kind"):
        grouped = run("summary", "--by", by, "-o", "json")
        assert grouped.code == 0, grouped.err
        assert len(grouped.out) < SMALL
        assert [(g[by], g["stuck"]) for g in json.loads(grouped.out)["groups"]] == (
            [(cut, 1)] * HOSTILE
        )
    full = json.loads(run("summary", "--full", "-o", "json").out)
    assert sorted(w["worker"] for w in full["workers"]) == workers


def test_metrics_label_a_long_kind_cut(conn, run):
    """A kind's label is cut at LABEL_CHARS (one series for kinds that read the same once cut,
    their counts summed), and the exposition stays small."""
    hostile(conn, run)
    result = run("metrics")
    assert result.code == 0, result.err
    assert len(result.out) < SMALL
    label = shown("w" * BIG, metrics.LABEL_CHARS)
    stuck = [
        line
        for line in result.out.splitlines()
        if line.startswith("jobctl_jobs_by_kind{") and 'state="stuck"' in line
    ]
    assert len(stuck) == 1 and f'kind="{label[: metrics.LABEL_CHARS]}' in stuck[0]
    assert stuck[0].endswith(f" {HOSTILE}")


def test_review_report_and_the_operator_writes_read_the_texts_cut(conn, run):
    """The parked jobs' worker (from the history: as it keeps it) and last_error, the
    report's workers and a requeue's result come back cut. Names that differ only past the
    history's cut are one worker of the report: the history keeps no more of them."""
    workers = hostile(conn, run, policy="manual")
    cut = shown(workers[0])
    assert run("reclaim", "--commit", "--yes").code == 0
    found = run("review", "-o", "json")
    assert found.code == 0, found.err
    assert len(found.out) < SMALL
    assert [(r["last_worker"], r["kind"]) for r in json.loads(found.out)] == (
        [(kept(workers[0]), cut)] * HOSTILE
    )
    full = json.loads(run("review", "--full", "-o", "json").out)
    assert [(r["last_worker"], r["kind"]) for r in full] == [
        (kept(w), w) for w in workers
    ]  # the row's kind whole; the worker as the history keeps it
    report = run("report", "--since", "1h", "-o", "json")
    assert report.code == 0, report.err
    assert len(report.out) < SMALL
    expired = json.loads(report.out)["expired"]
    assert [(w["worker"], w["jobs"]) for w in expired] == [(kept(workers[0]), HOSTILE)]


def test_the_operator_writes_read_the_texts_cut(conn, run):
    """requeue/fail read each row (manual_read, bulk_candidates: the fence and what the
    result says of it) with its worker cut, and --worker still compares the whole name."""
    workers = hostile(conn, run)
    cut = shown(workers[0])
    (first, second, third) = [r["id"] for r in conn.execute("SELECT id FROM jobs ORDER BY id")]
    failed = run("fail", str(first), "--reason", "gone", "--yes", "-o", "json")
    assert failed.code == 0, failed.err
    assert len(failed.out) < SMALL
    assert [(r["outcome"], r["reserved_by"]) for r in json.loads(failed.out)] == [("failed", cut)]
    bulk = run("requeue", "--worker", workers[2], "--status", "processing", "--yes", "-o", "json")
    assert bulk.code == 0, bulk.err
    assert len(bulk.out) < SMALL
    assert [(r["id"], r["reserved_by"]) for r in json.loads(bulk.out)] == [(third, cut)]
    assert (
        conn.execute("SELECT status FROM jobs WHERE id = %s", (second,)).fetchone()["status"]
        == "processing"
    )


def test_top_and_the_operator_reads_get_the_texts_cut(conn, dsn, run):
    """top's refresh (stuck's rows) and manual_read (what its writes check the row against)
    cut alike, so a row top shows still matches the row its write reads."""
    workers = hostile(conn, run)
    cut = shown(workers[0])
    with session.open(db.Settings(dsn=dsn)) as s:
        snap = console.refresh(s, None, console.Ask(dt.timedelta(seconds=30), 100))
        assert [r["reserved_by"] for r in snap.stuck] == [cut] * HOSTILE
        with s.transaction(read_only=True):
            seen = s.row("manual_read", {"id": snap.stuck[0]["id"], "cut": triage.DISPLAY_CHARS})
        assert seen is not None
        assert {k: seen[k] for k in console.SEEN_FIELDS if k in seen} == {
            k: snap.stuck[0][k] for k in console.SEEN_FIELDS if k in seen
        }
        assert seen["last_error"] == cut
        with s.transaction(read_only=True):
            offered = s.rows("complete_workers", {"prefix": ""})
        assert offered == []  # no shell is sent a 5 MB name to complete


def test_a_notice_quotes_a_long_message_cut():
    """A database's message can quote the application's text (a trigger's RAISE of a long
    value): every receiver gets its first SUMMARY_CHARS characters and a note."""
    message = "é" * (notify.SUMMARY_CHARS + 10)
    assert notify.bounded(message) == f"{'é' * notify.SUMMARY_CHARS}… (20 more bytes)"
    assert notify.bounded("short") == "short"

"""The on-call's screen: jobctl run on a pseudo-terminal of 80x24 and 120x40,
read back as a terminal shows it (tests/screens.py, pyte). No line wider than the terminal,
one line per job, ids, workers and actions whole, tokens whole where they are copied."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import scratch_database
from helpers import snapshot
from rich.cells import cell_len
from screens import WORKERS, on_terminal, stage

pytest.importorskip("pyte")

SIZES = [(80, 24), (120, 40)]


@pytest.fixture(scope="module")
def incident(server_dsn, template):
    """One staged incident for the read-only commands of this module."""
    with scratch_database(server_dsn, "jobctl_screen", template) as dsn:
        yield dsn, stage(dsn)


def expired_rows(dsn: str) -> list[tuple[str, str, str]]:
    """Each stuck job's id, worker and action, as jobctl stuck -o csv gives them."""
    out = subprocess.run(
        [sys.executable, "-m", "jobctl", "stuck", "-o", "csv"],
        env={**os.environ, "JOBCTL_DSN": dsn},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    head, *body = [line.split(",") for line in out.splitlines()]
    at = {name: head.index(name) for name in ("id", "reserved_by", "action")}
    return [(r[at["id"]], r[at["reserved_by"]], r[at["action"]]) for r in body]


def fits(shot, columns: int) -> None:
    wide = [line for line in shot.written_lines() if cell_len(line) > columns]
    assert not wide, f"lines wider than {columns} columns: {wide}"


def one_line_per_job(lines: list[str], jobs: list[tuple[str, str, str]]) -> None:
    """Each job on exactly one line that starts with its id and holds its worker and
    action whole."""
    for job_id, worker, action in jobs:
        found = [line for line in lines if re.match(rf"{job_id}\s+api-worker", line)]
        assert len(found) == 1, (job_id, found)
        assert worker in found[0] and re.search(rf"\(?{action}\)?", found[0]), found[0]


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_stuck_one_line_per_job(incident, columns, rows):
    dsn, _ = incident
    shot = on_terminal(["stuck"], columns=columns, rows=rows, dsn=dsn, screen_rows=100)
    assert shot.code == 0
    fits(shot, columns)
    jobs = expired_rows(dsn)
    assert len(jobs) == 12
    one_line_per_job(shot.lines, jobs)
    header = shot.lines[0].split()
    for essential in ("ID", "WORKER", "POLICY", "OVERDUE", "HEARTBEAT", "ACTION"):
        assert essential in header
    assert "2026-" not in shot.text and "+00:00" not in shot.text  # times short, not ISO
    assert re.search(r"\b\d+m\d*s?\b", shot.text)  # durations as people read them


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_expiring_within_never_shows_an_action_as_if_it_applied_now(incident, columns, rows):
    dsn, _ = incident
    args = ["stuck", "--expiring-within", "5m"]
    shot = on_terminal(args, columns=columns, rows=rows, dsn=dsn, screen_rows=100)
    assert shot.code == 0
    fits(shot, columns)
    live = [line for line in shot.lines if WORKERS[3] in line and "expiring" in line]
    assert len(live) == 4
    for line in live:
        assert re.search(r"\bin \d[\dms.]*\b", line) and "(requeue)" in line
        assert not re.search(r"(?<!\()requeue(?!\))", line)
    assert "(action): what reclaim will do once the lease runs out, not now" in shot.text
    one_line_per_job(shot.lines, expired_rows(dsn))


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_watch_fits_the_screen_and_counts_what_it_hides(incident, columns, rows):
    dsn, _ = incident
    args = ["stuck", "--expiring-within", "5m", "--watch", "--count", "1"]
    shot = on_terminal(args, columns=columns, rows=rows, dsn=dsn)
    assert shot.code == 0
    fits(shot, columns)
    assert "Ctrl-C to stop" in shot.text and '{"at"' not in shot.text
    shown = [line for line in shot.lines if any(w in line for w in WORKERS)]
    assert len(shown) <= rows - 3
    if len(shown) < 16:  # 12 expired and 4 live rows: 80x24 cannot show them all
        hidden = re.search(r"… (\d+) more row\(s\) not shown", shot.text)
        assert hidden and int(hidden.group(1)) == 16 - len(shown)
    else:
        assert "not shown" not in shot.text


@pytest.mark.parametrize("interrupt", [None, b"Ctrl-C to stop"], ids=["count", "ctrl-c"])
def test_watch_fuller_than_the_screen_keeps_its_title_at_exit(incident, interrupt):
    """16 rows on an 18-line terminal: the refresh is cut to fit, and leaving (after
    --count, or at Ctrl-C) scrolls nothing away: the title stays the first line, once."""
    dsn, _ = incident
    args = ["stuck", "--expiring-within", "5m", "--watch"]
    args += ["--count", "1"] if interrupt is None else []
    shot = on_terminal(args, columns=80, rows=18, dsn=dsn, interrupt_at=interrupt)
    assert shot.code == 0
    titles = [n for n, line in enumerate(shot.lines) if "Ctrl-C to stop" in line]
    assert titles == [0], shot.text
    assert re.search(r"… \d+ more row\(s\) not shown", shot.text)


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_reclaim_dry_run_one_line_per_job(incident, columns, rows):
    dsn, _ = incident
    shot = on_terminal(
        ["reclaim", "--dry-run"], columns=columns, rows=rows, dsn=dsn, screen_rows=60
    )
    assert shot.code == 0
    fits(shot, columns)
    one_line_per_job(shot.lines, expired_rows(dsn))
    assert "dry run: 9 would be requeued, 3 failed, 0 skipped; nothing changed" in shot.text


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_summary_history_show_explain_fit(incident, columns, rows):
    dsn, ids = incident
    for args in (["summary"], ["history", ids["again"]], ["show", ids["again"]]):
        shot = on_terminal(
            [str(a) for a in args], columns=columns, rows=rows, dsn=dsn, screen_rows=80
        )
        assert shot.code == 0, shot.text
        fits(shot, columns)
        for worker in WORKERS:  # every worker named in it is whole on one line
            if worker[:12] in shot.text:
                assert worker in shot.text
    shot = on_terminal(["explain", str(ids["again"])], columns=columns, rows=rows, dsn=dsn)
    fits(shot, columns)
    assert any("jobctl reclaim --dry-run" in line for line in shot.lines)


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_review_and_events_fit_one_line_each(incident, columns, rows):
    dsn, ids = incident
    review = on_terminal(["review"], columns=columns, rows=rows, dsn=dsn, screen_rows=80)
    assert review.code == 0, review.text
    fits(review, columns)
    parked = [line for line in review.lines if re.match(rf"{ids['parked']}\s+manual", line)]
    assert len(parked) == 1 and WORKERS[3] in parked[0]
    events = on_terminal(["events"], columns=columns, rows=rows, dsn=dsn, screen_rows=80)
    assert events.code == 0, events.text
    fits(events, columns)
    reclaimed = [line for line in events.lines if " reclaimed " in f" {line} "]
    assert len(reclaimed) == 2


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_tokens_whole_in_show_and_history(incident, columns, rows):
    dsn, ids = incident
    for command in ("show", "history"):
        shot = on_terminal(
            [command, str(ids["again"])], columns=columns, rows=rows, dsn=dsn, screen_rows=80
        )
        fits(shot, columns)
        assert any(ids["token"] in line for line in shot.lines), (command, shot.text)
    history = on_terminal(
        ["history", str(ids["again"])], columns=columns, rows=rows, dsn=dsn, screen_rows=80
    )
    attempts = [line for line in history.lines if re.match(r"[12]\s+api-worker", line)]
    assert len(attempts) == 2 and all(re.search(r"[0-9a-f-]{36}", a) for a in attempts)
    assert "reclaimed" in history.text  # the outcome whole, not recl/aime/d


def test_no_color_keeps_the_layout_without_colour(incident):
    dsn, _ = incident
    shot = on_terminal(["stuck"], dsn=dsn, env={"NO_COLOR": "1"}, screen_rows=60)
    assert shot.code == 0 and shot.lines[0].startswith("ID  WORKER")
    fits(shot, 80)
    assert not re.search(r"\x1b\[[0-9;]*m", shot.raw)  # no colour, no bold


def test_bare_jobctl_prints_the_help():
    shot = on_terminal([], columns=80, rows=24, screen_rows=80)
    assert shot.code == 0
    assert "Usage: jobctl" in shot.text and "Core commands:" in shot.text
    assert "jobctl: error" not in shot.text
    fits(shot, 80)


def test_help_summaries_whole_at_120_columns():
    shot = on_terminal(["--help"], columns=120, rows=40, screen_rows=80)
    commands = shot.text.split("Core commands:")[1]
    assert "..." not in commands


PG_VARIABLES = (
    "JOBCTL_DSN",
    "DATABASE_URL",
    "PGHOST",
    "PGPORT",
    "PGDATABASE",
    "PGUSER",
    "PGSERVICE",
    "PGSERVICEFILE",
)


def test_no_dsn_says_so_and_how_to_set_one():
    shot = on_terminal(["stuck"], unset=PG_VARIABLES, screen_rows=40)
    assert shot.code == 1
    text = " ".join(line.strip() for line in shot.lines)
    assert "no --dsn, JOBCTL_DSN or DATABASE_URL is set, so libpq's defaults chose this" in text
    assert "Traceback" not in shot.raw


def test_missing_table_names_server_database_and_user(empty_dsn):
    shot = on_terminal(["stuck"], dsn=empty_dsn, screen_rows=40)
    text = " ".join(line.strip() for line in shot.lines)
    dbname = re.search(r"dbname=(\w+)", empty_dsn).group(1)
    assert shot.code == 1
    assert f"table jobs does not exist in database {dbname} on " in text
    assert "as user " in text and "JOBCTL_TABLE" in text and "JOBCTL_DSN" in text


def test_ctrl_c_at_the_prompt_cancels(dsn, conn):
    stage(dsn)
    before = snapshot(conn)
    shot = on_terminal(["reclaim", "--commit"], dsn=dsn, interrupt_at=b"[y/N]: ", screen_rows=80)
    assert shot.code == 130
    assert "jobctl: cancelled; nothing changed" in shot.text and "error" not in shot.text
    assert snapshot(conn) == before


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_commit_shows_what_it_will_do_before_asking(dsn, conn, columns, rows):
    stage(dsn)
    jobs = expired_rows(dsn)
    shot = on_terminal(
        ["reclaim", "--commit"], columns=columns, rows=rows, dsn=dsn, answer="y", screen_rows=100
    )
    assert shot.code == 0, shot.text
    fits(shot, columns)
    asked = next(i for i, line in enumerate(shot.lines) if "[y/N]" in line)
    one_line_per_job(shot.lines[:asked], jobs)  # the dry run's table, before the question
    assert "reclaimed: 9 requeued, 3 failed, 0 skipped" in shot.text


def test_parked_jobs_explain_suggests_only_accepted_commands(dsn):
    ids = stage(dsn)
    shot = on_terminal(["explain", str(ids["parked"])], columns=120, dsn=dsn, screen_rows=60)
    text = " ".join(line.strip() for line in shot.lines)
    suggested = re.findall(r"jobctl (requeue|fail) (\S+)", text)
    assert suggested, text
    for command, job_id in suggested:
        done = subprocess.run(
            [sys.executable, "-m", "jobctl", command, job_id, "--reason", "checked", "--yes"],
            env={**os.environ, "JOBCTL_DSN": dsn},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, (command, done.stderr)


def test_schema_check_shows_a_failed_checks_detail_whole(dsn, conn):
    conn.execute("DROP INDEX idx_jobs_processing_timeout")
    plain = subprocess.run(
        [sys.executable, "-m", "jobctl", "schema", "check", "-o", "json"],
        env={**os.environ, "JOBCTL_DSN": dsn},
        capture_output=True,
        text=True,
    )
    failed = [c for c in json.loads(plain.stdout) if not c["ok"]]
    assert failed
    shot = on_terminal(["schema", "check"], columns=80, rows=24, dsn=dsn, screen_rows=60)
    assert shot.code == 4
    fits(shot, 80)
    told = " ".join(line.strip() for line in shot.lines)
    for check in failed:
        assert f"{check['check']}: {check['detail']}" in told

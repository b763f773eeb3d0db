"""jobctl report on a staged incident: the counts of each section checked, not only printed."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid

import psycopg
import pytest
import rendered
from helpers import add_jobs, claim_all
from psycopg import conninfo

from jobctl import db, lease
from jobctl.db import session

# what an application writes in its rows to forge a postmortem
HEADING = "</td></tr></table><h1>Fake heading: incident resolved</h1>"
PHISH = (
    '<img src="https://attacker.example/pixel.png"> '
    "[Approve refund](https://attacker.example/phish) **ROOT CAUSE**"
)
COLUMNS = "web-9 | mallory@ops.example | postgres | customer approved"
REASON = "`rm -rf` ``x`` ~~gone~~ _a_ www.attacker.example \\ &lt;b&gt; @security-team |"
ACTOR = "<b>eve</b>@ops\n# Resolved"


def stage(conn, dsn, run) -> dict[str, list[int]]:
    """A deploy kills web-2 (3 auto, 2 manual jobs) and web-3 (an auto job on its last
    attempt); reclaim; workers claim two requeued jobs again; one of them dies again and is
    reclaimed a second time; bob requeues a manual job, carol fails the other."""
    auto = add_jobs(conn, 3)
    manual = add_jobs(conn, 2, policy="manual")
    (last,) = add_jobs(conn, 1, max_attempts=1)
    assert len(claim_all(dsn, 5, worker="web-2", lease_seconds=-60)) == 5
    assert len(claim_all(dsn, 1, worker="web-3", lease_seconds=-60)) == 1
    assert run("reclaim", "--commit", "--yes").code == 0
    again = claim_all(dsn, 1, worker="web-4", lease_seconds=-60)  # dies too
    assert run("reclaim", "--commit", "--yes").code == 0
    with psycopg.connect(dsn, autocommit=True) as c:
        w = lease.Worker(c, "web-5", lease_seconds=60)
        first, second = w.claim(), w.claim()
        assert first is not None and second is not None
        w.complete(first)  # under the default history: no claim time kept
    assert (
        run("--actor", "bob@ops", "requeue", str(manual[0]), "--reason", "safe", "--yes").code == 0
    )
    assert run("--actor", "carol@ops", "fail", str(manual[1]), "--reason", "dup", "--yes").code == 0
    return {"auto": auto, "manual": manual, "last": [last], "again": [again[0].id]}


def test_report_of_a_staged_incident(conn, dsn, run):
    jobs = stage(conn, dsn, run)
    result = run("report", "--since", "1h", "-o", "json")
    assert result.code == 0, result.err
    page = json.loads(result.out)
    expired = {r["worker"]: r for r in page["expired"]}
    assert {w: (r["jobs"], r["reclaims"]) for w, r in expired.items()} == {
        "web-2": (5, 5),
        "web-3": (1, 1),
        "web-4": (1, 1),
    }
    assert all(r["first_expiry"] is not None for r in page["expired"])
    by_outcome = {}
    for r in page["reclaims"]:
        by_outcome[r["to_status"]] = by_outcome.get(r["to_status"], 0) + r["reclaims"]
    assert by_outcome == {"queued": 4, "failed": 3}
    assert {r["actor"] for r in page["reclaims"]} == {"tester@ci"}
    assert page["reclaimed_repeatedly"] == [
        {"id": jobs["again"][0], "reclaims": 2, "workers": "web-2, web-4"}
    ]
    people = {(r["actor"], r["event"]): r for r in page["people"]}
    assert set(people) == {("bob@ops", "requeued"), ("carol@ops", "manually_failed")}
    assert people[("bob@ops", "requeued")]["ids"] == [jobs["manual"][0]]
    assert people[("carol@ops", "manually_failed")]["reason"] == "dup"
    review = page["awaiting_review"]
    assert review["jobs"] == 1 and review["by_why"] == {"attempts_exhausted": 1}
    assert [r["id"] for r in review["oldest"]] == jobs["last"]
    latency = page["latency"]
    # back to the queue: 3 by the first reclaim, 1 by the second, 1 by bob's requeue
    assert latency["returned"] == 5
    # web-4's claim (an ended attempt) and web-5's live one are known; web-5's completed one
    # the default history cannot tell; the job reclaimed twice and bob's still wait
    assert (latency["claimed"], latency["unknown"], latency["waiting"]) == (2, 1, 2)
    assert latency["longest_waiting_s"] > 0
    assert latency["p50_s"] is not None and latency["max_s"] >= latency["p50_s"] >= 0
    assert page["still_expired"] == 0

    text = run("report", "--since", "1h")
    assert text.code == 0, text.err
    md = text.out
    for heading in (
        "# Incident report: `public.jobs`",
        "## What expired",
        "## What reclaim did",
        "## What people did",
        "## Still waiting for review",
        "## Queue latency",
    ):
        assert heading in md
    assert "7 job(s) whose lease expired were reclaimed by jobctl" in md
    assert "| `web-2` | 5 |" in md
    assert f"Reclaimed more than once: {jobs['again'][0]} (2 times: `web-2, web-4`)." in md
    assert f"| `bob@ops` | requeued | 1 | `safe` | {jobs['manual'][0]} |" in md
    assert "1 job(s) wait for a human (attempts exhausted: 1)" in md
    assert "5 return(s) to the queue" in md
    # a page in any Markdown: every command a code span (pandoc's plain
    # Markdown makes -- an en dash outside one), each latency figure a paragraph of its own
    prose = re.sub(r"`[^`]*`", "", md)
    assert "--" not in prose.replace("|---", "").replace("---|", ""), prose
    assert not re.search(r"\bjobctl [a-z]", prose), prose
    assert "\n\nTime to the next claim:" in md and "\n\nNow: " in md
    # a window before the incident: nothing happened
    empty = run("report", "--since", "3h", "--until", "2h").out
    assert "No lease expired and was reclaimed by jobctl in the window." in empty
    assert "No job went back to the queue in the window." in empty
    assert run("report", "--since", "soon").code == 2


def test_hostile_text_does_not_reach_the_page_raw(conn, dsn, run):
    (job,) = add_jobs(conn, 1)
    claim_all(dsn, 1, worker="web\x1b]0;owned\x07|x", lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    md = run("report", "--since", "1h").out
    assert "\x1b" not in md and "\x07" not in md
    assert "`web\\x1b]0;owned\\x07\\|x`" in md and job
    assert "web\\x1b]0;owned\\x07|x" in rendered.render(md).code


def test_row_text_renders_as_text_not_markdown_or_html(conn, dsn, run):
    """Worker names, a reason and an actor that would be a heading, an image, a link, bold,
    strikethrough, columns, autolinks and HTML: rendered by CommonMark and by GitHub's
    parser, the page has only its own headings, no link, image or tag of the row's, every
    table row has the header's cells, and each value reads back exactly, as code."""
    for worker in (HEADING, PHISH, COLUMNS):
        add_jobs(conn, 1, policy="manual")
        assert len(claim_all(dsn, 1, worker=worker, lease_seconds=-60)) == 1
    assert run("reclaim", "--commit", "--yes").code == 0
    assert run("--actor", ACTOR, "requeue", "1", "--reason", REASON, "--yes").code == 0
    result = run("report", "--since", "1h")
    assert result.code == 0, result.err
    page = rendered.render(result.out)
    assert not rendered.FORBIDDEN_TOKENS & {t for t in page.tokens if t != "heading_open"}, (
        page.tokens
    )
    assert page.tokens.count("heading_open") == 2 * 6  # the page's own, in both parsers
    assert page.tags.count("h1") == 1 and page.tags.count("h2") == 5
    assert not {"a", "img", "b", "strong", "em", "del", "script"} & set(page.tags)
    assert set(page.tags) <= {"h1", "h2", "p", "table", "thead", "tbody", "tr", "th", "td", "code"}
    assert page.tables and all(len(set(rows)) == 1 for rows in page.tables), page.tables
    for value in (HEADING, PHISH, COLUMNS, REASON, ACTOR.replace("\n", "\\n")):
        assert value in page.code, value


def test_events_format_github_keeps_each_value_in_its_column(conn, dsn, run):
    """A worker name with pipes in it never adds columns to --format github/pipe: the real
    actor stays in its own cell."""
    add_jobs(conn, 1)
    claim_all(dsn, 1, worker=COLUMNS, lease_seconds=-60)
    assert run("--actor", "alice@ops", "reclaim", "--commit", "--yes").code == 0
    for fmt in ("github", "pipe"):
        result = run("events", "--since", "1h", "--format", fmt)
        assert result.code == 0, result.err
        page = rendered.render(result.out)
        ((header, *cells),) = page.tables
        assert cells and all(n == header for n in cells), page.tables
        ((names, *found),) = page.cells
        reclaim = dict(zip(names, found[0], strict=True))
        assert (reclaim["worker"], reclaim["actor"]) == (COLUMNS, "alice@ops"), found
        assert not rendered.FORBIDDEN_TOKENS & set(page.tokens) and "a" not in page.tags
        assert COLUMNS in page.code and "alice@ops" in page.code


@pytest.fixture
def application(server_dsn, dsn):
    """The application's role, as its workers have it: SELECT, INSERT, UPDATE on the jobs
    table (so UPDATE of reclaim_count and jobctl_action too), not one of jobctl's roles."""
    name = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"GRANT USAGE ON SCHEMA public, jobctl TO {name}")
        c.execute(f"GRANT SELECT, INSERT, UPDATE ON jobs TO {name}")
    yield name, conninfo.make_conninfo(dsn, user=name)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"DROP OWNED BY {name}")
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"DROP ROLE IF EXISTS {name}")


APP_RECLAIM = """
UPDATE jobs SET status = 'queued', reclaim_count = reclaim_count + 1, reserved_by = NULL,
       reserved_at = NULL, heartbeat_at = NULL, lease_expires_at = NULL, attempt_token = NULL,
       last_error = 'lease expired before completion'{declared}
WHERE id = %s
"""


def test_only_jobctls_reclaims_are_counted(conn, dsn, run, application):
    """The application raises reclaim_count and requeues a job itself, once on a live lease
    and once on an expired one claiming to be alice's reclaim; jobctl reclaims a third. The
    history calls all three reclaimed; the report counts jobctl's alone, and names the
    application's role for the others."""
    role, app_dsn = application
    live, forged, _real = add_jobs(conn, 3)
    (claim,) = claim_all(dsn, 1, worker="web-live", lease_seconds=600)
    assert claim.id == live
    claim_all(dsn, 2, worker="web-dead", lease_seconds=-60)
    with psycopg.connect(app_dsn) as c:
        c.execute(APP_RECLAIM.format(declared=""), (live,))
    with psycopg.connect(app_dsn) as c:
        c.execute("SET LOCAL jobctl.actor = 'alice@ops'")
        c.execute(APP_RECLAIM.format(declared=", jobctl_action = 'reclaimed'"), (forged,))
    assert run("--actor", "bob@ops", "reclaim", "--commit", "--yes").code == 0
    kinds = json.loads(run("events", "--since", "1h", "-o", "json").out)
    assert [e["event"] for e in kinds].count("reclaimed") == 3  # the history calls them so

    page = json.loads(run("report", "--since", "1h", "-o", "json").out)
    assert [(r["worker"], r["jobs"]) for r in page["expired"]] == [("web-dead", 1)]
    assert page["expired_totals"] == {"workers": 1, "jobs": 1, "reclaims": 1}
    assert [(r["actor"], r["reclaims"]) for r in page["reclaims"]] == [("bob@ops", 1)]
    others = page["not_jobctl_reclaims"]
    assert others["changes"] == 2 and others["all_roles"] == 1
    assert [(r["db_role"], r["changes"], r["jobs"], r["live_leases"]) for r in others["roles"]] == [
        (role, 2, 2, 1)
    ]
    md = run("report", "--since", "1h").out
    assert "1 job(s) whose lease expired were reclaimed by jobctl" in md
    assert "Not counted: 2 change(s) the history records as reclaimed" in md
    assert f"by role `{role}` (2 change(s) of 2 job(s), 1 of a live lease)" in md
    assert "alice@ops" not in md


def test_each_section_names_at_most_twenty_and_counts_the_rest(conn, dsn, run):
    """25 workers' expired leases, 25 jobs awaiting review: the server counts them all, the
    page names 20 of each and says how many more and where they are."""
    add_jobs(conn, 25, policy="manual")
    for n in range(25):
        assert len(claim_all(dsn, 1, worker=f"web-{n:02}", lease_seconds=-60)) == 1
    assert run("reclaim", "--commit", "--yes").code == 0
    page = json.loads(run("report", "--since", "1h", "-o", "json").out)
    assert len(page["expired"]) == 20
    assert page["expired_totals"] == {"workers": 25, "jobs": 25, "reclaims": 25}
    review = page["awaiting_review"]
    assert review["jobs"] == 25 and review["by_why"] == {"manual_policy": 25}
    assert len(review["oldest"]) == 20
    md = run("report", "--since", "1h").out
    assert "25 job(s) whose lease expired were reclaimed by jobctl" in md
    assert "... and 5 more worker(s) not listed: `jobctl events --event reclaimed --since " in md
    assert "... and 5 more job(s) not listed: `jobctl review -o jsonl` has them all." in md
    assert "25 job(s) wait for a human (manual policy: 25)" in md


def test_the_title_names_the_target(conn, dsn, run):
    from jobctl.ops import events
    from jobctl.ops import report as core
    from jobctl.render import markdown

    with session.open(db.Settings(dsn=dsn)) as s, s.transaction(read_only=True):
        found = core.collect(s, events.Window(since=dt.timedelta(hours=1)))
    page = markdown.report(found, target="search")
    assert page.startswith("# Incident report: `public.jobs` on `search`\n")
    assert markdown.report(found).startswith("# Incident report: `public.jobs`\n")

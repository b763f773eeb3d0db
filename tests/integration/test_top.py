"""jobctl top driven with Textual's pilot against a real PostgreSQL: keys pressed,
the screen's state asserted, and the writes checked in the table and its history, including
a requeue of a row another session changed between the screen's read and the write."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg
import pytest
from helpers import add_jobs, claim_all, snapshot

pytest.importorskip("textual")

from textual.widgets import DataTable, Static

from jobctl import db
from jobctl.cli.top.app import ConfirmScreen, PromptScreen, TextScreen, TopApp
from jobctl.cli.top.data import Site, Source
from jobctl.ops import console, sessions

HOUR = dt.timedelta(hours=1)


@contextlib.contextmanager
def console_app(dsn: str, *, writes: bool = False) -> Iterator[TopApp]:
    """The console on ``dsn``, its session opened again as the command's is when lost."""
    settings = db.Settings(dsn=dsn, actor="tester@ci")
    access = sessions.Access("top", writes=writes)
    with sessions.open(settings, access, say=lambda line: None) as (s, standing):
        ask = console.Ask(dt.timedelta(seconds=30), limit=500)
        site = Site(s, standing, reopen=lambda say: sessions.open(settings, access, say=say))
        source = Source([site], ask, writes)
        try:
            yield TopApp(source, HOUR)
        finally:
            source.close()


def drive(app: TopApp, script: Callable[[Any], Awaitable[None]], size=(80, 24)) -> None:
    async def go() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await script(pilot)

    asyncio.run(go())


def text_of(widget: Any) -> str:
    return str(widget.render())


@pytest.fixture
def incident(conn, dsn, run):
    """Three expired leases (w1, the oldest expiry first), one expiring in 10 s (w2), one
    job reclaim parked for review (manual policy), one queued."""
    parked = add_jobs(conn, 1, policy="manual")
    claim_all(dsn, 1, worker="deploy-7", lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes", "--worker", "deploy-7").code == 0
    add_jobs(conn, 3)
    expired = [c.id for c in claim_all(dsn, 3, worker="w1", lease_seconds=-30)]
    add_jobs(conn, 1)
    expiring = [c.id for c in claim_all(dsn, 1, worker="w2", lease_seconds=10)]
    add_jobs(conn, 1)
    return {"parked": parked[0], "expired": expired, "expiring": expiring}


def test_views_keys_and_quit(incident, run, dsn):
    with console_app(dsn) as app:

        async def script(pilot):
            state = app.status()
            assert state["view"] == "stuck"
            order = [str(i) for i in incident["expired"] + incident["expiring"]]
            assert state["ids"] == order  # expired, then expiring soon
            assert state["current"] == order[0]
            strip = text_of(app.query_one("#strip", Static))
            assert "expired 3" in strip and "expiring 1" in strip and "review 1" in strip
            assert "read-only" in strip
            await pilot.press("j", "j")
            assert app.status()["current"] == order[2]
            await pilot.press("k")
            assert app.status()["current"] == order[1]
            await pilot.press("down")
            assert app.status()["current"] == order[2]
            await pilot.press("2")
            assert app.status()["ids"] == [str(incident["parked"])]
            assert "2 awaiting review" in text_of(app.query_one("#title", Static))
            await pilot.press("3")
            summary = text_of(app.query_one("#summary-text", Static))
            assert "jobs by status" in summary and "w1" in summary
            await pilot.press("1")
            assert app.status()["current"] == order[2]  # the cursor still on its job
            await pilot.press("q")

        drive(app, script)
        assert app.return_code == 0


def test_refresh_keeps_cursor_and_marks_on_the_same_jobs(incident, conn, dsn):
    expired = [str(i) for i in incident["expired"]]
    with console_app(dsn) as app:

        async def script(pilot):
            await pilot.press("j")  # on the second job
            await pilot.press("space")  # marks it, moves to the third
            await pilot.press("k")
            assert app.status()["current"] == expired[1]
            assert app.status()["marks"] == {expired[1]}
            add_jobs(conn, 1)
            (older,) = claim_all(dsn, 1, worker="w3", lease_seconds=-600)  # sorts first
            app.reload()
            await pilot.pause()
            state = app.status()
            assert state["ids"][0] == str(older.id)
            assert state["current"] == expired[1] and state["marks"] == {expired[1]}
            assert "1 marked" in text_of(app.query_one("#title", Static))

        drive(app, script)


def test_filter_applies_on_enter_and_clears_on_escape(incident, dsn):
    with console_app(dsn) as app:

        async def script(pilot):
            await pilot.press("slash", *"W2", "enter")
            assert app.status()["ids"] == [str(i) for i in incident["expiring"]]
            assert "filter W2" in text_of(app.query_one("#title", Static))
            await pilot.press("escape")
            assert len(app.status()["ids"]) == 4
            await pilot.press("slash", "q", "escape")  # q typed in the filter quits nothing
            assert len(app.status()["ids"]) == 4 and app.return_code is None

        drive(app, script)


def test_detail_shows_attempts_tokens_events_and_explain(incident, conn, dsn):
    job = incident["expired"][0]
    token = conn.execute("SELECT attempt_token FROM jobs WHERE id = %s", (job,)).fetchone()
    with console_app(dsn) as app:

        async def script(pilot):
            await pilot.press("enter")
            assert isinstance(app.screen, TextScreen)
            shown = app.screen.text.plain
            assert f"job {job}" in shown and str(token["attempt_token"]) in shown
            assert "attempts" in shown and "events" in shown and "explain" in shown
            assert f"Job {job} is processing" in shown
            await pilot.press("escape")
            assert not isinstance(app.screen, TextScreen)

        drive(app, script)


def test_read_only_r_and_f_change_nothing_and_say_how(incident, conn, dsn):
    before = snapshot(conn)
    with console_app(dsn) as app:

        async def script(pilot):
            await pilot.press("space", "r")
            message = app.status()["message"]
            assert "read-only" in message and "--allow-writes" in message
            await pilot.press("f")
            assert not isinstance(app.screen, PromptScreen)

        drive(app, script)
    assert snapshot(conn) == before


def test_requeue_marked_rows_a_changed_one_is_a_conflict(incident, conn, dsn):
    first, second, _ = incident["expired"]
    with console_app(dsn, writes=True) as app:

        async def script(pilot):
            await pilot.press("space", "space")  # marks the first two
            with psycopg.connect(dsn, autocommit=True) as other:  # a late heartbeat
                other.execute(
                    "UPDATE jobs SET heartbeat_at = now() - interval '5 s', "
                    "lease_expires_at = lease_expires_at + interval '1 s' WHERE id = %s",
                    (first,),
                )
            await pilot.press("r")
            assert isinstance(app.screen, PromptScreen)
            await pilot.press(*"deploy killed w1", "enter")
            assert isinstance(app.screen, ConfirmScreen)
            listed = app.screen.text.plain
            assert f"  {first}  processing -> queued" in listed
            assert f"  {second}  processing -> queued" in listed
            assert "reason: deploy killed w1" in listed
            await pilot.press("y")
            assert isinstance(app.screen, TextScreen)
            outcome = app.screen.text.plain
            assert f"{first}  conflict" in outcome and "changed since the screen read it" in outcome
            assert f"{second}  requeued" in outcome
            assert "1 conflict" in app.status()["message"]
            await pilot.press("escape")
            assert app.status()["marks"] == {str(first)}  # the one not written stays marked

        drive(app, script)
    rows = {r["id"]: r["status"] for r in conn.execute("SELECT id, status FROM jobs").fetchall()}
    assert rows[first] == "processing" and rows[second] == "queued"
    audit = conn.execute(
        "SELECT job_id, actor, reason FROM jobctl.events WHERE event = 'requeued'"
    ).fetchall()
    assert [(a["job_id"], a["actor"], a["reason"]) for a in audit] == [
        (str(second), "tester@ci", "deploy killed w1")
    ]


def test_fail_needs_a_reason_and_anything_but_y_cancels(incident, conn, dsn):
    before = snapshot(conn)
    with console_app(dsn, writes=True) as app:

        async def script(pilot):
            await pilot.press("f", "enter")
            assert "fail needs a reason" in app.status()["message"]
            await pilot.press("r", *"q1 jk/ r", "enter")  # keys of the app, typed in a reason
            assert isinstance(app.screen, ConfirmScreen)
            assert "reason: q1 jk/ r" in app.screen.text.plain
            await pilot.press("n")
            assert "cancelled; nothing written" in app.status()["message"]
            await pilot.press("r", "escape")
            assert "cancelled" in app.status()["message"]

        drive(app, script)
    assert snapshot(conn) == before


def test_review_row_failed_fenced_and_plan_saved(incident, conn, dsn, run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (short paths to type)
    parked = incident["parked"]
    plan = tmp_path / "p.json"
    with console_app(dsn, writes=True) as app:

        async def script(pilot):
            await pilot.press("2", "p")
            assert isinstance(app.screen, PromptScreen)
            await pilot.press(*"p.json", "enter")
            assert "plan of 1 job(s) saved to p.json" in app.status()["message"]
            await pilot.press("1", "space", "space", "p", *"s.json", "enter")
            assert "plan of 2 job(s)" in app.status()["message"]
            await pilot.press("2", "f", *"not safe to retry", "enter", "y")
            assert f"{parked}  failed" in app.screen.text.plain

        drive(app, script)
    saved = json.loads(plan.read_text())
    assert saved["format"] == "jobctl-review-plan/1" and [r["id"] for r in saved["rows"]] == [
        parked
    ]
    row = conn.execute("SELECT status, last_error FROM jobs WHERE id = %s", (parked,)).fetchone()
    assert row == {"status": "failed", "last_error": "not safe to retry"}
    # the stuck rows' plan is a review plan requeue --plan applies, fenced as saved
    result = run("requeue", "--plan", str(tmp_path / "s.json"), "--yes", "-o", "json")
    assert result.code == 0, result.err
    assert [r["outcome"] for r in json.loads(result.out)] == ["requeued", "requeued"]


def test_hostile_worker_name_is_shown_as_written(conn, dsn):
    hostile = "[bold red]x[/]\x1b]0;pwned\x07\x1b[2J"
    add_jobs(conn, 1)
    claim_all(dsn, 1, worker=hostile, lease_seconds=-60)
    with console_app(dsn) as app:

        async def script(pilot):
            table = app.query_one("#rows", DataTable)
            worker = table.get_row_at(0)[2]
            assert worker.plain == "[bold red]x[/]\\x1b]0;pwned\\x07\\x1b[2J"
            assert not worker.spans  # no style came from the name
            await pilot.press("slash", *"[bold", "enter")
            assert len(app.status()["ids"]) == 1
            assert "filter [bold" in text_of(app.query_one("#title", Static))
            await pilot.press("enter")
            assert "\x1b" not in app.screen.text.plain and "[bold red]x[/]" in app.screen.text.plain

        drive(app, script)


def test_across_targets_rows_tagged_and_each_write_on_its_own_target(
    server_dsn, template, dsn, conn
):
    from conftest import scratch_database

    add_jobs(conn, 2)
    on_a = [c.id for c in claim_all(dsn, 2, worker="wa", lease_seconds=-30)]
    with scratch_database(server_dsn, "jobctl_top_b", template) as other:
        with psycopg.connect(other, autocommit=True) as b:
            b.execute("INSERT INTO jobs DEFAULT VALUES")
        (on_b,) = [c.id for c in claim_all(other, 1, worker="wb", lease_seconds=-60)]
        with contextlib.ExitStack() as stack:
            sites = []
            for name, where in (("a", dsn), ("b", other)):
                settings = db.Settings(dsn=where, actor="tester@ci", target=name)
                access = sessions.Access("top", writes=True)
                s, standing = stack.enter_context(sessions.open(settings, access, say=print))
                sites.append(Site(s, standing, name))
            ask = console.Ask(dt.timedelta(seconds=30), limit=500)
            app = TopApp(Source(sites, ask, writes=True), HOUR)

            async def script(pilot):
                # b's lease expired first: across targets, by expiry
                assert app.status()["ids"] == [f"b/{on_b}", *(f"a/{i}" for i in on_a)]
                table = app.query_one("#rows", DataTable)
                assert table.get_row_at(0)[1].plain == "b"  # the target, first
                assert "2 target(s): a, b" in text_of(app.query_one("#strip", Static))
                await pilot.press("enter")
                assert f"job {on_b} on b" in app.screen.text.plain
                await pilot.press("escape", "r", *"ok", "enter", "y")
                assert f"b/{on_b}  requeued" in app.screen.text.plain
                await pilot.press("escape", "p", *"x.json", "enter")
                assert "a plan is of one database" in app.status()["message"]

            drive(app, script)
        with psycopg.connect(other) as b:
            assert b.execute("SELECT status FROM jobs WHERE id = %s", (on_b,)).fetchone() == (
                "queued",
            )
    statuses = {r["id"]: r["status"] for r in conn.execute("SELECT id, status FROM jobs")}
    assert [statuses[i] for i in on_a] == ["processing", "processing"]  # a's untouched


def terminate_others(dsn: str) -> None:
    """Every other session on the database killed (a pooler bounce, a failover, as a
    session sees them: its connection lost)."""
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def test_a_lost_connection_is_one_line_then_reconnected_and_ctrl_c_quits(incident, dsn):
    with console_app(dsn) as app:

        async def script(pilot):
            terminate_others(dsn)
            app.reload()
            await pilot.pause()
            message = app.status()["message"]
            assert message.startswith("refresh failed: ") and "\n" not in message
            assert "reconnecting in 0.5s" in message
            assert len(app.status()["ids"]) == 4  # the last rows read stay on screen
            assert "reconnecting (lost" in text_of(app.query_one("#strip", Static))
            with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as c:
                add_jobs(c, 1)
            claim_all(dsn, 1, worker="w9", lease_seconds=-5)
            for _ in range(50):  # the server never went: back at the first try, 0.5 s on
                await pilot.pause(0.1)
                if len(app.status()["ids"]) == 5:
                    break
            assert len(app.status()["ids"]) == 5  # today's rows: it reads again
            assert "reconnected after" in app.status()["message"]
            assert "reconnecting" not in text_of(app.query_one("#strip", Static))
            await pilot.press("ctrl+c")

        drive(app, script)
        assert app.return_code == 130


def test_across_targets_a_lost_target_keeps_its_rows_the_others_stay_fresh(
    server_dsn, template, dsn, conn
):
    from conftest import scratch_database

    add_jobs(conn, 1)
    (on_a,) = [c.id for c in claim_all(dsn, 1, worker="wa", lease_seconds=-30)]
    with scratch_database(server_dsn, "jobctl_top_b", template) as other:
        with psycopg.connect(other, autocommit=True) as b:
            b.execute("INSERT INTO jobs DEFAULT VALUES")
        (on_b,) = [c.id for c in claim_all(other, 1, worker="wb", lease_seconds=-60)]
        with contextlib.ExitStack() as stack:
            sites = []
            access = sessions.Access("top")
            for name, where in (("a", dsn), ("b", other)):
                settings = db.Settings(dsn=where, actor="tester@ci", target=name)
                s, standing = stack.enter_context(sessions.open(settings, access, say=print))
                sites.append(Site(s, standing, name))
            # b comes back nowhere: its server "moved" to a port where nobody listens
            gone = db.Settings(dsn=f"{other} port=1 connect_timeout=2", target="b")
            sites[1].reopen = lambda say: sessions.open(gone, access, say=say)
            source = Source(sites, console.Ask(dt.timedelta(seconds=30), limit=500))
            stack.callback(source.close)
            app = TopApp(source, HOUR)

            async def script(pilot):
                assert app.status()["ids"] == [f"b/{on_b}", f"a/{on_a}"]
                terminate_others(other)  # (b's: the test's own connection is on a)
                add_jobs(conn, 1)
                (more,) = [c.id for c in claim_all(dsn, 1, worker="wa", lease_seconds=-5)]
                app.reload()
                await pilot.pause()
                # a's rows fresh, b's as last read; the line says b, the strip b's wait
                assert app.status()["ids"] == [f"b/{on_b}", f"a/{on_a}", f"a/{more}"]
                assert app.status()["message"].startswith("b: database unavailable")
                strip = text_of(app.query_one("#strip", Static))
                assert "reconnecting (b: lost" in strip and "expired 3" in strip
                for _ in range(30):  # b's tries fail: its backoff grows, a goes on
                    await pilot.pause(0.1)
                    if sites[1].lost is not None and sites[1].lost.tries >= 1:
                        break
                assert sites[1].lost is not None and sites[1].lost.tries >= 1
                assert "cannot connect" in sites[1].lost.why
                assert sites[0].lost is None

            drive(app, script)


def test_claims_without_a_lease_come_last_and_are_counted(incident, conn, dsn):
    (legacy,) = add_jobs(conn, 1)
    conn.execute(  # claimed by code that sets no lease (no token, no expiry)
        "UPDATE jobs SET status = 'processing', reserved_by = 'legacy-1', "
        "reserved_at = now() - interval '2 minutes' WHERE id = %s",
        (legacy,),
    )
    with console_app(dsn) as app:

        async def script(pilot):
            assert app.status()["ids"][-1] == str(legacy)
            assert "no lease 1" in text_of(app.query_one("#strip", Static))
            row = [c.plain for c in app.query_one("#rows", DataTable).get_row_at(4)]
            assert row[2:5] == ["legacy-1", "none", "claimed 2m ago"]

        drive(app, script)


# ---------------------------------------------------------------- a server restarted under top
def test_a_restarted_server_is_reconnected_with_backoff_said_on_the_strip(own_server):
    server, dsn = own_server
    with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as c:
        add_jobs(c, 2)
    claim_all(dsn, 2, worker="w1", lease_seconds=-30)
    settings = db.Settings(dsn=dsn, actor="tester@ci")
    access = sessions.Access("top")
    with sessions.open(settings, access, say=lambda line: None) as (s, standing):
        site = Site(s, standing, reopen=lambda say: sessions.open(settings, access, say=say))
        source = Source([site], console.Ask(dt.timedelta(seconds=30), limit=500))
        app = TopApp(source, HOUR)  # (no refresh of its own for an hour: only reconnections)

        async def until(pilot, wanted, seconds=30.0):
            deadline = asyncio.get_running_loop().time() + seconds
            while wanted not in text_of(app.query_one("#strip", Static)):
                assert asyncio.get_running_loop().time() < deadline, text_of(
                    app.query_one("#strip", Static)
                )
                await pilot.pause(0.1)

        async def script(pilot):
            assert "expired 2" in text_of(app.query_one("#strip", Static))
            server.stop("fast")
            app.reload()
            await pilot.pause()
            assert app.status()["message"].startswith("refresh failed: ")
            await until(pilot, "reconnecting (lost")  # said on the strip, figures kept
            strip = text_of(app.query_one("#strip", Static))
            assert "expired 2" in strip and "as of" in strip
            assert len(app.status()["ids"]) == 2
            await pilot.pause(2.0)  # a few tries fail while it is down: the backoff grows
            assert site.lost is not None and site.lost.tries >= 1
            server.start()
            with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as c:
                add_jobs(c, 1)
            claim_all(dsn, 1, worker="w2", lease_seconds=-30)
            await until(pilot, "expired 3", seconds=40)  # back, with today's figures
            assert "reconnecting" not in text_of(app.query_one("#strip", Static))
            assert "reconnected after" in app.status()["message"]
            assert len(app.status()["ids"]) == 3
            await pilot.press("q")

        try:
            drive(app, script)
        finally:
            source.close()
    assert app.return_code == 0

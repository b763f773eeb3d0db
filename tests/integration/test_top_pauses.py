"""jobctl top's strip says the table's pauses (ops.pause.waiting, as every view reads
them): each kind or queue paused, how long, how many queued jobs it holds back; across
targets each with its target; gone on the first refresh after a resume. Textual's pilot
against a real PostgreSQL, as tests/integration/test_top.py."""

from __future__ import annotations

import contextlib
import datetime as dt

import psycopg
import pytest
from helpers import add_jobs, claim_all

pytest.importorskip("textual")

from test_top import HOUR, console_app, drive, text_of
from textual.widgets import Static

from jobctl import db
from jobctl.cli.top.app import TopApp
from jobctl.cli.top.data import Site, Source
from jobctl.ops import console, sessions


def kinds(conn, run, where: str | None = None) -> None:
    """A kind column mapped; 3 queued charge_card jobs and 1 send_email."""
    conn.execute("ALTER TABLE jobs ADD COLUMN kind text")
    args = ("schema", "apply", "--column", "kind=kind", "--column", "queue=queue", "--yes")
    applied = run(*args, dsn=where)
    assert applied.code == 0, applied.err
    for kind, n in (("charge_card", 3), ("send_email", 1)):
        conn.execute(
            "INSERT INTO jobs (kind, queue) SELECT %s, 'main' FROM generate_series(1, %s)",
            (kind, n),
        )


def test_the_strip_says_each_pause_its_age_and_waiting_jobs(conn, dsn, run):
    add_jobs(conn, 1)
    claim_all(dsn, 1, worker="w1", lease_seconds=-30)  # an expired lease: a row on screen
    kinds(conn, run)
    assert run("pause", "--kind", "charge_card", "--reason", "provider down").code == 0
    conn.execute("UPDATE jobctl.pauses SET paused_at = now() - interval '62 minutes'")
    assert run("pause", "--queue", "main", "--reason", "deploy").code == 0
    with console_app(dsn) as app:

        async def script(pilot):
            strip = text_of(app.query_one("#strip", Static))
            lines = strip.splitlines()
            assert len(lines) == 3, strip
            assert lines[2].startswith("paused: kind charge_card (1h2m, 3 waiting) · queue main (")
            assert lines[2].endswith(", 4 waiting)")
            assert app.query_one("#strip", Static).size.height == 3
            assert app.status()["ids"]  # the rows still shown below
            assert run("resume", "--kind", "charge_card").code == 0
            assert run("resume", "--queue", "main").code == 0
            app.reload()  # the next refresh, now
            await pilot.pause()
            strip = text_of(app.query_one("#strip", Static))
            assert "paused" not in strip and len(strip.splitlines()) == 2
            assert app.query_one("#strip", Static).size.height == 2

        drive(app, script)


def test_across_targets_each_pause_names_its_target(server_dsn, template, dsn, conn, run):
    from conftest import scratch_database

    kinds(conn, run)
    assert run("pause", "--kind", "charge_card", "--reason", "provider down").code == 0
    with scratch_database(server_dsn, "jobctl_top_pb", template) as other:
        with psycopg.connect(other, autocommit=True) as b:
            b.execute("INSERT INTO jobs DEFAULT VALUES")
        with contextlib.ExitStack() as stack:
            sites = []
            for name, where in (("a", dsn), ("b", other)):
                settings = db.Settings(dsn=where, actor="tester@ci", target=name)
                access = sessions.Access("top")
                s, standing = stack.enter_context(sessions.open(settings, access, say=print))
                sites.append(Site(s, standing, name))
            ask = console.Ask(dt.timedelta(seconds=30), limit=500)
            app = TopApp(Source(sites, ask), HOUR)

            async def script(pilot):
                strip = text_of(app.query_one("#strip", Static))
                assert strip.splitlines()[2].startswith("paused: a kind charge_card (")
                assert "3 waiting" in strip and " b " not in strip.splitlines()[2]

            drive(app, script)

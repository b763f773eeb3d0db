"""jobctl top's pure parts (cli/top/views.py): cells are Text of safe text, never markup;
the filter; the confirmation names every row; the main module does not load Textual."""

from __future__ import annotations

import datetime as dt
import io
import subprocess
import sys

from jobctl.cli.top import views

HOSTILE = "[bold red]x[/]\x1b]0;pwned\x07\x1b[2J\u202eevil"


def stuck_row(**changes):
    row = {
        "id": 7,
        "status": "processing",
        "reserved_by": "web-1",
        "attempt_token": "0f3c1a2e-0000-4000-8000-000000000001",
        "attempts": 1,
        "max_attempts": 3,
        "reclaim_count": 0,
        "recovery_policy": "auto",
        "lease_expires_at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        "lease_overdue_s": 65.0,
        "action": "requeue",
        "skipped": None,
        "lease_state": "expired",
    }
    return row | changes


def test_cells_are_text_of_safe_text_never_markup():
    cells = views.cells(views.STUCK, stuck_row(reserved_by=HOSTILE), marked=True)
    worker = cells[2]
    assert worker.plain == "[bold red]x[/]\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil"
    assert not worker.spans and worker.style == ""  # the name styled nothing
    assert all("\x1b" not in c.plain and "\x07" not in c.plain for c in cells)
    assert cells[0].plain == "*"
    review = views.cells(
        views.REVIEW, {"id": 1, "why": "manual_policy", "last_error": HOSTILE}, False
    )
    assert "[bold red]x[/]" in review[-1].plain and "\x1b" not in review[-1].plain


def test_detail_and_confirmation_show_hostile_text_as_written():
    found = {
        "job": {"id": 7, "status": "processing", "reserved_by": HOSTILE, "last_error": HOSTILE},
        "attempts": [{"attempt": 1, "worker": HOSTILE, "attempt_token": "tok-whole-1234"}],
        "events": [{"event": "claimed", "actor": HOSTILE, "reason": HOSTILE}],
    }
    text = views.detail(7, found, [f"Job 7 was claimed by {HOSTILE}."])
    assert "\x1b" not in text.plain and "[bold red]x[/]" in text.plain
    assert "tok-whole-1234" in text.plain
    confirm = views.confirmation("requeue", [stuck_row(reserved_by=HOSTILE)], HOSTILE, "db")
    assert "\x1b" not in confirm.plain and "7  processing -> queued" in confirm.plain
    assert "y goes, any other key cancels" in confirm.plain


def test_filter_matches_id_worker_and_error_in_any_case():
    row = stuck_row(reserved_by="API-worker-3", skipped="locked by pid 42")
    assert views.matches(row, "")
    assert views.matches(row, "api-WORKER")
    assert views.matches(row, "7")
    assert views.matches(row, "pid 42")
    assert not views.matches(row, "web-9")
    assert views.matches({"id": 1, "last_error": "Timeout talking to S3"}, "s3")
    assert views.matches({"id": 1, "kind": "email.send"}, "email")


def test_outcome_counts_each_kind():
    text, line = views.outcome(
        "requeue",
        [
            {"id": 1, "outcome": "requeued", "detail": "processing -> queued"},
            {"id": 2, "outcome": "conflict", "detail": "changed; nothing written"},
        ],
    )
    assert line == "1 requeued, 1 conflict"
    assert "2  conflict  changed; nothing written" in text.plain


def test_the_cli_does_not_import_textual():
    code = (
        "import sys, jobctl.cli.main; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_without_textual_top_says_how_to_install_it(monkeypatch, capsys):
    from jobctl.cli import main as cli

    monkeypatch.setitem(sys.modules, "textual", None)  # as if not installed
    assert cli.main(["top"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "jobctl: error: jobctl top needs Textual: pip install 'jobctl[tui]'"


def test_top_off_a_terminal_refuses_in_one_line(capsys):
    from jobctl.cli import main as cli

    assert cli.main(["top"]) == 2  # (pytest's stdin and stdout are not terminals)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs a terminal" in err[0]


def test_top_is_a_writer_only_with_allow_writes():
    # a writer is refused on a standby before anything shows (sessions.open, standby.check)
    from jobctl.cli import context

    assert context.access("top", {"allow_writes": True}).writes
    assert not context.access("top", {"allow_writes": False}).writes


def test_the_help_names_every_key_bound_and_says_whether_r_and_f_write():
    from jobctl.cli.top.app import TopApp

    shown = views.help_text(writes=False).plain
    bound = {b.key for b in TopApp.BINDINGS}  # type: ignore[union-attr]
    assert {"q", "j", "k", "1", "2", "3", "slash", "space", "r", "f", "p"} <= {
        k for keys in bound for k in keys.split(",")
    }
    for keys, _ in views.HELP:
        assert keys in shown
    assert "read-only" in shown and "--allow-writes" in shown
    assert "WRITES ALLOWED" in views.help_text(writes=True).plain
    for writes in (False, True):  # 80 columns: a box, a scroll bar
        assert all(len(x) <= 74 for x in views.help_text(writes=writes).plain.splitlines())


def test_the_strip_says_a_reconnection_and_how_old_the_figures_are():
    from jobctl.ops import console

    read = dt.datetime(2026, 1, 1, 12, 0, 5, tzinfo=dt.timezone.utc)
    snap = console.Snapshot([], [], 3, 1, 0, 2, None, read)
    every = dt.timedelta(seconds=2)
    fresh = views.strip(snap, writes=False, every=every, where="db:5432 public.jobs")
    assert "reconnecting" not in fresh.plain and "every 2s" in fresh.plain
    stale = views.strip(
        snap, writes=False, every=every, where="db:5432 public.jobs", lost=["lost 12s, try 3 in 4s"]
    )
    second = stale.plain.splitlines()[1]
    assert second.startswith("read-only · reconnecting (lost 12s, try 3 in 4s) · as of ")
    assert len(second.split(" · db:")[0]) <= 80
    assert views.strip(None, writes=False, every=every, where="", lost=["lost 1s"]).plain == (
        "reconnecting (lost 1s)"
    )


def test_a_long_message_wraps_within_80_columns_and_stays_whole():
    from rich.console import Console

    line = (
        "refresh failed: reconnecting (lost 12s, try 3 in 4s): cannot connect: connection "
        "to server at 127.0.0.1, port 5432 failed: Connection refused"
    )
    out = Console(width=80, record=True, color_system=None, file=io.StringIO())
    out.print(views.message(line))
    shown = out.export_text()
    assert " ".join(shown.split()) == line and all(len(x) <= 80 for x in shown.splitlines())
    assert "read-only" in views.help_text(writes=False).plain

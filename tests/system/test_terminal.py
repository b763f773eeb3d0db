"""On a terminal: confirmation prompts (yes and no) and rich tables, through a real pty."""

from __future__ import annotations

import screens
from helpers import add_jobs, claim_all, snapshot


def on_terminal(dsn: str, args: list[str], answer: str | None) -> tuple[int, str]:
    """jobctl on a pty 200 columns wide, ``answer`` typed at its prompt: what the terminal got."""
    shot = screens.on_terminal(args, columns=200, dsn=dsn, answer=answer)
    return shot.code, shot.raw


def test_reclaim_asks_and_no_changes_nothing(conn, dsn):
    add_jobs(conn, 3)
    claim_all(dsn, 3)
    before = snapshot(conn)
    code, screen = on_terminal(dsn, ["reclaim", "--commit"], "n")
    assert "Reclaim 3 expired job(s): 3 requeue, 0 fail? [y/N]" in screen
    assert code == 2 and "jobctl: cancelled; nothing changed" in screen and "error" not in screen
    assert snapshot(conn) == before


def test_reclaim_writes_what_was_confirmed_not_what_expired_since(conn, dsn):
    """Four leases expired when the question is asked, four more run out while it is up:
    'y' reclaims the four it showed, and says the others expired after the preview."""
    add_jobs(conn, 8)
    shown = {c.id for c in claim_all(dsn, 4, worker="gone", lease_seconds=-30)}
    later = {c.id for c in claim_all(dsn, 4, worker="slow", lease_seconds=3)}

    def leases_run_out() -> None:
        import time

        time.sleep(4)  # the four live leases expire while the question is on screen

    shot = screens.on_terminal(
        ["reclaim", "--commit"], columns=200, dsn=dsn, answer="y", while_asked=leases_run_out
    )
    assert "Reclaim 4 expired job(s): 4 requeue, 0 fail? [y/N]" in shot.raw
    assert shot.code == 0, shot.raw
    assert "reclaimed: 4 requeued, 0 failed, 0 skipped" in shot.raw
    assert "4 more lease(s) expired after the preview, left: jobctl reclaim --dry-run" in shot.raw
    status = {r["id"]: r["status"] for r in conn.execute("SELECT id, status FROM jobs")}
    assert {status[i] for i in shown} == {"queued"}
    assert {status[i] for i in later} == {"processing"}  # expired, but nobody confirmed them
    # --yes asked nothing and confirmed nothing: it reclaims what is expired when it runs
    code, screen = on_terminal(dsn, ["reclaim", "--commit", "--yes"], None)
    assert code == 0 and "reclaimed: 4 requeued, 0 failed, 0 skipped" in screen


def test_requeue_shows_the_job_then_applies_on_yes(conn, dsn):
    add_jobs(conn, 1, policy="manual")
    claim_all(dsn, 1)
    code, screen = on_terminal(dsn, ["requeue", "1", "--reason", "checked"], "y")
    assert "about to requeue" in screen and "Requeue 1 job(s)? [y/N]" in screen
    assert code == 0 and "requeued" in screen
    assert conn.execute("SELECT status FROM jobs").fetchone()["status"] == "queued"


def test_rich_table_on_a_terminal(conn, dsn):
    add_jobs(conn, 1)
    claim_all(dsn, 1, worker="[red]w1[/red]")
    code, screen = on_terminal(dsn, ["stuck"], None)
    assert code == 0 and "\x1b[1mID\x1b[0m" in screen  # the terminal table: a bold header
    assert "[red]w1[/red]" in screen  # data never read as markup
    assert "1 job(s); preview the reclaim with: jobctl reclaim --dry-run" in screen


def test_watch_refreshes_in_place_on_a_terminal(conn, dsn):
    add_jobs(conn, 2)
    claim_all(dsn, 2, worker="gone")
    code, screen = on_terminal(dsn, ["summary", "--watch", "--every", "0.2s", "--count", "2"], None)
    assert code == 0 and "Ctrl-C to stop" in screen and "gone" in screen
    assert '{"at"' not in screen  # the JSON lines are for pipes, not terminals


def test_commit_on_a_terminal_shows_progress(conn, dsn):
    add_jobs(conn, 40)
    claim_all(dsn, 40)
    code, screen = on_terminal(dsn, ["reclaim", "--commit", "--batch-size", "1"], "y")
    assert code == 0 and "reclaiming" in screen  # rich's progress bar, on stderr
    assert "reclaimed: 40 requeued, 0 failed, 0 skipped" in screen


def test_a_printed_next_command_repeats_the_table_typed(conn, dsn):
    """``--table`` typed on the command line is repeated by the commands jobctl prints next
    (the reclaim hint, the plan's apply line), each whole on one line of an 80-column
    terminal, and the apply line runs as printed."""
    import os
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    add_jobs(conn, 2)
    claim_all(dsn, 2)
    shot = screens.on_terminal(["--table", "public.jobs", "stuck"], columns=80, dsn=dsn)
    hint = "jobctl --table public.jobs reclaim --dry-run"
    assert shot.code == 0 and any(hint in line for line in shot.lines), shot.raw
    plan = Path("/tmp") / f"jobctl-hint-{os.getpid()}.json"  # short: the command fits in 80
    try:
        args = ["--table", "public.jobs", "reclaim", "--dry-run", "--save-plan", str(plan)]
        shot = screens.on_terminal(args, columns=80, dsn=dsn)
        apply = f"jobctl --table public.jobs reclaim --commit --plan {plan}"
        (printed,) = [line.strip() for line in shot.lines if apply in line]
        assert shot.code == 0 and printed == apply, shot.raw
        ran = subprocess.run(
            [sys.executable, "-m", "jobctl", *shlex.split(printed)[1:], "--yes"],
            env={**os.environ, "JOBCTL_DSN": dsn},
            capture_output=True,
            text=True,
        )
    finally:
        plan.unlink(missing_ok=True)
    assert ran.returncode == 0, ran.stderr
    assert {r["status"] for r in conn.execute("SELECT status FROM jobs")} == {"queued"}

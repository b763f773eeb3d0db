"""Long lines on a person's terminal (tests/screens.py: a pty of 80 and 120 columns, read back
as the terminal shows it): a worker name as long as Delayed::Job's whole in history's
attempts, as stuck keeps it; a confirmation's question wrapped at spaces to the terminal,
never broken mid-word by the terminal itself."""

from __future__ import annotations

import re

import psycopg
import pytest
from rich.cells import cell_len
from screens import on_terminal

from jobctl import lease

pytest.importorskip("pyte")

SIZES = [(80, 24), (120, 40)]
WORKER = "delayed_job.4 host:web-old-3 pid:17012"  # the gem's name for a worker: host and pid


def fits(shot, columns: int) -> None:
    wide = [line for line in shot.written_lines() if cell_len(line) > columns]
    assert not wide, f"lines wider than {columns} columns: {wide}"


@pytest.fixture
def reclaimed_twice(dsn, run) -> tuple[int, list[str]]:
    """A job whose first worker (the long name) died, reclaimed, then claimed again by it."""
    with psycopg.connect(dsn, autocommit=True) as c:
        (job_id,) = c.execute("INSERT INTO jobs DEFAULT VALUES RETURNING id").fetchone()
        first = lease.Worker(c, WORKER, lease_seconds=-60).claim()
        assert first is not None
        assert run("reclaim", "--commit", "--yes").code == 0
        second = lease.Worker(c, WORKER, lease_seconds=300).claim()
        assert second is not None
    return job_id, [str(first.attempt_token), str(second.attempt_token)]


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_history_shows_a_long_worker_whole(dsn, reclaimed_twice, columns, rows):
    job_id, tokens = reclaimed_twice
    shot = on_terminal(
        ["history", str(job_id)], columns=columns, rows=rows, dsn=dsn, screen_rows=80
    )
    assert shot.code == 0, shot.text
    fits(shot, columns)
    attempts = [line for line in shot.lines if re.match(r"[12]\s+delayed_job", line)]
    assert len(attempts) == 2, shot.text
    for line, token in zip(attempts, tokens, strict=True):
        assert WORKER in line and token in line, line  # the worker and the token whole
    if columns >= 120:  # room for every column: the outcome beside them
        assert "reclaimed" in attempts[0]
    else:  # the outcome gives way, and the screen says where it is
        assert "(-o wide adds outcome" in shot.text


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_a_long_confirmation_wraps_at_words(dsn, columns, rows):
    """schema remove's question (some 600 characters) on a pty: wrapped at spaces to the
    terminal, so every word of it is whole on one line, and it says "the" once."""
    shot = on_terminal(
        ["schema", "remove", "--columns", "--history"],
        columns=columns,
        rows=rows,
        dsn=dsn,
        answer="n",
        screen_rows=120,
    )
    assert shot.code == 2, shot.text  # answered no: nothing changed
    fits(shot, columns)
    start = next(n for n, line in enumerate(shot.lines) if line.startswith("Remove from"))
    end = next(n for n in range(start, len(shot.lines)) if "[y/N]" in shot.lines[n])
    asked = shot.lines[start : end + 1]
    assert len(" ".join(asked)) > 3 * columns  # a long one: wrapped on 4 lines or more
    written = [line for line in shot.written_lines() if line.strip()]
    for line in asked:  # each line of the screen is a line the program wrote: no mid-word cut
        assert any(w.rstrip() == line for w in written), line
    words = " ".join(asked).split()
    assert "jobctl.record_jobs" in " ".join(asked) or any(
        w.startswith("jobctl.record_") for w in words
    )
    assert not re.search(r"\b(\w+) \1\b", " ".join(asked)), asked  # no doubled word

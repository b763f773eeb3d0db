"""Text a worker or application wrote, read back on a real terminal:
escape sequences, newlines and bidi controls are shown as escapes, never obeyed, in every
format; piped, csv, tsv and json keep the data exact."""

from __future__ import annotations

import csv
import io
import json

import pytest
import screens
from helpers import add_jobs, claim_all, jobctl_process

FORGED = 'At 2026-01-01 10:00:00+00:00 alice@ops-laptop requeued it by hand: "verified".'
WORKER = f"\x1b]0;pwned\x07web-9\n{FORGED}\u202e9-bew"
ERROR = "\x1b[2Jboom\r\nsecond line\u202e"


def on_terminal(dsn: str, *args: str) -> tuple[int, str]:
    """jobctl with stdout and stderr on a pty 400 columns wide (stdin not a terminal): what
    the terminal got, decoded strictly (a stray C1 byte such as 0x9b fails, not hides)."""
    shot = screens.on_terminal(list(args), columns=400, dsn=dsn, stdin_terminal=False)
    return shot.code, shot.written.decode()


@pytest.fixture
def hostile(conn, dsn, run):
    """Job 1 requeued by an operator from a hostile worker (its events name it), job 2 still
    stuck under that worker, with a hostile error and payload."""
    add_jobs(conn, 2)
    claim_all(dsn, 2, worker=WORKER)
    conn.execute(
        "UPDATE jobs SET last_error = %s, payload = jsonb_build_object('note', %s::text)",
        (ERROR, ERROR),
    )
    assert run("requeue", "1", "--yes", "--force", "--reason", "checked").code == 0


def safe(screen: str) -> None:
    """Nothing the data held was obeyed: no OSC, bell, screen clear, bidi control, and no
    line of the data's own (a forged line)."""
    for raw in ("\x1b]", "\x07", "\x1b[2J", "\u202e", "\x9b"):
        assert raw not in screen, (raw, screen)
    lines = [line.strip(" │┃|") for line in screen.replace("\r\n", "\n").split("\n")]
    assert not any(line.startswith("At 2026-01-01") for line in lines), screen
    assert not any(line.startswith("second line") for line in lines), screen


@pytest.mark.parametrize(
    "args",
    [
        ("stuck",),
        ("stuck", "-o", "csv"),
        ("stuck", "-o", "tsv"),
        ("stuck", "-o", "json"),
        ("stuck", "-o", "jsonl"),
        ("stuck", "--format", "plain"),
        ("explain", "1"),
        ("explain", "1", "-o", "csv"),
        ("show", "1"),
        ("show", "2"),
        ("show", "2", "-o", "tsv"),
        ("history", "1"),
        ("history", "1", "-o", "csv"),
        ("summary",),
    ],
)
def test_hostile_text_is_shown_not_obeyed_on_a_terminal(hostile, dsn, args):
    code, screen = on_terminal(dsn, *args)
    assert code == 0, screen
    safe(screen)
    assert "web-9" in screen  # the worker is shown, escaped
    if args[0] in ("stuck", "explain", "history"):
        assert "\\x1b]0;pwned\\x07web-9" in screen or "\\u001b]0;pwned\\u0007web-9" in screen


def test_explain_keeps_a_forged_line_on_its_own_line(hostile, dsn):
    code, screen = on_terminal(dsn, "explain", "1")
    assert code == 0
    # the worker's "newline" is shown as \n inside the sentence it belongs to, the name one
    # quoted value (its quotes escaped)
    forged = FORGED.replace('"', '\\"')
    assert f'worker "\\x1b]0;pwned\\x07web-9\\n{forged}\\u202e9-bew" claimed it' in screen.replace(
        "\r\n", "\n"
    )


def test_piped_csv_keeps_the_data_exact(hostile, dsn):
    done = jobctl_process(dsn, "stuck", "-o", "csv")
    assert done.returncode == 0, done.stderr
    (row,) = csv.DictReader(io.StringIO(done.stdout, newline=""))
    assert row["reserved_by"] == WORKER


def test_piped_tsv_is_copy_text_that_postgresql_reads_back(hostile, conn, dsn):
    """TSV escapes as COPY's text format: one line per row, the header's count of fields,
    and PostgreSQL's own COPY FROM reads the worker's name back exact."""
    done = jobctl_process(dsn, "stuck", "-o", "tsv")
    assert done.returncode == 0, done.stderr
    header, line, end = done.stdout.split("\n")
    assert end == "" and len(line.split("\t")) == len(header.split("\t"))
    names = header.split("\t")
    conn.execute(f"CREATE TEMP TABLE back ({', '.join(f'{n} text' for n in names)})")
    with conn.cursor().copy("COPY back FROM STDIN") as copy:  # the text format
        copy.write(line + "\n")
    assert conn.execute("SELECT reserved_by FROM back").fetchone()["reserved_by"] == WORKER


def test_piped_json_keeps_the_data_exact(hostile, dsn):
    done = jobctl_process(dsn, "show", "2", "-o", "json")
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    assert job["reserved_by"] == WORKER and job["last_error"] == ERROR
    assert job["payload"] == {"note": ERROR}
    assert "\u202e" in done.stdout  # exact: JSON escapes only what it always did

"""-o csv and -o tsv are a contract a cron job loads into a table: each command's header is
fixed by the command and its options (and the table's mapping), the same with no row as with
many; each output is one table a CSV reader takes whole (every row as wide as the header),
the columns every key the command's JSON gives a row, in JSON's order; a boolean is written
as JSON writes it (true, false), a null as an empty field.

Each command runs on a table whose kind and queue are mapped, first with one queued job and
nothing else (no stuck job, no review, no event, no pause), then with expired, parked and
failed jobs, reclaims, a person's requeue and a pause; the first lines are compared."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess

import pytest
from helpers import add_jobs, claim_all

FORMATS = (("csv", ","), ("tsv", "\t"))
JOB = "1"  # the queued job of the quiet table; the staged table's first, reclaimed and claimed
# every read that takes -o, with the options that change its columns
READS = (
    ("stuck",),
    ("stuck", "--expiring-within", "1m"),
    ("summary",),
    ("summary", "--exact"),
    ("summary", "--by", "kind"),
    ("reclaim",),
    ("reclaim", "--dry-run", "--park-older-than", "1s"),
    ("review",),
    ("events",),
    ("report", "--since", "1h"),
    ("quarantine", "--min-reclaims", "1"),
    ("policy", "--list"),
    ("pause", "--list"),
    ("requeue", "--kind", "send_email"),  # on a filter, without --yes: what it matched
    ("fail", "--kind", "send_email", "--force"),
    ("show", JOB),
    ("history", JOB),
    ("history", JOB, "--events"),
    ("explain", JOB),
    ("schema", "check"),
    ("schema", "statements"),
    ("doctor",),
)
# their -o json (or jsonl) is a list of rows: each row's keys are the header, in its order
ROWS_IN_JSON = {"stuck", "reclaim", "review", "events", "quarantine", "policy", "pause"}


def mapped(conn, run) -> None:
    """The reference table with a kind and a priority column, kind, queue and priority
    mapped (stuck's rows carry the priority), and one queued job."""
    conn.execute("ALTER TABLE jobs ADD COLUMN kind text, ADD COLUMN priority integer")
    done = run(
        "schema",
        "apply",
        "--yes",
        *("--column", "kind=kind", "--column", "queue=queue"),
        *("--column", "priority=priority"),
    )
    assert done.code == 0, done.err
    conn.execute("INSERT INTO jobs (kind, queue) VALUES ('send_email', 'mail')")


def staged(conn, dsn, run) -> None:
    """Job 1 reclaimed and claimed again (expired); manual jobs parked for review; auto jobs
    out of attempts failed; a person's requeue; a policy for a kind; a pause of a queue."""
    claim_all(dsn, 1, worker="web-1", lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    add_jobs(conn, 2, policy="manual")
    add_jobs(conn, 2, max_attempts=1)
    conn.execute("UPDATE jobs SET kind = 'send_email', queue = 'mail' WHERE kind IS NULL")
    claim_all(dsn, 5, worker="web-2,x", lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0  # 2 parked, 2 failed, 1 requeued
    parked = conn.execute("SELECT id FROM jobs WHERE recovery_policy = 'manual'").fetchall()
    done = run("requeue", str(parked[0]["id"]), "--reason", "fixed", "--yes")
    assert done.code == 0, done.err
    add_jobs(conn, 2)
    conn.execute("UPDATE jobs SET kind = 'charge_card', queue = 'payments' WHERE kind IS NULL")
    claim_all(dsn, 4, worker="web-3", lease_seconds=-60)  # job 1 among them: expired again
    assert run("policy", "--kind", "charge_card", "--manual", "--reason", "x", "--yes").code == 0
    assert run("pause", "--queue", "payments", "--reason", "provider down").code == 0


def table_of(text: str, delimiter: str) -> list[list[str]]:
    """The output as one table: a header, then rows exactly as wide (else the test fails)."""
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    lines = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting))
    assert lines, "no header"
    header, *body = lines
    assert header and len(set(header)) == len(header), header
    assert not any(h.startswith("#") or h == "" for h in header), header
    assert all(len(line) == len(header) for line in body), [len(line) for line in body]
    assert not {"True", "False", "None"} & {cell for line in body for cell in line}
    return lines


def outputs(run) -> dict[tuple[str, ...], dict[str, str]]:
    """Each read's csv and tsv (and its jsonl, when JSON gives its rows)."""
    found = {}
    for args in READS:
        each = {}
        json_too = ("jsonl",) if args[0] in ROWS_IN_JSON else ("json",) if args[0] == "show" else ()
        for fmt in ("csv", "tsv", *json_too):
            done = run(*args, "-o", fmt)
            assert done.code in (0, 4), (args, fmt, done.err)
            each[fmt] = done.out
        found[args] = each
    return found


@pytest.fixture
def quiet_and_busy(conn, dsn, run):
    """Every read's outputs on the quiet table, then on the staged one."""
    mapped(conn, run)
    quiet = outputs(run)
    staged(conn, dsn, run)
    return quiet, outputs(run)


def every_header_is_the_same_with_no_row_and_with_many(quiet, busy):
    for args, each in busy.items():
        for fmt, delimiter in FORMATS:
            before, after = (
                table_of(quiet[args][fmt], delimiter)[0],
                table_of(each[fmt], delimiter)[0],
            )
            assert before == after, (args, fmt, before, after)
        # the staged table gives this command rows (but doctor's and schema's: always some)
        assert len(table_of(each["csv"], ",")) > 1, args


def every_header_is_every_key_json_gives_a_row(busy):
    for args, each in busy.items():
        header = table_of(each["csv"], ",")[0]
        assert header == table_of(each["tsv"], "\t")[0], args
        if "jsonl" in each:
            rows = [json.loads(line) for line in each["jsonl"].splitlines()]
            assert rows, args
            assert all(list(row) == header for row in rows), (args, header, list(rows[0]))
        if args[:1] in (("stuck",), ("review",), ("events",), ("reclaim",)):
            assert header[:3] == ["id", "kind", "queue"] or header[:4] == [
                "at",
                "id",
                "kind",
                "queue",
            ], (args, header)
        # the priority: stuck's rows after kind and queue, no other command's
        if args[0] in ROWS_IN_JSON:
            assert ("priority" in header) == (args[0] == "stuck"), (args, header)
            assert args[0] != "stuck" or header[3] == "priority", header


def show_is_the_job_as_one_row_with_every_field_json_gives(busy):
    whole = json.loads(busy[("show", JOB)]["json"])
    for fmt, delimiter in FORMATS:
        header, row = table_of(busy[("show", JOB)][fmt], delimiter)
        assert header == [k for k in whole if k != "events"]
        assert row[header.index("id")] == JOB and row[header.index("reserved_by")] == "web-3"


def test_booleans_are_json_text_and_nulls_empty(conn, dsn, run):
    mapped(conn, run)
    claim_all(dsn, 1, worker="web-1", lease_seconds=-60)
    done = run("reclaim", "--commit", "--yes", "-o", "csv")
    header, row = table_of(done.out, ",")
    assert row[header.index("applied")] == "true" and row[header.index("skipped")] == ""
    for fmt, delimiter in FORMATS:
        check = table_of(run("schema", "check", "-o", fmt).out, delimiter)
        assert {line[check[0].index("ok")] for line in check[1:]} <= {"true", "false"}
        history = table_of(run("history", JOB, "-o", fmt).out, delimiter)
        assert "true" in {cell for line in history[1:] for cell in line} or all(
            cell not in ("True", "False") for line in history for cell in line
        )


@pytest.mark.parametrize(("fmt", "delimiter"), FORMATS)
def test_writes_have_the_same_header_with_no_row_and_with_many(conn, dsn, run, fmt, delimiter):
    mapped(conn, run)
    nothing = table_of(run("reclaim", "--commit", "--yes", "-o", fmt).out, delimiter)
    claim_all(dsn, 1, worker="web-1", lease_seconds=-60)
    one = table_of(run("reclaim", "--commit", "--yes", "-o", fmt).out, delimiter)
    assert nothing[0] == one[0]
    assert one[0][:3] == ["id", "kind", "queue"] and len(nothing) == 1 and len(one) == 2
    refused = table_of(run("requeue", "999", "--reason", "r", "--yes", "-o", fmt).out, delimiter)
    done = table_of(run("fail", JOB, "--reason", "r", "--force", "--yes", "-o", fmt).out, delimiter)
    assert refused[0] == done[0]
    not_paused = table_of(run("resume", "--queue", "mail", "-o", fmt).out, delimiter)
    paused = table_of(run("pause", "--queue", "mail", "--reason", "r", "-o", fmt).out, delimiter)
    resumed = table_of(run("resume", "--queue", "mail", "-o", fmt).out, delimiter)
    assert not_paused[0] == paused[0] == resumed[0] and len(not_paused) == 1


@pytest.mark.parametrize(
    "args", [("review",), ("reclaim", "--dry-run"), ("reclaim", "--commit", "--yes")]
)
def test_mapped_columns_with_no_row_need_the_mapping(conn, run, args):
    mapped(conn, run)
    header = table_of(run(*args, "-o", "csv").out, ",")[0]
    assert header[:3] == ["id", "kind", "queue"]


def miller_reads_every_output_whole(quiet, busy):
    """Miller (mlr) reads each csv and tsv as one table (where it is installed)."""
    if shutil.which("mlr") is None:
        return
    for found in (quiet, busy):
        for args, each in found.items():
            for fmt in ("csv", "tsv"):
                done = subprocess.run(
                    ["mlr", f"--i{fmt}", "--ojson", "cat"],
                    input=each[fmt],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                assert done.returncode == 0, (args, fmt, done.stderr)


def test_every_read_in_every_machine_format(quiet_and_busy):
    """Every read of READS, on the quiet table then the staged one (computed once: each
    check reads the same outputs): the same header with no row and with many, the header
    every key JSON gives a row, show as one row, and whole for miller."""
    quiet, busy = quiet_and_busy
    every_header_is_the_same_with_no_row_and_with_many(quiet, busy)
    every_header_is_every_key_json_gives_a_row(busy)
    show_is_the_job_as_one_row_with_every_field_json_gives(busy)
    miller_reads_every_output_whole(quiet, busy)

"""history and report as CSV/TSV: one table a CSV reader takes whole (a header, every row as
wide as it, nothing else in the file), with every column JSON carries, read back with
Python's csv module against the same command's JSON."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers import add_jobs, claim_all

from jobctl.render import output


@pytest.fixture
def reclaimed_once(conn, dsn, run):
    """Job 1: claimed by "w,1" (a comma: quoted in CSV), reclaimed, claimed again by w2."""
    (job,) = add_jobs(conn, 1)
    conn.execute("UPDATE jobs SET payload = %s WHERE id = %s", ('{"a": [1, "x,y"]}', job))
    claim_all(dsn, 1, worker="w,1", lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    claim_all(dsn, 1, worker="w2", lease_seconds=60)
    return job


def table_of(text: str, delimiter: str) -> list[dict[str, str]]:
    """The file as ONE table: a header, then rows exactly as wide (else the test fails)."""
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    lines = list(csv.reader(io.StringIO(text), delimiter=delimiter, quoting=quoting))
    assert lines, "no header"
    header, *body = lines
    assert len(set(header)) == len(header), header  # each column once
    assert all(len(line) == len(header) for line in body), [len(x) for x in body]
    assert not any(h.startswith("#") or h == "" for h in header), header
    return [dict(zip(header, line, strict=True)) for line in body]


def flat(value) -> str:
    """A JSON value as a CSV cell holds it (render.output's flattening, read back)."""
    if value is None:
        return ""
    if isinstance(value, bool):  # as JSON writes it
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return output.to_json(value)
    return str(value)


@pytest.mark.parametrize(("fmt", "delimiter"), [("csv", ","), ("tsv", "\t")])
def test_history_is_one_table_of_attempts_with_every_json_column(
    reclaimed_once, run, fmt, delimiter
):
    whole = json.loads(run("history", str(reclaimed_once), "-o", "json").out)
    done = run("history", str(reclaimed_once), "-o", fmt)
    assert done.code == 0, done.err
    table = table_of(done.out, delimiter)
    assert len(table) == len(whole["attempts"]) == 2
    for row, attempt in zip(table, whole["attempts"], strict=True):
        for key, value in attempt.items():  # every key of JSON's attempts
            assert row[key] == flat(value), key
        for key, value in whole["job"].items():  # every column of the job's row
            assert row[f"job_{key}"] == flat(value), key
    assert next(iter(table[0])) == "job_id"
    assert table[0]["worker"] == "w,1" and table[0]["outcome"] == "reclaimed"
    assert len(whole["job"]) >= 19  # (the reference table's columns and lease_state)


@pytest.mark.parametrize(("fmt", "delimiter"), [("csv", ","), ("tsv", "\t")])
def test_history_events_is_one_table_of_events(reclaimed_once, run, fmt, delimiter):
    whole = json.loads(run("history", str(reclaimed_once), "-o", "json").out)
    done = run("history", str(reclaimed_once), "-o", fmt, "--events")
    assert done.code == 0, done.err
    table = table_of(done.out, delimiter)
    assert [r["event"] for r in table] == [e["event"] for e in whole["events"]]
    assert [r["event"] for r in table] == ["claimed", "reclaimed", "claimed"]
    for row, event in zip(table, whole["events"], strict=True):
        assert all(row[k] == flat(v) for k, v in event.items())
        assert row["job_id"] == str(reclaimed_once) and row["job_status"] == "processing"


def test_history_events_with_json_is_refused_in_one_line(reclaimed_once, run):
    done = run("history", str(reclaimed_once), "-o", "json", "--events")
    assert done.code == 2 and done.out == ""
    assert done.err.strip().count("\n") == 0 and "--events" in done.err


def test_history_events_on_a_table_shows_the_job_and_its_events(reclaimed_once, run):
    titles = [line for line in run("history", str(reclaimed_once), "--events").out.splitlines()]
    assert "job 1" in titles and "events" in titles and "attempts" not in titles
    assert "attempts" in run("history", str(reclaimed_once)).out.splitlines()


@pytest.mark.parametrize(("fmt", "delimiter"), [("csv", ","), ("tsv", "\t")])
def test_report_is_one_table_with_a_section_column(reclaimed_once, run, fmt, delimiter):
    whole = json.loads(run("report", "--since", "1h", "-o", "json").out)
    done = run("report", "--since", "1h", "-o", fmt)
    assert done.code == 0, done.err
    table = table_of(done.out, delimiter)
    assert next(iter(table[0])) == "section"
    by = {}
    for row in table:
        by.setdefault(row["section"], []).append(row)
    (top,) = by["report"]
    assert top["table"] == whole["table"] == "public.jobs"
    assert top["still_expired"] == str(whole["still_expired"])
    (latency,) = by["latency"]
    assert {k: latency[k] for k in whole["latency"]} == {
        k: flat(v) for k, v in whole["latency"].items()
    }
    assert [r["worker"] for r in by["expired"]] == ["w,1"]
    assert [r["actor"] for r in by["reclaims"]] == [e["actor"] for e in whole["reclaims"]]
    (waiting,) = by["awaiting_review"]
    assert waiting["by_why"] == flat(whole["awaiting_review"]["by_why"])  # a JSON cell
    for section, rows_ in by.items():  # a row's columns outside its section: empty
        if section == "expired":
            assert all(r["p50_s"] == "" for r in rows_)

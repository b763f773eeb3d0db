"""Values an application can store that JSON has no word for: a
float8 or numeric NaN/Infinity, and a jsonb payload nested 3,000 deep. Read back with real
rows: every JSON document jobctl prints parses (Python's json, and jq when it is installed:
jq 1.6 stops at 256 levels), non-finite numbers as the strings PostgreSQL spells them, the
deep payload as its JSON text; show, history and explain work in every format."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from helpers import add_jobs, claim_all

DEPTH = 3000


def strict_json(text: str) -> object:
    """The document parsed as strict JSON: a bare NaN or Infinity is an error, not a float;
    and jq (when installed) reads it too."""

    def refuse(constant: str) -> object:
        raise AssertionError(f"not JSON: a bare {constant}")

    value = json.loads(text, parse_constant=refuse)
    if shutil.which("jq"):
        jq = subprocess.run(["jq", "-c", "."], input=text, capture_output=True, text=True)
        assert jq.returncode == 0, jq.stderr
    return value


def json_lines(text: str) -> list[object]:
    return [strict_json(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def non_finite(conn, dsn, run):
    """Job 1 stuck, with float8 and numeric columns of the application's holding NaN,
    Infinity and -Infinity (and a float8[] with them)."""
    conn.execute(
        "ALTER TABLE jobs ADD COLUMN score float8, ADD COLUMN amount numeric, "
        "ADD COLUMN low float8, ADD COLUMN scores float8[]"
    )
    add_jobs(conn, 1)
    claim_all(dsn, 1)
    conn.execute(
        "UPDATE jobs SET score = 'NaN', amount = 'Infinity', low = '-Infinity', "
        "scores = ARRAY['NaN', 'Infinity', 1.5]::float8[]"
    )


@pytest.mark.parametrize("output", ["json", "jsonl"])
def test_non_finite_numbers_are_strings_in_json(non_finite, run, output):
    result = run("show", "1", "-o", output)
    assert result.code == 0, result.err
    document = strict_json(result.out) if output == "json" else json_lines(result.out)[0]
    flat = json.dumps(document)
    for spelled in ('"NaN"', '"Infinity"', '"-Infinity"'):
        assert spelled in flat, (spelled, flat)
    assert '["NaN", "Infinity", 1.5]' in flat


@pytest.mark.parametrize("output", ["json", "jsonl"])
def test_non_finite_numbers_in_listings(non_finite, run, output):
    for command in (("stuck",), ("history", "1"), ("explain", "1")):
        result = run(*command, "-o", output)
        assert result.code in (0, 1), (command, result.err)
        if output == "json":
            strict_json(result.out)
        else:
            json_lines(result.out)


@pytest.fixture
def deep(conn, dsn, run):
    """Jobs 1 and 2 stuck with a payload nested DEPTH deep ([[[...{"x": 1}...]]]), job 2 then
    requeued by an operator (its history has events); job 3 with a shallow payload."""
    add_jobs(conn, 3)
    claim_all(dsn, 3)
    conn.execute(
        "UPDATE jobs SET payload = CASE WHEN id = 3 THEN '{\"a\": [1]}'::jsonb ELSE "
        "(repeat('[', %(d)s) || '{\"x\": 1}' || repeat(']', %(d)s))::jsonb END",
        {"d": DEPTH},
    )
    assert run("requeue", "2", "--yes", "--force", "--reason", "checked").code == 0
    return conn.execute("SELECT payload::text AS t FROM jobs WHERE id = 1").fetchone()["t"]


@pytest.mark.parametrize("output", [None, "json", "jsonl", "csv"])
def test_a_deep_jsonb_payload_is_shown(deep, run, output):
    """show, history and explain of a stuck and a requeued job with the deep payload: in the
    table and every machine format, no RecursionError, the JSON strict."""
    for job in ("1", "2"):
        for command in ("show", "history", "explain"):
            args = (command, job, *(("-o", output) if output else ()))
            result = run(*args)
            assert result.code == 0, (args, result.err)
            assert "RecursionError" not in result.err and "internal error" not in result.err
            if output == "json":
                strict_json(result.out)
            elif output == "jsonl":
                json_lines(result.out)


def test_the_deep_payload_is_its_json_text(deep, run):
    """show --full -o json gives the deep payload as its JSON text (a string), whole: a
    reader gets every byte, and parses it with a parser of its own choosing (without --full
    a value this long is cut on the server, see test_sizes.py); a shallow payload is still a
    JSON object."""
    result = run("show", "1", "--full", "-o", "json")
    assert result.code == 0, result.err
    assert json.dumps(deep) in json.dumps(strict_json(result.out))
    shallow = run("show", "3", "-o", "json")
    assert result.code == 0, result.err
    assert '{"a": [1]}' in json.dumps(strict_json(shallow.out))

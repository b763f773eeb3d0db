"""The JSON the docs show is the JSON jobctl prints.

Every ``$ jobctl ... -o json`` (or ``jsonl``) example in README.md and docs/*.md whose output
shows JSON objects is run on a staged incident (expired leases, manual jobs reclaimed into the
review queue) and the keys of each object it documents compared with the keys of the real
output of that command: the same set, so a key jobctl adds (``lease_state``, the effective
policy ...) fails here until the example shows it, and a key the docs invent fails too. The
key sets come from the real output, never from a list kept here.

An example is run as written, but for what only its own setting can give: global options of
its own database (``--dsn``, ``--table``, ``--lock-timeout``) are dropped, a service's
``--every`` runs once, and a job id becomes one of the staged jobs'. An elided object
(``{"id": 42, ...}``) is not JSON and documents nothing here.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from helpers import add_jobs, claim_all

ROOT = Path(__file__).resolve().parents[2]
OWN_SETTINGS = {"--dsn", "--table", "--lock-timeout", "--statement-timeout", "--actor"}
TAKES_ID = {"fail", "requeue", "show", "history", "explain", "policy"}


def documented_objects(output: str) -> list[dict]:
    """The JSON objects an example's output shows: a whole array, or one object per line."""
    text = output.strip()
    if text.startswith("["):
        end = text.find("\n]")
        try:
            return [o for o in json.loads(text[: end + 2]) if isinstance(o, dict)]
        except ValueError:
            pass
    found = []
    for line in text.splitlines():
        line = line.strip().rstrip(",")
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                continue  # elided: {"id": 42, ...}
    return found


def examples() -> list[tuple[str, str, list[dict]]]:
    found = []
    for path in sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]):
        lines = path.read_text().split("\n")
        fenced = False
        for number, line in enumerate(lines, 1):
            if line.startswith("```"):
                fenced = not fenced
                continue
            if not (fenced and line.startswith("$ jobctl ") and re.search(r"-o\s*jsonl?\b", line)):
                continue
            out = []
            for following in lines[number:]:
                if following.startswith(("$", "```")):
                    break
                out.append(following)
            objects = documented_objects("\n".join(out))
            if objects:
                found.append((f"{path.relative_to(ROOT)}:{number}", line[2:], objects))
    return found


def as_run(line: str, job_id: int) -> list[str]:
    """The example's arguments as run here (see the module's docstring)."""
    words = shlex.split(line)[1:]
    for stop in ("|", ">"):
        words = words[: words.index(stop)] if stop in words else words
    args: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in OWN_SETTINGS or word == "--every":
            skip = True
            continue
        previous = args[-1] if args else ""
        if word.isdigit() and previous in TAKES_ID:
            word = str(job_id)
        args.append(word)
    return args


def staged(conn, dsn, run, *, kinds: bool) -> int:
    """Manual jobs reclaimed into the review queue; then expired leases, auto and manual,
    for stuck and reclaim; one of those (processing, expired): its id. ``kinds``: the table
    maps a kind and a queue column (an example that shows them was made on such a table)."""
    if kinds:
        conn.execute("ALTER TABLE jobs ADD COLUMN kind text")
        mapped = ("--column", "kind=kind", "--column", "queue=queue")
        assert run("schema", "apply", "--yes", *mapped).code == 0
    add_jobs(conn, 2)
    add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 4, worker="web-2", lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    add_jobs(conn, 3)
    add_jobs(conn, 1, policy="manual")
    claims = claim_all(dsn, 8, worker="web-3", lease_seconds=-60)
    return int(claims[-1].id)


EXAMPLES = examples()


def test_the_docs_have_json_examples():
    where = {w.split(":")[0] for w, _, _ in EXAMPLES}
    assert {"docs/commands.md", "docs/retrofit.md", "docs/safety.md"} <= where


@pytest.mark.parametrize(("where", "line", "objects"), EXAMPLES, ids=[w for w, _, _ in EXAMPLES])
def test_a_json_example_has_the_keys_of_the_real_output(conn, dsn, run, where, line, objects):
    job_id = staged(conn, dsn, run, kinds=any("kind" in o for o in objects))
    args = as_run(line, job_id)
    result = run(*args)
    real = [json.loads(x) for x in result.out.splitlines()] if "jsonl" in args else None
    if real is None:
        real = json.loads(result.out or "null")
    assert real, f"{where}: jobctl {shlex.join(args)} printed no rows (exit {result.code})"
    real_keys = set((real[0] if isinstance(real, list) else real).keys())
    for documented in objects:
        missing, invented = real_keys - set(documented), set(documented) - real_keys
        assert not missing and not invented, (
            f"{where}: the example of jobctl {shlex.join(args)} lacks {sorted(missing)} "
            f"and shows {sorted(invented)} that jobctl does not print"
        )

"""No word said twice in a row ("the the") in what jobctl says or documents: its strings (an
implicit concatenation of literals read as one: the doubling hides across the split), its SQL
comments and the prose of its docs (fenced code kept out: a table's columns repeat)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a word, then the same word (same case) after spaces or one line break; not a part of an
# option, a name or a file (--reclaimer reclaimer, plan.json, ARRAY ARRAY['a'])
DOUBLED = re.compile(r"(?<![-\w.])([A-Za-z]{2,})(?: +| *\n *)\1(?![\w.\[-])")


def _strings(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            found.append((node.lineno, text))
    return found


def _prose(text: str) -> str:
    """Markdown without its fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def test_no_doubled_word_in_jobctl_strings():
    doubled = [
        f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r}"
        for path in sorted((ROOT / "jobctl").rglob("*.py"))
        for line, text in _strings(path)
        for m in DOUBLED.finditer(text)
    ]
    assert not doubled, doubled


def test_no_doubled_word_in_sql_comments_or_docs():
    doubled = []
    for path in sorted((ROOT / "jobctl" / "sql").rglob("*.sql")):
        comments = "\n".join(  # each block's "-- name:" line is no sentence
            line.split("--", 1)[1]
            for line in path.read_text().splitlines()
            if "--" in line and not line.startswith("-- name:")
        )
        doubled += [f"{path.name}: {m.group(0)!r}" for m in DOUBLED.finditer(comments)]
    for path in sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")]):
        prose = _prose(path.read_text())
        doubled += [f"{path.relative_to(ROOT)}: {m.group(0)!r}" for m in DOUBLED.finditer(prose)]
    assert not doubled, doubled


def test_the_pattern_finds_a_doubling_split_across_literals():
    source = 'x = (\n    "drop the "\n    "the recorded names"\n)\n'
    (text,) = [n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)]
    assert DOUBLED.search(text)
    assert not DOUBLED.search("jobctl top --allow-writes writes; --plan plan.json")

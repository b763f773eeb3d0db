"""``jobctl doctor``'s checklist as people read it: each check's status and evidence, then its
findings (the statement as normalized, its role, calls and rows, what is wrong, the fix).
Every text from the database (a statement, a role, a worker) made safe first (safe_text).
Pure (layer 0)."""

from __future__ import annotations

import textwrap
from typing import Any

from jobctl.contract import safe_text
from jobctl.contract.shapes import Row
from jobctl.render.output import Document, Section

MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "unknown": "UNKNOWN"}
INDENT = " " * 9  # under a check's title, past its mark
STATEMENT_CHARS = 300  # of a long statement, the start (-o json has it whole)


def _s(value: Any) -> str:
    return safe_text.visible(str(value))


def text(report: Row, width: int = 100) -> str:
    """The checklist: one line per check, its findings indented under it."""
    out = [f"jobctl doctor: {_s(report['table'])}"]
    for check in report["checks"]:
        out.append("")
        title = _wrapped(check["title"], width, INDENT)  # at words, never mid-word
        out.append(f"{MARK[check['status']]:<8} {title[0].lstrip()}")
        out += title[1:]
        out += _wrapped(_s(check["evidence"]), width, INDENT)
        for finding in check["findings"]:
            out += _finding(finding, width)
    return "\n".join(out) + "\n"


def _finding(f: Row, width: int) -> list[str]:
    if "rejected" in f:
        head = (
            f"- {f['rejected']} {f['kind']}(s) refused: queryid {f['queryid']}, role "
            f"{_s(f['role'])}, {f['calls']} call(s), {f['rows']} row(s)"
        )
        return _wrapped(head, width, INDENT)
    if "statement" in f:
        statement = " ".join(str(f["statement"]).split())
        if len(statement) > STATEMENT_CHARS:
            statement = statement[:STATEMENT_CHARS] + " ..."
        if "source" in f:  # a rule's or trigger's, read from the catalog
            head = f"- {f['kind']}: {f['source']} {_s(f['name'])} on {_s(f['relation'])}"
            if "function" in f:
                head += f", function {_s(f['function'])}"
            head += " (read from the catalog: pg_stat_statements never holds it)"
        else:
            head = (
                f"- {f['kind']}: queryid {f['queryid']}, role {_s(f['role'])}, "
                f"{f['calls']} call(s), {f['rows']} row(s)"
            )
        return [
            *_wrapped(head, width, INDENT),
            *_wrapped(_s(statement), width, INDENT + "    "),
            *_wrapped(f"wrong: {_s(f['wrong'])}", width, INDENT + "  "),
            *_wrapped(
                f"fix: {f['fix']}"
                + (" (jobctl schema statements prints it)" if _fix_names_sql(f) else ""),
                width,
                INDENT + "  ",
            ),
        ]
    if "wrong" in f:
        return _wrapped(f"- {f['wrong']}; fix: {f['fix']}", width, INDENT)
    if f.get("advice"):
        return _wrapped(f"- worker {_s(f['worker'])}: " + "; ".join(f["advice"]), width, INDENT)
    return []


def _fix_names_sql(f: Row) -> bool:
    """Whether to say where the fix's statement is printed (its words may say it already)."""
    return "fix_sql" in f and "jobctl schema statements" not in str(f["fix"])


def _wrapped(line: str, width: int, indent: str) -> list[str]:
    return textwrap.wrap(
        line, width, initial_indent=indent, subsequent_indent=indent + "  ", break_on_hyphens=False
    ) or [indent]


def document(report: Row) -> Document:
    """``-o json`` the report whole; csv/tsv one row per check."""
    shown = [
        {
            "check": c["check"],
            "status": c["status"],
            "findings": len(c["findings"]),
            "evidence": c["evidence"],
        }
        for c in report["checks"]
    ]
    return Document(report, [Section(None, shown, ["check", "status", "findings", "evidence"])])

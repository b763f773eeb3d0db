"""What a person setting up their own table reads (issue 36, trip 10): the SQL that adds a
missing optional column, schema check's details whole at 80 columns, and no comment of the
generated script calling ``late`` the default history mode."""

from __future__ import annotations

import re
from pathlib import Path

from jobctl.render import screen
from jobctl.schema import apply
from jobctl.table.mapping import TableMapping

SQL = Path(__file__).resolve().parents[2] / "jobctl" / "sql"


def test_no_comment_calls_late_the_default_history_mode():
    for path in SQL.rglob("*.sql"):
        comments = " ".join(
            line.strip().removeprefix("--").strip()
            for line in path.read_text().splitlines()
            if line.strip().startswith("--")
        )
        assert not re.search(r"'late' \(the default|by default, late heartbeats", comments), path


def test_a_missing_optional_column_is_told_the_sql_that_adds_it():
    hint = apply.add_columns_hint("public.tasks", TableMapping(), ["finished_at"])
    assert hint == (
        ", or add it when the table has none: "
        "ALTER TABLE public.tasks ADD COLUMN finished_at timestamptz"
    )
    mapped = TableMapping(columns={"finished_at": "Done At"})
    assert 'ADD COLUMN "Done At" timestamptz' in apply.add_columns_hint(
        "t", mapped, ["finished_at"]
    )
    two = apply.add_columns_hint("t", TableMapping(), ["id", "last_error", "updated_at"])
    assert two == (
        ", or add them when the table has none: ALTER TABLE t ADD COLUMN last_error text, "
        "ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now()"
    )
    assert apply.add_columns_hint("t", TableMapping(), ["id", "status"]) == ""


def test_a_checklist_wraps_each_detail_under_its_row_never_cuts_it():
    detail = "0 rows where (status = 'processing') <> (attempt_token IS NOT NULL) " * 2
    lines = screen.checklist(
        [("yes", "table exists", "public.jobs"), ("NO", "token iff processing", detail)], 80
    )
    assert lines[0] == "yes  table exists: public.jobs"
    assert lines[1].startswith("NO   token iff processing: 0 rows where")
    assert all(len(line) <= 80 for line in lines) and "…" not in "".join(lines)
    assert all(line.startswith("       ") for line in lines[2:])
    said = " ".join(" ".join(lines[1:]).split())
    assert said == " ".join(f"NO token iff processing: {detail}".split())

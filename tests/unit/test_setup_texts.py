"""What a person setting up their own table reads: the SQL that adds a
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
        ", or add it when the table has none (retry on lock timeout): BEGIN; SET LOCAL "
        "lock_timeout = '150ms'; ALTER TABLE public.tasks ADD COLUMN finished_at timestamptz; "
        "COMMENT ON COLUMN public.tasks.finished_at IS 'added for the lease design of jobctl "
        "(jobctl schema remove names it)'; COMMIT"
    )
    mapped = TableMapping(columns={"finished_at": "Done At"})
    assert 'ADD COLUMN "Done At" timestamptz' in apply.add_columns_hint(
        "t", mapped, ["finished_at"]
    )
    two = apply.add_columns_hint("t", TableMapping(), ["id", "last_error", "updated_at"])
    assert two == (
        ", or add them when the table has none (retry on lock timeout): BEGIN; SET LOCAL "
        "lock_timeout = '150ms'; ALTER TABLE t ADD COLUMN last_error text, "
        "ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(); "
        f"COMMENT ON COLUMN t.last_error IS '{apply.SUGGESTED_COMMENT}'; "
        f"COMMENT ON COLUMN t.updated_at IS '{apply.SUGGESTED_COMMENT}'; COMMIT"
    )
    assert apply.add_columns_hint("t", TableMapping(), ["id", "status"]) == ""


def test_every_suggested_alter_sets_its_lock_timeout_first():
    """An ALTER TABLE on a busy table waits for every transaction on it, and the workers
    queue behind the ALTER: each one jobctl suggests bounds that wait first, in its own
    transaction (SET LOCAL: nothing left on the session)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for missing in (["finished_at"], ["attempts", "max_attempts", "updated_at"]):
        hint = apply.add_columns_hint("public.t", TableMapping(), missing)
        assert re.search(r"BEGIN; SET LOCAL lock_timeout = '\d+ms'; ALTER TABLE .*; COMMIT$", hint)
    # and no other string of jobctl's suggests an ALTER TABLE ... ADD COLUMN without one
    for path in (root / "jobctl").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if re.search(r"ALTER TABLE \S+ ADD COLUMN", text):
                    assert "lock_timeout" in text, f"{path}: {text[:80]}"


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

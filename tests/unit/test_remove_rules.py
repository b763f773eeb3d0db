"""schema remove's rules that need no database: the live-lease guard's dollar quote, and names
from the catalog in a script's comments."""

from __future__ import annotations

from psycopg import sql

from jobctl import db
from jobctl.schema import remove
from jobctl.table.mapping import TableMapping


def table(name: str, mapping: TableMapping | None = None) -> db.JobsTable:
    return db.JobsTable(
        sql.Identifier("public", name), "public", name, 1, name, mapping or TableMapping()
    )


def test_the_guards_dollar_quote_never_occurs_in_its_body():
    for name in ("jobs", "a$jobctl$b", "x$jobctl$y$jobctl1$z"):
        text = remove._guard(table(name)).as_string(None)
        tag = text.split("\n", 1)[0].removeprefix("DO ")
        assert tag.startswith("$jobctl") and tag.endswith("$")
        assert text.count(tag) == 2, text  # opens and closes the body, nowhere else
        assert text.rstrip().endswith(tag)


def test_the_guard_speaks_the_tables_names():
    mapping = TableMapping.parse(
        columns=["status=state", "lease_expires_at=lease_until"], statuses=["processing=running"]
    )
    text = remove._guard(table("tasks", mapping)).as_string(None)
    assert "\"state\" OPERATOR(pg_catalog.=) 'running'" in text
    assert '"lease_until" OPERATOR(pg_catalog.>) pg_catalog.now()' in text


def test_names_from_the_catalog_cannot_end_a_comment():
    shown = remove._shown('public."evil\nDROP TABLE jobs; --"')
    assert "\n" not in shown and "\\n" in shown

"""A generated script holds no control character: names and texts that carry one are written
in PostgreSQL's escaped forms; psql reading them back is tested in
tests/integration/test_hardening.py."""

from __future__ import annotations

from psycopg import sql

from jobctl.sql import printable


def test_unsafe_names_and_texts_are_escaped_the_rest_left_to_psycopg():
    statement = sql.SQL("CREATE INDEX {} ON {} WHERE s = {} AND t = {}").format(
        sql.Identifier("idx_a\nb"),
        sql.Identifier("public", 'jobs_b\r\x1b[2J\u2028"q\\'),
        sql.Literal("run\nDROP TABLE x; -- it's"),
        sql.Literal("plain"),
    )
    text = printable.printable(statement).as_string(None)
    assert text == (
        'CREATE INDEX U&"idx_a\\000Ab" ON "public".U&"jobs_b\\000D\\001B[2J\\2028""q\\\\" '
        "WHERE s = E'run\\u000ADROP TABLE x; -- it\\'s' AND t = 'plain'"
    )


def test_a_statement_without_unsafe_characters_is_unchanged():
    statement = sql.SQL("SELECT {} FROM {}").format(sql.Literal("a'b"), sql.Identifier("s", "t"))
    assert printable.printable(statement).as_string(None) == statement.as_string(None)

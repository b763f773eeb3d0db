"""Issue 23, finding 1: the few statements that run under the session's own search_path (an
application role may put objects of its own on it) name every function, operator and type
with its schema. Every other statement runs after transaction_settings or safe_search_path
set jobctl's (pg_catalog, pg_temp): tests/integration/test_hostile_path.py proves it."""

from __future__ import annotations

import re

import pytest

from jobctl import queries

# the statements run before jobctl's search_path is set, or outside a transaction
UNDER_USER_PATH = (
    "transaction_settings",  # the statement that sets it
    "read_only_setting",
    "origin_session",  # its parts (issue 32, findings 7 and 11)
    "parse_settings",
    "safe_search_path",
    "safe_transaction_settings",
    "user_search_path",
    "write_search_path",
    "table_identity",  # a table named as typed, found as the user would find it
    "current_schema",
    "reclaim_index",  # CREATE INDEX CONCURRENTLY: outside any transaction
    # the worker API (jobctl.lease): each statement in the workers' autocommit
    "claim",
    "heartbeat",
    "complete",
    "worker_fail",
    "job_outcome",
)
KEYWORDS = {"operator", "in", "any", "exists", "values", "on", "as", "cast"}


def unqualified(text: str) -> list[str]:
    """The functions, operators and types in ``text`` not named with pg_catalog."""
    text = re.sub(r"--[^\n]*", " ", text)  # comments
    # an assignment of UPDATE's SET list (SET {x} = ..., {y} = ...) is no operator
    text = re.sub(r"(^|,|\bSET)(\s*)\{[a-z_]+\}\s*=", r"\1\2", text, flags=re.MULTILINE)
    text = re.sub(r"'(?:[^']|'')*'", " '' ", text)  # literals
    text = re.sub(r"\{[a-z_]+\}|%\([a-z_]+\)s|%%", " 0 ", text)  # placeholders
    text = re.sub(r"OPERATOR\(pg_catalog\.[^)\s]+\)", " ", text)
    found = [
        f"function {name}"
        for name in re.findall(r"(?<![\w.])([A-Za-z_]\w*)\s*\(", text)
        if name.lower() not in KEYWORDS
    ]
    found += [f"type {t}" for t in re.findall(r"::\s*((?!pg_catalog\.)[A-Za-z_\"][\w.\"]*)", text)]
    found += [f"operator {op}" for op in re.findall(r"[=<>!+*/|~@#&^-]+", text)]
    return found


@pytest.mark.parametrize("name", UNDER_USER_PATH)
def test_statements_under_the_users_search_path_name_every_schema(name):
    assert unqualified(queries.blocks()[name]) == []


def test_the_lint_finds_what_it_looks_for():
    assert unqualified("SELECT format('%%I', x) = y::text, pg_catalog.now()") == [
        "function format",
        "type text",
        "operator =",
    ]
    assert unqualified("SELECT a OPERATOR(pg_catalog.=) b::pg_catalog.int4 -- a = b") == []
    assert unqualified("UPDATE t SET {a} = 1, {b} = 2 WHERE {c} = 3") == ["operator ="]


def test_every_transaction_sets_jobctls_search_path_first():
    from jobctl import db

    for writes in (False, True):
        text = db._settings_statement(False, writes).as_string(None)
        first = text.split("SELECT", 1)[1].strip()
        assert first.startswith("pg_catalog.set_config('search_path', "), text
        assert ("'pg_catalog'," in first) if writes else ("'pg_catalog, pg_temp'" in first)
    assert "pg_catalog, pg_temp" in queries.blocks()["safe_search_path"]

"""The statements that run under a search path
other than jobctl's own (pg_catalog, pg_temp) name every function, operator and type with its
schema, and use no construct that looks an operator up by name.

Those are the statements run before jobctl's search_path is set or outside a transaction,
the worker API's (the workers' autocommit), and jobctl's writes to the jobs table: they run
under write_search_path (pg_catalog, then the session's own path, so the application's
triggers find their objects), where an operator of an application's schema that matches the
operands better than pg_catalog's (``public.=(varchar, varchar)`` against
``pg_catalog.=(text, text)``) would be chosen. The writes are found in the code (every call
that names an ``action=``), and the lint covers each of them and every block it includes,
transitively. Every other statement runs after transaction_settings or safe_search_path set
jobctl's: tests/integration/test_hostile_path.py and test_hostile_operators.py prove it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from psycopg import sql

from jobctl import db
from jobctl.sql import queries
from jobctl.table import column_types
from jobctl.table.mapping import TableMapping

# the statements run before jobctl's search_path is set, or outside a transaction
UNDER_USER_PATH = (
    "transaction_settings",  # the statement that sets it
    "read_only_setting",
    "origin_session",  # its parts
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
    # the claim's condition on pauses ({claim_pause_check}: claim_unpaused, and job_paused
    # in it) and a kind or queue of another type than text as text (kind_value)
    "claim_unpaused",
    "job_paused",
    "job_pause_keys",
    "pause_keys",
    "pause_keys_read",  # lease.Worker's read of the table's pauses, at most once a second
    "optional_text",
)
# jobctl's writes to the jobs table: the statements run with an action declared (found in
# the code by write_statements_in_the_code; a new one must be added here, and is linted)
WRITES = (
    "reclaim_batch",
    "reclaim_paced",
    "reclaim_paced_join",
    "refund_attempt",
    "manual_requeue",
    "manual_fail",
    "manual_cancel",
    "set_policy",
    "reclaimer_call",  # the reclaimer role's batch: the table's function (schema.reclaimer)
)
# the catalog reads inside the writes' transactions (manual._require_audit, before the write)
IN_WRITE_TRANSACTIONS = ("history_triggers", "table_columns")
# blocks a write includes through a fragment of db.spelling, not by name: reclaim_batch's
# {reclaim_refused} (history 013)
SPELLED_INTO_WRITES = ("reclaim_refusal",)
JOBCTL = Path(__file__).resolve().parents[2] / "jobctl"
# words followed by a parenthesis that call no function looked up by name
KEYWORDS = {
    "operator",
    "from",  # FROM (SELECT ...): a subquery
    "in",
    "any",
    "all",
    "exists",
    "values",
    "on",
    "as",
    "cast",
    "and",
    "or",
    "not",
    "coalesce",  # no function: the arguments' common type, no operator
    "greatest",  # the type's default btree operator class (only a superuser makes one)
    "least",
    "array",  # ARRAY(subquery): a constructor, no function looked up
    "over",  # a window clause (reclaim --spread's row_number() OVER (...)): no function
}
# constructs that look their operator up by name, whatever the search path finds
BY_NAME = {
    "IS DISTINCT FROM": r"\bIS\s+(?:NOT\s+)?DISTINCT\s+FROM\b",
    "IN (...)": r"\bIN\s*\(",
    "BETWEEN": r"\bBETWEEN\b",
    "LIKE": r"\b(?:I?LIKE|SIMILAR)\b",
    "CASE x WHEN": r"\bCASE\s+(?!WHEN\b)",
}


def _without_assignments(text: str) -> str:
    """UPDATE's SET list without its assignments (SET {x} = ..., jobctl_action = ...): an
    assignment is no operator. Only between SET and the FROM/WHERE/RETURNING after it."""

    def strip(match: re.Match[str]) -> str:
        return re.sub(r"(SET|,)(\s*)(\{[a-z_]+\}|jobctl_action)\s*=", r"\1\2", match[0])

    # a block that is a part of a SET list (reclaim_batch's {refund_set}: ", {attempts} = ...")
    text = re.sub(r"\A(\s*,\s*)(\{[a-z_]+\})\s*=", r"\1\2", text)
    return re.sub(r"\bSET\b.*?(?=\bFROM\b|\bWHERE\b|\bRETURNING\b|\Z)", strip, text, flags=re.S)


def unqualified(text: str) -> list[str]:
    """The functions, operators and types in ``text`` not named with pg_catalog, and the
    constructs that look an operator up by name."""
    text = re.sub(r"--[^\n]*", " ", text)  # comments
    text = re.sub(r"'(?:[^']|'')*'", " '' ", text)  # literals
    text = _without_assignments(text)
    text = re.sub(r"\{[a-z_]+\}|%\([a-z_]+\)s|%%", " 0 ", text)  # placeholders
    text = re.sub(r"OPERATOR\(pg_catalog\.[^)\s]+\)", " ", text)
    text = re.sub(r"\.\*", " ", text)  # expired.*
    text = re.sub(r"\(\s*\*\s*\)", "()", text)  # count(*)
    found = [
        f"construct {what}"
        for what, pattern in BY_NAME.items()
        for _ in re.findall(pattern, text, flags=re.IGNORECASE)
    ]
    # a function's column definition list (AS p(id type, ...)): each type with its schema
    for columns in re.findall(r"\bAS\s+\w+\s*\(([^()]*)\)", text, flags=re.IGNORECASE):
        for column in columns.split(","):
            words = column.split()
            if len(words) > 1 and words[1] != "0" and not words[1].startswith("pg_catalog."):
                found.append(f"type {words[1]}")
    text = re.sub(r"\bAS\s+\w+\s*\([^()]*\)", " ", text, flags=re.IGNORECASE)
    found += [
        f"function {name}"
        for name in re.findall(r"(?<![\w.])([A-Za-z_]\w*)\s*\(", text)
        if name.lower() not in KEYWORDS
    ]
    found += [f"type {t}" for t in re.findall(r"::\s*((?!pg_catalog\.)[A-Za-z_\"][\w.\"]*)", text)]
    found += [f"operator {op}" for op in re.findall(r"[=<>!+*/|~@#&^-]+", text)]
    return found


def included(names: tuple[str, ...]) -> list[str]:
    """``names`` and every block they include, transitively."""
    blocks, seen, todo = queries.blocks(), set[str](), list(names)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [p for p in re.findall(r"\{([a-z_]+)\}", blocks[name]) if p in blocks]
    return sorted(seen)


def write_statements_in_the_code() -> set[str]:
    """The statements jobctl runs with an action declared: in a ``with`` whose context call
    names ``action=``, the blocks named in its body; in a function that passes ``action=``
    to any other call (``s.pipelined(..., action=)``, ``_fenced_write(..., action=)``), the
    blocks that function names."""
    blocks = queries.blocks()

    def named(node: ast.AST) -> set[str]:
        return {
            n.value
            for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in blocks
        }

    def declares(call: ast.AST) -> bool:
        return isinstance(call, ast.Call) and any(k.arg == "action" for k in call.keywords)

    found: set[str] = set()
    for path in sorted(JOBCTL.rglob("*.py")):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, ast.FunctionDef):
                continue
            in_with = set()
            for node in ast.walk(function):
                if isinstance(node, ast.With):
                    for item in node.items:
                        if declares(item.context_expr):
                            in_with.add(id(item.context_expr))
                            for statement in node.body:
                                found |= named(statement)
            if any(declares(n) and id(n) not in in_with for n in ast.walk(function)):
                found |= named(function)
    return found


@pytest.mark.parametrize("name", UNDER_USER_PATH)
def test_statements_under_the_users_search_path_name_every_schema(name):
    assert unqualified(queries.blocks()[name]) == []


def test_the_writes_are_the_statements_the_code_runs_with_an_action():
    assert write_statements_in_the_code() == set(WRITES)


@pytest.mark.parametrize("name", included(WRITES + IN_WRITE_TRANSACTIONS + SPELLED_INTO_WRITES))
def test_every_block_of_the_writes_names_every_schema(name):
    """Each write, and each block it includes at any depth (the lease columns, the expired
    filter, the fence ...): under the session's own path after pg_catalog."""
    assert unqualified(queries.blocks()[name]) == []


# the typed fragments of column_types, for columns of each type jobctl serves
TYPED = [
    {},
    {"last_error": column_types.ColumnType("e", "pg_catalog", "jsonb", "jsonb")},
    {"last_error": column_types.ColumnType("e", "pg_catalog", "json", "json")},
    {
        "last_error": column_types.ColumnType(
            "e", "pg_catalog", "varchar", "character varying(20)"
        ),
        "reserved_by": column_types.ColumnType("w", "pg_catalog", "uuid", "uuid"),
        "updated_at": column_types.ColumnType("u", "pg_catalog", "int8", "bigint"),
    },
    {"reserved_by": column_types.ColumnType("w", "pg_catalog", "int4", "integer")},
]


@pytest.mark.parametrize("types", TYPED, ids=range(len(TYPED)))
def test_the_typed_fragments_name_every_schema(types):
    """What the Python side puts into the writes (the reason, the time, the fence's types):
    functions, operators and types with their schema; every type named in pg_catalog."""
    units = {"updated_at": "ms"} if "updated_at" in types else {}
    fragments = db.spelling(sql.Identifier("jobs"), TableMapping(units=units), types=types)
    typed = column_types.fragments(types, fragments, queries.query("reclaim_error"), units)
    for name, fragment in typed.items():
        text = fragment.as_string(None)
        assert unqualified(text) == [], (name, text)
        schemas = re.findall(r'"([^"]+)"\."[^"]+"', text)
        assert all(s == "pg_catalog" for s in schemas), (name, text)


def test_the_lint_finds_what_it_looks_for():
    assert unqualified("SELECT format('%%I', x) = y::text, pg_catalog.now()") == [
        "function format",
        "type text",
        "operator =",
    ]
    assert unqualified("SELECT a OPERATOR(pg_catalog.=) b::pg_catalog.int4 -- a = b") == []
    assert unqualified("UPDATE t SET {a} = 1, {b} = 2 WHERE {c} = 3") == ["operator ="]
    assert unqualified("UPDATE t SET jobctl_action = 'x' RETURNING a = 1") == ["operator ="]
    assert unqualified("SELECT a, {b} = 1") == ["operator ="]  # a SELECT list: no assignment
    assert unqualified(
        "SELECT a IS NOT DISTINCT FROM b, c NOT IN (1), d BETWEEN 1 AND 2, e LIKE 'x', "
        "CASE f WHEN 1 THEN 2 END, nullif(g, h)"
    ) == [
        "construct IS DISTINCT FROM",
        "construct IN (...)",
        "construct BETWEEN",
        "construct LIKE",
        "construct CASE x WHEN",
        "function nullif",
    ]
    assert unqualified("SELECT FROM f() AS p(id {id_type}, s text, t pg_catalog.uuid)") == [
        "type text",
        "function f",
    ]
    assert unqualified("RETURNING expired.*, count(*)") == ["function count"]


def test_the_code_scan_finds_a_write():
    """The scan sees a statement run in a ``with`` declaring an action, and one a function
    passes on with an action; a read-only transaction's statement is none."""
    assert "reclaim_batch" in write_statements_in_the_code()
    assert "stuck" not in write_statements_in_the_code()


def test_every_transaction_sets_jobctls_search_path_first():
    for writes in (False, True):
        text = db._settings_statement(False, writes).as_string(None)
        first = text.split("SELECT", 1)[1].strip()
        assert first.startswith("pg_catalog.set_config('search_path', "), text
        assert ("'pg_catalog'," in first) if writes else ("'pg_catalog, pg_temp'" in first)
    assert "pg_catalog, pg_temp" in queries.blocks()["safe_search_path"]

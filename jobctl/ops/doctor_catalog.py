"""``jobctl doctor``'s reading of the writes the catalog makes on the application's behalf,
which pg_stat_statements never holds as themselves: a view's columns (each the table's
column it shows, so that a write through the view is judged on the table's), a rule's
actions (``pg_get_ruledef``: an ``INSERT INTO app.done_log`` whose rule ``DO ALSO UPDATE``s
the jobs table is recorded as the INSERT alone), and a trigger's PL/pgSQL statements (its
function's definition, ``pg_get_functiondef``, parsed by PL/pgSQL's own parser through
pglast: never a regular expression). Everything here is text the catalog gave, the
application's: parsed, never run, and shown only through ``safe_text.visible`` (the
checklist does). Pure: unit-tested on strings (tests/unit/test_doctor_catalog.py).

A trigger function in another language (PL/Python, PL/Perl, ...) or one that runs dynamic
SQL (``EXECUTE``) cannot be read: when its text holds a write and the table's name, it is
a finding to check by hand (``unparsed``). A function the trigger's function calls is not
followed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pglast import parser

from jobctl.ops import doctor_fence as fence
from jobctl.ops import doctor_statements as judge
from jobctl.ops.doctor_kinds import finding

# a view's column -> the relation (schema or None, name) and its column it shows; None: an
# expression, or no one relation's column
Shown = dict[str, tuple[tuple[str | None, str], str] | None]

DYNAMIC = "it runs dynamic SQL (EXECUTE), which doctor cannot read"
LANGUAGE = "its function is in LANGUAGE {language}; doctor reads PL/pgSQL only"
# the languages whose functions hold no statement doctor could read (compiled code)
COMPILED = frozenset({"c", "internal"})


def view_columns(definition: str, columns: Sequence[str]) -> Shown:
    """What each of a view's ``columns`` (its attributes, in order) shows, read from its
    definition (``pg_get_viewdef``: a SELECT): the relation and column a plain column
    reference reads, else None (an expression, a set operation, a definition that does not
    parse: a write through such a column is judged on no column of the table)."""
    shown: Shown = dict.fromkeys(columns)
    try:
        (stmt,) = judge.parse(definition)
    except (judge.Unparsed, ValueError):
        return shown
    select = stmt.get("SelectStmt") or {}
    relations = _relations(select.get("fromClause") or [])
    targets = [t.get("ResTarget", {}) for t in select.get("targetList") or []]
    if select.get("op", "SETOP_NONE") != "SETOP_NONE" or len(targets) != len(columns):
        return shown
    for column, target in zip(columns, targets, strict=True):
        ref = (target.get("val") or {}).get("ColumnRef") or {}
        fields = [f.get("String", {}).get("sval") for f in ref.get("fields", [])]
        if not fields or None in fields:
            continue
        if len(fields) == 1 and len(relations) == 1:
            shown[column] = (next(iter(relations.values())), fields[0])
        elif len(fields) >= 2 and fields[-2] in relations:
            shown[column] = (relations[fields[-2]], fields[-1])
    return shown


def _relations(items: Iterable[Any]) -> dict[str, tuple[str | None, str]]:
    """The relations of a FROM (joins' too), by the name a column reference qualifies them
    with: their alias, else their name."""
    found: dict[str, tuple[str | None, str]] = {}
    pending = list(items)
    while pending:
        item = pending.pop()
        if not isinstance(item, dict):
            continue
        var = item.get("RangeVar")
        join = item.get("JoinExpr")
        if isinstance(var, dict):
            relname = str(var.get("relname"))
            found[str((var.get("alias") or {}).get("aliasname") or relname)] = (
                var.get("schemaname"),
                relname,
            )
        elif isinstance(join, dict):
            pending += [join.get("larg"), join.get("rarg")]
    return found


def views_on_the_table(
    views: Mapping[tuple[str, str], Shown], table: judge.Table
) -> dict[tuple[str, str], dict[str, str | None]]:
    """Each view's columns as the table's columns they show (None: none of them), through
    views of views at any depth (each resolved once those it reads are)."""
    done: dict[tuple[str, str], dict[str, str | None]] = {}
    for _ in range(len(views) + 1):
        for key, shown in views.items():
            if key not in done:
                mapped = _on_the_table(shown, views, done, table)
                if mapped is not None:
                    done[key] = mapped
    return done


def _on_the_table(
    shown: Shown,
    views: Mapping[tuple[str, str], Shown],
    done: Mapping[tuple[str, str], dict[str, str | None]],
    table: judge.Table,
) -> dict[str, str | None] | None:
    """One view's columns as the table's, or None while a view it reads is not yet."""
    mapped: dict[str, str | None] = {}
    for column, source in shown.items():
        mapped[column] = None
        if source is None:
            continue
        (schema, name), inner = source
        if name == table.name and schema in (None, table.schema):
            mapped[column] = inner
            continue
        under = [k for k in views if k[1] == name and schema in (None, k[0])]
        if under and under[0] not in done:
            return None  # another view first
        if under:
            mapped[column] = done[under[0]].get(inner)
    return mapped


def trigger_statements(definition: str, language: str, table: judge.Table) -> list[str] | str:
    """The statements of a trigger's function (its ``pg_get_functiondef``), as PL/pgSQL's
    parser gives them; or why they cannot be read, when its text may write the table."""
    if language in COMPILED:
        return []
    if language != "plpgsql":
        return LANGUAGE.format(language=language) if _may_write(definition, table) else []
    try:
        tree = parser.parse_plpgsql_json(definition)
        nodes = fence.walk(json.loads(tree))
    except (parser.ParseError, RecursionError, ValueError) as e:
        return f"PL/pgSQL's parser does not accept it: {e}"
    dynamic = any(
        k in n for n in nodes for k in ("PLpgSQL_stmt_dynexecute", "PLpgSQL_stmt_dynfors")
    )
    if dynamic and _may_write(definition, table):
        return DYNAMIC
    found = []
    for node in nodes:
        expr = node.get("PLpgSQL_expr")
        if isinstance(expr, dict) and not expr.get("parseMode") and expr.get("query"):
            found.append(str(expr["query"]))
    return found


def _may_write(text: str, table: judge.Table) -> bool:
    return bool(judge.may_write(text)) and table.name.lower() in text.lower()


def hooks(
    rules: Iterable[Mapping[str, Any]],
    triggers: Iterable[Mapping[str, Any]],
    table: judge.Table,
    *,
    limit: int,
    kept: int,
) -> list[dict[str, Any]]:
    """The findings in the rules' actions and the triggers' statements that write the jobs
    table, each named by its rule or trigger and the relation it is on. ``rules``: schema,
    relation, name, definition, chars (its whole length; the definition is cut at
    ``limit``); ``triggers``: the same and function, language."""
    found: list[dict[str, Any]] = []
    for rule in rules:
        verdict = judge.judge(rule["definition"], table, chars=rule["chars"], limit=limit)
        found += _found(verdict, "rule", rule, rule["definition"], kept)
    for trigger in triggers:
        text, whole = trigger["definition"], int(trigger["chars"])
        if whole > len(text):
            statements: list[str] | str = judge.CUT.format(chars=whole, limit=limit)
        else:
            statements = trigger_statements(text, trigger["language"], table)
        if isinstance(statements, str):
            verdict = judge.Judged(True, ("unparsed",), why=statements)
            found += _found(verdict, "trigger", trigger, text, kept)
            continue
        for statement in statements:
            found += _found(judge.judge(statement, table), "trigger", trigger, statement, kept)
    return found


def _found(
    verdict: judge.Judged, source: str, hook: Mapping[str, Any], text: str, kept: int
) -> list[dict[str, Any]]:
    about = {
        "source": source,
        "name": hook["name"],
        "relation": f"{hook['schema']}.{hook['relation']}",
        "statement": text[:kept],
    }
    if "function" in hook:
        about["function"] = hook["function"]
    return [finding(kind, about, verdict.why_of(kind)) for kind in verdict.kinds]

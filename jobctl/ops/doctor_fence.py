"""``jobctl doctor``'s fence: whether an UPDATE's WHERE requires the attempt token as the lease
design does (``attempt_token = $n``, ANDed at its top level, with the system's ``=``), and the
walks over PostgreSQL's parse tree (pglast's JSON nodes) that the judge shares. Pure: no
database; unit-tested through the judge (tests/unit/test_doctor_statements.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def walk(node: Any) -> list[dict[str, Any]]:
    """Every JSON object under ``node``, itself first (iterative: a tree is walked a few
    times per statement, and nested generators cost most of the judging)."""
    found: list[dict[str, Any]] = []
    stack = [node]
    pop, push, add = stack.pop, stack.extend, found.append
    while stack:
        item = pop()
        if type(item) is dict:
            add(item)
            push(item.values())
        elif type(item) is list:
            push(item)
    return found


def token_fence(update: dict[str, Any], token: str, columns: frozenset[str]) -> str | None:
    """How an UPDATE's WHERE requires the token, at its top level (ANDed, never under an OR
    or a NOT), with ``=`` or ``pg_catalog.=``: ``"param"``, equal to a parameter, a
    constant or a function's variable (one attempt's token, as the caller read it);
    ``"read"``, equal to the token a CTE of the same statement read (the design's reclaim:
    the row's token as read, under its lock); None, no fence (another column of the row
    itself is no value: the row always equals itself)."""
    where = update.get("whereClause")
    if param_equal(update, token, columns, constants=True):
        return "param"
    reads = cte_reads(update)
    if reads and equal(where, token, lambda n: read_column(n, reads)):
        return "read"
    return None


def cte_reads(update: dict[str, Any]) -> set[str]:
    """The names (or aliases) under which the UPDATE's FROM reads a CTE of its own WITH,
    but never the name or alias of the table it writes."""
    ctes = {
        cte.get("CommonTableExpr", {}).get("ctename")
        for cte in (update.get("withClause") or {}).get("ctes", [])
    }
    relation = update.get("relation") or {}
    target = {relation.get("relname"), (relation.get("alias") or {}).get("aliasname")}
    reads = set()
    for item in update.get("fromClause") or []:
        var = item.get("RangeVar") if isinstance(item, dict) else None
        if isinstance(var, dict) and var.get("schemaname") is None and var.get("relname") in ctes:
            reads.add((var.get("alias") or {}).get("aliasname") or var["relname"])
    return reads - target


def read_column(node: Any, reads: set[str]) -> bool:
    node = uncast(node)
    ref = node.get("ColumnRef") if isinstance(node, dict) else None
    fields = ref.get("fields", []) if isinstance(ref, dict) else []
    return len(fields) == 2 and fields[0].get("String", {}).get("sval") in reads


def param_equal(
    update: dict[str, Any], column: str, columns: frozenset[str], *, constants: bool = False
) -> bool:
    """Whether an UPDATE's WHERE requires ``column = $n`` at its top level (one row per
    call): a parameter, a function's variable, and with ``constants`` a constant too."""
    alone = not update.get("fromClause")  # no other relation a bare name could be a column of

    def value(node: Any) -> bool:
        node = uncast(node)
        if not isinstance(node, dict):
            return False
        if "ParamRef" in node or (constants and is_constant(node)):
            return True
        return alone and variable(node, columns)

    return equal(update.get("whereClause"), column, value)


def variable(node: dict[str, Any], columns: frozenset[str]) -> bool:
    """A bare name that is no column of the table (when the table's columns are known): a
    variable or an argument of the function the statement runs in."""
    fields = (node.get("ColumnRef") or {}).get("fields", [])
    if len(fields) != 1 or not columns:
        return False
    return fields[0].get("String", {}).get("sval") not in columns


def catalog_operator(expr: dict[str, Any], ops: tuple[str, ...]) -> bool:
    """Whether an operator is one of ``ops`` as the system defines it: unqualified (the
    session's search_path puts pg_catalog first unless told otherwise) or pg_catalog's,
    never one named so in another schema (``OPERATOR(app.=)`` may compare anything)."""
    names = [x.get("String", {}).get("sval") for x in expr.get("name", [])]
    return bool(names) and names[-1] in ops and names[:-1] in ([], ["pg_catalog"])


def equal(where: Any, column: str, value: Any) -> bool:
    for conjunct in conjuncts(where):
        expr = conjunct.get("A_Expr")
        if not isinstance(expr, dict) or expr.get("kind") != "AEXPR_OP":
            continue
        if not catalog_operator(expr, ("=",)):
            continue
        sides = [expr.get("lexpr"), expr.get("rexpr")]
        for mine, other in (sides, sides[::-1]):
            if column_named(mine, column) and value(other):
                return True
    return False


def conjuncts(where: Any) -> Iterator[dict[str, Any]]:
    """The terms ANDed at a WHERE's top level (iterative: parentheses nest as deep as the
    text likes)."""
    pending = [where]
    while pending:
        node = pending.pop()
        if not isinstance(node, dict):
            continue
        boolean = node.get("BoolExpr")
        if isinstance(boolean, dict):
            if boolean.get("boolop") == "AND_EXPR":
                pending.extend(reversed(boolean.get("args", [])))
            continue
        yield node


def column_named(node: Any, name: str) -> bool:
    node = uncast(node)
    ref = node.get("ColumnRef") if isinstance(node, dict) else None
    if not isinstance(ref, dict):
        return False
    fields = ref.get("fields", [])
    return bool(fields) and fields[-1].get("String", {}).get("sval") == name


def is_constant(node: dict[str, Any]) -> bool:
    """A constant other than NULL: one value the caller gives, never an expression of the
    row (``attempt_token = attempt_token`` is always true)."""
    const = node.get("A_Const")
    return isinstance(const, dict) and not const.get("isnull")


def uncast(node: Any) -> Any:
    while isinstance(node, dict) and "TypeCast" in node:
        node = node["TypeCast"].get("arg")
    return node

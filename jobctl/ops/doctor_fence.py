"""``jobctl doctor``'s fence: whether an UPDATE's WHERE requires the attempt token as the lease
design does (``attempt_token = $n``, ANDed at its top level, with the system's ``=``), and the
walks over PostgreSQL's parse tree (pglast's JSON nodes) that the judge shares. Pure: no
database; unit-tested through the judge (tests/unit/test_doctor_statements.py)."""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Fence:
    """How an UPDATE's WHERE requires the token: ``how`` is ``"param"`` (equal to a value the
    caller gives: a parameter, a constant, a function's variable, a trigger's or rule's
    ``NEW`` field, or such a value selected by a CTE or a subquery of its FROM), ``"read"``
    (equal to the token a CTE of the same statement read, FOR UPDATE, of rows it chose by
    their lease: the design's reclaim) or None; ``shape``, when None, the comparison of the
    token that is no fence, in words; ``cast``, that comparison goes through a cast to
    another type or a function (a kind of its own, ``fence_cast``)."""

    how: str | None
    shape: str | None = None
    cast: bool = False


def token_fence(
    update: dict[str, Any],
    token: str,
    lease: str,
    columns: frozenset[str],
    shadowed: tuple[str, ...] = (),
) -> Fence:
    """The UPDATE's fence (``Fence``): ``token = value`` ANDed at its WHERE's top level
    (never under an OR or a NOT), with ``=`` or ``pg_catalog.=``, the token column itself on
    one side and the value on the other, each cast at most to ``uuid`` (a cast to a domain
    or another schema's type brings that type's own ``=``; one with a length, through text or
    a function compares part of the token). Another column of the row itself is no value:
    the row always equals itself, read directly or back through a CTE. ``shadowed``: the
    schemas other than pg_catalog with an ``=`` between uuids, which an unqualified ``=``
    may be on a search path that puts them first."""
    relation = update.get("relation") or {}
    target = {None, relation.get("relname"), (relation.get("alias") or {}).get("aliasname")}
    alone = not update.get("fromClause")
    sources = _sources(update)
    refused: list[Fence] = []
    read = False
    for conjunct in conjuncts(update.get("whereClause")):
        expr = conjunct.get("A_Expr")
        if not isinstance(expr, dict) or expr.get("kind") != "AEXPR_OP":
            continue
        names = _names(expr.get("name"))
        if not names or names[-1] != "=":
            continue
        sides = [expr.get("lexpr"), expr.get("rexpr")]
        for mine, other in (sides, sides[::-1]):
            if not _mentions(mine, token, target):
                continue
            if names[:-1] not in ([], ["pg_catalog"]):
                refused.append(
                    Fence(None, f"compared with OPERATOR({'.'.join(names)}), not pg_catalog's =")
                )
                break
            if not names[:-1] and shadowed:
                refused.append(
                    Fence(
                        None,
                        f"an unqualified =, which may be {shadowed[0]}.= (it compares uuids): "
                        "write OPERATOR(pg_catalog.=)",
                    )
                )
                break
            casts = list(dict.fromkeys(_casts(mine) + _casts(other)))
            bare, value = uncast(mine), uncast(other)
            if not _own(bare, token, target):
                refused.append(Fence(None, _expression(bare), cast=True))
                break
            if casts:
                refused.append(Fence(None, f"a cast to {', '.join(casts)} on the fence", cast=True))
                break
            found = _value(value, token, lease, columns, target, alone, sources)
            if isinstance(found, Fence):
                refused.append(found)
            elif found == "param":
                return Fence("param")
            else:
                read = True
            break
    if read:
        return Fence("read")
    return refused[0] if refused else Fence(None)


def _value(
    node: Any,
    token: str,
    lease: str,
    columns: frozenset[str],
    target: set[str | None],
    alone: bool,
    sources: dict[str, tuple[dict[str, Any], list[str]]],
) -> str | Fence:
    """What the token is compared with: ``"param"``, ``"read"`` or the Fence that refuses it."""
    if not isinstance(node, dict):
        return Fence(None, "the token compared with no value")
    if "ParamRef" in node or is_constant(node):
        return "param"
    if alone and (variable(node, columns) or given(node, target)):
        return "param"
    fields = _fields(node)
    if not fields:
        return Fence(None, f"the {token} compared with an expression, not a parameter")
    if len(fields) == 2 and fields[0] in sources:
        select, names = sources[fields[0]]
        picked = _selected(select, names, fields[1])
        casts = _casts(picked)
        picked = uncast(picked)
        if casts:
            return Fence(None, f"a cast to {', '.join(casts)} on the fence", cast=True)
        if isinstance(picked, dict) and ("ParamRef" in picked or is_constant(picked)):
            return "param"
        if _fields(picked) and _fields(picked)[-1] == token and _locks_by_lease(select, lease):
            return "read"
        return Fence(
            None,
            f"the row's own {token}, read back through {fields[0]}, compared with itself "
            "(not a parameter)",
        )
    return Fence(None, f"the row's {token} compared with a column of its own row")


def given(node: dict[str, Any], target: set[str | None]) -> bool:
    """A field of ``NEW`` (``new.token``) where no relation of the statement is named so: a
    trigger's or a rule's new row, the values the statement that fired it gives."""
    fields = _fields(node)
    return len(fields) == 2 and fields[0] == "new" and "new" not in target


def _sources(update: dict[str, Any]) -> dict[str, tuple[dict[str, Any], list[str]]]:
    """The relations of the UPDATE's FROM that are a CTE of its own WITH or a subquery, by
    the name or alias it reads them under: their SELECT and their column names, if given."""
    ctes = {}
    for cte in (update.get("withClause") or {}).get("ctes", []):
        body = cte.get("CommonTableExpr", {})
        select = (body.get("ctequery") or {}).get("SelectStmt")
        if isinstance(select, dict):
            ctes[body.get("ctename")] = (select, _names(body.get("aliascolnames")))
    relation = update.get("relation") or {}
    target = {relation.get("relname"), (relation.get("alias") or {}).get("aliasname")}
    found = {}
    for item in update.get("fromClause") or []:
        var = item.get("RangeVar") if isinstance(item, dict) else None
        sub = item.get("RangeSubselect") if isinstance(item, dict) else None
        if isinstance(var, dict) and var.get("schemaname") is None and var.get("relname") in ctes:
            alias = var.get("alias") or {}
            select, names = ctes[var["relname"]]
            found[alias.get("aliasname") or var["relname"]] = (
                select,
                _names(alias.get("colnames")) or names,
            )
        elif isinstance(sub, dict) and isinstance(sub.get("alias"), dict):
            select = (sub.get("subquery") or {}).get("SelectStmt")
            if isinstance(select, dict):
                alias = sub["alias"]
                found[alias.get("aliasname")] = (select, _names(alias.get("colnames")))
    return {name: v for name, v in found.items() if name not in target}


def _selected(select: dict[str, Any], names: list[str], column: str) -> Any:
    """The expression a SELECT (or a one-row VALUES) gives for its column ``column``."""
    rows = select.get("valuesLists") or []
    if rows:
        row = (rows[0].get("List") or {}).get("items", []) if len(rows) == 1 else []
        spelled = names or [f"column{i}" for i in range(1, len(row) + 1)]
        return row[spelled.index(column)] if column in spelled[: len(row)] else None
    targets = [t.get("ResTarget", {}) for t in select.get("targetList", [])]
    for i, res in enumerate(targets):
        name = names[i] if i < len(names) else res.get("name") or _last(res.get("val"))
        if name == column:
            return res.get("val")
    return None


def _locks_by_lease(select: dict[str, Any], lease: str) -> bool:
    """A SELECT that locks its rows FOR UPDATE and chooses them by their lease: the
    design's reclaim, whose token as read, under the lock, is its fence."""
    locked = any(
        (c.get("LockingClause") or {}).get("strength") in ("LCS_FORUPDATE", "LCS_FORNOKEYUPDATE")
        for c in select.get("lockingClause") or []
    )
    tested = {_last(n) for n in walk(select.get("whereClause"))}
    return locked and lease in tested


def _mentions(node: Any, token: str, target: set[str | None]) -> bool:
    """Whether an expression reads the written row's token column (anywhere in it)."""
    return any(_own(n, token, target) for n in walk(node))


def _own(node: Any, token: str, target: set[str | None]) -> bool:
    """The written row's token column itself: ``token`` or ``relation.token``."""
    fields = _fields(node)
    if not fields or fields[-1] != token:
        return False
    return len(fields) == 1 or (len(fields) >= 2 and fields[-2] in target)


def _fields(node: Any) -> list[str]:
    ref = node.get("ColumnRef") if isinstance(node, dict) else None
    if not isinstance(ref, dict):
        return []
    return [f.get("String", {}).get("sval") for f in ref.get("fields", [])]


def _last(node: Any) -> str | None:
    """A column reference's column (its last field), else None."""
    fields = _fields(node)
    return fields[-1] if fields else None


def _names(items: Any) -> list[str]:
    return [x.get("String", {}).get("sval") for x in items or [] if isinstance(x, dict)]


# a cast to the token's own type: ``uuid`` or ``pg_catalog.uuid``, with no length
_OWN_TYPE = (["uuid"], ["pg_catalog", "uuid"])


def _casts(node: Any) -> list[str]:
    """The casts of an expression's chain to another type than the token's own, innermost
    first, as written (``app.tok``, ``varchar(1)``)."""
    found: list[str] = []
    while isinstance(node, dict) and "TypeCast" in node:
        cast = node["TypeCast"]
        spelled = _type(cast.get("typeName") or {})
        if spelled is not None and spelled not in found:
            found.insert(0, spelled)
        node = cast.get("arg")
    return found


def _type(type_name: dict[str, Any]) -> str | None:
    """A type as written, or None for the token's own type."""
    names = _names(type_name.get("names"))
    mods = []
    for mod in type_name.get("typmods") or []:
        value = (mod.get("A_Const") or {}).get("ival") if isinstance(mod, dict) else None
        mods.append(str(value.get("ival", 0)) if isinstance(value, dict) else "?")
    if names in _OWN_TYPE and not mods and not type_name.get("arrayBounds"):
        return None
    shown = names[1:] if names[:1] == ["pg_catalog"] else names
    return ".".join(shown) + (f"({', '.join(mods)})" if mods else "")


def _expression(node: Any) -> str:
    """The words for an expression of the token that is not the token itself."""
    call = node.get("FuncCall") if isinstance(node, dict) else None
    if isinstance(call, dict):
        return f"the function {'.'.join(_names(call.get('funcname')))}() on the token"
    return "an expression of the token, not the token itself, on the fence"


def param_equal(
    update: dict[str, Any], column: str, columns: frozenset[str], *, constants: bool = False
) -> bool:
    """Whether an UPDATE's WHERE requires ``column = $n`` at its top level (one row per
    call): a parameter, a function's variable, and with ``constants`` a constant too."""
    alone = not update.get("fromClause")  # no other relation a bare name could be a column of
    relation = update.get("relation") or {}
    target = {relation.get("relname"), (relation.get("alias") or {}).get("aliasname")}

    def value(node: Any) -> bool:
        node = uncast(node)
        if not isinstance(node, dict):
            return False
        if "ParamRef" in node or (constants and is_constant(node)):
            return True
        return alone and (variable(node, columns) or given(node, target))

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


def lock_shape(update: dict[str, Any]) -> str:
    """How a claim without SKIP LOCKED locks the rows it picks, in words."""
    waits = {"LockWaitBlock": "waits for it", "LockWaitError": "gets an error (NOWAIT)"}
    for n in walk(update):
        clause = n.get("LockingClause")
        if isinstance(clause, dict):
            strength = str(clause.get("strength", "")).removeprefix("LCS_FOR")
            lock = "FOR " + {"NOKEYUPDATE": "NO KEY UPDATE", "KEYSHARE": "KEY SHARE"}.get(
                strength, strength
            )
            if clause.get("waitPolicy") == "LockWaitSkip":
                return f"it locks {lock} SKIP LOCKED, a lock too weak to keep other claims out"
            how = waits.get(str(clause.get("waitPolicy")), "waits for it")
            return (
                f"it locks {lock} without SKIP LOCKED: a worker that meets a row another "
                f"holds {how}, and every worker picks the same first rows"
            )
    return "it locks no row it picks: two workers can take the same job"

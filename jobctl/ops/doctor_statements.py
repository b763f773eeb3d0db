"""``jobctl doctor``'s judge of the application's statements: each statement that writes the
jobs table, parsed by PostgreSQL's own parser (pglast, libpg_query; never a regular
expression), judged against the lease design's rules. Pure: no database; unit-tested on
strings (tests/unit/test_doctor_statements.py).

What is judged (pg_stat_statements normalizes every constant to ``$n``, so a status value is
never known; the judgement is by the statement's shape: which columns it sets, what its WHERE
tests, whether it locks with SKIP LOCKED):

- a **claim** (stamps the claim time with an expression, ``now()``, or counts an attempt,
  ``attempts = attempts + 1``): needs ``FOR UPDATE SKIP LOCKED`` and a new token and lease
  (sets ``attempt_token`` and ``lease_expires_at``);
- a **sweeper** (sets the status, tests an age, ``Table.ages``, and not ``lease_expires_at``;
  counting a retry too, without SKIP LOCKED or a claim's stamp): judges the timeout by age;
- an UPDATE that **ends, extends or gives back** an attempt (sets the status, the lease, the
  heartbeat or the token) needs ``attempt_token = $n`` in its WHERE: a parameter, a
  constant or a function's variable, compared with ``=`` or ``pg_catalog.=`` (any other
  schema's ``=`` may be anything), or, as the design's reclaim does, the token a CTE of the
  same statement read; one that sets the status and clears the claim without it is a hand
  requeue (the second anti-pattern);
- a **DELETE** (or TRUNCATE) that may take processing rows (no status test, or a test of a
  column only a processing row has) voids the fence (the third); one whose status test is a
  parameter may: the statistics cannot tell;
- a statement that may write and does not parse (another grammar, nested too deep, cut
  because too long) is a finding too: doctor never passes what it could not read.

INSERT ... ON CONFLICT DO UPDATE and MERGE's actions are judged as the UPDATE or DELETE they
are; the table is known by the parsed relation (any spelling: quoted, unicode-escaped,
schema-qualified) among the names the catalog gives it, its partitions, children and views.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pglast import parser

from jobctl.ops import doctor_fence as fence

# the lease design's columns whose values only a processing row carries
CLAIM_COLUMNS = ("reserved_by", "reserved_at")
LEASE_COLUMNS = ("lease_expires_at", "heartbeat_at")
AGE_COLUMNS = ("reserved_at", "heartbeat_at", "updated_at")
# times that are no claim's age: the ready time (a stager's), the lease, the finish time
NOT_AGES = ("available_at", "lease_expires_at", "finished_at")
PROCESSING_ONLY = (
    "reserved_by",
    "reserved_at",
    "heartbeat_at",
    "lease_expires_at",
    "attempt_token",
)
# every design column the judge reads (the table may name each its own way)
DESIGN = (*PROCESSING_ONLY, "id", "status", "attempts", "available_at", "updated_at", "finished_at")

# why a statement could not be parsed (the parser's own message is kept apart, in JSON only:
# it quotes the statement)
CUT = "cut: {chars} characters, longer than the {limit} doctor reads"
GRAMMAR = "PostgreSQL {version}'s grammar (doctor's parser) does not accept it"
TOO_DEEP = "nested deeper than doctor follows"

# a statement that cannot write holds none of these words (only a shortcut: a statement
# holding one is parsed, and the parser's tree is judged)
_MAY_WRITE = re.compile(r"update|delete|insert|merge|truncate", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Table:
    """The jobs table as the judge sees it: its name (and schema), its names for the lease
    design's columns (design name -> the table's column), its processing status, and the
    other relations a write reaches it through (``related``: its partitions, children and
    views, as the catalog names them: (schema, name))."""

    name: str
    schema: str
    columns: Mapping[str, str]
    processing: str = "processing"
    related: frozenset[tuple[str, str]] = frozenset()
    # every column the table has (empty: unknown); a name outside it, in a statement that
    # reads no other relation, is a variable of the function that runs it (PL/pgSQL's, a SQL
    # function's argument), which pg_stat_statements.track = 'all' shows as written
    every_column: frozenset[str] = frozenset()
    # its columns of a date/time type (empty: unknown): a sweeper may test the age of any
    times: frozenset[str] = frozenset()
    # its kinds or queues can be paused (jobctl.pauses exists, a kind or queue is mapped): a
    # claim must read jobctl.pauses
    pauses: bool = False
    # the schemas other than pg_catalog with an = between uuids: an unqualified = on the
    # fence may be theirs
    shadowed: tuple[str, ...] = ()
    # the views among ``related`` a write may go through, as the catalog defines them:
    # (schema, name) -> each of the view's columns -> the table's column it shows (None: an
    # expression, or another relation's column)
    views: Mapping[tuple[str, str], Mapping[str, str | None]] = dataclasses.field(
        default_factory=dict, hash=False
    )

    def column(self, design: str) -> str:
        return self.columns.get(design, design)

    def ages(self) -> set[str]:
        """The columns whose age a sweeper tests: AGE_COLUMNS, and ``times`` but NOT_AGES."""
        c = self.column
        return {c(x) for x in AGE_COLUMNS} | (set(self.times) - {c(x) for x in NOT_AGES})

    def through(self, relation: Mapping[str, Any]) -> tuple[Table, str | None]:
        """The table as a write through ``relation`` (a RangeVar's fields) sees it: through
        a view, the view's names for the design's columns (the view's column that shows the
        table's), and, when the view shows a column under the name of another of the
        design's (its ``attempt_token`` is the table's ``reserved_by``), that in words."""
        name, schema = relation.get("relname"), relation.get("schemaname")
        found = [
            (known, shows)
            for known, shows in self.views.items()
            if name == known[1] and schema in (None, known[0])
        ]
        if not found:
            return self, None
        (view_schema, view), shows = found[0]
        names = {d: self.column(d) for d in DESIGN}
        seen = {
            d: next((v for v, base in shows.items() if base == column), f"\0{d}")
            for d, column in names.items()
        }
        renamed = [
            f"{v} is the table's {base}" if base else f"{v} is an expression"
            for v, base in shows.items()
            if v in names.values() and base != v
        ]
        note = f"through the view {view_schema}.{view}, whose " + ", ".join(renamed)
        every = frozenset(shows)
        return (
            dataclasses.replace(self, columns=seen, every_column=every, views={}),
            note if renamed else None,
        )

    def names(self, relation: Mapping[str, Any]) -> bool:
        """Whether a parsed relation (a RangeVar's fields) is this table: its name (and
        schema, when the statement names one) is the table's or a related relation's. An
        unqualified name matches in any schema: the application's search_path is unknown."""
        name, schema = relation.get("relname"), relation.get("schemaname")
        for known_schema, known in ((self.schema, self.name), *self.related):
            if name == known and schema in (None, known_schema):
                return True
        return False


@dataclasses.dataclass(frozen=True)
class Judged:
    """One statement's verdict: the finding kinds (empty: it follows the design), and
    whether it writes the jobs table at all; ``fenced``: a heartbeat or completion/fail
    fenced by the token (its calls - rows are the fence's rejections); ``why`` and
    ``parse_error``: why an ``unparsed`` one was not read."""

    writes: bool
    kinds: tuple[str, ...] = ()
    fenced: str | None = None  # "heartbeat" or "completion", else None
    why: str | None = None
    parse_error: str | None = None
    named: bool = False  # it names the jobs table (a read, too)
    # what the judge saw for one finding of a claim, in words: kind -> words (the age it
    # tests, how it locks)
    said: tuple[tuple[str, str], ...] = ()

    def why_of(self, kind: str) -> str | None:
        """Why ``kind`` was found in this statement: what the judge saw for it, and the
        statement's own note (``why``)."""
        words = dict(self.said).get(kind)
        return "; ".join(x for x in (words, self.why) if x) or None


class Unparsed(Exception):
    """The statement could not be read: ``why`` (doctor's words), ``detail`` (the parser's)."""

    def __init__(self, why: str, detail: str | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.detail = detail


def parse(text: str) -> list[dict[str, Any]]:
    """The statements of ``text`` as PostgreSQL's parser gives them (JSON nodes); Unparsed
    when it does not parse, or its tree is nested deeper than Python's decoder follows."""
    try:
        tree = json.loads(parser.parse_sql_json(text))
    except parser.ParseError as e:
        raise Unparsed(GRAMMAR.format(version=_grammar()), str(e)) from None
    except RecursionError:  # json's decoder: one level of Python's stack per level of tree
        raise Unparsed(TOO_DEEP) from None
    return [s["stmt"] for s in tree.get("stmts", [])]


def _grammar() -> int:
    return int(parser.get_postgresql_version()[0])


def may_write(text: str) -> bool:
    """Whether a text holds a write's keyword (a statement without one cannot write)."""
    return bool(_MAY_WRITE.search(text))


def fingerprint(text: str) -> str | None:
    """libpg_query's fingerprint of a statement (constants and parameter numbers ignored):
    how jobctl's own statements are recognised in the statistics."""
    try:
        return str(parser.fingerprint(text))
    except parser.ParseError:
        return None


def judge(text: str, table: Table, *, chars: int | None = None, limit: int = 0) -> Judged:
    """The verdict on one statement's text (pg_stat_statements' normalized form). ``chars``:
    the statement's whole length when ``text`` is only its start (cut at ``limit``): then it
    may write anything past the cut, and is a finding."""
    if chars is not None and chars > len(text):
        return Judged(True, ("unparsed",), why=CUT.format(chars=chars, limit=limit))
    if not _MAY_WRITE.search(text):  # a read: nothing to parse (the parser judges the rest)
        return Judged(False)
    try:
        statements = parse(text)
    except Unparsed as e:
        return Judged(True, ("unparsed",), why=e.why, parse_error=e.detail)
    kinds: list[str] = []
    notes: list[str] = []
    writes = False
    fenced = None
    named = False
    seen_by_kind: dict[str, str] = {}
    for stmt in statements:
        nodes = fence.walk(stmt)
        named = named or any("relname" in n and table.names(n) for n in nodes)
        if _plans_only(stmt):
            continue
        for node in _writes(nodes, table):
            writes = True
            seen, note = table.through(node[1].get("relation") or {})
            found, what, shape, saw = _judge_one(node, seen)
            kinds += [k for k in found if k not in kinds]
            for kind, words in saw.items():
                seen_by_kind.setdefault(kind, words)
            said = "; ".join(x for x in (shape, note) if x)
            if found and said and said not in notes:
                notes.append(said)
            fenced = fenced or what
    why = "; ".join(notes) or None
    return Judged(
        writes,
        tuple(kinds),
        fenced if not kinds else None,
        why=why,
        named=named,
        said=tuple(seen_by_kind.items()),
    )


def _judge_one(
    node: tuple[str, dict[str, Any]], table: Table
) -> tuple[list[str], str | None, str | None, dict[str, str]]:
    """One write's finding kinds, what it is when fenced (heartbeat, completion), the
    shape of the comparison of the token that is no fence, in words, and what a finding of
    a claim saw in it (kind -> words: the age it tests, how it locks)."""
    kind, body = node
    where = body.get("whereClause")
    if kind == "DeleteStmt":
        return _judge_delete(where, table), None, None, {}
    if kind != "UpdateStmt":
        return [], None, None, {}  # an INSERT adds a job: nothing to fence
    sets = _sets(body)
    c = table.column
    fenced = fence.token_fence(
        body, c("attempt_token"), c("lease_expires_at"), table.every_column, table.shadowed
    )
    how = fenced.how
    sets_status = c("status") in sets
    lease = {c(x) for x in (*LEASE_COLUMNS, *CLAIM_COLUMNS)} | {c("attempt_token")}
    if not (sets_status or set(sets) & lease):
        return [], None, None, {}  # touches no part of an attempt (a payload, a priority)
    tested = _columns(where) | _subquery_columns(body)
    by_lease = c("lease_expires_at") in tested
    ages = table.ages()
    aged = [] if by_lease else _age_tests(body, ages)
    stamps, takes = _stamps_claim(sets, c), _takes_unclaimed(body, sets, c)
    sweeps = sets_status and how != "param" and not _skip_locked(body)
    if aged and sweeps and not (stamps or takes):  # (counting a retry: OCA's requeue)
        return ["sweeper_by_age"], None, None, {"sweeper_by_age": "it tests " + ", ".join(aged)}
    if stamps or takes or _counts_attempt(sets, c):
        found, said = [], {}
        if aged:
            found.append("claim_by_age")
            said["claim_by_age"] = "it tests " + ", ".join(aged)
        if not _skip_locked(body):
            found.append("claim_without_skip_locked")
            said["claim_without_skip_locked"] = fence.lock_shape(body)
        if not {c("attempt_token"), c("lease_expires_at")} <= set(sets):
            found.append("claim_without_lease")
        if table.pauses and not _reads_pauses(body):
            found.append("claim_ignores_pauses")
        return found, None, None, said
    if sets_status and how != "param":  # a batch fenced on what it read may still sweep
        if tested & ages and not by_lease:
            words = {"sweeper_by_age": "it tests " + ", ".join(aged)} if aged else {}
            return ["sweeper_by_age"], None, None, words
    if how is None:
        if fenced.cast:
            return ["fence_cast"], None, fenced.shape, {}
        if sets_status and set(sets) & lease and c("finished_at") not in sets and not by_lease:
            return ["hand_requeue"], None, fenced.shape, {}
        return ["unfenced_update"], None, fenced.shape, {}  # (a reclaim with no token, too)
    if how != "param" or not fence.param_equal(body, c("id"), table.every_column):
        return [], None, None, {}  # a batch (reclaim): its calls - rows mean nothing
    return [], "completion" if sets_status else "heartbeat", None, {}


def _judge_delete(where: Any, table: Table) -> list[str]:
    """A DELETE takes no processing row only when it tests a status value other than the
    processing one, ANDed at its top level; a status that is a parameter cannot be told."""
    tested = _columns(where)
    if where is None or tested & {table.column(c) for c in PROCESSING_ONLY}:
        return ["delete_processing"]
    status = table.column("status")
    unknown = False
    for conjunct in fence.conjuncts(where):
        values = _status_values(conjunct, status)
        if values is None:
            continue
        equal, found = values
        if any(v is None for v in found):
            unknown = True
        elif equal and table.processing not in found:
            return []
        elif not equal and table.processing in found:
            return []  # status <> 'processing'
    return ["delete_status_unknown"] if unknown else ["delete_processing"]


def _status_values(conjunct: dict[str, Any], status: str) -> tuple[bool, list[str | None]] | None:
    """What a conjunct compares the status with: (whether it is =/IN/= ANY rather than <>,
    each value's text or None for a parameter or an expression); None: no status test."""
    expr = conjunct.get("A_Expr")
    if not isinstance(expr, dict) or not fence.catalog_operator(expr, ("=", "<>")):
        return None
    if not fence.column_named(expr.get("lexpr"), status):
        return None
    op = expr.get("name", [])[-1].get("String", {}).get("sval")
    right = expr.get("rexpr")
    if expr.get("kind") == "AEXPR_IN" and op == "=":
        items = right.get("List", {}).get("items", []) if isinstance(right, dict) else []
        return True, [_text_constant(i) for i in items]
    if expr.get("kind") == "AEXPR_OP_ANY" and op == "=":
        return True, [None]
    if expr.get("kind") == "AEXPR_OP":
        return op == "=", [_text_constant(right)]
    return None


def _text_constant(node: Any) -> str | None:
    node = fence.uncast(node)
    const = node.get("A_Const") if isinstance(node, dict) else None
    if isinstance(const, dict) and isinstance(const.get("sval"), dict):
        return str(const["sval"].get("sval", ""))
    return None


def _takes_unclaimed(update: dict[str, Any], sets: Mapping[str, Any], c: Any) -> bool:
    """Whether an UPDATE claims by taking rows no one holds: it sets a claim column (the
    worker or the claim time, to values the statistics write as $n) of rows it picks by
    ``IS NULL`` on that same column (Delayed::Job's ``SET locked_at = $1 ... WHERE locked_at
    IS NULL``). A give back (``SET locked_by = NULL ... WHERE locked_by = $1``) tests no
    such NULL, and neither does a sweeper that gives back jobs never heartbeaten (``SET
    reserved_by = $2 ... WHERE heartbeat_at IS NULL``): the NULL it tests is not what it sets."""
    claimed = set(sets) & {c(x) for x in CLAIM_COLUMNS}
    if not claimed:
        return False
    for part in ("whereClause", "withClause", "fromClause"):
        for n in fence.walk(update.get(part)):
            test = n.get("NullTest")
            if isinstance(test, dict) and test.get("nulltesttype") == "IS_NULL":
                if _columns(test.get("arg")) & claimed:
                    return True
    return False


_AGE_OPERATORS = frozenset({"<", "<=", ">", ">="})


def _age_tests(update: dict[str, Any], ages: set[str]) -> list[str]:
    """The comparisons of an age (``Table.ages``: the claim time, the heartbeat, the row's
    last update, another time of the table's) with a time that an UPDATE picks its rows by,
    in words (``locked_at < $4``): a claim or sweeper that holds one takes back jobs by how
    long ago they were taken, not by their lease."""
    found: list[str] = []
    for part in ("whereClause", "withClause", "fromClause"):
        for n in fence.walk(update.get(part)):
            expr = n.get("A_Expr")
            if not isinstance(expr, dict) or expr.get("kind") != "AEXPR_OP":
                continue
            if not fence.catalog_operator(expr, tuple(_AGE_OPERATORS)):
                continue
            left, right = expr.get("lexpr"), expr.get("rexpr")
            if not (_columns(left) | _columns(right)) & ages:
                continue
            op = expr["name"][-1]["String"]["sval"]
            words = f"{_operand(left)} {op} {_operand(right)}"
            if words not in found:
                found.append(words)
    return sorted(found)


def _operand(node: Any) -> str:
    """One side of a comparison in words: a column's name, ``$n``, or ``(an expression)``."""
    bare = fence.uncast(node)
    if isinstance(bare, dict) and "ParamRef" in bare:
        return f"${bare['ParamRef'].get('number', '?')}"
    ref = bare.get("ColumnRef") if isinstance(bare, dict) else None
    if isinstance(ref, dict):
        fields = ref.get("fields", [])
        if fields and "String" in fields[-1]:
            return str(fields[-1]["String"]["sval"])
    return "(an expression)"


def _stamps_claim(sets: Mapping[str, Any], c: Any) -> bool:
    """Whether an UPDATE stamps the claim time with an expression (now()). (The statistics
    write every constant, NULL too, as $n: a parameter alone says nothing.)"""
    stamped = fence.uncast(sets.get(c("reserved_at")))
    return isinstance(stamped, dict) and not {"ParamRef", "A_Const"} & set(stamped)


def _counts_attempt(sets: Mapping[str, Any], c: Any) -> bool:
    """Whether an UPDATE counts an attempt (attempts = attempts + 1), as a claim does."""
    return c("attempts") in _columns(sets.get(c("attempts")))


WRITES = frozenset({"UpdateStmt", "DeleteStmt", "InsertStmt", "MergeStmt", "TruncateStmt"})


def _writes(nodes: list[dict[str, Any]], table: Table) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every write of the jobs table among a statement's ``nodes`` (its data-modifying CTEs,
    an EXPLAIN ANALYZE, a PREPARE, a CREATE RULE's actions ...), each as the UPDATE, DELETE or
    INSERT it does: an INSERT ... ON CONFLICT DO UPDATE is also an UPDATE, a MERGE's actions
    are UPDATEs and DELETEs conditioned on its join, a TRUNCATE a DELETE of every row."""
    for node in nodes:
        if len(node) == 1:  # a node is {its type: its fields}; its fields have more keys
            for kind, body in node.items():
                if kind in WRITES and isinstance(body, dict):
                    yield from _as_writes(kind, body, table)


def _reads_pauses(update: dict[str, Any]) -> bool:
    """Whether a claim honours the pauses: it reads jobctl.pauses anywhere (its CTE, a
    subquery of its WHERE), or it is lease.Worker's, which is given the table's pauses as
    a parameter (read at most a second before): ``ARRAY[kind and queue] && $n``."""
    for n in fence.walk(update):
        if n.get("relname") == "pauses" and n.get("schemaname") == "jobctl":
            return True
        if "A_Expr" in n and _pauses_given(n["A_Expr"]):
            return True
    return False


def _pauses_given(expr: Any) -> bool:
    """``ARRAY[...] && $n`` (job_paused with its pause keys a parameter), ``&&`` the
    system's (``_catalog_operator``: not one named so in another schema)."""
    if not isinstance(expr, dict) or not fence.catalog_operator(expr, ("&&",)):
        return False
    if "A_ArrayExpr" not in (expr.get("lexpr") or {}):
        return False
    right = expr.get("rexpr") or {}
    right = right.get("TypeCast", {}).get("arg", right)
    return isinstance(right, dict) and "ParamRef" in right


def _plans_only(stmt: dict[str, Any]) -> bool:
    """An EXPLAIN without ANALYZE: it plans the write it names, never runs it."""
    explain = stmt.get("ExplainStmt")
    if not isinstance(explain, dict):
        return False
    for option in explain.get("options", []):
        elem = option.get("DefElem", {})
        if elem.get("defname") == "analyze":
            arg = elem.get("arg")  # none: ANALYZE alone; else a boolean or a word
            if arg is None or _option_true(arg):
                return False
    return True


def _option_true(arg: Any) -> bool:
    const = arg.get("A_Const", {}) if isinstance(arg, dict) else {}
    word = (arg.get("String") or const.get("sval") or {}) if isinstance(arg, dict) else {}
    if "boolval" in const:
        return bool(const["boolval"].get("boolval"))
    if "ival" in const:
        return bool(const["ival"].get("ival"))
    return str(word.get("sval", "true")).lower() in ("true", "on", "yes", "1")


def _as_writes(
    kind: str, body: dict[str, Any], table: Table
) -> Iterator[tuple[str, dict[str, Any]]]:
    if kind == "TruncateStmt":
        for relation in body.get("relations", []):
            if table.names(relation.get("RangeVar") or {}):
                yield "DeleteStmt", {"whereClause": None}
        return
    relation = body.get("relation")
    if not isinstance(relation, dict) or not table.names(relation):
        return
    if kind in ("UpdateStmt", "DeleteStmt"):
        yield kind, body
    elif kind == "InsertStmt":
        yield kind, body
        upsert = body.get("onConflictClause") or {}
        if upsert.get("action") == "ONCONFLICT_UPDATE":
            yield (
                "UpdateStmt",
                {
                    "relation": relation,
                    "targetList": upsert.get("targetList", []),
                    "whereClause": upsert.get("whereClause"),
                    "withClause": body.get("withClause"),
                },
            )
    else:  # MergeStmt
        for clause in body.get("mergeWhenClauses", []):
            when = clause.get("MergeWhenClause", {})
            where = _and(body.get("joinCondition"), when.get("condition"))
            action = {
                "relation": relation,
                "whereClause": where,
                "withClause": body.get("withClause"),
                "fromClause": [body["sourceRelation"]] if "sourceRelation" in body else [],
            }
            if when.get("commandType") == "CMD_UPDATE":
                yield "UpdateStmt", {**action, "targetList": when.get("targetList", [])}
            elif when.get("commandType") == "CMD_DELETE":
                yield "DeleteStmt", action


def _and(*parts: Any) -> Any:
    args = [p for p in parts if isinstance(p, dict)]
    if len(args) < 2:
        return args[0] if args else None
    return {"BoolExpr": {"boolop": "AND_EXPR", "args": args}}


def _sets(update: dict[str, Any]) -> dict[str, Any]:
    """The columns an UPDATE sets -> their value nodes (a row assignment's too)."""
    found: dict[str, Any] = {}
    for target in update.get("targetList", []):
        res = target.get("ResTarget", {})
        if "name" in res:
            found[res["name"]] = res.get("val")
    return found


def _columns(node: Any) -> set[str]:
    """The column names a expression refers to (the last field of each column reference)."""
    names = set()
    for n in fence.walk(node):
        ref = n.get("ColumnRef")
        if isinstance(ref, dict):
            fields = ref.get("fields", [])
            if fields and "String" in fields[-1]:
                names.add(fields[-1]["String"]["sval"])
    return names


def _subquery_columns(update: dict[str, Any]) -> set[str]:
    """The columns tested by the WHERE of the selects in an UPDATE's CTEs and FROM (a
    sweeper that picks its rows in a CTE tests them there)."""
    names: set[str] = set()
    for part in ("withClause", "fromClause"):
        for n in fence.walk(update.get(part)):
            select = n.get("SelectStmt")
            if isinstance(select, dict):
                names |= _columns(select.get("whereClause"))
    return names


def _skip_locked(update: dict[str, Any]) -> bool:
    """Whether the statement locks the rows it picks FOR UPDATE SKIP LOCKED (in a CTE or a
    subquery of its WHERE or FROM)."""
    for n in fence.walk(update):
        clause = n.get("LockingClause")
        if isinstance(clause, dict) and clause.get("waitPolicy") == "LockWaitSkip":
            return clause.get("strength") in ("LCS_FORUPDATE", "LCS_FORNOKEYUPDATE")
    return False

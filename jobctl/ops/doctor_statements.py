"""``jobctl doctor``'s judge of the application's statements: each statement that writes the
jobs table, parsed by PostgreSQL's own parser (pglast, libpg_query; never a regular
expression), judged against the lease design's rules. Pure: no database; unit-tested on
strings (tests/unit/test_doctor_rules.py).

What is judged (pg_stat_statements normalizes every constant to ``$n``, so a status value is
never known; the judgement is by the statement's shape: which columns it sets, what its WHERE
tests, whether it locks with SKIP LOCKED):

- a **claim** (stamps the claim time with an expression, ``now()``, or counts an attempt,
  ``attempts = attempts + 1``): needs ``FOR UPDATE SKIP LOCKED`` and a new token and lease
  (sets ``attempt_token`` and ``lease_expires_at``);
- a **sweeper** (sets the status, tests ``reserved_at``/``heartbeat_at``/``updated_at`` and not
  ``lease_expires_at``): judges the timeout by age, not by the lease (the first anti-pattern);
- an UPDATE that **ends, extends or gives back** an attempt (sets the status, the lease, the
  heartbeat or the token) needs ``attempt_token = $n`` (or a column read in the same
  statement) in its WHERE; one that sets the status and clears the claim without it is a
  hand requeue (the second anti-pattern);
- a **DELETE** that may take processing rows (no status test, or a test of a column only a
  processing row has) voids the fence (the third).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pglast import parser

# the lease design's columns whose values only a processing row carries
CLAIM_COLUMNS = ("reserved_by", "reserved_at")
LEASE_COLUMNS = ("lease_expires_at", "heartbeat_at")
AGE_COLUMNS = ("reserved_at", "heartbeat_at", "updated_at")
PROCESSING_ONLY = (
    "reserved_by",
    "reserved_at",
    "heartbeat_at",
    "lease_expires_at",
    "attempt_token",
)

# finding kind -> (check, what is wrong, the fix: which rendered statement replaces it)
KINDS: dict[str, tuple[str, str, str]] = {
    "claim_without_skip_locked": (
        "fenced_writes",
        "a claim without FOR UPDATE SKIP LOCKED: two workers can claim the same job, or "
        "queue up behind each other's locks",
        "claim",
    ),
    "claim_without_lease": (
        "fenced_writes",
        "a claim that sets no new attempt token and lease: its jobs are processing with no "
        "lease, which reclaim never sees (jobctl stuck lists them as no lease)",
        "claim",
    ),
    "sweeper_by_age": (
        "timeout_by_lease",
        "a sweeper that judges the timeout by age (reserved_at, heartbeat_at or updated_at), "
        "not by lease_expires_at: it takes back jobs whose workers are alive and "
        "heartbeating, and bypasses the fence",
        "jobctl reclaim (the design's reclaim, by lease_expires_at and fenced on the token)",
    ),
    "unfenced_update": (
        "fenced_writes",
        "an UPDATE that ends, extends or gives back an attempt without attempt_token = $n in "
        "its WHERE: a worker whose job was reclaimed still overwrites the new attempt's row",
        "complete / heartbeat / fail",
    ),
    "hand_requeue": (
        "fenced_writes",
        "a hand SET status (a requeue) with no token: it races a live worker, whose late "
        "completion then lands on the requeued job",
        "jobctl requeue ID (fenced on the token and the row's version)",
    ),
    "delete_processing": (
        "fenced_writes",
        "a DELETE that can take processing rows: the job vanishes under its worker, and no "
        "history records why",
        "jobctl fail ID (or delete only finished jobs: status test on done/failed)",
    ),
}


# a statement that cannot write holds none of these words (only a shortcut: a statement
# holding one is parsed, and the parser's tree is judged)
_MAY_WRITE = re.compile(r"update|delete|insert|merge", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Table:
    """The jobs table as the judge sees it: its name (and schema) and its names for the
    lease design's columns (design name -> the table's column)."""

    name: str
    schema: str
    columns: Mapping[str, str]

    def column(self, design: str) -> str:
        return self.columns.get(design, design)


@dataclasses.dataclass(frozen=True)
class Judged:
    """One statement's verdict: the finding kinds (empty: it follows the design), and
    whether it writes the jobs table at all; ``fenced``: a heartbeat or completion/fail
    fenced by the token (its calls - rows are the fence's rejections)."""

    writes: bool
    kinds: tuple[str, ...] = ()
    fenced: str | None = None  # "heartbeat" or "completion", else None


def parse(text: str) -> list[dict[str, Any]] | None:
    """The statements of ``text`` as PostgreSQL's parser gives them (JSON nodes), or None
    when it does not parse (a statement cut by track_activity_query_size)."""
    try:
        tree = json.loads(parser.parse_sql_json(text))
    except parser.ParseError:
        return None
    return [s["stmt"] for s in tree.get("stmts", [])]


def fingerprint(text: str) -> str | None:
    """libpg_query's fingerprint of a statement (constants and parameter numbers ignored):
    how jobctl's own statements are recognised in the statistics."""
    try:
        return str(parser.fingerprint(text))
    except parser.ParseError:
        return None


def judge(text: str, table: Table) -> Judged:
    """The verdict on one statement's text (pg_stat_statements' normalized form)."""
    if not _MAY_WRITE.search(text):  # a read: nothing to parse (the parser judges the rest)
        return Judged(False)
    statements = parse(text)
    if statements is None:
        return Judged(False)
    kinds: list[str] = []
    writes = False
    fenced = None
    for stmt in statements:
        for node in _writes(stmt, table):
            writes = True
            found, what = _judge_one(node, table)
            kinds += [k for k in found if k not in kinds]
            fenced = fenced or what
    return Judged(writes, tuple(kinds), fenced if not kinds else None)


def _judge_one(node: tuple[str, dict[str, Any]], table: Table) -> tuple[list[str], str | None]:
    kind, body = node
    where = body.get("whereClause")
    if kind == "DeleteStmt":
        tested = _columns(where)
        status = table.column("status")
        processing_only = {table.column(c) for c in PROCESSING_ONLY}
        if where is None or status not in tested or tested & processing_only:
            return ["delete_processing"], None
        return [], None
    if kind != "UpdateStmt":
        return [], None  # an INSERT adds a job: nothing to fence
    sets = _sets(body)
    c = table.column
    token_fenced = _token_fenced(where, c("attempt_token"))
    sets_status = c("status") in sets
    lease = {c(x) for x in (*LEASE_COLUMNS, *CLAIM_COLUMNS)} | {c("attempt_token")}
    if not (sets_status or set(sets) & lease):
        return [], None  # touches no part of an attempt (a payload, a priority)
    if sets_status and not token_fenced:
        tested = _columns(where) | _subquery_columns(body)
        ages = {c(x) for x in AGE_COLUMNS}
        if tested & ages and c("lease_expires_at") not in tested:
            return ["sweeper_by_age"], None
    if _claims(sets, c):
        found = []
        if not _skip_locked(body):
            found.append("claim_without_skip_locked")
        if not {c("attempt_token"), c("lease_expires_at")} <= set(sets):
            found.append("claim_without_lease")
        return found, None
    if not token_fenced:
        by_lease = c("lease_expires_at") in _columns(where) | _subquery_columns(body)
        if sets_status and set(sets) & lease and c("finished_at") not in sets and not by_lease:
            return ["hand_requeue"], None
        return ["unfenced_update"], None  # (a reclaim by the lease with no token, too)
    if not _param_equal(where, c("id")):  # a batch (reclaim): its calls - rows mean nothing
        return [], None
    return [], "completion" if sets_status else "heartbeat"


def _claims(sets: Mapping[str, Any], c: Any) -> bool:
    """Whether an UPDATE claims: it stamps the claim time with an expression (now()), or
    counts an attempt (attempts = attempts + 1). (The statistics write every constant, NULL
    too, as $n: a column set to a parameter may be set to NULL, so that alone says nothing.)"""
    stamped = sets.get(c("reserved_at"))
    stamped = _uncast(stamped)
    if isinstance(stamped, dict) and not {"ParamRef", "A_Const"} & set(stamped):
        return True
    counted = sets.get(c("attempts"))
    return c("attempts") in _columns(counted)


def _writes(stmt: dict[str, Any], table: Table) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every UPDATE, DELETE or INSERT of the jobs table in ``stmt``: the statement itself and
    its data-modifying CTEs, at any depth of WITH (PostgreSQL allows them nowhere else, so
    the rest of the tree is not walked for them)."""
    pending = [stmt]
    while pending:
        node = pending.pop()
        for kind, body in node.items():
            if not isinstance(body, dict):
                continue
            if kind in WRITES and _is_table(body.get("relation"), table):
                yield kind, body
            for cte in (body.get("withClause") or {}).get("ctes", []):
                query = cte.get("CommonTableExpr", {}).get("ctequery")
                if isinstance(query, dict):
                    pending.append(query)


WRITES = ("UpdateStmt", "DeleteStmt", "InsertStmt")


def _is_table(relation: Any, table: Table) -> bool:
    if not isinstance(relation, dict) or relation.get("relname") != table.name:
        return False
    schema = relation.get("schemaname")
    return schema is None or schema == table.schema


def _walk(node: Any) -> list[dict[str, Any]]:
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
    for n in _walk(node):
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
        for n in _walk(update.get(part)):
            select = n.get("SelectStmt")
            if isinstance(select, dict):
                names |= _columns(select.get("whereClause"))
    return names


def _skip_locked(update: dict[str, Any]) -> bool:
    """Whether the statement locks the rows it picks FOR UPDATE SKIP LOCKED (in a CTE or a
    subquery of its WHERE or FROM)."""
    for n in _walk(update):
        clause = n.get("LockingClause")
        if isinstance(clause, dict) and clause.get("waitPolicy") == "LockWaitSkip":
            return clause.get("strength") in ("LCS_FORUPDATE", "LCS_FORNOKEYUPDATE")
    return False


def _token_fenced(where: Any, token: str) -> bool:
    """Whether a WHERE requires ``token = $n`` (or ``= other.column``, a row read in the same
    statement) at its top level (ANDed, never under an OR or a NOT)."""
    return _equal(where, token, _is_value)


def _param_equal(where: Any, column: str) -> bool:
    """Whether a WHERE requires ``column = $n`` at its top level (one row per call)."""
    return _equal(
        where, column, lambda n: isinstance(_uncast(n), dict) and "ParamRef" in _uncast(n)
    )


def _equal(where: Any, column: str, value: Any) -> bool:
    for conjunct in _conjuncts(where):
        expr = conjunct.get("A_Expr")
        if not isinstance(expr, dict) or expr.get("kind") != "AEXPR_OP":
            continue
        names = [x.get("String", {}).get("sval") for x in expr.get("name", [])]
        if names[-1:] != ["="]:
            continue
        sides = [expr.get("lexpr"), expr.get("rexpr")]
        for mine, other in (sides, sides[::-1]):
            if _column_named(mine, column) and value(other):
                return True
    return False


def _conjuncts(where: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(where, dict):
        return
    boolean = where.get("BoolExpr")
    if isinstance(boolean, dict):
        if boolean.get("boolop") == "AND_EXPR":
            for arg in boolean.get("args", []):
                yield from _conjuncts(arg)
        return
    yield where


def _column_named(node: Any, name: str) -> bool:
    node = _uncast(node)
    ref = node.get("ColumnRef") if isinstance(node, dict) else None
    if not isinstance(ref, dict):
        return False
    fields = ref.get("fields", [])
    return bool(fields) and fields[-1].get("String", {}).get("sval") == name


def _is_value(node: Any) -> bool:
    """A parameter, or a column of another relation (a CTE's row): what a fence compares."""
    node = _uncast(node)
    return isinstance(node, dict) and ("ParamRef" in node or "ColumnRef" in node)


def _uncast(node: Any) -> Any:
    while isinstance(node, dict) and "TypeCast" in node:
        node = node["TypeCast"].get("arg")
    return node


def findings(
    statements: Iterable[Mapping[str, Any]], table: Table, own: set[str]
) -> tuple[list[dict[str, Any]], dict[str, int], int]:
    """The findings over the statistics' rows (queryid, query, role, calls, rows), jobctl's
    own and the design's statements (``own``: their fingerprints) never among them, then one
    row per fenced heartbeat or completion the fence refused writes of (``rejected``: its
    calls - rows; any statement's, the design's too); the rejections by kind; and how many
    statements were judged. One parse per distinct statement."""
    found: list[dict[str, Any]] = []
    rejected = {"heartbeat": 0, "completion": 0}
    refusals: list[dict[str, Any]] = []
    judged = 0
    seen: dict[str, Judged] = {}
    for row in statements:
        text = row["query"]
        print_ = fingerprint(text)
        if print_ is None:
            continue
        verdict = seen.get(print_)
        if verdict is None:
            verdict = seen[print_] = judge(text, table)
            judged += 1
        if verdict.fenced is not None:  # the design's (jobctl's own included) or the app's
            refused = max(0, int(row["calls"]) - int(row["rows"]))
            rejected[verdict.fenced] += refused
            if refused:
                refusals.append(
                    {
                        "kind": verdict.fenced,
                        "queryid": row.get("queryid"),
                        "statement": text,
                        "role": row.get("role"),
                        "calls": row.get("calls"),
                        "rows": row.get("rows"),
                        "rejected": refused,
                    }
                )
        if print_ in own:
            continue
        for kind in verdict.kinds:
            check, wrong, fix = KINDS[kind]
            found.append(
                {
                    "check": check,
                    "kind": kind,
                    "queryid": row.get("queryid"),
                    "statement": text,
                    "role": row.get("role"),
                    "calls": row.get("calls"),
                    "rows": row.get("rows"),
                    "wrong": wrong,
                    "fix": fix,
                }
            )
    return found + refusals, rejected, judged

"""``jobctl doctor``: the lease design's four pre-launch checks against what the application
really runs, read only. The design's promise holds only if every writer follows it; doctor
reads the statements the application runs (pg_stat_statements; judged by
``doctor_statements``), the fence's rejections, and the history, and says per check ok, warn,
fail or unknown, with its evidence. Example::

    with s.transaction(read_only=True):
        report = collect(s, window=dt.timedelta(days=7))
    failed = [c for c in report["checks"] if c["status"] == "fail"]
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from jobctl import db, durations, errors
from jobctl.contract.shapes import Row
from jobctl.ops import doctor_catalog as catalog
from jobctl.ops import doctor_statements as judge
from jobctl.ops.doctor_kinds import FIX_STATEMENT, WARN_ONLY, finding
from jobctl.schema import statements as rendered
from jobctl.sql import queries

if TYPE_CHECKING:
    from jobctl.db.session import Session

# the checks, in the order the checklist shows them: name -> title
CHECKS = {
    "timeout_by_lease": "1. the timeout is judged by lease_expires_at alone",
    "fenced_writes": "2. every claim, heartbeat, reclaim and completion is fenced by attempt_token",
    "fence_rejections": "   the fence's rejections (stale heartbeats and completions refused)",
    "lease_length": "   the lease against the heartbeats",
    "auto_reruns": "3. jobs reclaimed automatically are safe to run twice",
    "manual_review": "4. jobs not reclaimed automatically have a place and someone who looks",
}
ENABLE = (
    "pg_stat_statements is not installed, so doctor cannot see the application's statements: "
    "set shared_preload_libraries = 'pg_stat_statements' in postgresql.conf, restart, run "
    "CREATE EXTENSION pg_stat_statements in this database, and grant pg_read_all_stats to the "
    "role doctor runs as to see other roles' statements"
)
# of each statement, the first this many characters are read (cut on the server): a longer one
# is a finding, "check by hand"; every write jobctl or the design makes is far shorter
READ_CHARS = 65_536
# a finding's statement is kept to this many characters (its whole length beside it): what a
# person needs to find it in the code, and a bound on memory whatever the application stores
STATEMENT_KEPT = 4_096
STREAM_CHUNK = 100  # rows fetched at a time: at most 100 x READ_CHARS characters in flight
GAP_WARNING = 0.8  # a p99 heartbeat gap this close to the lease: raise it, or beat more often
REVIEW_WAIT_WARNING = dt.timedelta(days=1)
HIDDEN = "<insufficient privilege>"


def _check(name: str, status: str, evidence: str, findings: list[Row] | None = None) -> Row:
    return {
        "check": name,
        "title": CHECKS[name].strip(),
        "status": status,
        "evidence": evidence,
        "findings": findings or [],
    }


def own_fingerprints(s: Session) -> set[str]:
    """The fingerprints of every statement jobctl runs on this table (each block of its
    statement files, composed for it) and of the design's worker statements as ``schema
    statements`` renders them: never findings."""
    found = set()
    for name in queries.blocks():
        try:
            text = queries.query(name, **s.table.fragments).as_string(s.conn)
        except (KeyError, ValueError, TypeError):
            continue  # a fragment, or a block needing the caller's own fragments
        text = re.sub(r"%\(\w+\)s", "$1", text).replace("%%", "%")
        print_ = judge.fingerprint(text)
        if print_ is not None:
            found.add(print_)
    for statement in rendered.render(s.conn, s.table):
        print_ = judge.fingerprint(statement.sql)
        if print_ is not None:
            found.add(print_)
    return found


def _table(s: Session) -> judge.Table:
    """The table as the judge knows it: its names for the design's columns, its processing
    status, the relations the catalog says a write reaches it through (partitions,
    children, views), and all its columns."""
    mapping = s.table.mapping
    columns = {design: mapping.column(design) for design in judge.PROCESSING_ONLY}
    for design in ("id", "status", "attempts", "available_at", "updated_at", "finished_at"):
        columns[design] = mapping.column(design)
    related = s.rows("doctor_table_relations", {"oid": s.table.oid})
    every = s.rows("doctor_table_columns", {"oid": s.table.oid})
    table = judge.Table(
        s.table.name,
        s.table.schema,
        columns,
        processing=mapping.status("processing"),
        related=frozenset((str(r["schema"]), str(r["name"])) for r in related),
        every_column=frozenset(str(r["name"]) for r in every),
        times=frozenset(str(r["name"]) for r in every if r["is_time"]),
        pauses=s.table.pauses and bool(mapping.mapped_optional),
        shadowed=tuple(str(r["schema"]) for r in s.rows("doctor_equal_shadows")),
    )
    views = [int(r["oid"]) for r in related if r["view"]]
    if not views:
        return table
    shown = {
        (str(v["schema"]), str(v["name"])): catalog.view_columns(v["definition"], v["columns"])
        for v in s.rows("doctor_views", {"oids": views, "chars": READ_CHARS})
    }
    return dataclasses.replace(table, views=catalog.views_on_the_table(shown, table))


def _hooks(s: Session, table: judge.Table) -> list[Row]:
    """The findings in the rules and triggers that write the jobs table (their statements
    never reach pg_stat_statements as themselves), read from the catalog."""
    related = s.rows("doctor_table_relations", {"oid": s.table.oid})
    oids = [s.table.oid, *(int(r["oid"]) for r in related)]
    rules = s.rows("doctor_rules", {"oids": oids, "chars": READ_CHARS})
    triggers = s.rows("doctor_triggers", {"chars": READ_CHARS})
    return catalog.hooks(rules, triggers, table, limit=READ_CHARS, kept=STATEMENT_KEPT)


def claims_ignoring_pauses(s: Session) -> int:
    """How many distinct claims of this table pg_stat_statements holds that do not read
    jobctl.pauses (the workers running them still claim a paused kind): 0 when none, when
    nothing can be paused, or when the statistics cannot tell (not installed, other roles'
    statements hidden, or reading them failed: a pause is made whether or not this can
    tell). Read in a read-only transaction of its own."""
    import psycopg

    if not (s.table.pauses and s.table.mapping.mapped_optional):
        return 0
    try:
        with s.transaction(read_only=True):
            found, _ = statistics(s)
            if found is None:
                return 0
            seen = (r for r in found if r["query"] not in (None, HIDDEN))
            flagged, _, _ = findings(seen, _table(s), own_fingerprints(s))
    except (psycopg.Error, errors.JobctlError):
        return 0
    return sum(f["kind"] == "claim_ignores_pauses" for f in flagged)


def statistics(s: Session) -> tuple[Iterable[Row] | None, Row]:
    """The statistics' rows that may write (None: pg_stat_statements is not installed here),
    streamed (read as they are judged, each text cut on the server at READ_CHARS), and what
    is known of them (schema, stats_reset, whether other roles are seen). The caller holds
    the transaction the stream is read in."""
    import psycopg
    from psycopg import sql

    info = s.one("doctor_statistics_schema")
    if info["schema"] is None:
        return None, info
    schema = sql.Identifier(info["schema"])
    try:
        with s.conn.transaction():  # a savepoint: the rest of the checks still run
            reset = db.row(s.conn, queries.query("doctor_statistics_reset", schema=schema))
    except psycopg.errors.ObjectNotInPrerequisiteState:  # created, but not preloaded
        return None, {"schema": None}
    found = db.stream(
        s.conn,
        queries.query("doctor_statistics", schema=schema),
        {"chars": READ_CHARS},
        chunk=STREAM_CHUNK,
    )
    return found, {**info, "stats_reset": reset["stats_reset"] if reset else None}


def collect(s: Session, *, window: dt.timedelta, statements: Iterable[Row] | None = None) -> Row:
    """The checklist (``{checks: [...]}``); the caller holds a read-only transaction.
    ``statements``: the statistics' rows to judge instead of reading them (the benchmark)."""
    info: Row = {}
    if statements is None:
        statements, info = statistics(s)
    history = bool(s.one("doctor_history_installed")["installed"])
    params = {
        "job_table": s.table.qualified,
        "window": window,
        "queued": s.table.mapping.status("queued"),
    }
    checks = _statement_checks(s, statements, info)
    checks.append(_lease_check(s, params, history))
    checks.append(_auto_check(s, params, history))
    checks.append(_review_check(s, params, history))
    order = list(CHECKS)
    checks.sort(key=lambda c: order.index(c["check"]))
    return {
        "table": s.table.qualified,
        "window_s": window.total_seconds(),
        "stats_reset": info.get("stats_reset"),
        "checks": checks,
    }


def _statement_checks(s: Session, rows: Iterable[Row] | None, info: Row) -> list[Row]:
    """The checks read from the statements the server has seen (``rows``: None without
    pg_stat_statements): sweepers by age, unfenced writes, and the fence's refusals."""
    lease_rows = _claimed_without_lease(s)
    table = _table(s)
    hooks = _hooks(s, table)
    sql_of = {x.name: x.sql for x in rendered.render(s.conn, s.table)}
    for f in hooks:
        _fix_sql(f, sql_of)
    in_hooks = f"; {len(hooks)} in rules or triggers (read from the catalog)" if hooks else ""
    if rows is None:
        missing = "pg_stat_statements is not installed here (how to: the first check)"
        swept = [f for f in hooks if f["check"] == "timeout_by_lease"]
        written = [f for f in hooks if f["check"] == "fenced_writes"]
        fenced_status = _worst(written, "warn" if lease_rows else "unknown")
        return [
            _check("timeout_by_lease", "fail" if swept else "unknown", ENABLE, swept),
            _check("fenced_writes", fenced_status, missing + in_hooks, written + lease_rows),
            _check("fence_rejections", "unknown", missing),
        ]
    hidden = [0]

    def visible() -> Iterator[Row]:
        for r in rows:
            if r["query"] in (None, HIDDEN):
                hidden[0] += 1
            else:
                yield r

    found, rejected, judged = findings(visible(), table, own_fingerprints(s))
    for f in found:
        _fix_sql(f, sql_of)
    by_check: dict[str, list[Row]] = {"timeout_by_lease": [], "fenced_writes": []}
    refusals = [f for f in found if "rejected" in f]
    for f in [*found, *hooks]:
        if "rejected" not in f:
            by_check[f["check"]].append(f)
    seen = f"{judged} distinct statement(s) naming {s.table.qualified} judged"
    if hidden[0]:
        seen += (
            f"; {hidden[0]} of other roles hidden from this role (grant pg_read_all_stats to "
            "see them)"
        )
    sweepers = by_check["timeout_by_lease"]
    writes = by_check["fenced_writes"]
    total, rejections = _rejections(rejected, info.get("stats_reset"))
    return [
        _check(
            "timeout_by_lease",
            "fail" if sweepers else ("warn" if hidden[0] else "ok"),
            seen + _by_age(sweepers),
            sweepers,
        ),
        _check(
            "fenced_writes",
            _worst(writes, "warn" if hidden[0] or lease_rows else "ok"),
            seen + _written(writes) + in_hooks,
            writes + lease_rows,
        ),
        _check(
            "fence_rejections",
            "warn" if total else "ok",
            rejections,
            refusals,
        ),
    ]


def _fix_sql(f: Row, sql_of: Mapping[str, str]) -> None:
    """Give a finding whose fix is a rendered statement that statement (``fix_sql``)."""
    name = FIX_STATEMENT.get(str(f.get("kind")), str(f.get("fix")))
    if name in sql_of:
        f["fix_sql"] = sql_of[name]


def _by_age(found: list[Row]) -> str:
    """The timeout check's evidence past the count: the sweepers and the claims that take
    jobs back by age, or that there is none."""
    claims = sum(f.get("kind") == "claim_by_age" for f in found)
    said = [
        f"{len(found) - claims} sweeper(s) by age" if len(found) > claims else "",
        f"{claims} claim(s) taking jobs back by age" if claims else "",
    ]
    return "; " + (", ".join(x for x in said if x) or "no sweeper or claim by age")


def _worst(writes: list[Row], otherwise: str) -> str:
    """fail for a write found unfenced or not read, warn for one the statistics cannot tell
    (a DELETE of a status given as a parameter)."""
    if any(f["kind"] not in WARN_ONLY for f in writes):
        return "fail"
    return "warn" if writes else otherwise


def _written(writes: list[Row]) -> str:
    """The fenced_writes check's evidence past the count: how many of each, or that every
    write is fenced."""
    unparsed = sum(f["kind"] == "unparsed" for f in writes)
    unknown = sum(f["kind"] in WARN_ONLY for f in writes)
    said = [
        f"{len(writes) - unparsed - unknown} unfenced" if len(writes) > unparsed + unknown else "",
        f"{unparsed} not parsed (check by hand)" if unparsed else "",
        f"{unknown} the statistics cannot tell (check by hand)" if unknown else "",
    ]
    return "; " + (", ".join(x for x in said if x) or "every write fenced")


def findings(
    statements: Iterable[Mapping[str, Any]], table: judge.Table, own: set[str]
) -> tuple[list[dict[str, Any]], dict[str, int], int]:
    """The findings over the statistics' rows (queryid, query, role, calls, rows; and
    ``query_chars``, the whole length, when ``query`` is its start cut at READ_CHARS),
    jobctl's own and the design's statements (``own``: their fingerprints) never among them,
    then one row per fenced heartbeat or completion the fence refused writes of
    (``rejected``: its calls - rows; any statement's, the design's too); the rejections by
    kind; and how many distinct statements naming the table were judged. One parse per
    distinct statement; one that may write but could not be read is a finding, never left
    out. The rows are read one at a time (a stream), and each finding keeps at most
    STATEMENT_KEPT characters of its statement."""
    found: list[dict[str, Any]] = []
    rejected = {"heartbeat": 0, "completion": 0}
    refusals: list[dict[str, Any]] = []
    judged = 0
    seen: dict[str, judge.Judged] = {}
    for row in statements:
        text, chars = row["query"], row.get("query_chars")
        whole = len(text) if chars is None else int(chars)
        print_ = judge.fingerprint(text) if whole <= len(text) else None  # a cut: no print
        verdict = seen.get(print_) if print_ is not None else None
        if verdict is None:
            verdict = judge.judge(text, table, chars=whole, limit=READ_CHARS)
            if print_ is not None:
                seen[print_] = verdict
            judged += verdict.writes or verdict.named
        about = {
            "queryid": row.get("queryid"),
            "statement": text[:STATEMENT_KEPT],
            "role": row.get("role"),
            "calls": row.get("calls"),
            "rows": row.get("rows"),
        }
        if whole > STATEMENT_KEPT:
            about["statement_chars"] = whole
        if verdict.fenced is not None:  # the design's (jobctl's own included) or the app's
            refused = max(0, int(row["calls"]) - int(row["rows"]))
            rejected[verdict.fenced] += refused
            if refused:
                refusals.append({"kind": verdict.fenced, **about, "rejected": refused})
        if print_ is not None and print_ in own:
            continue
        for kind in verdict.kinds:
            one = finding(kind, about, verdict.why_of(kind))
            if verdict.parse_error:
                one["parse_error"] = verdict.parse_error
            found.append(one)
    return found + refusals, rejected, judged


def _claimed_without_lease(s: Session) -> list[Row]:
    """A finding when processing jobs have no lease (some writer claims without one)."""
    from jobctl.ops.slices import EVERY

    every = {"soon": dt.timedelta(0), **EVERY.params()}  # every kind and queue
    no_lease = int(s.one("summary_processing", every)["no_lease"])
    if not no_lease:
        return []
    return [
        {
            "kind": "claimed_without_lease",
            "jobs": no_lease,
            "wrong": f"{no_lease} processing job(s) have no lease: some writer claims "
            "without one (jobctl stuck -o wide lists them, reclaim never touches them)",
            "fix": "claim",
        }
    ]


def _rejections(rejected: dict[str, int], since: dt.datetime | None) -> tuple[int, str]:
    """How many writes the fence refused since the statistics' reset, and the line saying so."""
    window = f"since the statistics' reset at {since:%Y-%m-%d %H:%M:%S%z}" if since else ""
    total = rejected["heartbeat"] + rejected["completion"]
    line = (
        f"{rejected['heartbeat']} heartbeat(s) and {rejected['completion']} completion(s) or "
        f"fail(s) refused by the fence {window}".strip()
    )
    if total:
        line += (
            ": workers whose jobs were reclaimed kept writing (zombies), or the lease is too "
            "short for the work"
        )
    return total, line


def _lease_check(s: Session, params: Row, history: bool) -> Row:
    if not history:
        return _check("lease_length", "unknown", "the history is not installed (schema apply)")
    workers = s.rows("doctor_lease_history", params)
    if not workers:
        return _check("lease_length", "unknown", "no attempt in the history's window")
    findings = []
    for w in workers:
        lease, gap = w["lease_s"], w["p99_gap_s"]
        advice = []
        if lease and gap is not None and gap >= GAP_WARNING * lease:
            advice.append(
                f"lease {lease:g} s, p99 gap {gap:.0f} s: raise the lease or heartbeat more often"
            )
        if w["outlived"]:
            advice.append(f"{w['outlived']} attempt(s) ended after their lease ran out")
        if w["reclaimed_while_beating"]:
            advice.append(
                f"{w['reclaimed_while_beating']} attempt(s) reclaimed within two leases of "
                "their last heartbeat: the worker was likely alive"
            )
        findings.append({**w, "advice": advice})
    flagged = [f for f in findings if f["advice"]]
    evidence = f"{sum(w['attempts'] for w in workers)} attempt(s) of {len(workers)} worker(s)"
    if any("exact" not in (w["heartbeat_stats"] or "") for w in workers):
        evidence += " (gaps counted only when late: history mode late)"
    return _check("lease_length", "warn" if flagged else "ok", evidence, findings)


def _auto_check(s: Session, params: Row, history: bool) -> Row:
    if not history:
        return _check("auto_reruns", "unknown", "the history is not installed (schema apply)")
    got = s.one("doctor_auto_reruns", params)
    if not got["reclaims"]:
        return _check("auto_reruns", "ok", "no auto-policy job was reclaimed in the window")
    return _check(
        "auto_reruns",
        "warn",
        f"{got['reclaims']} reclaim(s) gave {got['jobs']} auto-policy job(s) back to run "
        "again: the database fence cannot stop a second email or charge, so each must be "
        "idempotent (an idempotency key, or business deduplication); a job that is not goes "
        "to manual (jobctl policy ID --manual)",
        [dict(got)],
    )


def _review_check(s: Session, params: Row, history: bool) -> Row:
    from jobctl.ops import review
    from jobctl.ops.slices import EVERY

    awaiting = int(s.one("review_count", EVERY.params())["awaiting_review"])
    parked = s.table.mapping.parked
    oldest = next(iter(review.awaiting(s, review.ReviewFilter(), 1)), None) if awaiting else None
    human = s.one("doctor_last_human_action", params) if history else {"at": None, "actor": None}
    evidence = f"park status {parked}; {awaiting} job(s) awaiting review (jobctl review)"
    wait = oldest["waited_s"] if oldest else None
    if wait is not None:
        evidence += f", the oldest waiting {durations.human(wait)}"
    if human["at"] is not None:
        evidence += f"; a person last acted at {human['at']:%Y-%m-%d %H:%M:%S%z}"
    else:
        evidence += "; no person has acted on a job yet"
    late = wait is not None and wait > REVIEW_WAIT_WARNING.total_seconds()
    status = "warn" if awaiting and (late or human["at"] is None) else "ok"
    finding = {"awaiting": awaiting, "oldest_wait_s": wait, "last_human_action": human}
    return _check("manual_review", status, evidence, [finding])


def failed(report: Row) -> bool:
    return any(c["status"] == "fail" for c in report["checks"])

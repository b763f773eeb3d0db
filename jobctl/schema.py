"""schema apply (the lease design's columns, checks, reclaim index; jobctl's history) and
schema check."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from jobctl import db, errors, history, locks, mapping, queries, shape
from jobctl.mapping import TableMapping

LEASE_COLUMNS = {
    "attempt_token": "uuid",
    "lease_expires_at": "timestamp with time zone",
    "heartbeat_at": "timestamp with time zone",
    "recovery_policy": "text",
    "reclaim_count": "integer",
}
BASE_COLUMNS = mapping.EXISTING_COLUMNS  # the table's own columns the design relies on

# check constraint name suffix -> the block of sql/schema.sql holding its expression
CHECKS = ("recovery_policy_check", "reclaim_count_check")


@dataclasses.dataclass(frozen=True)
class Step:
    """One statement of schema apply; ``outside_transaction`` for CREATE INDEX CONCURRENTLY.

    ``locks`` names the jobs table when the step takes a lock that conflicts with the workers'
    statements (ALTER TABLE, CREATE TRIGGER, DROP INDEX, and the history's ALTER and CREATE
    INDEX on jobctl's tables, which the trigger writes): it is tried with a short lock_timeout
    and retried (``locks.with_lock_retries``), so that workers never queue behind it for long."""

    what: str
    statement: sql.SQL | sql.Composed
    outside_transaction: bool = False
    locks: str | None = None
    probe: sql.Composed | None = None  # CONCURRENTLY: its first lock, tried in a transaction


def index_name(relname: str, suffix: str) -> str:
    """idx_<table><suffix> within 63 bytes (the lease design's idx_jobs_processing_timeout)."""
    return f"idx_{relname}"[: 63 - len(suffix)] + suffix


def split_name(name: str) -> tuple[str, ...]:
    """'s.t' or '"S"."t"' -> its parts, unquoted; unquoted parts fold to lower case."""
    parts = re.findall(r'"((?:[^"]|"")+)"|([^."]+)', name)
    return tuple(quoted.replace('""', '"') if quoted else bare.lower() for quoted, bare in parts)


def plan_apply(
    conn: psycopg.Connection[Any],
    table_name: str,
    *,
    create: bool,
    history_mode: str | None = None,
    mapping: TableMapping | None = None,
) -> list[Step]:
    """The steps that bring the table and the history up to date (only what is missing).

    ``history_mode`` (late, exact, audit; see jobctl.history) None keeps the installed one.
    ``mapping`` (the table's own names, --column/--status/--park-status) replaces the recorded
    one; None keeps it. A table jobctl cannot serve with it is refused before any step."""
    steps: list[Step] = []
    recorded: TableMapping | None = None
    exists = conn.execute(queries.query("table_identity"), {"name": table_name}).fetchone()
    if exists is None:
        if not create:
            db.resolve_table(conn, table_name)  # raises TableNotFound, naming it
        parts = split_name(table_name)
        ident = sql.Identifier(*parts)
        steps.append(
            Step(
                "create the reference jobs table",
                queries.query(
                    "reference_table",
                    ident,
                    queued_index=sql.Identifier(index_name(parts[-1], "_queued")),
                ),
            )
        )
        relname, has_rows, indexes = parts[-1], False, {}
        if mapping is not None and mapping != TableMapping():
            raise errors.UsageError(
                "--create makes a table with the lease design's own names: no --column, "
                "--status or --park-status with it"
            )
        mapping = TableMapping()
        fragments = db.spelling(ident, mapping)
        columns: set[str] = set()
        constraints: dict[str, bool] = {}
        oid = None
        schema_name = parts[0] if len(parts) > 1 else "public"
        locked = table_name
    else:
        recorded = db.resolve_table(conn, table_name).mapping
        mapping = recorded if mapping is None else mapping
        table = db.resolve_table(conn, table_name, mapping)
        found = shape.inspect(conn, table.qualified)
        why = shape.refusal(found, mapping) or shape.not_yet_served(found, mapping)
        if why is not None:
            raise errors.Refused(why)
        missing = [d for d in BASE_COLUMNS if found.column(mapping, d) is None]
        if missing:
            raise errors.Refused(
                f"{table.qualified} has no column for the lease design's "
                + ", ".join(f"{d} ({mapping.column(d)!r})" for d in missing)
                + ": name the table's own with --column DESIGN=ACTUAL; nothing done"
            )
        refused = shape.rejected_statuses(conn, found, mapping)
        if refused:
            value, reason = refused[0]
            raise errors.Refused(
                f"{table.qualified}: the status column would refuse {value!r}, a value jobctl "
                f"writes ({reason}); map the statuses to the table's own with --status "
                "DESIGN=ACTUAL (and --park-status); nothing done"
            )
        fragments = table.fragments
        ident, relname, schema_name, oid = table.ident, table.name, table.schema, table.oid
        locked = table.qualified
        has_rows = _one(conn, queries.query("table_has_rows", ident))["e"]
        columns = {r["name"] for r in _rows(conn, "table_columns", table.oid)}
        constraints = {
            r["conname"]: r["convalidated"] for r in _rows(conn, "table_constraints", table.oid)
        }
        indexes = reclaim_indexes(conn, table.oid)

    lease_columns = {mapping.column(c) for c in LEASE_COLUMNS}
    if not lease_columns <= columns:  # ALTER TABLE locks even when there is nothing to add
        steps.append(
            Step(
                "add the lease columns",
                queries.query("add_lease_columns", **fragments),
                locks=locked,
            )
        )
    for suffix in CHECKS:
        name = f"{relname}_{suffix}"[:63]
        if name not in constraints:  # NOT VALID: a catalog change under the lock, no scan
            steps.append(
                Step(
                    f"add check {name} (not valid yet)",
                    queries.query(
                        "add_check",
                        ident,
                        constraint=sql.Identifier(name),
                        check=queries.query(suffix, **fragments),
                    ),
                    locks=locked,
                )
            )
        if not constraints.get(name):  # the scan, in its own transaction: the workers go on
            steps.append(
                Step(
                    f"validate check {name}",
                    queries.query("validate_check", ident, constraint=sql.Identifier(name)),
                )
            )
    ours = index_name(relname, "_processing_timeout")
    if indexes.get(ours) is False:
        steps.append(
            Step(  # an invalid index is never used by queries: dropping it is instant
                "drop the invalid reclaim index (left by a failed concurrent build)",
                queries.query("drop_index", index=sql.Identifier(schema_name, ours)),
                locks=locked,
            )
        )
    if not any(indexes.values()):  # a valid reclaim index of any name will do
        steps.append(
            Step(
                "create the reclaim index" + (" concurrently" if has_rows else ""),
                queries.query(
                    "reclaim_index",
                    ident,
                    concurrently=sql.SQL("CONCURRENTLY" if has_rows else ""),
                    index=sql.Identifier(ours),
                ),
                outside_transaction=has_rows,
                probe=queries.query("concurrent_lock_probe", ident) if has_rows else None,
            )
        )
    # the history's steps lock the jobs table (columns, trigger) or jobctl's tables, which
    # the trigger writes in the workers' transactions: all are tried with short lock timeouts
    target = (
        history.Target.new(ident, schema_name, relname) if oid is None else history.Target.of(table)
    )
    steps.extend(
        Step(what, statement, locks=locked)
        for what, statement in history.plan(conn, target, history_mode)
    )
    if recorded is not None and mapping != recorded:  # (a table being created has the design's)
        steps.append(
            Step(
                "record the table's names: " + "; ".join(mapping.describe()),
                queries.query(
                    "record_table_mapping",
                    job_table=sql.Literal(locked),
                    mapping=sql.Literal(mapping.to_json()),
                ),
            )
        )
    return steps


def reclaim_indexes(conn: psycopg.Connection[Any], table_oid: int) -> dict[str, bool]:
    """The table's indexes that can serve reclaim (partial on processing, lease_expires_at
    among the first two keys), whatever their names: name -> valid."""
    rows = _rows(conn, "reclaim_index_candidates", table_oid)
    return {
        r["relname"]: bool(r["indisvalid"])
        for r in rows
        if r["predicate"]
        and "processing" in r["predicate"]
        and r["keys"]
        and "lease_expires_at" in r["keys"][:2]
    }


_SCRIPT_HEAD = """\
-- Run with: psql -v ON_ERROR_STOP=1 -f this.sql
-- Steps marked "takes a lock the workers wait for" wait at most {timeout} for it (SET LOCAL
-- lock_timeout), so the workers are never held up longer than that. If such a step fails
-- with "canceling statement due to lock timeout", nothing of it was applied: wait a moment and
-- run it again, with growing pauses, until a gap between long transactions lets it through
-- (jobctl schema apply does this by itself, up to --lock-deadline). Then run the rest.
"""


def render_sql(
    conn: psycopg.Connection[Any], steps: list[Step], backoff: locks.Backoff = locks.DEFAULT_BACKOFF
) -> str:
    """The steps as a SQL script, for review or to run by hand (--sql): each step that takes
    a lock the workers wait for in its own transaction with a short lock_timeout."""
    timeout = f"{round(backoff.max_timeout * 1000)}ms"
    parts = []
    for step in steps:
        text = step.statement.as_string(conn).strip()
        if step.locks:
            parts.append(
                f"-- {step.what}: takes a lock the workers wait for; retry on lock timeout\n"
                f"BEGIN;\nSET LOCAL lock_timeout = '{timeout}';\n{text};\nCOMMIT;"
            )
        else:
            parts.append(f"-- {step.what}\n{text};")
    head = _SCRIPT_HEAD.format(timeout=timeout) if any(s.locks for s in steps) else ""
    return head + "\n" + "\n\n".join(parts) + "\n" if head else "\n\n".join(parts) + "\n"


DEFAULT_LOCK_DEADLINE = dt.timedelta(minutes=5)


def apply(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    steps: list[Step],
    *,
    deadline: dt.timedelta = DEFAULT_LOCK_DEADLINE,
    backoff: locks.Backoff = locks.DEFAULT_BACKOFF,
    on_wait: Callable[[locks.Wait], None] = lambda wait: None,
    on_done: Callable[[str], None] = lambda what: None,
) -> list[str]:
    """Run the steps in order, each atomic, never holding the workers up for long.

    A step that ``locks`` the jobs table: short tries in their own transactions (lock_timeout
    from ``backoff``, never above --lock-timeout), retried with jittered sleeps. Any other step
    (VALIDATE, CREATE INDEX CONCURRENTLY, ...) waits in one statement, its lock_timeout the
    time left, while a second connection watches whom it waits for. ``on_wait`` hears why a
    step waits, at most once a second; ``on_done`` each step done. At the deadline:
    ``locks.DeadlineExceeded``, naming the holder; the failed step left nothing behind
    (except a CONCURRENTLY build: its invalid index, which the next apply rebuilds)."""
    if settings.lock_timeout.total_seconds() > 0:  # 0: no lock_timeout, the backoff's cap
        backoff = dataclasses.replace(
            backoff, max_timeout=min(backoff.max_timeout, settings.lock_timeout.total_seconds())
        )
    ends = time.monotonic() + deadline.total_seconds()
    done = []
    for step in steps:
        remaining = ends - time.monotonic()
        if step.locks:
            _with_retries(conn, settings, step, remaining, deadline, backoff, on_wait)
        else:
            _watched(conn, settings, step, remaining, deadline, on_wait)
        done.append(step.what)
        on_done(step.what)
    return done


def _with_retries(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    step: Step,
    remaining: float,
    deadline: dt.timedelta,
    backoff: locks.Backoff,
    on_wait: Callable[[locks.Wait], None],
) -> None:
    """One step that locks the jobs table: short tries until ``remaining`` seconds are up."""
    row = conn.execute(queries.query("lock_target"), {"name": step.locks}).fetchone()
    assert row is not None
    throttle = locks.Throttle()
    seen = locks.Wait(step.what, 0, 0, None)

    def attempt(timeout: float) -> None:
        with db.mapped_errors(settings.resolved_dsn()), db.transaction(conn, settings):
            conn.execute(
                queries.query("local_lock_timeout"),
                {"timeout": f"{max(1, round(timeout * 1000))}ms"},
            )
            conn.execute(step.statement)

    def retry(tries: int, elapsed: float, timeout: float) -> None:
        nonlocal seen
        seen = dataclasses.replace(seen, elapsed=elapsed, attempts=tries)
        if throttle.ready():
            seen = dataclasses.replace(seen, blocker=locks.holders(conn, row["oid"], row["since"]))
            on_wait(seen)

    try:
        locks.with_lock_retries(attempt, deadline=remaining, backoff=backoff, on_retry=retry)
    except locks.DeadlineExceeded:
        seen = dataclasses.replace(
            seen, blocker=locks.holders(conn, row["oid"], row["since"]) or seen.blocker
        )
        tries = f"{seen.attempts} {'try' if seen.attempts == 1 else 'tries'}"
        raise locks.DeadlineExceeded(
            f"{step.what}: the lock on {step.locks} was not granted within the "
            f"{_span(deadline)} deadline ({tries}, each holding the workers up at most "
            f"{round(backoff.max_timeout * 1000)} ms); held by "
            f"{seen.blocker or 'a session that has finished since'}; nothing of this step was "
            "applied: run jobctl schema apply again (jobctl schema check shows what is missing)",
            seen,
        ) from None


def _watched(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    step: Step,
    remaining: float,
    deadline: dt.timedelta,
    on_wait: Callable[[locks.Wait], None],
) -> None:
    """A step that does not block the workers, in one statement: its lock_timeout is the time
    left; a second connection reports whom it waits for (old transactions, for an index
    build)."""
    throttle = locks.Throttle()
    last: list[locks.Wait] = []
    timeout = f"{max(1, round(remaining * 1000))}ms"

    def report(blocker: str | None, phase: str | None, elapsed: float) -> None:
        last[:] = [locks.Wait(step.what, elapsed, 0, blocker, phase)]
        if throttle.ready():
            on_wait(last[0])

    if remaining <= 0:
        raise locks.DeadlineExceeded(
            f"{step.what}: not started, the {_span(deadline)} deadline has passed; run jobctl "
            "schema apply again",
            None,
        )
    try:
        with (
            db.mapped_errors(settings.resolved_dsn()),
            locks.watching(settings, conn.info.backend_pid, report),
        ):
            if step.outside_transaction:
                # CONCURRENTLY runs outside a transaction block, so no transaction-local
                # lock_timeout; a session-level one would stay on the server connection (behind
                # a pooler, shared with the application). Its first lock (SHARE UPDATE
                # EXCLUSIVE: no worker statement conflicts with it) is tried under the time left
                # in a short transaction; then the build waits for older transactions as long
                # as they last, the watcher saying whom it waits for.
                if step.probe is not None:
                    with db.transaction(conn, settings):
                        conn.execute(queries.query("local_lock_timeout"), {"timeout": timeout})
                        conn.execute(step.probe)
                conn.execute(step.statement)
            else:
                with db.transaction(conn, settings):
                    conn.execute(queries.query("local_lock_timeout"), {"timeout": timeout})
                    conn.execute(step.statement)
    except errors.LockTimeout:
        wait = last[0] if last else None
        left = (
            "; it left an invalid index, which the next jobctl schema apply drops and rebuilds"
            if step.outside_transaction
            else "; nothing of this step was applied"
        )
        raise locks.DeadlineExceeded(
            f"{step.what}: still held up at the {_span(deadline)} deadline"
            + (f" ({wait.phase})" if wait and wait.phase else "")
            + f" by {wait.blocker if wait and wait.blocker else 'another transaction'}"
            + left
            + " (run jobctl schema apply again)",
            wait,
        ) from None


def _span(duration: dt.timedelta) -> str:
    seconds = duration.total_seconds()
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g}s"


OPERATOR_COLUMNS = (
    "status",
    "available_at",
    "reserved_by",
    "reserved_at",
    "heartbeat_at",
    "lease_expires_at",
    "attempt_token",
    "reclaim_count",
    "last_error",
    "finished_at",
    "updated_at",
    "recovery_policy",  # quarantine and policy
    "jobctl_action",  # names jobctl's own write for its audit (see jobctl.history)
)


def plan_grants(
    conn: psycopg.Connection[Any], table_name: str, *, readonly: str | None, operator: str | None
) -> list[Step]:
    """GRANTs for a read-only role (stuck, summary, show, history, reclaim --dry-run) and an
    operator role (those plus reclaim --commit, requeue, fail: UPDATE of the lease columns).

    The history trigger is SECURITY DEFINER and its function not executable by either role, so
    neither can write jobctl's tables but through real changes of the jobs table."""
    table = db.resolve_table(conn, table_name)
    steps = []
    for role, columns in ((readonly, ()), (operator, OPERATOR_COLUMNS)):
        if role is None:
            continue
        grants: sql.Composed = queries.query(
            "grant_read",
            table.ident,
            schema=sql.Identifier(table.schema),
            role=sql.Identifier(role),
        )
        what = f"read access for {role}"
        if columns:
            grants = sql.Composed(
                [
                    grants,
                    sql.SQL(";\n"),
                    queries.query(
                        "grant_update",
                        table.ident,
                        columns=sql.SQL(", ").join(
                            # the table's own names for the design's columns
                            sql.Identifier(
                                c if c.startswith("jobctl_") else table.mapping.column(c)
                            )
                            for c in columns
                        ),
                        role=sql.Identifier(role),
                    ),
                ]
            )
            what = f"read access and UPDATE of the lease columns for {role}"
        steps.append(Step(what, grants))
    return steps


# what each history mode costs the workers, measured by tests/bench/bench_trigger.py and
# tests/bench/bench_pgbench.py (README, Performance): loss of worker cycles, best of rounds
MODE_COST = {
    "late": "about +40 % server CPU per worker cycle (version 1: +80-100 %)",
    "exact": "about +55 % server CPU per worker cycle (every heartbeat calls the trigger)",
    "audit": "about +2-4 % server CPU per worker cycle (no plpgsql on workers' statements)",
}


# ---------------------------------------------------------------- check
@dataclasses.dataclass(frozen=True)
class Check:
    check: str
    ok: bool
    detail: str


def history_check(conn: psycopg.Connection[Any], table: db.JobsTable) -> Check:
    """Which history is installed on the table, at which version, and what it costs; a
    trigger or function made for another mapping, mode or version is out of date."""
    state = history.table_state(conn, table.oid)
    version, latest = history.installed_version(conn), history.latest_version()
    problems = []
    if version is not None and version < latest:
        problems.append(f"history at version {version} of {latest}")
    if state.mode in history.MODES:
        want = history.wanted(conn, history.Target.of(table), state.mode)
        problems += history.stale(state, want, state.mode)
    elif state.mode is None:
        problems.append("trigger missing")
    else:
        problems.append(f"trigger in unknown mode {state.mode}")
    if state.missing_columns or state.wrong_columns:
        problems.append(
            "columns missing or of the wrong type: "
            + ", ".join(state.missing_columns + state.wrong_columns)
        )
    if problems:
        return Check("history installed", False, "; ".join(problems) + " (run jobctl schema apply)")
    assert state.mode is not None
    return Check(
        "history installed",
        True,
        f"{history.DESCRIBE[state.mode]}, version {version if version is not None else '?'}, "
        f"function jobctl.{history.function_name(table.schema, table.name)}; "
        f"costs {MODE_COST[state.mode]}",
    )


def check(conn: psycopg.Connection[Any], table_name: str) -> list[Check]:
    """The lease design's pre-flight checklist, as far as the database can tell."""
    table = db.resolve_table(conn, table_name)
    names = table.mapping
    results = [
        Check("table exists", True, table.qualified),
        Check("the table's names", True, "; ".join(names.describe())),
    ]
    columns = {r["name"]: r["type"] for r in _rows(conn, "table_columns", table.oid)}
    missing = [f"{c} ({names.column(c)})" for c in BASE_COLUMNS if names.column(c) not in columns]
    results.append(
        Check(
            "queue columns",
            not missing,
            "missing: " + ", ".join(missing) if missing else "all present",
        )
    )
    wrong = [
        f"{names.column(c)} ({columns.get(names.column(c), 'missing')}, want {t})"
        for c, t in LEASE_COLUMNS.items()
        if columns.get(names.column(c)) != t
    ]
    results.append(
        Check("lease columns", not wrong, "; ".join(wrong) or "all present, right types")
    )
    check_defs = [
        r["definition"]
        for r in _rows(conn, "table_constraints", table.oid)
        if r["kind"] == "c" and r["convalidated"]
    ]
    for column in ("recovery_policy", "reclaim_count"):
        found = any(names.column(column) in d for d in check_defs)
        results.append(
            Check(
                f"check constraint on {column}",
                found,
                "present" if found else "missing (run jobctl schema apply)",
            )
        )
    indexes = reclaim_indexes(conn, table.oid)
    valid = [name for name, ok in indexes.items() if ok]
    results.append(
        Check(
            "reclaim index",
            bool(valid),
            f"{valid[0]} (valid)"
            if valid
            else (
                "present but INVALID: " + ", ".join(indexes)
                if indexes
                else "missing: reclaim and stuck scan the table"
            ),
        )
    )
    results.append(history_check(conn, table))
    if names.column("status") in columns:
        rejected = shape.rejected_statuses(conn, shape.inspect(conn, table.qualified), names)
        results.append(
            Check(
                "status values jobctl writes",
                not rejected,
                "; ".join(f"{v!r}: {why}" for v, why in rejected)
                or "accepted: " + ", ".join(names.written_statuses()),
            )
        )
    if not wrong:
        counts = _one(conn, queries.query("lease_consistency", **table.fragments))
        results.append(
            Check(
                "processing rows without lease or token",
                counts["invisible"] == 0,
                f"{counts['invisible']} rows reclaim can never see",
            )
        )
        results.append(
            Check(
                "token iff processing",
                counts["inconsistent"] == 0,
                f"{counts['inconsistent']} rows where (status = 'processing') <> "
                "(attempt_token IS NOT NULL)",
            )
        )
    return results


def _one(conn: psycopg.Connection[Any], statement: sql.Composed) -> dict[str, Any]:
    """The one row a statement always returns (an aggregate, EXISTS)."""
    row: dict[str, Any] | None = conn.execute(statement).fetchone()
    if row is None:
        raise AssertionError("the statement returned no row")
    return row


def _rows(conn: psycopg.Connection[Any], name: str, oid: int) -> list[dict[str, Any]]:
    """A catalog statement about the table ``oid``: its rows."""
    return conn.execute(queries.query(name), {"oid": oid}).fetchall()

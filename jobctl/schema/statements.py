"""The lease design's worker statements rendered for one table, as a worker in any language
runs them: ``claim``, ``heartbeat``, ``complete``, ``completed`` (a completion's retry after a
lost acknowledgement) and ``fail``, in the table's own names, status values and types, every
operator schema-qualified, with PostgreSQL's ``$n`` placeholders (libpq, pgx, node-postgres,
asyncpg, PDO; ``PREPARE name AS ...`` works).

They are the very blocks ``lease.Worker`` runs (sql/queries.sql: claim, heartbeat, complete,
job_outcome, worker_fail), composed for the table as the worker API composes them; only the
parameters are spelled for a client that sends text and numbers: the token as ``uuid``, the
worker and the error as text, the lease and the retry delay in seconds. Example::

    for statement in render(conn, resolve_table(conn, "background_tasks")):
        print(statement.name, statement.params)   # claim ['worker', 'token', 'lease_seconds']
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

from jobctl.contract import safe_text
from jobctl.sql import queries
from jobctl.sql.printable import printable

if TYPE_CHECKING:
    import psycopg

    from jobctl.db.jobs_table import JobsTable

# the design's statement -> the block lease.Worker runs for it
BLOCKS = {
    "claim": "claim",
    "heartbeat": "heartbeat",
    "complete": "complete",
    "completed": "job_outcome",
    "fail": "worker_fail",
}

# every parameter, in the order they are numbered: the block's name for it, and how a client
# that sends text or numbers gets it to the block's type (None: the block already casts it)
PARAMETERS: dict[str, tuple[str, str | None]] = {
    "id": ("id", None),  # the blocks take the id as text, cast to the id column's type
    "worker": ("worker", "{}::pg_catalog.text"),
    "token": ("attempt_token", "{}::pg_catalog.uuid"),
    "lease_seconds": ("lease", "seconds"),
    "error": ("error", "{}::pg_catalog.text"),
    "retry_delay_seconds": ("retry_delay", "seconds"),
}

# what each parameter is, for the comments of the table output
MEANING = {
    "id": "the job's id, as text or in the id column's type",
    "worker": "this worker's id (text): who holds the job",
    "token": "the attempt token (uuid): new and random for each claim; the fence after it",
    "lease_seconds": "the lease in seconds (a number): heartbeat well within it",
    "error": "why the attempt failed (text)",
    "retry_delay_seconds": "seconds before a retry may be claimed (a number; 0: at once)",
}

# what each statement does and returns, for the comments of the table output
SAYS = {
    "claim": "one ready job, a new token and a fresh lease (FOR UPDATE SKIP LOCKED); "
    "returns id, attempt_token, attempts, lease_expires_at, or no row",
    "heartbeat": "extend the lease of the attempt this worker holds; 0 rows: the attempt was "
    "reclaimed or cancelled (jobctl cancel) - stop the work",
    "complete": "mark the job done, fenced by the token (kept on the done row); no row: the "
    "lease was lost, the result must not count - or the acknowledgement of a completion was "
    "lost: ask completed",
    "completed": "after complete returned no row (or no answer): true only if this attempt's "
    "completion landed (the job is done and holds this token); false or no row: the lease "
    "was lost",
    "fail": "give the attempt back: queued again after the delay while attempts remain, else "
    "failed; returns the new status; no row: the lease was lost",
}

_PLACEHOLDER = re.compile(r"%\((\w+)\)s(::[\w.\"]+)?")


@dataclasses.dataclass(frozen=True)
class Statement:
    name: str  # claim, heartbeat, complete, completed, fail
    sql: str  # with $n placeholders, numbered in ``params``' order
    params: list[str]  # the parameters' names, $1 first


def render(conn: psycopg.Connection[Any], table: JobsTable) -> list[Statement]:
    """The five statements for ``table``, spelled on ``conn`` (its quoting of literals); a
    name or value with a control character in it escaped (sql.printable)."""
    return [
        _numbered(name, printable(queries.query(block, **table.fragments)).as_string(conn))
        for name, block in BLOCKS.items()
    ]


def _numbered(name: str, text: str) -> Statement:
    """A composed block with psycopg's ``%(x)s`` placeholders as ``$n``, numbered in the
    order of PARAMETERS, each spelled for a client's text or number."""
    by_block = {block: design for design, (block, _) in PARAMETERS.items()}
    used = {by_block[m.group(1)] for m in _PLACEHOLDER.finditer(text)}
    params = [design for design in PARAMETERS if design in used]
    numbers = {design: n for n, design in enumerate(params, 1)}

    def spelled(match: re.Match[str]) -> str:
        design = by_block[match.group(1)]
        cast = match.group(2)
        how = PARAMETERS[design][1]
        number = f"${numbers[design]}"
        if how == "seconds":  # a number of seconds as the block's interval
            return (
                f"(${numbers[design]}::pg_catalog.float8 OPERATOR(pg_catalog.*) "
                "'1 second'::pg_catalog.interval)"
            )
        if cast is not None:  # the block casts it already
            return number + cast
        return how.format(number) if how else number

    rendered = _PLACEHOLDER.sub(spelled, text).replace("%%", "%")
    return Statement(name, rendered, params)


def as_json(statements: list[Statement]) -> list[dict[str, Any]]:
    """``-o json``: a list of ``{name, sql, params}``."""
    return [dataclasses.asdict(s) for s in statements]


def as_script(statements: list[Statement], table: str, *, prepare: bool = False) -> str:
    """The table output: each statement after a comment saying what it does and one line per
    parameter, ending with a semicolon (``prepare``: as ``PREPARE name AS ...;``)."""
    out = [
        f"-- The lease design's worker statements for {safe_text.visible(table)}, "
        "rendered by jobctl schema statements.",
        "-- Run each in autocommit (its own transaction: a fresh now()); PREPARE name AS ... "
        "works.",
    ]
    for s in statements:
        out += ["", f"-- name: {s.name}: {SAYS[s.name]}"]
        out += [f"--   ${n} {p}: {MEANING[p]}" for n, p in enumerate(s.params, 1)]
        out.append((f"PREPARE {s.name} AS\n" if prepare else "") + s.sql.strip() + ";")
    return "\n".join(out) + "\n"

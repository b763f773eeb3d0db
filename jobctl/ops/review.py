"""The jobs waiting for a human (``jobctl review``), and the bulk decisions made on them: a
saved review plan applied by ``requeue --plan`` / ``fail --plan``, each row written only if
the job is still exactly as reviewed, and ids read from stdin (``requeue -``) for scripts.

A job awaits review when reclaim failed or parked it because its policy is manual or it had
used all its attempts, and nobody has acted on it since (the block ``awaiting_review`` of
``sql/queries.sql``). Example::

    rows = list(review.awaiting(s, review.ReviewFilter(policy="manual"), limit=100))

``run`` is the command's workflow, the one it calls whatever the number of targets.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from jobctl import errors
from jobctl.contract.shapes import ReviewRow, Row
from jobctl.db.session import Session
from jobctl.ops import fleet, manual, plans, repeated_ids, triage
from jobctl.ops.slices import EVERY, Slice

if TYPE_CHECKING:
    from jobctl.ops.sessions import Access
    from jobctl.ops.standby import Standing

PLAN_FORMAT = "jobctl-review-plan/1"


@dataclasses.dataclass(frozen=True)
class ReviewFilter:
    """Which waiting jobs an operator asks about. Values are always query parameters."""

    policy: str | None = None
    worker: str | None = None  # the worker whose lease expired (the reclaim's, in the history)
    since: dt.timedelta | None = None  # reclaimed within this long
    older_than: dt.timedelta | None = None  # waiting for longer than this
    what: Slice = EVERY  # what the job is: kinds, queues, an error's text
    # --full: the worker's name, kind, queue and last_error whole (else cut on the server)
    full: bool = False

    def params(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "worker": self.worker,
            "since": self.since,
            "older_than": self.older_than,
            "cut": triage.cut(self.full),
            **self.what.params(),
        }


def awaiting(
    s: Session,
    which: ReviewFilter,
    limit: int | None,
    left_out: repeated_ids.LeftOut | None = None,
) -> Iterator[ReviewRow]:
    """The jobs awaiting review, longest waiting first, streamed (the caller holds a
    read-only transaction); a job whose id another row holds too left out (its id told to
    ``left_out``)."""
    which.what.check(s.table.mapping)  # before the first row is asked for
    params = {**which.params(), "limit": limit, "job_table": s.table.qualified}
    left = left_out if left_out is not None else repeated_ids.LeftOut()
    return (cast(ReviewRow, row) for row in s.stream("review", params) if not left.took(row))


@dataclasses.dataclass(frozen=True)
class Reviewed:
    """One database's jobs awaiting review, and the optional columns its table maps (kind,
    queue: ``Mapping.mapped_optional``), which its rows carry, and a machine format's header
    holds even when there is no row (as ``ops.stuck``'s ``Stream.optional``)."""

    rows: list[Row]
    optional: tuple[str, ...]


# ---------------------------------------------------------------- plans
def run(
    where: fleet.Where,
    access: Access,
    which: ReviewFilter,
    *,
    limit: int,
    plan: Path | None = None,
    say: fleet.Say,
) -> list[fleet.Outcome[Reviewed]]:
    """``review`` on one database or on every target at once: each target's jobs awaiting a
    human (across targets, each with the target's name) and its table's mapped optional
    columns, its outcome in the targets' order (one database's failure raised). ``plan``:
    the rows saved as a review plan, for ``requeue``/``fail --plan``, which apply to one
    database only."""
    several = fleet.several(where)
    if several and plan is not None:
        raise errors.UsageError(
            "review --save-plan: requeue/fail --plan apply to one database: save a plan "
            "per --target"
        )

    def work(s: Session, _st: Standing, _say: fleet.Say) -> Reviewed:
        found: list[Any] = list(awaiting(s, which, limit))
        optional = s.table.mapping.mapped_optional
        if several:
            return Reviewed(list(fleet.tagged(s.settings.target or "", found)), optional)
        if plan is not None:
            save_plan(plan, s.origin(), cast(list[ReviewRow], found))
        return Reviewed(found, optional)

    return fleet.once(where, access, work, say=say)


def save_plan(path: Path, location: dict[str, Any], rows: list[ReviewRow]) -> None:
    """Write the reviewed rows (each with its fence) and where they were read to ``path``:
    0600, atomically, never through a link (``plans.write_rows``)."""
    plans.write_rows(path, PLAN_FORMAT, location, rows)


def load_plan(path: Path, location: dict[str, Any]) -> list[Row]:
    """The reviewed rows of a review plan; refused (exit 2, nothing done) when it was made
    for another server, database or table, as a reclaim plan is, without its origin,
    malformed or writable by others (``plans.read_rows``)."""
    return plans.read_rows(
        path,
        PLAN_FORMAT,
        location,
        manual.FENCE,
        "review plan",
        ": save one with jobctl review --save-plan",
    )


def planned_decisions(
    s: Session, action: manual.Action, planned: list[Row], *, force: bool
) -> list[manual.Decision]:
    """Each planned row decided as an id given on the command line is (``manual.decide``:
    the same eligibility rules, ``force`` the same), and only if the job is still exactly
    the row reviewed (else a conflict): a plan edited to name a done job, a queued one for
    a requeue, a live lease, is refused as a direct command would be."""
    ids = s.job_ids([r["id"] for r in planned])  # the id column's type; a bad one: exit 2
    return [
        manual.decide(s, typed, action, force=force, expect_token=None, reviewed=row)
        for typed, row in zip(ids, planned, strict=True)
    ]


def conflict_detail(s: Session, job_id: Any, reviewed: Row) -> str:
    """What became of a planned row that was not written, for its ``detail``."""
    with s.transaction(read_only=True):
        now = s.row("manual_read", manual.read_params(job_id))
    return (
        manual.since_review(reviewed, now) or "the row changed since it was read; nothing written"
    )


# ---------------------------------------------------------------- ids from stdin
def read_ids(text: str) -> list[str]:
    """Job ids for ``requeue -`` / ``fail -``: one per line, or JSON lines with an ``id``
    (``jobctl review -o jsonl``); blank lines are skipped. A bad line: UsageError (exit 2)."""
    ids: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except ValueError:
                raise errors.UsageError(f"stdin line {number}: not valid JSON") from None
            if not isinstance(item, dict) or item.get("id") is None:
                raise errors.UsageError(f"stdin line {number}: a JSON line needs an 'id'")
            ids.append(str(item["id"]))
        else:
            ids.append(line)
    if not ids:
        raise errors.UsageError("no job ids on stdin")
    return ids

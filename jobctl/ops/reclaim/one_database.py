"""One database's ``jobctl reclaim`` begun (``start``, a generator that yields its question
and returns its ``Run``), in its three modes: the dry run streamed (a plan saved from it), a
saved plan's commit, or a commit after one question that shows the dry run (``Sample``) and
whose rows are then the commit's plan; and what a confirmed commit left (``expired_since``).
The command's workflow, one database or several, is ``run``."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any, cast

from jobctl import errors
from jobctl.contract.shapes import ReclaimRow, Row
from jobctl.db.session import Session
from jobctl.ops.reclaim.batches import commit_plan, committed, preview, streamed_dry_run
from jobctl.ops.reclaim.plans import load_plan
from jobctl.ops.reclaim.steps import Asked, Run
from jobctl.ops.triage import ExpiredFilter
from jobctl.render.reclaim_lines import Question

if TYPE_CHECKING:
    from jobctl.ops.reclaim.request import Request
    from jobctl.ops.standby import Standing


def start(
    s: Session,
    request: Request,
    *,
    standing: Standing | None = None,
) -> Generator[Asked, None, Run]:
    """Begin the reclaim ``request`` asks for: a dry run, a saved plan's commit, or a commit;
    its ``Run`` is the generator's return value.

    A commit yields its question first (unless ``request.yes``), with the rows the dry run
    found; it goes on once resumed (closed instead: nothing written). The dry run with
    ``save_plan`` writes the reviewed rows as they are drained. A dry run read on a standby
    (``standing``) widens the filter by its lag (``standby.widen``: a lease that expired
    within the lag may be live on the primary), unless ``request.trust_replica``.
    """
    request.expired.check(s.table.mapping)  # --kind on a table that maps none: exit 2
    optional = s.table.mapping.mapped_optional
    if not request.commit:
        from jobctl.ops import standby

        widened = standby.widen(request.expired, standing, trust=request.trust_replica)
        request = dataclasses.replace(request, expired=widened)
    if request.expired.ids:  # as typed: converted (and checked) by the database
        request = dataclasses.replace(
            request,
            expired=dataclasses.replace(request.expired, ids=s.job_ids(request.expired.ids)),
        )
    if not request.commit:  # streamed: a million expired rows are never held at once
        batches = streamed_dry_run(s, request.expired, request.limit, request.save_plan)
        # the statement runs now, its first chunk read: a failure of its own (a column the
        # table lacks, a privilege) is start's, as for the whole list, not a later batch's
        return Run(_started(batches), None, optional=optional)
    if request.plan is not None:
        planned = load_plan(request.plan, s.origin())
        if not request.yes:
            yield Asked(Question(len(planned), plan=request.plan))
        return Run(committed(s, request, planned), len(planned), optional=optional)
    if request.yes:  # no question: what is expired when each batch runs
        return Run(committed(s, request, None), None, optional=optional)
    # what the person confirms is what is written: the preview's rows are the commit's plan,
    # each fenced on its token, lease expiry and action as shown (an implicit plan); a lease
    # that expires while the question is up is left, and said
    preview_rows = sample(s, request.expired, request.limit, hold=CONFIRMED_ROWS)
    total = preview_rows.total
    if preview_rows.held is None:
        raise errors.UsageError(
            f"{total} expired job(s): more than one question holds ({CONFIRMED_ROWS}); nothing "
            "changed: narrow it (--limit, --kind, --worker), review a plan (reclaim --dry-run "
            "--save-plan FILE, then --plan FILE --commit), or reclaim with --yes (what is "
            "expired when it runs)"
        )
    yield Asked(Question(total, preview_rows.actions["requeue"]), preview_rows)
    held = cast(list[Row], preview_rows.held)
    batches = commit_plan(s, held, batch_size=request.batch_size, how=request.expired)

    def after() -> int:
        return expired_since(s, request.expired, preview_rows.read_at)

    return Run(batches, total, optional, after)


def expired_since(s: Session, which: ExpiredFilter, previewed_at: Any) -> int:
    """After a confirmed commit: the leases that expired after its preview (read at
    ``previewed_at``, the database's time), which it left unconfirmed. (Every lease the
    preview saw expired had run out before that time.)"""
    with s.transaction(read_only=True):
        left = s.one("expired_after", {**which.params(), "since": previewed_at})
    return int(left["expired"])


PREVIEW_ROWS = 20  # the rows a commit's question shows (terminal.TABLE_ROWS)
# the rows a confirmed commit holds as its plan, at most (about 2 KB each): beyond, the
# question is refused with the ways to narrow it, review a plan, or not ask (--yes)
CONFIRMED_ROWS = 50_000


class Sample(list[ReclaimRow]):
    """The first PREVIEW_ROWS rows of a dry run, with counts of every row (``total``, by
    ``actions`` and by ``workers``): what a commit's question shows. ``held``: every row, for
    the commit to apply exactly those (None: more than ``sample``'s ``hold``, or not asked)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.actions: collections.Counter[str] = collections.Counter()
        self.workers: collections.Counter[Any] = collections.Counter()
        self.held: list[ReclaimRow] | None = None
        self.read_at: Any = None  # the database's time of the preview's transaction


def sample(s: Session, which: ExpiredFilter, limit: int | None, *, hold: int = 0) -> Sample:
    """The dry run, streamed, as a commit's question shows it (``Sample``); with ``hold``, up
    to that many rows kept whole (``held``), the rest only counted."""
    found = Sample()
    held: list[ReclaimRow] = []
    with s.transaction(read_only=True):
        found.read_at = s.one("now")["at"]
        for row in preview(s, which, limit):
            found.total += 1
            found.actions[row["action"]] += 1
            found.workers[row["reserved_by"]] += 1
            if len(found) < PREVIEW_ROWS:
                found.append(row)
            if found.total <= hold:
                held.append(row)
    if hold and found.total <= hold:
        found.held = held
    return found


def _started(batches: Iterator[list[ReclaimRow]]) -> Iterator[list[ReclaimRow]]:
    """``batches`` with its first one read now (its statement run); closing or throwing into
    what it returns reaches ``batches`` (a plan being written is then dropped)."""
    first = next(batches, None)

    def rest() -> Iterator[list[ReclaimRow]]:
        if first is not None:
            yield first
        yield from batches

    return rest()

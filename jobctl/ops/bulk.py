"""``requeue`` / ``fail`` on a filter instead of ids: the jobs a slice matches (by
kind, queue, error, status, worker, age), listed with their count and decided by the rules of
a direct command; then saved as a review plan (applied by ``--plan``, each row fenced on the
row as listed) or, with ``--yes``, written by ``by_hand``: exactly the rows listed, each
fenced as read, so a row that changed since it was listed is a conflict (exit 3) and nothing
is written for it. Example::

    which = BulkFilter(Slice(kinds=("send_email",)), statuses=("failed",))
    listed = bulk.candidates(s, "requeue", which, force=False)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

from jobctl import errors
from jobctl.contract.shapes import Row
from jobctl.db.session import Session
from jobctl.ops import manual, repeated_ids, triage
from jobctl.ops.slices import EVERY, Slice

BULK_LIMIT = 10_000  # rows listed (and written) at most unless --limit says otherwise
STATUSES = ("queued", "processing", "failed", "parked")  # --status: the design's names
DEFAULT_STATUSES = ("failed", "parked")  # the jobs left for a human, unless --status
RUNNING = ("processing",)  # what cancel takes back, unless --status


@dataclasses.dataclass(frozen=True)
class BulkFilter:
    """Which jobs a bulk requeue/fail acts on. Values are always query parameters."""

    what: Slice = EVERY
    statuses: Sequence[str] = ()  # the design's names (STATUSES); none: DEFAULT_STATUSES
    worker: str | None = None  # the worker holding it (a processing job's reserved_by)
    older_than: dt.timedelta | None = None  # last changed (updated_at) longer ago than this
    limit: int = BULK_LIMIT
    no_lease: bool = False  # processing with no lease (claimed by code that sets none)

    def __bool__(self) -> bool:
        return bool(self.what or self.statuses or self.worker or self.older_than or self.no_lease)

    def check(self) -> None:
        """The rules of its options (UsageError, exit 2): --status a design's name, and
        --no-lease only with processing."""
        for status in self.statuses:
            if status not in STATUSES:
                raise errors.UsageError(f"--status {status!r}: give one of {', '.join(STATUSES)}")
        if self.no_lease and self.statuses and "processing" not in self.statuses:
            raise errors.UsageError("--no-lease: jobs with no lease are processing ones")

    def params(self, s: Session) -> dict[str, Any]:
        mapping = s.table.mapping
        self.check()
        default = ("processing",) if self.no_lease else DEFAULT_STATUSES
        values = [
            mapping.parked if d == "parked" else mapping.status(d)
            for d in (self.statuses or default)
        ]
        return {
            "statuses": sorted(set(values)),
            "worker": self.worker,
            "older_than": self.older_than,
            "limit": self.limit,
            "no_lease": self.no_lease,
            "cut": triage.DISPLAY_CHARS,  # texts as stuck shows them (fence_columns)
            **self.what.params(),
        }


@dataclasses.dataclass
class Listed:
    """The jobs a filter matched: those the action may go ahead on, and those the rules
    refuse (a live lease without --force, a job already queued for a requeue ...)."""

    eligible: list[manual.Decision]
    refused: list[manual.Decision]
    limit: int
    # an id two rows hold: left out, each named in one line (exit 1)
    left_out: list[str] = dataclasses.field(default_factory=list)

    @property
    def rows(self) -> list[Row]:
        return [d.seen for d in self.eligible if d.seen is not None]

    @property
    def at_limit(self) -> bool:
        return len(self.eligible) + len(self.refused) >= self.limit


def candidates(s: Session, action: manual.Action, which: BulkFilter, *, force: bool) -> Listed:
    """The jobs ``which`` matches, read in one read-only transaction (each with its fence, as
    ``manual_read`` reads one) and decided by the rules of a direct command (``refusal``)."""
    which.what.check(s.table.mapping)
    if action == "cancel" and not which.statuses:
        which = dataclasses.replace(which, statuses=RUNNING)
    params = which.params(s)
    told = repeated_ids.LeftOut()
    with s.transaction(read_only=True):
        found = [row for row in s.rows("bulk_candidates", params) if not told.took(row)]
        left_out = told.lines(s)
    eligible: list[manual.Decision] = []
    refused: list[manual.Decision] = []
    for row in found:
        decision = manual.Decision(row["id"], row)
        decision.outcome, decision.detail = manual.refusal(
            row, action, force=force, expect_token=None, mapping=s.table.mapping
        )
        for judged in ("lease_less_recent", "claimed_age_s"):  # decided on, not listed
            row.pop(judged, None)
        (eligible if decision.outcome is None else refused).append(decision)
    return Listed(eligible, refused, which.limit, left_out)

"""What the operator asks of ``jobctl reclaim`` (``Request``), and the rules between its
options, checked as it is made (and remade), before anything is read."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

from jobctl import errors
from jobctl.ops.triage import ExpiredFilter

MIN_BATCH, MAX_BATCH = 1, 10_000


@dataclasses.dataclass(frozen=True)
class Request:
    """What the operator asked of ``jobctl reclaim``, checked as it is made (and remade)."""

    commit: bool = False
    batch_size: int = 50
    limit: int | None = None
    expired: ExpiredFilter = dataclasses.field(default_factory=ExpiredFilter)
    save_plan: Path | None = None
    plan: Path | None = None
    every: dt.timedelta | None = None
    yes: bool = False
    # the rows a commit returns whole, the first ones (None: every row, as the machine
    # formats print them); past them each comes back with its id and action alone (a table
    # shows the first rows and counts the rest: the lease's columns need not cross the wire)
    whole: int | None = None
    # a standby's rows taken as the primary's, lag or not (--trust-replica)
    trust_replica: bool = False

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The rules between options: UsageError (exit 2) before anything is read."""
        if not MIN_BATCH <= self.batch_size <= MAX_BATCH:
            raise errors.UsageError(
                f"--batch-size must be between {MIN_BATCH} and {MAX_BATCH}, not {self.batch_size}"
            )
        if self.every is not None and not (self.commit and self.yes):
            raise errors.UsageError("--every runs the reclaimer service: it needs --commit --yes")
        if self.plan is not None and not self.commit:
            raise errors.UsageError("--plan applies a saved plan: it needs --commit")
        if self.save_plan is not None and self.commit:
            raise errors.UsageError("--save-plan saves a dry run: it cannot go with --commit")
        narrowed = (
            dataclasses.replace(
                self.expired, spread=dt.timedelta(0), refund_attempt=False, park_older_than=None
            )
            != ExpiredFilter()
        )
        if self.plan is not None and (narrowed or self.every):
            raise errors.UsageError("--plan applies exactly the plan's rows: no filters with it")

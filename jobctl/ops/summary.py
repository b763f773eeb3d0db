"""``jobctl summary``'s workflow, the one the command calls whatever the number of targets: on
one database its counts (by status, or ``--by`` a group) and whether the reclaimer is silent;
on each of several targets its counts by the part each status plays (``by_role``), so that
targets with their own status values add up (``rows``: a row each and the total). Example::

    outcomes = run(settings, Access("summary"), Ask(dt.timedelta(seconds=30)), say=print)
    counts = outcomes[0].value.result
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobctl import errors
from jobctl.ops import fleet
from jobctl.ops.slices import EVERY, Slice

if TYPE_CHECKING:
    from jobctl.contract.shapes import Row
    from jobctl.db.session import Session
    from jobctl.ops.sessions import Access
    from jobctl.ops.standby import Standing
    from jobctl.table.mapping import TableMapping


@dataclasses.dataclass(frozen=True)
class Ask:
    """What the operator asked of ``summary``."""

    expiring_within: dt.timedelta | None
    exact: bool = False
    what: Slice = EVERY  # --kind, --queue, --error (one database only)
    by: str | None = None  # --by a group (one database only)
    full: bool = False  # --full: workers' names (and --by's groups) whole, not cut


@dataclasses.dataclass(frozen=True)
class Counted:
    """A target's summary (``triage.summary``, or ``summary_by`` with ``by``; across targets
    counted by role) and, on one database read once, the reclaimer's silence in one line."""

    result: Row
    silent: str | None = None


def run(
    where: fleet.Where,
    access: Access,
    ask: Ask,
    *,
    say: fleet.Say,
    watching: fleet.Watching[Counted] | None = None,
) -> list[fleet.Outcome[Counted]]:
    """``summary`` on one database or on every target at once, each target's outcome in the
    targets' order (one database's failure raised); ``watching``: refreshed until its count
    or Ctrl-C, the last refresh's outcomes. ``--by`` and a slice are for one database."""
    several = fleet.several(where)
    if several and (ask.what or ask.by):
        raise errors.UsageError("summary --by/--kind/--queue/--error: give one --target (or none)")

    def work(s: Session, _st: Standing, _say: fleet.Say) -> Counted:
        from jobctl.ops import metrics, triage

        if several:
            counted = triage.summary(s, ask.expiring_within, exact=ask.exact, full=ask.full)
            return Counted(by_role(counted, s.table.mapping))
        if ask.by is not None:
            shown = triage.cut(ask.full)
            found = triage.summary_by(s, ask.by, ask.expiring_within, what=ask.what, shown=shown)
        else:
            found = triage.summary(
                s, ask.expiring_within, exact=ask.exact, what=ask.what, full=ask.full
            )
        if watching is not None:
            return Counted(found)
        return Counted(found, metrics.reclaimer_silent(metrics.reclaimer(s)))

    if watching is not None:
        return fleet.refreshed(where, access, work, watching, say=say)
    return fleet.once(where, access, work, say=say)


# ---------------------------------------------------------------- across targets
COUNTED = ("live", "expiring_soon", "expired", "no_lease")


def by_role(summary: Row, mapping: TableMapping) -> Row:
    """A target's summary with its statuses counted by the part they play in the lease
    design (queued, processing ...), so that targets with their own values add up."""
    counted: collections.Counter[str] = collections.Counter()
    for value, jobs in summary["status"].items():
        counted[mapping.role(value) or value] += jobs
    return {**summary, "status": dict(counted)}


def rows(summaries: Sequence[tuple[str, Row]]) -> list[Row]:
    """``summary`` across targets: a row per target (its counts by status, its processing
    by lease, what waits) and a last row, ``target`` "total", summing them."""
    statuses: list[str] = []
    for _, result in summaries:
        statuses += [s for s in result["status"] if s not in statuses]
    found = []
    for name, result in summaries:
        row: Row = {"target": name, "table": result["table"]}
        row |= {status: result["status"].get(status, 0) for status in statuses}
        row |= {key: result["processing"].get(key, 0) for key in COUNTED}
        row |= {
            "ready": result["ready"],
            "oldest_ready_s": result["oldest_ready_s"],
            "awaiting_review": result["awaiting_review"],
            "estimated": ",".join(result["estimated"]),
        }
        found.append(row)
    total: Row = collections.defaultdict(int)
    total |= {"target": "total", "table": None}
    for row in found:
        for key in (*statuses, *COUNTED, "ready", "awaiting_review"):
            total[key] += row[key] or 0
    waits = [r["oldest_ready_s"] for r in found if r["oldest_ready_s"] is not None]
    total["oldest_ready_s"] = max(waits, default=None)
    estimated = {e for r in found for e in r["estimated"].split(",") if e}
    total["estimated"] = ",".join(sorted(estimated))
    return [*found, dict(total)]

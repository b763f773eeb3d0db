"""What a reclaim did (or, a dry run, would do), counted as its batches pass (``Tally``): how
many rows had each outcome (requeue, fail, skipped), and the rows its table shows, the first
ones and then the skipped ones (what was not done). The people's layer prints the batches as
they come and the table at the end; the counting is here. Example::

    tally = Tally(shown=20)
    for batch in tally.counted(batches):
        print_batch(batch)
    tally.counts["requeue"], tally.total, tally.kept
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from jobctl.contract.shapes import ReclaimRow
from jobctl.ops import fleet
from jobctl.ops.reclaim.row_errors import SKIPPED_AS

if TYPE_CHECKING:
    from jobctl.table.mapping import TableMapping

# what the reclaim statement returns of what it wrote (sql/queries.sql's reclaim_written),
# beside the row it read: judged here (``as_written``), never shown
WRITTEN = (
    "written_row",
    "written_status",
    "written_token_cleared",
    "written_reclaim_count",
    "read_reclaim_count",
)
KEPT_BACK = f"{SKIPPED_AS}: an application trigger kept it back (not written)"
CHANGED = f"{SKIPPED_AS}: an application trigger changed it"


class Tally:
    """The counts of reclaim rows by outcome (``counts``: requeue, fail, skipped) and, with
    ``shown``, the rows a table shows of them (``kept``): the first ``shown`` rows, then up to
    ``shown`` skipped ones; the rest only counted, so memory stays flat however many come.
    ``shown`` is ``Request.whole``: the rows a commit returns whole are the ones a table shows
    (None: a machine format, which prints every row as it comes, keeps none)."""

    def __init__(self, shown: int | None = None) -> None:
        self.shown = shown
        self.counts: collections.Counter[str] = collections.Counter()
        self.kept: list[ReclaimRow] = []

    @classmethod
    def of(cls, rows: list[ReclaimRow], shown: int | None = None) -> Tally:
        """The tally of ``rows`` read at once (one batch, a target's dry run)."""
        tally = cls(shown)
        tally.add(rows)
        return tally

    @classmethod
    def across(cls, tallies: Mapping[str, Tally]) -> Tally:
        """Several targets' tallies as one: their counts summed, and the rows each keeps for
        a table, with its target first, target after target."""
        joined = cls()
        for name, tally in tallies.items():
            joined.counts += tally.counts
            joined.kept += cast(list[ReclaimRow], list(fleet.tagged(name, tally.kept)))
        return joined

    @property
    def total(self) -> int:
        """How many rows were counted."""
        return sum(self.counts.values())

    def add(self, batch: list[ReclaimRow]) -> None:
        """A batch counted, and the rows of it a table shows kept."""
        seen = self.total
        self.counts += collections.Counter(
            "skipped" if r["skipped"] else r["action"] for r in batch
        )
        if self.shown is not None:
            skipped_kept = sum(r["skipped"] is not None for r in self.kept)
            self.kept.extend(_table_rows(batch, seen, skipped_kept, self.shown))

    def counted(self, batches: Iterable[list[ReclaimRow]]) -> Iterator[list[ReclaimRow]]:
        """``batches`` as they come, each counted (``add``) before it is handed on."""
        for batch in batches:
            self.add(batch)
            yield batch


def _table_rows(
    batch: list[ReclaimRow], seen: int, skipped_kept: int, shown: int
) -> list[ReclaimRow]:
    """The rows of ``batch`` a reclaim's table shows, after ``seen`` rows of which it kept
    ``skipped_kept`` skipped ones: the first ``shown``, then up to ``shown`` skipped."""
    first = batch[: max(shown - seen, 0)]
    room = shown - skipped_kept - sum(r["skipped"] is not None for r in first)
    later = [r for r in batch[len(first) :] if r["skipped"] is not None][: max(room, 0)]
    return first + later


def as_written(row: dict[str, Any], mapping: TableMapping) -> ReclaimRow:
    """A row the reclaim statement locked, judged by what its UPDATE wrote (``WRITTEN``, taken
    out of the row): applied when it wrote what it meant to (the status its action decided,
    the attempt token cleared, reclaim_count one more than it read); else skipped, saying
    why: a row an application's BEFORE trigger kept back (RETURN NULL: not written), or one
    such a trigger changed back (``status still processing``). Example::

        as_written({"id": 7, "action": "requeue", "written_row": True, "written_status":
                    "queued", "written_token_cleared": True, "written_reclaim_count": 1,
                    "read_reclaim_count": 0}, mapping)["applied"]  # True
    """
    written = {key: row.pop(key, None) for key in WRITTEN}
    skipped = None
    if not written["written_row"]:
        skipped = KEPT_BACK
    else:
        meant = mapping.status("queued") if row["action"] == "requeue" else mapping.parked
        changed = []
        if written["written_status"] != meant:
            still = written["written_status"] == mapping.status("processing")
            changed.append(
                f"status still {written['written_status']}"
                if still
                else f"status {written['written_status']}, not {meant}"
            )
        if not written["written_token_cleared"]:
            changed.append("attempt token not cleared")
        read_count = written["read_reclaim_count"]
        if read_count is not None and written["written_reclaim_count"] != read_count + 1:
            changed.append(
                f"reclaim_count {written['written_reclaim_count']}, not {read_count + 1}"
            )
        if changed:
            skipped = f"{CHANGED} ({', '.join(changed)})"
    row["applied"], row["skipped"] = skipped is None, skipped
    return cast(ReclaimRow, row)

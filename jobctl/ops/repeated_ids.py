"""Ids that more than one row holds (a partitioned table keyed on the id and its partition
key: the same id in two partitions). jobctl names a job by its id alone (fences, plans, the
history), so every statement that selects jobs flags or leaves out such a row
(sql/queries.sql's ``id_repeated``: one probe of the id's index per row it selected); the
workflows leave it out and name it here, once, in one line, and serve every other job.
Example::

    left = LeftOut()
    rows = [row for row in s.rows("bulk_candidates", params) if not left.took(row)]
    for line in left.lines(s):  # "job id 1 is held by 2 rows (partitions ...): left out; ..."
        say(line)
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobctl.contract.shapes import Row
    from jobctl.db.session import Session

FLAG = "id_repeated"  # the column of the statements that flag such a row
WHY = "jobctl names a job by its id — see docs/your-table.md"


@dataclasses.dataclass
class LeftOut:
    """The ids of the rows a command left out because another row holds their id, once
    each, in the order met."""

    ids: list[Any] = dataclasses.field(default_factory=list)

    def took(self, row: Row, flag: str = FLAG) -> bool:
        """Whether ``row`` is left out (its ``flag`` column, taken out of the row, is true);
        its id kept to be named."""
        if not row.pop(flag, False):
            return False
        self.add(row["id"])
        return True

    def add(self, job_id: Any) -> None:
        if job_id not in self.ids:
            self.ids.append(job_id)

    def __bool__(self) -> bool:
        return bool(self.ids)

    def found(self, s: Session) -> list[tuple[Any, Row | None]]:
        """Each id left out with ``repeated_ids``' row of it (how many rows hold it and where,
        read now by the id's index, in the caller's transaction; None when it no longer
        repeats); none when none was."""
        if not self.ids:
            return []
        found = {r["id"]: r for r in s.rows("repeated_ids", {"ids": [str(i) for i in self.ids]})}
        return [(i, found.get(str(i))) for i in self.ids]

    def lines(self, s: Session, done: str = "left out") -> list[str]:
        """One line per id left out (``done``: what became of it); none when none was."""
        return [line(str(i), row, done) for i, row in self.found(s)]


def line(job_id: str, found: Row | None, done: str = "left out") -> str:
    """The line naming an id left out (``found``: ``repeated_ids``'s row of it; None when
    it no longer repeats since the command read it)."""
    if found is None:
        return f"job id {job_id} was held by more than one row: {done}; {WHY}"
    return (
        f"job id {job_id} is held by {found['rows']} rows (partitions {found['partitions']}): "
        f"{done}; {WHY}"
    )


def refusal(s: Session, job_id: Any) -> str:
    """The one line refusing a single id's command (``show ID``, ``requeue ID``) on an id
    another row holds too."""
    (said,) = LeftOut([job_id]).lines(s, "refused")
    return said

"""``jobctl summary`` across targets: each target's counts by the part each status plays
(``by_role``), so that targets with their own status values add up, and a row each with the
total (``rows``). Example::

    found = rows([("orders", by_role(counts, mapping)), ...])   # the last row: the total
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobctl.render.rows import Row
    from jobctl.table.mapping import TableMapping


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

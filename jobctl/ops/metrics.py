"""jobctl metrics: lease health's figures, and the alert thresholds they break
(``render.openmetrics`` writes them as OpenMetrics text)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from jobctl.db.session import Session
from jobctl.ops.slices import Slice
from jobctl.render.rows import Row

if TYPE_CHECKING:
    from jobctl.ops.replica import Standing


def collect(s: Session, *, expiring_within: dt.timedelta, reclaim_window: dt.timedelta) -> Row:
    """The figures: stuck jobs by policy, oldest expired lease, live/expiring, reclaims, review."""
    return (
        s.one("metrics_leases", {"soon": expiring_within})
        | s.one("metrics_reclaims", {"window": reclaim_window, "job_table": s.table.qualified})
        | s.one("metrics_manual_review")
        | s.one("review_count", Slice().params())
        | s.one("queue_ready", Slice().params())
        | {
            "expiring_within_s": expiring_within.total_seconds(),
            "reclaim_window_s": reclaim_window.total_seconds(),
        }
    )


def on_server(
    s: Session,
    standing: Standing | None,
    *,
    expiring_within: dt.timedelta,
    reclaim_window: dt.timedelta,
) -> Row:
    """The figures of one database, with the server's (a standby's lag): what ``metrics``
    exposes for one database and for each target; the caller holds the transaction."""
    from jobctl.ops import replica

    figures = collect(s, expiring_within=expiring_within, reclaim_window=reclaim_window)
    return figures | replica.figures(standing)


def breaches(figures: Row, *, max_stuck: int | None, max_overdue: dt.timedelta | None) -> list[str]:
    """Which thresholds the figures break, each as one line."""
    found = []
    stuck = figures["stuck_auto"] + figures["stuck_manual"]
    if max_stuck is not None and stuck > max_stuck:
        found.append(f"{stuck} stuck jobs > --max-stuck {max_stuck}")
    if max_overdue is not None and figures["oldest_expired_s"] > max_overdue.total_seconds():
        found.append(
            f"oldest expired lease {figures['oldest_expired_s']:.0f}s > --max-overdue "
            f"{max_overdue.total_seconds():g}s"
        )
    return found

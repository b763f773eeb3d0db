"""``--watch``: run a read again and again, each time in its own read-only transaction."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import TypeVar

from jobctl.db.session import Session

T = TypeVar("T")


def watch(
    s: Session,
    produce: Callable[[], T],
    show: Callable[[dt.datetime, T], None],
    *,
    every: dt.timedelta,
    count: int | None = None,
) -> None:
    """Call ``produce`` every ``every`` and hand its result to ``show`` with the database's
    time; stop after ``count`` refreshes, or at Ctrl-C (which is not an error)."""

    def refresh() -> tuple[dt.datetime, T]:
        with s.transaction(read_only=True):
            result = produce()
            at = s.one("now")["at"]
        return at, result

    repeat(refresh, show, every=every, count=count)


def repeat(
    refresh: Callable[[], tuple[dt.datetime, T]],
    show: Callable[[dt.datetime, T], None],
    *,
    every: dt.timedelta,
    count: int | None = None,
) -> None:
    """Show what ``refresh`` gives (a time and a result) every ``every``; stop after
    ``count`` refreshes, or at Ctrl-C (not an error)."""
    refreshes = 0
    try:
        while True:
            show(*refresh())
            refreshes += 1
            if count is not None and refreshes >= count:
                return
            time.sleep(every.total_seconds())
    except KeyboardInterrupt:
        return

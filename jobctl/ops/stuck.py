"""``jobctl stuck``'s read, the same on one database and on each of several targets: the
operator's filter widened by a standby's lag (a lease that expired within the lag may be
live on the primary, unless ``trust_replica``), the live leases about to run out with
``expiring_within``, and the line saying how many leases the lag held back. Example::

    ask = Ask(ExpiredFilter(worker="web-3"), limit=1000)
    with s.transaction(read_only=True):
        found = list(rows(s, standing, ask))
        line = held_back(s, standing, ask)   # None: nothing to say
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from typing import TYPE_CHECKING

from jobctl.ops import replica, triage

if TYPE_CHECKING:
    from jobctl.db.session import Session
    from jobctl.ops.replica import Standing
    from jobctl.render.rows import LeaseRow


@dataclasses.dataclass(frozen=True)
class Ask:
    """What the operator asked of ``stuck``."""

    which: triage.ExpiredFilter
    limit: int
    expiring_within: dt.timedelta | None = None  # also the live leases expiring this soon
    trust_replica: bool = False  # a standby's rows taken as the primary's, lag or not

    def on(self, standing: Standing | None) -> triage.ExpiredFilter:
        """The filter as it runs on the server ``standing`` says the session is on."""
        return replica.widen(self.which, standing, trust=self.trust_replica)


def rows(s: Session, standing: Standing | None, ask: Ask) -> Iterator[LeaseRow]:
    """The stuck jobs (with ``expiring_within``: and those at risk), streamed; the caller
    holds the read-only transaction."""
    which = ask.on(standing)
    if ask.expiring_within is None:
        return triage.stuck(s, which, ask.limit)
    return triage.at_risk(s, which, ask.expiring_within, ask.limit)


def held_back(s: Session, standing: Standing | None, ask: Ask) -> str | None:
    """After ``rows``, in the same transaction: how many leases the operator's filter calls
    expired that a standby's lag keeps from being called so, in one line (None: none, or
    nothing was widened)."""
    if ask.expiring_within is not None or ask.on(standing) is ask.which:
        return None
    return replica.held_back(replica.held_back_count(s, ask.which, standing), standing)

"""``jobctl stuck``: its workflow (``run``), the one the command calls whatever the number of
targets, and its read, the same on one database and on each of several targets: the
operator's filter widened by a standby's lag (a lease that expired within the lag may be
live on the primary, unless ``trust_replica``), the live leases about to run out with
``expiring_within``, and how many leases the lag held back. It returns data (``Found``);
``render`` words what the command says under its rows (``views.no_lease_line``,
``pause_views.lines``). Example::

    ask = Ask(ExpiredFilter(worker="web-3"), limit=1000)
    with s.transaction(read_only=True):
        found = list(rows(s, standing, ask))
        hidden = held_back(s, standing, ask)   # 0: nothing to say
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from jobctl.ops import fleet, pause, repeated_ids, standby, triage

if TYPE_CHECKING:
    from jobctl.contract.shapes import LeaseRow, Row
    from jobctl.db.session import Session
    from jobctl.ops.sessions import Access
    from jobctl.ops.standby import Standing


@dataclasses.dataclass(frozen=True)
class Ask:
    """What the operator asked of ``stuck``."""

    which: triage.ExpiredFilter
    limit: int
    expiring_within: dt.timedelta | None = None  # also the live leases expiring this soon
    trust_replica: bool = False  # a standby's rows taken as the primary's, lag or not
    # also the live leases in the last third of their lease (stuck --expiring, top)
    by_lease: bool = False

    @property
    def at_risk(self) -> bool:
        """Whether the live leases about to run out are listed too."""
        return self.by_lease or self.expiring_within is not None

    def telling(self, left: repeated_ids.LeftOut) -> Ask:
        """This ask, its rows whose id another row holds too told to ``left``."""
        return dataclasses.replace(self, which=dataclasses.replace(self.which, left_out=left))

    def on(self, standing: Standing | None) -> triage.ExpiredFilter:
        """The filter as it runs on the server ``standing`` says the session is on."""
        return standby.widen(self.which, standing, trust=self.trust_replica)


def rows(s: Session, standing: Standing | None, ask: Ask) -> Iterator[LeaseRow]:
    """The stuck jobs (with ``expiring_within``: and those at risk), streamed; the caller
    holds the read-only transaction."""
    which = ask.on(standing)
    if not ask.at_risk:
        return triage.stuck(s, which, ask.limit)
    return triage.at_risk(s, which, ask.expiring_within, ask.limit)


def held_back(s: Session, standing: Standing | None, ask: Ask) -> int:
    """After ``rows``, in the same transaction: how many leases the operator's filter calls
    expired that a standby's lag keeps from being called so (0: none, or nothing was
    widened)."""
    if ask.at_risk or ask.on(standing) is ask.which:
        return 0
    return standby.held_back_count(s, ask.which, standing)


# ---------------------------------------------------------------- the workflow
@dataclasses.dataclass
class Found:
    """What ``stuck`` found on a target: how many rows; on one database the ready jobs
    waiting when none was (``ready_after``), its rows streamed to ``show``, none kept;
    across targets its rows, each with the target's name, kept to be shown together. And
    what the command says under them (``render`` words it): the leases a standby's lag held
    back, the jobs with no lease (one database), the table's pauses, the ids left out."""

    count: int
    rows: list[Row] = dataclasses.field(default_factory=list)
    waiting: Row | None = None
    total: int | None = None  # every row the filter matches, when a --limit cut the list
    standing: Standing | None = None  # the server the rows were read on
    held_back: int = 0  # leases expired within a standby's lag: not listed (standby.held_back)
    no_lease: int = 0  # processing jobs with no lease the filter matches, all of them
    no_lease_listed: int = 0  # of them, those among the rows (fewer when --limit cut)
    expired_listed: int = 0  # the rows whose lease expired: what reclaim acts on
    paused: list[Row] = dataclasses.field(default_factory=list)  # ops.pause.waiting's rows
    # ids another row holds too, left out (exit 1), each with repeated_ids' row of it
    left_out: list[tuple[Any, Row | None]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Stream:
    """One database's rows as they come (``show`` renders them in the read's transaction):
    the table's mapped optional columns, the server the session is on."""

    rows: Iterator[LeaseRow]
    optional: Sequence[str]
    standing: Standing | None


def shown_optional(s: Session) -> tuple[str, ...]:
    """The optional keys stuck's rows carry on this table: kind and queue where mapped, then
    the job's priority where the table keeps one."""
    mapping = s.table.mapping
    return (*mapping.mapped_optional, *(("priority",) if mapping.priority else ()))


def run(
    where: fleet.Where,
    access: Access,
    ask: Ask,
    *,
    say: fleet.Say,
    show: Callable[[Stream], None],
    ready_after: dt.timedelta,
    watching: fleet.Watching[Found] | None = None,
    seen: Callable[[list[Row]], None] = lambda _rows: None,
    paused: Callable[[list[Row]], None] | None = None,
) -> list[fleet.Outcome[Found]]:
    """``stuck`` on one database or on every target at once (``fleet``), each target's
    outcome in the targets' order (one database's failure raised). One database streams its
    rows to ``show``; each of several keeps its rows with its name, a standby's marked; each
    ``Found`` holds what the command says under them (the leases its standby held back, the
    jobs with no lease, its pauses, the ids left out, the ready jobs waiting when nothing is
    stuck). ``watching``: refreshed until its count or Ctrl-C, each refresh's rows told to
    ``seen`` on one database (its notifications), and the table's pauses
    (``ops.pause.waiting``) to ``paused``; the last refresh's outcomes."""
    several = fleet.several(where)

    def work(s: Session, st: Standing, _said: fleet.Say) -> Found:
        if several:
            return _kept(s, st, ask)
        if watching is not None:
            found: list[Any] = list(rows(s, st, ask))
            seen(found)
            if paused is not None:
                paused(pause.waiting(s))
            return Found(len(found), found)
        return _streamed(s, st, ask, show, ready_after)

    if watching is not None:
        return fleet.refreshed(where, access, work, watching, say=say)
    return fleet.once(where, access, work, say=say)


def _streamed(
    s: Session,
    st: Standing,
    ask: Ask,
    show: Callable[[Stream], None],
    ready_after: dt.timedelta,
) -> Found:
    """One database's rows shown as they are read, then what it says under them (the jobs
    with no lease, the kinds and queues paused among them); the ready jobs waiting when none
    was found ("my job is stuck" often means nobody claims it)."""
    found = no_lease = expired = 0
    left = repeated_ids.LeftOut()
    ask = ask.telling(left)

    def counted() -> Iterator[LeaseRow]:
        nonlocal found, no_lease, expired
        for row in rows(s, st, ask):
            found += 1
            no_lease += row.get("lease_state") == "none"
            expired += row.get("lease_state") == "expired"
            yield row

    show(Stream(counted(), shown_optional(s), st))
    result = Found(
        found,
        standing=st,
        held_back=held_back(s, st, ask),
        no_lease=no_lease,
        no_lease_listed=no_lease,
        expired_listed=expired,
    )
    if not ask.at_risk and found >= ask.limit:  # the limit cut: count them all
        expired, result.no_lease = triage.stuck_count(s, ask.on(st))
        result.total = expired + result.no_lease if expired + result.no_lease > found else None
    result.paused = pause.waiting(s)  # a paused kind's jobs wait: said, not hidden
    result.left_out = left.found(s)  # an id two rows hold: neither listed, named once
    result.waiting = None if found else triage.ready_waiting(s, ready_after)
    return result


def _kept(s: Session, st: Standing, ask: Ask) -> Found:
    """One of several targets' rows, kept with its name (a standby's marked as such: its
    ``replica`` field), and what it says under them (its standby's held leases, its pauses,
    the ids left out)."""
    left = repeated_ids.LeftOut()
    found: list[Any] = list(rows(s, st, ask.telling(left)))
    marked = [{**row, "replica": st.info()} for row in found] if st.standby else found
    no_lease = sum(row.get("lease_state") == "none" for row in found)
    expired = sum(row.get("lease_state") == "expired" for row in found)
    return Found(
        len(found),
        list(fleet.tagged(s.settings.target or "", marked)),
        standing=st,
        held_back=held_back(s, st, ask),
        paused=pause.waiting(s),
        left_out=left.found(s),
        no_lease=no_lease,
        no_lease_listed=no_lease,
        expired_listed=expired,
    )

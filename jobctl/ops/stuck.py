"""``jobctl stuck``: its workflow (``run``), the one the command calls whatever the number of
targets, and its read, the same on one database and on each of several targets: the
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


def held_back(s: Session, standing: Standing | None, ask: Ask) -> str | None:
    """After ``rows``, in the same transaction: how many leases the operator's filter calls
    expired that a standby's lag keeps from being called so, in one line (None: none, or
    nothing was widened)."""
    if ask.at_risk or ask.on(standing) is ask.which:
        return None
    return standby.held_back(standby.held_back_count(s, ask.which, standing), standing)


# ---------------------------------------------------------------- the workflow
@dataclasses.dataclass
class Found:
    """What ``stuck`` found on a target: how many rows; on one database the ready jobs
    waiting when none was (``ready_after``), its rows streamed to ``show``, none kept;
    across targets its rows, each with the target's name, kept to be shown together."""

    count: int
    rows: list[Row] = dataclasses.field(default_factory=list)
    waiting: Row | None = None
    total: int | None = None  # every row the filter matches, when a --limit cut the list
    left_out: int = 0  # ids another row holds too, left out and named (exit 1)


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
    rows to ``show`` and says the leases its standby held back, the jobs with no lease, and
    (``Found.waiting``) the ready jobs waiting when nothing is stuck; each of several keeps its
    rows with its name, a standby's marked, and says what its standby held back. ``watching``:
    refreshed until its count or Ctrl-C, each refresh's rows told to ``seen`` on one database
    (its notifications), and the table's pauses (``ops.pause.waiting``) to ``paused``; the
    last refresh's outcomes."""
    several = fleet.several(where)

    def work(s: Session, st: Standing, said: fleet.Say) -> Found:
        if several:
            return _kept(s, st, ask, said)
        if watching is not None:
            found: list[Any] = list(rows(s, st, ask))
            seen(found)
            if paused is not None:
                paused(pause.waiting(s))
            return Found(len(found), found)
        return _streamed(s, st, ask, said, show, ready_after)

    if watching is not None:
        return fleet.refreshed(where, access, work, watching, say=say)
    return fleet.once(where, access, work, say=say)


def _streamed(
    s: Session,
    st: Standing,
    ask: Ask,
    say: fleet.Say,
    show: Callable[[Stream], None],
    ready_after: dt.timedelta,
) -> Found:
    """One database's rows shown as they are read, then its lines (the kinds and queues
    paused among them); the ready jobs waiting when none was found ("my job is stuck" often
    means nobody claims it)."""
    from jobctl.render import pause_views, views

    found = no_lease = 0
    left = repeated_ids.LeftOut()
    ask = ask.telling(left)

    def counted() -> Iterator[LeaseRow]:
        nonlocal found, no_lease
        for row in rows(s, st, ask):
            found += 1
            no_lease += row.get("lease_state") == "none"
            yield row

    show(Stream(counted(), shown_optional(s), st))
    lines, total = [held_back(s, st, ask)], None
    if not ask.at_risk and found >= ask.limit:  # the limit cut: count them all
        expired, without = triage.stuck_count(s, ask.on(st))
        total = expired + without
        lines += [views.no_lease_line(without, shown=no_lease)]
    else:
        lines += [views.no_lease_line(no_lease)]
    lines += pause_views.lines(pause.waiting(s))  # a paused kind's jobs wait: said, not hidden
    lines += left.lines(s)  # an id two rows hold: neither listed, named once
    for line in lines:
        if line:
            say(line)
    waiting = None if found else triage.ready_waiting(s, ready_after)
    total = total if total and total > found else None
    return Found(found, waiting=waiting, total=total, left_out=len(left.ids))


def _kept(s: Session, st: Standing, ask: Ask, say: fleet.Say) -> Found:
    """One of several targets' rows, kept with its name (a standby's marked as such), and
    what it said (its standby's held leases, its pauses)."""
    from jobctl.render import output, pause_views

    left = repeated_ids.LeftOut()
    found: list[Any] = list(rows(s, st, ask.telling(left)))
    for line in [held_back(s, st, ask), *pause_views.lines(pause.waiting(s)), *left.lines(s)]:
        if line:
            say(line)
    marked = standby.mark(output.Document(found, []), st).payload
    tagged = list(fleet.tagged(s.settings.target or "", marked))
    return Found(len(found), tagged, left_out=len(left.ids))
